"""What a start of the scheduler does to its job store, decided once (no I/O, no clock).

``plan`` takes the configured jobs, the stored ones and the time, and says for each job what
becomes of it and when it runs next. ``run`` and ``run --once`` apply that plan to the store;
``schedule`` prints it: so what ``schedule`` says is what the next start does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from ..config import DigestJob
from ..state.firings import OwedRun

FEEDS_JOB = "feeds"
BOUNCES_JOB = "bounces"
"""Reads the IMAP folder of bounce mail, every ``bounces.every`` (set with bounces.imap_url)."""
DIGEST_PREFIX = "digest:"
RELEASE_JOB = "release"
"""A one-off job at the time the next deliveries of a local-time digest are due: it sends what
is due then and is set again for the next zone. Set from the ledger (the earliest time of the
pending deliveries that wait for one), not by the config, so a run that was deferred or failed
never leaves a zone waiting for the next send."""


class Trigger(Protocol):
    """When a job fires (an APScheduler trigger, or any object that answers the same)."""

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One configured job: its stable id, its trigger, and the digest job it sends (if any)."""

    id: str
    trigger: Trigger
    key: tuple[str, ...]
    """What makes two triggers equal (a stored job whose key differs has a changed trigger)."""
    digest: DigestJob | None = None


@dataclass(frozen=True, slots=True)
class StoredJob:
    """A job as the job store holds it."""

    id: str
    key: tuple[str, ...]
    next_run: datetime | None
    options: Mapping[str, Any] = field(default_factory=dict)


Action = Literal["add", "change", "keep", "remove"]


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What a start does with one job, and when the job runs next."""

    id: str
    action: Action
    next_run: datetime | None
    """The run the store keeps or gets; a job that runs at start runs at once instead."""
    at_start: bool = False
    """Runs at once when the scheduler starts (the feed rebuild)."""
    owed: tuple[OwedRun, ...] = ()
    """Firings that came due and whose send is not planned yet (the state database's): they
    run after the feed rebuild of the next start or pass, unless over the grace."""
    new_trigger: bool = False
    changes: Mapping[str, Any] = field(default_factory=dict)
    """The options to set: all of them on a new job, those that differ on a stored one."""
    spec: JobSpec | None = None
    late: float = 0.0
    """Seconds since the latest fire time an overdue or owed run stands for (0: neither)."""
    missed: bool = False
    """Overdue by more than the grace: the start logs it as missed instead of running it."""

    def first_run(self, now: datetime) -> datetime | None:
        """When the job runs first after a start at ``now``."""
        return now if self.at_start else self.next_run

    def note(self, now: datetime) -> str:
        """What ``schedule`` says of the job, beside its next run."""
        if self.action == "remove":
            return "removed at next start"
        if self.id == RELEASE_JOB:
            return "the next zone"
        if self.missed:
            return f"missed ({self.late:.0f} s late, over the grace): not run at next start"
        if self.owed:
            since = self.owed[0].due_at.isoformat(timespec="minutes")
            return f"owed since {since} ({self.owed[-1].reason}): runs at next start"
        overdue = self.next_run is not None and self.next_run <= now
        if self.new_trigger:
            missed = "; the send it missed runs at once" if overdue else ""
            return f"changed at next start{missed}"
        if overdue:
            return "due: runs at next start"
        return "added at next start" if self.action == "add" else ""


def plan(
    specs: Sequence[JobSpec],
    stored: Iterable[StoredJob],
    now: datetime,
    options: Mapping[str, Any],
    release: datetime | None = None,
    owed: Mapping[str, Sequence[OwedRun]] | None = None,
) -> list[JobPlan]:
    """Make the store match the config without losing a run missed while down.

    New jobs are added, removed ones dropped, changed ones updated in place, keeping the stored
    next run; a new trigger replaces that run only when it is not overdue (a send missed while
    down and then moved still goes out once). The feed rebuild runs at once; a job's ``owed``
    firings (fired, but their send never planned: a lost session, a stop, a crash) count as
    overdue runs. ``options`` are set on every job. ``release`` is when
    the first delivery waiting for its reader's local time is due (the ledger's): the release
    job runs then (after the configured jobs: after the due sends), or is dropped with nothing
    waiting.
    """
    found = {job.id: job for job in stored}
    owed = owed or {}
    configured = {spec.id for spec in specs}
    plans = [
        _one(spec, found.get(spec.id), tuple(owed.get(spec.id, ())), now, options) for spec in specs
    ]
    if release is not None:
        stored_release = found.get(RELEASE_JOB)
        action: Action = "add" if stored_release is None else "keep"
        if stored_release is not None and stored_release.next_run != release:
            action = "change"
        changes = options if action != "keep" else {}
        plans.append(JobPlan(RELEASE_JOB, action, release, changes=changes))
    keep = configured | ({RELEASE_JOB} if release is not None else set())
    return plans + [JobPlan(job_id, "remove", None) for job_id in found if job_id not in keep]


def _one(
    spec: JobSpec,
    job: StoredJob | None,
    owed: tuple[OwedRun, ...],
    now: datetime,
    options: Mapping[str, Any],
) -> JobPlan:
    at_start = spec.id == FEEDS_JOB
    action: Action = "add"
    next_run, new_trigger, changes = spec.trigger.get_next_fire_time(None, now), False, options
    if job is not None:
        changes = {key: value for key, value in options.items() if job.options.get(key) != value}
        next_run, new_trigger = job.next_run, job.key != spec.key
        if new_trigger and not (next_run is not None and next_run <= now):
            next_run = spec.trigger.get_next_fire_time(None, now)
        action = "change" if new_trigger or changes else "keep"
    due = [run.due_at for run in owed[-1:]]
    if not at_start and next_run is not None and next_run <= now:
        due.append(latest_due(spec.trigger, next_run, now))
    late = (now - max(due)).total_seconds() if due else 0.0
    grace = options.get("misfire_grace_time")
    missed = grace is not None and late > grace
    return JobPlan(
        spec.id, action, next_run, at_start, owed, new_trigger, changes, spec, late, missed
    )


def latest_due(trigger: Trigger, next_run: datetime, now: datetime) -> datetime:
    """The last fire time not after ``now``: the one a coalesced catch-up stands for."""
    latest: datetime = next_run
    fire_time: datetime | None = next_run
    while fire_time is not None and fire_time <= now:
        latest, fire_time = fire_time, trigger.get_next_fire_time(fire_time, now)
    return latest
