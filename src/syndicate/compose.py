"""Compose stage: a RenderedDigest and one reader → the complete message as bytes.

The parts that are the same for every reader of a variant (headers folded and RFC 2047-encoded
by the standard library, the quoted-printable bodies) are built once and cached; a reader then
costs a few short encodings and one join. CRLF line ends, 7-bit clean (but for the To header
of an address that needs SMTPUTF8), ready for SMTP and for DKIM signing by delivery.
``compose_note`` builds the short mails the web side sends one reader (confirmations). No I/O.
"""

from __future__ import annotations

import binascii
import email.policy
import html
import re
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from functools import lru_cache

from .errors import SyndicateError
from .render import PLACEHOLDERS, RenderedDigest, RenderedNote, check_url
from .subscribers import smtp_address

CRLF = b"\r\n"
_POLICY = email.policy.SMTP
_SIMPLE_ADDRESS = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+"
)
_INTERNATIONAL_ADDRESS = re.compile(r"[^\s\"(),:;<>@\[\\\]]+@[^\s\"(),:;<>@\[\\\]]+")
"""A bare address (no display name, no quoting) with non-ASCII characters in it."""
_UTF8_LOCAL = re.compile(r"[\w!#$%&'*+/=?^`{|}~-]+(?:\.[\w!#$%&'*+/=?^`{|}~-]+)*")
"""A dot-atom local part of RFC 6531: atext or any non-ASCII character."""
_MESSAGE_ID = re.compile(r"<[!-;=?-~]+@[!-;=?-~]+>")


class HeaderError(SyndicateError, ValueError):
    """A header value that would break the message (line breaks, control characters, ...)."""


def _printable(name: str, value: str) -> str:
    """Refuse CR, LF and every other control character: no header injection, ever."""
    if not value.isprintable():
        raise HeaderError(f"{name}: control character or line break in {value!r}")
    return value


def _fold(name: str, value: str) -> bytes:
    """One header, folded and encoded by the standard library (once per variant)."""
    _printable(name, value)
    header = _POLICY.header_factory(name, value)
    if header.defects:
        raise HeaderError(f"{name}: {header.defects[0]} in {value!r}")
    return header.fold(policy=_POLICY).encode("ascii")


def _qp(text: str) -> bytes:
    """Quoted-printable with CRLF line ends, by the C encoder in binascii.

    The extra CRLF makes binascii choose CRLF for its soft breaks; it is cut off again.
    """
    return binascii.b2a_qp(text.replace("\n", "\r\n").encode() + CRLF, istext=True)[:-2]


def _soft(encoded: bytes) -> bytes:
    """End with a soft line break, so the next piece starts a line; lines stay ≤ 76."""
    start = encoded.rfind(b"\n") + 1
    if len(encoded) - start > 75:
        cut = start + 73
        escape = encoded.rfind(b"=", cut - 2, cut)
        if escape != -1:
            cut = escape
        encoded = encoded[:cut] + b"=\r\n" + encoded[cut:]
    return encoded + b"=\r\n"


def _body(parts: tuple[str, ...]) -> tuple[bytes | str, ...]:
    """Encode the static pieces; keep placeholder names (odd indexes) for the reader's values.

    Every piece but the last ends with a soft break, so encoding the pieces one by one decodes
    to exactly the text encoding it whole would.
    """
    last = len(parts) - 1
    pieces: list[bytes | str] = []
    for i, part in enumerate(parts):
        if i % 2:
            pieces.append(part)
        elif i == last:
            pieces.append(_qp(part))
        else:
            pieces.append(_soft(_qp(part)) if part else b"")
    return tuple(pieces)


def _part_head(subtype: str) -> bytes:
    return (
        f'Content-Type: text/{subtype}; charset="utf-8"\r\n'
        "Content-Transfer-Encoding: quoted-printable\r\n\r\n"
    ).encode()


@lru_cache(maxsize=64)
def _skeleton(
    rendered: RenderedDigest, sender: str, list_id: str, reply_to: str | None, boundary: str
) -> tuple[bytes, bytes, bytes, tuple[bytes | str, ...], bytes, tuple[bytes | str, ...], bytes]:
    """Everything but the reader: (From, Subject, middle headers, text, html head, html, end)."""
    _printable("boundary", boundary)
    list_id = list_id if list_id.startswith("<") or "<" in list_id else f"<{list_id}>"
    middle = b"".join(
        [
            _fold("Reply-To", reply_to) if reply_to else b"",
            b"MIME-Version: 1.0\r\n",
            _fold("List-Id", list_id),
        ]
    )
    delimiter = f"\r\n--{boundary}\r\n".encode()
    return (
        _fold("From", sender),
        _fold("Subject", rendered.subject),
        middle,
        _body(rendered.text_parts),
        delimiter + _part_head("html"),
        _body(rendered.html_parts),
        f"\r\n--{boundary}--\r\n".encode(),
    )


def _address(to: str) -> bytes:
    """The To header of exactly one reader; plain addresses skip the slow parser.

    An international address is written as it goes over SMTP: the domain in its IDNA form
    (encoded-words are not allowed in an address), a non-ASCII local part as UTF-8 (RFC 6532,
    the message then needs SMTPUTF8, as its envelope does).
    """
    if _SIMPLE_ADDRESS.fullmatch(to):
        return b"To: " + to.encode("ascii") + CRLF
    if not to.isascii() and _INTERNATIONAL_ADDRESS.fullmatch(to):
        try:
            wire = smtp_address(to)[0]
        except ValueError as exc:
            raise HeaderError(f"To: {exc}") from None
        local, _, domain = wire.rpartition("@")
        if _UTF8_LOCAL.fullmatch(local) and _SIMPLE_ADDRESS.fullmatch(f"x@{domain}"):
            return b"To: " + wire.encode() + CRLF
        raise HeaderError(f"To: not a single plain address: {to!r}")
    if len(_POLICY.header_factory("To", to).addresses) != 1:
        raise HeaderError(f"To: must name exactly one reader: {to!r}")
    return _fold("To", to)


def _link(name: str, url: str) -> str:
    if not url.isascii() or not url.isprintable() or any(c in url for c in " <>,"):
        raise HeaderError(f"{name}: must be a URL of printable ASCII without spaces: {url!r}")
    return url


def _dated(date: datetime) -> datetime:
    if date.tzinfo is None:
        raise HeaderError("Date: needs a time zone")
    return date


@lru_cache(maxsize=8)
def _date_header(date: datetime) -> bytes:
    """The Date value of every message of a send (one time for all): formatted once, not
    for each reader (a twentieth of composing one)."""
    return format_datetime(_dated(date)).encode()


def _message_id(message_id: str) -> str:
    """``<local@domain>``, angle brackets added when missing."""
    message_id = _printable("Message-ID", message_id.strip())
    if not message_id.startswith("<"):
        message_id = f"<{message_id}>"
    if not _MESSAGE_ID.fullmatch(message_id):
        raise HeaderError(f"Message-ID: not of the form <local@domain>: {message_id!r}")
    return message_id


def _unsubscribe(url: str, mailto: str | None) -> str:
    """The List-Unsubscribe value: the one-click URL, then the mailto address if any."""
    if not mailto:
        return f"<{url}>"
    mailto = _link("unsubscribe_mailto", mailto)
    return f"<{url}>,\r\n <{mailto if mailto.startswith('mailto:') else 'mailto:' + mailto}>"


def compose_message(
    rendered: RenderedDigest,
    *,
    to: str,
    sender: str,
    message_id: str,
    date: datetime,
    list_id: str,
    unsubscribe_url: str,
    unsubscribe_mailto: str | None = None,
    preferences_url: str,
    view_url: str,
    reply_to: str | None = None,
    boundary: str | None = None,
) -> bytes:
    """One reader's complete multipart/alternative message (text, then HTML), CRLF line ends.

    ``boundary`` is fixed in tests; by default it derives from the content. It starts with
    "=_", which quoted-printable bodies can never contain. Raises HeaderError for any value
    that could break or inject a header.
    """
    boundary = boundary or f"=_{rendered.content_hash[:24]}"
    from_, subject, middle, text, html_head, body, end = _skeleton(
        rendered, sender, list_id, reply_to, boundary
    )
    message_id = _message_id(message_id)
    urls = {
        "unsubscribe_url": _link("unsubscribe_url", check_url("unsubscribe_url", unsubscribe_url)),
        "preferences_url": check_url("preferences_url", preferences_url),
        "view_url": check_url("view_url", view_url),
    }
    unsubscribe = _unsubscribe(urls["unsubscribe_url"], unsubscribe_mailto)
    text_values = {name: _soft(_qp(urls[name])) for name in PLACEHOLDERS}
    html_values = {name: _soft(_qp(html.escape(urls[name]))) for name in PLACEHOLDERS}
    pieces = [
        from_,
        _address(_printable("To", to)),
        subject,
        b"Date: ",
        _date_header(date),
        b"\r\nMessage-ID: ",
        message_id.encode(),
        CRLF,
        middle,
        b"List-Unsubscribe: ",
        unsubscribe.encode(),
        b"\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n",
        f'Content-Type: multipart/alternative; boundary="{boundary}"\r\n\r\n'
        f"--{boundary}\r\n".encode(),
        _part_head("plain"),
    ]
    pieces.extend(text_values[p] if isinstance(p, str) else p for p in text)
    pieces.append(html_head)
    pieces.extend(html_values[p] if isinstance(p, str) else p for p in body)
    pieces.append(end)
    return b"".join(pieces)


def reference_message(
    rendered: RenderedDigest,
    *,
    to: str,
    sender: str,
    message_id: str,
    date: datetime,
    list_id: str,
    unsubscribe_url: str,
    unsubscribe_mailto: str | None = None,
    preferences_url: str,
    view_url: str,
    reply_to: str | None = None,
) -> bytes:
    """The same message the plain standard-library way: a new EmailMessage per reader.

    Slow; kept as the benchmark's baseline and the tests' oracle for ``compose_message``.
    """
    personal = rendered.personalise(
        unsubscribe_url=unsubscribe_url, preferences_url=preferences_url, view_url=view_url
    )
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = rendered.subject
    msg["Date"] = date
    msg["Message-ID"] = message_id if message_id.startswith("<") else f"<{message_id}>"
    if reply_to:
        msg["Reply-To"] = reply_to
    msg["List-Id"] = list_id if "<" in list_id else f"<{list_id}>"
    unsubscribe = f"<{unsubscribe_url}>"
    if unsubscribe_mailto:
        mailto = unsubscribe_mailto
        unsubscribe += f", <{mailto if mailto.startswith('mailto:') else 'mailto:' + mailto}>"
    msg["List-Unsubscribe"] = unsubscribe
    msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    msg.set_content(personal.text)
    msg.add_alternative(personal.html, subtype="html")
    return msg.as_bytes(policy=_POLICY)


def compose_note(
    rendered: RenderedNote,
    *,
    to: str,
    sender: str,
    message_id: str,
    date: datetime,
    reply_to: str | None = None,
) -> EmailMessage:
    """A reader's confirmation or note as a plain-text message, marked auto-generated (RFC
    3834) so that vacation responders stay quiet. Raises HeaderError like ``compose_message``."""
    message = EmailMessage()
    message["From"] = _printable("From", sender)
    message["To"] = _note_address(_printable("To", to))
    message["Subject"] = _printable("Subject", rendered.subject)
    message["Date"] = format_datetime(_dated(date).astimezone(UTC))
    message["Message-ID"] = _message_id(message_id)
    message["Auto-Submitted"] = "auto-generated"
    if reply_to:
        message["Reply-To"] = _printable("Reply-To", reply_to)
    message.set_content(rendered.text)
    return message


def _note_address(to: str) -> str:
    """A note's To header, as ``_address`` writes a digest's: an international domain in its
    IDNA form (an encoded-word is not allowed inside an address)."""
    if to.isascii():
        return to
    try:
        return smtp_address(to)[0]
    except ValueError as exc:
        raise HeaderError(f"To: {exc}") from None


def note_bytes(message: EmailMessage) -> bytes:
    """A note as it goes over SMTP: 7-bit headers with encoded-words, or, for a reader whose
    local part is not ASCII, UTF-8 headers (RFC 6532; the envelope then needs SMTPUTF8)."""
    utf8 = not str(message["To"]).isascii()
    return message.as_bytes(policy=email.policy.SMTPUTF8 if utf8 else email.policy.SMTP)
