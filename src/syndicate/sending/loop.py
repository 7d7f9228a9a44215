"""The send loop: claim → send → record, over the delivery rows the store holds.

``deliver`` runs senders, each with its own persistent connection: it claims rows, sends each
and records the server's reply straight away. It never builds a message itself: a ``messages``
callable (``messages.MessageFactory.message``) turns (issue, claim) into bytes; nor does it
speak SMTP: a ``transports.Mailer`` does.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from ..bounces.reasons import reply_reason
from ..errors import DatabaseError, DeliveryError
from ..state import Batch, BouncePolicy, Claim, Issue, Ledger, Store
from .pacing import Pace, Pacer, SlowDown, throttling
from .transports import LostInFlight, Mailer, PermanentFailure, TemporaryFailure, Transport

logger = logging.getLogger("syndicate.deliver")
"""Named as before the modules moved into ``sending/``: ``--log-json`` lines carry it."""


@dataclass
class DeliveryCounts:
    """What one run did with the delivery rows it found."""

    sent: int = 0
    failed: int = 0
    uncertain: int = 0
    skipped: int = 0
    deferred: int = 0
    """Temporary failures left pending for the next run."""
    failures: list[tuple[str, str]] = field(default_factory=list)
    """(email, reply) of every failed or uncertain delivery of this run."""
    stopped: bool = False
    """The run was asked to stop: what was not taken yet stays pending."""
    left: int = 0
    """Deliveries still pending when the run ended (for the next run)."""

    def add(self, status: str, email: str = "", reply: str = "") -> None:
        setattr(self, status, getattr(self, status) + 1)
        if status in ("failed", "uncertain"):
            self.failures.append((email, reply))


@dataclass(frozen=True)
class SendOptions:
    sender: str
    """Envelope sender (MAIL FROM), a bare address."""
    workers: int = 4
    micro_batch: int = 1
    """Deliveries each worker claims (marks in flight) at once: one commit for so many, and
    so many uncertain at most if the run dies."""
    rate: float = 50.0
    """Messages per second at most, across all workers."""
    retries: int = 3
    backoff: float = 1.0
    """Seconds before the first retry of a temporary failure; doubles each time."""
    bounces: BouncePolicy = field(default_factory=BouncePolicy)
    """When a 5xx's hard or soft bounces stop a reader's mail."""
    return_path: Callable[[Claim], str] | None = None
    """The envelope sender of each delivery (VERP, for bounces); ``sender`` when None."""
    slow_down: SlowDown = field(default_factory=SlowDown)
    """How the ``Pacer`` backs off on slow-down replies (a shared pace has its own)."""
    pace: Pace | None = None
    """What spaces the sends; None: a ``Pacer`` at ``rate`` for this run alone."""


DATABASE_PATIENCE = 60.0
"""Seconds a worker whose database failed waits for it to answer again, to commit what it
holds (``_Run.settle``); what it could not is left in flight, uncertain at the next run."""


Compose = Callable[[Issue, Claim], bytes]


class Progress(Protocol):
    """Told how many deliveries a run has to do, then the outcome of each."""

    def start(self, total: int) -> None: ...

    def advance(self, status: str) -> None: ...


def deliver(
    store: Store,
    mailer: Mailer,
    compose: Compose,
    options: SendOptions,
    now: datetime,
    *,
    progress: Progress | None = None,
    counts: DeliveryCounts | None = None,
    stop: threading.Event | None = None,
    batch: Batch | None = None,
    standing: Senders | None = None,
) -> DeliveryCounts:
    """Send every pending delivery (with ``batch``: that batch's), each recorded right after
    the server's answer; with ``standing``, on those senders (a worker process's), not on
    threads of this call's own.

    Deliveries left in flight by a run that died (their end of data was written) are marked
    uncertain first, never resent. ``progress`` hears the outcome of each delivery; ``counts``
    (a new one by default) adds them up. Once ``stop`` is set, no delivery is taken any
    more; the messages on the wire finish (bounded by the transport's timeout)
    and their replies are recorded. Raises DeliveryError when the server cannot be used at all
    (unreachable, login or sender refused) and DatabaseError when the database fails; both say
    how many were sent and how many are left for the next run, which are kept pending (after
    a database failure, once it answers again: see ``_Run.settle``).
    """
    counts = DeliveryCounts() if counts is None else counts
    run = _Run(store, mailer, compose, options, now, progress, counts, stop, batch)
    return run.go(standing)


class _Run:
    """One call of ``deliver``: what its workers share (the pace, the issues, the counts, the
    stop), and how it ends."""

    def __init__(
        self,
        store: Store,
        mailer: Mailer,
        compose: Compose,
        options: SendOptions,
        now: datetime,
        progress: Progress | None,
        counts: DeliveryCounts,
        stop: threading.Event | None,
        batch: Batch | None = None,
    ) -> None:
        self.store = store
        self.batch = batch
        self.mailer = mailer
        self.compose = compose
        self.options = options
        self.now = now
        self.progress = progress
        self.counts = counts
        self.stop = stop
        self.pacer: Pace = options.pace or Pacer(options.rate, options.slow_down)
        self.lock = threading.Lock()
        self.halt = threading.Event()
        """Set when a worker met a failure that stops them all."""
        self.fatal: list[BaseException] = []
        self.settled = 0
        """Deliveries that ended this run (sent, failed, uncertain, skipped: not deferred)."""
        self.workers = 0
        """The run's workers (connections), once it knows what is pending."""
        self.unclaimed = 0
        """Deliveries pending at the start that no worker has claimed yet (about)."""
        self.issues: dict[int, Issue] = {}
        self.senders: list[_Sender] = []

    def go(self, standing: Senders | None = None) -> DeliveryCounts:
        """Send the run's deliveries on threads of its own, or (``standing``) on a worker
        process's standing senders, as part of their run."""
        store, now, counts = self.store, self.now, self.counts
        pending = 0
        left: int | None = None
        try:
            with ExitStack() as stack:
                if standing is not None:
                    run_id = standing.run_id(now)
                else:
                    run_id = stack.enter_context(store.ledger.send_run(now))
                counts.uncertain += store.ledger.mark_lost(run_id, now, self.batch)
                counts.skipped += store.ledger.skip_inactive(now, self.batch)
                pending = store.ledger.pending_count(now, self.batch)
                if self.progress is not None:
                    self.progress.start(pending)
                self.workers = min(self.options.workers, pending)
                self.unclaimed = pending
                if standing is not None:
                    if pending:
                        standing.send(self)
                else:
                    threads = [
                        threading.Thread(target=self.work, args=(run_id,))
                        for _ in range(self.workers)
                    ]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                if pending and not self.fatal:
                    # read, not worked out: what another run at once sent or holds is not left
                    left = store.ledger.pending_count(now, self.batch)
        except DatabaseError as exc:  # before the workers started, or after they ended
            self.fatal.append(exc)
        return self._ended(pending, left)

    def _ended(self, pending: int, left: int | None = None) -> DeliveryCounts:
        """The counts, or the failure that stopped the run, saying what it kept (``left``:
        the deliveries still pending, when the run could read them)."""
        counts = self.counts
        counts.stopped = self.stop is not None and self.stop.is_set()
        counts.left = pending - self.settled if left is None else left
        kept = f"{counts.sent:,} sent, {counts.left:,} left for the next run"
        if not pending and self.fatal:
            kept = f"{counts.sent:,} sent; what is pending is kept for the next run"
        if self.fatal:
            first = self.fatal[0]
            if isinstance(first, DatabaseError | DeliveryError):
                raise type(first)(f"{first}; {kept}") from first
            raise first
        unreachable = [sender.unreachable for sender in self.senders if sender.unreachable]
        if self.senders and len(unreachable) == len(self.senders):  # none could connect
            raise DeliveryError(f"{unreachable[0]}; {kept}")
        return counts

    def work(self, run_id: int) -> None:
        """One worker: its own connection to the server and to the database, for the run."""
        try:
            with self.store.ledger.session(run_id, self.batch) as ledger:
                self.work_with(ledger)
        except BaseException as exc:  # the ledger's session could not be had or given back
            self.failed(exc)

    def work_with(self, ledger: Ledger) -> bool:
        """Send through ``ledger`` until nothing is left to claim or the run stops (True), or
        this worker cannot reach the server (False: the others may still)."""
        sender = _Sender(self)
        with self.lock:
            self.senders.append(sender)
        work = _Work(self, ledger)
        try:
            # Wait for the slot and the connection first, then claim: nothing is in flight
            # while the worker waits for either before a micro-batch.
            while not self.stopping() and self.pacer.wait(self.pause):
                if sender.transport is None and not sender.reconnect():
                    break
                if (turn := work.next()) is None:
                    break
                claim, attempt = turn
                if (reply := sender.send(ledger, claim)) is not None:
                    work.retry(claim, attempt + 1, reply)
        except BaseException as exc:
            self.failed(exc)
        finally:
            sender.close()  # a message cut off before its end of data is dropped with it
            self.settle(ledger, [claim.id for claim in (*sender.unwritten(), *work.claimed)])
            work.leave()
        return not sender.unreachable

    def settle(self, ledger: Ledger, unwritten: list[int]) -> None:
        """Commit what this worker holds: the outcomes it noted and, pending again, the rows
        it never wrote the end of data of (claimed and not tried, or stopped before the end).

        If the database fails it, the worker stops the run and makes the same commit on a new
        session as soon as the database answers again (for ``DATABASE_PATIENCE`` seconds at
        most, not past a stop), fenced by the run: a row another run has settled meanwhile is
        left as it is. Only what it could not commit stays in flight, to be marked uncertain.
        """
        try:
            ledger.flush(self.now, unwritten)
            return
        except DatabaseError as exc:
            if not self.halt.is_set():
                self.failed(exc)
            held = ledger.holding(unwritten)
            logger.warning("%s; %d delivery(ies) wait for the database to answer again", exc, held)
        end = time.monotonic() + DATABASE_PATIENCE
        wait = 0.0
        while True:
            try:
                ledger.reopen()
                ledger.flush(self.now, unwritten)
                logger.info("the database answers again: %d delivery(ies) settled", held)
                return
            except DatabaseError as exc:
                wait = min(max(2 * wait, 0.1), 5.0)
                if time.monotonic() + wait > end or not self.wait_for_database(wait):
                    logger.warning("%s; %d delivery(ies) left in flight", exc, held)
                    return

    def wait_for_database(self, seconds: float) -> bool:
        """Wait so many seconds; False (at once) when the run is asked to stop."""
        if self.stop is None:
            time.sleep(seconds)
            return True
        return not self.stop.wait(seconds)

    def failed(self, exc: BaseException) -> None:
        """The database gone, the server refusing us, a bug: every worker stops. What each
        was sure it never wrote is pending again (``settle``); what it could not commit is
        settled at the next run, never resent blindly."""
        self.fatal.append(exc)
        self.halt.set()

    def claim_size(self) -> int:
        """``micro_batch``, but no more than a worker's share of what is left, so that the
        workers run out together: the last micro-batch of a batch is not sent by one
        connection while the others are done."""
        with self.lock:
            share = -(-self.unclaimed // self.workers)  # rounded up
        return max(1, min(self.options.micro_batch, share))

    def claimed(self, count: int) -> None:
        with self.lock:
            self.unclaimed -= count

    def stopping(self) -> bool:
        return self.halt.is_set() or (self.stop is not None and self.stop.is_set())

    def pause(self, seconds: float) -> bool:
        """A ``Pause``: wait so many seconds; False (at once) when the run is stopping."""
        end = time.monotonic() + seconds
        while not self.stopping():
            left = end - time.monotonic()
            if left <= 0:
                return True
            self.halt.wait(min(left, 0.1))
        return False

    def outcome(self, status: str, email: str = "", reply: str = "") -> None:
        with self.lock:
            self.counts.add(status, email, reply)
            if status != "deferred":
                self.settled += 1
        if self.progress is not None:
            self.progress.advance(status)

    def issue_of(self, issue_id: int) -> Issue:
        if (issue := self.issues.get(issue_id)) is not None:  # each message: no lock
            return issue
        with self.lock:
            if issue_id not in self.issues:
                found = self.store.issues.issue(issue_id)
                assert found is not None, f"delivery of unknown issue {issue_id}"
                self.issues[issue_id] = found
            return self.issues[issue_id]

    def connect(self) -> Transport | str | None:
        """A new connection, retried with backoff; else why the server cannot be reached, or
        None when the run stops meanwhile."""
        last = ""
        for attempt in range(self.options.retries + 1):
            if attempt and not self.pause(self.options.backoff * 2 ** (attempt - 1)):
                return None
            try:
                return self.mailer.open()
            except TemporaryFailure as exc:
                last = exc.reply
                if throttling(exc.reply):  # a 421 at the greeting: too many connections
                    self.pacer.slowed(exc.reply)
        return last


@dataclass(eq=False)
class _Turn:
    """A run queued on standing senders, and which of their threads are at it."""

    run: _Run
    batch: Batch
    active: int = 0
    """Threads sending its deliveries now."""
    left: set[int] = field(default_factory=set)
    """Threads done with it (they take it up no more)."""
    over: bool = False
    """Nothing of it is left to claim, or it stops."""
    done: bool = False


class Senders:
    """Sender threads, each with its ledger session, that outlive a batch: a worker process's
    ``smtp.pool_size``, all in one send run.

    With threads of each batch's own, a batch's connections sat idle from the moment each ran
    out of rows until the slowest had finished, the run had ended, the job was done, the next
    one fetched and its run begun: a quarter of a worker's time at batches of 500. Here a
    thread that finds nothing left to claim in one batch takes up the next batch queued
    (``send``, from the jobs in progress at once). Their rows given back after retries wait
    for a later run of their batch, which has a later ``now`` (``_NEXT``).

    A failure that stops a batch (the database, the server refusing us, a bug) retires them:
    they take up no further batch, and once the last thread is done the run ends, so what the
    failed batch left in flight can be settled by the next run of it; the batches queued and
    not begun are left pending, to be tried again. The caller makes new ones for new batches.
    """

    def __init__(self, store: Store, workers: int) -> None:
        self.store = store
        self.workers = workers
        self.changed = threading.Condition()
        self.queue: list[_Turn] = []
        self.threads: list[threading.Thread] = []
        self.alive = 0
        self.retired = False
        self._run = ExitStack()
        self._run_id: int | None = None

    def run_id(self, now: datetime) -> int:
        """The senders' run (begun with the first batch)."""
        with self.changed:
            if self._run_id is None:
                self._run_id = self._run.enter_context(self.store.ledger.send_run(now))
            return self._run_id

    def send(self, run: _Run) -> None:
        """Have the threads send ``run``'s deliveries; returns once they are done with it."""
        assert run.batch is not None, "standing senders send batches"
        turn = _Turn(run, run.batch)
        with self.changed:
            if not self.threads:
                for _ in range(self.workers):
                    self.threads.append(threading.Thread(target=self._serve, daemon=True))
                    self.threads[-1].start()
                self.alive = self.workers
            self.queue.append(turn)
            self._settle()
            while not turn.done:
                self.changed.wait()

    def _serve(self) -> None:
        me = threading.get_ident()
        turn = self._next(me)
        try:
            if turn is not None:
                assert self._run_id is not None  # begun by the run's go
                with self.store.ledger.session(self._run_id, turn.batch) as ledger:
                    while turn is not None:
                        ledger.for_batch(turn.batch)
                        over = turn.run.work_with(ledger)
                        self._left(turn, me, over)
                        turn = self._next(me)
        except BaseException as exc:  # its session could not be had, or given back
            if turn is not None:
                turn.run.failed(exc)
                self._left(turn, me, True)
            else:
                logger.warning("a sender's database session failed: %s", exc)
            with self.changed:
                self.retired = True
        finally:
            with self.changed:
                self.alive -= 1
                self._settle()

    def _next(self, me: int) -> _Turn | None:
        """The first queued run this thread may take up; None once they retire or close."""
        with self.changed:
            while not self.retired:
                for turn in self.queue:
                    if not turn.over and me not in turn.left:
                        turn.active += 1
                        return turn
                self.changed.wait()
            return None

    def _left(self, turn: _Turn, me: int, over: bool) -> None:
        with self.changed:
            turn.active -= 1
            turn.left.add(me)
            turn.over = turn.over or over
            if turn.run.fatal:
                self.retired = True
            self._settle()

    def _settle(self) -> None:
        """Under ``changed``: the runs no thread will take up any more are done; once the
        senders retired and their last thread is done, their run ends."""
        for turn in list(self.queue):
            if turn.active == 0 and (turn.over or self.retired or len(turn.left) >= self.alive):
                turn.done = True
                self.queue.remove(turn)
        self.changed.notify_all()
        if self.retired and not self.alive:
            self._end_run()

    def _end_run(self) -> None:
        try:
            self._run.close()  # once: the stack is empty after
        except DatabaseError as exc:  # its sessions end with the process all the same
            logger.warning("the senders' run did not end cleanly: %s", exc)

    def close(self) -> None:
        """Once no batch is in progress any more: the threads end, and the run."""
        with self.changed:
            self.retired = True
            self._settle()
        for thread in self.threads:
            thread.join()
        with self.changed:
            self._end_run()


class _Work:
    """What one worker sends next: its claimed micro-batch and the deliveries it gave back
    after a temporary failure, each tried again once its backoff is over (doubling each
    time), meanwhile the connection sends the others: a reader refused for a while
    (greylisting, a full mailbox) never holds it. Past ``retries``, left for the next run."""

    def __init__(self, run: _Run, ledger: Ledger) -> None:
        self.run = run
        self.ledger = ledger
        self.claimed: deque[Claim] = deque()
        self.later: list[_Retry] = []

    def next(self) -> tuple[Claim, int] | None:
        """The delivery to try now, and its attempt: a retry whose backoff is over, else a
        claimed one (claiming more when none is left), else the first retry once its backoff
        is over; None when nothing is left or the run stops."""
        run = self.run
        while True:
            if self.later and self.later[0].at <= time.monotonic():
                retry = heapq.heappop(self.later)
                if self.ledger.take_back(retry.claim.id, run.now):
                    return retry.claim, retry.attempt
                run.outcome("deferred", retry.claim.email, retry.reply)  # another run's now
                continue
            if not self.claimed:
                self.claimed.extend(self.ledger.claim(run.now, run.claim_size()))
                run.claimed(len(self.claimed))
            if self.claimed:
                return self.claimed.popleft(), 0
            if not self.later or not run.pause(self.later[0].at - time.monotonic()):
                return None

    def retry(self, claim: Claim, attempt: int, reply: str) -> None:
        """``claim`` was given back after a temporary failure: try it again after its
        backoff, or, past ``retries``, leave it for the next run."""
        options = self.run.options
        if attempt > options.retries:
            self.run.outcome("deferred", claim.email, reply)
            return
        at = time.monotonic() + options.backoff * 2 ** (attempt - 1)
        heapq.heappush(self.later, _Retry(at, claim.id, attempt, claim, reply))

    def leave(self) -> None:
        """The run ends: the retries still waiting are pending (given back), for the next."""
        for retry in self.later:
            self.run.outcome("deferred", retry.claim.email, retry.reply)


@dataclass(order=True, frozen=True, slots=True)
class _Retry:
    """A delivery given back after a temporary failure, to be tried again at ``at``
    (``time.monotonic``)."""

    at: float
    delivery_id: int
    attempt: int = field(compare=False)
    claim: Claim = field(compare=False)
    reply: str = field(compare=False)
    """The temporary failure's reply, said if it is left for the next run."""


class _Sender:
    """One worker's connection and the sending of the deliveries it takes, with retries."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.transport: Transport | None = None
        self.unreachable = ""
        """Why the server could not be reached, once this worker gave up on it."""
        self.in_hand: Claim | None = None
        """The delivery ``send`` is at, until it returns."""
        self.ended = False
        """The current try's end of data is out, or about to be, and its outcome not noted."""

    def reconnect(self) -> bool:
        """A new connection; False when the server is out of reach or the run stops."""
        self.close()
        if self.unreachable:
            return False
        got = self.run.connect()
        if isinstance(got, str):
            self.unreachable = got
        elif got is not None:
            self.transport = got
        return self.transport is not None

    def close(self) -> None:
        if self.transport is not None:
            transport, self.transport = self.transport, None
            transport.close()

    def unwritten(self) -> list[Claim]:
        """The delivery in hand if ``send`` stopped before its end of data (the database
        failed, or the run is asked to stop): never written, so pending again."""
        return [self.in_hand] if self.in_hand is not None and not self.ended else []

    def send(self, ledger: Ledger, claim: Claim) -> str | None:
        """Try one reserved delivery and note how it ended (a 250 with the next commit);
        after a temporary failure, the reply (the row is given back, pending, to be tried
        again later: nothing is held meanwhile), else None.

        Whatever goes wrong with this one message fails this one delivery only (the database
        failing is not about the message: it stops the run).
        """
        self.in_hand = claim
        reply = self._send(ledger, claim)
        self.in_hand = None
        return reply

    def _send(self, ledger: Ledger, claim: Claim) -> str | None:
        run = self.run
        issue = run.issue_of(claim.issue_id)
        try:
            message = run.compose(issue, claim)
        except Exception as exc:  # a message that cannot be built must not stop the others
            failure = f"cannot build the message: {exc}"
            ledger.finish(claim.id, "failed", failure, run.now)
            run.outcome("failed", claim.email, failure)
            return None
        options = run.options
        sender = options.return_path(claim) if options.return_path else options.sender
        reply = self._attempt(ledger, claim, sender, message)
        self.ended = False  # its outcome is noted, or it was given back
        return reply

    def _attempt(self, ledger: Ledger, claim: Claim, sender: str, message: bytes) -> str | None:
        """One try: None when the delivery is settled, else the temporary failure's reply (the
        row is given back)."""
        run, now = self.run, self.run.now
        self.ended = False
        assert self.transport is not None
        try:
            reply = self.transport.send(
                sender, claim.email, message, lambda: self._end_of_data(ledger)
            )
        except TemporaryFailure as exc:
            if exc.reconnect:
                self.close()
            ledger.give_back(claim.id, exc.reply, now)
            if throttling(exc.reply):
                run.pacer.slowed(exc.reply)
            return exc.reply
        except PermanentFailure as exc:
            if exc.bounce:  # the recipient refused: a hard bounce or a soft one, by its words
                reason, hard = reply_reason(exc.reply)
                policy = run.options.bounces
                ledger.bounce(claim.id, claim.subscriber_id, exc.reply, hard, reason, policy, now)
            else:
                ledger.finish(claim.id, "failed", exc.reply, now)
            run.outcome("failed", claim.email, exc.reply)
            return None
        except DatabaseError:
            raise
        except DeliveryError as exc:  # the server refuses us: give the row back, stop
            ledger.give_back(claim.id, str(exc), now)
            raise
        except Exception as exc:
            self._broken(ledger, claim, exc)
            return None
        ledger.sent(claim.id, reply, now)
        run.outcome("sent", claim.email, reply)
        return None

    def _end_of_data(self, ledger: Ledger) -> None:
        """The transport's ``ending``: from now on the message may be accepted; unless this
        worker's database session has ended, which raises (nothing more is written: the
        run's rows may be being settled by another, and this one is pending again)."""
        ledger.check_session()
        self.ended = True

    def _broken(self, ledger: Ledger, claim: Claim, exc: Exception) -> None:
        """Anything else went wrong: uncertain if the end of data may be out, else failed."""
        self.close()  # the connection is in an unknown state
        if isinstance(exc, LostInFlight):
            status, reply = "uncertain", str(exc)
        elif self.ended:  # the end of data may be out
            status, reply = "uncertain", f"after the end of data: {exc!r}"
        else:
            status, reply = "failed", f"not sent: {exc!r}"
        ledger.finish(claim.id, status, reply, self.run.now)
        self.run.outcome(status, claim.email, reply)
