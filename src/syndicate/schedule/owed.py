"""Owed runs: each firing of a digest job is a fact in the state database from the moment it
is due until its send is planned (``state.firings``). This is the scheduler's side of it:
recording a firing before it can be lost, saying why one is still owed, settling it.

A database that fails here is logged, never raised: the firing then stays as it was recorded
(owed, or due in the job store), so the worst a failure does is run a send twice, which the
ledger makes harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from apscheduler.events import JobExecutionEvent

from ..errors import SyndicateError
from ..state import Firings, OwedRun, database_errors
from .plan import DIGEST_PREFIX, latest_due
from .runlog import Report, log_run

log = logging.getLogger("syndicate.scheduler")

FIRED = "fired; its send is not planned yet"
"""Why a firing is owed from the moment it is recorded until its send says otherwise."""


class OwedRuns:
    """The owed firings of the digest jobs, written through ``firings`` at ``clock``'s time."""

    def __init__(
        self, firings: Callable[[], Firings], clock: Callable[[], datetime], url: str, zone: tzinfo
    ) -> None:
        self.firings = firings
        self.clock = clock
        self.url = url
        self.zone = zone
        """The site's: the log says since when a job is owed in it."""
        self._why: dict[str, str] = {}
        """Why each job's last attempt left it owed (a firing recorded after it says so)."""

    def read(self) -> Mapping[str, tuple[OwedRun, ...]] | None:
        """Each job's owed firings, oldest first; None if the database cannot say."""
        return self._quietly(lambda firings: firings.owed(), "not read")

    def fired(self, job: Any, due: datetime) -> None:
        """``job``'s stored run at ``due`` moves on (``state.jobstore``): the latest firing it
        stands for is owed, unless a settled run covers it. Raises, so that the job store
        keeps the run due when this cannot be recorded."""
        now = self.clock()
        if due <= now:
            self.firings().owe(job.id, latest_due(job.trigger, due, now), FIRED, now)
            # after the row: an attempt ending meanwhile said why before or sees the row
            if (why := self._why.get(job.id)) is not None:
                self.firings().explain(job.id, why, now)

    def record(
        self, job_id: str, due: datetime, now: datetime, owed: Sequence[OwedRun] = ()
    ) -> None:
        """``job_id``'s firing at ``due`` is about to be attempted: owed until it is paid
        (and said to be, with the runs it already ``owed``)."""
        self._quietly(lambda firings: firings.owe(job_id, due, FIRED, now))
        if owed:
            self._say(job_id, owed)

    def payable(
        self, order: Iterable[str], skip: Collection[str], grace: float | None, now: datetime
    ) -> Iterator[str]:
        """The jobs owed a run, in ``order`` but for those to ``skip``, each said in the log
        as it is taken; one whose latest firing is over the ``grace`` at ``now`` is missed
        instead."""
        owed = self.read() or {}
        for job_id in order:
            runs = owed.get(job_id)
            if not runs or job_id in skip:
                continue
            if grace is not None and (now - runs[-1].due_at).total_seconds() > grace:
                self.miss(job_id, runs[-1].due_at, now)
                continue
            self._say(job_id, runs)
            yield job_id

    def _say(self, job_id: str, runs: Sequence[OwedRun]) -> None:
        since = runs[0].due_at.astimezone(self.zone).isoformat(timespec="minutes")
        log.info("job %s is owed since %s (%s); running it now", job_id, since, runs[-1].reason)

    def still_owed(self, job_id: str, reason: str) -> None:
        """An attempt of ``job_id`` ended without planning its send, for ``reason``."""
        self._why[job_id] = reason
        self._quietly(lambda firings: firings.explain(job_id, reason, self.clock()))

    def sent(
        self, job_id: str, now: datetime, outcome: str | None, report: Report | None, stopped: bool
    ) -> None:
        """A send of ``job_id`` at ``now`` ended with ``outcome``: paid, unless it failed
        before its send was planned (the next start or pass tries again) or a stop cut it
        short, leaving deliveries (the next start resumes it)."""
        if outcome == "error":
            self.still_owed(job_id, f"its send failed: {report.reason if report else None}")
        elif stopped and outcome == "partial":
            self.still_owed(job_id, "stopped during its send")
        else:
            self.paid(job_id, now)

    def paid(self, job_id: str, through: datetime) -> None:
        """``job_id``'s send is planned: its firings up to ``through`` are done."""
        self._why.pop(job_id, None)
        self._quietly(lambda firings: firings.settle(job_id, through, "done", "sent", self.clock()))

    def missed(self, event: JobExecutionEvent) -> None:
        """APScheduler found a run later than the grace (a listener)."""
        self.miss(event.job_id, event.scheduled_run_time, self.clock())

    def miss(self, job_id: str, due: datetime, now: datetime) -> None:
        """Log ``job_id``'s run at ``due`` as missed (over the grace at ``now``); its owed
        runs up to it are missed too, owed no more."""
        reason = f"{(now - due).total_seconds():.0f} s late, over the grace"
        log_run(job_id, due, 0.0, "missed", reason=reason)
        if job_id.startswith(DIGEST_PREFIX):
            self._quietly(lambda firings: firings.settle(job_id, due, "missed", reason, now))

    def forget(self, job_ids: Iterable[str]) -> None:
        """Jobs removed from the config owe nothing any more."""
        gone = [job_id for job_id in job_ids if job_id.startswith(DIGEST_PREFIX)]
        if gone:
            self._quietly(lambda firings: firings.forget(gone))

    def _quietly(self, work: Callable[[Firings], Any], failed: str = "not updated") -> Any:
        try:
            with database_errors(self.url, every=True):
                return work(self.firings())
        except SyndicateError as exc:
            line = next(iter(str(exc).strip().splitlines()), type(exc).__name__)
            log.warning("owed runs %s: %s; the next pass tries again", failed, line)
            return None
