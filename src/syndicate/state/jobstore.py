"""The scheduler's hold on the state database: APScheduler's job store, the single-scheduler
lock and the ledger it reads (owed runs, release times), all on one engine.

What the stored jobs mean, and when a firing counts as owed, is the scheduler's
(``schedule.owed``); this module only tells it, from inside the job store, when one moves on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

from .database import create_engine
from .locks import SchedulerLock, scheduler_lock
from .schema import migrate
from .store import Store

Fired = Callable[[Any, datetime], None]
"""Told of a job whose stored next run, due at the time given, is about to move past it."""


class FiringJobStore(SQLAlchemyJobStore):
    """APScheduler's job store, telling ``fired`` of each job whose id starts with ``watched``
    whose stored next run, due, is about to move past it (APScheduler moves it when it hands
    the run to a thread, whatever becomes of the run): the firing is recorded as owed before
    it can be lost."""

    def __init__(self, database: SchedulerDatabase, watched: str, fired: Fired) -> None:
        super().__init__(engine=database.engine)
        self.watched = watched
        self.fired = fired

    def update_job(self, job: Any) -> None:
        if job.id.startswith(self.watched):
            stored = self.lookup_job(job.id)
            due = stored.next_run_time if stored is not None else None
            if due is not None and (job.next_run_time is None or job.next_run_time > due):
                self.fired(job, due)
        super().update_job(job)


class SchedulerDatabase:
    """The state database at ``url`` as the scheduler uses it: one engine shared by its lock,
    its job stores and its ledger."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)
        self.lock: SchedulerLock = scheduler_lock(url, self.engine)
        self.ledger: Callable[[], Store] = functools.cache(self._migrated)
        """The store, migrated at first use (a first start makes it as the first send would):
        the owed runs and the release times."""

    def _migrated(self) -> Store:
        migrate(self.engine)
        return Store(self.engine)

    def job_store(self, watched: str, fired: Fired) -> FiringJobStore:
        """A job store on the state database (``FiringJobStore``)."""
        return FiringJobStore(self, watched, fired)

    def dispose(self) -> None:
        """Close the engine's pooled connections."""
        self.engine.dispose()
