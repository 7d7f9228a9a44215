"""A send whose database goes away while its messages are on the wire, twice: what each
connection never wrote the end of data of is pending again once the database answers, the
replies it had are recorded, and only a message whose end of data went out without a reply
is uncertain. With the local engine on SQLite and PostgreSQL, and with worker processes.

On PostgreSQL the run's sessions are ended (``pg_terminate_backend``: a restart, a failover,
an administrator). SQLite has no sessions to end: what takes its database from a running
send is another process holding its write lock past the busy timeout (a backup, a person in
the ``sqlite3`` shell), so that every write fails until it lets go.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from syndicate.config import load_config
from syndicate.errors import DatabaseError
from syndicate.sending import issuing
from syndicate.sending.engine import dispatcher
from syndicate.sending.loop import SendOptions, deliver
from syndicate.state import Store, open_store
from syndicate.state.locks import run_lock
from tests.mailserver import Inbox, ScriptedController, free_port
from tests.sending import NOW, add_readers, compose, mailer, make_issue, options
from tests.test_deliver import _terminate
from tests.test_scale import (
    MICRO_BATCH,
    PATIENCE,
    _settled,
    _statuses,
    _stop,
    _until,
    _worker,
    _write_config,
    scale,
)
from tests.test_scale import add_readers as import_readers

ROUNDS = 2


@dataclass
class Relay(Inbox):
    """The scripted server; while ``holds``, it keeps back the reply to each end of data
    until the next ``answer``: every connection then waits with its end of data written."""

    holds: bool = True
    waiting: list[str] = field(default_factory=list)
    """The recipients whose replies are kept back now."""
    answers: int = 0

    async def handle_DATA(self, server, session, envelope) -> str:
        if self.holds:
            rcpt, answers = envelope.rcpt_tos[0], self.answers
            with self.lock:
                self.waiting.append(rcpt)
            while self.answers == answers:
                await asyncio.sleep(0.01)
            with self.lock:
                self.waiting.remove(rcpt)
        return await super().handle_DATA(server, session, envelope)

    def answer(self, drop: str) -> None:
        """Answer every message waiting: ``drop``'s connection is closed with no reply (its
        message kept, as a relay that dies after taking it), the others hear 250."""
        self.script[("accepted", drop)] = ["DROP"]
        with self.lock:
            self.answers += 1


@pytest.fixture
def relay() -> Iterator[tuple[Relay, int]]:
    inbox, port = Relay(), free_port()
    controller = ScriptedController(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    inbox.holds = False
    inbox.answers += 1
    controller.stop()


def test_a_send_whose_database_goes_away_mid_send_keeps_uncertain_only_what_it_wrote(
    store: Store, database_url: str, relay: tuple[Relay, int]
) -> None:
    """Twice, a send run's two connections each wait for the reply to an end of data (with
    micro-batches of 5 claimed, up to 10 rows in flight) when its database goes away; one of
    the two relays then dies without a reply. The run stops: on PostgreSQL each connection
    cuts its next message off before its end of data (its session is seen ended); on SQLite
    each sends the rest of its micro-batch, and its next claim fails. Once the database
    answers, nothing of the run is left in flight: the replies are recorded, the rows never
    written are pending, and the message without a reply is uncertain. A third run sends the
    rest: each reader but the uncertain ones got one message."""
    inbox, port = relay
    readers, connections = 40, 2
    make_issue(store, add_readers(store, readers))
    sqlite = database_url.startswith("sqlite")
    if sqlite:
        _impatient(store)
    sending = options(connections, micro_batch=5)
    dropped: list[str] = []
    for _ in range(ROUNDS):
        inbox.holds = True
        failures: list[BaseException] = []
        run = threading.Thread(target=_send, args=(store, port, sending, failures))
        run.start()
        try:
            assert _until(lambda: len(inbox.waiting) == connections, PATIENCE)
            assert 0 < len(store.ledger.deliveries("sending")) <= connections * 5
            dropped.append(inbox.waiting[0])
            inbox.holds = False
            if sqlite:
                with _locked(store), _heard("wait for the database to answer again") as heard:
                    inbox.answer(dropped[-1])
                    assert heard.wait(PATIENCE)
            else:
                _terminate(database_url, _run_sessions(store))
                inbox.answer(dropped[-1])
        finally:
            run.join(PATIENCE)
        assert [type(failure) for failure in failures] == [DatabaseError]
        assert not store.ledger.deliveries("sending")  # nothing for a later run to take as lost
    rest = deliver(store, mailer(port), compose, sending, NOW)
    assert rest.uncertain == 0 and rest.left == 0
    uncertain = {d.email for d in store.ledger.deliveries("uncertain")}
    assert uncertain == set(dropped) and len(uncertain) <= connections * ROUNDS
    _each_reached_once(store, inbox, readers)


def test_workers_whose_sessions_end_mid_send_keep_uncertain_only_what_they_wrote(
    tmp_path: Path, scale_url: str, relay: tuple[Relay, int]
) -> None:
    """Twice, two worker processes' four connections (``smtp.pool_size`` 2 each, micro-batches
    of 5) each wait for the reply to an end of data when every session of their runs is
    ended; one relay dies without a reply. Each worker's senders settle their rows on new
    sessions, retire, and new ones take the next batches; the reconciler gives the failed
    batches jobs again. In the end only the messages without a reply are uncertain, and
    every other reader got one message.

    The test holds the runs alive (their liveness locks, shared) from just before their
    sessions are ended until their senders have settled: the reconciler, had it run in the
    instant between, would have taken them for dead and settled their rows in flight as
    uncertain, sent or not, as for a worker that dies (never resent). That race is not what
    this test is about."""
    inbox, port = relay
    path = _write_config(tmp_path, scale_url, port)
    config = load_config(path)
    store = open_store(scale_url)
    readers, connections = 300, 2 * 2
    import_readers(store, readers)
    assert issuing.send_due(config, NOW, dispatch=dispatcher(config)).left == readers
    dropped: list[str] = []
    workers = [_worker(path, concurrency=1) for _ in range(2)]
    try:
        for _ in range(ROUNDS):
            assert _until(lambda: len(inbox.waiting) == connections, PATIENCE)
            sessions = _run_sessions(store)
            runs = set(sessions.values())
            assert len(runs) == 2 and 0 < _in_flight(store, runs) <= connections * MICRO_BATCH
            dropped.append(inbox.waiting[0])
            with _alive(store, runs):
                _terminate(scale_url, sessions)
                inbox.answer(dropped[-1])
                assert _until(lambda: _in_flight(store, runs) == 0, PATIENCE)  # noqa: B023
        inbox.holds = False
        inbox.answer(dropped[-1])
        reconcile = lambda: scale.reconcile_now(config)  # noqa: E731
        assert _until(lambda: _settled(store), PATIENCE, every=reconcile)
    finally:
        inbox.holds = False
        inbox.answers += 1
        _stop(workers)
    assert _statuses(store) == {"sent": readers - ROUNDS, "uncertain": ROUNDS}
    uncertain = {d.email for d in store.ledger.deliveries("uncertain")}
    assert uncertain == set(dropped) and len(uncertain) <= connections * ROUNDS
    _each_reached_once(store, inbox, readers)
    store.close()


def _send(store: Store, port: int, sending: SendOptions, failures: list[BaseException]) -> None:
    try:
        deliver(store, mailer(port), compose, sending, NOW)
    except BaseException as exc:
        failures.append(exc)


def _each_reached_once(store: Store, inbox: Inbox, readers: int) -> None:
    """No message arrived twice; every delivery is sent or uncertain, and each sent one
    arrived (the uncertain ones did too: their relay took them, then died)."""
    arrived = Counter(message["Message-ID"] for message in inbox.messages)
    assert set(arrived.values()) == {1}
    rows = store.ledger.deliveries()
    assert len(rows) == readers and {d.status for d in rows} == {"sent", "uncertain"}
    assert {d.message_id for d in rows} == set(arrived)


def _impatient(store: Store) -> None:
    """A busy timeout of a fifth of a second on the store's connections (30 s by default):
    a write the lock keeps out fails at once, not half a minute later."""

    @sa.event.listens_for(store.engine, "connect")
    def _busy_timeout(dbapi_connection, _record) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=200")

    store.engine.dispose()  # the connections opened before, with the long one


_LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")
"""


@contextmanager
def _locked(store: Store) -> Iterator[None]:
    """Another process holds the SQLite database's write lock until the block ends."""
    database = store.engine.url.database
    assert database is not None
    command = [sys.executable, "-c", _LOCKER, database]
    locker = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        yield
    finally:
        assert locker.stdin is not None
        locker.stdin.close()
        assert locker.wait(PATIENCE) == 0


class _Heard(logging.Handler):
    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.event.set()


@contextmanager
def _heard(words: str) -> Iterator[threading.Event]:
    """Set once the sender logs a line with ``words``."""
    handler = _Heard(words)
    log = logging.getLogger("syndicate.deliver")
    log.addHandler(handler)
    try:
        yield handler.event
    finally:
        log.removeHandler(handler)


def _run_sessions(store: Store) -> dict[int, int]:
    """Server pid → send run, of every session holding a run's liveness lock (a run's own
    and its senders')."""
    with store.engine.connect() as db:
        key = run_lock(db)
        rows = db.execute(
            sa.text(
                "SELECT pid, objid::bigint FROM pg_locks"
                " WHERE locktype = 'advisory' AND classid::int = :key AND objsubid = 2"
            ),
            {"key": key},
        ).all()
    return dict(rows)


@contextmanager
def _alive(store: Store, runs: set[int]) -> Iterator[None]:
    """Hold ``runs`` alive (their liveness locks, shared) on a session of the test's own."""
    with store.engine.connect() as db:
        key = run_lock(db)
        for run in runs:
            db.execute(sa.select(sa.func.pg_advisory_lock_shared(key, run)))
        db.commit()
        try:
            yield
        finally:
            db.execute(sa.select(sa.func.pg_advisory_unlock_all()))
            db.commit()


def _in_flight(store: Store, runs: set[int]) -> int:
    """Deliveries in flight for ``runs``."""
    query = "SELECT count(*) FROM deliveries WHERE status = 'sending' AND run_id = ANY(:runs)"
    with store.engine.connect() as db:
        return db.execute(sa.text(query), {"runs": list(runs)}).scalar_one()
