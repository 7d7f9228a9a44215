"""Owed scheduled runs: each firing of a digest job is a row from the moment it is due until
its send is planned, so that a lost session, a stop or a crash at the firing never drops it."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from .database import Database, utc
from .schema import job_firings

KEPT = timedelta(days=90)
"""How long a settled firing is kept: long past any grace, which is all a settled row is for
(a firing at or before it cannot be owed again)."""


@dataclass(frozen=True, slots=True)
class OwedRun:
    """A firing of a scheduled job whose send has not been planned yet, and why."""

    job_id: str
    due_at: datetime
    reason: str


class Firings(Database):
    """The owed, done and missed firings of the scheduled digest jobs."""

    def owe(self, job_id: str, due: datetime, reason: str, now: datetime) -> None:
        """Record ``job_id``'s firing at ``due`` as owed for ``reason`` (an owed one gets the
        new reason); nothing when a run at or after ``due`` was already settled, since that
        run covered it."""
        c = job_firings.c
        due = due.astimezone(UTC)
        with self._transaction() as db:
            settled = sa.select(c.due_at).where(
                c.job_id == job_id, c.due_at >= due, c.state != "owed"
            )
            if db.execute(settled.limit(1)).first() is not None:
                return
            same = (c.job_id == job_id) & (c.due_at == due)
            values = {"state": "owed", "reason": reason, "updated_at": now.astimezone(UTC)}
            if not db.execute(job_firings.update().where(same).values(values)).rowcount:
                db.execute(job_firings.insert().values(job_id=job_id, due_at=due, **values))

    def explain(self, job_id: str, reason: str, now: datetime) -> None:
        """Say why ``job_id``'s owed runs are still owed (a run deferred, stopped, failed)."""
        c = job_firings.c
        with self._transaction() as db:
            db.execute(
                job_firings.update()
                .where(c.job_id == job_id, c.state == "owed")
                .values(reason=reason, updated_at=now.astimezone(UTC))
            )

    def settle(
        self, job_id: str, through: datetime, state: str, reason: str, now: datetime
    ) -> None:
        """Every owed firing of ``job_id`` up to ``through`` is ``done`` (its send planned) or
        ``missed``; ``through`` itself is recorded as settled, so that a firing at or before
        it that its scheduler records late is not owed again."""
        c = job_firings.c
        through = through.astimezone(UTC)
        values = {"state": state, "reason": reason, "updated_at": now.astimezone(UTC)}
        with self._transaction() as db:
            db.execute(
                job_firings.update()
                .where(c.job_id == job_id, c.due_at <= through, c.state == "owed")
                .values(values)
            )
            same = (c.job_id == job_id) & (c.due_at == through)
            if db.execute(sa.select(c.state).where(same)).first() is None:
                db.execute(job_firings.insert().values(job_id=job_id, due_at=through, **values))
            db.execute(job_firings.delete().where(c.state != "owed", c.due_at < through - KEPT))

    def owed(self) -> Mapping[str, tuple[OwedRun, ...]]:
        """Each job's owed firings, oldest first: those no settled run at or after them
        covers (a firing recorded as its send was settled, in two transactions at once, may
        have missed the settled row)."""
        c = job_firings.c
        later = job_firings.alias("later")
        covered = sa.exists().where(
            later.c.job_id == c.job_id, later.c.due_at >= c.due_at, later.c.state != "owed"
        )
        query = sa.select(c.job_id, c.due_at, c.reason).where(c.state == "owed", ~covered)
        found: dict[str, list[OwedRun]] = {}
        with self.engine.connect() as db:
            for job_id, due, reason in db.execute(query.order_by(c.job_id, c.due_at)):
                found.setdefault(job_id, []).append(OwedRun(job_id, utc(due), reason))
        return {job_id: tuple(runs) for job_id, runs in found.items()}

    def forget(self, job_ids: Collection[str]) -> None:
        """Jobs no longer configured owe nothing."""
        with self._transaction() as db:
            db.execute(job_firings.delete().where(job_firings.c.job_id.in_(job_ids)))
