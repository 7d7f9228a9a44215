"""A digest that comes due is sent, whatever happens to the scheduler at that moment: each
firing is a row in the state database (owed) before it is attempted, and every start and every
feed pass runs what is owed. For each fault, on SQLite and PostgreSQL where the fault exists
there: the scheduler's sessions ended before the firing and at it, a stop before the firing and
one during a drain with another job due inside it, the process killed at the firing, a second
scheduler taking over. Each due digest is sent exactly once after at most one restart.

The scheduler is the real one (APScheduler on the real database); the sends are recorded (the
send itself is idempotent, which tests/test_scheduler.py shows with real mail). Nothing waits
for a time to pass: a firing is set, through the running scheduler, for a moment after the
fault has happened.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from apscheduler.schedulers.base import STATE_STOPPED

from syndicate.config import Config, DigestJob, load_config
from syndicate.errors import DatabaseError
from syndicate.schedule.jobs import default_jobs
from syndicate.schedule.owed import FIRED
from syndicate.schedule.scheduler import Jobs, Planned, Report, Scheduler
from syndicate.state import create_engine, open_store
from syndicate.state.schema import job_firings
from tests.test_scheduler import (
    AMSTERDAM,
    Process,
    Recorder,
    _due_send,
    due_daily_digest,
    make_config,
    processes,  # noqa: F401 (a fixture)
    run_lines,
    wait_for,
)

PATIENCE = 120.0
"""Seconds to wait for what must happen; a passing test never waits this long."""


class Held(Recorder):
    """Recorded sends that hold each digest named in ``held`` until its event is set, and run
    ``at_send`` (a fault) as a send begins."""

    def __init__(self, *held: str) -> None:
        super().__init__()
        self.started = {name: threading.Event() for name in held}
        self.release = {name: threading.Event() for name in held}
        self.at_send: Any = None

    def send_digest(self, job: DigestJob, now: datetime) -> Report:
        report = super().send_digest(job, now)
        if self.at_send is not None:
            self.at_send()
        if job.name in self.started:
            self.started[job.name].set()
            assert self.release[job.name].wait(PATIENCE)
        return report


def later_today(minutes: int) -> dict[str, Any]:
    """A daily digest at a wall time ``minutes`` from now (never due while a test runs)."""
    at = (datetime.now(UTC) + timedelta(minutes=minutes)).astimezone(AMSTERDAM)
    return {"day_of_week": "*", "hour": at.hour, "minute": at.minute}


class Running(threading.Thread):
    """``scheduler.run`` in a thread; what it raised, if it did."""

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(daemon=True)
        self.scheduler = scheduler
        self.raised: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.scheduler.run()
        except BaseException as exc:  # what the test looks at
            self.raised = exc

    def stop(self) -> None:
        self.scheduler.request_stop()
        self.join(PATIENCE)
        assert not self.is_alive()


def fire_now(scheduler: Scheduler, job_id: str) -> None:
    """Have the running scheduler fire ``job_id`` now, as its trigger would (a paused one
    leaves it due)."""
    assert scheduler._sched is not None
    scheduler._sched.modify_job(job_id, next_run_time=datetime.now(UTC))


def planned_digests(config: Config) -> list[Planned]:
    rows = Scheduler(config, Recorder().jobs, clock=wall_clock).planned()
    return [row for row in rows if row.id != "feeds"]


def owed(config: Config) -> dict[str, list[str]]:
    """What ``schedule`` shows owed: each job's reasons."""
    rows = Scheduler(config, Recorder().jobs, clock=wall_clock).planned()
    return {row.id: [run.reason for run in row.owed] for row in rows if row.owed}


def wall_clock() -> datetime:
    return datetime.now(UTC)


def sends_after_one_restart(config: Config, at: datetime | None = None) -> Counter[str]:
    """The digests one ``run --once`` (at ``at``, else now) sends, and that a second sends
    none."""
    first, second = Recorder(), Recorder()
    for recorder in (first, second):
        Scheduler(config, recorder.jobs, clock=(lambda: at) if at else wall_clock).run_once()
    assert [name for name, _ in second.calls if name != "feeds"] == []
    return Counter(name for name, _ in first.calls if name != "feeds")


def end_sessions(url: str, application: str) -> None:
    """End every session of ``application`` (as a failover or a pooler restart does), and
    wait until those are gone (the application may open new ones meanwhile)."""
    engine = sa.create_engine(url)
    ours = "application_name = :name AND pid <> pg_backend_pid()"
    try:
        with engine.connect() as db:
            ended = (
                db.execute(
                    sa.text(f"SELECT pid FROM pg_stat_activity WHERE {ours}"), {"name": application}
                )
                .scalars()
                .all()
            )
            for pid in ended:
                db.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            db.commit()

            def gone() -> bool:
                left = db.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)"),
                    {"pids": list(ended)},
                )
                db.commit()  # the statistics views are a snapshot per transaction
                return left.scalar() == 0

            assert wait_for(gone, PATIENCE)
    finally:
        engine.dispose()


def named(url: str) -> tuple[str, str]:
    """``url`` with an application name of its own, to find its sessions by; the name."""
    application = f"owed-{uuid.uuid4().hex[:8]}"
    return f"{url}&application_name={application}", application


postgresql_only = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
"""Sessions to end exist on PostgreSQL; SQLite's lock is a file the process holds."""


@postgresql_only
def test_sessions_ended_before_the_firing_leave_it_owed_and_the_next_start_sends_it(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    url, application = named(database_url)
    config = make_config(tmp_path, url, [{"name": "daily", **later_today(120)}])
    recorder = Held()
    scheduler = Scheduler(config, recorder.jobs, clock=wall_clock)
    with caplog.at_level(logging.INFO, "syndicate.scheduler"):
        thread = Running(scheduler)
        assert recorder.feeds_built.wait(PATIENCE)
        end_sessions(database_url, application)
        fire_now(scheduler, "digest:daily")
        thread.join(PATIENCE)
    assert not thread.is_alive() and thread.raised is None and scheduler.lost_lock
    assert recorder.count("daily") == 0
    (deferred,) = [f for f in run_lines(caplog) if f["job"] == "digest:daily"]
    assert deferred["outcome"] == "deferred" and "lock was lost" in deferred["reason"]
    assert owed(config) == {"digest:daily": ["deferred: the scheduler lock was lost"]}
    assert sends_after_one_restart(config) == {"daily": 1}
    assert owed(config) == {}


@postgresql_only
def test_every_reader_gets_a_digest_a_lost_session_deferred_from_the_next_start(
    tmp_path: Path, database_url: str, smtp_server: tuple[Any, int]
) -> None:
    """End to end: the real feed rebuild and send, 300 readers, a real SMTP server; the
    sessions end before the firing; the next ``run --once`` (a process) sends every reader
    the digest, once."""
    inbox, port = smtp_server
    url, application = named(database_url)
    readers = [f"reader{n}@example.com" for n in range(300)]
    path, command = _due_send(tmp_path, url, port, readers, stop_timeout=30)
    config = load_config(path, env={})
    Scheduler(config, Recorder().jobs, clock=wall_clock).run_once()  # today's run is next
    built = threading.Event()
    real = default_jobs(config)

    def rebuild(now: datetime) -> Report | None:
        report = real.build_feeds(now)
        built.set()
        return report

    jobs = Jobs(rebuild, real.send_digest, real.deliver_due)
    thread = Running(Scheduler(config, jobs, clock=wall_clock))
    assert built.wait(PATIENCE)
    end_sessions(database_url, application)
    fire_now(thread.scheduler, "digest:daily")
    thread.join(PATIENCE)
    assert not thread.is_alive() and thread.raised is None and thread.scheduler.lost_lock
    assert inbox.counts() == {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNDICATE_")}
    rerun = subprocess.run(
        [*command, "--once"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "job digest:daily is owed since" in rerun.stderr
    assert inbox.counts() == dict.fromkeys(readers, 1)


@postgresql_only
def test_sessions_ended_at_the_firing_leave_it_owed_or_due_for_the_next_start(
    tmp_path: Path, database_url: str
) -> None:
    """The sessions end as the send begins, which fails on its lost connection. The
    scheduler meets the loss either in the send (it goes on, the firing owed with the failure
    as why) or as it moves the job's stored run on (it stops, one line, the run not moved):
    either way the next start sends it, once."""
    url, application = named(database_url)
    digests = [{"name": "daily", **later_today(120)}]
    config = make_config(tmp_path, url, digests)
    looking = make_config(tmp_path, database_url, digests)  # sessions the fault leaves alone
    recorder = Held()

    def lose_the_database() -> None:
        end_sessions(database_url, application)
        raise DatabaseError("database connection lost (terminating connection)")

    recorder.at_send = lose_the_database
    thread = Running(Scheduler(config, recorder.jobs, clock=wall_clock))
    assert recorder.feeds_built.wait(PATIENCE)
    fire_now(thread.scheduler, "digest:daily")
    assert wait_for(lambda: recorder.count("daily") == 1, PATIENCE)
    failed = "its send failed: database connection lost (terminating connection)"
    assert wait_for(
        lambda: not thread.is_alive() or owed(looking) == {"digest:daily": [failed]}, PATIENCE
    )
    thread.stop()
    assert thread.raised is None or isinstance(thread.raised, DatabaseError)
    (row,) = planned_digests(looking)
    assert row.note.endswith("runs at next start"), row.note
    assert sends_after_one_restart(config) == {"daily": 1}


def test_a_stop_before_the_firing_leaves_it_due_for_the_next_start(
    tmp_path: Path, database_url: str
) -> None:
    """Stopped before its time, started again after it: sent once then."""
    digest = {"name": "daily", **later_today(10)}
    config = make_config(tmp_path, database_url, [digest])
    recorder = Held()
    scheduler = Scheduler(config, recorder.jobs, clock=wall_clock)
    thread = Running(scheduler)
    assert recorder.feeds_built.wait(PATIENCE)
    scheduler.request_stop()
    thread.join(PATIENCE)
    assert not thread.is_alive() and thread.raised is None and recorder.count("daily") == 0
    (row,) = planned_digests(config)
    assert row.next_run is not None
    after = row.next_run + timedelta(seconds=30)
    assert sends_after_one_restart(config, after) == {"daily": 1}


def test_a_stop_during_a_drain_with_another_job_due_inside_it_drops_neither(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Job a is sending when the stop comes; job b falls due while a drains. a finishes (its
    send planned: done), b is sent by the next start; no traceback in the log."""
    digests = [{"name": "a", **later_today(120)}, {"name": "b", **later_today(180)}]
    config = make_config(tmp_path, database_url, digests)
    recorder = Held("a")
    scheduler = Scheduler(config, recorder.jobs, clock=wall_clock)
    with caplog.at_level(logging.INFO):
        thread = Running(scheduler)
        assert recorder.feeds_built.wait(PATIENCE)
        fire_now(scheduler, "digest:a")
        assert recorder.started["a"].wait(PATIENCE)
        scheduler.request_stop()  # paused: nothing more fires
        fire_now(scheduler, "digest:b")  # due inside the drain
        recorder.release["a"].set()
        thread.join(PATIENCE)
    assert not thread.is_alive() and thread.raised is None and not scheduler.interrupted
    assert recorder.count("a") == 1 and recorder.count("b") == 0
    assert "Traceback" not in caplog.text and "cannot schedule" not in caplog.text
    assert sends_after_one_restart(config) == {"b": 1}


def test_run_returns_only_once_a_deferred_firing_is_recorded_and_logged(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A firing that finds the lock lost is deferred: owed, with a line. The stop it starts
    shuts the scheduler down, and APScheduler's loop, woken then, ends at once: ``run``
    still returns only after the deferral is recorded and logged. (Before, it could return
    first: the line came after the caller had moved on, or never, in a process that then
    exited.) The recording is held until the loop has ended; a second passes before it is let
    go, in which a ``run`` that did not wait would have returned."""
    config = make_config(tmp_path, database_url, [{"name": "daily", **later_today(120)}])
    recorder = Held()
    scheduler = Scheduler(config, recorder.jobs, clock=wall_clock)
    recording, go_on = threading.Event(), threading.Event()
    still_owed = scheduler.owed.still_owed

    def held_still_owed(job_id: str, reason: str) -> None:
        recording.set()
        assert go_on.wait(PATIENCE)
        still_owed(job_id, reason)

    scheduler.owed.still_owed = held_still_owed  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, "syndicate.scheduler"):
        thread = Running(scheduler)
        assert recorder.feeds_built.wait(PATIENCE)
        sched = scheduler._sched
        assert sched is not None
        scheduler.lock.held = lambda: False  # type: ignore[method-assign]
        fire_now(scheduler, "digest:daily")
        assert recording.wait(PATIENCE)
        assert wait_for(lambda: sched.state == STATE_STOPPED, PATIENCE)
        sched.wakeup()  # the loop sees the scheduler stopped and ends
        thread.join(1.0)
        alive = thread.is_alive()
        go_on.set()
        thread.join(PATIENCE)
    assert alive and not thread.is_alive() and thread.raised is None and scheduler.lost_lock
    (deferred,) = [f for f in run_lines(caplog) if f["job"] == "digest:daily"]
    assert deferred["outcome"] == "deferred" and "lock was lost" in deferred["reason"]
    assert owed(config) == {"digest:daily": ["deferred: the scheduler lock was lost"]}


def test_a_process_killed_at_the_firing_owes_it_and_the_next_start_sends_it(
    tmp_path: Path,
    database_url: str,
    processes: list[Process],  # noqa: F811
) -> None:
    config_path, config = due_daily_digest(tmp_path, database_url)
    processes.append(process := Process(config_path, tmp_path / "rec"))
    assert wait_for(lambda: "start daily" in process.lines(), PATIENCE)
    process.popen.send_signal(signal.SIGKILL)
    process.popen.wait()
    # owed, or (killed before the scheduler moved its stored run on) still due
    (row,) = planned_digests(config)
    assert row.note.endswith("runs at next start"), row.note
    assert sends_after_one_restart(config) == {"daily": 1}


def test_a_second_scheduler_taking_over_sends_what_the_first_owed(
    tmp_path: Path,
    database_url: str,
    processes: list[Process],  # noqa: F811
) -> None:
    """A is killed in the middle of its send; B, waiting in standby, takes the lock and runs
    the owed send at its start. Sent (done) once in all, and nothing is owed after."""
    config_path, config = due_daily_digest(tmp_path, database_url)
    processes.append(acting := Process(config_path, tmp_path / "a"))
    assert wait_for(lambda: "start daily" in acting.lines(), PATIENCE)
    # a fact while it is attempted
    assert wait_for(lambda: owed(config) == {"digest:daily": [FIRED]}, PATIENCE)
    (tmp_path / "b.release").touch()  # B's sends complete at once
    processes.append(standby := Process(config_path, tmp_path / "b", "--standby"))
    assert wait_for(lambda: "standby" in standby.stderr(), PATIENCE)
    acting.popen.send_signal(signal.SIGKILL)
    acting.popen.wait()
    assert wait_for(lambda: "done daily" in standby.lines(), PATIENCE), standby.stderr()
    assert "job digest:daily is owed since" in standby.stderr()
    assert wait_for(lambda: owed(config) == {}, PATIENCE)
    standby.popen.send_signal(signal.SIGTERM)
    assert standby.finish(PATIENCE)[0] == 0
    done = [line for p in (acting, standby) for line in p.lines() if line == "done daily"]
    assert done == ["done daily"]
    assert sends_after_one_restart(config) == Counter()


def test_an_owed_run_older_than_the_grace_is_missed_not_sent(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, database_url, [{"name": "daily", **later_today(120)}])
    store = open_store(config.database_url)
    now = datetime.now(UTC)
    store.firings.owe("digest:daily", now - timedelta(days=8), "deferred: stopping", now)
    store.close()
    recorder = Recorder()
    with caplog.at_level(logging.INFO, "syndicate.scheduler"):
        Scheduler(config, recorder.jobs, clock=lambda: now).run_once()
    assert recorder.count("daily") == 0
    (missed,) = [f for f in run_lines(caplog) if f["job"] == "digest:daily"]
    assert missed["outcome"] == "missed" and "over the grace" in missed["reason"]
    assert owed(config) == {}


def test_a_firing_recorded_as_its_send_was_settled_is_not_owed(
    tmp_path: Path, database_url: str
) -> None:
    """The scheduler records a firing as it hands the run to a thread; a send that ends at
    once settles it in a transaction of its own, and on PostgreSQL the record, begun before
    that one committed, still writes its owed row after it. The row is the one it leaves."""
    config = make_config(tmp_path, database_url, [{"name": "daily", **later_today(120)}])
    store = open_store(config.database_url)
    now = datetime.now(UTC)
    store.firings.settle("digest:daily", now, "done", "sent", now)
    with store.engine.begin() as db:
        due = now - timedelta(hours=1)
        row = {"state": "owed", "reason": FIRED, "updated_at": now}
        db.execute(job_firings.insert().values(job_id="digest:daily", due_at=due, **row))
    assert store.firings.owed() == {}
    store.close()
    assert owed(config) == {}
    assert sends_after_one_restart(config, now) == Counter()


def test_the_upgrade_turns_an_interrupted_marker_into_an_owed_run(database_url: str) -> None:
    """Before owed rows, a paused "interrupted:" job marked a send to run again."""
    engine = create_engine(database_url)
    alembic = AlembicConfig()
    alembic.set_main_option("script_location", str(resources.files("syndicate") / "migrations"))

    def upgrade(target: str) -> None:
        with engine.begin() as connection:
            alembic.attributes["connection"] = connection
            command.upgrade(alembic, target)

    upgrade("0008")
    with engine.begin() as db:
        db.execute(
            sa.text(
                "CREATE TABLE apscheduler_jobs (id VARCHAR(191) PRIMARY KEY,"
                " next_run_time FLOAT, job_state BLOB)"
                if engine.dialect.name == "sqlite"
                else "CREATE TABLE apscheduler_jobs (id VARCHAR(191) PRIMARY KEY,"
                " next_run_time DOUBLE PRECISION, job_state BYTEA)"
            )
        )
        db.execute(
            sa.text("INSERT INTO apscheduler_jobs (id, job_state) VALUES (:id, :state)"),
            [
                {"id": "digest:daily", "state": b""},
                {"id": "interrupted:digest:daily", "state": b""},
            ],
        )
    upgrade("head")
    store = open_store(database_url)
    [(job_id, runs)] = store.firings.owed().items()
    assert job_id == "digest:daily" and [r.reason for r in runs] == [
        "interrupted before an upgrade"
    ]
    with engine.connect() as db:
        ids = db.execute(sa.text("SELECT id FROM apscheduler_jobs")).scalars().all()
    assert ids == ["digest:daily"]
    store.close()
    engine.dispose()
