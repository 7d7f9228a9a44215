"""Delivery against a real SMTP server, on SQLite and PostgreSQL: every reader exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from syndicate.errors import DatabaseError, DeliveryError
from syndicate.sending.loop import SendOptions, deliver
from syndicate.sending.pacing import Pacer
from syndicate.sending.transports import MaildirMailer, SmtpMailer
from syndicate.state import open_store
from syndicate.state.locks import run_lock
from syndicate.state.schema import deliveries
from tests.conftest import ROOT
from tests.sending import (
    NOW,
    SENDER,
    add_readers,
    compose,
    create_issue,
    everyone,
    mailer,
    make_issue,
    options,
)


@pytest.mark.parametrize("micro_batch", [1, 5])
def test_every_reader_gets_one_message_and_a_rerun_sends_nothing(
    store, smtp_server, micro_batch: int
) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 12))
    counts = deliver(store, mailer(port), compose, options(3, micro_batch=micro_batch), NOW)
    assert (counts.sent, counts.failed, counts.uncertain) == (12, 0, 0)
    assert inbox.counts() == everyone(12)
    replies = {d.reply for d in store.ledger.deliveries("sent")}
    assert all(reply.startswith("250 2.0.0 queued as") for reply in replies)
    again = deliver(store, mailer(port), compose, options(), NOW)
    assert again.sent == 0 and inbox.counts() == everyone(12)


def test_a_delivery_due_at_this_very_second_is_sent_now(store, smtp_server) -> None:
    """A local-time delivery whose time is now, to the microsecond, is due: the planner and
    the ledger write and compare times in one form (on SQLite, text)."""
    inbox, port = smtp_server
    issue = make_issue(store, add_readers(store, 2))
    with store.engine.begin() as db:
        due = deliveries.update().where(deliveries.c.issue_id == issue.id)
        db.execute(due.values(not_before=NOW))
    counts = deliver(store, mailer(port), compose, options(), NOW)
    assert counts.sent == 2 and inbox.counts() == everyone(2)
    late = NOW.replace(microsecond=1)
    with store.engine.begin() as db:
        db.execute(deliveries.update().values(status="pending", not_before=late))
    assert deliver(store, mailer(port), compose, options(), NOW).sent == 0


def test_lines_that_begin_with_a_dot_arrive_as_written(store, any_smtp_server) -> None:
    """Dot-stuffing (RFC 5321 4.5.2): a body line that begins with a dot, the first one and
    one that is a dot alone included, is not taken for the end of data and arrives as it was."""
    inbox, port = any_smtp_server
    make_issue(store, add_readers(store, 2))
    dotted = b".first\r\n..two\r\n.\r\nmiddle\r\n.\r\n.last"

    def compose_dotted(issue, claim) -> bytes:
        head = compose(issue, claim).split(b"\n\n", 1)[0].replace(b"\n", b"\r\n")
        return head + b"\r\n\r\n" + (dotted if claim.email.startswith("reader0") else b"plain")

    counts = deliver(store, mailer(port), compose_dotted, options(workers=1), NOW)
    assert counts.sent == 2
    bodies = {rcpt: raw.split(b"\r\n\r\n", 1)[1] for rcpt, raw in inbox.received}
    assert bodies == {
        "reader0@example.com": dotted + b"\r\n",
        "reader1@example.com": b"plain\r\n",
    }


def test_the_same_content_is_never_issued_twice(store) -> None:
    readers = add_readers(store, 2)
    make_issue(store, readers)
    assert (
        create_issue(
            store,
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
    assert store.issues.sent_articles("en", ["cost"]) == {("en", "a"): "article-one"}


def test_temporary_failures_are_retried_until_the_server_recovers(store, any_smtp_server) -> None:
    inbox, port = any_smtp_server
    make_issue(store, add_readers(store, 5))
    inbox.script[("rcpt", "reader1@example.com")] = ["451 4.3.0 try later", "451 4.3.0 again"]
    inbox.script[("data", "reader3@example.com")] = ["421 4.3.2 closing"]
    counts = deliver(store, mailer(port), compose, options(workers=2), NOW)
    assert counts.sent == 5 and inbox.counts() == everyone(5)


def test_to_a_pipelining_server_the_envelope_goes_in_one_round_trip(store, smtp_server) -> None:
    """MAIL, RCPT and DATA together; a recipient refused among them is read in its turn, the
    connection is reset and the next reader goes through the same connection."""
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 4))
    inbox.script[("rcpt", "reader1@example.com")] = ["550 5.1.1 no such user"]
    counts = deliver(store, mailer(port), compose, options(workers=1), NOW)
    assert (counts.sent, counts.failed) == (3, 1)
    assert inbox.pipelined == 4 and inbox.most_sessions == 1
    assert [d.reply for d in store.ledger.deliveries("failed")] == ["550 5.1.1 no such user"]


def test_a_server_that_stays_down_leaves_the_delivery_pending_for_the_next_run(
    store, any_smtp_server
) -> None:
    inbox, port = any_smtp_server
    make_issue(store, add_readers(store, 3))
    inbox.script[("rcpt", "reader0@example.com")] = ["452 4.2.2 mailbox full"] * 3
    counts = deliver(store, mailer(port), compose, options(retries=2), NOW)
    assert (counts.sent, counts.deferred) == (2, 1)
    assert [d.email for d in store.ledger.deliveries("pending")] == ["reader0@example.com"]
    later = deliver(store, mailer(port), compose, options(), NOW)
    assert later.sent == 1 and inbox.counts() == everyone(3)


def test_a_refused_reader_is_recorded_and_bounced_without_stopping_the_rest(
    store, any_smtp_server
) -> None:
    inbox, port = any_smtp_server
    make_issue(store, add_readers(store, 4))
    inbox.script[("rcpt", "reader2@example.com")] = ["550 5.1.1 no such user"]
    counts = deliver(store, mailer(port), compose, options(), NOW)  # hard_limit 1
    assert (counts.sent, counts.failed) == (3, 1)
    assert counts.failures == [("reader2@example.com", "550 5.1.1 no such user")]
    assert "reader2@example.com" not in inbox.counts()
    assert store.subscribers.subscriber("reader2@example.com").status == "bounced"
    [failed] = store.ledger.deliveries("failed")
    assert failed.reply == "550 5.1.1 no such user"


def test_a_reply_is_recorded_as_the_server_wrote_it_quotes_and_all(store, smtp_server) -> None:
    """What the ledger binds itself (PostgreSQL sends a commit's statements as one script)
    reaches the row unchanged."""
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 2))
    odd = "550 5.1.1 <o'brien\\x@example.com>: 100% 'unknown'; DROP TABLE deliveries -- ünï"
    inbox.script[("rcpt", "reader1@example.com")] = [odd]
    counts = deliver(store, mailer(port), compose, options(workers=1), NOW)
    assert (counts.sent, counts.failed) == (1, 1)
    assert [d.reply for d in store.ledger.deliveries("failed")] == [odd]
    assert [d.email for d in store.ledger.deliveries("sent")] == ["reader0@example.com"]


def test_a_refused_sender_stops_the_run_and_keeps_every_reader_pending(
    store, any_smtp_server
) -> None:
    """Every reader would fail the same way: the run stops at the first refusal, saying so,
    and nobody is marked failed or bounced."""
    inbox, port = any_smtp_server
    make_issue(store, add_readers(store, 3))
    inbox.script[("mail", "")] = ["550 5.7.1 sender not allowed"]
    with pytest.raises(DeliveryError, match=r"refuses the sender address: 550 5\.7\.1"):
        deliver(store, mailer(port), compose, options(workers=1), NOW)
    assert inbox.received == [] and len(store.ledger.deliveries("pending")) == 3
    assert all(reader.status == "active" for reader in store.subscribers.all())


def test_a_connection_dropped_before_the_message_is_complete_is_retried(
    store, any_smtp_server
) -> None:
    inbox, port = any_smtp_server
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
    assert [d.email for d in store.ledger.deliveries("uncertain")] == ["reader1@example.com"]
    deliver(store, mailer(port), compose, options(), NOW)
    assert "reader1@example.com" not in inbox.counts()


def test_readers_who_left_before_their_turn_are_skipped(store, smtp_server) -> None:
    inbox, port = smtp_server
    readers = add_readers(store, 3)
    make_issue(store, readers)
    store.subscribers.set_status(readers[1].id, "unsubscribed", NOW)
    counts = deliver(store, mailer(port), compose, options(), NOW)
    assert (counts.sent, counts.skipped) == (2, 1)
    assert "reader1@example.com" not in inbox.counts()


def test_a_batch_skips_its_own_readers_who_left_and_leaves_the_other_batches(
    store, smtp_server
) -> None:
    inbox, port = smtp_server
    readers = add_readers(store, 4)
    issue = make_issue(store, readers)
    first = [reader.id for reader in readers[:2]]
    with store.engine.begin() as db:
        batch = sa.case((deliveries.c.subscriber_id.in_(first), 0), else_=1)
        db.execute(sa.update(deliveries).values(batch_no=batch))
    for reader in (readers[1], readers[3]):
        store.subscribers.set_status(reader.id, "unsubscribed", NOW)
    counts = deliver(store, mailer(port), compose, options(), NOW, batch=(issue.id, 0))
    assert (counts.sent, counts.skipped, counts.left) == (1, 1, 0)
    assert inbox.counts() == Counter({"reader0@example.com": 1})
    assert [d.email for d in store.ledger.deliveries("skipped")] == ["reader1@example.com"]
    pending = {d.email for d in store.ledger.deliveries("pending")}
    assert pending == {"reader2@example.com", "reader3@example.com"}


def test_an_unreachable_server_stops_the_run_and_keeps_everything_pending(store) -> None:
    make_issue(store, add_readers(store, 2))
    port = _closed_port()
    broken = SmtpMailer("127.0.0.1", port, timeout=2)
    with pytest.raises(DeliveryError) as raised:
        deliver(store, broken, compose, options(retries=1), NOW)
    assert str(raised.value) == (
        f"cannot reach the SMTP server 127.0.0.1:{port} ([Errno 111] Connection refused); "
        "0 sent, 2 left for the next run"
    )
    assert len(store.ledger.deliveries("pending")) == 2


def test_header_injection_through_an_address_never_reaches_the_server(store, smtp_server) -> None:
    inbox, port = smtp_server
    [reader] = add_readers(store, 1)
    with store.engine.begin() as db:  # as if a bad address had slipped past validation
        from syndicate.state.schema import subscribers

        db.execute(
            subscribers.update().values(email="reader0@example.com\r\nBcc: victim@example.net")
        )
    hostile = store.subscribers.subscriber_by_id(reader.id)
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
    victim = _sender(database_url, port, workers=3)
    assert inbox.holding.wait(30), victim.stderr.read().decode()
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    inbox.release.set()  # the server accepts it, but the 250 never reaches the dead sender
    assert inbox.wait_idle()
    assert _sessions_gone(database_url)  # PostgreSQL ends a dead client's sessions soon after
    arrived = inbox.counts()  # what the killed sender got to the end of data of

    counts = deliver(store, mailer(port), compose, options(workers=3), NOW)
    uncertain = {d.email for d in store.ledger.deliveries("uncertain")}
    assert "reader11@example.com" in uncertain and counts.uncertain == len(uncertain)
    assert len(uncertain) <= 3  # at most one per connection: the one it had claimed
    received = inbox.counts()
    assert max(received.values()) == 1  # nobody twice
    assert set(everyone(30)) - uncertain <= set(received)  # nobody left out but the uncertain
    assert set(received) - set(arrived) <= set(everyone(30)) - uncertain  # none resent
    assert len(store.ledger.deliveries("sent")) == 30 - len(uncertain)


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


def test_a_connection_closed_inside_data_is_retried_not_uncertain(store, any_smtp_server) -> None:
    inbox, port = any_smtp_server
    make_issue(store, add_readers(store, 4))
    inbox.script[("body", "reader1@example.com")] = ["DROP", "DROP"]
    counts = deliver(store, mailer(port), compose, options(workers=1), NOW)
    assert (counts.sent, counts.uncertain) == (4, 0)
    assert inbox.counts() == everyone(4)


def test_a_message_accepted_then_cut_off_is_uncertain_and_arrives_once(store, smtp_server) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 3))
    inbox.script[("accepted", "reader1@example.com")] = ["DROP"]
    counts = deliver(store, mailer(port), compose, options(workers=1), NOW)
    assert (counts.sent, counts.uncertain) == (2, 1)
    [lost] = store.ledger.deliveries("uncertain")
    assert lost.email == "reader1@example.com" and "after the end of data" in lost.reply
    deliver(store, mailer(port), compose, options(), NOW)
    assert inbox.counts() == everyone(3)


def test_a_451_burst_is_retried_and_what_outlasts_it_waits_for_the_next_run(
    store, smtp_server
) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 20))
    for n in range(0, 20, 2):  # every other reader: refused twice, then accepted
        inbox.script[("rcpt", f"reader{n}@example.com")] = ["451 4.7.1 slow down"] * 2
    inbox.script[("rcpt", "reader5@example.com")] = ["451 4.7.1 slow down"] * 4
    counts = deliver(store, mailer(port), compose, options(workers=3, retries=2), NOW)
    assert (counts.sent, counts.deferred, counts.uncertain, counts.failed) == (19, 1, 0, 0)
    [waiting] = store.ledger.deliveries("pending")
    assert waiting.email == "reader5@example.com" and waiting.reply.startswith("451")
    attempts = {d.email: d.attempts for d in store.ledger.deliveries()}
    assert (attempts["reader0@example.com"], attempts["reader1@example.com"]) == (3, 1)
    assert attempts["reader5@example.com"] == 3
    later = deliver(store, mailer(port), compose, options(retries=2), NOW)
    assert later.sent == 1 and inbox.counts() == everyone(20)
    assert store.ledger.deliveries("sent")[5].attempts == 5  # the fourth 451, then the 250


def test_a_finished_run_leaves_its_sessions_pooled_and_holding_no_lock(
    postgres_url: str, smtp_server
) -> None:
    """Its database sessions go back to the pool for the next batch, without the run's
    liveness lock (PostgreSQL's): the run is seen as over, as if they had ended."""
    store = open_store(postgres_url)
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 6))
    deliver(store, mailer(port), compose, options(workers=3), NOW)
    assert len(inbox.received) == 6 and store.engine.pool.checkedin() >= 3
    with store.engine.connect() as db:
        key = run_lock(db)
        [run_id] = db.execute(sa.text("SELECT id FROM send_runs")).scalars()
        assert db.execute(sa.select(sa.func.pg_try_advisory_lock(key, run_id))).scalar()
        db.execute(sa.select(sa.func.pg_advisory_unlock(key, run_id)))
    store.close()


def test_a_relay_that_refuses_connections_with_421_slows_the_send(store, smtp_server) -> None:
    """A 421 at the greeting (too many connections) is a slow-down reply like a 421 to a
    command: the rate is cut, the connection tried again, and everyone still gets one."""
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 3))
    inbox.script[("greeting", "")] = ["421 4.7.0 too many connections, slow down"] * 2
    pace = Pacer(100.0)
    counts = deliver(store, mailer(port), compose, options(workers=1, pace=pace), NOW)
    assert counts.sent == 3 and inbox.counts() == everyone(3)
    assert pace.cut is not None and pace.current() < 100.0


class _Faulty:
    """The real SMTP transport, but one recipient's send raises what no code expects."""

    def __init__(self, port: int, victim: str) -> None:
        self.inner = mailer(port)
        self.victim = victim

    def open(self):
        transport = self.inner.open()
        victim = self.victim

        class Transport:
            def send(self, sender, recipient, message, ending):
                if recipient == victim:
                    raise RuntimeError("a bug")
                return transport.send(sender, recipient, message, ending)

            def close(self):
                transport.close()

        return Transport()


def test_any_error_sending_one_message_fails_that_delivery_only(store, smtp_server) -> None:
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 4))
    counts = deliver(store, _Faulty(port, "reader2@example.com"), compose, options(workers=1), NOW)
    assert (counts.sent, counts.failed, counts.uncertain) == (3, 1, 0)
    [failed] = store.ledger.deliveries("failed")
    assert failed.email == "reader2@example.com"
    assert failed.reply == "not sent: RuntimeError('a bug')"
    assert store.subscribers.subscriber("reader2@example.com").bounces == 0
    assert inbox.counts() == everyone(4) - Counter({"reader2@example.com": 1})


def test_the_late_marks_of_a_run_taken_for_dead_change_nothing(store) -> None:
    """Every mark is fenced by the run and the state: once another run settled a run's rows
    in flight, that run's replies and give-backs leave them as they are."""
    make_issue(store, add_readers(store, 3))
    with store.ledger.send_run(NOW) as run_id, store.ledger.session(run_id) as ledger:
        claims = ledger.claim(NOW, 3)
        assert [c.email for c in claims] == list(everyone(3))
        with store.engine.begin() as db:  # taken for dead meanwhile
            db.execute(sa.update(deliveries).values(status="uncertain"))
        ledger.sent(claims[0].id, "250 queued", NOW)
        ledger.finish(claims[1].id, "failed", "550 no such user", NOW)
        ledger.flush(NOW, [claims[2].id])
    assert [(d.status, d.attempts) for d in store.ledger.deliveries()] == [("uncertain", 0)] * 3


def _in_flight(store) -> list[str]:
    return [d.email for d in store.ledger.deliveries("sending")]


@pytest.mark.parametrize("micro_batch", [1, 3])
def test_a_delivery_is_claimed_after_the_wait_and_a_stop_drains(
    store, smtp_server, micro_batch: int
) -> None:
    """A worker claims once it has its slot (a second one, waiting for its own, holds
    nothing); stopped, it finishes the message on the wire and gives back the rest of its
    micro-batch, pending as if never claimed."""
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 5))
    inbox.script[("data", "reader0@example.com")] = ["HOLD"]
    stop = threading.Event()
    # the next slot: in 10 s
    slow = SendOptions(sender=SENDER, workers=2, micro_batch=micro_batch, rate=0.1, backoff=0)
    done: list = []
    thread = threading.Thread(
        target=lambda: done.append(deliver(store, mailer(port), compose, slow, NOW, stop=stop))
    )
    thread.start()
    try:
        assert inbox.holding.wait(30)
        # the second worker waits for its slot and has claimed nothing
        assert _in_flight(store) == [f"reader{n}@example.com" for n in range(micro_batch)]
        stop.set()
        inbox.release.set()
    finally:
        stop.set()
        inbox.release.set()
        thread.join(60)
    [counts] = done
    assert counts.stopped and (counts.sent, counts.uncertain, counts.left) == (1, 0, 4)
    assert [d.email for d in store.ledger.deliveries("sent")] == ["reader0@example.com"]
    assert len(store.ledger.deliveries("pending")) == 4 and _in_flight(store) == []
    deliver(store, mailer(port), compose, options(), NOW)
    assert inbox.counts() == everyone(5)


def _run_sessions(database_url: str, run_id: int) -> dict[int, str]:
    """Server pid → last query of every session holding the send run's liveness lock."""
    engine = sa.create_engine(database_url)
    with engine.connect() as db:
        key = run_lock(db)
        rows = db.execute(
            sa.text(
                "SELECT a.pid, a.query FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.classid::int = :key AND l.objid = :run"
            ),
            {"key": key, "run": run_id},
        ).all()
    engine.dispose()
    return dict(rows)


def _sessions_gone(database_url: str, timeout: float = 30) -> bool:
    """Wait until no session holds a send run's liveness lock (and so its row locks) any more."""
    if not database_url.startswith("postgresql"):
        return True
    engine = sa.create_engine(database_url)
    deadline = time.monotonic() + timeout
    try:
        with engine.connect() as db:
            key = run_lock(db)
            query = sa.text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid::int = :key"
            )
            while db.execute(query, {"key": key}).scalar():
                db.rollback()
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
    finally:
        engine.dispose()
    return True


def _terminate(database_url: str, pids) -> None:
    """End those sessions, and wait until they are gone: ``pg_terminate_backend`` returns
    once it has signalled a session, before the session has told its client it is ending."""
    engine = sa.create_engine(database_url)
    alive = sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)")
    with engine.connect() as db:
        for pid in pids:
            assert db.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        end = time.monotonic() + 10
        while db.execute(alive, {"pids": list(pids)}).scalar_one():
            db.commit()  # the statistics views are a snapshot per transaction
            assert time.monotonic() < end, f"sessions {pids} still there"
            time.sleep(0.01)
    engine.dispose()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # sessions: PostgreSQL's
@pytest.mark.parametrize("micro_batch", [1, 4])
def test_a_run_that_lost_its_sessions_stops_and_is_never_taken_for_dead_while_alive(
    store, smtp_server, database_url: str, micro_batch: int
) -> None:
    """While one of its sessions lives, the run is alive for others; once the server ended
    them, the worker writes no further end of data of the rows it claimed (they may be being
    settled), the run stops, and on a new session it records the replies it had and gives
    back what it never wrote: nothing of its micro-batch is left in flight to be uncertain."""
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 6))
    inbox.script[("data", "reader2@example.com")] = ["HOLD"]
    failure: list[BaseException] = []

    def run() -> None:
        try:
            deliver(store, mailer(port), compose, options(1, micro_batch=micro_batch), NOW)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    other = open_store(database_url)
    try:
        assert inbox.holding.wait(30)
        [run_id] = {
            row.run_id
            for row in other.engine.connect().execute(sa.select(deliveries.c.run_id))
            if row.run_id
        }
        sessions = _run_sessions(database_url, run_id)
        assert len(sessions) == 2  # the run's own and its worker's
        # the run's own session last committed its lock; the worker's last claimed
        main = [pid for pid, query in sessions.items() if "deliveries" not in query]
        assert len(main) == 1
        _terminate(database_url, main)
        # the worker's session still holds the run alive: another run leaves its rows alone
        with other.ledger.send_run(NOW) as other_run:
            assert other.ledger.mark_lost(other_run, NOW) == 0
        _terminate(database_url, set(sessions) - set(main))
        inbox.release.set()
        thread.join(60)
        [error] = failure
        assert isinstance(error, DatabaseError)
        assert str(error).startswith("database connection lost (")
        assert str(error).endswith("; 3 sent, 3 left for the next run")
        # the run noticed and wrote nothing more (the message after reader2's, with four to a
        # micro-batch, was cut off before its end of data); its replies, noted and not yet
        # committed when its sessions ended, are recorded, and the rest is pending again
        assert inbox.counts() == everyone(3)
        with other.ledger.send_run(NOW) as other_run:
            assert other.ledger.mark_lost(other_run, NOW) == 0
        assert [d.email for d in other.ledger.deliveries("sent")] == list(everyone(3))
        assert len(other.ledger.deliveries("pending")) == 3 and not other.ledger.deliveries(
            "sending"
        )
    finally:
        inbox.release.set()
        thread.join(60)
        other.close()


def test_a_reader_refused_for_a_while_waits_for_its_retry_without_holding_the_connection(
    store, smtp_server
) -> None:
    """One connection; the first reader's mailbox answers 451 (greylisting). While its retry
    waits out the backoff (a minute), the connection sends every other reader; stopped then,
    the refused reader is left for the next run, which sends it."""
    inbox, port = smtp_server
    make_issue(store, add_readers(store, 10))
    first = "reader0@example.com"
    inbox.script[("rcpt", first)] = ["451 4.7.1 Greylisting in action, please come back later"]
    stop = threading.Event()
    patient = SendOptions(sender=SENDER, workers=1, rate=10_000, backoff=60)
    done: list = []
    thread = threading.Thread(
        target=lambda: done.append(deliver(store, mailer(port), compose, patient, NOW, stop=stop))
    )
    thread.start()
    try:
        others = {f"reader{n}@example.com" for n in range(1, 10)}
        deadline = time.monotonic() + 120
        while set(inbox.counts()) != others and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(inbox.counts()) == others  # and the first still waits for its retry
    finally:
        stop.set()
        thread.join(120)
    [counts] = done
    assert (counts.sent, counts.left) == (9, 1)
    assert [d.email for d in store.ledger.deliveries("pending")] == [first]
    deliver(store, mailer(port), compose, options(), NOW)
    assert inbox.counts() == everyone(10)
