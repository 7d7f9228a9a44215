"""``run``, ``schedule`` and ``worker``: the publishing job, its plan, and the senders of a
send spread over machines."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import click

from ..clock import wall_clock
from ..errors import Exit, UsageError
from ..skeleton import in_the_way
from .logs import logging_to_stderr
from .shared import articles_option, options, with_articles, with_config
from .signals import stopping_on_signals

if TYPE_CHECKING:
    from ..config import Config
    from ..schedule.scheduler import Scheduler

log = logging.getLogger("syndicate")


@click.command()
@with_config
@articles_option
@click.option("--once", is_flag=True, help="Do what is due now and exit (for cron and timers).")
@click.option("--standby", is_flag=True, help="Wait while another scheduler acts, then take over.")
@click.option("--log-json", is_flag=True, help="Write every line as one JSON object, on stderr.")
def run(config: Config, articles: Path | None, once: bool, standby: bool, log_json: bool) -> None:
    """The publishing job: rebuild feeds and send digests on the configured schedule."""
    from ..reader import scan
    from ..schedule.jobs import default_jobs, once_steps, preview_folder
    from ..schedule.scheduler import Scheduler

    options().log_json = log_json
    config = with_articles(config, articles)
    folder = config.path(config.site.articles)
    # Before the scheduler makes its state folder and database: a folder that has nothing to
    # publish is most likely not a site (yet).
    if not (folder.is_dir() and scan(folder)):
        where = "no article folder" if not folder.is_dir() else "no articles in"
        # The hint names init only where init would start a site (it never changes one).
        init = "to start a site here: syndicate init"
        hint = "put article files in it" if in_the_way(Path(".")) else init
        raise UsageError(f"{where} {folder}: nothing to publish ({hint})")
    stop = threading.Event()  # set by SIGTERM/SIGINT: a send in progress drains
    jobs = default_jobs(config, stop)
    scheduler = Scheduler(config, jobs, clock=wall_clock)
    scheduler.debug = options().debug
    with logging_to_stderr(log_json):
        if not once:
            # does not return: it exits the process
            run_scheduler(scheduler, standby=standby, stop=stop)
        # The lock is taken before any of this; feeds, previews and sends are separate steps.
        previews = preview_folder(config)
        # a send cut short by the stop resumes at the next start, as under `run`
        with stopping_on_signals(stop, config.smtp.timeout, also=scheduler.request_stop):
            ok = scheduler.run_once(once_steps(config, jobs))
        outcome = "ok" if ok else "partial"
        failed = f"; failed: {', '.join(scheduler.failed)}" if scheduler.failed else ""
        feeds_out = config.path(config.feeds.out)
        log.info(
            "run --once %s%s (feeds in %s, previews in %s)",
            outcome,
            failed,
            feeds_out,
            previews,
            extra={
                "fields": {
                    "run": "once",
                    "outcome": outcome,
                    "failed": scheduler.failed,
                    "feeds": str(feeds_out),
                    "previews": str(previews),
                }
            },
        )
    sys.exit(Exit.OK if ok else Exit.FAILED)


def run_scheduler(
    scheduler: Scheduler,
    *,
    standby: bool = False,
    poll_seconds: float = 10.0,
    stop: threading.Event | None = None,
) -> None:
    """Act as the scheduler until SIGTERM or SIGINT, then exit 0 within the stop bound
    (1 if the lock was lost, so that the service manager restarts the process). ``stop`` is
    set too, so that a send in progress takes no new delivery and drains."""

    def request_stop(*_: Any) -> None:
        if stop is not None and not stop.is_set():
            stop.set()
            # os.write: nothing here may wait for a lock the interrupted code holds
            os.write(2, b"stopping: no new runs; a send takes no new delivery and drains\n")
        scheduler.request_stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    scheduler.run(standby=standby, poll_seconds=poll_seconds)
    status = 1 if scheduler.lost_lock else 0  # lost lock: let the service manager restart us
    if scheduler.interrupted:
        # A job thread is still busy and the interpreter would wait for it. Its send is
        # idempotent and resumes at the next start, so leave now, within the bound.
        logging.shutdown()
        os._exit(status)
    sys.exit(status)


@click.command()
@with_config
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
def schedule(config: Config, as_json: bool) -> None:
    """List the scheduled jobs and their next run times in the site's time zone."""
    from ..schedule.jobs import default_jobs
    from ..schedule.scheduler import Scheduler

    rows = Scheduler(config, default_jobs(config), clock=wall_clock).planned()
    zone = ZoneInfo(config.site.timezone)
    if as_json:
        jobs = [
            {
                "job": row.id,
                "trigger": row.trigger,
                "next_run": row.next_run.isoformat() if row.next_run else None,
                "note": row.note or None,
                "owed": [
                    {"due": run.due_at.astimezone(zone).isoformat(), "reason": run.reason}
                    for run in row.owed
                ],
            }
            for row in rows
        ]
        document = {"timezone": config.site.timezone, "jobs": jobs}
        click.echo(json.dumps(document, ensure_ascii=False, indent=2))
        return
    width = max(len(row.id) for row in rows)
    click.echo(f"{'job':{width}}  {'next run (' + config.site.timezone + ')':28}  trigger")
    for row in rows:
        when = row.next_run.strftime("%a %Y-%m-%d %H:%M %Z") if row.next_run else "-"
        note = f"  ({row.note})" if row.note else ""
        click.echo(f"{row.id:{width}}  {when:28}  {row.trigger}{note}")


@click.command()
@with_config
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Batches in progress at once in this process: the next is set up while one is sent,"
    " by the process's smtp.pool_size senders and connections.",
)
@click.option("--log-json", is_flag=True, help="Write every line as one JSON object, on stderr.")
def worker(config: Config, concurrency: int, log_json: bool) -> None:
    """Send the batches that `send` planned, with send.engine = "procrastinate": run one per
    core on each sender machine, until SIGTERM. It logs its start, each batch, the relay's
    slow-downs and its stop, as `run` does."""
    options().log_json = log_json
    if config.send.engine != "procrastinate":
        raise UsageError('worker needs send.engine = "procrastinate" in the config')
    try:
        from ..sending.scale import run_worker
    except ImportError as exc:
        extra = "pip install 'syndicate[scale]'"
        raise UsageError(f"worker needs the scale extra: {extra} ({exc})") from None
    with logging_to_stderr(log_json):
        run_worker(config, concurrency)
