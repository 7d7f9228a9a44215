"""An issue's readers planned in chunks: the issue commits with its first chunk of delivery rows,
each further chunk with its own, behind a cursor (``issues.planned_through``) that keeps two
planners apart; and an issue closed once nothing of it is left to send."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from .database import Database, insert_or_skip, utc
from .issues import (
    BATCH_SIZE,
    LIVE,
    STANDING,
    CarriedArticle,
    Issue,
    Issues,
    Within,
    batch_range,
    insert_issue,
    issue_from_row,
    issue_values,
)
from .schema import deliveries, issues, subscribers
from .subscribers import group_filter

PLAN_CHUNK = 10_000
"""Readers per planning transaction (whole batches)."""


@dataclass(frozen=True)
class Planning:
    """How an issue's delivery rows are written: a chunk of its readers per transaction, each
    with what ``within`` adds (the chunk's jobs), in subscriber-id order."""

    message_id: str
    """The deliveries' Message-ID, with ``{issue}`` and ``{reader}`` (their ids) in it: stable
    per (issue, reader), and written by the database itself."""
    now: datetime
    not_before: Callable[[str | None], datetime | None] | None = None
    """A reader's zone (None: the site's) → the time before which their delivery is not sent
    (local-time digests)."""
    within: Within | None = None
    batch_size: int = BATCH_SIZE
    chunk: int = PLAN_CHUNK
    """Readers per transaction, rounded up to whole batches (``rows``)."""
    leave_out: str | None = None
    """Readers of this consent source get no delivery (the sample readers when a real SMTP
    server is set)."""

    @property
    def rows(self) -> int:
        """Rows per chunk: whole batches, so that no batch is split across two chunks and the
        batch numbers of the next chunk follow on."""
        return -(-self.chunk // self.batch_size) * self.batch_size


@dataclass(frozen=True, slots=True)
class Finished:
    """An issue closed: nothing of it is left to send (or held, or in flight)."""

    id: int
    key: str
    counts: dict[str, int]
    """Deliveries that were sent, failed, uncertain and skipped."""


SETTLED = ("sent", "failed", "uncertain", "skipped")
_OPEN = ("held", "pending", "sending")
"""Delivery statuses that keep an issue open."""


ANALYZE_ROWS = 1_000
"""A chunk of this many rows or more has PostgreSQL's statistics of the deliveries and the
readers renewed."""


def _broadcast_slug(key: str) -> str | None:
    """The article of a broadcast's issue (key ``<variant>.<slug>``); None for a digest's."""
    _, dot, slug = key.partition(".")
    return slug if dot else None


def _unreached(issue_id: int, key: str) -> sa.ColumnElement[bool]:
    """The readers with no delivery of the issue, nor, for a broadcast, of the standing issue
    of another group of its article: a reader who moved from one group to another (or to
    another language) has had it."""
    mine = deliveries.c.issue_id == issue_id
    if (slug := _broadcast_slug(key)) is not None:
        siblings = sa.select(issues.c.id).where(
            issues.c.key.endswith(f".{slug}", autoescape=True), issues.c.state.in_(STANDING)
        )
        mine = mine | deliveries.c.issue_id.in_(siblings)
    had = sa.select(deliveries.c.id).where(deliveries.c.subscriber_id == subscribers.c.id, mine)
    return ~had.exists()


def _write_chunk(
    db: sa.Connection,
    issue: sa.Row,
    after: int | None,
    first_batch: int,
    plan: Planning,
    *,
    unreached: bool = False,
) -> tuple[int | None, int]:
    """The delivery rows of the next chunk of ``issue``'s readers (id above ``after``) and
    what ``plan.within`` adds; returns the cursor (the last reader id the chunk covers) when
    more readers follow, else None (the issue is fully planned), and the rows written.
    ``unreached``: some readers may have it already (the issue is planned again, or is a
    broadcast, ``_unreached``); the chunk is of those who have not, and a row that is there
    anyway is left as it is (``ON CONFLICT DO NOTHING`` on the one delivery per issue and
    reader).

    One ``INSERT … SELECT``: the rows never pass through Python, so planning a list costs
    the database's time and no memory that grows with it."""
    group = group_filter(issue.lang, issue.audiences, after=after, leave_out=plan.leave_out)
    if unreached:
        group = group & _unreached(issue.id, issue.key)
    next_chunk = sa.select(subscribers.c.id).where(group).order_by(subscribers.c.id)
    bound = db.execute(next_chunk.offset(plan.rows).limit(1)).scalar()
    if bound is not None:
        group = group & (subscribers.c.id < bound)
    number = sa.func.row_number().over(order_by=subscribers.c.id) - 1
    rows = sa.select(
        sa.literal(issue.id),
        subscribers.c.id,
        subscribers.c.email,
        _message_id(plan.message_id, issue.id),
        sa.literal("held" if issue.state == "held" else "pending"),
        sa.literal(plan.now, sa.DateTime(timezone=True)),
        _not_before(db, group, plan),
        (number + first_batch * plan.batch_size) // plan.batch_size,
    ).where(group)
    columns = [
        "issue_id", "subscriber_id", "email", "message_id", "status", "updated_at",
        "not_before", "batch_no",
    ]  # fmt: skip
    insert = _insert(db, unreached).from_select(columns, rows)
    written = db.execute(insert.execution_options(preserve_rowcount=True)).rowcount
    if plan.within is not None:
        plan.within(db, issue.id, batch_range(first_batch, written, plan.batch_size))
    return (bound - 1 if bound is not None else None), written


def _insert(db: sa.Connection, unreached: bool) -> sa.Insert:
    """The deliveries' insert; planned again (``unreached``), one that skips a reader's row
    already there rather than fail on it, whatever another planner wrote meanwhile."""
    if not unreached:
        return sa.insert(deliveries)
    return insert_or_skip(db, deliveries, deliveries.c.issue_id, deliveries.c.subscriber_id)


def _next_chunk(
    db: sa.Connection, issue_id: int, after: int, plan: Planning
) -> tuple[int | None, int]:
    """``_write_chunk`` of the issue's readers above ``after``, its batches following on from
    the issue's last; only those without a delivery when it is planned again (a delivery
    above ``after``) or is a broadcast (whose readers may have it from another group)."""
    issue = db.execute(sa.select(issues).where(issues.c.id == issue_id)).one()
    # two statements: each maximum is one probe of its own index; asked together, SQLite
    # reads every delivery of the issue (a million rows, at every chunk)
    mine = deliveries.c.issue_id == issue_id
    batch = db.execute(sa.select(sa.func.max(deliveries.c.batch_no)).where(mine)).scalar()
    reader = db.execute(sa.select(sa.func.max(deliveries.c.subscriber_id)).where(mine)).scalar()
    again = (reader is not None and reader > after) or _broadcast_slug(issue.key) is not None
    first = 0 if batch is None else batch + 1
    return _write_chunk(db, issue, after, first, plan, unreached=again)


def _message_id(pattern: str, issue_id: int) -> sa.ColumnElement[str]:
    """``Planning.message_id`` for each reader, as the database writes it."""
    before, _, after = pattern.format(issue=issue_id, reader="\0").partition("\0")
    return sa.literal(before) + sa.cast(subscribers.c.id, sa.String) + sa.literal(after)


def _not_before(
    db: sa.Connection, group: sa.ColumnElement[bool], plan: Planning
) -> sa.ColumnElement[Any]:
    """Each reader's ``Planning.not_before``: one value per zone the chunk's readers are in."""
    stamp = sa.DateTime(timezone=True)
    if plan.not_before is None:
        return sa.null()
    zones = db.execute(sa.select(subscribers.c.timezone).where(group).distinct()).scalars()
    times = {zone: plan.not_before(zone) for zone in zones}
    cases = [
        (subscribers.c.timezone.is_(None) if zone is None else subscribers.c.timezone == zone,
         sa.literal(when, stamp))
        for zone, when in times.items()
    ]  # fmt: skip
    return sa.case(*cases, else_=sa.null()) if cases else sa.null()


def _set_cursor(issue_id: int, cursor: int | None) -> sa.Update:
    return sa.update(issues).where(issues.c.id == issue_id).values(planned_through=cursor)


class IssuePlanning(Database):
    """Issues opened and planned a chunk of readers at a time, and closed once settled; the
    issues themselves, as they stand, are ``issues``'."""

    def __init__(
        self, engine: sa.Engine, write_lock: AbstractContextManager | None, issues: Issues
    ) -> None:
        super().__init__(engine, write_lock)
        self.issues = issues

    def open_issue(
        self,
        *,
        key: str,
        lang: str,
        audiences: Sequence[str],
        content_hash: str,
        subject: str,
        rendered: str,
        articles: Sequence[CarriedArticle],
        plan: Planning,
        held: bool = False,
        local_time: str | None = None,
        sample: bool = False,
    ) -> Issue | None:
        """Record a new issue for the active readers of its variant (``lang`` and exactly
        ``audiences``), with the (lang, slug, content hash) of its ``articles``, and its
        first chunk of deliveries and what ``plan.within`` adds, in one transaction.

        When more readers follow, the issue keeps the last reader id written
        (``planned_through``) and ``plan_chunk`` writes the rest, a chunk per transaction.
        Returns None when this variant already had an issue with the same content (also when
        a concurrent run recorded it first). ``held``: the issue and its deliveries wait for
        ``release_issue``; ``local_time`` (HH:MM) is kept for the chunks that follow;
        ``sample``: its readers are all sample readers (``SAMPLE``), never held.
        """
        values = {
            **issue_values(
                key, lang, audiences, content_hash, subject, rendered, plan.now, held, sample
            ),
            "local_time": local_time,
        }
        try:
            with self._transaction() as db:
                issue_id = insert_issue(db, values, articles)
                issue = db.execute(sa.select(issues).where(issues.c.id == issue_id)).one()
                cursor, written = _write_chunk(db, issue, None, 0, plan)
                if cursor is not None:
                    db.execute(_set_cursor(issue_id, cursor))
        except sa.exc.IntegrityError:
            return None
        self._renew_statistics(written)
        return self.issues.issue(issue_id)

    def _renew_statistics(self, written: int) -> None:
        """After a large first or last chunk, PostgreSQL's statistics of the deliveries and
        the readers: planned from stale ones (new rows have none until autovacuum comes by,
        if it is on), taking the next pending row reads every pending row, or every reader,
        instead of one from an index (a second a message at 6,000 readers imported just before)."""
        if written >= ANALYZE_ROWS and self.engine.dialect.name == "postgresql":
            with self._transaction() as db:
                db.execute(sa.text("ANALYZE deliveries, subscribers"))

    def plan_chunk(self, issue_id: int, after: int, plan: Planning) -> int | None:
        """Write the deliveries of the next chunk of an issue's readers (id above ``after``),
        what ``plan.within`` adds and the cursor's advance, in one transaction fenced on the
        cursor: of two planners at ``after``, one writes the chunk and the other finds the
        cursor moved. Returns the cursor as it now stands (the last reader id planned, None
        once every reader is, or the issue was withdrawn), so a caller goes on from there.

        Rows of a held issue are held; batch numbers follow on from its last batch.
        """
        return self._plan_chunk(issue_id, after, plan)[0]

    def _plan_chunk(self, issue_id: int, after: int, plan: Planning) -> tuple[int | None, int]:
        """``plan_chunk``'s cursor, and the rows this planner wrote (0: another had the chunk)."""
        fence = (
            sa.update(issues)
            .where(
                issues.c.id == issue_id,
                issues.c.planned_through == after,
                issues.c.state.in_(LIVE),
            )
            .values(planned_through=after)  # a write first: takes the row (or SQLite's lock)
        )
        with self._database(), self._transaction() as db:
            if won := bool(db.execute(fence).rowcount):
                cursor, written = _next_chunk(db, issue_id, after, plan)
                db.execute(_set_cursor(issue_id, cursor))
        if won:
            if cursor is None:  # once an issue is planned, not at every chunk: each took a
                self._renew_statistics(written)  # quarter of its chunk's time on PostgreSQL
            return cursor, written
        moved = self.issues.issue(issue_id)
        return (moved.planned_through if moved is not None and moved.state in LIVE else None), 0

    def plan_unreached(self, issue_id: int, plan: Planning) -> int:
        """Plan an issue again for every active reader of its group who has no delivery of
        it (who came since, or changed their language or audiences into the group; for a
        broadcast, nor of its article to another group: ``_unreached``), a chunk per
        transaction as ``plan_chunk`` does, from the first reader on; the issue is open
        again until they are sent. Returns how many deliveries were added. Nothing for an
        issue that is not issued or held, or whose planning is under way: of two runs at
        once, one plans, and the one delivery per (issue, reader) holds either way."""
        reopen = (
            sa.update(issues)
            .where(
                issues.c.id == issue_id,
                issues.c.planned_through.is_(None),
                issues.c.state.in_(STANDING),
            )
            .values(planned_through=0, finished_at=None)  # reader ids start at 1
        )
        with self._database(), self._transaction() as db:
            if not db.execute(reopen).rowcount:
                return 0
        added = 0
        cursor: int | None = 0
        while cursor is not None:  # only the rows this planner wrote: another may share the run
            cursor, written = self._plan_chunk(issue_id, cursor, plan)
            added += written
        return added

    def unreached_count(self, issue_id: int, leave_out: str | None = None) -> int:
        """How many active readers of the issue's group have no delivery of it (what
        ``plan_unreached`` would add; ``leave_out`` as ``Planning.leave_out``)."""
        with self.engine.connect() as db:
            issue = db.execute(sa.select(issues).where(issues.c.id == issue_id)).one()
            group = group_filter(issue.lang, issue.audiences, after=None, leave_out=leave_out)
            query = sa.select(sa.func.count()).where(group & _unreached(issue_id, issue.key))
            return int(db.execute(query).scalar_one())

    def issues_in_planning(self) -> list[Issue]:
        """The issues whose readers are not all planned yet (a planner stopped between two
        chunks, or is still at it), oldest first."""
        query = (
            sa.select(issues)
            .where(issues.c.planned_through.is_not(None), issues.c.state.in_(LIVE))
            .order_by(issues.c.id)
        )
        with self._database(), self.engine.connect() as db:
            return [issue_from_row(row) for row in db.execute(query)]

    def close_finished(self, now: datetime) -> list[Finished]:
        """Close every issue with nothing left to send: issued, fully planned, and no
        delivery held, pending or in flight (uncertain ones wait for a person, not for a
        send). Each is closed once (``finished_at``, ``now``), with its counts."""
        left = (
            sa.select(deliveries.c.id)
            .where(deliveries.c.issue_id == issues.c.id, deliveries.c.status.in_(_OPEN))
            .exists()
        )
        close = (
            sa.update(issues)
            .where(
                issues.c.state.in_(("issued", "sample")),
                issues.c.planned_through.is_(None),
                issues.c.finished_at.is_(None),
                ~left,
            )
            .values(finished_at=now)
            .returning(issues.c.id, issues.c.key)
        )
        with self._database(), self._transaction() as db:
            closed = {row.id: row.key for row in db.execute(close)}
            counts = (
                sa.select(deliveries.c.issue_id, deliveries.c.status, sa.func.count())
                .where(deliveries.c.issue_id.in_(closed))
                .group_by(deliveries.c.issue_id, deliveries.c.status)
            )
            found = {(i, status): n for i, status, n in db.execute(counts)} if closed else {}
        return [
            Finished(i, key, {s: found.get((i, s), 0) for s in SETTLED})
            for i, key in sorted(closed.items())
        ]

    def issue_progress(self) -> dict[int, tuple[bool, datetime | None]]:
        """Issue id → (still being planned, when it finished; None while open)."""
        query = sa.select(issues.c.id, issues.c.planned_through, issues.c.finished_at)
        with self.engine.connect() as db:
            return {
                row.id: (
                    row.planned_through is not None,
                    utc(row.finished_at) if row.finished_at is not None else None,
                )
                for row in db.execute(query)
            }
