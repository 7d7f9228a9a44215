"""The scheduler: APScheduler on the state database, whose job store, lock and ledger
``state.jobstore`` hands out (``SchedulerDatabase``): no SQL here.

*What* runs is injected as ``Jobs`` (the CLI wires in the sending and the feed build), so this
module never touches articles, templates or mail; *what a start does* to the stored jobs is
``plan.plan``'s. It owns the scheduler's use of the job store and of the single-scheduler
lock, the triggers (DST), graceful stop and the one log line per run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    EVENT_SCHEDULER_START,
    JobSubmissionEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.base import STATE_STOPPED
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from ..clock import Clock
from ..config import Config, DigestJob
from ..digest import FIRST_ZONE
from ..errors import DatabaseError, SchedulerBusyError, SyndicateError
from ..state import Deliveries, OwedRun, SchedulerLock, database_errors
from ..state.jobstore import FiringJobStore, SchedulerDatabase
from .owed import OwedRuns
from .plan import (
    BOUNCES_JOB,
    DIGEST_PREFIX,
    FEEDS_JOB,
    RELEASE_JOB,
    JobPlan,
    JobSpec,
    StoredJob,
    plan,
)
from .runlog import Report, Step, log_run, run_and_log

log = logging.getLogger("syndicate.scheduler")


# -- what runs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Jobs:
    """The work the schedule triggers. Both must be safe to repeat (the send is idempotent)."""

    build_feeds: Step
    send_digest: Callable[[DigestJob, datetime], Report]
    deliver_due: Step | None = None
    """Send the deliveries whose local time has come (nothing new is issued)."""
    read_bounces: Step | None = None
    """Read the IMAP folder of bounce mail (``bounces.imap_url``), every ``bounces.every``."""


def _no_mailbox(now: datetime) -> Report:
    return Report({}, "no bounce mailbox (bounces.imap_url) to read")


# -- when it runs --------------------------------------------------------------------------


class WallClockCronTrigger(CronTrigger):
    """A CronTrigger that fires at most once per wall-clock time.

    APScheduler 3.x fires a 02:30 job twice on the night the clocks go back (02:30 CEST and
    02:30 CET). The second occurrence of an ambiguous local time is skipped. Stateless, so it
    also holds across restarts. In the spring-forward gap it fires once, at 03:30 CEST.
    """

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        fire = super().get_next_fire_time(previous_fire_time, now)
        while fire is not None and _repeated_wall_time(fire, self.timezone):
            fire = super().get_next_fire_time(fire, fire)
        # A time in the spring-forward gap (02:30 that day) comes back as a wall time that
        # does not exist; say it as the real one (03:30) so listings show what will happen.
        return None if fire is None else fire.astimezone(UTC).astimezone(self.timezone)


def _repeated_wall_time(moment: datetime, zone: Any) -> bool:
    wall = moment.astimezone(zone).replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0)
    return first.astimezone(UTC) != moment.astimezone(UTC)


def job_specs(config: Config, now: datetime) -> list[JobSpec]:
    """The jobs ``config.schedule`` asks for, with ids that stay stable across restarts; an
    interval counts from ``now``."""
    zone = ZoneInfo(config.site.timezone)
    schedule = config.schedule
    # an interval in UTC: no wall-clock arithmetic across DST changes
    interval = timedelta(minutes=schedule.feeds_every_minutes)
    every = IntervalTrigger(
        minutes=schedule.feeds_every_minutes, timezone=UTC, start_date=now + interval
    )
    specs = [JobSpec(FEEDS_JOB, every, _trigger_key(every))]
    for digest in schedule.digests:
        # a local-time job is issued when the first zone reaches its time; each reader's
        # delivery then waits for it in their own zone
        trigger = WallClockCronTrigger(
            day_of_week=digest.day_of_week,
            hour=digest.hour,
            minute=digest.minute,
            timezone=FIRST_ZONE if digest.local_time else zone,
        )
        specs.append(JobSpec(DIGEST_PREFIX + digest.name, trigger, _trigger_key(trigger), digest))
    if config.bounces.imap_url:
        minutes = config.bounces.every_minutes
        bounces = IntervalTrigger(
            minutes=minutes, timezone=UTC, start_date=now + timedelta(minutes=minutes)
        )
        specs.append(JobSpec(BOUNCES_JOB, bounces, _trigger_key(bounces)))
    return specs


_WEEKDAYS = {
    "mon": "Monday",
    "tue": "Tuesday",
    "wed": "Wednesday",
    "thu": "Thursday",
    "fri": "Friday",
    "sat": "Saturday",
    "sun": "Sunday",
}


def describe_trigger(trigger: BaseTrigger) -> str:
    """A trigger as a person says it: "Mondays 07:30 Europe/Amsterdam", "every 30 minutes"."""
    if isinstance(trigger, IntervalTrigger):
        minutes = int(trigger.interval.total_seconds() // 60)
        if minutes % 60 == 0:
            return "every hour" if minutes == 60 else f"every {minutes // 60} hours"
        return "every minute" if minutes == 1 else f"every {minutes} minutes"
    if isinstance(trigger, CronTrigger):
        fields = {field.name: str(field) for field in trigger.fields}
        hour, minute = fields["hour"], fields["minute"]
        if hour.isdigit() and minute.isdigit():
            days = _describe_days(fields["day_of_week"])
            zone = "each reader's time" if trigger.timezone == FIRST_ZONE else trigger.timezone
            return f"{days} {int(hour):02d}:{int(minute):02d} {zone}"
    return str(trigger)


def _describe_days(expression: str) -> str:
    """``mon`` → Mondays, ``mon-fri`` → Monday to Friday, ``*`` → every day."""
    if expression == "*":
        return "every day"
    parts = []
    for part in expression.split(","):
        first, _, last = part.partition("-")
        if first not in _WEEKDAYS or (last and last not in _WEEKDAYS):
            return f"days {expression}"
        parts.append(f"{_WEEKDAYS[first]} to {_WEEKDAYS[last]}" if last else f"{_WEEKDAYS[first]}s")
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _trigger_key(trigger: BaseTrigger) -> tuple[str, str, str]:
    """What makes two triggers equal: class, fields and zone (``str`` alone omits the zone)."""
    return (type(trigger).__name__, str(trigger), str(getattr(trigger, "timezone", "")))


# -- running -------------------------------------------------------------------------------

_active: Scheduler | None = None


def fire(job_id: str) -> None:
    """The callable every stored job names; it hands the run to this process's scheduler.

    Stored jobs must name an importable function (they are pickled), so the injected ``Jobs``
    are looked up here rather than stored.
    """
    if _active is None:
        raise RuntimeError(f"job {job_id!r} fired with no active scheduler in this process")
    _active.execute(job_id)


@dataclass(frozen=True, slots=True)
class Planned:
    """One row of ``syndicate schedule``."""

    id: str
    trigger: str
    """When it runs, as a person reads it (``describe_trigger``)."""
    next_run: datetime | None
    note: str = ""
    owed: tuple[OwedRun, ...] = ()
    """Its firings whose send is not planned yet, oldest first, each with why."""


class Releases:
    """When the release job of local-time deliveries runs: the first pending delivery waiting
    for its reader's local time, as the ledger says, whatever became of the last run."""

    def __init__(self, ledger: Callable[[], Deliveries], *, enabled: bool) -> None:
        self.ledger = ledger
        self.enabled = enabled
        """False when no release step is wired in: there is nothing to release them with."""

    def next(self, after: datetime | None = None) -> datetime | None:
        """The first waiting delivery's time (after ``after``), or None."""
        return self.ledger().next_release(after) if self.enabled else None

    def wake(
        self, sched: BlockingScheduler | None, after: datetime | None, options: Mapping[str, Any]
    ) -> None:
        """After a send or a release, whatever its outcome, set the release job for the next
        zone (``after`` it) from the ledger; what a failed run left due goes out with it.
        After a feed rebuild (``after`` None), for the first delivery waiting, even if overdue:
        with the database unreadable after a release, the next rebuild sets it."""
        try:
            when = self.next(after)
        except SyndicateError as exc:
            log.warning("release job not set: %s; the next feed rebuild sets it", exc)
            return
        if when is not None:
            _set_release(sched, when, options)


class Running:
    """The jobs running now in this process, for a stop to wait on."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self._idle = threading.Condition()

    def begin(self, job_id: str) -> bool:
        """Count ``job_id`` as running; False if it already is."""
        with self._idle:
            fresh = job_id not in self.ids
            self.ids.add(job_id)
            return fresh

    def end(self, job_id: str) -> None:
        with self._idle:
            self.ids.discard(job_id)
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Whether every job ended within ``timeout`` seconds."""
        with self._idle:
            return self._idle.wait_for(lambda: not self.ids, timeout=timeout)


class Scheduler:
    """The one acting scheduler of this deployment: a BlockingScheduler on the state database."""

    def __init__(
        self,
        config: Config,
        jobs: Jobs,
        *,
        clock: Clock,
        stop_timeout: float | None = None,
    ) -> None:
        self.config = config
        self.jobs = jobs
        self.clock = clock
        self.zone = ZoneInfo(config.site.timezone)
        self.specs = {spec.id: spec for spec in job_specs(config, clock())}
        self.grace = config.schedule.misfire_grace_seconds
        self.options = {"misfire_grace_time": self.grace, "coalesce": True, "max_instances": 1}
        """Set on every job explicitly: the store freezes them, so defaults would go stale."""
        self.stop_timeout = (
            config.schedule.stop_timeout_seconds if stop_timeout is None else stop_timeout
        )
        self.database = SchedulerDatabase(config.database_url)
        self.lock = self.database.lock
        self.interrupted = False
        """True after a stop that had to leave a run unfinished (owed: the next start runs it)."""
        self._sched: BlockingScheduler | None = None
        self._stopping = threading.Event()
        self._running = Running()
        self._starting = threading.Lock()
        self.lost_lock = False
        """True once the lock was found gone (another scheduler may act): this one stopped."""
        self.failed: list[str] = []
        """The jobs and steps of the last ``run_once`` that failed or did part of their work."""
        self.debug = False
        """Log the traceback of every failure, not only of unexpected ones."""
        self._steps: dict[str, Step] = {}
        self.ledger = self.database.ledger
        self.releases = Releases(lambda: self.ledger().ledger, enabled=jobs.deliver_due is not None)
        self.owed = OwedRuns(lambda: self.ledger().firings, clock, config.database_url, self.zone)
        self._passes_pay = False
        """Each feed rebuild runs the owed digests after it (``run``; ``--once``: once)."""

    # -- entry points ------------------------------------------------------------------

    def run(self, *, standby: bool = False, poll_seconds: float = 10.0) -> None:
        """Act as the scheduler until ``request_stop``: reconcile the store, then run jobs.

        Raises SchedulerBusyError when another scheduler acts and ``standby`` is off; with it,
        waits for the lock, polling every ``poll_seconds``.
        """
        database = database_errors(self.config.database_url)
        holding = _holding(self.lock, self.database, self._stopping, standby, poll_seconds)
        self._passes_pay = True
        with database, holding as acquired:
            if acquired:
                self._session(self._start_running)

    def run_once(self, steps: Mapping[str, Step] | None = None) -> bool:
        """Do what is due now: the feed rebuild, then ``steps`` (work of the caller's own,
        such as previews), then the due and the owed digests, all under the lock, which is
        taken before anything else (SchedulerBusyError). Each logs one line, and one that
        fails never stops the next. True if all went well; else ``failed`` names the jobs
        and steps that failed or did part of their work."""
        self.failed = []
        self._steps = dict(steps or {})
        database = database_errors(self.config.database_url)
        with database, _holding(self.lock, self.database, self._stopping, False, 0):
            self._session(self._run_due)
        return not self.failed

    def planned(self) -> list[Planned]:
        """The schedule as ``run`` will act on it: stored next runs, plus pending config
        changes. Read-only, so it needs no lock and may run beside the acting scheduler."""
        rows: list[Planned] = []

        def collect(sched: BlockingScheduler) -> bool:
            now = self.clock()
            rows.extend(planned_rows(sched, self.specs, self._plan(sched, now), now, self.zone))
            return False

        with database_errors(self.config.database_url):
            self._session(collect, lock=False)
        return rows

    def request_stop(self) -> None:
        """Stop taking new work, let the running job finish (up to the bound), then stop; safe
        from a signal handler (the waiting happens in a helper thread)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        threading.Thread(target=self._stop, name="syndicate-stop", daemon=True).start()

    # -- the APScheduler session -------------------------------------------------------

    def _session(self, work: Callable[[BlockingScheduler], bool], *, lock: bool = True) -> None:
        """Start a paused scheduler and hand it to ``work`` once the store is open; unless
        ``work`` returns True (it resumed the scheduler), shut it down again. Blocks until
        shutdown. Errors inside ``work`` are raised here, not swallowed by the listeners."""
        global _active
        store = self.database.job_store(DIGEST_PREFIX, self.owed.fired)
        workers = len(self.specs) + 1
        sched = _new_scheduler(store, workers, self.options, self.zone, self.config.database_url)
        failure: list[BaseException] = []

        def started(_event: object) -> None:
            keep_running = False
            try:
                keep_running = work(sched)
            except BaseException as exc:
                failure.append(exc)
            if not keep_running:
                _shutdown(sched, wait=False)

        sched.add_listener(started, EVENT_SCHEDULER_START)
        sched.add_listener(self.owed.missed, EVENT_JOB_MISSED)
        sched.add_listener(_overlapped, EVENT_JOB_MAX_INSTANCES)
        self._sched = sched
        if lock:
            _active = self
        try:
            sched.start(paused=True)
        finally:
            if lock:
                _active = None
            self._sched = None
        if failure:
            raise failure[0]

    def _start_running(self, sched: BlockingScheduler) -> bool:
        with self._starting:
            self._reconciled(sched, self.clock())
            if self._stopping.is_set():
                return False
            sched.resume()
        log.info("scheduler started: %d job(s) in %s", len(self.specs), self.zone.key)
        return True

    def _run_due(self, sched: BlockingScheduler) -> bool:
        """Apply the plan, then run what it says is due now, in the order of the config, and
        last what is owed."""
        now = self.clock()
        steps = self._reconciled(sched, now)
        tried = set()
        for step in steps:
            first = step.first_run(now)
            if step.id == RELEASE_JOB and first is not None and first <= now:
                sched.remove_job(RELEASE_JOB)  # set again from the ledger after the run
                self.execute(RELEASE_JOB)
            elif step.action != "remove" and step.spec and first is not None and first <= now:
                due = now - timedelta(seconds=step.late)
                if step.missed:
                    self.owed.miss(step.id, due, now)
                else:
                    if step.spec.digest is not None:  # a fact before it is attempted
                        self.owed.record(step.id, due, now, step.owed)
                    self.execute(step.id)  # several missed runs coalesce into this one
                    tried.add(step.id)
                _advance(sched, step.id, now)
            if step.id == FEEDS_JOB:
                for name, step_work in self._steps.items():
                    self._report(name, step_work)
        self._pay_owed(tried)
        return False

    def _plan(self, sched: BlockingScheduler, now: datetime) -> list[JobPlan]:
        owed = self.owed.firings().owed()
        return _plan(sched, self.specs, now, self.options, self.releases.next(), owed)

    def _reconciled(self, sched: BlockingScheduler, now: datetime) -> list[JobPlan]:
        """Make the store match the config and the ledger as the plan says; the plan."""
        steps = self._plan(sched, now)
        reconcile(sched, self.specs, steps, now)
        self.owed.forget(step.id for step in steps if step.action == "remove")
        return steps

    def _pay_owed(self, tried: Collection[str] = ()) -> None:
        """Run the owed digests but those running or ``tried`` by this pass already."""
        skip = {*tried, *self._running.ids}
        for job_id in self.owed.payable(self.specs, skip, self.grace, self.clock()):
            self.execute(job_id)  # deferred, still owed, after a stop

    def _stop(self) -> None:
        with self._starting:  # let a start in progress finish reconciling first
            sched = self._sched
            if sched is None or sched.state == STATE_STOPPED:
                return  # in standby or not started: they check _stopping themselves
            sched.pause()
        finished = self._running.wait_idle(self.stop_timeout)
        if not finished:
            self.interrupted = True
            log.warning(
                "stopping with %s unfinished after %.0f s; it resumes at the next start",
                ", ".join(sorted(self._running.ids)),
                self.stop_timeout,
            )
        _shutdown(sched, wait=finished)  # waits only for bookkeeping once the jobs are done
        log.info("scheduler stopped")

    # -- one run -----------------------------------------------------------------------

    def execute(self, job_id: str) -> None:
        """Run one job now and log one line about it; never raises (the log says why)."""
        spec = self.specs.get(job_id)
        if job_id == RELEASE_JOB:
            spec = JobSpec(RELEASE_JOB, DateTrigger(self.clock()), ())
        if spec is None:
            log_run(job_id, self.clock(), 0.0, "error", reason="not in the config")
            return
        if not self.lock.held():
            self.lost_lock = True
            self.request_stop()
        if self._stopping.is_set():
            reason = "the scheduler lock was lost" if self.lost_lock else "stopping"
            if spec.digest is not None:
                self.owed.still_owed(job_id, f"deferred: {reason}")
            log_run(job_id, self.clock(), 0.0, "deferred", reason=f"{reason}; runs at next start")
            return
        if not self._running.begin(job_id):  # an owed run taken by a pass as it fired
            log_run(job_id, self.clock(), 0.0, "skipped", reason="already running")
            return
        try:
            self._execute(spec)
        finally:
            self._running.end(job_id)

    def _execute(self, spec: JobSpec) -> None:
        now = self.clock()
        if spec.digest is not None:
            digest = spec.digest
            outcome, report = self._report(spec.id, lambda now: self.jobs.send_digest(digest, now))
            self.releases.wake(self._sched, now, self.options)
            self.owed.sent(spec.id, now, outcome, report, stopped=self._stopping.is_set())
        elif spec.id == RELEASE_JOB:
            if self.jobs.deliver_due is not None:
                self._report(spec.id, self.jobs.deliver_due)
            self.releases.wake(self._sched, now, self.options)
        elif spec.id == BOUNCES_JOB:  # configured only with bounces.imap_url, as read_bounces
            self._report(spec.id, self.jobs.read_bounces or _no_mailbox)
        else:
            self._report(spec.id, self.jobs.build_feeds)
            self.releases.wake(self._sched, None, self.options)  # what a release left due
            if self._passes_pay:
                self._pay_owed()

    def _report(self, name: str, work: Step) -> tuple[str | None, Report | None]:
        outcome, report = run_and_log(name, work, self.clock(), debug=self.debug)
        if outcome in ("error", "partial"):
            self.failed.append(name)
        return outcome, report


class _Scheduler(BlockingScheduler):
    """APScheduler's BlockingScheduler, with three changes to its loop.

    One that has shut down fires nothing more: woken by the shutdown, the loop would hand a
    job fallen due during a drain to the executor it just shut down ("cannot schedule new
    futures after shutdown"). The state is looked at under the lock the shutdown takes
    before it closes the executors, so no job goes out after it.

    A state database that fails the loop (its session ended while it moved a job on or
    looked for the next one) is looked at again later, as APScheduler does when it cannot
    read the due jobs, instead of ending the loop: a job not moved on is still due, and the
    next one to fire finds whether the lock was lost with the session (``execute``).

    Its start returns only once a shutdown has ended. The loop ends as soon as a shutdown
    begins, while the shutdown still waits for the jobs in hand: a caller that moved on then
    (a process exiting) would lose what those had still to record and log, such as a firing
    deferred for a lost lock.
    """

    database_url = ""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._shut = threading.Event()

    def start(self, *args: Any, **kwargs: Any) -> None:
        super().start(*args, **kwargs)  # the loop, until a shutdown begins
        self._shut.wait()

    def shutdown(self, wait: bool = True) -> None:
        try:
            super().shutdown(wait)
        finally:
            self._shut.set()

    def _process_jobs(self) -> float | None:
        with self._jobstores_lock:
            if self.state == STATE_STOPPED:
                return None
            try:
                with database_errors(self.database_url, every=True):
                    return super()._process_jobs()
            except DatabaseError as exc:
                wait = float(self.jobstore_retry_interval)
                log.warning("the job store failed: %s; looking again in %.0f s", exc, wait)
                return wait


def _new_scheduler(
    store: FiringJobStore,
    workers: int,
    options: Mapping[str, Any],
    zone: ZoneInfo,
    database_url: str,
) -> BlockingScheduler:
    sched = _Scheduler(
        jobstores={"default": store},
        executors={"default": ThreadPoolExecutor(max_workers=workers)},
        job_defaults=dict(options),
        timezone=zone,
    )
    sched.database_url = database_url
    return sched


def _advance(sched: BlockingScheduler, job_id: str, now: datetime) -> None:
    """Move a job run by ``run --once`` to its next time: only after the run, so that a crash
    during it leaves it due for the next ``--once`` (and a run that did not plan its send is
    recorded as owed as it moves: ``FiringJobStore``)."""
    job = sched.get_job(job_id)
    if job is None:
        return
    with contextlib.suppress(JobLookupError):  # a stop shut the scheduler down meanwhile:
        job.modify(next_run_time=job.trigger.get_next_fire_time(now, now))  # it is owed


@contextlib.contextmanager
def _holding(
    lock: SchedulerLock,
    database: SchedulerDatabase,
    stopping: threading.Event,
    standby: bool,
    poll_seconds: float,
) -> Iterator[bool]:
    """Hold the single-scheduler lock for the block (True). Without ``standby`` a lock held
    elsewhere raises SchedulerBusyError; with it, wait for the lock, polling, until
    ``stopping`` is set (False)."""
    waiting = False
    while not lock.acquire():
        if not standby:
            raise SchedulerBusyError(f"another scheduler is active: {lock.holder()}")
        if not waiting:
            log.info("standby: another scheduler is active: %s", lock.holder())
            waiting = True
        if stopping.wait(poll_seconds):
            yield False
            return
    if waiting:
        log.info("lock acquired: this scheduler is now acting")
    try:
        yield True
    finally:
        lock.release()
        database.dispose()


def _set_release(
    sched: BlockingScheduler | None, when: datetime, options: Mapping[str, Any]
) -> None:
    """Set the release job for ``when``, the next deliveries waiting for their readers' local
    time are due."""
    if sched is None or sched.state == STATE_STOPPED:
        return
    sched.add_job(
        fire,
        DateTrigger(when),
        args=(RELEASE_JOB,),
        id=RELEASE_JOB,
        name=RELEASE_JOB,
        replace_existing=True,
        # late (the process was down) is better than never: it runs at the next start
        **{**options, "misfire_grace_time": None},
    )


def _overlapped(event: JobSubmissionEvent) -> None:
    reason = "the previous run is still going (max_instances=1)"
    log_run(event.job_id, event.scheduled_run_times[-1], 0.0, "skipped", reason=reason)


# -- reconciling the store with config.toml ------------------------------------------------


def _plan(
    sched: BlockingScheduler,
    specs: Mapping[str, JobSpec],
    now: datetime,
    options: dict[str, Any],
    release: datetime | None,
    owed: Mapping[str, Sequence[OwedRun]],
) -> list[JobPlan]:
    """``plan.plan`` over the jobs ``sched``'s store holds and what the ledger says: the owed
    runs and the next release."""
    stored = [
        StoredJob(
            job.id,
            _trigger_key(job.trigger),
            job.next_run_time,
            {key: getattr(job, key) for key in options},
        )
        for job in sched.get_jobs()
    ]
    return plan(list(specs.values()), stored, now, options, release, owed)


def reconcile(
    sched: BlockingScheduler, specs: Mapping[str, JobSpec], steps: list[JobPlan], now: datetime
) -> None:
    """Make the store match the config as the plan says. ``modify_job`` keeps the stored next
    run; ``add_job(replace_existing=True)`` is not used: it would silently skip every run
    missed while down."""
    for step in steps:
        if step.action == "remove" or step.spec is None:
            _reconcile_unconfigured(sched, step)
            continue
        spec = specs[step.id]
        if step.action == "add":
            sched.add_job(
                fire,
                spec.trigger,
                args=(spec.id,),
                id=spec.id,
                name=spec.id,
                next_run_time=step.first_run(now),
                **step.changes,
            )
            log.info("job %s added", spec.id)
            continue
        changes = dict(step.changes)
        if step.new_trigger:
            changes["trigger"] = spec.trigger
            log.info("job %s changed: %s", spec.id, spec.trigger)
        if step.first_run(now) != sched.get_job(spec.id).next_run_time:
            changes["next_run_time"] = step.first_run(now)
        if changes:
            sched.modify_job(spec.id, **changes)


def _reconcile_unconfigured(sched: BlockingScheduler, step: JobPlan) -> None:
    """A job the config does not name: one removed from it, or the release job, set from the
    ledger."""
    if step.action == "remove":
        sched.remove_job(step.id)
        if step.id != RELEASE_JOB:
            log.info("job %s removed (no longer in the config)", step.id)
    elif step.action != "keep" and step.next_run is not None:
        _set_release(sched, step.next_run, step.changes)


def planned_rows(
    sched: BlockingScheduler,
    specs: Mapping[str, JobSpec],
    steps: list[JobPlan],
    now: datetime,
    zone: ZoneInfo,
) -> list[Planned]:
    """The plan as ``schedule`` prints it."""
    stored = {job.id: job for job in sched.get_jobs()}
    rows = []
    for step in steps:
        said = "local-time deliveries"
        if step.id != RELEASE_JOB:
            trigger = specs[step.id].trigger if step.spec else stored[step.id].trigger
            said = describe_trigger(trigger)
        first = step.first_run(now) if step.action == "add" else step.next_run
        when = first and first.astimezone(zone)
        rows.append(Planned(step.id, said, when, step.note(now), step.owed))
    return rows


def _shutdown(sched: BlockingScheduler, *, wait: bool) -> None:
    """Shut down unless already down (a stop and the end of a start may race here)."""
    with contextlib.suppress(SchedulerNotRunningError):
        sched.shutdown(wait=wait)
