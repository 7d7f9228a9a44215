"""The command line: the only module that prints, picks exit codes and reads the real clock.

Each command parses its options, calls one function (``build``, ``send``, ``previews``,
``schedule``, ...) and reports what it did. Every error an operator can act on (a
SyndicateError, an OSError, a lost state database) is one line and an exit status from
``errors.Exit``; the traceback only with ``--debug``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import click

from .clock import wall_clock
from .errors import Exit, SyndicateError, UsageError, describe
from .model import ArticleSet, Diagnostic, Severity
from .skeleton import in_the_way

# Each command imports what it needs when it runs: `syndicate --help`, and every command,
# would otherwise wait for the database, template, feed and language libraries of all of them.
if TYPE_CHECKING:
    from .build import FeedReport
    from .config import Config
    from .schedule.scheduler import Scheduler
    from .send import SendReport

log = logging.getLogger("syndicate")


@dataclass
class Options:
    """What the options every command shares say; set before the command (``syndicate
    --config x.toml build``) or after it (``syndicate build --config x.toml``)."""

    config: Path | None = None
    debug: bool = False
    log_json: bool = False
    """Errors, too, are written as JSON lines (``run --log-json``)."""


def options() -> Options:
    return click.get_current_context().ensure_object(Options)


config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Config file (default: $SYNDICATE_CONFIG, else ./config.toml, else built-ins).",
)
debug_option = click.option(
    "--debug", is_flag=True, help="Show tracebacks instead of one-line errors."
)


def report_error(message: str) -> None:
    """One error line on stderr: ``syndicate: ...``, or a JSON object under ``--log-json``."""
    if options().log_json:
        record = logging.makeLogRecord(
            {"name": "syndicate", "levelname": "ERROR", "levelno": logging.ERROR, "msg": message}
        )
        click.echo(JsonLines().format(record), err=True)
    else:
        click.echo(f"syndicate: {message}", err=True)


@contextlib.contextmanager
def operator_errors() -> Iterator[None]:
    """Turn what an operator can act on into one line and its exit status: a SyndicateError
    (its own status), an OSError (a full disk, a read-only folder: 1). With ``--debug``, or
    for anything else, the traceback."""
    try:
        yield
    except (SyndicateError, OSError) as exc:
        if options().debug:
            raise
        if isinstance(exc, SyndicateError):
            message, status = str(exc), exc.exit_code
        else:
            message, status = describe(exc, ""), Exit.FAILED
        report_error(message)
        sys.exit(status)


def with_config(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config`` (and ``--debug``) to a command and hand it a loaded Config."""

    @config_option
    @debug_option
    @functools.wraps(command)
    def wrapper(config_path: Path | None, debug: bool, **kwargs: Any) -> Any:
        shared = options()
        shared.config = config_path if config_path is not None else shared.config
        shared.debug = shared.debug or debug
        with operator_errors():
            from .config import load_config
            from .state import database_errors

            gc.freeze()  # what these imports made, as in main()
            config = load_config(shared.config)
            with database_errors(config.database_url):
                return command(config, **kwargs)

    return wrapper


articles_option = click.option(
    "--articles",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of article files (default: site.articles from the config).",
)


def with_articles(config: Config, articles: Path | None) -> Config:
    """The config with ``--articles`` in place of ``site.articles``, for the functions
    that read the configured folder."""
    if articles is None:
        return config
    return config.model_copy(update={"site": config.site.model_copy(update={"articles": articles})})


def article_folder(config: Config, articles: Path | None = None) -> Path:
    """The article folder named on the command line, else the configured one; a folder that
    does not exist is an error, not an empty set (that would publish nothing)."""
    folder = articles if articles is not None else config.path(config.site.articles)
    if not folder.is_dir():
        raise UsageError(f"{folder}: article folder not found")
    return folder


def load_articles(config: Config, articles: Path | None, *, bodies: bool = True) -> ArticleSet:
    """Read the article set named on the command line, else the configured one."""
    from .reader import read_articles

    folder = article_folder(config, articles)
    limit = config.site.max_article_bytes
    return read_articles(folder, config.profiles, bodies=bodies, max_bytes=limit)


def check_known(
    config: Config, *, langs: Iterable[str] = (), audiences: Iterable[str] = ()
) -> None:
    """Refuse a language that is not published or an audience nobody defines, naming the
    known ones (a typo would otherwise select nothing, and say nothing)."""
    for lang in langs:
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


def print_problems(articles: ArticleSet) -> None:
    for problem in articles.problems:
        click.echo(str(problem), err=True)


def summary_line(found: ArticleSet) -> str:
    """The article set in one line: "3 article(s) (de 1, en 1, nl 1), 0 error(s), 1 warning(s)"."""
    languages = ", ".join(f"{lang} {len(found.in_language(lang))}" for lang in found.languages)
    errors = sum(p.severity is Severity.ERROR for p in found.problems)
    warnings = len(found.problems) - errors
    counts = f" ({languages})" if languages else ""
    return f"{len(found)} article(s){counts}, {errors} error(s), {warnings} warning(s)"


@contextlib.contextmanager
def owned_process() -> Iterator[None]:
    """What the commands that own their process and read a whole article set at once
    (``build``, ``check``, ``digest``) choose for it while they read. No cycle collection:
    articles hold no reference cycles, yet the collector would walk every object made so far,
    again and again (a fifth of the time). Reader workers forked: a fork starts one at once,
    with everything this process has loaded; only a process with no other threads may fork
    (under a test runner it has some). What the command imported before it is frozen, as in
    main()."""
    import multiprocessing

    collecting = gc.isenabled()
    method = multiprocessing.get_start_method(allow_none=True)
    gc.freeze()
    gc.disable()
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        multiprocessing.set_start_method("fork", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(method, force=True)
        if collecting:
            gc.enable()


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit status: 0 done, 1 failed or partly done, 2 bad command line or configuration, "
    "3 another scheduler holds the lock, 4 a port or resource in use.",
)
@click.version_option(package_name="syndicate")
@config_option
@debug_option
@click.pass_context
def main(ctx: click.Context, config_path: Path | None, debug: bool) -> None:
    """Multilingual Atom/RSS feeds and audience newsletters from plain-text articles."""
    ctx.obj = Options(config_path, debug)
    # What the imports made lives as long as the process: the cycle collector need not walk
    # it again, and at exit, walking it cost a build of 30,000 files about 0.2 s. The commands
    # import their libraries when they run, and freeze again (with_config, owned_process).
    gc.freeze()


@main.command()
@with_config
@articles_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("--summary", is_flag=True, help="One line of counts instead of the table.")
def check(config: Config, articles: Path | None, as_json: bool, summary: bool) -> None:
    """Read the article set and report what was found and every problem."""
    from .i18n import catalog_problems

    with owned_process():
        found = load_articles(config, articles)
    source = str(options().config or "config.toml")
    settings = [Diagnostic(source, None, Severity.WARNING, line) for line in config.doubtful()]
    more = (*settings, *catalog_problems(config), *private_file_problems(config))
    found = ArticleSet(found.articles, found.problems + more)
    if as_json:
        click.echo(json.dumps(check_report(found), ensure_ascii=False, indent=2))
    elif summary:
        print_problems(found)
        click.echo(summary_line(found))
    else:
        print_summary(found, config)
    sys.exit(Exit.FAILED if found.has_errors else Exit.OK)


def private_file_problems(config: Config) -> list[Diagnostic]:
    """A warning for each file holding readers, or the key of their links, that users other
    than its owner can read (a site started before these were made owner-only, or a copy),
    with the command that fixes it."""
    from .files import readable_by_others
    from .state.database import database_files

    held = {
        path: "every reader's address, consent record and the ledger"
        for path in database_files(config.database_url)
    }
    held[config.path(config.web.secret_key_file)] = "the key that signs readers' links"
    problems = []
    for path, what in held.items():
        if readable_by_others(path):
            shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
            message = f"other users can read it ({what}): chmod 600 {shown}"
            problems.append(Diagnostic(shown, None, Severity.WARNING, message))
    return problems


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
@click.option("--log-json", is_flag=True, help="Write every line as one JSON object, on stderr.")
def run(config: Config, articles: Path | None, once: bool, standby: bool, log_json: bool) -> None:
    """The publishing job: rebuild feeds and send digests on the configured schedule."""
    from .reader import scan
    from .schedule.jobs import default_jobs, once_steps, preview_folder
    from .schedule.scheduler import Scheduler

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


@main.command()
@with_config
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
def schedule(config: Config, as_json: bool) -> None:
    """List the scheduled jobs and their next run times in the site's time zone."""
    from .schedule.jobs import default_jobs
    from .schedule.scheduler import Scheduler

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
    machines; Python's warnings go the same way, so that every line is one record. The
    previous logging setup comes back afterwards."""
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handler.setFormatter(JsonLines() if json_lines else text)
    levels = {
        "": logging.INFO,
        "alembic": logging.WARNING,
        "apscheduler": logging.WARNING,
        "apscheduler.executors": logging.ERROR,  # its "missed" warnings repeat our run lines
        "procrastinate": logging.WARNING,  # a line per job and poll: a worker logs its batches
    }
    loggers = {logging.getLogger(name): level for name, level in levels.items()}
    root = logging.getLogger()
    saved_handlers, saved_levels = root.handlers[:], {lg: lg.level for lg in loggers}
    root.handlers[:] = [handler]
    for logger, level in loggers.items():
        logger.setLevel(level)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
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
    help="Articles updated on or after this date (YYYY-MM-DD) instead of what is new since "
    "the group's last issue; still capped by email.max_articles.",
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
    """Render one digest by hand: <lang>-<audiences>.html, .txt and .eml (to email.preview_to).

    Without --since it holds what the group's next issue would: what is new since its last one.
    """
    from .previews import write_digest
    from .state import open_store

    check_known(config, langs=[lang], audiences=audiences)
    with owned_process():
        found = load_articles(config, articles, bodies=False)  # a digest shows no body
    print_problems(found)
    out = out if out is not None else config.path(config.email.outbox) / "preview"

    day = since.date() if since else None
    store = open_store(config.database_url)
    try:
        paths = write_digest(
            config, found, lang, audiences, out, now=wall_clock(), since=day, store=store
        )
    finally:
        store.close()
    if not paths:
        window = f"since {day.isoformat()}" if day else "in its window (see --since)"
        click.echo(f"nothing new for {lang} / {'+'.join(audiences)} {window}: no digest written")
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
    from .build import build_feeds
    from .websub import HubNotifier

    with owned_process():
        report = build_feeds(config, articles, out, now=wall_clock(), notify=HubNotifier())
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
    for hub, told in report.announced.items():
        if told:
            click.echo(f"WebSub hub {hub} told of {told} changed feed(s)")
    for hub, topics in report.unannounced.items():
        click.echo(f"WebSub hub {hub}: {len(topics)} feed(s) not announced, tried again next build")


@main.command()
@with_config
@articles_option
@click.option("--host", default=None, help="Address to listen on (default: web.host).")
@click.option("--port", type=int, default=None, help="Port to listen on (default: web.port).")
@click.option(
    "--dev",
    is_flag=True,
    help="Link to this server: its address is the base URL of pages, mails and feeds "
    "(built into a temporary folder).",
)
def serve(
    config: Config, articles: Path | None, host: str | None, port: int | None, dev: bool
) -> None:
    """Serve the feeds, article pages and readers' subscription links over HTTP."""
    import tempfile

    from .build import build_feeds
    from .send import message_sender
    from .state import open_store
    from .tokens import secret_key
    from .web import base_url_elsewhere, bind, create_app, listening_url, serve_app, watch_articles

    host = host or config.web.host
    port = port or config.web.port
    folder = article_folder(config, articles)
    listener = bind(host, port)  # a port in use says so, and only that, before any work
    with tempfile.TemporaryDirectory(prefix="syndicate-dev-") as scratch:
        if dev:
            # The feeds on disk link to site.base_url: the ones served here are built anew.
            site = config.site.model_copy(update={"base_url": listening_url(host, port)})
            # No hub either: none could fetch feeds at this address, nor is any told of them.
            feeds = config.feeds.model_copy(update={"out": Path(scratch), "hub": []})
            config = config.model_copy(update={"site": site, "feeds": feeds})
            print_feed_report(build_feeds(config, folder, now=wall_clock()))
            click.echo(f"serving {site.base_url}/ (base URL of every link)", err=True)
        elif warning := base_url_elsewhere(config.site.base_url, host, port):
            click.echo(f"syndicate: warning: {warning}", err=True)
        app = create_app(
            config,
            store=open_store(config.database_url),
            send_message=message_sender(config),
            articles=watch_articles(folder, config),
            secret=secret_key(config),
            now=wall_clock,
        )
        serve_app(app, host, port, listener=listener)


@main.command()
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), default=".")
def init(folder: Path) -> None:
    """Start a site in FOLDER (default: here): a commented config.toml and an example article."""
    from .skeleton import create_site

    with operator_errors():
        written = create_site(folder)
    for path in written:
        click.echo(f"wrote {path}")
    enter = f"  cd {folder}\n" if folder != Path(".") else ""
    click.echo(
        f"\nNext:\n{enter}"
        "  edit config.toml: site.title, site.description, site.base_url, site.languages\n"
        "  put your articles in articles/ (example.txt shows the format); syndicate check\n"
        "  syndicate run --once     build the feeds and render the digests once\n"
        "  syndicate serve --dev    see the site and its feeds in a browser"
    )


# -- send ----------------------------------------------------------------------------------------


class _Bar:
    """The delivery progress bar, on stderr."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.task = progress.add_task("sending", total=None)

    def start(self, total: int) -> None:
        self.progress.update(self.task, total=total)

    def advance(self, status: str) -> None:
        self.progress.advance(self.task)


@contextlib.contextmanager
def stopping_on_signals(
    stop: threading.Event, timeout: float, also: Callable[[], None] | None = None
) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` (and call ``also``): a send takes no new delivery and
    lets the messages on the wire finish. A second signal acts as it did before. Outside the
    main thread (where no handler can be set) nothing changes."""
    signals = (signal.SIGTERM, signal.SIGINT)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {signum: signal.getsignal(signum) for signum in signals}

    def handler(signum: int, _frame: Any) -> None:
        stop.set()
        if also is not None:
            also()
        for each in signals:
            signal.signal(each, saved[each])
        click.echo(
            f"stopping: no new deliveries; the messages on the wire finish (at most {timeout:g} s)",
            err=True,
        )

    for signum in signals:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum in signals:
            signal.signal(signum, saved[signum])


def send_now(
    config: Config,
    now: datetime,
    *,
    langs: tuple[str, ...] = (),
    audiences: tuple[str, ...] = (),
    since: date | None = None,
    dry_run: bool = False,
    stop: threading.Event | None = None,
    issue: bool = True,
) -> int:
    """Issue and deliver the due digests with a progress bar and a summary; the exit status:
    1 when the run was partial (a group refused, deliveries failed, uncertain or left).

    SIGTERM or SIGINT stops it cleanly (exit 0 unless a group was refused or a delivery
    failed): what is on the wire finishes and is recorded, the rest stays for the next run.
    A caller that passes ``stop`` has set the signals to it already.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from .send import send_due

    signals: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if stop is None:
        stop = threading.Event()
        signals = stopping_on_signals(stop, config.smtp.timeout)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    console = Console(stderr=True)
    bar = Progress(*columns, console=console, transient=True, disable=not console.is_terminal)
    with signals, bar as progress:
        report = send_due(
            config,
            now,
            langs=langs or None,
            audiences=audiences or None,
            since=since,
            dry_run=dry_run,
            progress=_Bar(progress),
            stop=stop,
            issue=issue,
        )
    return print_send_report(report, dry_run=dry_run)


def print_send_report(report: SendReport, *, dry_run: bool) -> int:
    """What a send did, on stderr; the exit status: 1 when the run was partial (a group
    refused, deliveries failed, uncertain or left), 0 after a clean stop."""
    for problem in report.problems:
        click.echo(str(problem), err=True)
    if report.samples:
        click.echo(
            f"{report.samples} sample reader(s) (added by the first `syndicate run --once`) are "
            "not sent to through an SMTP server; `syndicate subscribers remove --samples` "
            "removes them",
            err=True,
        )
    print_issued(report, dry_run=dry_run)
    for email, reply in report.failures:
        click.echo(f"{email}: {reply}", err=True)
    if dry_run:
        click.echo(f"{report.pending} delivery(ies) pending; nothing sent (dry run)", err=True)
        return Exit.FAILED if report.refused else Exit.OK
    click.echo(
        f"{'stopped: ' if report.stopped else ''}sent {report.sent:,}, failed {report.failed:,}, "
        f"uncertain {report.uncertain:,}, skipped {report.skipped:,}, "
        f"left for the next run {report.left:,}",
        err=True,
    )
    if report.waiting:
        click.echo(
            f"{report.waiting:,} delivery(ies) wait for their readers' local time "
            "(`syndicate send --status`)",
            err=True,
        )
    if report.refused:
        click.echo(
            f"partial run: {len(report.refused)} group(s) not issued, every other one was",
            err=True,
        )
    if report.uncertain:
        click.echo("uncertain deliveries are never resent blindly: see `syndicate send --status`")
    if report.refused or report.failed or report.uncertain:
        return Exit.FAILED
    # A delivery this run deferred that another run at once then sent is not left.
    return Exit.OK if report.stopped or not (report.deferred and report.left) else Exit.FAILED


class _SeveralIds(click.Command):
    """``send --approve 12 13`` as ``--approve 12 --approve 13`` (the same for ``--reject``
    and ``--resend``): click options take one value each, and ``send`` has no arguments, so a
    bare value after one of these can only be another id."""

    several = ("--approve", "--reject", "--resend")

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given: list[str] = []
        option, valued = None, False  # the last option, and whether it has its value yet
        for n, arg in enumerate(args):
            if arg == "--":
                given += args[n:]
                break
            if arg.startswith("-"):
                name = arg.split("=", 1)[0]
                option, valued = (name if name in self.several else None), "=" in arg
            elif option is not None:
                if valued:
                    given.append(option)
                valued = True
            given.append(arg)
        return super().parse_args(ctx, given)


@main.command(cls=_SeveralIds)
@with_config
@articles_option
@click.option("--lang", "langs", multiple=True, help="Only readers of this language (repeatable).")
@click.option(
    "--audience", "audiences", multiple=True, help="Only readers of this audience (repeatable)."
)
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    help="Each group's digest holds what was updated on or after this date (YYYY-MM-DD) "
    "instead of what is new since its last issue; still capped by email.max_articles.",
)
@click.option("--dry-run", is_flag=True, help="Show what would be issued; record and send nothing.")
@click.option("--status", "show_status", is_flag=True, help="List issues and uncertain deliveries.")
@click.option("--json", "as_json", is_flag=True, help="With --status: one JSON document on stdout.")
@click.option(
    "--resend",
    type=int,
    multiple=True,
    metavar="ID",
    help="Queue uncertain deliveries again, once you know they did not arrive: --resend 7 9.",
)
@click.option(
    "--resend-uncertain",
    is_flag=True,
    help="Queue every uncertain delivery again (of one issue with --issue), once you checked.",
)
@click.option("--issue", "issue_id", type=int, metavar="N", help="With --resend-uncertain.")
@click.option(
    "--approve",
    type=int,
    multiple=True,
    metavar="ISSUE",
    help="Release held issues and send them: --approve 12 13 (or --approve 12 --approve 13).",
)
@click.option("--approve-all", is_flag=True, help="Release every held issue and send them.")
@click.option(
    "--reject", type=int, multiple=True, metavar="ISSUE", help="Cancel held issues: --reject 12 13."
)
def send(
    config: Config,
    articles: Path | None,
    langs: tuple[str, ...],
    audiences: tuple[str, ...],
    since: datetime | None,
    dry_run: bool,
    show_status: bool,
    as_json: bool,
    resend: tuple[int, ...],
    resend_uncertain: bool,
    issue_id: int | None,
    approve: tuple[int, ...],
    approve_all: bool,
    reject: tuple[int, ...],
) -> None:
    """Issue the digests with new content and deliver them: each reader gets each one once."""
    from .state import open_store

    if approve or approve_all or reject:
        sys.exit(judge(config, approve, approve_all, reject, wall_clock()))

    check_known(config, langs=langs, audiences=audiences)
    if as_json and not show_status:
        raise UsageError("--json goes with --status")
    if issue_id is not None and not resend_uncertain:
        raise UsageError("--issue goes with --resend-uncertain")
    sending = not (show_status or resend or resend_uncertain)
    if sending:
        article_folder(config, articles)
    config = with_articles(config, articles)

    now = wall_clock()
    if sending:
        day = since.date() if since else None
        sys.exit(
            send_now(config, now, langs=langs, audiences=audiences, since=day, dry_run=dry_run)
        )
    store = open_store(config.database_url)
    try:
        status = 0
        if resend:
            status = requeue(store, resend, now)
        if resend_uncertain:
            lost = store.deliveries("uncertain", issue_id=issue_id)
            queued = store.resend_uncertain([d.id for d in lost], now)
            of = f" of issue {issue_id}" if issue_id is not None else ""
            click.echo(f"{queued} uncertain delivery(ies){of} queued again", err=True)
        if show_status:
            show_send_status(config, store, as_json=as_json)
    finally:
        store.close()
    sys.exit(status)


@main.command()
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
        from .scale import run_worker
    except ImportError as exc:
        extra = "pip install 'syndicate[scale]'"
        raise UsageError(f"worker needs the scale extra: {extra} ({exc})") from None
    with logging_to_stderr(log_json):
        run_worker(config, concurrency)


def judge(
    config: Config,
    approve: tuple[int, ...],
    approve_all: bool,
    reject: tuple[int, ...],
    now: datetime,
) -> int:
    """Reject and release held issues, then send what was released; one line per issue. Exit
    1 when an issue named is not held, 2 when one was held too long to be approved (it is
    expired instead); the others are still acted on."""
    from .send import ApprovalExpired, approve_issue
    from .state import open_store

    store = open_store(config.database_url)
    try:
        status: int = Exit.OK
        for issue_id in dict.fromkeys(reject):
            if store.withdraw_issue(issue_id, "rejected", "issue rejected by an editor", now):
                click.echo(f"issue {issue_id} rejected: its content may be issued again", err=True)
            else:
                click.echo(f"issue {issue_id} is not held: not rejected", err=True)
                status = max(status, Exit.FAILED)
        chosen = [i.id for i in store.held_issues()] if approve_all else list(approve)
        released = []
        for issue_id in dict.fromkeys(chosen):  # each once, in the order given
            try:
                issue = approve_issue(config, store, issue_id, now)
            except ApprovalExpired as refused:
                click.echo(str(refused), err=True)
                status = max(status, refused.exit_code)
                continue
            if issue is not None:
                click.echo(f"issue {issue_id} ({issue.key}) approved", err=True)
                released.append(issue_id)
            else:
                click.echo(f"issue {issue_id} is not held: not approved", err=True)
                status = max(status, Exit.FAILED)
    finally:
        store.close()
    if released:
        status = max(status, send_now(config, now, issue=False))
    return status


def requeue(store: Any, ids: tuple[int, ...], now: datetime) -> int:
    """Queue the given uncertain deliveries again; refuse (exit 1, nothing queued) when one is
    unknown or not uncertain."""
    found = {d.id: d.status for d in store.deliveries(ids=ids)}
    unknown = [str(i) for i in ids if i not in found]
    settled = [f"{i} ({found[i]})" for i in ids if i in found and found[i] != "uncertain"]
    if unknown or settled:
        if unknown:
            click.echo(f"no such delivery: {', '.join(unknown)}", err=True)
        if settled:
            click.echo(f"not uncertain, so not resent: {', '.join(settled)}", err=True)
        click.echo("nothing queued", err=True)
        return 1
    queued = store.resend_uncertain(ids, now)
    click.echo(f"{queued} uncertain delivery(ies) queued again", err=True)
    return 0


def show_send_status(config: Config, store: Any, *, as_json: bool) -> None:
    """``send --status``: tables, or with ``--json`` one JSON document on stdout."""
    report = send_status(store, config.site.timezone)
    if config.send.engine == "procrastinate":
        report |= engine_status(config, store)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print_send_status(report)


_STATUSES = ("held", "pending", "sending", "sent", "failed", "uncertain", "skipped")


def send_status(store: Any, site_zone: str = "", now: datetime | None = None) -> dict[str, Any]:
    """The ``send --status --json`` contract: deliveries per issue (and whether it is still
    being planned, when it finished), the uncertain ones, the held issues and the deliveries
    waiting for their readers' local time (a reader without a zone of their own is in
    ``site_zone``), and the bounce reports on record by kind."""
    counts = store.delivery_counts()
    reports = store.bounce_counts()
    issues = sorted({(issue_id, key) for issue_id, key, _ in counts})
    progress = store.issue_progress()
    return {
        "issues": [
            {
                "id": issue_id,
                "key": key,
                "deliveries": {s: counts.get((issue_id, key, s), 0) for s in _STATUSES},
                "planning": progress.get(issue_id, (False, None))[0],
                "finished": _when(progress.get(issue_id, (False, None))[1]),
            }
            for issue_id, key in issues
        ],
        "uncertain": [
            {
                "id": d.id,
                "issue": d.issue_id,
                "issue_key": d.issue_key,
                "email": d.email,
                "message_id": d.message_id,
                "since": d.updated_at.isoformat(),
                "reason": d.reply,
            }
            for d in store.deliveries("uncertain")
        ],
        "held": [
            {
                "id": issue.id,
                "key": issue.key,
                "subject": issue.subject,
                "lang": issue.lang,
                "audiences": list(issue.audiences),
                "readers": counts.get((issue.id, issue.key, "held"), 0),
                "created": issue.created_at.isoformat(),
                "changes": store.issue_changes(issue),
            }
            for issue in store.held_issues()
        ],
        "waiting": [
            {
                "issue": issue_id,
                "issue_key": key,
                "timezone": zone or site_zone,
                "not_before": when.isoformat(),
                "deliveries": n,
            }
            for issue_id, key, zone, when, n in store.waiting(now or wall_clock())
        ],
        "bounces": {kind: reports.get(kind, 0) for kind in ("permanent", "temporary", "complaint")},
    }


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def engine_status(config: Config, store: Any) -> dict[str, Any]:
    """What ``send --status`` adds with ``send.engine = "procrastinate"``: the workers alive
    and each relay's shared rate now (cut by its slow-down replies, climbing back)."""
    try:
        from .scale import workers_alive
    except ImportError as exc:
        extra = "pip install 'syndicate[scale]'"
        raise UsageError(f"the procrastinate engine needs the scale extra: {extra}") from exc

    stalled = config.send.stalled_seconds
    return {
        "workers": [
            {
                "id": w.id,
                "last_heartbeat": w.last_heartbeat.isoformat(),
                "seconds_since": round(w.silent, 1),
                "batches": w.batches,
            }
            for w in workers_alive(store, stalled)
        ],
        "relays": [
            {
                "relay": r.relay,
                "rate": r.rate,
                "current": round(r.current, 3),
                "cut_to": r.cut_rate,
                "cut_at": r.cut_at.isoformat() if r.cut_at else None,
                "back_at": r.back_at.isoformat() if r.back_at else None,
            }
            for r in store.relay_rates(config.send.recover_seconds)
        ],
    }


def print_issued(report: SendReport, *, dry_run: bool) -> None:
    """The issues a send made (or would make), held, let expire or could not render."""
    verb = "would issue" if dry_run else "issued"
    for key, readers in report.issues:
        click.echo(f"{verb} {key} to {readers} reader(s)", err=True)
    for issue_id, key in report.expired:
        click.echo(f"issue {issue_id} ({key}) expired unapproved: cancelled, not sent", err=True)
    for issue_id, key, readers, copy in report.held:
        click.echo(
            f"issue {issue_id} ({key}) held for approval, {readers} reader(s); {copy}; "
            f"`syndicate send --approve {issue_id}` sends it, `--reject {issue_id}` cancels it",
            err=True,
        )
    refused = "would not issue" if dry_run else "not issued"
    for key, readers, reason in report.refused:
        click.echo(f"{refused} {key} to {readers} reader(s): {reason}", err=True)
    for issue_id, key in report.resumed:
        click.echo(f"issue {issue_id} ({key}): the rest of its readers planned", err=True)
    for done in report.finished:
        counts = ", ".join(f"{n:,} {status}" for status, n in done.counts.items())
        click.echo(f"issue {done.id} ({done.key}) finished: {counts}", err=True)


def print_send_status(status: dict[str, Any]) -> None:
    """The status (``send_status``) as tables that fit the terminal (long cells wrap inside
    their column)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for table in _issue_tables(status["issues"]):
        console.print(table, markup=False)
    if status["uncertain"]:
        table = Table(title="uncertain: may or may not have arrived (send --resend ID to requeue)")
        table.add_column("id", justify="right")
        table.add_column("issue", justify="right")
        for column in ("email", "message-id", "since", "reason"):
            table.add_column(column, overflow="fold")
        for d in status["uncertain"]:
            table.add_row(
                str(d["id"]), str(d["issue"]), d["email"], d["message_id"], d["since"], d["reason"]
            )
        console.print(table, markup=False)
    if status["held"]:
        console.print(_held_table(status["held"]), markup=False)
    if status["waiting"]:
        console.print(_waiting_table(status["waiting"]), markup=False)
    if "workers" in status:
        _print_engine(console, status)
    reports = status["bounces"]
    if any(reports.values()):
        click.echo(
            f"bounce mail: {reports['permanent']} permanent, {reports['temporary']} temporary, "
            f"{reports['complaint']} complaint(s) (syndicate bounces list)"
        )


def _issue_tables(issues: list[dict[str, Any]]) -> list[Any]:
    """The open issues with their deliveries in each state (one still being planned marked
    so), then the finished ones."""
    from rich.table import Table

    table = Table(title="deliveries per issue")
    table.add_column("id", justify="right")
    table.add_column("issue", overflow="fold")
    for name in _STATUSES:
        table.add_column(name, justify="right")
    finished = [issue for issue in issues if issue["finished"]]
    for issue in (issue for issue in issues if not issue["finished"]):
        counts = issue["deliveries"]
        key = f"{issue['key']} (planning)" if issue["planning"] else issue["key"]
        table.add_row(str(issue["id"]), key, *(str(counts[s]) for s in _STATUSES))
    tables = [table] if table.rows or not finished else []
    return [*tables, _finished_table(finished)] if finished else tables


def _finished_table(finished: list[dict[str, Any]]) -> Any:
    """The issues with nothing left to send, and when that was found."""
    from rich.table import Table

    table = Table(title="finished: nothing left to send")
    table.add_column("id", justify="right")
    table.add_column("issue", overflow="fold")
    settled = ("sent", "failed", "uncertain", "skipped")
    for name in settled:
        table.add_column(name, justify="right")
    table.add_column("finished (UTC)", overflow="fold")
    for issue in finished:
        when = datetime.fromisoformat(issue["finished"]).astimezone(UTC)
        counts = (str(issue["deliveries"][s]) for s in settled)
        table.add_row(str(issue["id"]), issue["key"], *counts, when.strftime("%Y-%m-%d %H:%M"))
    return table


def _held_table(held: list[dict[str, Any]]) -> Any:
    """The held issues, with what each adds, revises and removes against the last one sent."""
    from rich.table import Table

    table = Table(title="held for approval (send --approve ISSUE, send --reject ISSUE)")
    for column in ("id", "subject", "audience", "readers", "added", "revised", "removed"):
        table.add_column(column, overflow="fold")
    for issue in held:
        audience = " + ".join(issue["audiences"]) or "everyone"
        table.add_row(
            str(issue["id"]),
            issue["subject"],
            f"{issue['lang']}: {audience}",
            str(issue["readers"]),
            *("\n".join(issue["changes"][k]) or "-" for k in ("added", "revised", "removed")),
        )
    return table


def _waiting_table(waiting: list[dict[str, Any]]) -> Any:
    """The deliveries waiting for their readers' local time, per issue and zone."""
    from rich.table import Table

    table = Table(title="waiting for their readers' local time")
    for column in ("issue", "time zone", "not before (UTC)", "deliveries"):
        table.add_column(column, overflow="fold")
    for w in waiting:
        issue = f"{w['issue']} {w['issue_key']}"
        table.add_row(issue, w["timezone"], w["not_before"], str(w["deliveries"]))
    return table


def _print_engine(console: Any, status: dict[str, Any]) -> None:
    """The workers alive and the relays' shared rates (``engine_status``)."""
    from rich.table import Table

    if status["workers"]:
        table = Table(title="workers alive")
        for column in ("worker", "last heartbeat", "batches running"):
            table.add_column(column, overflow="fold")
        for w in status["workers"]:
            ago = f"{w['seconds_since']:.1f} s ago"
            table.add_row(str(w["id"]), ago, str(w["batches"]))
        console.print(table, markup=False)
    else:
        console.print("workers alive: none (syndicate worker sends the batches)", markup=False)
    if not status["relays"]:
        return
    table = Table(title="relay rates (messages a second, shared by every worker)")
    for column in ("relay", "rate", "now", "last cut", "back to the rate"):
        table.add_column(column, overflow="fold")
    for r in status["relays"]:
        cut = f"to {r['cut_to']:,.1f} at {r['cut_at']}" if r["cut_at"] else "-"
        table.add_row(
            r["relay"], f"{r['rate']:,.1f}", f"{r['current']:,.1f}", cut, r["back_at"] or "-"
        )
    console.print(table, markup=False)


# -- bounces -------------------------------------------------------------------------------------


@main.group()
def bounces() -> None:
    """Read bounce and complaint mail, and list the readers at risk."""


@bounces.command("process")
@with_config
@click.argument("path", type=click.Path(path_type=Path, exists=True))
@click.option("--dry-run", is_flag=True, help="Show what would be done; record and move nothing.")
def bounces_process(config: Config, path: Path, dry_run: bool) -> None:
    """Act on the bounces and complaints in a Maildir or mbox at PATH, then move each message
    to a processed/ subfolder (a rerun changes nothing)."""
    from .bouncebox import BounceBox, process_bounces
    from .state import open_store

    box = BounceBox(path)
    store = open_store(config.database_url)
    try:
        outcomes = process_bounces(config, store, box, wall_clock(), dry_run=dry_run)
    finally:
        store.close()
    for o in outcomes:
        who = f" {o.email} (by {o.matched_by})" if o.email else ""
        what = " ".join(part for part in (o.kind, o.status) if part)
        reason = f": {o.reason}" if o.reason else ""
        click.echo(f"{o.key}: {what}{who}: {o.action}{reason}")
    moved = "" if dry_run else f"; moved to {box.processed}"
    click.echo(f"{len(outcomes)} message(s) read{moved}", err=True)


@bounces.command("list")
@with_config
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
def bounces_list(config: Config, as_json: bool) -> None:
    """Readers with bounces or complaints on record, and the latest reason."""
    from .state import open_store

    store = open_store(config.database_url)
    try:
        found = store.readers_at_risk()
    finally:
        store.close()
    limit = config.smtp.max_bounces
    stale_before = wall_clock() - timedelta(days=config.smtp.bounce_window_days)
    aged = {r.email for r in found if r.counted_at is not None and r.counted_at < stale_before}
    records = [
        {
            "email": r.email,
            "status": r.status,
            "bounces": r.bounces,
            "max_bounces": limit,
            "bounces_counted_at": r.counted_at.isoformat() if r.counted_at else None,
            "bounces_aged_out": r.email in aged,
            "temporary": r.temporary,
            "complaints": r.complaints,
            "last": None
            if r.last_kind is None
            else {
                "kind": r.last_kind,
                "status": r.last_status,
                "reason": r.last_reason,
                "at": r.last_at.isoformat() if r.last_at else None,
            },
        }
        for r in found
    ]
    if as_json:
        click.echo(json.dumps(records, ensure_ascii=False, indent=2))
        return
    if not records:
        click.echo("no reader has bounces or complaints on record")
    for r in found:
        why = f"{r.last_kind} {r.last_status or ''}".strip() if r.last_kind else "5xx at send"
        if r.last_reason:
            why += f": {r.last_reason}"
        count = f"bounces {r.bounces}/{limit}"
        if r.email in aged:
            count += " (aged out: the next counts as the first)"
        click.echo(
            f"{r.email}\t{r.status}\t{count}\ttemporary {r.temporary}"
            f"\tcomplaints {r.complaints}\t{why}"
        )


# -- subscribers ---------------------------------------------------------------------------------


@main.group()
def subscribers() -> None:
    """Add, import, list, remove and export readers."""


@subscribers.command("add")
@with_config
@click.argument("email")
@click.option("--lang", required=True, help="The reader's language.")
@click.option("--audience", "audiences", multiple=True, required=True, help="Repeatable.")
@click.option(
    "--status", type=click.Choice(["active", "pending"]), default="active", show_default=True
)
@click.option("--source", default="cli", show_default=True, help="Where the consent came from.")
@click.option(
    "--resubscribe",
    is_flag=True,
    help="Re-activate a reader who unsubscribed or bounced (only with their new consent).",
)
@click.option("--timezone", "zone", default=None, help="IANA time zone (default: site.timezone).")
def subscribers_add(
    config: Config,
    email: str,
    lang: str,
    audiences: tuple[str, ...],
    status: str,
    source: str,
    resubscribe: bool,
    zone: str | None,
) -> None:
    """Add a reader (or change the language and audiences of a known one, in any letter case;
    a reader who left keeps their status unless --resubscribe)."""
    from .state import open_store
    from .subscribers import ReaderRow, check_reader, check_timezone

    try:
        address, lang, chosen = check_reader(
            email, lang, audiences, langs=config.site.languages, known=config.audiences
        )
        zone = check_timezone(zone) if zone is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    store = open_store(config.database_url)
    try:
        store.import_subscribers(
            [ReaderRow(address, lang, chosen, status=status, consent_source=source, timezone=zone)],
            status=status,
            consent_source=source,
            now=wall_clock(),
            resubscribe=resubscribe,
        )
        reader = store.subscriber(address)
    finally:
        store.close()
    assert reader is not None
    click.echo(f"{reader.email} ({reader.lang}: {', '.join(reader.audiences)}) {reader.status}")
    if reader.status in ("unsubscribed", "bounced"):
        click.echo(f"{reader.email} left ({reader.status}): --resubscribe to undo", err=True)


@subscribers.command("import")
@with_config
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--status", type=click.Choice(["active", "pending"]), default="active", show_default=True
)
@click.option(
    "--source",
    default=None,
    help="Where the consent came from, for rows without consent_source (default: the file).",
)
@click.option(
    "--resubscribe",
    is_flag=True,
    help="Let the file re-activate readers who unsubscribed or bounced: only when they gave "
    "their consent again; the file's consent then replaces the old.",
)
def subscribers_import(
    config: Config, file: Path, status: str, source: str | None, resubscribe: bool
) -> None:
    """Import readers from CSV (email,lang,audiences; audiences split by ';'): all or nothing.

    An export reads back as it was: status, consent_source, created, updated and bounces
    columns are kept (--status and --source stand in for rows without them). Importing the
    same file again changes nothing; a known address (in any letter case) keeps its consent
    and never gets a less restrictive status, unless --resubscribe.
    """
    from .state import open_store
    from .subscribers import read_subscriber_csv

    try:
        text = file.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        click.echo(f"{file}: not UTF-8 text (byte {exc.start})", err=True)
        sys.exit(1)
    rows, problems = read_subscriber_csv(
        text, str(file), langs=config.site.languages, known=config.audiences
    )
    for problem in problems:
        click.echo(str(problem), err=True)
    bad = sum(p.severity is Severity.ERROR for p in problems)
    if bad:
        click.echo(f"{bad} bad row(s): nothing imported", err=True)
        sys.exit(1)
    store = open_store(config.database_url)
    try:
        added, updated = store.import_subscribers(
            rows,
            status=status,
            consent_source=source or f"import:{file.name}",
            now=wall_clock(),
            resubscribe=resubscribe,
        )
    finally:
        store.close()
    click.echo(f"{added} added, {updated} updated, {len(rows) - added - updated} unchanged")


@subscribers.command("list")
@with_config
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("--status", type=click.Choice(["pending", "active", "unsubscribed", "bounced"]))
def subscribers_list(config: Config, as_json: bool, status: str | None) -> None:
    """List readers."""
    from .state import open_store

    store = open_store(config.database_url)
    try:
        found = [_subscriber_record(s) for s in store.subscribers(status)]
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(found, ensure_ascii=False, indent=2))
        return
    for s in found:
        click.echo(f"{s['email']}\t{s['lang']}\t{';'.join(s['audiences'])}\t{s['status']}")


@subscribers.command("remove")
@with_config
@click.argument("email", required=False)
@click.option(
    "--samples", is_flag=True, help="Remove the sample readers the first `run --once` added."
)
def subscribers_remove(config: Config, email: str | None, samples: bool) -> None:
    """Delete a reader and their address, in any letter case (the delivery ledger keeps what
    was sent); or, with ``--samples``, the sample readers."""
    from .send import SAMPLE_SOURCE
    from .state import open_store
    from .subscribers import normalise_email

    if samples == (email is not None):
        raise UsageError("give either an EMAIL or --samples")
    if samples:
        store = open_store(config.database_url)
        try:
            count = store.remove_consent_source(SAMPLE_SOURCE)
        finally:
            store.close()
        click.echo(f"removed {count} sample reader(s)")
        return
    assert email is not None
    try:
        address = normalise_email(email)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    store = open_store(config.database_url)
    try:
        removed = store.remove_subscriber(address)
    finally:
        store.close()
    if removed is None:
        click.echo(f"{address}: no such reader", err=True)
        sys.exit(1)
    click.echo(f"removed {removed.email}")


@subscribers.command("export")
@with_config
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False), default="-")
def subscribers_export(config: Config, file: Path) -> None:
    """Write every reader as CSV (to FILE, or stdout); `import` reads it back as it was."""
    import csv
    import io

    from .files import write_atomic
    from .state import open_store
    from .subscribers import EXPORT_COLUMNS

    store = open_store(config.database_url)
    try:
        found = [_subscriber_record(s) for s in store.subscribers()]
    finally:
        store.close()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    for s in found:
        record = {**s, "audiences": ";".join(s["audiences"]), "consent_source": s["source"]}
        writer.writerow([record[column] for column in EXPORT_COLUMNS])
    if str(file) == "-":
        click.echo(out.getvalue(), nl=False)
        return
    write_atomic(file, out.getvalue().encode(), private=True)  # every reader's address
    click.echo(f"{len(found)} reader(s) written to {file}", err=True)


def _subscriber_record(s: Any) -> dict[str, Any]:
    return {
        "email": s.email,
        "lang": s.lang,
        "audiences": list(s.audiences),
        "status": s.status,
        "created": s.created_at.isoformat(),
        "updated": s.updated_at.isoformat() if s.updated_at else None,
        "source": s.consent_source,
        "bounces": s.bounces,
        "timezone": s.timezone or "",
    }


# -- locale --------------------------------------------------------------------------------------


@main.group()
def locale() -> None:
    """The interface's catalogs: start one for a language, list what they lack."""


@locale.command("init")
@with_config
@click.argument("lang")
def locale_init(config: Config, lang: str) -> None:
    """Write LANG's catalog into site.locales, ready to translate."""
    from .i18n import catalog_files, init_catalog

    path, catalog = init_catalog(config, lang)
    count = sum(1 for message in catalog if message.id)
    click.echo(str(path))
    click.echo(f"{count} message(s) to translate; plural rule: {catalog.plural_forms}", err=True)
    if catalog_files(config, lang)[0].is_file():
        click.echo(
            f"'{lang}' has a built-in catalog: fill in only the sentences to reword, "
            "the others keep their built-in wording",
            err=True,
        )


@locale.command("check")
@with_config
def locale_check(config: Config) -> None:
    """List, for each published language, the untranslated and fuzzy messages of mail and web."""
    from .i18n import gaps

    incomplete = 0
    for gap in gaps(config):
        state = "" if gap.exists else " (no catalog yet)"
        done = gap.total - len(gap.missing)
        click.echo(f"{gap.lang} {gap.part}: {done} of {gap.total} translated, {gap.catalog}{state}")
        for message in gap.missing:
            status = "fuzzy" if message.key in gap.fuzzy else "untranslated"
            click.echo(f"  {message.where}: {status}: {message.key!r}")
        incomplete += bool(gap.missing)
    sys.exit(1 if incomplete else 0)


if __name__ == "__main__":
    main()
