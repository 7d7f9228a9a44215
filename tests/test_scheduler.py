"""The schedule: fire times (DST, weekdays), catch-up after downtime, restarts, the single-
scheduler lock and stopping on SIGTERM. Clocks are injected; real processes where it matters."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from apscheduler.triggers.cron import CronTrigger
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.cli.logs import JsonLines
from syndicate.clock import wall_clock
from syndicate.config import Config, DigestJob, load_config, parse_config
from syndicate.errors import ConfigError, SchedulerBusyError
from syndicate.schedule.scheduler import Jobs, Report, Scheduler, describe_trigger, job_specs
from syndicate.state import create_engine, open_store, scheduler_lock
from tests.conftest import ARTICLES, ROOT

AMSTERDAM = ZoneInfo("Europe/Amsterdam")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/state.db"


def make_config(tmp_path: Path, url: str, digests: list[dict[str, Any]], **schedule: Any) -> Config:
    data = {"state": {"database": url}, "schedule": {"digests": digests, **schedule}}
    return parse_config(data, root=tmp_path, source="(test)", env={})


class Recorder:
    """Real jobs that remember their calls; ``fail`` makes digest sends raise."""

    def __init__(self, reason: str | None = None, fail: bool = False) -> None:
        self.calls: list[tuple[str, datetime]] = []
        self.digest_sent = threading.Event()
        self.feeds_built = threading.Event()
        self.reason = reason
        self.fail = fail

    def build_feeds(self, now: datetime) -> Report:
        self.calls.append(("feeds", now))
        self.feeds_built.set()
        return Report({"feeds": 3})

    def send_digest(self, job: DigestJob, now: datetime) -> Report:
        self.calls.append((job.name, now))
        self.digest_sent.set()
        if self.fail:
            raise OSError("mail server refused the connection")
        return Report({"sent": 0 if self.reason else 2}, self.reason)

    @property
    def jobs(self) -> Jobs:
        return Jobs(build_feeds=self.build_feeds, send_digest=self.send_digest)

    def count(self, name: str) -> int:
        return sum(call == name for call, _ in self.calls)


def run_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The structured per-run lines that were logged."""
    return [r.fields for r in caplog.records if hasattr(r, "fields")]


def fire_times(trigger: Any, start: datetime, end: datetime) -> list[datetime]:
    """Ask the trigger, as the scheduler does, for every fire time in [start, end)."""
    times: list[datetime] = []
    fire = trigger.get_next_fire_time(None, start)
    while fire is not None and fire < end:
        times.append(fire)
        fire = trigger.get_next_fire_time(fire, fire)
    return times


def digest_trigger(tmp_path: Path, **digest: Any) -> Any:
    config = make_config(tmp_path, "sqlite://", [{"name": "d", **digest}])
    return next(spec.trigger for spec in job_specs(config, T0) if spec.digest is not None)


# -- fire times ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("day", "expected_utc"),
    [
        ("2026-03-29", datetime(2026, 3, 29, 1, 30, tzinfo=UTC)),  # 02:30 does not exist
        ("2026-10-25", datetime(2026, 10, 25, 0, 30, tzinfo=UTC)),  # 02:30 exists twice
    ],
)
def test_a_0230_daily_job_fires_exactly_once_on_a_dst_change_day(
    tmp_path: Path, day: str, expected_utc: datetime
) -> None:
    trigger = digest_trigger(tmp_path, day_of_week="*", hour=2, minute=30)
    middle = datetime.fromisoformat(day).replace(tzinfo=AMSTERDAM)
    times = fire_times(trigger, middle - timedelta(days=3), middle + timedelta(days=3))
    per_day = Counter(t.astimezone(AMSTERDAM).date().isoformat() for t in times)
    assert len(per_day) == 6 and set(per_day.values()) == {1}
    on_day = [t for t in times if t.astimezone(AMSTERDAM).date().isoformat() == day]
    assert [t.astimezone(UTC) for t in on_day] == [expected_utc]


def test_plain_cron_trigger_fires_twice_at_fall_back() -> None:
    """Why the schedule uses its own trigger: APScheduler 3.x repeats the ambiguous hour."""
    plain = CronTrigger(hour=2, minute=30, timezone=AMSTERDAM)
    day = datetime(2026, 10, 25, tzinfo=AMSTERDAM)
    assert len(fire_times(plain, day, day + timedelta(days=1))) == 2


def test_weekday_names_mean_those_days(tmp_path: Path) -> None:
    trigger = digest_trigger(tmp_path, day_of_week="mon", hour=7, minute=30)
    sunday = datetime(2026, 1, 4, 12, 0, tzinfo=AMSTERDAM)
    first, second = fire_times(trigger, sunday, sunday + timedelta(days=8))
    assert first == datetime(2026, 1, 5, 7, 30, tzinfo=AMSTERDAM)
    assert first.weekday() == 0 and second - first == timedelta(days=7)


def test_weekday_numbers_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="weekday names"):
        make_config(tmp_path, "sqlite://", [{"name": "d", "day_of_week": "0"}])


def test_digest_job_names_are_unique(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"repeated: weekly$"):
        make_config(tmp_path, "sqlite://", [MONDAY, {**MONDAY, "hour": 9}])


# -- catch-up, restarts, reconciling -------------------------------------------------------

MONDAY = {"name": "weekly", "day_of_week": "mon", "hour": 7, "minute": 30}
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # a Monday, after the 07:30 send


def clock(at: datetime) -> Callable[[], datetime]:
    return lambda: at


def test_downtime_spanning_three_sends_runs_one_catch_up(tmp_path: Path, database_url: str) -> None:
    config = make_config(tmp_path, database_url, [MONDAY])
    first = Recorder()
    assert Scheduler(config, first.jobs, clock=clock(T0)).run_once()
    assert first.count("weekly") == 0  # next send: Monday 12 January

    back = T0 + timedelta(days=21, hours=2)  # missed 12, 19 and 26 January
    after = Recorder()
    assert Scheduler(config, after.jobs, clock=clock(back)).run_once()
    assert after.count("weekly") == 1 and after.count("feeds") == 1

    again = Recorder()
    Scheduler(config, again.jobs, clock=clock(back + timedelta(minutes=5))).run_once()
    assert again.count("weekly") == 0
    (row,) = [
        r
        for r in Scheduler(config, again.jobs, clock=clock(back)).planned()
        if r.id.startswith("digest:")
    ]
    assert row.next_run == datetime(2026, 2, 2, 7, 30, tzinfo=AMSTERDAM)


def test_the_long_running_scheduler_coalesces_missed_sends(
    tmp_path: Path, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Real APScheduler processing: three overdue daily sends become one run at start."""
    now = datetime.now(UTC)
    at = (now - timedelta(hours=1)).astimezone(AMSTERDAM)
    daily = {"name": "daily", "day_of_week": "*", "hour": at.hour, "minute": at.minute}
    config = make_config(tmp_path, sqlite_url, [daily])
    Scheduler(config, Recorder().jobs, clock=clock(now - timedelta(days=3))).run_once()

    recorder = Recorder()
    scheduler = Scheduler(config, recorder.jobs, clock=wall_clock)
    thread = threading.Thread(target=scheduler.run)
    with caplog.at_level(logging.INFO, "syndicate.scheduler"):
        caplog.clear()
        thread.start()
        # both run at start, on two threads, in either order
        assert recorder.digest_sent.wait(20) and recorder.feeds_built.wait(20)
        scheduler.request_stop()
        thread.join(20)
    assert not thread.is_alive() and not scheduler.interrupted
    assert recorder.count("daily") == 1 and recorder.count("feeds") == 1
    runs = [(f["job"], f["outcome"]) for f in run_lines(caplog) if f["job"] != "feeds"]
    assert runs == [("digest:daily", "ok")]
    (row,) = [r for r in scheduler.planned() if r.id.startswith("digest:")]
    assert row.next_run is not None and row.next_run > now


def test_grace_frozen_into_the_store_follows_the_config(tmp_path: Path, sqlite_url: str) -> None:
    strict = make_config(tmp_path, sqlite_url, [MONDAY], misfire_grace_seconds=1)
    Scheduler(strict, Recorder().jobs, clock=clock(T0)).run_once()
    relaxed = make_config(tmp_path, sqlite_url, [MONDAY], misfire_grace_seconds=86400)
    late = Recorder()
    Scheduler(relaxed, late.jobs, clock=clock(datetime(2026, 1, 12, 9, 0, tzinfo=UTC))).run_once()
    assert late.count("weekly") == 1


def test_a_send_later_than_the_grace_is_logged_as_missed(
    tmp_path: Path, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, sqlite_url, [MONDAY], misfire_grace_seconds=3600)
    Scheduler(config, Recorder().jobs, clock=clock(T0)).run_once()
    at = clock(datetime(2026, 1, 13, tzinfo=UTC))
    (row,) = [r for r in Scheduler(config, Recorder().jobs, clock=at).planned() if r.id != "feeds"]
    assert row.note.startswith("missed (")  # schedule says what run --once does next
    late = Recorder()
    with caplog.at_level(logging.INFO, "syndicate.scheduler"):
        caplog.clear()
        Scheduler(config, late.jobs, clock=clock(datetime(2026, 1, 13, tzinfo=UTC))).run_once()
    assert late.count("weekly") == 0
    (missed,) = [f for f in run_lines(caplog) if f["outcome"] == "missed"]
    assert missed["job"] == "digest:weekly" and "grace" in missed["reason"]


def test_restart_keeps_the_schedule_and_applies_config_changes(
    tmp_path: Path, database_url: str
) -> None:
    config = make_config(tmp_path, database_url, [MONDAY])
    Scheduler(config, Recorder().jobs, clock=clock(T0)).run_once()
    next_monday = datetime(2026, 1, 12, 7, 30, tzinfo=AMSTERDAM)

    later = clock(T0 + timedelta(days=2))
    Scheduler(config, Recorder().jobs, clock=later).run_once()
    rows = {r.id: r for r in Scheduler(config, Recorder().jobs, clock=later).planned()}
    assert rows["digest:weekly"].next_run == next_monday and rows["digest:weekly"].note == ""

    changed = make_config(
        tmp_path,
        database_url,
        [
            {**MONDAY, "hour": 9},
            {"name": "daily", "day_of_week": "mon-fri", "hour": 6, "minute": 0},
        ],
    )
    pending = {r.id: r.note for r in Scheduler(changed, Recorder().jobs, clock=later).planned()}
    assert pending == {
        "feeds": "",
        "digest:weekly": "changed at next start",
        "digest:daily": "added at next start",
    }
    Scheduler(changed, Recorder().jobs, clock=later).run_once()
    rows = {r.id: r for r in Scheduler(changed, Recorder().jobs, clock=later).planned()}
    assert rows["digest:weekly"].next_run == next_monday.replace(hour=9)
    assert rows["digest:daily"].next_run == datetime(2026, 1, 8, 6, 0, tzinfo=AMSTERDAM)

    only_daily = make_config(tmp_path, database_url, [{"name": "daily", "day_of_week": "mon-fri"}])
    Scheduler(only_daily, Recorder().jobs, clock=later).run_once()
    ids = {r.id for r in Scheduler(only_daily, Recorder().jobs, clock=later).planned()}
    assert ids == {"feeds", "digest:daily"}


def test_a_send_missed_before_a_schedule_change_still_goes_out_once(
    tmp_path: Path, sqlite_url: str
) -> None:
    Scheduler(
        make_config(tmp_path, sqlite_url, [MONDAY]), Recorder().jobs, clock=clock(T0)
    ).run_once()
    tuesday = make_config(tmp_path, sqlite_url, [{**MONDAY, "day_of_week": "tue", "hour": 9}])
    back = clock(datetime(2026, 1, 13, 12, 0, tzinfo=UTC))  # down across Monday's send
    recorder = Recorder()
    Scheduler(tuesday, recorder.jobs, clock=back).run_once()
    assert recorder.count("weekly") == 1
    (row,) = [r for r in Scheduler(tuesday, recorder.jobs, clock=back).planned() if r.id != "feeds"]
    assert row.next_run == datetime(2026, 1, 20, 9, 30, tzinfo=AMSTERDAM) and row.note == ""


def test_schedule_says_what_run_once_does_with_an_overdue_send_moved_to_another_day(
    tmp_path: Path, sqlite_url: str
) -> None:
    """Monday's send overdue and the job moved to Tuesday: ``schedule`` lists Monday's send as
    due at once, and ``run --once`` sends it at once."""
    Scheduler(
        make_config(tmp_path, sqlite_url, [MONDAY]), Recorder().jobs, clock=clock(T0)
    ).run_once()
    tuesday = make_config(tmp_path, sqlite_url, [{**MONDAY, "day_of_week": "tue", "hour": 9}])
    back = datetime(2026, 1, 13, 12, 0, tzinfo=UTC)  # down across Monday's send
    (row,) = [
        r
        for r in Scheduler(tuesday, Recorder().jobs, clock=clock(back)).planned()
        if r.id != "feeds"
    ]
    assert row.next_run == datetime(2026, 1, 12, 7, 30, tzinfo=AMSTERDAM)
    assert row.note == "changed at next start; the send it missed runs at once"
    recorder = Recorder()
    Scheduler(tuesday, recorder.jobs, clock=clock(back)).run_once()
    assert [call for call in recorder.calls if call[0] == "weekly"] == [("weekly", back)]


def test_the_feed_interval_counts_from_the_schedulers_clock(
    tmp_path: Path, sqlite_url: str
) -> None:
    config = make_config(tmp_path, sqlite_url, [MONDAY], feeds_every_minutes=20)
    (feeds_spec,) = [spec for spec in job_specs(config, T0) if spec.digest is None]
    assert feeds_spec.trigger.get_next_fire_time(None, T0) == T0 + timedelta(minutes=20)
    Scheduler(config, Recorder().jobs, clock=clock(T0)).run_once()
    rows = {r.id: r for r in Scheduler(config, Recorder().jobs, clock=clock(T0)).planned()}
    assert rows["feeds"].next_run == T0 + timedelta(minutes=20)


def test_jobs_stored_before_the_scheduler_moved_still_load(tmp_path: Path) -> None:
    """The job store keeps each job's function and trigger class by their import paths."""
    import pickle

    from apscheduler.util import ref_to_obj

    from syndicate.schedule import scheduler

    trigger = digest_trigger(tmp_path, day_of_week="mon", hour=7, minute=30)
    moved = pickle.dumps(trigger, protocol=0)
    assert b"syndicate.schedule.scheduler" in moved
    earlier = moved.replace(b"syndicate.schedule.scheduler", b"syndicate.scheduler")
    assert str(pickle.loads(earlier)) == str(trigger)
    assert type(pickle.loads(earlier)) is scheduler.WallClockCronTrigger
    assert ref_to_obj("syndicate.scheduler:fire") is scheduler.fire


def test_a_failing_job_is_logged_and_the_others_still_run(
    tmp_path: Path, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, sqlite_url, [MONDAY])
    Scheduler(config, Recorder().jobs, clock=clock(T0)).run_once()
    failing = Recorder(fail=True)
    with caplog.at_level(logging.INFO, "syndicate.scheduler"):
        caplog.clear()
        ok = Scheduler(config, failing.jobs, clock=clock(T0 + timedelta(days=7))).run_once()
    assert not ok and failing.count("feeds") == 1 and failing.count("weekly") == 1
    lines = run_lines(caplog)
    assert [(f["job"], f["outcome"]) for f in lines] == [
        ("feeds", "ok"),
        ("digest:weekly", "error"),
    ]
    assert "refused" in lines[1]["reason"]


def test_a_digest_with_nothing_new_logs_why_as_one_json_line(
    tmp_path: Path, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, sqlite_url, [MONDAY])
    Scheduler(config, Recorder().jobs, clock=clock(T0)).run_once()
    idle = Recorder(reason="no new content for en / cost since 2026-01-05")
    with caplog.at_level(logging.INFO, "syndicate.scheduler"):
        caplog.clear()
        Scheduler(config, idle.jobs, clock=clock(T0 + timedelta(days=7))).run_once()
    (record,) = [
        r for r in caplog.records if getattr(r, "fields", {}).get("job") == "digest:weekly"
    ]
    line = json.loads(JsonLines().format(record))
    assert line["outcome"] == "nothing" and line["counts"] == {"sent": 0}
    assert line["reason"] == "no new content for en / cost since 2026-01-05"
    assert line["start"] == "2026-01-12T12:00:00+00:00" and line["duration"] >= 0
    assert "reason='no new content" in record.getMessage()


def test_schedule_command_lists_next_runs_in_the_site_zone(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[schedule]\n[[schedule.digests]]\nname = "weekly"\nday_of_week = "mon"\nhour = 7\n'
        'minute = 30\n[site]\ntimezone = "America/New_York"\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["schedule", "--config", str(tmp_path / "config.toml")])
    assert result.exit_code == 0, result.output
    assert "digest:weekly" in result.output and "feeds" in result.output
    assert "Mon " in result.output and "07:30 E" in result.output  # EST or EDT
    assert "added at next start" in result.output
    assert "Mondays 07:30 America/New_York" in result.output
    assert "every 30 minutes" in result.output


def test_schedule_json_is_one_document(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[state]\ndatabase = "sqlite:///state.db"\n[schedule]\nfeeds_every_minutes = 120\n'
        '[[schedule.digests]]\nname = "workdays"\nday_of_week = "mon-fri"\nhour = 6\n'
        "minute = 5\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(
        main, ["schedule", "--json", "--config", str(tmp_path / "config.toml")]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["timezone"] == "Europe/Amsterdam"
    jobs = {job["job"]: job for job in document["jobs"]}
    assert jobs["feeds"]["trigger"] == "every 2 hours"
    workdays = jobs["digest:workdays"]
    assert workdays["trigger"] == "Monday to Friday 06:05 Europe/Amsterdam"
    assert workdays["note"] == "added at next start"
    next_run = datetime.fromisoformat(workdays["next_run"])
    assert next_run.weekday() < 5 and (next_run.hour, next_run.minute) == (6, 5)
    assert next_run.utcoffset() is not None


@pytest.mark.parametrize(
    ("day_of_week", "hour", "minute", "said"),
    [
        ("mon", 7, 30, "Mondays 07:30 Europe/Amsterdam"),
        ("mon-fri", 6, 0, "Monday to Friday 06:00 Europe/Amsterdam"),
        ("mon,wed,fri", 9, 5, "Mondays, Wednesdays and Fridays 09:05 Europe/Amsterdam"),
        ("sat-sun,wed", 23, 59, "Saturday to Sunday and Wednesdays 23:59 Europe/Amsterdam"),
        ("*", 2, 30, "every day 02:30 Europe/Amsterdam"),
    ],
)
def test_a_trigger_reads_as_a_person_says_it(tmp_path, day_of_week, hour, minute, said) -> None:
    trigger = digest_trigger(tmp_path, day_of_week=day_of_week, hour=hour, minute=minute)
    assert describe_trigger(trigger) == said


def test_an_interval_reads_in_minutes_or_hours(tmp_path: Path) -> None:
    def every(minutes: int) -> str:
        config = make_config(tmp_path, "sqlite://", [], feeds_every_minutes=minutes)
        return describe_trigger(job_specs(config, T0)[0].trigger)

    assert [every(n) for n in (1, 30, 60, 90, 180)] == [
        "every minute",
        "every 30 minutes",
        "every hour",
        "every 90 minutes",
        "every 3 hours",
    ]


def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[state]\ndatabase = "postgresql+psycopg://postgres:secret@127.0.0.1:1/none"\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["schedule", "--config", str(tmp_path / "config.toml")])
    assert result.exit_code == 1
    assert result.output.startswith("syndicate: state database postgresql+psycopg://postgres:***@")
    assert "secret" not in result.output and len(result.output.splitlines()) <= 3


# -- one scheduler at a time ---------------------------------------------------------------


def test_only_one_lock_holder(database_url: str) -> None:
    engine = create_engine(database_url)
    first, second = scheduler_lock(database_url, engine), scheduler_lock(database_url, engine)
    try:
        assert first.acquire()
        assert not second.acquire()
        assert str(os.getpid()) in second.holder() or "server pid" in second.holder()
        first.release()
        assert second.acquire()
    finally:
        first.release()
        second.release()
        engine.dispose()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_lost_postgresql_session_is_noticed_and_frees_the_lock(database_url: str) -> None:
    engine = create_engine(database_url)
    lock, other = scheduler_lock(database_url, engine), scheduler_lock(database_url, engine)
    try:
        assert lock.acquire() and lock.held()
        with engine.connect() as db:  # as when the database server restarts
            db.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
                    " AND ((classid::bigint << 32) | objid::bigint) = :key"
                ),
                {"key": lock.key},
            )
        assert not lock.held()
        assert other.acquire()
    finally:
        lock.release()
        other.release()
        engine.dispose()


def test_run_once_refuses_while_another_scheduler_acts(tmp_path: Path, database_url: str) -> None:
    config = make_config(tmp_path, database_url, [MONDAY])
    engine = create_engine(database_url)
    held = scheduler_lock(database_url, engine)
    assert held.acquire()
    try:
        recorder = Recorder()
        with pytest.raises(SchedulerBusyError, match="another scheduler is active"):
            Scheduler(config, recorder.jobs, clock=clock(T0)).run_once()
        assert recorder.calls == []
    finally:
        held.release()
        engine.dispose()


# -- real processes ------------------------------------------------------------------------


def wait_for(condition: Callable[[], bool], timeout: float = 30) -> bool:
    """Poll for an event with a deadline (no assertion depends on how long it took)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class Process:
    """``syndicate run`` with recording jobs (tests/scheduler_process.py) in a child process."""

    def __init__(self, config: Path, record: Path, *flags: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNDICATE_")}
        self.record = record
        self.log = record.with_name(record.name + ".log")
        with self.log.open("w") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tests.scheduler_process", str(config), str(record), *flags],
                cwd=ROOT,
                env=env,
                stderr=log,
            )

    def lines(self) -> list[str]:
        return self.record.read_text().splitlines() if self.record.exists() else []

    def stderr(self) -> str:
        return self.log.read_text()

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        self.popen.wait(timeout=timeout)
        return self.popen.returncode, self.stderr()

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()


def due_daily_digest(tmp_path: Path, url: str, stop_timeout: float = 30) -> tuple[Path, Config]:
    """A config whose daily digest is overdue by an hour, as after a short downtime."""
    now = datetime.now(UTC)
    at = (now - timedelta(hours=1)).astimezone(AMSTERDAM)
    path = tmp_path / "config.toml"
    path.write_text(
        f'[state]\ndatabase = "{url}"\n[schedule]\nstop_timeout_seconds = {stop_timeout}\n'
        f'[[schedule.digests]]\nname = "daily"\nday_of_week = "*"\nhour = {at.hour}\n'
        f"minute = {at.minute}\n",
        encoding="utf-8",
    )
    config = make_config(
        tmp_path,
        url,
        [{"name": "daily", "day_of_week": "*", "hour": at.hour, "minute": at.minute}],
        stop_timeout_seconds=stop_timeout,
    )
    Scheduler(config, Recorder().jobs, clock=clock(now - timedelta(hours=2))).run_once()
    return path, config


def test_two_processes_one_acts_and_a_standby_takes_over(
    tmp_path: Path, database_url: str, processes: list[Process]
) -> None:
    config, _ = due_daily_digest(tmp_path, database_url)
    (tmp_path / "a.release").touch()  # A's sends complete at once
    processes.append(acting := Process(config, tmp_path / "a"))
    assert wait_for(lambda: "done daily" in acting.lines())

    processes.append(second := Process(config, tmp_path / "b"))
    code, err = second.finish()
    assert code == 3 and "another scheduler is active" in err
    assert second.lines() == []

    processes.append(standby := Process(config, tmp_path / "c", "--standby"))
    assert wait_for(lambda: "standby" in standby.stderr())
    acting.popen.send_signal(signal.SIGTERM)
    assert acting.finish()[0] == 0
    assert wait_for(lambda: "feeds" in standby.lines())
    assert "daily" not in " ".join(standby.lines())  # the send already happened under A
    standby.popen.send_signal(signal.SIGTERM)
    code, err = standby.finish()
    assert code == 0 and "standby" in err and "now acting" in err


def test_sigterm_during_a_send_lets_it_finish_and_exits_0(
    tmp_path: Path, sqlite_url: str, processes: list[Process]
) -> None:
    config, _ = due_daily_digest(tmp_path, sqlite_url)
    processes.append(process := Process(config, tmp_path / "rec", "--log-json"))
    # Both run at start, on two threads, in either order: the stop comes once both have begun.
    assert wait_for(lambda: {"feeds", "start daily"} <= set(process.lines()))
    process.popen.send_signal(signal.SIGTERM)
    (tmp_path / "rec.release").touch()
    code, err = process.finish(timeout=30)
    assert code == 0
    assert sorted(process.lines()) == ["done daily", "feeds", "start daily"]
    assert process.lines()[-1] == "done daily"
    runs = [json.loads(line) for line in err.splitlines() if '"outcome"' in line]
    assert {(r["job"], r["outcome"]) for r in runs} == {("feeds", "ok"), ("digest:daily", "ok")}


def test_sigterm_during_a_stuck_send_exits_0_in_bound_and_the_rerun_completes_it(
    tmp_path: Path, sqlite_url: str, processes: list[Process]
) -> None:
    config_path, config = due_daily_digest(tmp_path, sqlite_url, stop_timeout=0.5)
    processes.append(process := Process(config_path, tmp_path / "rec"))
    assert wait_for(lambda: "start daily" in process.lines())
    signalled = time.monotonic()
    process.popen.send_signal(signal.SIGTERM)
    code, err = process.finish(timeout=30)
    assert code == 0 and time.monotonic() - signalled < 10
    assert "digest:daily unfinished" in err and "done daily" not in process.lines()

    rerun = Recorder()
    Scheduler(config, rerun.jobs, clock=wall_clock).run_once()
    assert rerun.count("daily") == 1  # the interrupted send runs again (it is idempotent)
    again = Recorder()
    Scheduler(config, again.jobs, clock=wall_clock).run_once()
    assert again.count("daily") == 0


# -- the whole process: scheduler, delivery ledger, a real SMTP server ---------------------


def _due_send(
    tmp_path: Path, database_url: str, port: int, readers: list[str], stop_timeout: float
) -> tuple[Path, list[str]]:
    """A config whose daily send fell due an hour ago, readers subscribed; the run command."""
    now = datetime.now(UTC)
    at = (now - timedelta(hours=1)).astimezone(AMSTERDAM)
    path = tmp_path / "config.toml"
    path.write_text(
        f'[site]\narticles = "{ARTICLES}"\nbase_url = "https://news.example.org"\n'
        f'[state]\ndatabase = "{database_url}"\n'
        f'[email]\nsender = "News <digest@news.example.org>"\n'
        f'[smtp]\nurl = "smtp://127.0.0.1:{port}"\npool_size = 1\nretry_backoff = 0\n'
        f"[schedule]\nstop_timeout_seconds = {stop_timeout}\n"
        f'[[schedule.digests]]\nname = "daily"\nday_of_week = "*"\n'
        f"hour = {at.hour}\nminute = {at.minute}\n",
        encoding="utf-8",
    )
    config = load_config(path, env={})
    store = open_store(config.database_url)
    for email in readers:
        store.subscribers.add_subscriber(
            email, "en", ["cost"], status="active", consent_source="t", now=now
        )
    store.close()
    # the daily send fell due an hour ago, while the process was down
    Scheduler(config, Recorder().jobs, clock=clock(now - timedelta(hours=2))).run_once()
    return path, [sys.executable, "-m", "syndicate", "run", "--config", str(path)]


def test_sigterm_mid_send_then_a_rerun_delivers_everyone_exactly_once(
    tmp_path: Path, database_url: str, smtp_server: tuple[Any, int]
) -> None:
    inbox, port = smtp_server
    readers = [f"reader{n}@example.com" for n in range(6)]
    inbox.script[("data", readers[2])] = ["HOLD"]  # accepted, but the 250 is kept back
    _, command = _due_send(tmp_path, database_url, port, readers, stop_timeout=0.5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNDICATE_")}
    with (tmp_path / "run.log").open("w") as log:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=log)
    try:
        assert inbox.holding.wait(60), (tmp_path / "run.log").read_text()
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert time.monotonic() - signalled < 10
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "digest:daily unfinished" in (tmp_path / "run.log").read_text()
    assert sum(inbox.counts().values()) < len(readers)  # the send really was cut short
    inbox.release.set()

    rerun = subprocess.run(
        [*command, "--once"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert "job digest:daily is owed since" in rerun.stderr, rerun.stderr
    assert inbox.counts() == dict.fromkeys(readers, 1)
    # the held reader's message arrived but its 250 never did: uncertain, so never resent
    assert rerun.returncode == 1 and "uncertain=1" in rerun.stderr


def test_sigterm_mid_send_under_run_drains_the_send_and_exits_0(
    tmp_path: Path, database_url: str, smtp_server: tuple[Any, int]
) -> None:
    inbox, port = smtp_server
    readers = [f"reader{n}@example.com" for n in range(6)]
    inbox.script[("data", readers[2])] = ["HOLD"]  # slow: its 250 comes after the stop
    _, command = _due_send(tmp_path, database_url, port, readers, stop_timeout=60)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNDICATE_")}
    log = tmp_path / "run.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=out)
    try:
        assert inbox.holding.wait(60), log.read_text()
        process.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "stopping:" in log.read_text()), log.read_text()
        inbox.release.set()
        assert process.wait(timeout=60) == 0, log.read_text()
    finally:
        inbox.release.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert inbox.counts() == dict.fromkeys(readers[:3], 1)  # the one on the wire finished
    store = open_store(database_url)
    states = {d.email: d.status for d in store.ledger.deliveries()}
    store.close()
    assert states == {r: "sent" if r in readers[:3] else "pending" for r in readers}
    rerun = subprocess.run(
        [*command, "--once"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert "job digest:daily is owed since" in rerun.stderr, rerun.stderr
    assert rerun.returncode == 0, rerun.stderr
    assert inbox.counts() == dict.fromkeys(readers, 1)


def test_sigterm_mid_send_under_run_once_drains_and_the_next_start_resumes_it(
    tmp_path: Path, database_url: str, smtp_server: tuple[Any, int]
) -> None:
    inbox, port = smtp_server
    readers = [f"reader{n}@example.com" for n in range(6)]
    inbox.script[("data", readers[2])] = ["HOLD"]
    _, command = _due_send(tmp_path, database_url, port, readers, stop_timeout=60)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNDICATE_")}
    log = tmp_path / "once.log"
    with log.open("w") as out:
        process = subprocess.Popen([*command, "--once"], cwd=tmp_path, env=env, stderr=out)
    try:
        assert inbox.holding.wait(60), log.read_text()
        process.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "stopping:" in log.read_text()), log.read_text()
        inbox.release.set()
        assert process.wait(timeout=60) == 1, log.read_text()  # the send was partial
    finally:
        inbox.release.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert inbox.counts() == dict.fromkeys(readers[:3], 1)
    rerun = subprocess.run(
        [*command, "--once"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert "job digest:daily is owed since" in rerun.stderr, rerun.stderr
    assert rerun.returncode == 0, rerun.stderr
    assert inbox.counts() == dict.fromkeys(readers, 1)
