"""Digests at each reader's local time: one issue, its deliveries released zone by zone by the
scheduler (its clock injected), across a DST change, at a real server on both databases."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import load_config
from syndicate.digest import local_send_time
from syndicate.schedule.jobs import default_jobs
from syndicate.schedule.plan import RELEASE_JOB
from syndicate.schedule.scheduler import Jobs, Scheduler
from syndicate.sending.issuing import approve_issue
from syndicate.sending.status import send_status
from syndicate.state import open_store
from tests.conftest import write_articles
from tests.mailserver import free_port
from tests.test_send import write_config

AMSTERDAM = ZoneInfo("Europe/Amsterdam")


def test_a_local_time_is_found_in_utc_across_the_clock_changes() -> None:
    spring, autumn = date(2026, 3, 29), date(2026, 10, 25)
    assert local_send_time(spring, 7, 30, AMSTERDAM) == datetime(2026, 3, 29, 5, 30, tzinfo=UTC)
    day_before = spring - timedelta(days=1)
    assert local_send_time(day_before, 7, 30, AMSTERDAM) == datetime(2026, 3, 28, 6, 30, tzinfo=UTC)
    # 02:30 does not exist that night: it is reached as 03:30 CEST, as the schedule fires
    assert local_send_time(spring, 2, 30, AMSTERDAM) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    # 02:30 comes twice: the first
    assert local_send_time(autumn, 2, 30, AMSTERDAM) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)


def test_each_reader_gets_the_digest_once_at_their_own_0730(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    articles = write_articles(tmp_path / "articles", 2, newest=date(2026, 3, 27))
    job = ["[[schedule.digests]]", 'name = "sunday"', 'day_of_week = "sun"', "hour = 7",
           "minute = 30", "local_time = true"]  # fmt: skip
    path = write_config(tmp_path, database_url, port, articles, rest=job)
    config = load_config(path)
    runner = CliRunner()
    for email, zone in [
        ("tokyo@example.com", ["--timezone", "Asia/Tokyo"]),
        ("amsterdam@example.com", []),  # the site's zone, Europe/Amsterdam
        ("newyork@example.com", ["--timezone", "America/New_York"]),
    ]:
        args = ["subscribers", "add", email, "--config", str(path), "--lang", "en"]
        assert runner.invoke(main, [*args, "--audience", "cost", *zone]).exit_code == 0

    def run_at(when: datetime) -> dict[str, int]:
        scheduler = Scheduler(config, default_jobs(config), clock=lambda: when)
        scheduler.run_once()
        return dict(inbox.counts())

    # Sunday 29 March 2026: Europe moves its clocks forward at 01:00 UTC.
    assert run_at(datetime(2026, 3, 28, 12, 0, tzinfo=UTC)) == {}
    # 07:30 in UTC+14, the first zone to reach it: issued once, nobody's time has come yet
    assert run_at(datetime(2026, 3, 28, 17, 31, tzinfo=UTC)) == {}
    issued = datetime(2026, 3, 28, 17, 31, tzinfo=UTC)
    store = open_store(database_url)
    assert len(store.ledger.deliveries()) == 3 and {
        d.issue_id for d in store.ledger.deliveries()
    } == {1}
    status = send_status(config, store, issued).to_json()
    store.close()
    assert [(w["timezone"], w["not_before"], w["deliveries"]) for w in status["waiting"]] == [
        ("Asia/Tokyo", "2026-03-28T22:30:00+00:00", 1),
        ("Europe/Amsterdam", "2026-03-29T05:30:00+00:00", 1),  # 07:30 CEST, after the change
        ("America/New_York", "2026-03-29T11:30:00+00:00", 1),
    ]
    planned = Scheduler(config, default_jobs(config), clock=lambda: issued).planned()
    assert [p.trigger for p in planned if p.id == "digest:sunday"] == [
        "Sundays 07:30 each reader's time"
    ]
    (release,) = [p for p in planned if p.id == RELEASE_JOB]
    assert release.next_run == datetime(2026, 3, 28, 22, 30, tzinfo=UTC)

    assert run_at(datetime(2026, 3, 28, 22, 31, tzinfo=UTC)) == {"tokyo@example.com": 1}
    # 07:00 CEST: still 06:00 on the clocks of the day before, and not 07:30 yet either way
    assert run_at(datetime(2026, 3, 29, 5, 0, tzinfo=UTC)) == {"tokyo@example.com": 1}
    after = run_at(datetime(2026, 3, 29, 5, 31, tzinfo=UTC))
    assert after == {"tokyo@example.com": 1, "amsterdam@example.com": 1}
    after = run_at(datetime(2026, 3, 29, 11, 31, tzinfo=UTC))
    assert after == {"tokyo@example.com": 1, "amsterdam@example.com": 1, "newyork@example.com": 1}
    assert run_at(datetime(2026, 3, 29, 20, 0, tzinfo=UTC)) == after  # once each
    store = open_store(database_url)
    assert {d.status for d in store.ledger.deliveries()} == {"sent"} and store.ledger.waiting(
        datetime(2026, 3, 29, 20, 0, tzinfo=UTC)
    ) == []
    store.close()
    evening = datetime(2026, 3, 29, 20, 0, tzinfo=UTC)
    done = Scheduler(config, default_jobs(config), clock=lambda: evening)
    assert not [p for p in done.planned() if p.id == RELEASE_JOB]


TOKYO_DUE = datetime(2026, 3, 28, 22, 30, tzinfo=UTC)
"""07:30 in Tokyo on Sunday 29 March 2026; Amsterdam's is 05:30 UTC the next morning."""


def readers_in_three_zones(folder: Path, database_url: str, port: int) -> Path:
    """A site with a Sunday 07:30 local-time digest and a reader in Tokyo, Amsterdam and New
    York; its mail goes to ``port``."""
    folder.mkdir(exist_ok=True)
    articles = write_articles(folder / "articles", 2, newest=date(2026, 3, 27))
    job = ["[[schedule.digests]]", 'name = "sunday"', 'day_of_week = "sun"', "hour = 7",
           "minute = 30", "local_time = true"]  # fmt: skip
    path = write_config(folder, database_url, port, articles, rest=job)
    runner = CliRunner()
    for email, zone in [
        ("tokyo@example.com", "Asia/Tokyo"),
        ("amsterdam@example.com", "Europe/Amsterdam"),
        ("newyork@example.com", "America/New_York"),
    ]:
        args = ["subscribers", "add", email, "--config", str(path), "--lang", "en"]
        assert runner.invoke(main, [*args, "--audience", "cost", "--timezone", zone]).exit_code == 0
    return path


def run_at(path: Path, when: datetime, jobs: Jobs | None = None) -> bool:
    config = load_config(path)
    return Scheduler(config, jobs or default_jobs(config), clock=lambda: when).run_once()


def issue_for_every_zone(path: Path) -> None:
    """The schedule's first start, then the issue at 07:30 in UTC+14: everyone waits."""
    run_at(path, datetime(2026, 3, 28, 12, 0, tzinfo=UTC))
    run_at(path, datetime(2026, 3, 28, 17, 31, tzinfo=UTC))


def test_a_release_deferred_by_a_stop_goes_out_at_the_next_start(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    path = readers_in_three_zones(tmp_path, database_url, port)
    issue_for_every_zone(path)
    config = load_config(path)
    jobs = default_jobs(config)
    tokyo = TOKYO_DUE + timedelta(minutes=1)
    stopping = Scheduler(config, jobs, clock=lambda: tokyo)
    stopping.request_stop()  # a SIGTERM: the release that fires now is deferred, not run
    stopping.run_once()
    assert inbox.counts() == {}
    later = tokyo + timedelta(hours=1)  # before Amsterdam's time
    (release,) = [
        p for p in Scheduler(config, jobs, clock=lambda: later).planned() if p.id == RELEASE_JOB
    ]
    assert release.next_run == TOKYO_DUE
    assert run_at(path, later)
    assert inbox.counts() == {"tokyo@example.com": 1}
    run_at(path, datetime(2026, 3, 29, 5, 31, tzinfo=UTC))
    assert inbox.counts() == {"tokyo@example.com": 1, "amsterdam@example.com": 1}


def test_a_release_that_fails_leaves_the_next_zone_to_be_released(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    path = readers_in_three_zones(tmp_path, database_url, port)
    issue_for_every_zone(path)
    # the same site while its mail server is unreachable
    (tmp_path / "down").mkdir()
    down = tmp_path / "down" / "config.toml"
    down.write_text(path.read_text("utf-8").replace(f":{port}", f":{free_port()}"), "utf-8")
    assert not run_at(down, TOKYO_DUE + timedelta(minutes=1))  # the release fails
    assert inbox.counts() == {}
    store = open_store(database_url)
    assert {d.status for d in store.ledger.deliveries()} == {"pending"}
    store.close()
    # Amsterdam's time: its zone goes out, and Tokyo's, left by the failed run, with it
    assert run_at(path, datetime(2026, 3, 29, 5, 31, tzinfo=UTC))
    assert inbox.counts() == {"tokyo@example.com": 1, "amsterdam@example.com": 1}
    assert run_at(path, datetime(2026, 3, 29, 11, 31, tzinfo=UTC))
    assert inbox.counts() == {
        "tokyo@example.com": 1,
        "amsterdam@example.com": 1,
        "newyork@example.com": 1,
    }


def test_a_held_local_time_issue_waits_for_approval_then_for_each_readers_time(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    editor = "editor@news.example.org"
    articles = write_articles(tmp_path / "articles", 2, newest=date(2026, 3, 27))
    job = ["[[schedule.digests]]", 'name = "sunday"', 'day_of_week = "sun"', "hour = 7",
           "minute = 30", "local_time = true"]  # fmt: skip
    email = ["approval = true", f'preview_to = "{editor}"']
    path = write_config(tmp_path, database_url, port, articles, email=email, rest=job)
    runner = CliRunner()
    for address, zone in [("tokyo@example.com", "Asia/Tokyo"),
                          ("amsterdam@example.com", "Europe/Amsterdam")]:  # fmt: skip
        args = ["subscribers", "add", address, "--config", str(path), "--lang", "en"]
        assert runner.invoke(main, [*args, "--audience", "cost", "--timezone", zone]).exit_code == 0

    issue_for_every_zone(path)
    assert inbox.counts() == {editor: 1}  # the test copy alone
    # Tokyo's 07:30 passes while the issue waits for the editor: nobody gets it
    run_at(path, TOKYO_DUE + timedelta(minutes=1))
    assert inbox.counts() == {editor: 1}

    approved = TOKYO_DUE + timedelta(hours=1)
    store = open_store(database_url)
    assert approve_issue(load_config(path), store, 1, approved) is not None
    store.close()
    run_at(path, approved)  # Tokyo's time is past: at once; Amsterdam's is still to come
    assert inbox.counts() == {editor: 1, "tokyo@example.com": 1}
    run_at(path, datetime(2026, 3, 29, 5, 31, tzinfo=UTC))
    run_at(path, datetime(2026, 3, 29, 12, 0, tzinfo=UTC))
    assert inbox.counts() == {editor: 1, "tokyo@example.com": 1, "amsterdam@example.com": 1}


def test_an_issue_approved_on_the_command_line_goes_out_at_each_readers_time(
    tmp_path: Path, database_url: str, smtp_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``send --approve`` before anyone's 07:30 sends nobody at once: the deliveries wait for
    their zones, and the next start of the schedule sets the release for the first."""
    inbox, port = smtp_server
    editor = "editor@news.example.org"
    articles = write_articles(tmp_path / "articles", 2, newest=date(2026, 3, 27))
    job = ["[[schedule.digests]]", 'name = "sunday"', 'day_of_week = "sun"', "hour = 7",
           "minute = 30", "local_time = true"]  # fmt: skip
    email = ["approval = true", f'preview_to = "{editor}"']
    path = write_config(tmp_path, database_url, port, articles, email=email, rest=job)
    runner = CliRunner()
    for address, zone in [("tokyo@example.com", "Asia/Tokyo"),
                          ("amsterdam@example.com", "Europe/Amsterdam")]:  # fmt: skip
        args = ["subscribers", "add", address, "--config", str(path), "--lang", "en"]
        assert runner.invoke(main, [*args, "--audience", "cost", "--timezone", zone]).exit_code == 0
    issue_for_every_zone(path)
    assert inbox.counts() == {editor: 1}  # the test copy alone

    approved = TOKYO_DUE - timedelta(hours=1)
    monkeypatch.setattr("syndicate.cli.send.wall_clock", lambda: approved)
    result = runner.invoke(main, ["send", "--config", str(path), "--approve", "1"])
    assert result.exit_code == 0, result.output
    assert "issue 1 (en-cost) approved" in result.stderr
    assert "2 delivery(ies) wait for their readers' local time" in result.stderr
    assert inbox.counts() == {editor: 1}  # nobody's time has come
    config = load_config(path)
    planned = Scheduler(config, default_jobs(config), clock=lambda: approved).planned()
    assert [p.next_run for p in planned if p.id == RELEASE_JOB] == [TOKYO_DUE]

    assert run_at(path, TOKYO_DUE + timedelta(minutes=1))
    assert inbox.counts() == {editor: 1, "tokyo@example.com": 1}
    assert run_at(path, datetime(2026, 3, 29, 5, 31, tzinfo=UTC))
    assert inbox.counts() == {editor: 1, "tokyo@example.com": 1, "amsterdam@example.com": 1}
