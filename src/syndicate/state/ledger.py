"""The delivery ledger: one row per message to one reader, and the protocol that sends each
exactly once.

A worker claims a few deliveries at a time (``Ledger.claim``: marked ``sending`` for its run
and committed before the first of their messages is written) and notes each one's outcome, to
commit with its next claim; a run that dies leaves its claimed rows in flight, which the next
run marks uncertain (``mark_lost``) and never resends without a person deciding
(``resend_uncertain``). A worker that loses its database knows what it never wrote: it settles
its rows on a new session once the database answers again (``Ledger.reopen``), and leaves in
flight only a message whose end of data may have gone out without a reply.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.compiler import SQLCompiler

from .database import Database, database_error, inserted_id, release_session, utc
from .locks import one_send_run, run_lock
from .schema import deliveries, issues, send_runs, subscribers
from .subscribers import COUNT_HARD, COUNT_SOFT, MARK_HARD, MARK_SOFT, BouncePolicy


@dataclass(frozen=True, slots=True)
class Claim:
    """A delivery a worker has claimed: one message to one reader, in flight for its run."""

    id: int
    issue_id: int
    subscriber_id: int
    email: str
    message_id: str


@dataclass(frozen=True, slots=True)
class Delivery:
    id: int
    issue_key: str
    email: str
    message_id: str
    status: str
    attempts: int
    reply: str | None
    issue_id: int
    updated_at: datetime


_DUE = sa.or_(deliveries.c.not_before.is_(None), deliveries.c.not_before <= sa.bindparam("now"))
"""A delivery's time has come (a local-time digest's rows wait for their reader's hour)."""

# The statements of every delivery, built once (SQLAlchemy then reuses their compiled form).
_NEXT = (
    sa.select(deliveries.c.id)
    .where(
        deliveries.c.status == "pending",
        sa.select(subscribers.c.id)
        .where(subscribers.c.id == deliveries.c.subscriber_id, subscribers.c.status == "active")
        .exists(),
        # What this run gave back after its retries waits for a later run, or a later ``now``:
        # a worker's senders send all its batches as one run, a batch's retry among them.
        sa.or_(
            deliveries.c.run_id.is_(None),
            deliveries.c.run_id != sa.bindparam("run_id"),
            deliveries.c.updated_at < sa.bindparam("now"),
        ),
        _DUE,
    )
    .order_by(deliveries.c.id)
    .limit(sa.bindparam("n", type_=sa.Integer))
    .with_for_update(skip_locked=True)
)
"""The next ``n`` pending deliveries of active readers whose time has come, skipping those
another worker is claiming this instant."""

_IN_BATCH = sa.and_(
    deliveries.c.issue_id == sa.bindparam("issue_id"),
    deliveries.c.batch_no == sa.bindparam("batch_no"),
)


def _claim(batch: bool, recording: bool) -> sa.Update:
    """Mark the next pending deliveries (with ``batch``: of one batch of one issue, what a
    batch job sends) in flight for this run, returning what their messages need; with
    ``recording`` (PostgreSQL), recording the outcomes of the ones before in the same
    statement (``_RECORD``)."""
    taken = _NEXT.where(_IN_BATCH) if batch else _NEXT
    claim = (
        sa.update(deliveries)
        .where(deliveries.c.id.in_(taken))
        .values(status="sending", run_id=sa.bindparam("run_id"), updated_at=sa.bindparam("now"))
        .returning(
            deliveries.c.id,
            deliveries.c.issue_id,
            deliveries.c.subscriber_id,
            deliveries.c.email,
            deliveries.c.message_id,
        )
    )
    return claim.add_cte(_RECORD.cte("recorded")) if recording else claim


Batch = tuple[int, int]
"""(issue id, batch number): the deliveries one job sends."""


def _of(batch: Batch | None) -> sa.ColumnElement[bool]:
    """The rows of ``batch``; with None, every row."""
    if batch is None:
        return sa.true()
    return sa.and_(deliveries.c.issue_id == batch[0], deliveries.c.batch_no == batch[1])


_IN_FLIGHT = sa.and_(
    deliveries.c.status == "sending", deliveries.c.run_id == sa.bindparam("run_id")
)
"""In flight for this run: every mark is fenced by it, so the late mark of a run taken for
dead (its rows settled by another) changes nothing."""

_MINE = sa.and_(deliveries.c.id == sa.bindparam("delivery_id"), _IN_FLIGHT)
"""The one delivery a mark is for, if this run has it in flight."""

_STILL_MINE = sa.and_(_MINE, deliveries.c.updated_at == sa.bindparam("now"))
"""``_MINE``, claimed (or taken back) at ``now``, the ``now`` of every mark of one worker's
batch: what makes a row pending again, made a second time on a new session (the first
commit's reply lost), leaves alone a row a later batch of the same senders' run (a later
``now``) took in between."""

# Every try ends in one of these two (and counts as an attempt).
_FINISH = (
    sa.update(deliveries)
    .where(_MINE)
    .values(
        status=sa.bindparam("status"),
        reply=sa.bindparam("reply"),
        attempts=deliveries.c.attempts + 1,
        updated_at=sa.bindparam("now"),
    )
)

_OUTCOMES = (
    sa.func.unnest(
        sa.bindparam("ids", type_=postgresql.ARRAY(sa.Integer)),
        sa.bindparam("statuses", type_=postgresql.ARRAY(sa.String)),
        sa.bindparam("replies", type_=postgresql.ARRAY(sa.Text)),
    )
    .table_valued(
        sa.column("id", sa.Integer),
        sa.column("status", sa.String),
        sa.column("reply", sa.Text),
        name="outcome",
    )
    .render_derived()
)
_RECORD = (
    sa.update(deliveries)
    .where(deliveries.c.id == _OUTCOMES.c.id, _IN_FLIGHT)
    .values(
        status=_OUTCOMES.c.status,
        reply=_OUTCOMES.c.reply,
        attempts=deliveries.c.attempts + 1,
        updated_at=sa.bindparam("now"),
    )
)
"""PostgreSQL: ``_FINISH`` for many deliveries in one statement (their ids, statuses and
replies as arrays): one statement planned, where one per row cost more than the rows."""

_GIVE_BACK = (
    sa.update(deliveries)
    .where(_STILL_MINE)
    .values(
        status="pending",
        reply=sa.bindparam("reply"),
        attempts=deliveries.c.attempts + 1,
        updated_at=sa.bindparam("now"),
    )
)
"""Pending again after a try, with its reply; still this run's, which takes it again only by
``_TAKE_BACK`` (another run may take it meanwhile)."""

_UNCLAIM = (
    sa.update(deliveries)
    .where(_STILL_MINE)
    .values(status="pending", updated_at=sa.bindparam("now"))
)
"""A claimed delivery whose end of data the worker never wrote (not tried, or cut off before
it): pending, as if never claimed, but like ``_GIVE_BACK``'s not taken again by this run."""

_TAKE_BACK = (
    sa.update(deliveries)
    .where(
        deliveries.c.id == sa.bindparam("delivery_id"),
        deliveries.c.status == "pending",
        deliveries.c.run_id == sa.bindparam("run_id"),
    )
    .values(status="sending", updated_at=sa.bindparam("now"))
    .returning(deliveries.c.id)
)

_IN_HAND = sa.select(deliveries.c.id).where(_MINE).exists()
_COUNT_HARD = COUNT_HARD.where(_IN_HAND)
_COUNT_SOFT = COUNT_SOFT.where(_IN_HAND)
"""A bounce counted while its delivery is in flight for this run, so once: a commit whose
reply was lost and that is made again on a new session counts it no second time. A soft
one starts its reader's count again if a delivery of theirs was sent since the last (see
``COUNT_SOFT``): a delivery recorded ``sent`` changes no count, for behind a relay its
bounce may still come by mail."""

_HOLD_RUN = sa.select(sa.func.pg_advisory_lock_shared(sa.bindparam("key"), sa.bindparam("run_id")))
_SCHEMA = sa.select(sa.func.current_schema())


class _Compiled:
    """A statement compiled once for one dialect and run straight on the DBAPI cursor.

    The per-message path of a send runs a statement or two per message; SQLAlchemy's per-call
    work (cache keys, result objects, pool checkout) was measured at more than the database's
    own, so these skip it. The SQL is still SQLAlchemy's, rendered for the dialect.
    """

    def __init__(self, statement: sa.ClauseElement, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)  # a statement, not a DDL element
        self.sql = str(compiled)
        self.order = compiled.positiontup if compiled.positional else None
        self.when = deliveries.c.updated_at.type.dialect_impl(dialect).bind_processor(dialect)
        self.fixed = dict(compiled.construct_params(_check=False))
        """Every parameter by name, with the values the statement itself carries (a status
        it sets, a limit's offset): looked up once, not worked out again for each call."""

    def params(self, values: dict[str, Any]) -> Any:
        """``values`` as the driver takes them for ``sql``: times as the dialect's own type
        stores them (on SQLite, the text SQLAlchemy writes everywhere else, so that they
        compare as times)."""
        if self.when is not None:
            values = {k: self.when(v) if isinstance(v, datetime) else v for k, v in values.items()}
        params = {**self.fixed, **values}
        if self.order:
            return [params[n] for n in self.order]
        return {n: params[n] for n in self.fixed}


Step = tuple[_Compiled, dict[str, Any]]
"""A statement and its values."""


class Ledger:
    """The per-message statements of delivery, on one worker's connection.

    A worker claims up to ``micro_batch`` deliveries at once: marks them ``sending`` for its
    run and commits, before the first of their messages is written, so a run that dies leaves
    in flight (to be marked uncertain, never resent blindly) at most that many per connection,
    and every message it may have written among them. Each outcome (sent, failed, uncertain)
    is only noted, and committed with the worker's next claim (or ``flush``): one commit, and
    on PostgreSQL one statement, per micro-batch. Every mark is fenced by the run and the
    state (``_MINE``). A database failure is raised as a DatabaseError; what the failed commit
    held (outcomes, bounces, rows given back) is kept and committed with the next one, which
    may be on a new session (``reopen``).

    Its connection is driven through the DBAPI alone, from the first statement to the last:
    SQLAlchemy's per-call work was measured at more than the database's own on this path
    (see ``_Compiled``), and one connection never mixes two ways of committing. On
    PostgreSQL it is in autocommit: a claim is one prepared statement, and a commit of several
    statements goes as one script, which the server runs as one transaction.
    """

    def __init__(
        self,
        db: sa.Connection,
        session: Callable[[], sa.Connection],
        lock: AbstractContextManager,
        run_id: int,
        batch: Batch | None,
        statements: dict[str, _Compiled],
    ) -> None:
        self._session = session
        """A new session of this worker's (on PostgreSQL holding the run's liveness lock)."""
        self._lock = lock
        self._batch = {"issue_id": batch[0], "batch_no": batch[1]} if batch else {}
        self._run_id = run_id
        self._sql = statements
        self._noted: list[tuple[int, str, str]] = []
        """Outcomes (delivery id, status, reply) to commit with the next claim (or ``flush``)."""
        self._noted_at = datetime.min
        """When the last of them was noted (what they are recorded at)."""
        self._owed: list[Step] = []
        """Bounces and rows given back whose commit failed: committed with the next one."""
        self._attach(db)

    def _attach(self, db: sa.Connection) -> None:
        raw = db.connection.dbapi_connection
        assert raw is not None  # an open connection
        self._raw = raw
        self._pg = db.dialect.name == "postgresql"
        self._cursor: Any = raw.cursor()
        """One cursor for the connection's life: a new one per statement cost more than the
        statement's parameters."""
        self._script: Any = None
        """PostgreSQL: a cursor that binds values itself, for a commit's statements sent as
        one script (a script of several statements takes no parameters from the server)."""
        if self._pg:
            from psycopg import ClientCursor, Connection

            self._script = ClientCursor(cast(Connection, raw))
        self._errors = (db.dialect.loaded_dbapi.Error, sa.exc.DBAPIError)

    def reopen(self) -> None:
        """Go on on a new session, in place of one the database ended or failed: to commit
        what this worker holds once the database answers again. Raises DatabaseError while
        it does not."""
        self._attach(self._session())

    def for_batch(self, batch: Batch) -> None:
        """Claim ``batch``'s deliveries from now on (a ledger opened for a batch)."""
        assert self._batch, "a ledger of every batch claims from every batch"
        self._batch = {"issue_id": batch[0], "batch_no": batch[1]}

    def _step(self, name: str, **values: Any) -> Step:
        return self._sql[name], values

    def _outcomes(self) -> dict[str, Any]:
        """The noted outcomes as ``_RECORD`` takes them."""
        ids, statuses, replies = zip(*self._noted, strict=True) if self._noted else ((), (), ())
        lists = {"ids": list(ids), "statuses": list(statuses), "replies": list(replies)}
        return {**lists, "run_id": self._run_id, "now": self._noted_at}

    def _recording(self) -> list[Step]:
        """The statements that record the noted outcomes."""
        if not self._noted:
            return []
        if self._pg:
            return [self._step("record", **self._outcomes())]
        mine = {"run_id": self._run_id, "now": self._noted_at}
        return [
            self._step("finish", delivery_id=i, status=status, reply=reply, **mine)
            for i, status, reply in self._noted
        ]

    def _commit(self, *steps: Step) -> list[Any]:
        """What is owed, the noted outcomes and ``steps``, in one transaction (under the write
        lock); the rows the last step returns. What is owed comes first: a bounce is counted
        while its delivery is still in flight (``_COUNT_HARD``, ``_COUNT_SOFT``)."""
        steps = (*self._owed, *self._recording(), *steps)
        with self._lock, self._statements():
            try:
                if self._pg:
                    script = [self._script.mogrify(s.sql, s.params(v)) for s, v in steps]
                    self._script.execute("; ".join(script))
                    while self._script.nextset():  # to the last statement's result
                        pass
                    cursor = self._script
                else:
                    self._run_sqlite(steps)
                    cursor = self._cursor
                rows = cursor.fetchall() if cursor.description else []
                self._raw.commit()
            except BaseException:
                with suppress(*self._errors):
                    self._raw.rollback()
                raise
        self._noted, self._owed = [], []
        return rows

    def _run_sqlite(self, steps: Sequence[Step]) -> None:
        """SQLite: ``steps`` in order, a run of the same statement (a micro-batch's outcomes)
        as one ``executemany``; the last on its own, for the rows it returns."""
        if not steps:
            return
        *before, last = steps
        for statement, group in groupby(before, key=lambda step: step[0]):
            each = [statement.params(values) for _, values in group]
            if len(each) > 1:
                self._cursor.executemany(statement.sql, each)
            else:  # one: ``execute`` costs less
                self._cursor.execute(statement.sql, each[0])
        statement, values = last
        self._cursor.execute(statement.sql, statement.params(values))

    def _prepared(self, step: Step) -> list[Any]:
        """PostgreSQL: one statement, prepared on the server (planned once, not per claim),
        committed on its own."""
        statement, values = step
        with self._lock, self._statements():
            self._cursor.execute(statement.sql, statement.params(values), prepare=True)
            rows = self._cursor.fetchall()
        self._noted = []
        return rows

    @contextmanager
    def _statements(self) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            raise database_error(exc, "postgresql" if self._pg else "sqlite") from exc

    def check_session(self) -> None:
        """PostgreSQL: raise DatabaseError if the server has ended this session (it says so
        before closing one), before the end of data of a claimed message is written: the
        run's liveness lock went with it, so another run may be settling the rows in flight."""
        if self._pg and select.select([self._raw.fileno()], [], [], 0)[0]:
            self._commit(self._step("schema"))  # fails if it was the end, else a notice

    def claim(self, now: datetime, n: int) -> list[Claim]:
        """Record the noted outcomes and mark up to ``n`` pending deliveries of active readers
        whose time has come at ``now`` in flight for this run, in id order."""
        values = {"run_id": self._run_id, "now": now, "n": n, **self._batch}
        if self._pg:  # recording is part of the claim
            rows = self._prepared(self._step("claim", **{**self._outcomes(), **values}))
        else:
            rows = self._commit(self._step("claim", **values))
        return [Claim(*row) for row in sorted(rows)]

    def take_back(self, delivery_id: int, now: datetime) -> bool:
        """In flight again: a delivery this worker gave back for a retry; False if another run
        has taken it meanwhile."""
        step = self._step("take_back", delivery_id=delivery_id, run_id=self._run_id, now=now)
        return bool(self._commit(step))

    def sent(self, delivery_id: int, reply: str, now: datetime) -> None:
        """Note a 250."""
        self.finish(delivery_id, "sent", reply, now)

    def finish(self, delivery_id: int, status: str, reply: str, now: datetime) -> None:
        """Note how a delivery ended (sent, failed, uncertain)."""
        self._noted.append((delivery_id, status, reply[:2000]))
        self._noted_at = now

    def bounce(
        self,
        delivery_id: int,
        subscriber_id: int,
        reply: str,
        hard: bool,
        reason: str,
        policy: BouncePolicy,
        now: datetime,
    ) -> None:
        """A 5xx for this reader, committed at once: the delivery fails and a hard bounce
        (``hard``) or a soft one is counted for the reader, with ``reason``, who is marked
        bounced when it reaches ``policy``'s limit (see ``COUNT_HARD``, ``COUNT_SOFT``)."""
        self.finish(delivery_id, "failed", reply, now)
        mine = {"delivery_id": delivery_id, "run_id": self._run_id}
        values = {"subscriber_id": subscriber_id, "reason": reason[:40], **policy.values(now)}
        kind = "hard" if hard else "soft"
        self._owed += [
            self._step(f"count_{kind}", **values, **mine),
            self._step(f"mark_{kind}", **values),
        ]
        self._commit()

    def give_back(self, delivery_id: int, reply: str, now: datetime) -> None:
        """Pending again, with the reply that put it back, committed at once (nothing is held
        while the worker waits to retry it); this run takes it again only by ``take_back``."""
        mine = {"delivery_id": delivery_id, "run_id": self._run_id}
        self._owed.append(self._step("give_back", **mine, reply=reply[:2000], now=now))
        self._commit()

    def flush(self, now: datetime, unclaimed: Sequence[int] = ()) -> None:
        """Record the noted outcomes and what is owed, and give back ``unclaimed``: claimed
        deliveries the worker never wrote the end of data of (pending again at ``now``; one
        with an outcome noted keeps it). On failure, made again whole by the next call."""
        mine = {"run_id": self._run_id, "now": now}
        back = [self._step("unclaim", delivery_id=i, **mine) for i in unclaimed]
        if self._noted or self._owed or back:
            self._commit(*back)

    def holding(self, unclaimed: Sequence[int] = ()) -> int:
        """The deliveries this worker has marks of to commit, ``unclaimed`` among them."""
        held = {i for i, _, _ in self._noted} | set(unclaimed)
        return len(held | {v["delivery_id"] for _, v in self._owed if "delivery_id" in v})


@contextmanager
def _ledger_session(
    engine: sa.Engine, run_id: int, key: Callable[[sa.Connection], int]
) -> Iterator[sa.Connection]:
    """A ledger's session; on PostgreSQL in autocommit, holding the run's liveness lock
    (``key`` gives ``run_lock``'s), and given back to the pool without it."""
    with engine.connect() as db:
        if engine.dialect.name != "postgresql":
            yield db
            return
        try:
            db.execution_options(isolation_level="AUTOCOMMIT")
            # autocommit: no transaction is left open by the look-up of the key
            db.execute(_HOLD_RUN, {"key": key(db), "run_id": run_id})
            yield db
        finally:
            release_session(db)


def ledger_statements(dialect: sa.Dialect, batch: bool) -> dict[str, _Compiled]:
    """The statements of a ``Ledger``, by name, compiled for ``dialect``."""
    pg = dialect.name == "postgresql"
    statements = {
        "claim": _claim(batch, recording=pg),
        "record" if pg else "finish": _RECORD if pg else _FINISH,
        "take_back": _TAKE_BACK,
        "give_back": _GIVE_BACK,
        "unclaim": _UNCLAIM,
        "count_hard": _COUNT_HARD,
        "count_soft": _COUNT_SOFT,
        "mark_hard": MARK_HARD,
        "mark_soft": MARK_SOFT,
        "schema": _SCHEMA,
    }
    return {name: _Compiled(statement, dialect) for name, statement in statements.items()}


class Deliveries(Database):
    """The send runs and the deliveries' rows."""

    def __init__(self, engine: sa.Engine, write_lock: AbstractContextManager | None = None) -> None:
        super().__init__(engine, write_lock)
        self._ledger_sql: dict[bool, dict[str, _Compiled]] = {}
        """The ledgers' statements (with and without a batch), compiled once: compiling them
        for each of a batch's connections was a tenth of a worker's time."""
        self._compiling = threading.Lock()
        self._run_key: int | None = None
        """PostgreSQL: ``run_lock``'s key, once the first ledger looked it up."""

    @contextmanager
    def send_run(self, now: datetime) -> Iterator[int]:
        """Register a send run and hold its liveness lock until the block ends.

        PostgreSQL: a session advisory lock per run, held shared by the run and by each of its
        workers (``ledger``), so runs proceed side by side and each can tell a dead run's rows
        in flight from a live one's. SQLite: one run at a time (an exclusive lock on a file
        beside the database; a second run waits), so every row found in flight at the start of
        a run belongs to a dead one.
        """
        lock_conn = None
        with one_send_run(self.engine):
            try:
                with self._database():
                    with self._transaction() as db:
                        insert = sa.insert(send_runs).values(
                            host=socket.gethostname()[:255], pid=os.getpid(), started_at=now
                        )
                        run_id = inserted_id(db.execute(insert))
                    if self.engine.dialect.name == "postgresql":
                        lock_conn = self.engine.connect()
                        key = run_lock(lock_conn)
                        lock_conn.execute(sa.select(sa.func.pg_advisory_lock_shared(key, run_id)))
                        lock_conn.commit()
                yield run_id
                with self._database(), self._transaction() as db:
                    db.execute(
                        sa.update(send_runs).where(send_runs.c.id == run_id).values(finished_at=now)
                    )
            finally:
                if lock_conn is not None:
                    release_session(lock_conn)

    def mark_lost(self, run_id: int, now: datetime, batch: Batch | None = None) -> int:
        """Mark ``uncertain`` every delivery (with ``batch``, that batch's) left ``sending`` by
        a run that is no longer alive: one killed, or whose database did not answer again
        while it waited to settle them, so its end of data may have been written. A batch's
        run looks at its own rows only: the other batches' are their own runs' and the
        reconciler's to settle, and probing every live worker's run at the start of each
        batch cost more than the batch's first messages."""
        lost = sa.select(deliveries.c.run_id).where(
            deliveries.c.status == "sending", deliveries.c.run_id != run_id, _of(batch)
        )
        with self._database(), self.engine.connect() as db:
            others = db.execute(lost.distinct()).scalars().all()
            dead = []
            key = run_lock(db) if others and self.engine.dialect.name == "postgresql" else 0
            for other in others:
                if self.engine.dialect.name != "postgresql":
                    dead.append(other)
                elif db.execute(sa.select(sa.func.pg_try_advisory_lock(key, other))).scalar():
                    db.execute(sa.select(sa.func.pg_advisory_unlock(key, other)))
                    dead.append(other)
            db.commit()
        if not dead:
            return 0
        with self._database(), self._transaction() as db:
            return db.execute(
                sa.update(deliveries)
                .where(deliveries.c.status == "sending", deliveries.c.run_id.in_(dead), _of(batch))
                .values(
                    status="uncertain",
                    reply="the run ended with it in flight: its end of data may have been written",
                    updated_at=now,
                )
            ).rowcount

    def skip_inactive(self, now: datetime, batch: Batch | None = None) -> int:
        """Pending deliveries (with ``batch``, that batch's) of readers who left (or were
        removed) since the issue: skipped. Each row looks its own reader up (a subquery per
        row, which PostgreSQL does not turn into a join): as a join, a batch's 500 rows were
        matched against a hash of every reader of the site, for each batch."""
        status = (
            sa.select(subscribers.c.status)
            .where(subscribers.c.id == deliveries.c.subscriber_id)
            .scalar_subquery()
        )
        update = sa.update(deliveries).where(
            deliveries.c.status == "pending", status.is_distinct_from("active"), _of(batch)
        )
        with self._database(), self._transaction() as db:
            result = db.execute(
                update.values(status="skipped", reply="reader no longer active", updated_at=now)
            )
        return result.rowcount

    def skip_consent_source(self, source: str, reply: str, now: datetime) -> int:
        """Pending deliveries of the readers added with consent source ``source``: skipped."""
        readers = sa.select(subscribers.c.id).where(subscribers.c.consent_source == source)
        with self._database(), self._transaction() as db:
            result = db.execute(
                sa.update(deliveries)
                .where(deliveries.c.status == "pending", deliveries.c.subscriber_id.in_(readers))
                .values(status="skipped", reply=reply, updated_at=now)
            )
        return result.rowcount

    def pending_count(self, now: datetime | None = None, batch: Batch | None = None) -> int:
        """Pending deliveries; with ``now``, only those whose time has come; with ``batch``,
        only that batch's."""
        query = sa.select(sa.func.count()).where(deliveries.c.status == "pending")
        if now is not None:
            query = query.where(_DUE).params(now=now)
        with self._database(), self.engine.connect() as db:
            return db.execute(query.where(_of(batch))).scalar_one()

    def pending_batches(self, now: datetime) -> list[Batch]:
        """The batches that have deliveries pending whose time has come."""
        query = (
            sa.select(deliveries.c.issue_id, deliveries.c.batch_no)
            .where(deliveries.c.status == "pending", deliveries.c.batch_no.is_not(None), _DUE)
            .distinct()
            .order_by(deliveries.c.issue_id, deliveries.c.batch_no)
        )
        with self._database(), self.engine.connect() as db:
            return [(i, b) for i, b in db.execute(query, {"now": now})]

    def waiting(self, now: datetime) -> list[tuple[int, str, str | None, datetime, int]]:
        """(issue id, issue key, time zone, not before, deliveries) of the pending deliveries
        whose time has not come, soonest first: a local-time digest waiting for its zones."""
        query = (
            sa.select(
                issues.c.id,
                issues.c.key,
                subscribers.c.timezone,
                deliveries.c.not_before,
                sa.func.count(),
            )
            .join(issues, issues.c.id == deliveries.c.issue_id)
            .outerjoin(subscribers, subscribers.c.id == deliveries.c.subscriber_id)
            .where(
                deliveries.c.status.in_(("pending", "held")),
                deliveries.c.not_before > now,
            )
            .group_by(issues.c.id, issues.c.key, subscribers.c.timezone, deliveries.c.not_before)
            .order_by(deliveries.c.not_before, issues.c.id)
        )
        with self.engine.connect() as db:
            return [(i, k, z, utc(t), n) for i, k, z, t, n in db.execute(query)]

    def next_release(self, after: datetime | None = None) -> datetime | None:
        """When the first pending delivery waiting for its reader's local time is due (after
        ``after``, if given): what the release job is set for, whatever became of its last run."""
        query = sa.select(sa.func.min(deliveries.c.not_before)).where(
            deliveries.c.status == "pending", deliveries.c.not_before.is_not(None)
        )
        if after is not None:
            query = query.where(deliveries.c.not_before > after)
        with self._database(), self.engine.connect() as db:
            first = db.execute(query).scalar_one()
        return None if first is None else utc(first)

    @contextmanager
    def session(self, run_id: int, batch: Batch | None = None) -> Iterator[Ledger]:
        """One delivery worker's own session, held for its whole run (and another, should the
        database end or fail it: ``Ledger.reopen``); on PostgreSQL each holds the run's
        liveness lock too, so the run is alive for others as long as it can record. With
        ``batch`` it claims that batch's deliveries only."""
        with self._database(), ExitStack() as sessions:

            def session() -> sa.Connection:
                with self._database():
                    return sessions.enter_context(_ledger_session(self.engine, run_id, self._key))

            db = session()
            with self._compiling:  # once, not by each of the workers starting together
                if (batch is not None) not in self._ledger_sql:
                    self._ledger_sql[batch is not None] = ledger_statements(db.dialect, bool(batch))
            statements = self._ledger_sql[batch is not None]
            yield Ledger(db, session, self._write_lock, run_id, batch, statements)

    def _key(self, db: sa.Connection) -> int:
        """PostgreSQL: ``run_lock``'s key, looked up once."""
        if self._run_key is None:
            self._run_key = run_lock(db)
        return self._run_key

    def delivery_counts(self) -> dict[tuple[int, str, str], int]:
        """(issue id, issue key, status) → number of deliveries."""
        query = (
            sa.select(issues.c.id, issues.c.key, deliveries.c.status, sa.func.count())
            .join(issues, issues.c.id == deliveries.c.issue_id)
            .group_by(issues.c.id, issues.c.key, deliveries.c.status)
        )
        with self.engine.connect() as db:
            return {(i, key, status): n for i, key, status, n in db.execute(query)}

    def deliveries(
        self,
        status: str | None = None,
        *,
        ids: Sequence[int] | None = None,
        issue_id: int | None = None,
    ) -> list[Delivery]:
        query = (
            sa.select(
                deliveries.c.id,
                issues.c.key,
                deliveries.c.email,
                deliveries.c.message_id,
                deliveries.c.status,
                deliveries.c.attempts,
                deliveries.c.reply,
                deliveries.c.issue_id,
                deliveries.c.updated_at,
            )
            .join(issues, issues.c.id == deliveries.c.issue_id)
            .order_by(deliveries.c.id)
        )
        if status is not None:
            query = query.where(deliveries.c.status == status)
        if ids is not None:
            query = query.where(deliveries.c.id.in_(ids))
        if issue_id is not None:
            query = query.where(deliveries.c.issue_id == issue_id)
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        return [Delivery(*row[:-1], updated_at=utc(row.updated_at)) for row in rows]

    def resend_uncertain(self, delivery_ids: Sequence[int], now: datetime) -> int:
        """Put uncertain deliveries back in the queue: a person decided they did not arrive.
        Their issues are open again until they are settled (``close_finished``)."""
        uncertain = sa.and_(deliveries.c.status == "uncertain", deliveries.c.id.in_(delivery_ids))
        with self._transaction() as db:
            db.execute(
                sa.update(issues)
                .where(issues.c.id.in_(sa.select(deliveries.c.issue_id).where(uncertain)))
                .values(finished_at=None)
            )
            result = db.execute(
                sa.update(deliveries)
                .where(uncertain)
                .values(status="pending", run_id=None, updated_at=now)
            )
        return result.rowcount
