"""``send status`` without ``--json``: where the sends stand, as tables that fit the terminal
(long cells wrap inside their column)."""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rich.console import Console
    from rich.table import Table

    from ..sending.status import EngineStatus, HeldIssue, IssueDeliveries, SendStatus, Waiting
    from ..state import AtRisk, Delivery


def print_send_status(status: SendStatus, width: int | None = None) -> None:
    """The tables, at ``width`` columns (default: the terminal's)."""
    from rich.console import Console

    console = Console(width=width)
    for table in _issue_tables(status.issues, console.width):
        console.print(table, markup=False)
    if status.uncertain:
        console.print(_uncertain_table(status.uncertain), markup=False)
    if status.held:
        console.print(_held_table(status.held), markup=False)
    if status.waiting:
        console.print(_waiting_table(status.waiting), markup=False)
    if status.engine is not None:
        _print_engine(console, status.engine)
    if status.readers:
        console.print(_readers_table(status.readers), markup=False)
    reports = status.bounces
    if any(reports.values()):
        click.echo(
            f"bounce mail: {reports['permanent']} permanent, {reports['temporary']} temporary, "
            f"{reports['complaint']} complaint(s) (syndicate bounces list)"
        )


def _fits(width: int, cells: list[list[str]]) -> bool:
    """Whether a table of these rows (the header first) fits ``width`` columns with every
    cell on one line: rich's default box puts a rule and a space on each side of a cell."""
    widths = [max(map(len, column)) for column in zip(*cells, strict=True)]
    return sum(widths) + 3 * len(widths) + 1 <= width


CountsRow = tuple[str, str, "Mapping[str, int]", list[str]]
"""An issue's id, key, deliveries per status, and the table's further cells."""


def _counts_table(
    title: str,
    rows: list[CountsRow],
    statuses: tuple[str, ...],
    extra: list[str],
    width: int,
) -> Table:
    """Issues (id, key) with their deliveries per status, a column each where that fits
    ``width``; else all in one column, only the statuses that have any ("3 sent, 2
    uncertain"), so that no issue key is folded into a narrow column."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("id", justify="right")
    table.add_column("issue", no_wrap=True)
    header = ["id", "issue", *statuses, *extra]
    cells = [[i, key, *(str(n[s]) for s in statuses), *more] for i, key, n, more in rows]
    if _fits(width, [header, *cells]):
        for name in (*statuses, *extra):
            table.add_column(name, justify="right" if name in statuses else "left")
        for row in cells:
            table.add_row(*row)
        return table
    table.add_column("deliveries", overflow="fold")
    for name in extra:
        table.add_column(name, overflow="fold")
    for i, key, n, more in rows:
        counts = ", ".join(f"{n[s]:,} {s}" for s in statuses if n[s]) or "none"
        table.add_row(i, key, counts, *more)
    return table


def _issue_tables(issues: list[IssueDeliveries], width: int) -> list[Table]:
    """The open issues with their deliveries in each state (one still being planned marked
    so), then the finished ones."""
    from ..state import DELIVERY_STATUSES

    open_rows: list[CountsRow] = [
        (str(i.id), f"{i.key} (planning)" if i.planning else i.key, i.deliveries, [])
        for i in issues
        if not i.finished
    ]
    finished = [issue for issue in issues if issue.finished]
    tables = []
    if open_rows or not finished:
        tables.append(
            _counts_table("deliveries per issue", open_rows, DELIVERY_STATUSES, [], width)
        )
    if finished:
        tables.append(_finished_table(finished, width))
    return tables


def _finished_table(finished: list[IssueDeliveries], width: int) -> Table:
    """The issues with nothing left to send, and when that was found."""
    rows: list[CountsRow] = [
        (
            str(i.id),
            i.key,
            i.deliveries,
            [i.finished.astimezone(UTC).strftime("%Y-%m-%d %H:%M")] if i.finished else ["-"],
        )
        for i in finished
    ]
    settled = ("sent", "failed", "uncertain", "skipped")
    title = "finished: nothing left to send"
    return _counts_table(title, rows, settled, ["finished (UTC)"], width)


def _uncertain_table(uncertain: list[Delivery]) -> Table:
    """The deliveries that may or may not have arrived."""
    from rich.table import Table

    table = Table(title="uncertain: may or may not have arrived (send resend ID to requeue)")
    table.add_column("id", justify="right")
    table.add_column("issue", justify="right")
    for column in ("email", "message-id", "since", "reason"):
        table.add_column(column, overflow="fold")
    for d in uncertain:
        since = d.updated_at.isoformat()
        table.add_row(str(d.id), str(d.issue_id), d.email, d.message_id, since, d.reply)
    return table


def _held_table(held: list[HeldIssue]) -> Table:
    """The held issues, with what each adds, revises and removes against the last one sent."""
    from rich.table import Table

    table = Table(title="held for approval (send approve ISSUE, send reject ISSUE)")
    for column in ("id", "subject", "audience", "readers", "added", "revised", "removed"):
        table.add_column(column, overflow="fold")
    for issue in held:
        audience = " + ".join(issue.audiences) or "everyone"
        table.add_row(
            str(issue.id),
            issue.subject,
            f"{issue.lang}: {audience}",
            str(issue.readers),
            *("\n".join(issue.changes[k]) or "-" for k in ("added", "revised", "removed")),
        )
    return table


def _waiting_table(waiting: list[Waiting]) -> Table:
    """The deliveries waiting for their readers' local time, per issue and zone."""
    from rich.table import Table

    table = Table(title="waiting for their readers' local time")
    for column in ("issue", "time zone", "not before (UTC)", "deliveries"):
        table.add_column(column, overflow="fold")
    for w in waiting:
        issue = f"{w.issue} {w.issue_key}"
        table.add_row(issue, w.timezone, w.not_before.isoformat(), str(w.deliveries))
    return table


READERS_SHOWN = 20
"""Readers at risk ``send status`` lists; ``bounces list`` gives them all."""


def _readers_table(readers: list[AtRisk]) -> Table:
    """The readers with bounces or complaints on record, worst first: their hard and soft
    counts and the last reason."""
    from rich.table import Table

    more = len(readers) - READERS_SHOWN
    rest = f", {more} more" if more > 0 else ""
    table = Table(title=f"readers with bounces or complaints (syndicate bounces list{rest})")
    for column in ("email", "status", "hard", "soft", "soft since", "last reason"):
        table.add_column(column, overflow="fold")
    for r in readers[:READERS_SHOWN]:
        since = r.soft_since.isoformat() if r.soft_since else "-"
        why = r.reason or ("complaint" if r.complaints else "-")
        table.add_row(r.email, r.status, str(r.bounces), str(r.soft_bounces), since, why)
    return table


def _print_engine(console: Console, engine: EngineStatus) -> None:
    """The workers alive and the relays' shared rates."""
    from rich.table import Table

    if engine.workers:
        table = Table(title="workers alive")
        for column in ("worker", "last heartbeat", "batches running"):
            table.add_column(column, overflow="fold")
        for w in engine.workers:
            table.add_row(str(w.id), f"{w.silent:.1f} s ago", str(w.batches))
        console.print(table, markup=False)
    else:
        console.print("workers alive: none (syndicate worker sends the batches)", markup=False)
    if not engine.relays:
        return
    table = Table(title="relay rates (messages a second, shared by every worker)")
    for column in ("relay", "rate", "now", "last cut", "back to the rate"):
        table.add_column(column, overflow="fold")
    for r in engine.relays:
        cut = f"to {r.cut_rate:,.1f} at {r.cut_at.isoformat()}" if r.cut_at else "-"
        back = r.back_at.isoformat() if r.back_at else "-"
        table.add_row(r.relay, f"{r.rate:,.1f}", f"{r.current:,.1f}", cut, back)
    console.print(table, markup=False)
