"""The delivery ledger: one row per message to one reader, and the protocol that sends each
exactly once.

A delivery is first only reserved (``Ledger.take``), marked ``sending`` and committed just
before its end of data, and its 250 recorded with the worker's next commit; a run that dies
leaves in flight only rows whose end of data went out, which the next run marks uncertain
(``mark_lost``) and never resends without a person deciding (``resend_uncertain``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

from .database import Database, database_error, inserted_id, release_session, utc
from .locks import one_send_run, run_lock, run_lock_key
from .schema import deliveries, issues, send_runs, subscribers
from .subscribers import BOUNCE_WINDOW, COUNT_BOUNCE, MARK_BOUNCED


@dataclass(frozen=True, slots=True)
class Claim:
    """A delivery a worker has taken: one message to one reader, reserved while it is written."""

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
_TAKE = (
    sa.select(
        deliveries.c.id,
        deliveries.c.issue_id,
        deliveries.c.subscriber_id,
        deliveries.c.email,
        deliveries.c.message_id,
    )
    .where(
        deliveries.c.status == "pending",
        sa.select(subscribers.c.id)
        .where(subscribers.c.id == deliveries.c.subscriber_id, subscribers.c.status == "active")
        .exists(),
        # what this run gave back after its retries waits for the next run
        sa.or_(deliveries.c.run_id.is_(None), deliveries.c.run_id != sa.bindparam("run_id")),
        _DUE,
    )
    .order_by(deliveries.c.id)
    .limit(sa.bindparam("n", type_=sa.Integer))
    .with_for_update(skip_locked=True, of=deliveries)
)

_IN_BATCH = sa.and_(
    deliveries.c.issue_id == sa.bindparam("issue_id"),
    deliveries.c.batch_no == sa.bindparam("batch_no"),
)
_TAKE_BATCH = _TAKE.where(_IN_BATCH)
"""``_TAKE`` within one batch of one issue: what a batch job sends."""

Batch = tuple[int, int]
"""(issue id, batch number): the deliveries one job sends."""


def _of(batch: Batch | None) -> sa.ColumnElement[bool]:
    """The rows of ``batch``; with None, every row."""
    if batch is None:
        return sa.true()
    return sa.and_(deliveries.c.issue_id == batch[0], deliveries.c.batch_no == batch[1])


_TAKE_BACK = (
    sa.select(deliveries.c.id)
    .where(deliveries.c.id == sa.bindparam("delivery_id"), deliveries.c.status == "pending")
    # Waits rather than skips: another worker's take may hold this row's lock without having
    # it (PostgreSQL keeps a row locked when its re-check after a concurrent update fails, to
    # the end of that worker's transaction: its message). Skipping left the row to the next
    # run; waiting finds it pending once that message is through, or taken by another run.
    .with_for_update()
)

_SENDING = (
    sa.update(deliveries)
    .where(deliveries.c.id == sa.bindparam("delivery_id"))
    .values(status="sending", run_id=sa.bindparam("run_id"), updated_at=sa.bindparam("now"))
)

# Every try ends in one of these two (and counts as an attempt).
_FINISH = (
    sa.update(deliveries)
    .where(deliveries.c.id == sa.bindparam("delivery_id"))
    .values(
        status=sa.bindparam("status"),
        reply=sa.bindparam("reply"),
        attempts=deliveries.c.attempts + 1,
        updated_at=sa.bindparam("now"),
    )
)

_GIVE_BACK = (
    sa.update(deliveries)
    .where(deliveries.c.id == sa.bindparam("delivery_id"))
    .values(
        status="pending",
        reply=sa.bindparam("reply"),
        run_id=sa.bindparam("run_id"),
        attempts=deliveries.c.attempts + 1,
        updated_at=sa.bindparam("now"),
    )
)

_HOLD_RUN = sa.select(sa.func.pg_advisory_lock_shared(sa.bindparam("key"), sa.bindparam("run_id")))
_SCHEMA = sa.select(sa.func.current_schema())


class _Compiled:
    """A statement compiled once for one dialect and run straight on the DBAPI cursor.

    The per-message path of a send runs two statements per message; SQLAlchemy's per-call
    work (cache keys, result objects, pool checkout) was measured at more than the database's
    own, so these skip it. The SQL is still SQLAlchemy's, rendered for the dialect.
    """

    def __init__(self, statement: sa.ClauseElement, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)  # a statement, not a DDL element
        self.compiled = compiled
        self.sql = str(compiled)
        self.order = compiled.positiontup if compiled.positional else None
        self.when = deliveries.c.updated_at.type.bind_processor(dialect)

    def params(self, values: dict[str, Any]) -> Any:
        """``values`` as the driver takes them for ``sql`` (times as the dialect stores them)."""
        if self.when is not None:
            values = {k: self.when(v) if isinstance(v, datetime) else v for k, v in values.items()}
        params: Any = self.compiled.construct_params(values)
        return [params[n] for n in self.order] if self.order else params

    def run(self, cursor: Any, values: dict[str, Any]) -> None:
        cursor.execute(self.sql, self.params(values))


class Ledger:
    """The per-message statements of delivery, on one worker's connection.

    A delivery is first only reserved (``take``: PostgreSQL locks the row ``FOR UPDATE SKIP
    LOCKED`` in a transaction left open; SQLite, one run at a time, keeps the ids its workers
    hold in memory), so a run that dies while writing a message leaves nothing in flight. Just
    before the end of data it is marked ``sending`` and committed (``sending``), together with
    the previous message's 250 (``sent`` only notes it): one commit per message, and on
    PostgreSQL one round trip for it (see ``_commit``). A database failure is raised as a
    DatabaseError.

    Its connection is driven through the DBAPI alone, from the first statement to the last:
    SQLAlchemy's per-call work was measured at more than the database's own on this path
    (see ``_Compiled``), and one connection never mixes two ways of committing.
    """

    def __init__(
        self,
        db: sa.Connection,
        lock: AbstractContextManager,
        reserved: set[int],
        run_id: int,
        batch: Batch | None = None,
    ) -> None:
        self._lock = lock
        self._batch = {"issue_id": batch[0], "batch_no": batch[1]} if batch else {}
        self._reserved = reserved
        self._run_id = run_id
        raw = db.connection.dbapi_connection
        assert raw is not None  # an open connection
        self._raw = raw
        self._cursor = raw.cursor()
        """One cursor for the connection's life: a new one per statement cost more than the
        statement's parameters."""
        self._dialect = db.dialect.name
        self._script: Any = None
        """PostgreSQL: a cursor that binds values itself, for a commit's statements sent as
        one script (``_commit``)."""
        if self._dialect == "postgresql":
            from psycopg import ClientCursor, Connection

            self._script = ClientCursor(cast(Connection, raw))
        self._errors = (db.dialect.loaded_dbapi.Error, sa.exc.DBAPIError)
        self._take = _Compiled(_TAKE_BATCH if batch else _TAKE, db.dialect)
        self._take_back = _Compiled(_TAKE_BACK, db.dialect)
        self._sending = _Compiled(_SENDING, db.dialect)
        self._finish = _Compiled(_FINISH, db.dialect)
        self._give_back = _Compiled(_GIVE_BACK, db.dialect)
        self._bounces = _Compiled(COUNT_BOUNCE, db.dialect)
        self._bounced = _Compiled(MARK_BOUNCED, db.dialect)
        self._hold_run = _Compiled(_HOLD_RUN, db.dialect)
        self._schema = _Compiled(_SCHEMA, db.dialect)
        self._noted: dict[str, Any] | None = None
        """The last 250, recorded with the next commit."""

    def _commit(self, *steps: tuple[_Compiled, dict[str, Any]]) -> None:
        """Run ``steps`` and the noted 250, if any, in one transaction (under the write lock)."""
        if self._noted is not None:
            steps = ((self._finish, self._noted), *steps)
        with self._lock, self._statements():
            try:
                if self._script is None:
                    for statement, values in steps:
                        statement.run(self._cursor, values)
                    self._raw.commit()
                else:
                    # One round trip for the statements, the commit and the start of the
                    # next transaction (so the next take needs no BEGIN of its own), where
                    # each was one: a script of several statements takes no parameters from
                    # the server, so the driver binds them here.
                    script = [self._script.mogrify(s.sql, s.params(v)) for s, v in steps]
                    self._script.execute("; ".join([*script, "COMMIT", "BEGIN"]))
            except BaseException:
                with suppress(*self._errors):
                    self._raw.rollback()
                raise
        self._noted = None

    @contextmanager
    def _statements(self) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            raise database_error(exc, self._dialect) from exc

    def _query(self, statement: _Compiled, values: dict[str, Any]) -> Sequence[Any]:
        statement.run(self._cursor, values)
        return self._cursor.fetchall()

    def hold_run(self) -> None:
        """PostgreSQL: hold the run's liveness lock shared on this worker's session, so the run
        is alive for others as long as this worker can record (``run_lock``)."""
        with self._statements():
            schema = self._query(self._schema, {})[0][0]
        self._commit((self._hold_run, {"key": run_lock_key(schema), "run_id": self._run_id}))

    def take(self, now: datetime) -> Claim | None:
        """Reserve the next pending delivery of an active reader whose time has come at
        ``now`` (nothing is recorded yet)."""
        values = {"run_id": self._run_id, "now": now, **self._batch}
        with self._lock, self._statements():
            if self._dialect == "postgresql":
                rows = self._query(self._take, {**values, "n": 1})
            else:  # skip what the other workers hold
                n = len(self._reserved) + 1
                rows = self._query(self._take, {**values, "n": n})
                rows = [row for row in rows if row[0] not in self._reserved][:1]
                self._reserved.update(row[0] for row in rows)
        return Claim(*rows[0]) if rows else None

    def take_back(self, delivery_id: int) -> bool:
        """Reserve again a delivery this worker gave back for a retry; False if another run
        has taken it meanwhile."""
        with self._lock, self._statements():
            rows = self._query(self._take_back, {"delivery_id": delivery_id})
            if rows and self._dialect != "postgresql":
                self._reserved.add(delivery_id)
        return bool(rows)

    def _release(self, delivery_id: int) -> None:
        with self._lock:
            self._reserved.discard(delivery_id)

    def sending(self, delivery_id: int, now: datetime) -> None:
        """The end of data is about to be written: from now on the message may be accepted."""
        values = {"delivery_id": delivery_id, "run_id": self._run_id, "now": now}
        self._commit((self._sending, values))
        self._release(delivery_id)

    def sent(self, delivery_id: int, reply: str, now: datetime) -> None:
        """Note a 250, to be committed with the worker's next commit (or ``flush``)."""
        self._noted = {"delivery_id": delivery_id, "status": "sent", "reply": reply, "now": now}

    def flush(self) -> None:
        """Commit the noted 250, if any."""
        if self._noted is not None:
            self._commit()

    def finish(self, delivery_id: int, status: str, reply: str, now: datetime) -> None:
        """Record how a delivery ended (failed, uncertain), in its own transaction."""
        values = {"delivery_id": delivery_id, "status": status, "reply": reply[:2000], "now": now}
        self._commit((self._finish, values))
        self._release(delivery_id)

    def give_back(self, delivery_id: int, reply: str, now: datetime) -> None:
        """Pending again, with the reply that put it back; this run does not take it again but
        by ``take_back``."""
        values = {"delivery_id": delivery_id, "reply": reply[:2000], "run_id": self._run_id}
        self._commit((self._give_back, {**values, "now": now}))
        self._release(delivery_id)

    def bounce(
        self,
        delivery_id: int,
        subscriber_id: int,
        reply: str,
        max_bounces: int,
        now: datetime,
        window: timedelta = BOUNCE_WINDOW,
    ) -> None:
        """A permanent failure: the delivery fails and the reader is bounced after max_bounces
        (each within ``window`` of the one before; see ``COUNT_BOUNCE``)."""
        failed = {"delivery_id": delivery_id, "status": "failed", "reply": reply[:2000]}
        reader = {"subscriber_id": subscriber_id}
        self._commit(
            (self._finish, {**failed, "now": now}),
            (self._bounces, {**reader, "now": now, "stale_before": now - window}),
            (self._bounced, {**reader, "max_bounces": max_bounces}),
        )
        self._release(delivery_id)


class Deliveries(Database):
    """The send runs and the deliveries' rows."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(engine)
        self._reserved: set[int] = set()
        """SQLite: deliveries this process's workers are writing (PostgreSQL locks the rows)."""

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
        a run that is no longer alive: its end of data was written, or about to be, when the
        run died. A batch's run looks at its own rows only: the other batches' are their own
        runs' and the reconciler's to settle, and probing every live worker's run at the start
        of each batch cost more than the batch's first messages."""
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
                    reply="the run ended after the end of data was written, before the reply",
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
    def ledger(self, run_id: int, batch: Batch | None = None) -> Iterator[Ledger]:
        """One delivery worker's own connection, held for its whole run; on PostgreSQL it holds
        the run's liveness lock too, so the run is alive for others as long as it can record.
        With ``batch`` it takes that batch's deliveries only."""
        with self._database(), self.engine.connect() as db:
            if self.engine.dialect.name != "postgresql":
                yield Ledger(db, self._write_lock, self._reserved, run_id, batch)
                return
            try:
                ledger = Ledger(db, self._write_lock, set(), run_id, batch)
                ledger.hold_run()
                yield ledger
            finally:
                release_session(db)

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
