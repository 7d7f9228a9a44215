"""Delivery against a real SMTP server, on SQLite and PostgreSQL: every reader exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from syndicate.deliver import MaildirMailer, SmtpMailer, deliver
from syndicate.errors import DeliveryError
from syndicate.store import open_store
from tests.conftest import ROOT
from tests.sending import NOW, add_readers, compose, mailer, make_issue, options


@pytest.fixture
def store(database_url: str):
    opened = open_store(database_url)
    yield opened
    opened.close()


def everyone(count: int) -> Counter[str]:
    return Counter({f"reader{n}@example.com": 1 for n in range(count)})


def test_every_reader_gets_one_message_and_a_rerun_sends_nothing(store, smtp_server) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 12))
    counts = deliver(store, mailer(port), compose, options(workers=3), NOW)
    assert (counts.sent, counts.failed, counts.uncertain) == (12, 0, 0)
    assert inbox.counts() == everyone(12)
    replies = {d.reply for d in store.deliveries("sent")}
    assert all(reply.startswith("250 2.0.0 queued as") for reply in replies)
    again = deliver(store, mailer(port), compose, options(), NOW)
    assert again.sent == 0 and inbox.counts() == everyone(12)


def test_the_same_content_is_never_issued_twice(store) -> None:
    readers = add_readers(store, 2)
    make_issue(store, readers)
    assert (
        store.create_issue(
            key="en-cost",
            lang="en",
            audiences=["cost"],
            content_hash="hash-one",
            subject="again",
            rendered="",
            articles=[],
            readers=readers,
            message_id=lambda i, r: f"<x{i}.{r}@example.org>",
            now=NOW,
        )
        is None
    )
    assert store.sent_articles("en", ["cost"]) == {("en", "a"): "digest-one"}


def test_temporary_failures_are_retried_until_the_server_recovers(store, smtp_server) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 5))
    inbox.script[("rcpt", "reader1@example.com")] = ["451 4.3.0 try later", "451 4.3.0 again"]
    inbox.script[("data", "reader3@example.com")] = ["421 4.3.2 closing"]
    counts = deliver(store, mailer(port), compose, options(workers=2), NOW)
    assert counts.sent == 5 and inbox.counts() == everyone(5)


def test_a_server_that_stays_down_leaves_the_delivery_pending_for_the_next_run(
    store, smtp_server
) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 3))
    inbox.script[("rcpt", "reader0@example.com")] = ["452 4.2.2 mailbox full"] * 3
    counts = deliver(store, mailer(port), compose, options(retries=2), NOW)
    assert (counts.sent, counts.deferred) == (2, 1)
    assert [d.email for d in store.deliveries("pending")] == ["reader0@example.com"]
    later = deliver(store, mailer(port), compose, options(), NOW)
    assert later.sent == 1 and inbox.counts() == everyone(3)


def test_a_refused_reader_is_recorded_and_bounced_without_stopping_the_rest(
    store, smtp_server
) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 4))
    inbox.script[("rcpt", "reader2@example.com")] = ["550 5.1.1 no such user"]
    counts = deliver(store, mailer(port), compose, options(max_bounces=1), NOW)
    assert (counts.sent, counts.failed) == (3, 1)
    assert counts.failures == [("reader2@example.com", "550 5.1.1 no such user")]
    assert "reader2@example.com" not in inbox.counts()
    assert store.subscriber("reader2@example.com").status == "bounced"
    [failed] = store.deliveries("failed")
    assert failed.reply == "550 5.1.1 no such user"


def test_a_connection_dropped_before_the_message_is_complete_is_retried(store, smtp_server) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 6))
    inbox.script[("rcpt", "reader2@example.com")] = ["DROP"]
    inbox.script[("rcpt", "reader4@example.com")] = ["DROP"]
    counts = deliver(store, mailer(port), compose, options(workers=2), NOW)
    assert counts.sent == 6 and inbox.counts() == everyone(6)


def test_a_connection_dropped_after_the_message_is_marked_uncertain_not_resent(
    store, smtp_server
) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 4))
    inbox.script[("data", "reader1@example.com")] = ["DROP"]
    counts = deliver(store, mailer(port), compose, options(workers=1), NOW)
    assert (counts.sent, counts.uncertain) == (3, 1)
    assert [d.email for d in store.deliveries("uncertain")] == ["reader1@example.com"]
    deliver(store, mailer(port), compose, options(), NOW)
    assert "reader1@example.com" not in inbox.counts()


def test_readers_who_left_before_their_turn_are_skipped(store, smtp_server) -> None:
    inbox, port = smtp_server
    readers = add_readers(store, 3)
    make_issue(store, readers)
    store.set_status(readers[1].id, "unsubscribed", NOW)
    counts = deliver(store, mailer(port), compose, options(), NOW)
    assert (counts.sent, counts.skipped) == (2, 1)
    assert "reader1@example.com" not in inbox.counts()


def test_a_refused_login_stops_the_run_and_keeps_everything_pending(store) -> None:
    make_issue(store, add_readers(store, 2))
    port = _closed_port()
    broken = SmtpMailer("127.0.0.1", port, timeout=2)
    counts = deliver(store, broken, compose, options(retries=1), NOW)
    assert counts.deferred == 2 and len(store.deliveries("pending")) == 2


def test_header_injection_through_an_address_never_reaches_the_server(store, smtp_server) -> None:
    inbox, port = smtp_server
    [reader] = add_readers(store, 1)
    with store.engine.begin() as db:  # as if a bad address had slipped past validation
        from syndicate.store import subscribers

        db.execute(
            subscribers.update().values(email="reader0@example.com\r\nBcc: victim@example.net")
        )
    hostile = store.subscriber_by_id(reader.id)
    make_issue(store, [hostile])
    counts = deliver(store, mailer(port), compose, options(), NOW)
    assert counts.sent == 0 and counts.failed == 1
    assert inbox.received == []


def test_maildir_delivery_writes_each_message_once(store, tmp_path: Path) -> None:
    make_issue(store, add_readers(store, 3))
    box = tmp_path / "outbox" / "maildir"
    counts = deliver(store, MaildirMailer(box), compose, options(workers=2), NOW)
    assert counts.sent == 3
    files = sorted((box / "new").iterdir())
    assert len(files) == 3 and not list((box / "tmp").iterdir())
    assert sorted(f.read_bytes().split(b"To: ")[1].split(b"\n")[0] for f in files) == [
        f"reader{n}@example.com".encode() for n in range(3)
    ]


def _closed_port() -> int:
    from tests.mailserver import free_port

    return free_port()


def _sender(database_url: str, port: int, workers: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sending", database_url, str(port), str(workers)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_sender_killed_mid_batch_then_rerun_delivers_each_reader_once(
    store,
    smtp_server,
    database_url: str,
) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 30))
    inbox.script[("data", "reader11@example.com")] = ["HOLD"]
    victim = _sender(database_url, port, workers=1)
    assert inbox.holding.wait(30), victim.stderr.read().decode()
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    inbox.release.set()  # the server accepts it, but the 250 never reaches the dead sender

    counts = deliver(store, mailer(port), compose, options(workers=3), NOW)
    assert counts.uncertain == 1
    assert inbox.counts() == everyone(30)
    [lost] = store.deliveries("uncertain")
    assert lost.email == "reader11@example.com"
    assert len(store.deliveries("sent")) == 29


def test_two_senders_at_once_never_deliver_a_row_twice(
    store,
    smtp_server,
    database_url: str,
) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 60))
    senders = [_sender(database_url, port, workers=3) for _ in range(2)]
    outputs = [s.communicate(timeout=60) for s in senders]
    assert [s.returncode for s in senders] == [0, 0], outputs
    assert inbox.counts() == everyone(60)
    sent = sum(int(out.split()[0]) for out, _ in outputs)
    assert sent == 60


def test_smtp_urls_name_server_security_and_login() -> None:
    plain = SmtpMailer.from_url("smtp://127.0.0.1:2525")
    assert (plain.host, plain.port, plain.security, plain.username) == (
        "127.0.0.1",
        2525,
        "plain",
        None,
    )
    tls = SmtpMailer.from_url("smtps://user:p%40ss@mail.example.org")
    assert (tls.port, tls.security, tls.username, tls.password) == (465, "tls", "user", "p@ss")
    starttls = SmtpMailer.from_url("smtp+starttls://mail.example.org", username="u", password="p")
    assert (starttls.port, starttls.security, starttls.username) == (587, "starttls", "u")
    with pytest.raises(DeliveryError, match="not an SMTP URL"):
        SmtpMailer.from_url("http://example.org")
