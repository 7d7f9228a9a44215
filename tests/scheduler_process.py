"""`syndicate run` in a real process, with jobs that record to a file instead of publishing.

Usage: python -m tests.scheduler_process CONFIG RECORD [--standby] [--log-json]

Each digest send writes "start <name>", then holds until the file RECORD.release exists, then
writes "done <name>", so a test can signal the process while a send is in progress.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

from syndicate.cli.logs import logging_to_stderr
from syndicate.cli.run import run_scheduler
from syndicate.clock import wall_clock
from syndicate.config import DigestJob, load_config
from syndicate.errors import SyndicateError
from syndicate.schedule.scheduler import Jobs, Report, Scheduler


def recording_jobs(record: Path) -> Jobs:
    release = record.with_name(record.name + ".release")

    def note(line: str) -> None:
        with record.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    def build_feeds(now: datetime) -> Report:
        note("feeds")
        return Report({"feeds": 3})

    def send_digest(job: DigestJob, now: datetime) -> Report:
        note(f"start {job.name}")
        while not release.exists():
            time.sleep(0.02)
        note(f"done {job.name}")
        return Report({"sent": 1})

    return Jobs(build_feeds=build_feeds, send_digest=send_digest)


def main(argv: list[str]) -> None:
    config_path, record = argv[0], Path(argv[1])
    scheduler = Scheduler(load_config(config_path), recording_jobs(record), clock=wall_clock)
    try:
        with logging_to_stderr("--log-json" in argv):
            run_scheduler(scheduler, standby="--standby" in argv, poll_seconds=0.1)
    except SyndicateError as exc:
        print(f"syndicate: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main(sys.argv[1:])
