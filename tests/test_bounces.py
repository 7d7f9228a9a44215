"""Bounces and complaints that arrive as mail: DSNs (RFC 3464) and ARF reports (RFC 5965), as
Postfix, Exim and a large mailbox provider write them, matched to real deliveries."""

from __future__ import annotations

import json
import logging
import mailbox
import os
import random
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from syndicate.bounces import (
    COMPLAINT,
    NOT_A_BOUNCE,
    PERMANENT,
    TEMPORARY,
    UnreadableError,
    classify,
    verp_address,
    verp_deliveries,
)
from syndicate.bounces.reasons import reason_of, reply_reason
from syndicate.cli import main
from syndicate.config import Config, load_config, parse_config
from syndicate.errors import ConfigError
from syndicate.sending import issuing
from syndicate.sending.loop import SendOptions, deliver
from syndicate.sending.transports import SmtpMailer
from syndicate.state import Bounced, BouncePolicy, Store, Subscriber, open_store
from syndicate.tokens import secret_key
from tests.conftest import ARTICLES
from tests.sending import NOW, add_readers, compose, make_issue

FIXTURES = Path(__file__).resolve().parent / "bounces"
RETURN = "bounces@news.example.org"
VERP = re.compile(r"^bounces\+(\d+)\.([0-9a-f]{16})@news\.example\.org$")


def fill(name: str, *, return_path: str, reader: str, message_id: str) -> bytes:
    """A fixture with the delivery's envelope sender, reader and Message-ID filled in."""
    data = (FIXTURES / name).read_bytes()
    for mark, value in (
        (b"@@RETURN@@", return_path),
        (b"@@READER@@", reader),
        (b"@@MESSAGE_ID@@", message_id.strip("<>")),
    ):
        data = data.replace(mark, value.encode())
    return data


# -- classification, no database ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "status", "reason"),
    [
        ("postfix-failed.eml", PERMANENT, "5.1.1", "User unknown in virtual mailbox table"),
        ("postfix-delayed.eml", TEMPORARY, "4.4.1", "Connection timed out"),
        # A disabled mailbox may be enabled again: soft (its DSN's 5.0.0 is told more exactly)
        ("exim-failed.eml", TEMPORARY, "5.2.1", "Mailbox disabled for this recipient"),
        ("exim-plain-failed.eml", PERMANENT, "5.1.1", "550 5.1.1"),
        ("gmail-failed.eml", PERMANENT, "5.1.1", "tried to reach does not exist"),
        ("arf-abuse.eml", COMPLAINT, "abuse", "feedback report"),
        ("out-of-office.eml", NOT_A_BOUNCE, "", "an auto-reply"),
        ("human-reply.eml", NOT_A_BOUNCE, "", "a reply"),
    ],
)
def test_each_format_is_classified(name: str, kind: str, status: str, reason: str) -> None:
    address = verp_address(b"key", RETURN, 7)
    finding = classify(
        fill(name, return_path=address, reader="Reader@Example.NET", message_id="<d.1.2@x>")
    )
    assert (finding.kind, finding.status) == (kind, status)
    assert reason in finding.reason
    if kind != NOT_A_BOUNCE:
        assert finding.recipients == ("reader@example.net",)
        assert finding.message_ids == ("<d.1.2@x>",)  # the original's, never the report's own
    assert verp_deliveries(b"key", RETURN, finding.text) == ({7}, True)


def test_what_is_no_mail_message_is_named_unreadable() -> None:
    for data, why in (
        (b"", "empty"),
        (b"\n\n", "empty"),
        (random.Random(29).randbytes(200), "no header"),
        (b"From: a@example.com\nSubject: \x00\x01\x02\n\nhello", "binary data in its header"),
    ):
        with pytest.raises(UnreadableError, match=why):
            classify(data)


# Its header only, cut before its From: flufl.bounce's Yale detector breaks on a missing From.
TRUNCATED = (FIXTURES / "sisimai" / "lhost-opensmtpd-04.eml").read_bytes().split(b"\nSubject:")[0]


def test_a_truncated_bounce_is_read_without_a_word_from_flufl_bounce(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    finding = classify(TRUNCATED + b"\n")
    assert (finding.kind, finding.reason) == (
        NOT_A_BOUNCE,
        "a mail system's notice naming no failed recipient",
    )
    assert caplog.records == []


def test_a_verp_address_is_only_genuine_under_the_sites_key() -> None:
    address = verp_address(b"key", RETURN, 12345)
    assert VERP.fullmatch(address)[1] == "12345"
    assert verp_deliveries(b"key", RETURN, f"To: <{address.upper()}>") == ({12345}, True)
    assert verp_deliveries(b"other key", RETURN, address) == (set(), True)  # forged
    forged_id = address.replace("+12345.", "+12346.")
    assert verp_deliveries(b"key", RETURN, forged_id) == (set(), True)
    assert verp_deliveries(b"key", RETURN, "digest@news.example.org") == (set(), False)
    assert verp_deliveries(b"key", "bounces@other.example", address) == (set(), False)


RCPT = "(in reply to RCPT TO command)"


@pytest.mark.parametrize(
    ("status", "words", "context", "reason"),
    [
        # an address status says it of the address, whatever else the report says
        ("5.1.1", "550 5.1.1 <a@example.org>... User unknown", ">>> DATA", "userunknown"),
        # in reply to RCPT TO: the address; X.2.1 alone: a disabled mailbox, soft
        ("5.2.1", "550 5.2.1 <a@example.org>... User Unknown " + RCPT, "", "userunknown"),
        ("5.2.1", "550 5.2.1 <a@example.org>... User Unknown", "", "suspend"),
        ("", "host mx.example.org: 550 <a@example.org>: User unknown", "", "userunknown"),
        # after the data, or with nothing to tell: a filtering gateway's, soft
        (
            "",
            "SMTP error from remote mail server after end of data: 550 user unknown",
            "",
            "filtered",
        ),
        ("5.0.0", "550 Unknown user a@example.org", "", "filtered"),
        ("", "550 a@example.org... No such user", "-------SMTP command DATA", "filtered"),
        # a directory's own words need no command
        ("", "User a (a@example.org) not listed in Domino Directory", "", "userunknown"),
        # the sender or our host name refused: never the reader's
        ("", "SMTP error after MAIL FROM:<d@example.org>: 553 domain not found", "", "rejected"),
        ("", "Connected but my name was rejected. 501 5.0.0 Invalid domain name", "", "blocked"),
        # a name server that did not answer may answer tomorrow
        (
            "",
            "Name service error for domain example.org: Host not found, try again",
            "",
            "networkerror",
        ),
    ],
)
def test_user_unknown_is_hard_only_when_said_of_the_address(
    status: str, words: str, context: str, reason: str
) -> None:
    assert reason_of(status, words, context) == reason


def test_a_refusal_at_the_send_is_in_reply_to_rcpt() -> None:
    assert reply_reason("550 user unknown") == ("userunknown", True)
    assert reply_reason("550 5.2.1 mailbox disabled") == ("suspend", False)


def test_a_return_path_must_be_a_bare_address() -> None:
    for bad in ("bounces", "News <bounces@news.example.org>", "bounces+x@news.example.org"):
        with pytest.raises(ConfigError, match=r"email\.return_path"):
            parse_config({"email": {"return_path": bad}}, root=Path("."), source="(t)", env={})


# -- the store: counting, on both databases ---------------------------------------------------


def _report(
    store: Store, target: Bounced, message_hash: str, kind: str, now: datetime = NOW
) -> str:
    """A bounce report of ``target``'s delivery at ``now`` (hard limit 2, window 90 days)."""
    return store.bounces.record_bounce(
        message_hash=message_hash,
        target=target,
        kind=kind,
        status="5.1.1",
        reason="user unknown",
        matched_by="verp",
        policy=BouncePolicy(hard_limit=2, hard_window=timedelta(days=90)),
        now=now,
    )


def _deliveries(store: Store, reader: Subscriber, count: int, first: int = 0) -> list[Bounced]:
    """``count`` issues sent to ``reader`` (numbered from ``first``): their deliveries, as a
    bounce names them."""
    numbers = range(first, first + count)
    issues = [make_issue(store, [reader], content=f"issue {n}") for n in numbers]
    return [
        store.bounces.bounced_deliveries(message_ids=[f"<{i.id}.{reader.id}@news.example.org>"])[0]
        for i in issues
    ]


def test_a_permanent_bounce_counts_once_per_delivery(database_url: str) -> None:
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    one, two = _deliveries(store, reader, 2)

    def record(target: Bounced, message_hash: str, kind: str = PERMANENT) -> str:
        return _report(store, target, message_hash, kind)

    assert record(one, "a" * 64) == "counted"
    assert record(one, "a" * 64) == "duplicate"  # the same message again
    assert record(one, "b" * 64) == "already counted"  # another report of the same delivery
    assert record(one, "c" * 64, TEMPORARY) == "already counted"  # a delay notice too
    assert store.subscribers.subscriber_by_id(reader.id).bounces == 1
    assert store.subscribers.subscriber_by_id(reader.id).status == "active"
    assert record(two, "d" * 64) == "bounced"  # the second delivery reaches max_bounces
    assert store.subscribers.subscriber_by_id(reader.id).status == "bounced"
    [risk] = store.bounces.readers_at_risk()
    assert (risk.email, risk.bounces, risk.temporary, risk.complaints) == (reader.email, 2, 1, 0)
    assert store.bounces.bounce_counts() == {PERMANENT: 3, TEMPORARY: 1}
    store.close()


def test_bounces_older_than_the_window_are_forgotten_at_the_next_one(database_url: str) -> None:
    """Reports 100 days apart never add up (the older count is forgotten and the new bounce is
    the first again); reports within the window do, however late each arrives."""
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    targets = _deliveries(store, reader, 3)

    def record(target: Bounced, message_hash: str, days: int) -> str:
        return _report(store, target, message_hash, PERMANENT, NOW + timedelta(days=days))

    assert record(targets[0], "a" * 64, 0) == "counted"
    assert record(targets[1], "b" * 64, 100) == "counted"  # the first again
    assert store.subscribers.subscriber_by_id(reader.id).bounces == 1
    assert record(targets[2], "c" * 64, 180) == "bounced"  # 80 days after the last one
    assert store.subscribers.subscriber_by_id(reader.id).status == "bounced"
    store.close()


def test_a_refusal_at_the_send_forgets_old_bounces_alike(database_url: str, smtp_server) -> None:
    inbox, port = smtp_server
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    inbox.script[("rcpt", reader.email)] = ["550 5.1.1 no such user"] * 3
    window = timedelta(days=30)
    for n, days in enumerate((0, 40, 60)):
        make_issue(store, [reader], content=f"issue {n}")
        when = NOW + timedelta(days=days)
        policy = BouncePolicy(hard_limit=2, hard_window=window)
        options = SendOptions(sender="digest@news.example.org", workers=1, bounces=policy)
        counts = deliver(store, SmtpMailer("127.0.0.1", port, timeout=10), compose, options, when)
        assert counts.failed == 1
        expected = {0: ("active", 1), 40: ("active", 1), 60: ("bounced", 2)}[days]
        found = store.subscribers.subscriber_by_id(reader.id)
        assert (found.status, found.bounces) == expected, f"day {days}"
    store.close()


# -- the policy: hard bounces and complaints at once, soft ones when they persist ------------

FULL = "552 5.2.2 mailbox full"


def _soft(store: Store, target: Bounced, n: int, days: float) -> str:
    """Bounce mail of ``target``'s delivery: a full mailbox, ``days`` after NOW (the default
    policy: hard limit 1, soft limit 5 over 14 days)."""
    return store.bounces.record_bounce(
        message_hash=f"{n:064x}",
        target=target,
        kind=TEMPORARY,
        status="5.2.2",
        reason=FULL,
        matched_by="verp",
        policy=BouncePolicy(),
        now=NOW + timedelta(days=days),
        cause="mailboxfull",
    )


@pytest.mark.parametrize(
    ("days", "dropped"),
    [
        ((0, 7, 14, 21), False),  # four times: never, however far apart
        ((0, 1, 2, 3, 13), False),  # five times within 14 days: not yet
        ((0, 3, 7, 10, 14), True),  # five times over 14 days
    ],
)
def test_a_full_mailbox_drops_a_reader_only_when_it_persists(
    database_url: str, days: tuple[int, ...], dropped: bool
) -> None:
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    for n, (target, day) in enumerate(
        zip(_deliveries(store, reader, len(days)), days, strict=True)
    ):
        assert _soft(store, target, n, day) in ("counted", "bounced")
    found = store.subscribers.subscriber_by_id(reader.id)
    assert (found.status, found.soft_bounces, found.bounces) == (
        "bounced" if dropped else "active",
        len(days),
        0,
    )
    [risk] = store.bounces.readers_at_risk()
    assert (risk.soft_bounces, risk.soft_since, risk.reason) == (len(days), NOW, "mailboxfull")
    store.close()


WEEK = 7


def _sent(store: Store, port: int, reader: Subscriber, week: int, micro_batch: int = 1) -> Bounced:
    """Issue ``week`` sent to ``reader`` through the relay, which takes it (250), ``week``
    weeks after NOW: its delivery, as a bounce mail names it later."""
    issue = make_issue(store, [reader], content=f"week {week}")
    options = SendOptions(sender="digest@news.example.org", workers=1, micro_batch=micro_batch)
    mailer = SmtpMailer("127.0.0.1", port, timeout=10)
    counts = deliver(store, mailer, compose, options, NOW + timedelta(days=WEEK * week))
    assert counts.sent == 1
    message_id = f"<{issue.id}.{reader.id}@news.example.org>"
    return store.bounces.bounced_deliveries(message_ids=[message_id])[0]


@pytest.mark.parametrize(("weeks", "dropped"), [(5, True), (4, False)])
@pytest.mark.parametrize("micro_batch", [1, 5])
def test_behind_a_relay_a_full_mailbox_week_after_week_drops_the_reader(
    database_url: str, smtp_server, weeks: int, dropped: bool, micro_batch: int
) -> None:
    """Every issue is accepted (``sent``) and bounces by mail a day later: the accepted
    deliveries are no success in between, so five bounces over four weeks drop the reader
    and four do not (on both databases, however many outcomes a commit records)."""
    _, port = smtp_server
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    for week in range(weeks):
        target = _sent(store, port, reader, week, micro_batch)
        assert _soft(store, target, week, WEEK * week + 1) in ("counted", "bounced")
    found = store.subscribers.subscriber_by_id(reader.id)
    assert (found.status, found.soft_bounces) == ("bounced" if dropped else "active", weeks)
    [risk] = store.bounces.readers_at_risk()
    assert risk.soft_since == NOW + timedelta(days=1)
    store.close()


def test_behind_a_relay_an_issue_that_does_not_bounce_starts_the_soft_count_again(
    database_url: str, smtp_server
) -> None:
    """A bounce, then an issue that arrives (no bounce ever names it), then a bounce: the
    second counts as the first, from its own day."""
    _, port = smtp_server
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    first, _, third = (_sent(store, port, reader, week) for week in range(3))
    _soft(store, first, 0, 1)
    assert store.subscribers.subscriber_by_id(reader.id).soft_bounces == 1
    assert _soft(store, third, 2, 2 * WEEK + 1) == "counted"
    found = store.subscribers.subscriber_by_id(reader.id)
    assert (found.status, found.soft_bounces) == ("active", 1)
    [risk] = store.bounces.readers_at_risk()
    assert risk.soft_since == NOW + timedelta(days=2 * WEEK + 1)
    store.close()


def test_an_issue_the_relay_was_still_trying_is_no_success_in_between(
    database_url: str, smtp_server
) -> None:
    """A bounce, then an issue whose only report is a delay (4.2.2: the relay still tries;
    recorded, not counted), then a bounce: the delayed issue never proved to arrive, so the
    count goes on."""
    _, port = smtp_server
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    first, second, third = (_sent(store, port, reader, week) for week in range(3))
    _soft(store, first, 0, 1)
    delay = store.bounces.record_bounce(
        message_hash="d" * 64,
        target=second,
        kind=TEMPORARY,
        status="4.2.2",
        reason="mailbox full, still trying",
        matched_by="verp",
        policy=BouncePolicy(),
        now=NOW + timedelta(days=WEEK + 1),
        cause="mailboxfull",
    )
    assert delay == "recorded"
    assert _soft(store, third, 2, 2 * WEEK + 1) == "counted"
    found = store.subscribers.subscriber_by_id(reader.id)
    assert (found.status, found.soft_bounces) == ("active", 2)
    store.close()


@pytest.mark.parametrize(("replies", "soft"), [((FULL, "250 ok", FULL), 1), ((FULL, FULL), 2)])
def test_a_full_mailbox_at_the_send_counts_again_after_an_issue_it_took(
    database_url: str, smtp_server, replies: tuple[str, ...], soft: int
) -> None:
    """A 552 for one issue, the next taken (250), a 552 again: the 250 is a success in
    between, and the soft count starts again; two 552 in a row count two."""
    inbox, port = smtp_server
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    options = SendOptions(sender="digest@news.example.org", workers=1)
    mailer = SmtpMailer("127.0.0.1", port, timeout=10)
    for week, reply in enumerate(replies):
        if reply != "250 ok":
            inbox.script[("rcpt", reader.email)] = [reply]
        make_issue(store, [reader], content=f"week {week}")
        deliver(store, mailer, compose, options, NOW + timedelta(days=WEEK * week))
    found = store.subscribers.subscriber_by_id(reader.id)
    assert (found.status, found.soft_bounces) == ("active", soft)
    assert [d.status for d in store.ledger.deliveries()] == [
        "failed" if r == FULL else "sent" for r in replies
    ]
    store.close()


@pytest.mark.parametrize(("hard_limit", "after_one"), [(1, "bounced"), (2, "active")])
def test_a_hard_bounce_drops_a_reader_at_the_hard_limit(
    database_url: str, hard_limit: int, after_one: str
) -> None:
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    one, two = _deliveries(store, reader, 2)
    policy = BouncePolicy(hard_limit=hard_limit)

    def hard(target: Bounced, n: int) -> None:
        store.bounces.record_bounce(
            message_hash=f"{n:064x}",
            target=target,
            kind=PERMANENT,
            status="5.1.1",
            reason="user unknown",
            matched_by="verp",
            policy=policy,
            now=NOW,
            cause="userunknown",
        )

    hard(one, 1)
    assert store.subscribers.subscriber_by_id(reader.id).status == after_one
    hard(two, 2)
    found = store.subscribers.subscriber_by_id(reader.id)
    assert (found.status, found.bounces, found.soft_bounces) == ("bounced", 2, 0)
    store.close()


def test_a_complaint_stops_the_mail_at_once(database_url: str) -> None:
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    [target] = _deliveries(store, reader, 1)
    done = store.bounces.record_bounce(
        message_hash="c" * 64,
        target=target,
        kind=COMPLAINT,
        status="abuse",
        reason="feedback report",
        matched_by="verp",
        policy=BouncePolicy(hard_limit=5),
        now=NOW,
    )
    assert done == "unsubscribed"
    assert store.subscribers.subscriber_by_id(reader.id).status == "unsubscribed"
    assert store.bounces.readers_at_risk()[0].reason == "feedback"
    store.close()


@pytest.mark.parametrize(
    ("reply", "status", "hard", "soft", "reason"),
    [
        ("550 5.1.1 user unknown", "bounced", 1, 0, "userunknown"),
        (FULL, "active", 0, 1, "mailboxfull"),
        ("550 5.7.1 Message rejected as spam", "active", 0, 1, "spamdetected"),
    ],
)
def test_a_refusal_at_the_send_is_hard_or_soft_by_its_words(
    database_url: str, smtp_server, reply: str, status: str, hard: int, soft: int, reason: str
) -> None:
    inbox, port = smtp_server
    store = open_store(database_url)
    reader = add_readers(store, 1)[0]
    inbox.script[("rcpt", reader.email)] = [reply]
    make_issue(store, [reader])
    options = SendOptions(sender="digest@news.example.org", workers=1)
    counts = deliver(store, SmtpMailer("127.0.0.1", port, timeout=10), compose, options, NOW)
    assert counts.failed == 1
    found = store.subscribers.subscriber_by_id(reader.id)
    assert (found.status, found.bounces, found.soft_bounces) == (status, hard, soft)
    [risk] = store.bounces.readers_at_risk()
    assert (risk.reason, risk.soft_since) == (reason, NOW if soft else None)
    store.close()


# -- end to end: a real send, a real bounce mailbox ---------------------------------------------

READERS = {
    "postfix-failed.eml": "gone@example.com",
    "postfix-delayed.eml": "slow@example.net",
    "exim-failed.eml": "disabled@example.org",
    "exim-plain-failed.eml": "left@example.org",
    "gmail-failed.eml": "nosuchuser@example.net",
    "arf-abuse.eml": "complains@example.com",
    "out-of-office.eml": "away@example.com",
}


def site(tmp_path: Path, database_url: str, port: int) -> Config:
    (tmp_path / "config.toml").write_text(
        f"""
[site]
articles = "{ARTICLES}"
base_url = "https://news.example.org"
[state]
database = "{database_url}"
[email]
sender = "News <digest@news.example.org>"
[smtp]
url = "smtp://127.0.0.1:{port}"
retry_backoff = 0
max_bounces = 2
[web]
secret_key = "a secret key for the tests"
""",
        "utf-8",
    )
    return load_config(tmp_path / "config.toml", env={})


def state(store: Store) -> dict[str, tuple[str, int]]:
    return {s.email: (s.status, s.bounces) for s in store.subscribers.all()}


def invoke(tmp_path: Path, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--config", str(tmp_path / "config.toml")])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_list_says_when_a_count_has_aged_out(tmp_path: Path, database_url: str) -> None:
    config = site(tmp_path, database_url, 25)
    store = open_store(config.database_url)
    reader = add_readers(store, 1)[0]
    old, new = _deliveries(store, reader, 2)
    today = datetime.now(UTC)
    _report(store, old, "a" * 64, PERMANENT, today - timedelta(days=100))
    [listed] = json.loads(invoke(tmp_path, "bounces", "list", "--json"))
    assert (listed["bounces"], listed["bounces_aged_out"]) == (1, True)
    assert "hard 1/2 (aged out: the next counts as the first)" in invoke(
        tmp_path, "bounces", "list"
    )
    _report(store, new, "b" * 64, PERMANENT, today)
    [listed] = json.loads(invoke(tmp_path, "bounces", "list", "--json"))
    assert (listed["bounces"], listed["bounces_aged_out"]) == (1, False)  # the first again
    assert listed["bounces_counted_at"].startswith(today.date().isoformat())
    store.close()


def test_bounce_mail_is_matched_to_its_delivery_and_acted_on_once(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    config = site(tmp_path, database_url, port)
    store = open_store(config.database_url)
    others = ["forged@example.com", "fallback@example.com", "byaddress@example.com"]
    for email in [*READERS.values(), *others]:
        store.subscribers.add_subscriber(
            email, "en", ["cost"], status="active", consent_source="t", now=NOW
        )
    report = issuing.send_digests(
        config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store
    )
    assert report.sent == 10

    # Each delivery left with its own envelope sender, naming it under the site's key.
    deliveries = {d.email: d for d in store.ledger.deliveries()}
    secret = secret_key(config)
    for email, envelope in inbox.mail_from.items():
        number = int(VERP.fullmatch(envelope)[1])
        assert number == deliveries[email].id
        assert envelope == verp_address(secret, RETURN, number)

    bounces = tmp_path / "bounces"
    box = mailbox.Maildir(bounces, create=True)
    for name, email in READERS.items():
        box.add(
            fill(
                name,
                return_path=inbox.mail_from[email],
                reader=email,
                message_id=deliveries[email].message_id,
            )
        )
    # A forged bounce: a return address of the right shape whose MAC is not the site's.
    number = VERP.fullmatch(inbox.mail_from["forged@example.com"])[1]
    box.add(
        fill(
            "postfix-failed.eml",
            return_path=f"bounces+{number}.{'0' * 16}@news.example.org",
            reader="forged@example.com",
            message_id="<nothing@x>",
        )
    )
    # No return address at all (a relay that rewrote it): the quoted Message-ID decides.
    box.add(
        fill(
            "exim-failed.eml",
            return_path="digest@news.example.org",
            reader="fallback@example.com",
            message_id=deliveries["fallback@example.com"].message_id,
        )
    )
    # Neither a return address nor a Message-ID it knows: the reported recipient decides.
    box.add(
        fill(
            "postfix-failed.eml",
            return_path="digest@news.example.org",
            reader="byaddress@example.com",
            message_id="<rewritten.by.a.relay@example.net>",
        )
    )
    before = state(store)

    dry = invoke(tmp_path, "bounces", "process", str(bounces), "--dry-run")
    assert "gone@example.com (by verp): would count" in dry
    assert "complains@example.com (by verp): would unsubscribe" in dry
    assert "not a bounce (an auto-reply): would move to replies/" in dry
    assert state(store) == before and len(box) == 10  # nothing recorded, nothing moved

    out = invoke(tmp_path, "bounces", "process", str(bounces))
    assert "ignored: forged" in out and "fallback@example.com (by message-id): counted" in out
    assert "byaddress@example.com (by recipient): counted" in out
    assert "not a bounce (an auto-reply): moved to replies/" in out
    after = state(store)
    assert after["gone@example.com"] == ("active", 1)  # hard_limit 2 (smtp.max_bounces = 2)
    assert after["nosuchuser@example.net"] == ("active", 1)
    assert after["left@example.org"] == ("active", 1)
    assert after["disabled@example.org"] == ("active", 0)  # a disabled mailbox: soft (below)
    assert after["fallback@example.com"] == ("active", 0)
    assert after["byaddress@example.com"] == ("active", 1)
    assert after["slow@example.net"] == ("active", 0)  # a delay is only recorded
    assert after["complains@example.com"] == ("unsubscribed", 0)  # at once
    assert after["forged@example.com"] == ("active", 0)
    assert after["away@example.com"] == ("active", 0)
    assert len(mailbox.Maildir(bounces, create=False)) == 0
    processed = mailbox.Maildir(bounces / "processed", create=False)
    assert len(processed) == 9
    assert len(mailbox.Maildir(bounces / "replies", create=False)) == 1  # the out-of-office

    # A rerun finds nothing; the same messages put back change nothing either.
    assert "0 message(s) read" in invoke(tmp_path, "bounces", "process", str(bounces))
    for key in processed.iterkeys():
        box.add(processed.get_bytes(key))
    again = invoke(tmp_path, "bounces", "process", str(bounces))
    assert "counted" not in again.replace("already counted", "") and "duplicate" in again
    assert state(store) == after

    listed = json.loads(invoke(tmp_path, "bounces", "list", "--json"))
    by_email = {r["email"]: r for r in listed}
    assert set(by_email) == {
        "gone@example.com",
        "nosuchuser@example.net",
        "left@example.org",
        "disabled@example.org",
        "fallback@example.com",
        "byaddress@example.com",
        "slow@example.net",
        "complains@example.com",
    }
    assert by_email["slow@example.net"]["temporary"] == 1
    assert by_email["slow@example.net"]["last"]["status"] == "4.4.1"
    assert by_email["complains@example.com"]["complaints"] == 1
    assert by_email["gone@example.com"]["max_bounces"] == 2
    assert "User unknown" in by_email["gone@example.com"]["last"]["reason"]
    text = invoke(tmp_path, "bounces", "list")
    assert "gone@example.com\tactive\thard 1/2\tsoft 0/5\tuserunknown" in text
    assert by_email["disabled@example.org"]["soft_bounces"] == 1  # counted: 5.x.x, soft
    assert by_email["fallback@example.com"]["soft_bounces"] == 1
    assert by_email["slow@example.net"]["soft_bounces"] == 0  # a delay is only recorded
    assert by_email["gone@example.com"]["reason"] == "userunknown"

    status = invoke(tmp_path, "send", "status")
    assert "bounce mail: 4 permanent, 3 temporary, 1 complaint(s)" in status
    status = json.loads(invoke(tmp_path, "send", "status", "--json"))
    assert status["bounces"] == {"permanent": 4, "temporary": 3, "complaint": 1}
    store.close()


def test_an_mbox_is_read_and_emptied_into_processed(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    config = site(tmp_path, database_url, port)
    store = open_store(config.database_url)
    store.subscribers.add_subscriber(
        "gone@example.com", "en", ["cost"], status="active", consent_source="t", now=NOW
    )
    issuing.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store)
    [delivery] = store.ledger.deliveries()
    path = tmp_path / "bounces.mbox"
    box = mailbox.mbox(path)
    box.add(
        fill(
            "gmail-failed.eml",
            return_path=inbox.mail_from["gone@example.com"],
            reader="gone@example.com",
            message_id=delivery.message_id,
        )
    )
    box.flush()
    box.close()

    umask = os.umask(0o022)  # the usual one: what is not made owner-only is world-readable
    try:
        out = invoke(tmp_path, "bounces", "process", str(path))
    finally:
        os.umask(umask)
    assert "gone@example.com (by verp): counted" in out
    assert store.subscribers.subscriber("gone@example.com").bounces == 1
    assert len(mailbox.mbox(path)) == 0
    processed = tmp_path / "processed" / "bounces.mbox"
    assert len(mailbox.mbox(processed)) == 1
    # a bounce names its reader
    assert stat.S_IMODE(processed.stat().st_mode) == 0o600
    assert stat.S_IMODE(processed.parent.stat().st_mode) == 0o700
    assert "0 message(s) read" in invoke(tmp_path, "bounces", "process", str(path))
    store.close()


@pytest.mark.parametrize("form", ["maildir", "mbox"])
def test_what_is_no_bounce_goes_to_replies_and_what_is_no_mail_stays(
    tmp_path: Path, database_url: str, smtp_server, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    inbox, port = smtp_server
    config = site(tmp_path, database_url, port)
    store = open_store(config.database_url)
    store.subscribers.add_subscriber(
        "gone@example.com", "en", ["cost"], status="active", consent_source="t", now=NOW
    )
    issuing.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store)
    [delivery] = store.ledger.deliveries()
    envelope = inbox.mail_from["gone@example.com"]
    mail = {
        name: fill(
            f"{name}.eml",
            return_path=envelope,
            reader="gone@example.com",
            message_id=delivery.message_id,
        )
        for name in ("gmail-failed", "human-reply", "out-of-office")
    }
    mail |= {"empty": b"", "random": random.Random(29).randbytes(200), "cut": TRUNCATED + b"\n"}
    path = tmp_path / ("bounces" if form == "maildir" else "bounces.mbox")
    box = mailbox.Maildir(path) if form == "maildir" else mailbox.mbox(path)
    key = {name: str(box.add(data)) for name, data in mail.items()}
    box.close()
    folder = {
        name: path / name if form == "maildir" else tmp_path / name / path.name
        for name in ("processed", "replies")
    }

    def process(*args: str) -> tuple[str, str]:
        caplog.clear()
        umask = os.umask(0o022)  # the usual one: what is not made owner-only is world-readable
        try:
            result = CliRunner().invoke(
                main,
                ["bounces", "process", str(path), *args, "--config", str(tmp_path / "config.toml")],
            )
        finally:
            os.umask(umask)
        assert result.exit_code == 0, result.output
        assert "Traceback" not in result.output + caplog.text
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        return result.stdout, result.stderr

    out, _ = process("--dry-run")
    assert f"{key['human-reply']}: not a bounce (a reply): would move to replies/" in out
    assert len(mailbox.Maildir(path) if form == "maildir" else mailbox.mbox(path)) == 6

    out, summary = process()
    assert f"{key['human-reply']}: not a bounce (a reply): moved to replies/" in out
    assert f"{key['out-of-office']}: not a bounce (an auto-reply): moved to replies/" in out
    assert f"{key['empty']}: unreadable (empty): left in place" in out
    assert f"{key['random']}: unreadable (no header): left in place" in out
    assert (  # a bounce cut short: flufl.bounce breaks on it, a person reads it
        f"{key['cut']}: not a bounce (a mail system's notice naming no failed recipient)" in out
    )
    assert "gone@example.com (by verp): counted" in out
    assert summary == (
        f"6 message(s) read; 1 moved to {folder['processed']}; "
        f"3 not a bounce, moved to {folder['replies']}; 2 unreadable, left in place\n"
    )
    assert store.subscribers.subscriber("gone@example.com").bounces == 1
    left = mailbox.Maildir(path) if form == "maildir" else mailbox.mbox(path)
    assert sorted(left.get_bytes(k).strip() for k in left.iterkeys()) == sorted(
        [b"", mail["random"].strip()]
    )
    opened = mailbox.Maildir if form == "maildir" else mailbox.mbox
    assert len(opened(folder["processed"])) == 1 and len(opened(folder["replies"])) == 3
    replies = folder["replies"]  # a reply names its reader too: owner-only
    if form == "mbox":
        assert stat.S_IMODE(replies.stat().st_mode) == 0o600
        replies = replies.parent
    assert stat.S_IMODE(replies.stat().st_mode) == 0o700

    out, summary = process()
    assert summary == "2 message(s) read; 2 unreadable, left in place\n"
    assert "moved" not in out
    assert store.subscribers.subscriber("gone@example.com").bounces == 1
    assert len(opened(folder["processed"])) == 1 and len(opened(folder["replies"])) == 3
    store.close()


def test_a_folder_that_is_no_mailbox_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("", "utf-8")
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        main,
        ["bounces", "process", str(tmp_path / "empty"), "--config", str(tmp_path / "config.toml")],
    )
    assert result.exit_code == 2
    assert f"{tmp_path / 'empty'}: not a Maildir" in result.output


def test_without_verp_one_return_path_serves_and_the_message_id_matches(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    """For a relay that sends as one address only: that address, and the fallbacks."""
    inbox, port = smtp_server
    site(tmp_path, database_url, port)
    path = tmp_path / "config.toml"
    path.write_text(
        path.read_text("utf-8").replace(
            "[email]\n", '[email]\nverp = false\nreturn_path = "bounces@news.example.org"\n'
        ),
        "utf-8",
    )
    config = load_config(path, env={})
    store = open_store(config.database_url)
    store.subscribers.add_subscriber(
        "gone@example.com", "en", ["cost"], status="active", consent_source="t", now=NOW
    )
    issuing.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store)
    assert inbox.mail_from == {"gone@example.com": "bounces@news.example.org"}
    [delivery] = store.ledger.deliveries()
    box = mailbox.Maildir(tmp_path / "bounces", create=True)
    box.add(
        fill(
            "postfix-failed.eml",
            return_path="bounces@news.example.org",
            reader="gone@example.com",
            message_id=delivery.message_id,
        )
    )
    out = invoke(tmp_path, "bounces", "process", str(tmp_path / "bounces"))
    assert "gone@example.com (by message-id): counted" in out
    store.close()
