"""The command line: the only module that prints, picks exit codes and reads the real clock.

Each command parses its options, calls one pipeline function and reports what it did.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import mailbox
import os
import signal
import smtplib
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import click

from .config import Config, DigestJob, load_config
from .errors import SyndicateError
from .model import ArticleSet, Severity
from .pipeline import FeedReport, build_feeds, write_digest, write_previews
from .reader import read_articles
from .render import catalog_problems

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
    found = ArticleSet(found.articles, found.problems + tuple(catalog_problems(config)))
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

    if articles is not None:
        config = config.model_copy(
            update={"site": config.site.model_copy(update={"articles": articles})}
        )
    scheduler = Scheduler(config, default_jobs(config))
    with logging_to_stderr(log_json):
        if not once:
            run_scheduler(scheduler, standby=standby)  # does not return: it exits the process
        found = load_articles(config, articles)
        print_summary(found, config)
        ok = scheduler.run_once()  # the feed rebuild and the digests now due, under the lock
        click.echo(f"feeds in {config.path(config.feeds.out)}", err=True)
        previews = config.path(config.email.outbox) / "preview"
        written = write_previews(config, found, previews, now=datetime.now(UTC))
        click.echo(f"{len(written)} digest preview file(s) in {previews}", err=True)
    sys.exit(0 if ok else 1)


def run_scheduler(
    scheduler: Scheduler, *, standby: bool = False, poll_seconds: float = 10.0
) -> None:
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

    def rebuild_feeds(now: datetime) -> Report:
        report = build_feeds(config, now=now)
        counts = {
            "entries": sum(report.entries.values()),
            "written": len(report.written),
            "unchanged": len(report.unchanged),
            "removed": len(report.removed),
            "problems": len(report.problems),
        }
        return Report(counts, "no input changed since the last build" if report.skipped else None)

    def send_digest(job: DigestJob, now: datetime) -> Report:
        from . import pipeline  # send_digests and open_mailer come with the delivery stage
        from .store import open_store

        store = open_store(config.database_url)
        try:
            result = pipeline.send_digests(
                config,
                now,
                mailer=pipeline.open_mailer(config),
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

    return Jobs(build_feeds=rebuild_feeds, send_digest=send_digest)


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


@contextlib.contextmanager
def logging_to_stderr(json_lines: bool) -> Iterator[None]:
    """Log to stderr while the block runs: plain lines for people, ``--log-json`` for
    machines. The previous logging setup comes back afterwards."""
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handler.setFormatter(JsonLines() if json_lines else text)
    levels = {
        "": logging.INFO,
        "alembic": logging.WARNING,
        "apscheduler": logging.WARNING,
        "apscheduler.executors": logging.ERROR,  # its "missed" warnings repeat our run lines
    }
    loggers = {logging.getLogger(name): level for name, level in levels.items()}
    root = logging.getLogger()
    saved_handlers, saved_levels = root.handlers[:], {lg: lg.level for lg in loggers}
    root.handlers[:] = [handler]
    for logger, level in loggers.items():
        logger.setLevel(level)
    try:
        yield
    finally:
        root.handlers[:] = saved_handlers
        for logger, level in saved_levels.items():
            logger.setLevel(level)


@main.command()
@with_config
@articles_option
@click.option("--lang", required=True, help="Language of the digest, e.g. nl.")
@click.option(
    "--audience", "audiences", multiple=True, required=True, help="Audience id; repeatable."
)
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    help="Only articles updated on or after this date (YYYY-MM-DD).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Output folder (default: <email.outbox>/preview).",
)
def digest(
    config: Config,
    articles: Path | None,
    lang: str,
    audiences: tuple[str, ...],
    since: datetime | None,
    out: Path | None,
) -> None:
    """Render one digest by hand: <lang>-<audiences>.html, .txt and .eml (to email.preview_to)."""
    if lang not in config.site.languages:
        raise click.BadParameter(
            f"{lang!r} is not published (site.languages: {', '.join(config.site.languages)})",
            param_hint="--lang",
        )
    for audience in audiences:
        if audience not in config.audiences:
            raise click.BadParameter(
                f"unknown audience {audience!r} (known: {', '.join(config.audiences)})",
                param_hint="--audience",
            )
    found = load_articles(config, articles)
    print_problems(found)
    out = out if out is not None else config.path(config.email.outbox) / "preview"
    day = since.date() if since else None
    paths = write_digest(config, found, lang, audiences, out, now=datetime.now(UTC), since=day)
    if not paths:
        window = f" since {day.isoformat()}" if day else ""
        click.echo(f"nothing new for {lang} / {'+'.join(audiences)}{window}: no digest written")
    for path in paths:
        click.echo(str(path))


@main.command()
@with_config
@articles_option
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder the feeds are written to (default: feeds.out from the config).",
)
def build(config: Config, articles: Path | None, out: Path | None) -> None:
    """Build the Atom, RSS and JSON feeds of every language (files that would not change are
    left alone)."""
    report = build_feeds(config, articles, out, now=datetime.now(UTC))
    print_feed_report(report)
    sys.exit(1 if report.has_errors else 0)


def print_feed_report(report: FeedReport, *, problems: bool = True) -> None:
    if problems:
        for problem in report.problems:
            click.echo(str(problem), err=True)
    counts = ", ".join(f"{lang}: {n}" for lang, n in report.entries.items()) or "no articles"
    if report.skipped:
        click.echo(f"feeds in {report.out} are up to date ({counts})")
    else:
        click.echo(
            f"feeds in {report.out} ({counts}): {len(report.written)} written, "
            f"{len(report.unchanged)} unchanged, {len(report.removed)} removed"
        )
    if report.next_due:
        click.echo(f"articles dated later are held back; the next is due {report.next_due}")


def mail_transport(config: Config) -> Callable[[EmailMessage], None]:
    """One message at a time: to smtp.url when set, else into the outbox's Maildir."""
    if not config.smtp.url:
        config.path(config.email.outbox).mkdir(parents=True, exist_ok=True)
        maildir = mailbox.Maildir(config.path(config.email.outbox) / "maildir")

        def keep(message: EmailMessage) -> None:
            maildir.add(message)

        return keep
    url = urlsplit(config.smtp.url)
    user = unquote(url.username) if url.username else config.smtp.username
    secret = config.smtp.password.get_secret_value() if config.smtp.password else None
    password = unquote(url.password) if url.password else secret

    def send(message: EmailMessage) -> None:
        kind = smtplib.SMTP_SSL if url.scheme == "smtps" else smtplib.SMTP
        default_port = 465 if url.scheme == "smtps" else 587 if "starttls" in url.scheme else 25
        with kind(url.hostname or "localhost", url.port or default_port, timeout=30) as smtp:
            if url.scheme == "smtp+starttls":
                smtp.starttls()
            if user and password:
                smtp.login(user, password)
            smtp.send_message(message)

    return send


@main.command()
@with_config
@articles_option
@click.option("--host", default=None, help="Address to listen on (default: web.host).")
@click.option("--port", type=int, default=None, help="Port to listen on (default: web.port).")
def serve(config: Config, articles: Path | None, host: str | None, port: int | None) -> None:
    """Serve the feeds, article pages and readers' subscription links over HTTP."""
    import uvicorn

    from .store import open_store
    from .tokens import secret_key
    from .web import create_app, watch_articles

    folder = articles if articles is not None else config.path(config.site.articles)
    app = create_app(
        config,
        store=open_store(config.database_url),
        mailer=mail_transport(config),
        articles=watch_articles(folder, config),
        secret=secret_key(config),
        now=lambda: datetime.now(UTC),
    )
    # No access log: its lines would carry readers' tokens and addresses.
    uvicorn.run(app, host=host or config.web.host, port=port or config.web.port, access_log=False)


if __name__ == "__main__":
    main()
