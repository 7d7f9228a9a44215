"""``send``: issue the due digests and deliver them; its subcommands ``status``, ``resend``,
``approve`` and ``reject`` show where the sends stand and act on uncertain deliveries and held
issues.

The flags these replace (``send --status``, ``--resend``, ``--resend-uncertain``,
``--approve``, ``--approve-all``, ``--reject``) still work in this release, each with a line on
stderr naming its subcommand; the next release drops them.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from dataclasses import astuple, dataclass
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..clock import wall_clock
from ..errors import Exit, UsageError
from .doctor import checked_before_send
from .shared import (
    article_folder,
    articles_option,
    check_known,
    config_option,
    debug_option,
    loaded_config,
    share,
    with_articles,
    with_config,
)
from .signals import stopping_on_signals
from .status import print_send_status

if TYPE_CHECKING:
    from rich.progress import Progress

    from ..config import Config
    from ..sending.issuing import SendReport


class _SendGroup(click.Group):
    """``send --approve 12 13`` as ``--approve 12 --approve 13`` (the same for ``--reject``
    and ``--resend``, the deprecated flags): click options take one value each, and a bare
    value after one of these can only be another id (no command goes with them)."""

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


@dataclass(frozen=True)
class _OldFlags:
    """The flags of ``send`` that its commands replace, as given (deprecated)."""

    show_status: bool
    as_json: bool
    resend: tuple[int, ...]
    resend_uncertain: bool
    issue_id: int | None
    approve: tuple[int, ...]
    approve_all: bool
    reject: tuple[int, ...]

    def given(self) -> bool:
        """Whether any of them was given."""
        return any(value not in (False, (), None) for value in astuple(self))

    def notes(self) -> list[str]:
        """One line for each deprecated flag given, naming the command that replaces it."""
        ids = " ".join
        issue = f" --issue {self.issue_id}" if self.issue_id is not None else ""
        replaced = [  # in the order they act
            ("--reject", self.reject, f"send reject {ids(map(str, self.reject))}"),
            ("--approve", self.approve, f"send approve {ids(map(str, self.approve))}"),
            ("--approve-all", self.approve_all, "send approve --all"),
            ("--resend", self.resend, f"send resend {ids(map(str, self.resend))}"),
            ("--resend-uncertain", self.resend_uncertain, f"send resend --uncertain{issue}"),
            ("--status", self.show_status, "send status" + (" --json" if self.as_json else "")),
        ]
        return [f"send {flag} is deprecated: use `{new}`" for flag, used, new in replaced if used]


def _deprecated(instead: str) -> dict[str, Any]:
    """A deprecated flag's settings: out of ``send --help``, naming what replaces it."""
    return {"hidden": True, "help": f"Deprecated: {instead}."}


@click.group(cls=_SendGroup, invoke_without_command=True, subcommand_metavar="[COMMAND [ARGS]...]")
@config_option
@debug_option
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
@click.option(
    "--skip-checks", is_flag=True, help="Send without the preflight (doctor's DNS checks)."
)
@click.option("--status", "show_status", is_flag=True, **_deprecated("send status"))
@click.option("--json", "as_json", is_flag=True, **_deprecated("send status --json"))
@click.option("--resend", type=int, multiple=True, **_deprecated("send resend ID..."))
@click.option("--resend-uncertain", is_flag=True, **_deprecated("send resend --uncertain"))
@click.option("--issue", "issue_id", type=int, **_deprecated("send resend --uncertain --issue"))
@click.option("--approve", type=int, multiple=True, **_deprecated("send approve ISSUE..."))
@click.option("--approve-all", is_flag=True, **_deprecated("send approve --all"))
@click.option("--reject", type=int, multiple=True, **_deprecated("send reject ISSUE..."))
@click.pass_context
def send(
    ctx: click.Context,
    config_path: Path | None,
    debug: bool,
    articles: Path | None,
    langs: tuple[str, ...],
    audiences: tuple[str, ...],
    since: datetime | None,
    dry_run: bool,
    skip_checks: bool,
    **deprecated: Any,
) -> None:
    """Issue the digests with new content and deliver them: each reader gets each one once.

    Its commands see where the sends stand (status), queue uncertain deliveries again
    (resend), and release or cancel the issues held for approval (approve, reject).
    """
    share(config_path, debug)
    old = _OldFlags(**deprecated)
    if ctx.invoked_subcommand is not None:
        if articles or langs or audiences or since or dry_run or old.given():
            command = ctx.invoked_subcommand
            raise click.UsageError(f"only --config and --debug go between send and {command}")
        return
    with loaded_config() as config:
        if old.given():
            sys.exit(_by_old_flags(config, old, langs, audiences))
        check_known(config, langs=langs, audiences=audiences)
        article_folder(config, articles)
        config = with_articles(config, articles)
        day = since.date() if since else None
        now = wall_clock()
        checked_before_send(config, now, skip=skip_checks, dry_run=dry_run)
        sys.exit(
            send_now(config, now, langs=langs, audiences=audiences, since=day, dry_run=dry_run)
        )


def _by_old_flags(
    config: Config, old: _OldFlags, langs: tuple[str, ...], audiences: tuple[str, ...]
) -> int:
    """What the deprecated flags did, after a note for each; the exit status."""
    for note in old.notes():
        click.echo(f"syndicate: {note}", err=True)
    if old.approve or old.approve_all or old.reject:
        return judge(config, old.approve, old.approve_all, old.reject, wall_clock())
    check_known(config, langs=langs, audiences=audiences)
    if old.as_json and not old.show_status:
        raise UsageError("--json goes with --status")
    if old.issue_id is not None and not old.resend_uncertain:
        raise UsageError("--issue goes with --resend-uncertain")
    status: int = Exit.OK
    if old.resend:
        status = requeue(config, old.resend)
    if old.resend_uncertain:
        requeue_uncertain(config, old.issue_id)
    if old.show_status:
        show_status(config, as_json=old.as_json)
    return status


@send.command("status")
@with_config
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
def status_command(config: Config, as_json: bool) -> None:
    """Issues and their deliveries by status, the uncertain ones, the held issues, what
    waits for its readers' local time, the bounce reports (and with send.engine =
    "procrastinate", the workers alive and the relays' rates)."""
    show_status(config, as_json=as_json)


@send.command("resend")
@with_config
@click.argument("ids", type=int, nargs=-1, metavar="[ID]...")
@click.option(
    "--uncertain",
    "every",
    is_flag=True,
    help="Every uncertain delivery (of one issue with --issue), once you checked.",
)
@click.option("--issue", "issue_id", type=int, metavar="N", help="With --uncertain: issue N's.")
def resend_command(config: Config, ids: tuple[int, ...], every: bool, issue_id: int | None) -> None:
    """Queue uncertain deliveries again, once you know they did not arrive: resend 7 9."""
    if bool(ids) == every:
        raise UsageError("give the ids of uncertain deliveries, or --uncertain")
    if issue_id is not None and not every:
        raise UsageError("--issue goes with --uncertain")
    sys.exit(requeue(config, ids) if ids else requeue_uncertain(config, issue_id))


@send.command("approve")
@with_config
@click.argument("ids", type=int, nargs=-1, metavar="[ISSUE]...")
@click.option("--all", "every", is_flag=True, help="Every held issue.")
def approve_command(config: Config, ids: tuple[int, ...], every: bool) -> None:
    """Release held issues and send them: approve 12 13 (or approve --all)."""
    if bool(ids) == every:
        raise UsageError("give the ids of held issues, or --all")
    sys.exit(judge(config, ids, every, (), wall_clock()))


@send.command("reject")
@with_config
@click.argument("ids", type=int, nargs=-1, required=True, metavar="ISSUE...")
def reject_command(config: Config, ids: tuple[int, ...]) -> None:
    """Cancel held issues: reject 12 13 (their content may be issued again)."""
    sys.exit(judge(config, (), False, ids, wall_clock()))


class _Bar:
    """The delivery progress bar, on stderr."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("sending", total=None)

    def start(self, total: int) -> None:
        self.progress.update(self.task, total=total)

    def advance(self, status: str) -> None:
        self.progress.advance(self.task)


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

    from ..sending.engine import dispatcher
    from ..sending.issuing import send_due

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
            dispatch=dispatcher(config),
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
            "(`syndicate send status`)",
            err=True,
        )
    if report.refused:
        click.echo(
            f"partial run: {len(report.refused)} group(s) not issued, every other one was",
            err=True,
        )
    if report.uncertain:
        click.echo("uncertain deliveries are never resent blindly: see `syndicate send status`")
    if report.refused or report.failed or report.uncertain:
        return Exit.FAILED
    # A delivery this run deferred that another run at once then sent is not left.
    return Exit.OK if report.stopped or not (report.deferred and report.left) else Exit.FAILED


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
            f"`syndicate send approve {issue_id}` sends it, `send reject {issue_id}` cancels it",
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
    from ..sending.issuing import ApprovalExpired, approve_issue
    from ..state import open_store

    store = open_store(config.database_url)
    try:
        status: int = Exit.OK
        for issue_id in dict.fromkeys(reject):
            if store.issues.withdraw_issue(
                issue_id, "rejected", "issue rejected by an editor", now
            ):
                click.echo(f"issue {issue_id} rejected: its content may be issued again", err=True)
            else:
                click.echo(f"issue {issue_id} is not held: not rejected", err=True)
                status = max(status, Exit.FAILED)
        chosen = [i.id for i in store.issues.held_issues()] if approve_all else list(approve)
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


def requeue(config: Config, ids: tuple[int, ...]) -> int:
    """Queue the given uncertain deliveries again; refuse (exit 1, nothing queued) when one is
    unknown or not uncertain."""
    from ..state import open_store

    store = open_store(config.database_url)
    try:
        found = {d.id: d.status for d in store.ledger.deliveries(ids=ids)}
        unknown = [str(i) for i in ids if i not in found]
        settled = [f"{i} ({found[i]})" for i in ids if i in found and found[i] != "uncertain"]
        if unknown or settled:
            if unknown:
                click.echo(f"no such delivery: {', '.join(unknown)}", err=True)
            if settled:
                click.echo(f"not uncertain, so not resent: {', '.join(settled)}", err=True)
            click.echo("nothing queued", err=True)
            return Exit.FAILED
        queued = store.ledger.resend_uncertain(ids, wall_clock())
    finally:
        store.close()
    click.echo(f"{queued} uncertain delivery(ies) queued again", err=True)
    return Exit.OK


def requeue_uncertain(config: Config, issue_id: int | None) -> int:
    """Queue every uncertain delivery again (of one issue, given its id)."""
    from ..state import open_store

    store = open_store(config.database_url)
    try:
        lost = store.ledger.deliveries("uncertain", issue_id=issue_id)
        queued = store.ledger.resend_uncertain([d.id for d in lost], wall_clock())
    finally:
        store.close()
    of = f" of issue {issue_id}" if issue_id is not None else ""
    click.echo(f"{queued} uncertain delivery(ies){of} queued again", err=True)
    return Exit.OK


def show_status(config: Config, *, as_json: bool) -> None:
    """Where the sends stand: tables, or with ``as_json`` one JSON document on stdout."""
    from ..sending.status import send_status
    from ..state import open_store

    store = open_store(config.database_url)
    try:
        status = send_status(config, store, wall_clock())
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(status.to_json(), ensure_ascii=False, indent=2))
    else:
        print_send_status(status)
