"""Who a bounce reports and in which words: one ``Report`` per recipient, from RFC 3464 fields
(in a message/delivery-status part, or pasted into the text as some servers do), an Amazon SES
notification, or the free text of the formats that have no fields (no I/O).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from email.message import Message
from email.utils import getaddresses, parseaddr
from typing import Any

from flufl.bounce import all_failures

# flufl.bounce logs each detector it runs, and the traceback of one that fails on a message
# it cannot read before raising; ``_flufl`` takes that failure as finding no one.
logging.getLogger("flufl.bounce").setLevel(logging.CRITICAL)


@dataclass(frozen=True, slots=True)
class Report:
    """One recipient as a bounce reports it, before its reason is read."""

    recipient: str
    action: str = ""
    """RFC 3464's Action (``failed``, ``delayed``, ``delivered``, ...), or empty."""
    status: str = ""
    """The status as written (``5.1.1``), or empty."""
    words: str = ""
    """The remote server's words for this recipient (Diagnostic-Code or the text around it)."""
    temporary: bool = False
    """The report says the delivery is still being tried or was refused for now (4xx)."""


STATUS = re.compile(r"(?<![\w.])([245])\.(\d{1,3})\.(\d{1,3})(?![\w]|\.\d)")
_FAILURE = re.compile(r"(?<![\w.#])#?([45])\.(\d{1,3})\.(\d{1,3})(?![\w]|\.\d)")  # in free text
_REPLY = re.compile(r"(?:^|[\s:(\[])([45])\d\d(?=[ -]|$)", re.M)
_ADDRESS = re.compile(r"[\w.!#$%&'*+/=?^`{|}~-]+@[\w-]+(?:\.[\w-]+)+", re.A)
_FIELD = re.compile(r"^([A-Za-z][\w-]*):[ \t]*(.*(?:\n[ \t]+.*)*)", re.M)
_DAEMONS = re.compile(r"^(?:mailer-?daemon|mail-?daemon|mdaemon)@", re.I)
# A report that the message is still queued: a warning, not a failure yet.
_DELAYED = re.compile(
    r"warning message only|(?:has been|is|was) delayed|not (?:yet )?been delivered yet|will "
    r"(?:continue|keep) (?:trying|to try|attempting)|will be retried|only a temporary failure"
    r"|still (?:being )?(?:retried|trying|in the queue)|delivery is delayed|no action is required",
    re.I,
)
_LINE = re.compile(r".*(?:\n[ \t]+.*)*")  # a line and its folded continuation
_QUOTED_TO = re.compile(r"^[ \t>]*To:[ \t]*(.+)$", re.M | re.I)
# Where a text bounce stops reporting and starts quoting the original message.
_QUOTE = re.compile(
    r"^[ \t>-]*(?:-+ ?)?(?:original message|unsent message|undelivered message|returned message|"
    r"this is a copy|below this line is a copy|message headers follow|original message headers|"
    r"the original message|header of original message|content-description: undelivered|"
    r"[-]+ ?(?:begin|start) (?:of )?(?:original|returned|forwarded)|received: |return-path: |"
    r"--- ?the header of the original)",
    re.I | re.M,
)


def address_of(value: str) -> str:
    """The address in a DSN recipient field (``rfc822; a@b``, ``<a@b>``, ``a@b``), lower case."""
    kind, semicolon, rest = value.partition(";")
    if not semicolon:
        rest = kind
    elif kind.strip().lower() not in ("rfc822", "rfc2822", "x-unknown", "unknown", ""):
        return ""
    found = _ADDRESS.search(parseaddr(rest.strip())[1] or rest)
    return found[0].lower().strip(".") if found else ""


def usable(address: str) -> bool:
    """An address a delivery could have gone to: not a pipe, a file or a mail daemon."""
    return "@" in address and not address.startswith(("|", "/")) and not _DAEMONS.match(address)


# -- RFC 3464 fields ---------------------------------------------------------------------------


def dsn_reports(message: Message, body: str) -> list[Report]:
    """The recipient blocks of a DSN; where the delivery-status part is missing or empty, the
    same fields found in the text (Amazon WorkMail, McAfee, ... paste them there)."""
    blocks = [dict(block.items()) for block in _status_blocks(message)]
    if not any(_block_recipient(b) for b in blocks) and re.search(
        r"^(?:Final|Original)-Recipient:", body, re.I | re.M
    ):
        blocks = [_fields(paragraph) for paragraph in re.split(r"\n[ \t]*\n", body)]
    reports = [report for block in blocks if (report := _block_report(block)) is not None]
    return [_with_text_words(r, body) if not r.words else r for r in reports]


def _with_text_words(report: Report, body: str) -> Report:
    """A recipient block without a Diagnostic-Code: the words from the text where it is
    named (OpenSMTPD, ...), and their status where the block's says only the class."""
    text = report_text(body)
    start = text.lower().find(report.recipient)
    if start < 0:
        return report
    line = _LINE.match(text, start)
    words = " ".join(line[0].split()) if line else ""
    if not (_FAILURE.search(words) or _REPLY.search(words)):
        return report  # a list of addresses: the report's text says why, not this line
    said = _FAILURE.search(words)
    status = report.status
    if said and (not status or status == f"{said[1]}.0.0"):
        status = ".".join(said.groups())
    return replace(report, words=words, status=status)


def _status_blocks(message: Message) -> Iterator[Message]:
    for part in message.walk():
        if part.get_content_type() == "message/delivery-status":
            payload = part.get_payload()
            if isinstance(payload, list):
                yield from (p for p in payload if isinstance(p, Message))
            elif isinstance(payload, str):  # not parsed into blocks: read the fields ourselves
                for paragraph in re.split(r"\r?\n[ \t]*\r?\n", payload):
                    block = Message()
                    for name, value in _fields(paragraph).items():
                        block[name] = value
                    yield block


def _fields(paragraph: str) -> dict[str, str]:
    return {name: " ".join(value.split()) for name, value in _FIELD.findall(paragraph)}


def _field(block: dict[str, str], name: str) -> str:
    for key, value in block.items():
        if key.lower() == name:
            return str(value)
    return ""


def _block_recipient(block: dict[str, str]) -> str:
    """Original-Recipient (the address the message was sent to), else Final-Recipient."""
    for name in ("original-recipient", "final-recipient", "x-actual-recipient"):
        address = address_of(_field(block, name))
        if usable(address):
            return address
    return ""


def _block_report(block: dict[str, str]) -> Report | None:
    recipient = _block_recipient(block)
    if not recipient:
        return None
    words = " ".join(_field(block, "diagnostic-code").split())
    found = STATUS.search(_field(block, "status"))
    said = _FAILURE.search(words)
    status = found[0] if found else ""
    if said and (not status or status == f"{said[1]}.0.0"):  # the words may say more (5.1.1)
        status = ".".join(said.groups())
    action = _field(block, "action").strip().lower()
    return Report(
        recipient,
        action,
        status,
        words.partition(";")[2].strip() or words,
        action.startswith("delayed") or status.startswith("4"),
    )


# -- Amazon SES notifications ------------------------------------------------------------------


def ses_reports(body: str) -> list[Report] | None:
    """An Amazon SES notification's recipients (JSON, as SNS mails it); None if it is none.
    A delivery notification reports its recipients as delivered, a complaint as ``complaint``."""
    if "notificationType" not in body:
        return None
    data = _json_object(body)
    if isinstance(data.get("Message"), str):  # SNS's envelope around the notification
        data = _json_object(data["Message"])
    kind = str(data.get("notificationType", "")).lower()
    if kind == "bounce":
        bounce = data.get("bounce", {})
        transient = bounce.get("bounceType") == "Transient"
        return [_ses_recipient(r, transient) for r in bounce.get("bouncedRecipients", [])]
    if kind == "complaint":
        complained = data.get("complaint", {}).get("complainedRecipients", [])
        return [Report(address_of(r.get("emailAddress", "")), "complaint") for r in complained]
    if kind == "delivery":
        delivered = data.get("delivery", {}).get("recipients", [])
        return [Report(str(r).lower(), "delivered", "2.0.0") for r in delivered]
    return None


def _json_object(text: str) -> dict[str, Any]:
    """The JSON object that starts at the first brace of ``text`` (folded lines joined), or {}."""
    start = text.find("{")
    if start < 0:
        return {}
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:].replace("\n", ""))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _ses_recipient(recipient: dict[str, str], transient: bool) -> Report:
    words = recipient.get("diagnosticCode", "")
    status = STATUS.search(recipient.get("status", "")) or STATUS.search(words)
    return Report(
        address_of(recipient.get("emailAddress", "")),
        recipient.get("action", "failed").lower(),
        status[0] if status else "",
        words.partition(";")[2].strip() or words,
        transient or (status is not None and status[1] == "4"),
    )


# -- free text -----------------------------------------------------------------------------------


def report_text(body: str) -> str:
    """The part of a text bounce that reports (before the quoted original message)."""
    found = _QUOTE.search(body)
    return body[: found.start()] if found and found.start() > 0 else body


def text_reports(message: Message, body: str, original: Message | None) -> list[Report]:
    """A text bounce's recipients, each with the text from where it is named to where the next
    one is: the failed recipients flufl.bounce finds, else X-Failed-Recipients, else the
    addresses the report names (not the bounce's own), else the original message's To."""
    report = report_text(body)
    own = {
        a.lower() for _, a in getaddresses(message.get_all("To", []) + message.get_all("From", []))
    }
    recipients = _flufl(message) or _header(message, "X-Failed-Recipients")
    if not recipients:
        found = (a.lower().strip(".") for a in _ADDRESS.findall(report))
        recipients = [a for a in dict.fromkeys(found) if usable(a) and a not in own]
    if not recipients and original is not None:
        recipients = _header(original, "To")
    if not recipients:  # the original quoted as text: its To line
        quoted = _QUOTED_TO.search(body, len(report))
        recipients = [a for a in _ADDRESS.findall(quoted[1].lower()) if usable(a)] if quoted else []
    lowered = report.lower()
    places = sorted((lowered.find(r) if r in lowered else len(report), r) for r in recipients)
    reports = []
    for start, recipient in places:
        others = (lowered.find(r, start + len(recipient)) for r in recipients if r != recipient)
        end = min((at for at in others if at >= 0), default=len(report))  # the next one named
        reports.append(_text_report(recipient, report[start:end], report))
    return reports


def _text_report(recipient: str, near: str, report: str) -> Report:
    """A recipient's status and words: from the text that follows its name, else the whole."""
    status = _FAILURE.search(near) or _FAILURE.search(report)
    reply = _REPLY.search(near) or _REPLY.search(report)
    words = near if _FAILURE.search(near) or _REPLY.search(near) else report
    temporary = bool(status[1] == "4" if status else reply and reply[1] == "4")
    temporary = temporary or bool(_DELAYED.search(report))
    found = ".".join(status.groups()) if status else ""  # qmail writes #5.1.1
    return Report(recipient, "failed", found, " ".join(words.split()), temporary)


def _flufl(message: Message) -> list[str]:
    """The failed recipients flufl.bounce's detectors find; none when one of them breaks on
    the message (a truncated one: the other ways of finding recipients still apply)."""
    try:
        temporary, permanent = all_failures(message)
    except Exception:  # any detector's bug, on any message
        return []
    found = (a.decode("utf-8", "replace").lower() for a in (*permanent, *temporary))
    return [a for a in found if usable(a)]


def _header(message: Message, name: str) -> list[str]:
    found = (a.lower() for _, a in getaddresses(message.get_all(name, [])))
    return [a for a in dict.fromkeys(found) if usable(a)]
