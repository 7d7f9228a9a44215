"""Bounces and complaints, read from the mail that reports them (no I/O).

Every digest leaves with its own envelope sender, ``<local>+<delivery id>.<mac>@<domain>``
(VERP): a bounce goes back to that address, so the delivery it reports is known from an
address only this site can make, whatever the report's text claims. The MAC is HMAC-SHA256
of the delivery id under the site's secret key, cut to 16 hex digits (local parts may be
folded to lower case on the way).

``classify`` reads one message: an RFC 5965 feedback report (a complaint), an RFC 3464 delivery
status notification (its recipient blocks, wherever the fields are), an Amazon SES
notification, or the free text of the formats without fields (``reports``); then each failed
recipient's reason, in the taxonomy bounce specialists use, and whether that makes it a hard
bounce (``reasons``). A message that reports no failure is named for the person who reads it
(an auto-reply, a delivery notice, a reply); bytes that are no mail message at all raise
``UnreadableError``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from email import message_from_bytes
from email.message import Message
from email.parser import HeaderParser
from email.utils import getaddresses
from typing import cast

from .reasons import UNDEFINED, inferred_status, is_hard, reason_of
from .reports import Report, dsn_reports, report_text, ses_reports, text_reports

PERMANENT = "permanent"
TEMPORARY = "temporary"
COMPLAINT = "complaint"
NOT_A_BOUNCE = "none"
HARD = "hard"
SOFT = "soft"

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
class Failure:
    """One recipient a message reports, and why."""

    recipient: str
    """The address (lower case)."""
    kind: str
    """``hard`` (will fail again: the address or domain is gone), ``soft`` (may pass another
    day), ``complaint`` (the reader reported the message as abuse) or ``none``."""
    reason: str
    """Why, in the taxonomy of ``reasons``: ``userunknown``, ``mailboxfull``, ``blocked``, ..."""
    status: str
    """The RFC 3463 status (``5.1.1``): the report's, else inferred from the reason."""
    words: str = ""
    """The remote server's words for it."""


@dataclass(frozen=True, slots=True)
class Finding:
    """What one message reports, before it is matched to a delivery."""

    kind: str
    """As the state counts it: ``permanent`` (a hard bounce), ``temporary`` (soft ones only),
    ``complaint``, or ``none`` (not a bounce we act on)."""
    recipients: tuple[str, ...] = ()
    """The addresses it reports (lower case): failed, delayed or complained about."""
    status: str = ""
    """The RFC 3463 status code (``5.1.1``), or for a complaint its feedback type."""
    reason: str = ""
    """The remote server's words (Diagnostic-Code), or how the message was recognised; for one
    that is no bounce, what it is (``an auto-reply``, ``a delivery notice``, ``a reply``, ...)."""
    message_ids: tuple[str, ...] = ()
    """Message-IDs of the original message that the report quotes: a fallback match."""
    text: str = ""
    """The whole message as text, where the VERP addresses are looked for."""
    failures: tuple[Failure, ...] = ()
    """Each recipient with its kind, reason and status, in the report's order."""


class UnreadableError(ValueError):
    """The bytes are no mail message: empty, no header, or binary data where the header is."""


_QUOTED_ID = re.compile(r"^(?:Message-ID|X-Original-Message-ID):[ \t]*(<[^>\s]+>)", re.I | re.M)


def classify(data: bytes) -> Finding:
    """What the message ``data`` reports. Its words are only trusted for the kind of
    failure; which delivery it concerns is for the caller to match. Raises ``UnreadableError``
    when ``data`` is no mail message at all."""
    message = message_from_bytes(data)
    _readable(data, message)
    text = data.decode("utf-8", "replace")
    ids = _quoted_message_ids(message, text)
    complaint = _feedback(message)
    if complaint is not None:
        feedback_type, recipients = complaint
        kind = COMPLAINT if feedback_type == "abuse" else NOT_A_BOUNCE
        how = "feedback report" if kind == COMPLAINT else f"a feedback report ({feedback_type})"
        if not recipients:  # a report that names no one: the quoted original's To
            recipients = tuple(_header_addresses(_body_text(message)[1], "To"))
        failures = tuple(Failure(r, kind, "feedback", "") for r in recipients or ("",))
        return Finding(kind, recipients, feedback_type, how, ids, text, failures)
    reports, context = _reports(message)
    failures = tuple(_failure(r, context) for r in reports if _failed(r))
    if not failures:
        what = _not_a_bounce(message, bool(reports))
        return Finding(NOT_A_BOUNCE, reason=what, message_ids=ids, text=text)
    if all(f.kind == COMPLAINT for f in failures):
        recipients = tuple(f.recipient for f in failures)
        return Finding(COMPLAINT, recipients, "abuse", "feedback report", ids, text, failures)
    hard = [f for f in failures if f.kind == HARD]
    first = (hard or list(failures))[0]
    return Finding(
        PERMANENT if hard else TEMPORARY,
        tuple(dict.fromkeys(f.recipient for f in failures)),
        first.status,
        first.words or first.reason,
        ids,
        text,
        failures,
    )


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")  # ESC: raw ISO-2022-JP
_HEAD_END = re.compile(rb"\r?\n\r?\n")


def _readable(data: bytes, message: Message) -> None:
    """Raise ``UnreadableError`` unless ``data`` is a mail message: a header of text fields."""
    if not data.strip():
        raise UnreadableError("empty")
    if not any(name.strip() for name in message):
        raise UnreadableError("no header")
    end = _HEAD_END.search(data)
    if _CONTROL.search(data, 0, end.start() if end else len(data)):
        raise UnreadableError("binary data in its header")


def _not_a_bounce(message: Message, reported: bool) -> str:
    """What a message that reports no failure is, in a few words for the person who reads it.
    ``reported``: it names recipients, none of them failed (delivered, relayed, 2.x.x)."""
    if reported:
        return "a delivery notice"
    if message.get_content_type() == "multipart/report" and (
        message.get_param("report-type") == "disposition-notification"
    ):
        return "a read receipt"
    if _auto_reply(message):
        return "an auto-reply"
    if _BOUNCE_FROM.search(str(message.get("From") or "")) or (
        (message.get("Return-Path") or "").strip() == "<>"
    ):
        return "a mail system's notice naming no failed recipient"
    return "a reply"


def _auto_reply(message: Message) -> bool:
    """RFC 3834's mark, the older ones (X-Autoreply, Precedence), or an auto-reply's subject."""
    submitted = str(message.get("Auto-Submitted") or "").strip().lower()
    precedence = str(message.get("Precedence") or "").strip().lower()
    return (
        (bool(submitted) and submitted != "no")
        or any(message.get(name) for name in ("X-Autoreply", "X-Autorespond"))
        or precedence == "auto_reply"
        or bool(_AUTOREPLY.match(str(message.get("Subject") or "").strip()))
    )


def _reports(message: Message) -> tuple[list[Report], str]:
    """Each recipient the message reports on, from the most explicit form it has; and the
    text of the report (where the reason is looked for when a recipient's own words lack it)."""
    body, original = _body_text(message)
    context = report_text(body)
    found = dsn_reports(message, body)
    if found:
        return found, context
    ses = ses_reports(body)
    if ses is not None:
        return ses, ""
    if not _looks_like_a_bounce(message):
        return [], ""
    return text_reports(message, body, original), context


def _failed(report: Report) -> bool:
    """Not delivered: an RFC 3464 ``failed`` or ``delayed`` (or no Action), never ``delivered``,
    ``relayed`` or ``expanded``, nor a 2.x.x status."""
    if report.action.startswith(("deliver", "relay", "expand")):
        return False
    return not report.status.startswith("2")


def failure_of(recipient: str, status: str, words: str, *, temporary: bool) -> Failure:
    """One recipient's failure as another reporter (a relay's webhook) gives it: read as a
    bounce message's is, so the same words make the same kind and reason."""
    report = Report(recipient.lower(), "failed", status, words, temporary)
    return _failure(report, "")


def _failure(report: Report, context: str) -> Failure:
    if report.action == COMPLAINT:
        return Failure(report.recipient, COMPLAINT, "feedback", "")
    reason = reason_of(report.status, report.words, context)
    status = report.status
    if not status or status.endswith(".0.0"):
        status = inferred_status(reason, report.temporary) if reason != UNDEFINED else status
    status = status or ("4.0.0" if report.temporary else "5.0.0")
    kind = HARD if is_hard(reason, status) else SOFT
    return Failure(report.recipient, kind, reason, status, report.words)


_AUTOREPLY = re.compile(
    r"^(?:auto(?:matic)? ?(?:reply|response)|out of (?:the )?office|away)", re.I
)
_BOUNCE_FROM = re.compile(r"mailer-?daemon|post_?master|mail ?delivery|mail-?daemon|mdaemon", re.I)
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|returned mail|delivery (?:status|failure|failed|notification|problem)|mail delivery"
    r"|failure notice|non-?delivery|not (?:be )?delivered|delivery has failed|mail system error"
    r"|returned to sender|メールエラー|配信エラー|エラー通知",
    re.I,
)


def _looks_like_a_bounce(message: Message) -> bool:
    """Whether a message without DSN fields is a bounce at all: sent by a mail system (or with
    an empty return path), and no auto-reply (RFC 3834) nor other mail."""
    if _BOUNCE_FROM.search(str(message.get("From") or "")):
        return True  # mail systems mark their bounces auto-replied too (Exim)
    if (message.get("Auto-Submitted") or "").strip().lower().startswith("auto-replied"):
        return False
    subject = str(message.get("Subject") or "").strip()
    if _AUTOREPLY.match(subject):
        return False
    return (message.get("Return-Path") or "").strip() == "<>" or bool(
        _BOUNCE_SUBJECT.search(subject)
    )


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


def _body_text(message: Message) -> tuple[str, Message | None]:
    """The text the bounce itself says (its text parts, outside any quoted message), and the
    quoted original message if there is one."""
    texts: list[str] = []
    original: Message | None = None
    parts = [message]
    while parts:
        part = parts.pop(0)
        if part.get_content_type() in ("message/rfc822", "text/rfc822-headers"):
            payload = part.get_payload()
            if original is None and isinstance(payload, list) and payload:
                original = cast("Message", payload[0])
            continue
        if part.is_multipart():
            parts[:0] = [p for p in part.get_payload() if isinstance(p, Message)]
        elif part.get_content_maintype() in (
            "text",
            "multipart",
        ):  # multipart: broken, read as text
            texts.append(_decoded(part))
    return "\n".join(texts).replace("\r\n", "\n"), original


def _header_addresses(message: Message | None, name: str) -> list[str]:
    if message is None:
        return []
    return [a.lower() for _, a in getaddresses(message.get_all(name, [])) if "@" in a]


def _decoded(part: Message) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, "replace")
    except LookupError:  # a charset Python does not know
        return payload.decode("utf-8", "replace")
