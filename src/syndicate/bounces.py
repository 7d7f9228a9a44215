"""Bounces and complaints, read from the mail that reports them (no I/O).

Every digest leaves with its own envelope sender, ``<local>+<delivery id>.<mac>@<domain>``
(VERP): a bounce goes back to that address, so the delivery it reports is known from an
address only this site can make, whatever the report's text claims. The MAC is HMAC-SHA256
of the delivery id under the site's secret key, cut to 16 hex digits (local parts may be
folded to lower case on the way).

``classify`` reads one message: an RFC 3464 delivery status notification (its ``Action`` and
``Status`` fields), an RFC 5965 feedback report (a complaint), or any of the non-standard
bounce formats GNU Mailman's detector ``flufl.bounce`` knows (Exim's, qmail's, ...).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from email import message_from_bytes
from email.message import Message
from email.parser import HeaderParser
from email.utils import getaddresses, parseaddr
from typing import cast

from flufl.bounce import all_failures

PERMANENT = "permanent"
TEMPORARY = "temporary"
COMPLAINT = "complaint"
NOT_A_BOUNCE = "none"

_MAC_DIGITS = 16


def _mac(secret: bytes, delivery_id: int) -> str:
    digest = hmac.new(secret, b"bounce\0" + str(delivery_id).encode(), hashlib.sha256)
    return digest.hexdigest()[:_MAC_DIGITS]


def verp_address(secret: bytes, return_path: str, delivery_id: int) -> str:
    """The envelope sender of one delivery: ``return_path`` with the delivery id and its MAC
    after a ``+``."""
    local, _, domain = return_path.rpartition("@")
    return f"{local}+{delivery_id}.{_mac(secret, delivery_id)}@{domain}"


def verp_pattern(return_path: str) -> re.Pattern[str]:
    """Finds the VERP addresses of ``return_path`` anywhere in a text (any case)."""
    local, _, domain = return_path.rpartition("@")
    return re.compile(
        rf"(?<![\w.+-]){re.escape(local)}\+(\d{{1,18}})\.([0-9a-f]+)@{re.escape(domain)}\b",
        re.IGNORECASE,
    )


def verp_deliveries(secret: bytes, return_path: str, text: str) -> tuple[set[int], bool]:
    """The delivery ids named by genuine VERP addresses in ``text``, and whether ``text``
    holds VERP-shaped addresses at all (when it does and none is genuine, it is forged)."""
    found = verp_pattern(return_path).findall(text)
    genuine = {
        int(number)
        for number, mac in found
        if hmac.compare_digest(mac.lower(), _mac(secret, int(number)))
    }
    return genuine, bool(found)


@dataclass(frozen=True, slots=True)
class Finding:
    """What one message reports, before it is matched to a delivery."""

    kind: str
    """``permanent``, ``temporary``, ``complaint``, or ``none`` (not a bounce we act on)."""
    recipients: tuple[str, ...] = ()
    """The addresses it reports (lower case): failed, delayed or complained about."""
    status: str = ""
    """The RFC 3463 status code (``5.1.1``), or for a complaint its feedback type."""
    reason: str = ""
    """The remote server's words (Diagnostic-Code), or how the message was recognised."""
    message_ids: tuple[str, ...] = ()
    """Message-IDs of the original message that the report quotes: a fallback match."""
    text: str = ""
    """The whole message as text, where the VERP addresses are looked for."""


_STATUS = re.compile(r"\b([245])\.\d{1,3}\.\d{1,3}\b")
_REPLY = re.compile(r"^[ \t]*[45]\d\d[ -].*$", re.M)  # the remote server's reply, in a text
_QUOTED_ID = re.compile(r"^(?:Message-ID|X-Original-Message-ID):[ \t]*(<[^>\s]+>)", re.I | re.M)


def classify(data: bytes) -> Finding:
    """What the message ``data`` reports. Its words are only trusted for the kind of
    failure; which delivery it concerns is for the caller to match."""
    message = message_from_bytes(data)
    text = data.decode("utf-8", "replace")
    ids = _quoted_message_ids(message, text)
    complaint = _feedback(message)
    if complaint is not None:
        feedback_type, recipients = complaint
        kind = COMPLAINT if feedback_type == "abuse" else NOT_A_BOUNCE
        return Finding(kind, recipients, feedback_type, "feedback report", ids, text)
    blocks = list(_dsn_blocks(message))
    if blocks:
        return _from_dsn(blocks, ids, text)
    temporary, permanent = all_failures(message)
    if permanent or temporary:
        body = _body_text(message)
        found = _STATUS.search(body)
        reply = _REPLY.search(body)
        kind = PERMANENT if permanent else TEMPORARY
        failed = sorted(a.decode("ascii").lower() for a in (permanent or temporary))
        reason = " ".join(reply[0].split()) if reply else "bounce text"
        return Finding(kind, tuple(failed), found[0] if found else "", reason, ids, text)
    return Finding(NOT_A_BOUNCE, message_ids=ids, text=text)


def _from_dsn(blocks: list[Message], ids: tuple[str, ...], text: str) -> Finding:
    """RFC 3464: each recipient block's Action and Status; the worst one decides."""
    permanent, temporary = [], []
    for block in blocks:
        action = (block.get("Action") or "").strip().lower()
        status = _STATUS.search(block.get("Status") or "")
        failed = action.startswith(("fail", "error"))  # "error": opensmtpd's spelling
        if action.startswith("delayed") or (failed and status is not None and status[1] == "4"):
            temporary.append(block)  # a 4.x.x that was given up on may still work next time
        elif failed:
            permanent.append(block)
    chosen = permanent or temporary
    if not chosen:  # delivered, relayed, expanded: nothing went wrong
        return Finding(NOT_A_BOUNCE, message_ids=ids, text=text)
    recipients = tuple(dict.fromkeys(_recipient(b) for b in chosen if _recipient(b)))
    first = chosen[0]
    found = _STATUS.search(first.get("Status") or "")
    reason = " ".join((first.get("Diagnostic-Code") or "").split())
    return Finding(
        PERMANENT if permanent else TEMPORARY,
        recipients,
        found[0] if found else "",
        reason.partition(";")[2].strip() or reason,
        ids,
        text,
    )


def _recipient(block: Message) -> str:
    """A DSN recipient block's address: Original-Recipient, else Final-Recipient."""
    for name in ("Original-Recipient", "Final-Recipient"):
        value = block.get(name) or ""
        kind, _, address = value.partition(";")
        address = parseaddr(address.strip())[1] if kind.strip().lower() == "rfc822" else ""
        if "@" in address:
            return address.lower()
    return ""


def _dsn_blocks(message: Message) -> Iterable[Message]:
    for part in message.walk():
        if part.get_content_type() == "message/delivery-status" and part.is_multipart():
            blocks = cast("list[Message]", part.get_payload())  # multipart: a list of parts
            yield from blocks[1:]  # the first block is the per-message fields


def _feedback(message: Message) -> tuple[str, tuple[str, ...]] | None:
    """RFC 5965: the feedback type and the reported recipients of an ARF report."""
    for part in message.walk():
        if part.get_content_type() != "message/feedback-report":
            continue
        payload = part.get_payload()
        fields = payload[0] if isinstance(payload, list) and payload else None
        if not isinstance(fields, Message):  # a parser that left the fields as text
            fields = HeaderParser().parsestr(str(part.get_payload()))
        feedback_type = (fields.get("Feedback-Type") or "").strip().lower()
        rcpts = [a.lower() for _, a in getaddresses(fields.get_all("Original-Rcpt-To", [])) if a]
        return feedback_type, tuple(rcpts)
    return None


def _quoted_message_ids(message: Message, text: str) -> tuple[str, ...]:
    """Message-IDs quoted in the body (the original message's headers), never the report's
    own."""
    own = (message.get("Message-ID") or "").strip()
    head_end = re.search(r"\r?\n\r?\n", text)
    body = text[head_end.end() :] if head_end else ""
    return tuple(dict.fromkeys(m for m in _QUOTED_ID.findall(body) if m != own))


def _body_text(message: Message) -> str:
    parts = []
    for part in message.walk():
        if part.get_content_maintype() == "text":
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                parts.append(payload.decode(part.get_content_charset() or "utf-8", "replace"))
    return "\n".join(parts)
