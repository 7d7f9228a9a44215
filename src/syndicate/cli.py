"""The command line: the only module that prints, picks exit codes and reads the real clock.

Each command parses its options, calls one pipeline function and reports what it did.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .config import Config, DigestJob, load_config
from .errors import SyndicateError
from .model import ArticleSet, Severity
from .reader import read_articles

if TYPE_CHECKING:
    from .scheduler import Jobs, Report, Scheduler


def _fail(exc: SyndicateError) -> None:
    click.echo(f"syndicate: {exc}", err=True)
    sys.exit(exc.exit_code)


def with_config(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config`` (and ``--debug``) to a command and hand it a loaded Config."""

    @click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="Config file (default: $SYNDICATE_CONFIG, else ./config.toml, else built-ins).",
    )
    @click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
    @functools.wraps(command)
    def wrapper(config_path: Path | None, debug: bool, **kwargs: Any) -> Any:
        try:
            return command(load_config(config_path), **kwargs)
        except SyndicateError as exc:
            if debug:
                raise
            _fail(exc)

    return wrapper


articles_option = click.option(
    "--articles",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of article files (default: site.articles from the config).",
)


def load_articles(config: Config, articles: Path | None, *, bodies: bool = True) -> ArticleSet:
    """Read the article set named on the command line, else the configured one."""
    folder = articles if articles is not None else config.path(config.site.articles)
    return read_articles(folder, config.profiles, bodies=bodies)


def print_problems(articles: ArticleSet) -> None:
    for problem in articles.problems:
        click.echo(str(problem), err=True)


@click.group()
@click.version_option(package_name="syndicate")
def main() -> None:
    """Multilingual Atom/RSS feeds and audience newsletters from plain-text articles."""


@main.command()
@with_config
@articles_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
def check(config: Config, articles: Path | None, as_json: bool) -> None:
    """Read the article set and report what was found and every problem."""
    found = load_articles(config, articles)
    if as_json:
        click.echo(json.dumps(check_report(found), ensure_ascii=False, indent=2))
    else:
        print_summary(found, config)
    sys.exit(1 if found.has_errors else 0)


def check_report(found: ArticleSet) -> dict[str, Any]:
    """The ``check --json`` contract: one document, articles then problems."""
    return {
        "articles": [
            {
                "file": a.source,
                "lang": a.lang,
                "slug": a.slug,
                "title": a.title,
                "updated": a.updated.isoformat(),
                "summary": a.summary,
                "audiences": {t.audience: list(t.bullets) for t in a.takeaways},
                "references": [{"n": r.number, "text": r.text, "url": r.url} for r in a.references],
                "alt_slugs": list(a.seo.alt_slugs),
            }
            for a in sorted(found, key=lambda a: (a.slug, a.lang))
        ],
        "problems": [
            {"file": p.file, "line": p.line, "severity": str(p.severity), "message": p.message}
            for p in found.problems
        ],
    }


def print_summary(found: ArticleSet, config: Config) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(found)} article(s)")
    for column in ("lang", "slug", "title", "updated", "bullets per audience", "refs"):
        table.add_column(column)
    for a in sorted(found, key=lambda a: (a.slug, a.lang)):
        bullets = " ".join(f"{t.audience}:{len(t.bullets)}" for t in a.takeaways) or "-"
        table.add_row(
            a.lang, a.slug, a.title, a.updated.isoformat(), bullets, str(len(a.references))
        )
    console = Console(soft_wrap=True)
    console.print(table, markup=False)
    errors = sum(p.severity is Severity.ERROR for p in found.problems)
    warnings = len(found.problems) - errors
    print_problems(found)
    click.echo(f"{errors} error(s), {warnings} warning(s)", err=True)


@main.command()
@with_config
@articles_option
@click.option("--once", is_flag=True, help="Do what is due now and exit (for cron and timers).")
@click.option("--standby", is_flag=True, help="Wait while another scheduler acts, then take over.")
@click.option("--log-json", is_flag=True, help="Log one JSON object per line.")
def run(config: Config, articles: Path | None, once: bool, standby: bool, log_json: bool) -> None:
    """The publishing job: rebuild feeds and send digests on the configured schedule."""
    from .scheduler import Scheduler

    configure_logging(log_json)
    if articles is not None:
        config = config.model_copy(
            update={"site": config.site.model_copy(update={"articles": articles})}
        )
    if once:
        found = load_articles(config, articles)
        print_summary(found, config)
        sys.exit(0 if Scheduler(config, default_jobs(config)).run_once() else 1)
    serve(Scheduler(config, default_jobs(config)), standby=standby)


def serve(scheduler: Scheduler, *, standby: bool = False, poll_seconds: float = 10.0) -> None:
    """Act as the scheduler until SIGTERM or SIGINT, then exit 0 within the stop bound
    (1 if the lock was lost, so that the service manager restarts the process)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: scheduler.request_stop())
    scheduler.run(standby=standby, poll_seconds=poll_seconds)
    status = 1 if scheduler.lost_lock else 0  # lost lock: let the service manager restart us
    if scheduler.interrupted:
        # A job thread is still busy and the interpreter would wait for it. Its send is
        # idempotent and resumes at the next start, so leave now, within the bound.
        logging.shutdown()
        os._exit(status)
    sys.exit(status)


@main.command()
@with_config
def schedule(config: Config) -> None:
    """List the scheduled jobs and their next run times in the site's time zone."""
    from .scheduler import Scheduler

    rows = Scheduler(config, default_jobs(config)).planned()
    width = max(len(row.id) for row in rows)
    click.echo(f"{'job':{width}}  {'next run (' + config.site.timezone + ')':28}  trigger")
    for row in rows:
        when = row.next_run.strftime("%a %Y-%m-%d %H:%M %Z") if row.next_run else "-"
        note = f"  ({row.note})" if row.note else ""
        click.echo(f"{row.id:{width}}  {when:28}  {row.trigger}{note}")


def default_jobs(config: Config) -> Jobs:
    """What the schedule triggers: the pipeline's feed rebuild and digest send.

    The one place the scheduler is joined to the pipeline; the scheduler itself only knows
    the ``Jobs`` interface.
    """
    from .scheduler import Jobs, Report

    def build_feeds(now: datetime) -> Report:
        from . import pipeline

        return _report(pipeline.build_feeds(config, now))

    def send_digest(job: DigestJob, now: datetime) -> Report:
        from . import pipeline
        from .deliver import mailer_for
        from .store import open_store

        store = open_store(config.database_url)
        try:
            result = pipeline.send_digests(
                config,
                now,
                mailer=mailer_for(config),
                store=store,
                langs=job.languages or None,
                audiences=job.audiences or None,
            )
        finally:
            store.close()
        report = _report(result)
        if not any(report.counts.values()) and report.reason is None:
            langs = ", ".join(job.languages) or "all languages"
            audiences = ", ".join(job.audiences) or "all audiences"
            return Report(report.counts, f"no new content for {langs} / {audiences}")
        return report

    return Jobs(build_feeds=build_feeds, send_digest=send_digest)


def _report(result: object) -> Report:
    """A pipeline result as log counts: a mapping of ints, or a dataclass's int fields."""
    from .scheduler import Report

    if isinstance(result, Report):
        return result
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        values = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    elif isinstance(result, Mapping):
        values = dict(result)
    else:
        values = {"items": result} if isinstance(result, int) else {}
    counts = {
        key: value if isinstance(value, int) else len(value)
        for key, value in values.items()
        if isinstance(value, int | list | tuple | set | dict) and not isinstance(value, bool)
    }
    reason = getattr(result, "reason", None)
    return Report(counts, reason if isinstance(reason, str) else None)


class JsonLines(logging.Formatter):
    """One JSON object per record; a run's structured fields become top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        data.update(getattr(record, "fields", None) or {"message": record.getMessage()})
        if record.exc_info:
            data["traceback"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def configure_logging(json_lines: bool) -> None:
    """Log to stderr: plain lines for people, ``--log-json`` for machines."""
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handler.setFormatter(JsonLines() if json_lines else text)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("apscheduler.executors").setLevel(logging.ERROR)  # our run lines say it


if __name__ == "__main__":
    main()
