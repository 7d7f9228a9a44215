"""Sends spread over workers (``send.engine = "procrastinate"``), on the real PostgreSQL and a
real SMTP server: planning commits rows and jobs together, and a batch is sent once however
often, and by however many workers, it runs."""

from __future__ import annotations

import asyncio
import bisect
import math
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import Config, load_config, parse_config
from syndicate.errors import ConfigError, DeliveryError
from syndicate.sending import issuing
from syndicate.sending.dispatch import LocalDispatcher
from syndicate.sending.engine import dispatcher
from syndicate.sending.transports import LostInFlight, PermanentFailure, SmtpMailer, Transport
from syndicate.state import BATCH_SIZE, Store, open_store
from syndicate.state.locks import run_lock
from syndicate.subscribers import ReaderRow
from tests.conftest import ARTICLES, ROOT
from tests.mailserver import Inbox, ScriptedController, free_port
from tests.sending import NOW, mailer

try:
    from syndicate.sending import scale
except ImportError:  # the optional extra syndicate[scale]: the scale_url fixture says so
    scale = None


def scale_config(root: Path, url: str, port: int = 25, **send_keys: Any) -> Config:
    return parse_config(
        {
            "site": {"articles": str(ARTICLES), "base_url": "https://news.example.org"},
            "state": {"database": url},
            "email": {"sender": "News <digest@news.example.org>"},
            "smtp": {"url": f"smtp://127.0.0.1:{port}", "retry_backoff": 0, "rate": 10_000},
            "send": {"engine": "procrastinate", **send_keys},
        },
        root=root,
        source="(test)",
        env={},
    )


def add_readers(store: Store, count: int) -> None:
    rows = [ReaderRow(f"reader{n}@example.com", "en", ("cost",)) for n in range(count)]
    added, _ = store.subscribers.import_subscribers(
        rows, status="active", consent_source="test", now=NOW
    )
    assert added == count


def jobs(store: Store) -> list[dict[str, Any]]:
    """The arguments (issue id, batch number) of the send jobs."""
    with store.engine.connect() as db:
        query = "SELECT args FROM procrastinate_jobs WHERE task_name = :task ORDER BY id"
        return [row.args for row in db.execute(sa.text(query), {"task": scale.SEND_BATCH})]


def rows_per_batch(store: Store) -> dict[tuple[int, int], int]:
    with store.engine.connect() as db:
        query = "SELECT issue_id, batch_no, count(*) FROM deliveries GROUP BY issue_id, batch_no"
        return {(i, b): n for i, b, n in db.execute(sa.text(query))}


def test_the_engine_needs_postgresql_and_says_which_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"send\.engine.*PostgreSQL state\.database"):
        scale_config(tmp_path, f"sqlite:///{tmp_path}/state.db")
    with pytest.raises(ConfigError, match=r"send\.engine"):
        parse_config({"send": {"engine": "celery"}}, root=tmp_path, source="(test)", env={})


def test_worker_refuses_the_local_engine_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[send]\nengine = "local"\n')
    result = CliRunner().invoke(main, ["--config", str(tmp_path / "config.toml"), "worker"])
    assert result.exit_code == 2 and 'send.engine = "procrastinate"' in result.output


def test_planning_commits_the_rows_and_their_jobs_together_or_neither(
    tmp_path: Path, scale_url: str
) -> None:
    """Test 1: a rollback leaves no rows and no jobs; a commit leaves rows = readers and
    jobs = ceil(readers / batch), each job naming one batch of the issue."""
    config = scale_config(tmp_path, scale_url)
    store = open_store(scale_url)
    readers = 2 * BATCH_SIZE + 1
    add_readers(store, readers)
    dispatch = scale.ProcrastinateDispatcher(config)

    class Refused(Exception):
        pass

    def plan_then_fail(db: sa.Connection, issue_id: int, batches: range) -> None:
        dispatch.plan(db, issue_id, batches)
        assert len(jobs_seen_by(db)) == len(batches)  # deferred, in this transaction
        raise Refused

    def jobs_seen_by(db: sa.Connection) -> list[Any]:
        return db.execute(sa.text("SELECT id FROM procrastinate_jobs")).all()

    from syndicate.state.workers import ensure_schema  # the scale extra, as scale

    with store.engine.begin() as db:
        ensure_schema(db)  # the jobs' table stands, so a rollback must empty it
    failing = _Plan(plan_then_fail)
    with pytest.raises(Refused):
        issuing.send_digests(config, NOW, mailer=_no_mail(), store=store, dispatch=failing)
    assert (rows_per_batch(store), jobs(store), store.ledger.delivery_counts()) == ({}, [], {})

    report = issuing.send_digests(config, NOW, mailer=_no_mail(), store=store, dispatch=dispatch)
    assert report.issues == [("en-cost", readers)] and report.sent == 0
    assert report.left == readers  # for the workers
    batches = rows_per_batch(store)
    assert sum(batches.values()) == readers and max(batches.values()) == BATCH_SIZE
    planned = jobs(store)
    assert len(planned) == math.ceil(readers / BATCH_SIZE)
    assert {(job["issue_id"], job["batch_no"]) for job in planned} == set(batches)
    store.close()


def test_firing_twice_makes_one_issue_and_one_set_of_jobs(tmp_path: Path, scale_url: str) -> None:
    """Test 8: the scheduler firing twice (one after the other, and two at once, as two
    schedulers or a manual send beside a scheduled one would): one issue, one set of jobs."""
    config = scale_config(tmp_path, scale_url)
    store = open_store(scale_url)
    add_readers(store, BATCH_SIZE + 10)
    reports: list[issuing.SendReport] = []

    def fire() -> None:
        reports.append(issuing.send_due(config, NOW, dispatch=dispatcher(config)))

    twins = [threading.Thread(target=fire) for _ in range(2)]
    for thread in twins:
        thread.start()
    for thread in twins:
        thread.join()
    fire()
    assert sorted(len(r.issues) for r in reports) == [0, 0, 1]
    assert len(jobs(store)) == 2 and len(rows_per_batch(store)) == 2
    store.close()


def test_a_batch_run_twice_and_concurrently_sends_each_message_once(
    tmp_path: Path, scale_url: str, smtp_server
) -> None:
    """Test 2: the same batch job run by two workers at once, then once more: every
    Message-ID arrives once."""
    inbox, port = smtp_server
    config = scale_config(tmp_path, scale_url, port)
    store = open_store(scale_url)
    add_readers(store, 80)
    issuing.send_due(config, NOW, dispatch=dispatcher(config))
    (job,) = jobs(store)
    issue_id, batch_no = job["issue_id"], job["batch_no"]
    workers = [scale._Worker(config) for _ in range(2)]
    runs = [threading.Thread(target=w.send, args=(issue_id, batch_no)) for w in workers]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join()
    again = workers[0].send(issue_id, batch_no)
    for worker in workers:
        worker.close()
    assert (again.sent, again.left) == (0, 0)
    ids = Counter(message["Message-ID"] for message in inbox.messages)
    assert len(ids) == 80 and set(ids.values()) == {1}
    assert store.ledger.delivery_counts() == {(issue_id, "en-cost", "sent"): 80}
    store.close()


def _planned(tmp_path: Path, url: str, port: int, readers: int) -> tuple[Any, list[Any]]:
    """A worker, and the batches (of 10) of an issue planned for ``readers``."""
    config = scale_config(tmp_path, url, port, batch_size=10)
    store = open_store(url)
    add_readers(store, readers)
    issuing.send_due(config, NOW, dispatch=dispatcher(config))
    batches = [(job["issue_id"], job["batch_no"]) for job in jobs(store)]
    store.close()
    return scale._Worker(config), batches


def _runs(url: str) -> list[Any]:
    """The send runs, and the sessions holding each alive (its advisory lock)."""
    query = """
        SELECT r.id, r.finished_at,
               (SELECT count(*) FROM pg_locks l
                 WHERE l.locktype = 'advisory' AND l.classid::bigint = :key
                   AND l.objid::bigint = r.id AND l.objsubid = 2) AS holders
          FROM send_runs r ORDER BY r.id
    """
    engine = sa.create_engine(url)
    with engine.connect() as db:
        key = run_lock(db) & 0xFFFFFFFF  # as the oid pg_locks shows it
        runs = db.execute(sa.text(query), {"key": key}).all()
    engine.dispose()
    return runs


def test_a_workers_senders_take_up_batch_after_batch_in_one_run(
    tmp_path: Path, scale_url: str, smtp_server
) -> None:
    """Two batches in progress at once, then three more, are sent by the worker's
    ``smtp.pool_size`` threads as one run, whose sessions do not grow with the batches; the
    run ends with the worker."""
    inbox, port = smtp_server
    worker, batches = _planned(tmp_path, scale_url, port, 50)
    assert len(batches) == 5
    both = [threading.Thread(target=worker.send, args=batch) for batch in batches[:2]]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    counts = [worker.send(*batch) for batch in batches[2:]]
    assert [(c.sent, c.left) for c in counts] == [(10, 0)] * 3
    ((run_id, finished, holders),) = _runs(scale_url)
    assert finished is None and 2 <= holders <= worker.config.smtp.pool_size + 1
    worker.close()
    ((ended, finished, holders),) = _runs(scale_url)
    assert ended == run_id and finished is not None and holders == 0
    ids = Counter(message["Message-ID"] for message in inbox.messages)
    assert len(ids) == 50 and set(ids.values()) == {1}


def test_what_a_batch_gave_back_is_taken_by_its_next_run_on_the_same_senders(
    tmp_path: Path, scale_url: str, smtp_server
) -> None:
    """A reader the relay keeps deferring past ``smtp.retries`` is left pending by the
    batch, and sent by the batch's retry on the same worker: the same run, a later now."""
    inbox, port = smtp_server
    worker, (batch,) = _planned(tmp_path, scale_url, port, 10)
    deferred = "reader3@example.com"
    inbox.script[("rcpt", deferred)] = ["451 4.3.0 try again later"] * (
        worker.config.smtp.retries + 1
    )
    first = worker.send(*batch)
    assert (first.sent, first.left) == (9, 1) and deferred not in inbox.counts()
    again = worker.send(*batch)
    worker.close()
    assert (again.sent, again.left) == (1, 0) and inbox.counts()[deferred] == 1
    assert len(_runs(scale_url)) == 1


def test_a_failed_batch_retires_the_senders_and_ends_their_run(
    tmp_path: Path, scale_url: str, smtp_server
) -> None:
    """The relay refusing the sender stops the batch (what it claimed is pending again) and
    retires the worker's senders: their run ends, so what it left in flight could be settled,
    and the batch's retry is sent by new ones."""
    inbox, port = smtp_server
    worker, (batch, *_) = _planned(tmp_path, scale_url, port, 20)
    inbox.script[("mail", "")] = ["553 5.7.1 sender not allowed"] * 10
    with pytest.raises(DeliveryError, match="refuses the sender"):
        worker.send(*batch)
    assert _until(lambda: _runs(scale_url)[0].finished_at is not None, PATIENCE)
    assert _runs(scale_url)[0].holders == 0
    inbox.script.clear()
    again = worker.send(*batch)
    worker.close()
    assert (again.sent, again.left) == (10, 0) and len(inbox.received) == 10
    assert len(_runs(scale_url)) == 2


class _Plan(LocalDispatcher):
    """A dispatcher whose planning is the given function."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan  # type: ignore[method-assign]


def _no_mail() -> SmtpMailer:
    """A mailer nothing is sent through (planning sends nothing)."""
    return SmtpMailer("127.0.0.1", 9)


def _worker(config_file: Path, concurrency: int = 2) -> subprocess.Popen:
    command = [sys.executable, "-m", "syndicate", "--config", str(config_file), "worker"]
    return subprocess.Popen(
        [*command, "--concurrency", str(concurrency)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


MICRO_BATCH = 5
"""The workers' ``send.micro_batch``: rows claimed at once by each connection."""


def _write_config(root: Path, url: str, port: int) -> Path:
    """A config file the worker processes read: short heartbeats, small batches."""
    path = root / "config.toml"
    path.write_text(
        f"""
[site]
base_url = "https://news.example.org"
articles = "{ARTICLES}"
[state]
database = "{url}"
[email]
sender = "News <digest@news.example.org>"
[smtp]
url = "smtp://127.0.0.1:{port}"
pool_size = 2
rate = 10000
retry_backoff = 0
[web]
secret_key = "a test key that is long enough to sign tokens"
[send]
engine = "procrastinate"
batch_size = 50
poll_seconds = 0.5
heartbeat_seconds = 0.5
stalled_seconds = 2
micro_batch = {MICRO_BATCH}
"""
    )
    return path


PATIENCE = 120.0
"""Seconds a test waits for worker processes to do something: far beyond what it takes on a
shared machine four times slower than alone (a few seconds). A wait ends as soon as what it
waits for happens, so a passing test never waits this long; only a broken one does."""


def _until(
    done: Callable[[], bool], seconds: float, every: Callable[[], Any] = lambda: None
) -> bool:
    """Whether ``done`` came true within ``seconds`` (polled, ``every`` called before each
    look)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        every()
        if done():
            return True
        time.sleep(0.3)
    return False


def test_a_worker_killed_mid_send_loses_nothing_and_duplicates_nothing(
    tmp_path: Path, scale_url: str, smtp_server
) -> None:
    """Test 3: SIGKILL one of three workers mid-send: sent + uncertain + failed = readers,
    no Message-ID twice at the server, uncertain at most one micro-batch per connection of
    the killed worker, every sent row at the server, and its jobs finished by the others."""
    inbox, port = smtp_server
    config = load_config(_write_config(tmp_path, scale_url, port))
    store = open_store(scale_url)
    readers = 600
    add_readers(store, readers)
    assert issuing.send_due(config, NOW, dispatch=dispatcher(config)).left == readers
    held = "reader150@example.com"  # the server takes it, then holds its 250 back
    inbox.script[("data", held)] = ["HOLD"]
    workers = [_worker(tmp_path / "config.toml") for _ in range(3)]
    try:
        assert inbox.holding.wait(PATIENCE)
        victim = next(w for w in workers if w.pid == _holder(store, held))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        inbox.release.set()  # its 250 goes nowhere
        reconcile = lambda: scale.reconcile_now(config)  # noqa: E731
        assert _until(lambda: _settled(store), PATIENCE, every=reconcile)
    finally:
        _stop(workers)
    by_status = _statuses(store)
    assert by_status["sent"] + by_status["uncertain"] + by_status["failed"] == readers
    uncertain = {d.email for d in store.ledger.deliveries("uncertain")}
    assert held in uncertain and len(uncertain) <= MICRO_BATCH * 2  # × the victim's pool_size
    arrived = Counter(message["Message-ID"] for message in inbox.messages)
    assert set(arrived.values()) == {1}
    assert {d.message_id for d in store.ledger.deliveries("sent")} <= set(arrived)
    assert not jobs_left(store)
    store.close()


def test_a_zombie_worker_waking_after_its_batch_was_retried_sends_nothing_twice(
    tmp_path: Path, scale_url: str, smtp_server
) -> None:
    """Test 4: a worker stopped (SIGSTOP) past the stalled time while a message is on the
    wire; its job is retried by another worker, which finishes the batch but for what the
    stopped one has in flight; woken (SIGCONT), it records its reply, sends the rest of the
    rows its connections had claimed, and resends nothing. (Its session, alive throughout,
    keeps its run alive: its rows are never taken over, so no late mark can undo another's.)"""
    inbox, port = smtp_server
    config = load_config(_write_config(tmp_path, scale_url, port))
    store = open_store(scale_url)
    readers = 200
    add_readers(store, readers)
    issuing.send_due(config, NOW, dispatch=dispatcher(config))
    held = "reader20@example.com"
    inbox.script[("data", held)] = ["HOLD"]
    workers = [_worker(tmp_path / "config.toml") for _ in range(2)]
    try:
        assert inbox.holding.wait(PATIENCE)
        zombie = next(w for w in workers if w.pid == _holder(store, held))
        zombie.send_signal(signal.SIGSTOP)
        inbox.release.set()
        retried: list[int] = []

        def only_the_zombies_left() -> bool:
            """Its job ran again elsewhere, and every row left is in flight for the zombie's
            run."""
            in_flight = _in_flight_pids(store)
            return sum(retried) >= 1 and in_flight == {zombie.pid} and not _free_pending(store)

        reconcile = lambda: retried.append(scale.reconcile_now(config).retried)  # noqa: E731
        assert _until(only_the_zombies_left, PATIENCE, every=reconcile)
        # in flight (claimed, or noted sent): the zombie's alone, a micro-batch a connection
        in_flight = {d.email for d in store.ledger.deliveries("sending")}
        assert held in in_flight and {_holder(store, e) for e in in_flight} == {zombie.pid}
        assert len(in_flight) <= MICRO_BATCH * 2 and not store.ledger.deliveries("pending")
        zombie.send_signal(signal.SIGCONT)
        assert _until(lambda: _settled(store), PATIENCE)
    finally:
        _stop(workers)
    assert _statuses(store) == {"sent": readers}
    arrived = Counter(message["Message-ID"] for message in inbox.messages)
    assert len(arrived) == readers and set(arrived.values()) == {1}
    store.close()


def test_three_workers_share_the_relay_rate(tmp_path: Path, scale_url: str, smtp_server) -> None:
    """Test 6: a relay rate of 200/s with three workers: the server sees at most 220 messages
    in any second (and one more for each connection: see below), and the send takes as long
    as the rate says. Each worker's two connections carry over from batch to batch (14
    batches, 6 connections opened)."""
    inbox, port = smtp_server
    before = inbox.opened
    path = _write_config(tmp_path, scale_url, port)
    path.write_text(path.read_text().replace("rate = 10000", "rate = 200"))
    config = load_config(path)
    store = open_store(scale_url)
    readers = 700
    add_readers(store, readers)
    issuing.send_due(config, NOW, dispatch=dispatcher(config))
    workers = [_worker(path) for _ in range(3)]
    try:
        assert _until(lambda: len(inbox.received) == readers, PATIENCE)
    finally:
        _stop(workers)
    # The server times a message as it arrives, the bucket as its token is taken: a message
    # whose token came before a second may arrive in it, one per connection at most (each
    # takes its next token after its last reply). And the first message also waits for its
    # connection and its claim, the last for neither. A rate not shared (600/s) breaks both.
    times = sorted(inbox.times)
    busiest = max(bisect.bisect_right(times, t + 1.0) - i for i, t in enumerate(times))
    assert busiest <= 220 + 3 * 2
    assert times[-1] - times[0] >= (readers - 20) / 200 - 0.5
    assert inbox.opened - before <= 3 * 2
    store.close()


@dataclass
class Gated(Inbox):
    """A relay that keeps every RCPT's reply back until ``gate`` is set: the connections
    opened meanwhile stay open and in use."""

    gate: threading.Event = field(default_factory=threading.Event)

    async def handle_RCPT(self, server, session, envelope, address, options) -> str:
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        return await super().handle_RCPT(server, session, envelope, address, options)


@pytest.fixture
def gated_server() -> Iterator[tuple[Gated, int]]:
    inbox = Gated()
    controller = ScriptedController(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield inbox, controller.port
    inbox.gate.set()
    controller.stop()


def _busy_workers(store: Store) -> int:
    """Worker processes alive with send jobs in progress."""
    return sum(1 for alive in scale.workers_alive(store, PATIENCE) if alive.batches)


def test_three_workers_never_open_more_connections_than_the_cap(
    tmp_path: Path, scale_url: str, gated_server: tuple[Gated, int]
) -> None:
    """Test 7: a connection cap of 4 with three workers, each with two batches in progress at
    once and two connections (6 wanted): the server never sees more than 4 sessions.

    The relay holds its first replies until every worker has batches in progress, so the
    three want their connections at once however far apart they start (one started seconds
    after the others on a busy machine, when two had sent everything: 2 sessions at most)."""
    inbox, port = gated_server
    path = _write_config(tmp_path, scale_url, port)
    path.write_text(path.read_text() + "max_connections = 4\n")
    config = load_config(path)
    store = open_store(scale_url)
    readers = 600
    add_readers(store, readers)
    issuing.send_due(config, NOW, dispatch=dispatcher(config))
    workers = [_worker(path, concurrency=2) for _ in range(3)]
    try:
        assert _until(lambda: _busy_workers(store) == 3 and inbox.sessions >= 4, PATIENCE)
        # a worker past the cap would open its connections at once: give it a moment to
        assert not _until(lambda: inbox.most_sessions > 4, 1.0)
        inbox.gate.set()
        assert _until(lambda: _statuses(store) == {"sent": readers}, PATIENCE)
    finally:
        inbox.gate.set()
        _stop(workers)
    assert inbox.most_sessions == 4
    assert len({m["Message-ID"] for m in inbox.messages}) == len(inbox.messages) == readers
    store.close()


def _kept(port: int, size: int = 2, keep: float = 60) -> Any:
    """A worker's connections to the test server (``scale.KeptConnections``)."""
    return scale.KeptConnections(mailer(port), size, keep)


def _send(connection: Transport, n: int) -> str:
    message = f"Message-ID: <kept.{n}@news.example.org>\r\nSubject: {n}\r\n\r\nText\r\n"
    return connection.send("digest@news.example.org", f"reader{n}@example.com", message.encode())


def test_a_workers_connections_carry_over_from_one_batch_to_the_next(
    smtp_server, scale_extra: None
) -> None:
    """Three batches through two connections open two; one the relay hung up on while idle
    is replaced by a new one, without a failure."""
    inbox, port = smtp_server
    kept, before = _kept(port), inbox.opened  # the server's own check when it started
    for batch in range(3):
        connections = [kept.open() for _ in range(2)]
        for n, connection in enumerate(connections):
            _send(connection, 2 * batch + n)
        for connection in connections:
            connection.close()
    assert inbox.opened - before == 2 and len(inbox.received) == 6 and inbox.sessions == 2
    assert inbox.hang_up()
    connection = kept.open()
    assert _send(connection, 6).startswith("250")
    connection.close()
    assert inbox.opened - before == 3 and len(inbox.received) == 7
    kept.close_idle()
    assert inbox.wait_idle(PATIENCE)


def test_a_connection_left_in_doubt_is_closed_and_a_refusal_keeps_it(
    smtp_server, scale_extra: None
) -> None:
    """A recipient refused leaves the connection as it was (kept); a connection lost after
    the end of data is in an unknown state (closed: the next batch gets a new one)."""
    inbox, port = smtp_server
    inbox.script[("rcpt", "reader1@example.com")] = ["550 5.1.1 no such reader"]
    inbox.script[("accepted", "reader2@example.com")] = ["DROP"]
    kept, before = _kept(port, size=1), inbox.opened
    connection = kept.open()
    with pytest.raises(PermanentFailure):
        _send(connection, 1)
    connection.close()
    connection = kept.open()
    with pytest.raises(LostInFlight):
        _send(connection, 2)
    connection.close()
    assert inbox.opened - before == 1
    connection = kept.open()
    _send(connection, 3)
    connection.close()
    assert inbox.opened - before == 2 and list(inbox.counts()) == [
        "reader2@example.com",
        "reader3@example.com",
    ]
    kept.close_idle()


def test_a_worker_opens_no_more_connections_than_its_pool(smtp_server, scale_extra: None) -> None:
    """The batches a worker runs at once share its ``smtp.pool_size`` connections: a third
    asked of two waits until one is handed back, and gets that one."""
    inbox, port = smtp_server
    kept, before = _kept(port), inbox.opened
    held = [kept.open(), kept.open()]
    got: list[Transport] = []
    waiting = threading.Thread(target=lambda: got.append(kept.open()))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive() and not got
    _send(held[0], 0)
    held[0].close()
    waiting.join(PATIENCE)
    assert got and inbox.opened - before == 2
    _send(got[0], 1)
    for connection in (got[0], held[1]):
        connection.close()
    kept.close_idle()


def test_idle_connections_close_after_the_keep_time(smtp_server, scale_extra: None) -> None:
    """Kept ``keep`` seconds, then QUIT; with no keep time (a relay whose connections are
    capped across workers: each holds a slot), closed as soon as a batch is done with it."""
    inbox, port = smtp_server
    for keep in (0.5, 0):
        kept = _kept(port, keep=keep)
        connection = kept.open()
        _send(connection, 0)
        connection.close()
        if keep:
            assert inbox.sessions == 1
        assert inbox.wait_idle(keep + PATIENCE)  # as soon as it is closed


def _in_flight_pids(store: Store) -> set[int]:
    """The processes whose runs have deliveries in flight."""
    query = (
        "SELECT DISTINCT r.pid FROM deliveries d JOIN send_runs r ON r.id = d.run_id"
        " WHERE d.status = 'sending'"
    )
    with store.engine.connect() as db:
        return set(db.execute(sa.text(query)).scalars())


def _free_pending(store: Store) -> int:
    """Pending rows no session holds."""
    query = "SELECT id FROM deliveries WHERE status = 'pending' FOR UPDATE SKIP LOCKED"
    with store.engine.connect() as db:
        free = len(db.execute(sa.text(query)).all())
        db.rollback()
    return free


def _holder(store: Store, email: str) -> int:
    """The pid of the worker process whose run has ``email``'s delivery in flight."""
    query = (
        "SELECT r.pid FROM deliveries d JOIN send_runs r ON r.id = d.run_id"
        " WHERE d.email = :email AND d.status = 'sending'"
    )
    with store.engine.connect() as db:
        return db.execute(sa.text(query), {"email": email}).scalar_one()


def _statuses(store: Store) -> Counter[str]:
    counts: Counter[str] = Counter()
    for (_, _, status), n in store.ledger.delivery_counts().items():
        counts[status] += n
    return +counts


def _settled(store: Store) -> bool:
    counts = _statuses(store)
    return counts["pending"] == 0 and counts["sending"] == 0


def _stop(workers: list[subprocess.Popen]) -> None:
    for process in workers:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
    for process in workers:
        process.wait(timeout=30)


def jobs_left(store: Store) -> list[Any]:
    """Send jobs waiting or running."""
    with store.engine.connect() as db:
        query = "SELECT id FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        return db.execute(sa.text(query), {}).all()
