"""MIME composition: headers, encodings, equivalence with the standard library, no injection."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime, timedelta, timezone
from email.message import EmailMessage

import pytest

from syndicate.compose import HeaderError, compose_message, compose_note, note_bytes
from syndicate.config import Config
from syndicate.digest import select_digest
from syndicate.reader import read_articles
from syndicate.render import RenderedDigest, render_digest, render_note
from tests.conftest import ARTICLES
from tests.sending import reference_message

BOUNDARY = "=_test-boundary"
READER = {
    "to": "reader@example.org",
    "sender": "Syndicate <digest@example.com>",
    "message_id": "<nl-cost.1.reader@example.com>",
    "date": datetime(2025, 12, 15, 8, 0, tzinfo=UTC),
    "list_id": "digest.example.com",
    "unsubscribe_url": "https://news.example.org/unsubscribe?token=t0k3n&x=1",
    "preferences_url": "https://news.example.org/preferences?token=t0k3n",
    "view_url": "https://news.example.org/digest/nl-cost?token=t0k3n",
}


@pytest.fixture
def rendered(config: Config) -> dict[str, RenderedDigest]:
    found = read_articles(ARTICLES, config.profiles)
    return {
        key: render_digest(select_digest(found, lang, audiences), config)
        for key, lang, audiences in [
            ("en", "en", ["cost"]),
            ("nl", "nl", ["cost", "strategy"]),
            ("de", "de", config.audiences),
        ]
    }


def parsed(raw: bytes) -> EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)  # type: ignore[return-value]


def shape(raw: bytes) -> tuple[object, ...]:
    """What a mail client sees: headers (decoded, unfolded) and each part's type and content."""
    msg = parsed(raw)
    headers = {k: " ".join(str(v).split()) for k, v in msg.items() if k.lower() != "content-type"}
    parts = [
        (p.get_content_type(), p.get_content_charset(), p.get_content().replace("\r\n", "\n"))
        for p in msg.iter_parts()
    ]
    return msg.get_content_type(), headers, parts, msg.defects


def test_every_header_a_real_send_needs(rendered: dict[str, RenderedDigest]) -> None:
    raw = compose_message(rendered["nl"], **READER, boundary=BOUNDARY)
    msg = parsed(raw)
    assert msg["From"] == "Syndicate <digest@example.com>"
    assert msg["To"] == "reader@example.org"
    assert msg["Subject"] == rendered["nl"].subject
    assert msg["Date"].datetime == READER["date"]
    assert msg["Message-ID"] == "<nl-cost.1.reader@example.com>"
    assert msg["MIME-Version"] == "1.0"
    assert msg["List-Id"] == "<digest.example.com>"
    assert msg["List-Unsubscribe"] == f"<{READER['unsubscribe_url']}>"
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert msg.get_content_type() == "multipart/alternative"
    assert msg.get_param("boundary") == BOUNDARY
    text, page = msg.iter_parts()
    assert text.get_content_type() == "text/plain" and page.get_content_type() == "text/html"
    assert text.get_content_charset() == page.get_content_charset() == "utf-8"
    assert READER["unsubscribe_url"] in text.get_content()
    assert 'href="https://news.example.org/unsubscribe?token=t0k3n&amp;x=1"' in page.get_content()
    assert not msg.defects and not text.defects and not page.defects


def test_mailto_and_reply_to(rendered: dict[str, RenderedDigest]) -> None:
    raw = compose_message(
        rendered["en"],
        **READER,
        unsubscribe_mailto="unsubscribe@example.com",
        reply_to="Editors <editors@example.com>",
    )
    msg = parsed(raw)
    assert " ".join(msg["List-Unsubscribe"].split()) == (
        f"<{READER['unsubscribe_url']}>, <mailto:unsubscribe@example.com>"
    )
    assert msg["Reply-To"] == "Editors <editors@example.com>"


def test_wire_format(rendered: dict[str, RenderedDigest]) -> None:
    raw = compose_message(rendered["de"], **READER, boundary=BOUNDARY)
    assert raw.isascii(), "7-bit clean: no SMTPUTF8 or 8BITMIME needed"
    assert b"\n" not in raw.replace(b"\r\n", b""), "CRLF line ends only"
    assert max(len(line) for line in raw.split(b"\r\n")) <= 78
    assert raw.endswith(f"--{BOUNDARY}--\r\n".encode())
    # Non-ASCII subjects are RFC 2047 encoded and decode back.
    assert b"From: =?utf-8?q?J=C3=BCrgen?=" in compose_message(
        rendered["de"], **{**READER, "sender": "Jürgen <j@example.de>"}
    )
    assert parsed(raw)["Subject"] == rendered["de"].subject


@pytest.mark.parametrize("variant", ["en", "nl", "de"])
@pytest.mark.parametrize(
    "reader",
    [
        {},
        {"to": "Jürgen Müller <jm@example.de>", "unsubscribe_mailto": "mailto:u@example.com"},
        {"to": '"Doe, Jane" <jane@example.org>', "reply_to": "Ünïcode <r@example.com>"},
        {"preferences_url": "https://news.example.org/p?t=" + "x" * 150},
        {"date": datetime(2026, 3, 29, 3, 30, tzinfo=timezone(timedelta(hours=2)))},
    ],
)
def test_same_message_as_the_standard_library(
    rendered: dict[str, RenderedDigest], variant: str, reader: dict[str, object]
) -> None:
    values = {**READER, **reader}
    fast = compose_message(rendered[variant], **values)
    slow = reference_message(rendered[variant], **values)
    assert shape(fast) == shape(slow)


def test_deterministic_and_only_the_reader_differs(rendered: dict[str, RenderedDigest]) -> None:
    one = compose_message(rendered["en"], **READER, boundary=BOUNDARY)
    assert one == compose_message(rendered["en"], **READER, boundary=BOUNDARY)
    other = compose_message(
        rendered["en"], **{**READER, "to": "second@example.org"}, boundary=BOUNDARY
    )
    assert one.replace(b"reader@example.org", b"second@example.org") == other
    # Without a fixed boundary, the boundary follows the content and stays stable.
    assert compose_message(rendered["en"], **READER) == compose_message(rendered["en"], **READER)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("to", "reader@example.org\r\nBcc: everyone@example.org", "To: control character"),
        ("to", "reader@example.org\nBcc: everyone@example.org", "To: control character"),
        ("to", "one@example.org, two@example.org", "To: must name exactly one reader"),
        ("sender", "Syndicate <digest@example.com>\rX-Evil: 1", "From: control character"),
        ("message_id", "<a@b>\r\nBcc: x@y", "Message-ID: control character"),
        ("message_id", "no-at-sign", "Message-ID: not of the form"),
        ("list_id", "digest.example.com\r\nBcc: x@y", "List-Id: control character"),
        ("reply_to", "r@example.com\nBcc: x@y", "Reply-To: control character"),
        ("unsubscribe_url", "https://x.example/u\r\nBcc: x@y", "unsubscribe_url"),
        ("unsubscribe_url", "https://x.example/u>,<https://evil.example/", "unsubscribe_url"),
        ("unsubscribe_mailto", "u@example.com\r\nBcc: x@y", "unsubscribe_mailto"),
        ("preferences_url", "https://x.example/p\nBcc: x@y", "preferences_url"),
        ("view_url", "javascript:alert(1)", "view_url"),
        ("date", datetime(2025, 12, 15, 8, 0), "Date: needs a time zone"),
    ],
)
def test_no_header_injection(
    rendered: dict[str, RenderedDigest], field: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        compose_message(rendered["en"], **{**READER, field: value})


def test_header_errors_are_syndicate_errors(rendered: dict[str, RenderedDigest]) -> None:
    with pytest.raises(HeaderError, match="To: control character"):
        compose_message(rendered["en"], **{**READER, "to": "a@b.c\r\nBcc: d@e.f"})


# -- notes to one reader (the web side's confirmations) --------------------------------------


def test_a_note_is_plain_text_auto_generated_and_in_the_readers_language(config: Config) -> None:
    note = render_note(config, "de", "confirm", link="https://example.org/confirm/t", days=7)
    message = compose_note(
        note,
        to="leser@example.org",
        sender="Syndicate <digest@example.com>",
        message_id="<n1@example.com>",
        date=datetime(2025, 12, 15, 9, 0, tzinfo=timezone(timedelta(hours=1))),
        reply_to="editors@example.com",
    )
    again = parsed(message.as_bytes(policy=email.policy.SMTP))
    assert again["Subject"] == "Bestätigen Sie Ihr Abonnement bei Syndicate"
    assert again["Date"] == "Mon, 15 Dec 2025 08:00:00 +0000"
    assert (again["Auto-Submitted"], again["Reply-To"]) == ("auto-generated", "editors@example.com")
    assert again.get_content_type() == "text/plain"
    assert "https://example.org/confirm/t" in again.get_content()
    assert "7 Tage" in again.get_content()


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("to", "a@example.org\r\nBcc: b@example.org", "To: control character"),
        ("sender", "x@example.com\n", "From: control character"),
        ("message_id", "no-brackets-or-domain", "Message-ID: not of the form"),
        ("date", datetime(2025, 12, 15, 9, 0), "Date: needs a time zone"),
    ],
)
def test_a_note_refuses_what_would_break_a_header(
    config: Config, field: str, value: object, error: str
) -> None:
    note = render_note(config, "en", "subscribed", link="https://example.org/p/t", days=7)
    values = {
        "to": "a@example.org",
        "sender": "x@example.com",
        "message_id": "<n1@example.com>",
        "date": datetime(2025, 12, 15, 9, 0, tzinfo=UTC),
        field: value,
    }
    with pytest.raises(HeaderError, match=error):
        compose_note(note, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("to", "header"),
    [
        ("leser@exämple.de", b"To: leser@xn--exmple-cua.de\r\n"),
        ("jürgen@exämple.de", "To: jürgen@xn--exmple-cua.de\r\n".encode()),
    ],
)
def test_a_note_to_an_international_address_keeps_the_address_whole(
    config: Config, to: str, header: bytes
) -> None:
    note = render_note(config, "de", "confirm", link="https://example.org/confirm/t", days=7)
    message = compose_note(
        note,
        to=to,
        sender="Syndicate <digest@example.com>",
        message_id="<n1@example.com>",
        date=datetime(2025, 12, 15, 9, 0, tzinfo=UTC),
    )
    data = note_bytes(message)
    assert header in data
    assert b"=?utf-8?" not in data.split(b"\r\nSubject:")[0]  # no encoded-word in an address
    assert parsed(data)["Subject"] == "Bestätigen Sie Ihr Abonnement bei Syndicate"
