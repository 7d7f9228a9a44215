"""Compose stage: a RenderedDigest and one reader → the complete message as bytes.

The parts that are the same for every reader of a variant (headers folded and RFC 2047-encoded,
the quoted-printable bodies) are built once and cached; a reader then costs a few short
encodings and one join. CRLF line ends, 7-bit clean (but for the To header of an address that
needs SMTPUTF8), ready for SMTP and for DKIM signing by delivery. A header refuses line breaks
and control characters, nothing else: no-break spaces, any script, emoji all go through.
``compose_note`` builds the short mails the web side sends one reader (confirmations). No I/O.
"""

from __future__ import annotations

import binascii
import email.policy
import html
import re
from datetime import UTC, datetime
from email.header import Header
from email.message import EmailMessage
from email.policy import EmailPolicy
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


_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""What no header may hold: the controls (Unicode category Cc: CR, LF, NEL, tab, ...), the
line and paragraph separators, and lone surrogates (no UTF-8 for them)."""


def _header_safe(name: str, value: str) -> str:
    """Refuse line breaks and control characters: no header injection, ever. Everything else
    a catalog or an article title holds stays: the no-break spaces of French typography
    (U+00A0, U+202F), guillemets, right-to-left scripts and their marks, emoji.
    (``str.isprintable`` would refuse the no-break spaces, and every French subject with them.)
    """
    found = _BREAKS.search(value)
    if found:
        raise HeaderError(
            f"{name}: control character or line break (U+{ord(found[0]):04X}) in {value!r}"
        )
    return value


def _words(name: str, value: str) -> str:
    """``value`` as RFC 2047 encoded-words, folded between them, every space inside one."""
    return Header(value, "utf-8", header_name=name).encode(linesep="\r\n")


def _subject(value: str) -> bytes:
    """The Subject line, folded here rather than by the standard library, whose folder (3.11)
    loses text a reader sees: it can fold two encoded-words apart at the space between two
    words, which a reader then drops ("articles« cités »"); it can fold right after the
    colon, which a reader keeps as a leading space; it writes a literal ``=?utf-8?q?...?=``
    as it is, which a reader decodes. Plain ASCII stays readable, folded at its spaces (a
    line of 78 at most where a word allows); anything else is encoded whole.
    """
    if not value.isascii() or "=?" in value or value != value.strip(" "):
        return f"Subject: {_words('Subject', value)}\r\n".encode("ascii")
    lines: list[str] = []
    line = f"Subject: {value}"
    while len(line) > 78:
        start = len(line) - len(line.lstrip(" ")) + (len("Subject: ") if not lines else 0) + 1
        cut = line.rfind(" ", start, 79)
        cut = cut if cut != -1 else line.find(" ", start)
        if cut == -1:
            break
        lines.append(line[:cut])
        line = line[cut:]
    lines.append(line)
    return ("\r\n".join(lines) + "\r\n").encode("ascii")


def _fold(name: str, value: str) -> bytes:
    """One header, folded and encoded once per variant (by the standard library, but for the
    Subject): 7-bit, any non-ASCII text in RFC 2047 encoded-words."""
    _header_safe(name, value)
    if name == "Subject":
        return _subject(value)
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
    if not (boundary.isascii() and boundary.isprintable()):
        raise HeaderError(f"boundary: not printable ASCII: {boundary!r}")
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
    message_id = _header_safe("Message-ID", message_id.strip())
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
        _address(_header_safe("To", to)),
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
    message["From"] = _header_safe("From", sender)
    message["To"] = _note_address(_header_safe("To", to))
    subject = _header_safe("Subject", rendered.subject)
    # A header set on a message is decoded at once: a literal encoded-word goes in encoded.
    message["Subject"] = (
        _words("Subject", subject).replace("\r\n", "") if "=?" in subject else subject
    )
    message["Date"] = format_datetime(_dated(date).astimezone(UTC))
    message["Message-ID"] = _message_id(message_id)
    message["Auto-Submitted"] = "auto-generated"
    if reply_to:
        message["Reply-To"] = _header_safe("Reply-To", reply_to)
    # Quoted-printable, not the 8bit the standard library picks for short non-ASCII lines: the
    # relay was never asked for 8BITMIME.
    message.set_content(rendered.text, cte=None if rendered.text.isascii() else "quoted-printable")
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


class _NotePolicy(EmailPolicy):
    """The SMTP policy, but the Subject is written as a digest's is (``_subject``); with
    ``utf8`` too, where encoded-words are still what every reader reads."""

    def fold_binary(self, name: str, value: str) -> bytes:
        if name.lower() == "subject":
            return _subject(str(value))
        return super().fold_binary(name, value)


_NOTE_SMTP = _NotePolicy(linesep="\r\n")
_NOTE_SMTPUTF8 = _NotePolicy(linesep="\r\n", utf8=True)


def note_bytes(message: EmailMessage) -> bytes:
    """A note as it goes over SMTP: 7-bit headers with encoded-words, or, for a reader whose
    local part is not ASCII, UTF-8 headers (RFC 6532; the envelope then needs SMTPUTF8).
    The body is 7-bit either way (quoted-printable)."""
    utf8 = not str(message["To"]).isascii()
    return message.as_bytes(policy=_NOTE_SMTPUTF8 if utf8 else _NOTE_SMTP)
