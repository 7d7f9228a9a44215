"""``bounces process`` and ``bounces list``: bounce and complaint mail, and the readers at risk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..clock import wall_clock
from .shared import with_config

if TYPE_CHECKING:
    from ..config import Config


@click.group()
def bounces() -> None:
    """Read bounce and complaint mail, and list the readers at risk."""


@bounces.command("process")
@with_config
@click.argument("path", type=click.Path(path_type=Path, exists=True))
@click.option("--dry-run", is_flag=True, help="Show what would be done; record and move nothing.")
def bounces_process(config: Config, path: Path, dry_run: bool) -> None:
    """Act on the bounces and complaints in a Maildir or mbox at PATH, then move each message
    to a processed/ subfolder (a rerun changes nothing)."""
    from ..bouncebox import BounceBox, process_bounces
    from ..state import open_store

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
        count = f"bounces {r.bounces}/{at_risk.max_bounces}"
        if at_risk.aged_out:
            count += " (aged out: the next counts as the first)"
        click.echo(
            f"{r.email}\t{r.status}\t{count}\ttemporary {r.temporary}"
            f"\tcomplaints {r.complaints}\t{why}"
        )
