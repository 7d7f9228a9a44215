"""``bounces process`` and ``bounces list``: bounce and complaint mail, and the readers at risk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..clock import wall_clock
from .shared import with_config

if TYPE_CHECKING:
    from ..bouncebox import BounceOutcome, BounceSource
    from ..config import Config


@click.group()
def bounces() -> None:
    """Read bounce and complaint mail, and list the readers at risk."""


@bounces.command("process")
@with_config
@click.argument("path", type=click.Path(path_type=Path, exists=True), required=False)
@click.option("--dry-run", is_flag=True, help="Show what would be done; record and move nothing.")
def bounces_process(config: Config, path: Path | None, dry_run: bool) -> None:
    """Act on the bounces and complaints in a Maildir or mbox at PATH (without PATH: the IMAP
    folder of bounces.imap_url), then move each message to a processed folder (a rerun
    changes nothing); one that is no bounce (a reply, an auto-reply, a delivery notice) to
    replies; one that is no mail message stays."""
    from ..bouncebox import bounce_source, process_bounces
    from ..state import open_store

    box = bounce_source(config, path)
    try:
        store = open_store(config.database_url)
        try:
            outcomes = process_bounces(config, store, box, wall_clock(), dry_run=dry_run)
        finally:
            store.close()
    finally:
        box.close()
    for o in outcomes:
        click.echo(_said(o))
    click.echo(_summary(box, outcomes, dry_run), err=True)


def _said(o: BounceOutcome) -> str:
    """One message's line: what it is and what became of it."""
    from ..bouncebox import UNREADABLE
    from ..bounces import NOT_A_BOUNCE

    if o.kind == NOT_A_BOUNCE:
        return f"{o.key}: not a bounce ({o.reason}): {o.action}"
    if o.kind == UNREADABLE:
        return f"{o.key}: unreadable ({o.reason}): {o.action}"
    who = f" {o.email} (by {o.matched_by})" if o.email else ""
    what = " ".join(part for part in (o.kind, o.status) if part)
    reason = f": {o.reason}" if o.reason else ""
    return f"{o.key}: {what}{who}: {o.action}{reason}"


def _summary(box: BounceSource, outcomes: list[BounceOutcome], dry_run: bool) -> str:
    """How many messages were read, and where they went (or would go)."""
    from ..bouncebox import PROCESSED, REPLIES

    move = "would move" if dry_run else "moved"
    counts = {
        f"{move} to {box.processed}": sum(o.folder == PROCESSED for o in outcomes),
        f"not a bounce, {move} to {box.replies}": sum(o.folder == REPLIES for o in outcomes),
        "unreadable, left in place": sum(not o.folder for o in outcomes),
    }
    said = "".join(f"; {n} {what}" for what, n in counts.items() if n)
    return f"{len(outcomes)} message(s) read{said}"


@bounces.command("list")
@with_config
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
def bounces_list(config: Config, as_json: bool) -> None:
    """Readers with bounces or complaints on record, and the latest reason."""
    from ..bouncebox import readers_at_risk
    from ..state import open_store

    store = open_store(config.database_url)
    try:
        found = readers_at_risk(config, store, wall_clock())
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([r.to_json() for r in found], ensure_ascii=False, indent=2))
        return
    if not found:
        click.echo("no reader has bounces or complaints on record")
    for at_risk in found:
        r = at_risk.reader
        why = f"{r.last_kind} {r.last_status or ''}".strip() if r.last_kind else "5xx at send"
        if r.last_reason:
            why += f": {r.last_reason}"
        count = f"hard {r.bounces}/{at_risk.max_bounces}"
        if at_risk.aged_out:
            count += " (aged out: the next counts as the first)"
        soft = f"soft {r.soft_bounces}/{at_risk.soft_limit}"
        if r.soft_since is not None:
            soft += f" since {r.soft_since.date().isoformat()}"
        click.echo(
            f"{r.email}\t{r.status}\t{count}\t{soft}\t{r.reason or '-'}"
            f"\ttemporary {r.temporary}\tcomplaints {r.complaints}\t{why}"
        )
