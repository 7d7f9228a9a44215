"""Bounces and complaints that relay services report by webhook: Postmark, Mailgun and SendGrid
(no I/O; the clock is passed in).

Each relay's request is verified first (``postmark_ok``, ``mailgun_ok``, ``sendgrid_ok``),
then each of its events becomes a ``RelayEvent``: a ``Finding`` as a bounce message gives one,
its words read by the same taxonomy (``reasons``), and an identity that is the same whenever
the relay sends the event again, so that a retry or a replay is recorded once.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from . import COMPLAINT, HARD, NOT_A_BOUNCE, PERMANENT, TEMPORARY, Failure, Finding, failure_of
from .reports import STATUS

MAILGUN_MAX_AGE = timedelta(minutes=15)
"""How far a Mailgun signature's timestamp may be from now (either way)."""


class PayloadError(ValueError):
    """A verified request whose body is not the relay's JSON."""


@dataclass(frozen=True, slots=True)
class RelayEvent:
    """One event of a relay's webhook, before it is matched to a delivery."""

    identity: bytes
    """The same for every copy of the event: its relay and the relay's id for it (else the
    event itself); the bounce reports' dedupe key is its hash."""
    finding: Finding


# -- verification ------------------------------------------------------------------------------


def postmark_ok(authorization: str, user: str, password: str) -> bool:
    """Whether an ``Authorization: Basic`` header carries ``user`` and ``password`` (each
    compared in constant time)."""
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    name, colon, secret = given.partition(b":")
    same_name = hmac.compare_digest(name, user.encode())
    same_secret = hmac.compare_digest(secret, password.encode())
    return bool(colon) and same_name and same_secret


def mailgun_ok(payload: Mapping[str, Any], signing_key: str, now: datetime) -> bool:
    """Whether a Mailgun webhook's ``signature`` is HMAC-SHA256 of its timestamp and token
    under ``signing_key``, and the timestamp is within ``MAILGUN_MAX_AGE`` of ``now``."""
    signature = payload.get("signature")
    if not isinstance(signature, Mapping):
        return False
    timestamp, token, given = (
        str(signature.get(k) or "") for k in ("timestamp", "token", "signature")
    )
    if not (timestamp.isdigit() and token and given):
        return False
    if abs(now.timestamp() - int(timestamp)) > MAILGUN_MAX_AGE.total_seconds():
        return False
    wanted = hmac.new(signing_key.encode(), (timestamp + token).encode(), hashlib.sha256)
    return hmac.compare_digest(given.lower(), wanted.hexdigest())


@functools.cache  # once per key, not once per request
def sendgrid_key(text: str) -> ec.EllipticCurvePublicKey:
    """The ECDSA public key SendGrid shows (base64 of its DER form), or the same as PEM.
    Raises ``ValueError`` for anything else."""
    data = text.strip().encode()
    if data.startswith(b"-----BEGIN"):
        key = serialization.load_pem_public_key(data)
    else:
        try:
            der = base64.b64decode(b"".join(data.split()), validate=True)
        except binascii.Error as exc:
            raise ValueError("neither PEM nor base64") from exc
        key = serialization.load_der_public_key(der)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("not an elliptic curve (ECDSA) public key")
    return key


def sendgrid_ok(
    key: ec.EllipticCurvePublicKey, signature: str, timestamp: str, body: bytes
) -> bool:
    """Whether ``signature`` (base64, from X-Twilio-Email-Event-Webhook-Signature) is the
    ECDSA SHA-256 signature of ``timestamp`` (X-Twilio-Email-Event-Webhook-Timestamp) followed
    by the raw ``body``."""
    if not signature or not timestamp:
        return False
    try:
        der = base64.b64decode(signature, validate=True)
        key.verify(der, timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True


# -- events ------------------------------------------------------------------------------------


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"not JSON: {exc}") from None


def _identity(relay: str, event_id: object, event: object) -> bytes:
    if isinstance(event_id, str | int) and str(event_id):
        return f"{relay}\0{event_id}".encode()
    return f"{relay}\0".encode() + json.dumps(event, sort_keys=True).encode()


def _status(words: str, code: object = None) -> str:
    """The enhanced status in the relay's words, else the class of its SMTP reply code."""
    found = STATUS.search(words)
    if found:
        return ".".join(found.groups())
    reply = _REPLY_CODE.match(words)
    first = str(code or "")[:1] or (reply[1] if reply else "")
    return f"{first}.0.0" if first in ("4", "5") else ""


_REPLY_CODE = re.compile(r"\s*(?:smtp;\s*)?([45])\d\d\b", re.I)


def _failed(email: str, words: str, ids: tuple[str, ...], *, code: object = None) -> Finding:
    """A failure the relay gave up on: hard or soft by its words, as a bounce message's."""
    status = _status(words, code)
    failure = failure_of(email, status, words, temporary=status.startswith("4"))
    return failure_finding(PERMANENT if failure.kind == HARD else TEMPORARY, failure, ids)


def _delayed(email: str, words: str, ids: tuple[str, ...], *, code: object = None) -> Finding:
    """A delivery the relay still tries: recorded, never counted (its status says 4.x.x)."""
    status = _status(words, code) or "4.0.0"
    status = "4" + status[1:]
    return failure_finding(TEMPORARY, failure_of(email, status, words, temporary=True), ids)


def complaint_finding(email: str, ids: tuple[str, ...]) -> Finding:
    failure = Failure(email.lower(), COMPLAINT, "feedback", "")
    return Finding(COMPLAINT, (email.lower(),), "abuse", "feedback report", ids, "", (failure,))


def failure_finding(kind: str, failure: Failure, ids: tuple[str, ...]) -> Finding:
    return Finding(
        kind,
        (failure.recipient,),
        failure.status,
        failure.words or failure.reason,
        ids,
        "",
        (failure,),
    )


def no_bounce(why: str) -> Finding:
    return Finding(NOT_A_BOUNCE, reason=why)


def message_ids(value: object) -> tuple[str, ...]:
    """A Message-ID as a relay echoes it, with or without its angle brackets."""
    if not isinstance(value, str) or not value.strip():
        return ()
    bare = value.strip().strip("<>")
    return (f"<{bare}>",)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


POSTMARK_FAILURES = frozenset(
    {"HardBounce", "SoftBounce", "BadEmailAddress", "Blocked", "DnsError", "ManuallyDeactivated"}
)
POSTMARK_DELAYS = frozenset({"Transient", "SMTPApiError"})
POSTMARK_COMPLAINTS = frozenset({"SpamComplaint", "SpamNotification"})


def postmark_events(body: bytes) -> list[RelayEvent]:
    """A Postmark bounce or spam complaint webhook (one event per request). Postmark's
    ``MessageID`` is its own, so the recipient names the delivery (its latest)."""
    event = _json(body)
    if not isinstance(event, dict):
        raise PayloadError("not a JSON object")
    email = _text(event.get("Email"))
    kind = _text(event.get("Type")) or _text(event.get("RecordType"))
    words = _text(event.get("Details")) or _text(event.get("Description"))
    identity = _identity("postmark", event.get("ID"), event)
    if not email:
        finding = no_bounce("no Email")
    elif event.get("RecordType") == "SpamComplaint" or kind in POSTMARK_COMPLAINTS:
        finding = complaint_finding(email, ())
    elif kind in POSTMARK_FAILURES:
        finding = _failed(email, words, ())
    elif kind in POSTMARK_DELAYS:
        finding = _delayed(email, words, ())
    else:
        finding = no_bounce(f"a {kind or 'record'} record")
    return [RelayEvent(identity, finding)]


def mailgun_events(payload: Mapping[str, Any]) -> list[RelayEvent]:
    """A Mailgun webhook's ``event-data``: ``failed`` (``severity`` permanent: it gave up;
    temporary: it tries again) or ``complained``."""
    event = payload.get("event-data")
    if not isinstance(event, dict):
        raise PayloadError("no event-data object")
    email = _text(event.get("recipient"))
    status = event.get("delivery-status")
    status = status if isinstance(status, dict) else {}
    words = " ".join(filter(None, (_text(status.get("message")), _text(status.get("description")))))
    message = event.get("message")
    headers = message.get("headers") if isinstance(message, dict) else None
    ids = message_ids(headers.get("message-id")) if isinstance(headers, dict) else ()
    identity = _identity("mailgun", event.get("id"), event)
    name = event.get("event")
    if not email:
        finding = no_bounce("no recipient")
    elif name == "complained":
        finding = complaint_finding(email, ids)
    elif name == "failed" and event.get("severity") == "temporary":
        finding = _delayed(email, words, ids, code=status.get("code"))
    elif name == "failed":
        finding = _failed(email, words, ids, code=status.get("code"))
    else:
        finding = no_bounce(f"a {name} event")
    return [RelayEvent(identity, finding)]


def parse_mailgun(body: bytes) -> dict[str, Any]:
    """A Mailgun webhook's JSON (its signature is inside it)."""
    payload = _json(body)
    if not isinstance(payload, dict):
        raise PayloadError("not a JSON object")
    return payload


def sendgrid_events(body: bytes) -> list[RelayEvent]:
    """A SendGrid event webhook's batch: ``bounce`` (type bounce or blocked) and ``dropped``
    are failures, ``deferred`` a delay, ``spamreport`` a complaint; the rest (delivered,
    open, click...) is no bounce. ``smtp-id`` is the Message-ID the message left with."""
    events = _json(body)
    if not isinstance(events, list):
        raise PayloadError("not a JSON array")
    return list(_sendgrid(events))


def _sendgrid(events: list[Any]) -> Iterator[RelayEvent]:
    for event in events:
        if not isinstance(event, dict):
            raise PayloadError("an event that is not a JSON object")
        email = _text(event.get("email"))
        name = event.get("event")
        words = " ".join(filter(None, (_text(event.get("status")), _text(event.get("reason")))))
        ids = message_ids(event.get("smtp-id"))
        identity = _identity("sendgrid", event.get("sg_event_id"), event)
        if not email:
            finding = no_bounce("no email")
        elif name == "spamreport" or (name == "dropped" and "spam" in words.lower()):
            finding = complaint_finding(email, ids)
        elif name == "dropped" and "unsubscribed" in words.lower():
            finding = no_bounce("dropped: unsubscribed at SendGrid")
        elif name in ("bounce", "dropped"):
            finding = _failed(email, words, ids)
        elif name == "deferred":
            finding = _delayed(email, words, ids)
        else:
            finding = no_bounce(f"a {name} event")
        yield RelayEvent(identity, finding)
