"""What a start does with the stored jobs: the plan alone, with triggers that need no
scheduler (a weekly time, a fixed interval)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from syndicate.schedule.plan import (
    FEEDS_JOB,
    RELEASE_JOB,
    JobSpec,
    StoredJob,
    latest_due,
    plan,
)
from syndicate.state import OwedRun

NOW = datetime(2026, 1, 13, 12, 0, tzinfo=UTC)  # a Tuesday
OPTIONS = {"misfire_grace_time": 604800, "coalesce": True, "max_instances": 1}


class Weekly:
    """Fires every week from ``first`` on; after ``previous``, the week after it (as
    APScheduler's triggers do, however late ``now`` is)."""

    def __init__(self, first: datetime) -> None:
        self.first = first

    def get_next_fire_time(self, previous: datetime | None, now: datetime) -> datetime | None:
        if previous is not None:
            return previous + timedelta(weeks=1)
        fire = self.first
        while fire < now:
            fire += timedelta(weeks=1)
        return fire


MONDAY = Weekly(datetime(2026, 1, 5, 7, 30, tzinfo=UTC))
TUESDAY = Weekly(datetime(2026, 1, 6, 9, 0, tzinfo=UTC))
EVERY = Weekly(datetime(2026, 1, 1, tzinfo=UTC))


def spec(job_id: str, trigger: Weekly, key: str) -> JobSpec:
    return JobSpec(job_id, trigger, (key,))


def stored(job_id: str, key: str, next_run: datetime | None) -> StoredJob:
    return StoredJob(job_id, (key,), next_run, OPTIONS)


def test_an_overdue_send_moved_to_another_day_keeps_its_run_and_runs_at_once() -> None:
    monday = datetime(2026, 1, 12, 7, 30, tzinfo=UTC)
    (step,) = plan(
        [spec("digest:w", TUESDAY, "tue")], [stored("digest:w", "mon", monday)], NOW, OPTIONS
    )
    assert (step.action, step.new_trigger, step.next_run) == ("change", True, monday)
    assert step.first_run(NOW) == monday and monday <= NOW
    assert step.note(NOW) == "changed at next start; the send it missed runs at once"


def test_a_moved_send_not_yet_due_takes_the_new_day() -> None:
    next_monday = datetime(2026, 1, 19, 7, 30, tzinfo=UTC)
    (step,) = plan(
        [spec("digest:w", TUESDAY, "tue")], [stored("digest:w", "mon", next_monday)], NOW, OPTIONS
    )
    assert step.next_run == datetime(2026, 1, 20, 9, 0, tzinfo=UTC)
    assert step.note(NOW) == "changed at next start"


def test_an_unchanged_job_keeps_its_stored_run_and_options_that_changed_are_updated() -> None:
    later = datetime(2026, 1, 19, 7, 30, tzinfo=UTC)
    job = StoredJob("digest:w", ("mon",), later, {**OPTIONS, "misfire_grace_time": 1})
    (step,) = plan([spec("digest:w", MONDAY, "mon")], [job], NOW, OPTIONS)
    assert step.next_run == later and not step.new_trigger
    assert step.changes == {"misfire_grace_time": 604800}
    (kept,) = plan(
        [spec("digest:w", MONDAY, "mon")], [stored("digest:w", "mon", later)], NOW, OPTIONS
    )
    assert (kept.action, kept.note(NOW)) == ("keep", "")


def test_the_feed_rebuild_runs_at_start_and_an_owed_send_says_since_when_and_why() -> None:
    later = datetime(2026, 1, 19, 7, 30, tzinfo=UTC)
    owed = (
        OwedRun("digest:w", datetime(2026, 1, 12, 7, 30, tzinfo=UTC), "fired"),
        OwedRun("digest:w", datetime(2026, 1, 13, 7, 30, tzinfo=UTC), "stopped during its send"),
    )
    steps = plan(
        [spec(FEEDS_JOB, EVERY, "every"), spec("digest:w", MONDAY, "mon")],
        [stored(FEEDS_JOB, "every", later), stored("digest:w", "mon", later)],
        NOW,
        OPTIONS,
        owed={"digest:w": owed},
    )
    by_id = {step.id: step for step in steps}
    assert by_id[FEEDS_JOB].first_run(NOW) == NOW
    digest = by_id["digest:w"]
    assert digest.first_run(NOW) == later and digest.owed == owed  # run by the pass, not moved
    assert digest.late == 4.5 * 3600 and not digest.missed  # from the latest owed firing
    assert digest.note(NOW) == (
        "owed since 2026-01-12T07:30+00:00 (stopped during its send): runs at next start"
    )


def test_an_owed_send_over_the_grace_is_missed() -> None:
    later = datetime(2026, 1, 19, 7, 30, tzinfo=UTC)
    owed = (OwedRun("digest:w", datetime(2026, 1, 5, 7, 30, tzinfo=UTC), "fired"),)
    (step,) = plan(
        [spec("digest:w", MONDAY, "mon")],
        [stored("digest:w", "mon", later)],
        NOW,
        {**OPTIONS, "misfire_grace_time": 86400},
        owed={"digest:w": owed},
    )
    assert step.missed and step.note(NOW).startswith("missed (")


def test_new_jobs_are_added_and_jobs_gone_from_the_config_removed() -> None:
    steps = plan([spec("digest:w", MONDAY, "mon")], [stored("digest:old", "x", NOW)], NOW, OPTIONS)
    assert [(s.id, s.action, s.note(NOW)) for s in steps] == [
        ("digest:w", "add", "added at next start"),
        ("digest:old", "remove", "removed at next start"),
    ]
    assert steps[0].next_run == datetime(2026, 1, 19, 7, 30, tzinfo=UTC)


def test_a_catch_up_stands_for_the_latest_missed_run() -> None:
    three_weeks_ago = datetime(2025, 12, 22, 7, 30, tzinfo=UTC)
    assert latest_due(MONDAY, three_weeks_ago, NOW) == datetime(2026, 1, 12, 7, 30, tzinfo=UTC)


def test_a_send_overdue_by_more_than_the_grace_is_missed_not_run() -> None:
    monday = datetime(2026, 1, 12, 7, 30, tzinfo=UTC)  # 28.5 hours before NOW
    strict = {**OPTIONS, "misfire_grace_time": 3600}
    (step,) = plan(
        [spec("digest:w", MONDAY, "mon")], [stored("digest:w", "mon", monday)], NOW, strict
    )
    assert step.missed and step.late == 28.5 * 3600
    assert step.note(NOW) == "missed (102600 s late, over the grace): not run at next start"
    relaxed = {**OPTIONS, "misfire_grace_time": 86400 * 2}
    (step,) = plan(
        [spec("digest:w", MONDAY, "mon")], [stored("digest:w", "mon", monday)], NOW, relaxed
    )
    assert not step.missed and step.note(NOW) == "due: runs at next start"


def test_the_release_job_follows_the_ledger_after_the_configured_jobs() -> None:
    tokyo = datetime(2026, 1, 12, 22, 30, tzinfo=UTC)  # the first delivery waiting: overdue
    amsterdam = datetime(2026, 1, 13, 6, 30, tzinfo=UTC)
    weekly = [spec("digest:w", MONDAY, "mon")]
    # set by no run (one deferred or failed): the ledger's time sets it, after the sends
    steps = plan(weekly, [stored("digest:w", "mon", None)], NOW, OPTIONS, tokyo)
    assert [(s.id, s.action) for s in steps] == [("digest:w", "keep"), (RELEASE_JOB, "add")]
    release = steps[1]
    assert (release.next_run, release.spec, release.changes) == (tokyo, None, OPTIONS)
    assert release.first_run(NOW) == tokyo and release.note(NOW) == "the next zone"
    kept = plan([], [stored(RELEASE_JOB, "date", tokyo)], NOW, OPTIONS, tokyo)
    assert [(s.id, s.action, s.changes) for s in kept] == [(RELEASE_JOB, "keep", {})]
    moved = plan([], [stored(RELEASE_JOB, "date", amsterdam)], NOW, OPTIONS, tokyo)
    assert [(s.id, s.action, s.next_run) for s in moved] == [(RELEASE_JOB, "change", tokyo)]
    # nothing waits any more
    gone = plan([], [stored(RELEASE_JOB, "date", tokyo)], NOW, OPTIONS, None)
    assert [(s.id, s.action) for s in gone] == [(RELEASE_JOB, "remove")]
