"""Sends spread over several machines: Procrastinate jobs in the state database (PostgreSQL),
run by ``syndicate worker`` processes (``send.engine = "procrastinate"``).

The ledger stays the one record of who got what. A job only names a batch of an issue's
deliveries; ``send_batch`` sends it with the ledger's exactly-once protocol, so a job run twice,
by two workers at once, or retried after its worker stalled, sends nothing twice. The jobs are
deferred on the connection of the transaction that records the issue and its rows: both commit
together or neither does. Procrastinate stays behind the ``Dispatcher`` of ``dispatch``; another
engine would replace this module alone. It imports the rest of ``sending`` and nothing there
imports it: ``engine.dispatcher`` hands its dispatcher in.

No SQL here: the statements of ours on Procrastinate's tables (its schema made, the workers
alive) and the connection parameters its connector takes are ``state.workers``'s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import procrastinate
from procrastinate.types import JSONDict

from ..clock import Clock, wall_clock
from ..config import Config
from ..state import Store, open_store
from ..state import workers as job_tables
from ..state.locks import RelaySlot, relay_slot
from ..state.workers import (
    WorkerAlive,
    conninfo,
    jobs_connection,
    jobs_database_errors,
    prepare_jobs,
)
from .dispatch import BatchContext, send_batch
from .issuing import close_finished, resume_planning
from .loop import DeliveryCounts, Senders
from .pacing import CUT_INTERVAL, SLOW_DOWN, Pause, SlowDown, slow_down
from .transports import Mailer, PermanentFailure, TemporaryFailure, Transport, open_mailer

logger = logging.getLogger("syndicate.scale")
"""Named as before the modules moved into ``sending/``: ``--log-json`` lines carry it."""

SEND_QUEUE = "send"
MAINTENANCE_QUEUE = "maintenance"
SEND_BATCH = "syndicate.send_batch"
RECONCILE = "syndicate.reconcile"
TOKEN_BLOCK = 100
"""The most tokens a batch takes from its relay's bucket at once."""
RETRY_SECONDS = 60
"""A batch with deliveries left pending (temporary failures) is tried again this much later."""


def relay_name(config: Config) -> str:
    """The relay a rate belongs to: the SMTP server's host and port."""
    parts = urlsplit(config.smtp.url or "")
    return f"{parts.hostname}:{parts.port or 25}"


class SharedPace:
    """``smtp.rate`` shared by every worker sending through one relay: a token from the
    relay's bucket row in the state database before each message. A slow-down reply heard
    by any worker cuts the row's rate, so every worker slows at once (``send.min_rate``,
    ``send.recover_seconds``)."""

    def __init__(self, store: Store, relay: str, rate: float, slow_down: SlowDown) -> None:
        self.store = store
        self.relay = relay
        self.slow_down = slow_down
        store.relays.ensure_bucket(relay, rate)
        self.block = max(1, min(TOKEN_BLOCK, int(rate / 1000)))
        """Tokens taken at once: a database commit per message would cost more than the
        message at a high rate; a thousandth of a second's worth, never more than a
        ``TOKEN_BLOCK``, keeps what the paces hold a small share of any second's sends."""
        self.tokens = 0
        self.lock = threading.Lock()

    def wait(self, pause: Pause) -> bool:
        """Wait for a token; False when the run stops meanwhile."""
        recover = self.slow_down.recover_seconds
        while True:
            with self.lock:
                if self.tokens:
                    self.tokens -= 1
                    return True
            # outside the lock: the batch's other connections need not wait on this commit
            taken, wait = self.store.relays.take_tokens(self.relay, recover, self.block)
            if taken:
                with self.lock:
                    self.tokens += taken - 1
                return True
            if not pause(wait):
                return False

    def slowed(self, reply: str) -> None:
        """Cut the relay's rate for every worker (once for the replies of one burst)."""
        cut = self.store.relays.cut_rate(
            self.relay,
            SLOW_DOWN,
            self.slow_down.min_rate,
            CUT_INTERVAL,
            self.slow_down.recover_seconds,
        )
        if cut is not None:
            fields = {"worker": "slow-down", "relay": self.relay, "rate": round(cut, 3)}
            log_line(logging.WARNING, {**fields, "reply": reply})


def _nothing() -> None:
    pass


class CappedMailer:
    """A mailer whose connections to the relay are at most ``slots`` across every worker:
    each holds one of the relay's advisory locks, on a database session of its own, for as
    long as it is open (``send.max_connections``)."""

    def __init__(self, mailer: Mailer, store: Store, relay: str, slots: int, wait: float) -> None:
        self.mailer, self.store, self.relay, self.slots, self.wait = (
            mailer,
            store,
            relay,
            slots,
            wait,
        )

    def open(self) -> Transport:
        """A connection once a slot is free; TemporaryFailure when none frees within ``wait``
        seconds (``smtp.timeout``)."""
        end = time.monotonic() + self.wait
        while (slot := relay_slot(self.store.engine, self.relay, self.slots)) is None:
            if time.monotonic() > end:
                raise TemporaryFailure(f"all {self.slots} connections to {self.relay} in use")
            time.sleep(0.05)
        try:
            return _SlotTransport(self.mailer.open(), slot)
        except BaseException:
            slot.release()
            raise


KEEP_SECONDS = 2.0
"""How long a worker keeps an idle connection to the relay open: long enough to carry it from
one batch to the next, short enough not to hold the relay's session long after the last."""


class KeptConnections:
    """A worker process's connections to the relay, at most ``size`` (``smtp.pool_size``),
    shared by the batches it runs and kept open from one to the next for ``keep`` seconds.

    A new connection for each of a batch's connections cost a TCP handshake, a greeting and
    an EHLO (and, to a real relay, TLS and a login) every few hundred messages. A sender that
    asks for one while ``size`` are in use waits (the senders retired after a failure still
    finishing beside their successors), so a process never holds more. A connection a failure
    left in doubt is closed, not kept (``_Kept``); so is one idle for ``keep`` seconds, or
    closed by the server meanwhile.
    """

    def __init__(self, mailer: Mailer, size: int, keep: float) -> None:
        self.mailer = mailer
        self.size = size
        self.keep = keep
        self.changed = threading.Condition()
        self.idle: list[tuple[float, Transport]] = []
        """The kept connections no batch uses, with when each was handed back."""
        self.in_use = 0
        self.reaper: threading.Thread | None = None

    def open(self) -> Transport:
        """A kept connection if one is idle and usable, else a new one; waits while ``size``
        are in use."""
        with self.changed:
            while self.in_use >= self.size:
                self.changed.wait()
            self.in_use += 1
            kept = self.idle.pop()[1] if self.idle else None
        try:
            if kept is not None and kept.usable():
                return _Kept(self, kept)
            if kept is not None:
                kept.close()
            return _Kept(self, self.mailer.open())
        except BaseException:
            self._handed_back(None)
            raise

    def _handed_back(self, transport: Transport | None) -> None:
        """A batch is done with a connection (None: it was closed)."""
        if transport is not None and not self.keep:
            transport.close()
            transport = None
        with self.changed:
            self.in_use -= 1
            if transport is not None:
                self.idle.append((time.monotonic(), transport))
                if self.reaper is None:
                    self.reaper = threading.Thread(target=self._reap, daemon=True)
                    self.reaper.start()
            self.changed.notify()

    def _reap(self) -> None:
        """Close the connections idle for ``keep`` seconds, for the process's life."""
        while True:
            time.sleep(self.keep / 4)
            self.close_idle(time.monotonic() - self.keep)

    def close_idle(self, before: float = float("inf")) -> None:
        """Close the idle connections handed back before ``before`` (by default, all)."""
        with self.changed:
            old = [transport for since, transport in self.idle if since < before]
            self.idle = [(since, t) for since, t in self.idle if since >= before]
        for transport in old:
            transport.close()


class _Kept:
    """A kept connection as one batch's worker uses it: handed back on ``close`` unless a
    failure left it in doubt (anything but a refusal of one message)."""

    def __init__(self, kept: KeptConnections, transport: Transport) -> None:
        self.kept = kept
        self.transport: Transport | None = transport
        self.in_doubt = False

    def send(
        self, sender: str, recipient: str, message: bytes, ending: Callable[[], None] = _nothing
    ) -> str:
        assert self.transport is not None, "sent through after close"
        try:
            return self.transport.send(sender, recipient, message, ending)
        except PermanentFailure:
            raise  # refused, and the server reset for the next one
        except TemporaryFailure as exc:
            self.in_doubt = exc.reconnect
            raise
        except BaseException:
            self.in_doubt = True
            raise

    def usable(self) -> bool:
        return self.transport is not None and not self.in_doubt and self.transport.usable()

    def close(self) -> None:
        transport, self.transport = self.transport, None
        if transport is None:
            return
        if self.in_doubt:
            try:
                transport.close()
            finally:
                self.kept._handed_back(None)
        else:
            self.kept._handed_back(transport)


class _SlotTransport:
    """A connection and the session that holds its slot, closed together."""

    def __init__(self, transport: Transport, slot: RelaySlot) -> None:
        self.transport = transport
        self.slot = slot

    def send(
        self, sender: str, recipient: str, message: bytes, ending: Callable[[], None] = _nothing
    ) -> str:
        return self.transport.send(sender, recipient, message, ending)

    def usable(self) -> bool:
        return self.transport.usable()

    def close(self) -> None:
        try:
            self.transport.close()
        finally:
            self.slot.release()


class _Worker:
    """What one worker process keeps between jobs, made at its first: its store (the
    engine's pool), the relay's shared pace (the tokens one batch took and left over go to
    the next), its connections to the relay (``KeptConnections``) and its standing senders,
    which take up one batch the moment they run out of the last (``Senders``; new ones
    after a failure retired them)."""

    def __init__(self, config: Config, clock: Clock = wall_clock) -> None:
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        """The jobs of a process with ``--concurrency`` above 1 start on threads of their own."""
        self._store: Store | None = None
        self._sending: tuple[SharedPace, KeptConnections] | None = None
        self._standing: Senders | None = None
        self.batches = 0
        self.totals = DeliveryCounts()
        """What its batches did, for the line of its stop."""

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.config.database_url)
            return self._store

    def _senders(self) -> tuple[SharedPace, KeptConnections, Senders]:
        store, config = self.store, self.config
        with self._lock:
            if self._sending is None:
                relay = relay_name(config)
                pace = SharedPace(store, relay, config.smtp.rate, slow_down(config))
                mailer: Mailer = open_mailer(config)
                keep, cap = KEEP_SECONDS, config.send.max_connections
                if cap is not None:  # each holds a slot another worker may be waiting for
                    mailer = CappedMailer(mailer, store, relay, cap, config.smtp.timeout)
                    keep = 0
                connections = KeptConnections(mailer, config.smtp.pool_size, keep)
                self._sending = pace, connections
            if self._standing is None or self._standing.retired:
                self._standing = Senders(store, config.smtp.pool_size)
            return (*self._sending, self._standing)

    def send(self, issue_id: int, batch_no: int) -> DeliveryCounts:
        """One batch, through the process's connections and senders, at the relay's rate
        shared by every worker."""
        pace, connections, standing = self._senders()
        now = self.clock()
        context = BatchContext(
            self.config, self.store, connections, now, pace=pace, standing=standing
        )
        counts = DeliveryCounts()
        began = time.monotonic()
        failure: BaseException | None = None
        try:
            send_batch(context, (issue_id, batch_no), counts)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            took = time.monotonic() - began
            with self._lock:
                self.batches += 1
                for name in _SETTLED:
                    setattr(self.totals, name, getattr(self.totals, name) + getattr(counts, name))
            outcome = "error" if failure else "ok" if _complete(counts) else "partial"
            fields: dict[str, Any] = {"worker": "batch", "issue": issue_id, "batch": batch_no}
            fields |= {"outcome": outcome, "start": now.isoformat(timespec="seconds")}
            fields |= {"duration": round(took, 3), "counts": _counts(counts)}
            fields |= {"rate": round(counts.sent / took, 1) if took else 0.0}
            if failure is not None:
                fields["reason"] = str(failure) or type(failure).__name__
            log_line(logging.ERROR if failure else logging.INFO, fields)
        return counts

    def close(self) -> None:
        """Once its jobs have ended: the senders' run ended, QUIT to the kept connections,
        the store's pool closed."""
        if self._standing is not None:
            self._standing.close()
        if self._sending is not None:
            self._sending[1].close_idle()
        if self._store is not None:
            self._store.close()


_SETTLED = ("sent", "failed", "uncertain", "skipped")
_COUNTED = (*_SETTLED, "left")


def _counts(counts: DeliveryCounts, names: tuple[str, ...] = _COUNTED) -> dict[str, int]:
    return {name: getattr(counts, name) for name in names}


def _complete(counts: DeliveryCounts) -> bool:
    return not (counts.failed or counts.uncertain or counts.left)


def log_line(level: int, fields: dict[str, Any]) -> None:
    """One line of a worker's log, as ``run`` writes its own: ``key=value`` (a duration in
    seconds, a rate a second, counts spread out), and with ``--log-json`` the fields as keys."""
    words = []
    for key, value in fields.items():
        if key == "counts":
            words += [f"{name}={n}" for name, n in value.items()]
        elif key == "duration":
            words.append(f"duration={value:.3f}s")
        elif key == "rate":
            words.append(f"rate={value:.1f}".removesuffix(".0") + "/s")
        elif key in ("reason", "reply"):
            words.append(f"{key}={value!r}")
        else:
            words.append(f"{key}={value}")
    logger.log(level, "%s", " ".join(words), extra={"fields": fields})


def make_app(config: Config, worker: _Worker | None = None) -> procrastinate.App:
    """The Procrastinate app on the state database, with the send and maintenance tasks.

    The send jobs have no ``lock`` and no ``queueing_lock``: Procrastinate's stalled-job
    retry breaks on jobs that have one (procrastinate#1408, #1446, #1543), and the ledger,
    not the queue, keeps a batch from being sent twice.

    The connector is made here, not in ``state``: it takes only the parameters
    ``state.workers.conninfo`` hands out, and the statements it runs are Procrastinate's,
    behind its own calls (defer, fetch, retry), as much the task engine as the tasks are.
    """
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=conninfo(config.database_url))
    )
    worker = worker or _Worker(config)

    @app.task(name=SEND_BATCH, queue=SEND_QUEUE)
    def send_batch_job(issue_id: int, batch_no: int) -> None:
        counts = worker.send(issue_id, batch_no)
        if counts.left:  # temporary failures: the batch is tried again later
            app.configure_task(
                SEND_BATCH, schedule_in={"seconds": RETRY_SECONDS}, queue=SEND_QUEUE
            ).defer(issue_id=issue_id, batch_no=batch_no)

    @app.periodic(cron="* * * * *", periodic_id="reconcile")
    @app.task(name=RECONCILE, queue=MAINTENANCE_QUEUE)
    async def reconcile_job(timestamp: int) -> None:
        await reconcile(app, worker.store, config, worker.clock())

    del send_batch_job, reconcile_job  # registered on the app under their names
    return app


async def reconcile(
    app: procrastinate.App, store: Store, config: Config, now: datetime
) -> Reconciled:
    """What keeps a distributed send going whatever died (run every minute by any worker).

    The jobs of workers silent past ``send.stalled_seconds`` are run again; so are those left
    in ``doing`` with no worker at all once the dead workers' rows were pruned (their worker
    id is then null, which the stalled query takes: procrastinate#1518). A dead run's rows in
    flight become uncertain (its session, which held its liveness lock, is gone). An issue
    whose planning stopped between two chunks is planned to its end (on a thread: this runs
    on the worker's event loop). A batch with deliveries pending and no job waiting or
    running gets a job again. An issue with nothing left to send is closed, with a log line
    of its counts.
    """
    manager = app.job_manager
    stalled = list(
        await manager.get_stalled_jobs(
            task_name=SEND_BATCH, seconds_since_heartbeat=config.send.stalled_seconds
        )
    )
    for job in stalled:
        await manager.retry_job(job)
    lost = store.ledger.mark_lost(0, now)
    planned: list[tuple[int, str]] = []
    if store.planning.issues_in_planning():
        # its own app: this one is open on the loop, and planning defers on the planning
        # transaction's connection, synchronously
        dispatch = ProcrastinateDispatcher(config)
        planned = await asyncio.to_thread(resume_planning, config, store, now, dispatch)
    active = set()
    for status in ("todo", "doing"):
        for job in await manager.list_jobs_async(task=SEND_BATCH, status=status):
            active.add((job.task_kwargs["issue_id"], job.task_kwargs["batch_no"]))
    missing = [batch for batch in store.ledger.pending_batches(now) if batch not in active]
    if missing:
        jobs: list[JSONDict] = [{"issue_id": i, "batch_no": b} for i, b in missing]
        await app.configure_task(SEND_BATCH, queue=SEND_QUEUE).batch_defer_async(*jobs)
    finished = close_finished(store, now)
    return Reconciled(len(stalled), lost, len(missing), len(planned), len(finished))


@dataclass(frozen=True)
class Reconciled:
    """What one reconciliation did."""

    retried: int
    """Stalled jobs run again."""
    uncertain: int
    """Rows in flight of dead runs, now uncertain."""
    deferred: int
    """Batches with pending rows and no job, given one."""
    planned: int = 0
    """Issues whose planning, stopped between two chunks, was taken up and done."""
    finished: int = 0
    """Issues with nothing left to send, closed."""


def reconcile_now(config: Config) -> Reconciled:
    """One reconciliation from this process (what the periodic task does)."""
    app = make_app(config)
    store = open_store(config.database_url)

    async def once() -> Reconciled:
        async with app.open_async():
            return await reconcile(app, store, config, wall_clock())

    try:
        # on a thread of its own: the caller's thread may already run an event loop
        with ThreadPoolExecutor(1) as thread:
            return thread.submit(asyncio.run, once()).result()
    finally:
        store.close()


def workers_alive(store: Store, stalled_seconds: float) -> list[WorkerAlive]:
    """The workers heard from within ``stalled_seconds``, each with the send jobs it runs
    (``state.workers``)."""
    return job_tables.workers_alive(store.engine, SEND_BATCH, stalled_seconds)


class ProcrastinateDispatcher:
    """Plans each issue as jobs, one per batch, each chunk's committed with its rows; sends
    nothing itself (``syndicate worker`` processes do)."""

    def __init__(self, config: Config) -> None:
        self.app = make_app(config)

    def plan(self, db: Any, issue_id: int, batches: range) -> None:
        driver = jobs_connection(db)  # Procrastinate's tables, made where missing
        if batches:
            jobs: list[JSONDict] = [{"issue_id": issue_id, "batch_no": n} for n in batches]
            self.app.configure_task(SEND_BATCH, connection=driver, queue=SEND_QUEUE).batch_defer(
                *jobs
            )

    def run(self, context: BatchContext, counts: DeliveryCounts) -> None:
        """The workers send: what is left here is what they have still to do."""
        counts.left = context.store.ledger.pending_count(context.now)


def run_worker(config: Config, concurrency: int) -> None:
    """A worker process: runs send jobs (``concurrency`` at once: while one is sent by the
    process's ``smtp.pool_size`` senders, the next is set up and queued for them) until
    SIGTERM or SIGINT, then lets the running ones end.
    Finished jobs are deleted (``delete_jobs="successful"``, procrastinate#1454): the ledger
    keeps the record. One that cannot start, or whose database fails it, says why in one line."""
    conninfo(config.database_url)  # a URL that is none: a UsageError before anything starts
    prepare_jobs(config.database_url)
    worker = _Worker(config)
    began = time.monotonic()
    fields: dict[str, Any] = {"worker": "started", "pid": os.getpid(), "concurrency": concurrency}
    fields |= {"pool_size": config.smtp.pool_size, "relay": relay_name(config)}
    log_line(logging.INFO, {**fields, "rate": config.smtp.rate})
    try:
        with jobs_database_errors(config.database_url):
            make_app(config, worker).run_worker(
                queues=[SEND_QUEUE, MAINTENANCE_QUEUE],
                concurrency=concurrency,
                delete_jobs="successful",
                fetch_job_polling_interval=config.send.poll_seconds,
                update_heartbeat_interval=config.send.heartbeat_seconds,
                stalled_worker_timeout=config.send.stalled_seconds,
                shutdown_graceful_timeout=config.smtp.timeout + 5,
            )
    finally:
        worker.close()
        fields = {"worker": "stopped", "pid": os.getpid(), "batches": worker.batches}
        fields |= {"duration": round(time.monotonic() - began, 3)}
        log_line(logging.INFO, {**fields, "counts": _counts(worker.totals, _SETTLED)})
