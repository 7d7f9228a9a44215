"""Amazon SES bounces, complaints and deliveries as Amazon SNS posts them (no I/O; the signing
certificate is fetched by the caller, web/sns.py).

An SNS message is verified before anything in it is believed: its topic must be one of the
site's (anyone may sign messages of a topic of their own with SNS's certificate), its
certificate must come from SNS's own hosts over HTTPS (``SNS_URL``), and its signature must
be that certificate's RSA signature of the message's fields (SignatureVersion 1: SHA-1,
2: SHA-256). Each bounced or complaining recipient then becomes a ``RelayEvent`` whose identity
is SES's feedback id and the address, so a replay or a retry is recorded once.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from . import HARD, PERMANENT, TEMPORARY, failure_of
from .relays import (
    PayloadError,
    RelayEvent,
    complaint_finding,
    failure_finding,
    message_ids,
    no_bounce,
)
from .reports import ses_reports

SNS_URL = re.compile(r"https://sns\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?/")
"""Where SNS's signing certificates and subscription confirmations are: its own hosts."""

CONFIRMATION = "SubscriptionConfirmation"
NOTIFICATION = "Notification"
_SUBSCRIPTION = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")
_SIGNED = {
    NOTIFICATION: ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    CONFIRMATION: _SUBSCRIPTION,
    "UnsubscribeConfirmation": _SUBSCRIPTION,
}
"""The fields each type of message signs, in the order they are signed."""
_HASHES = {"1": hashes.SHA1, "2": hashes.SHA256}


def sns_message(body: bytes) -> dict[str, str]:
    """An SNS message: a JSON object of text fields with a known Type; ``PayloadError``
    for anything else."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("Type") not in _SIGNED:
        raise PayloadError("not an SNS message (no known Type)")
    return {key: value for key, value in data.items() if isinstance(value, str)}


def sns_url_ok(url: str, allowed: re.Pattern[str] = SNS_URL) -> bool:
    """Whether ``url`` is one of SNS's own (``allowed`` replaces them in tests)."""
    return allowed.match(url) is not None and "@" not in url.split("/")[2]


def sns_ok(message: Mapping[str, str], certificate: bytes, topics: Collection[str]) -> bool:
    """Whether ``message`` is of one of ``topics`` and signed with the key of
    ``certificate`` (PEM), by its SignatureVersion."""
    algorithm = _HASHES.get(message.get("SignatureVersion", ""))
    if algorithm is None or message.get("TopicArn") not in topics:
        return False
    try:
        key = x509.load_pem_x509_certificate(certificate).public_key()
        signature = base64.b64decode(message.get("Signature", ""), validate=True)
    except (ValueError, binascii.Error):
        return False
    if not isinstance(key, rsa.RSAPublicKey):
        return False
    try:
        key.verify(signature, signed_text(message), padding.PKCS1v15(), algorithm())
    except InvalidSignature:
        return False
    return True


def signed_text(message: Mapping[str, str]) -> bytes:
    """What SNS signs: each signed field present, as its name and value on lines of their own."""
    fields = _SIGNED[message["Type"]]
    return "".join(f"{k}\n{message[k]}\n" for k in fields if k in message).encode()


def ses_events(message: Mapping[str, str]) -> list[RelayEvent]:
    """The events of an SES notification (the ``Message`` of an SNS Notification): each
    bounced recipient a failure, hard or soft by its words as a bounce message's (counted,
    never a delay: SES has given up); each complaining one a complaint; a delivery none."""
    try:
        notification = json.loads(message.get("Message", ""))
    except json.JSONDecodeError as exc:
        raise PayloadError(f"its Message is not JSON: {exc}") from None
    if not isinstance(notification, dict):
        raise PayloadError("its Message is not a JSON object")
    reports = ses_reports(json.dumps(notification)) or []
    kind = str(notification.get("notificationType", "")).lower()
    details = notification.get(kind)
    feedback = details.get("feedbackId") if isinstance(details, dict) else None
    ids = message_ids(_common(notification).get("messageId"))
    events = []
    for report in reports:
        identity = f"ses\0{feedback or message.get('MessageId', '')}\0{report.recipient}"
        if report.action == "complaint":
            found = complaint_finding(report.recipient, ids)
        elif report.action.startswith("deliver"):
            found = no_bounce("a delivery notification")
        else:
            # SES reports a bounce once it stopped trying: a failure of this message however
            # soft its reason (a Transient bounce is a soft one, not a delay)
            status = "5" + report.status[1:] if report.status else ""
            failure = failure_of(report.recipient, status, report.words, temporary=False)
            found = failure_finding(PERMANENT if failure.kind == HARD else TEMPORARY, failure, ids)
        events.append(RelayEvent(identity.encode(), found))
    return events


def _common(notification: Mapping[str, Any]) -> Mapping[str, Any]:
    mail = notification.get("mail")
    common = mail.get("commonHeaders") if isinstance(mail, dict) else None
    return common if isinstance(common, dict) else {}
