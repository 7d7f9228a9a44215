"""``subscribers add | import | list | remove | export``: the readers, by hand and as CSV."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..clock import wall_clock
from ..errors import UsageError
from ..model import Severity
from .shared import with_config

if TYPE_CHECKING:
    from ..config import Config
    from ..state import Subscriber


@click.group()
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
    from ..state import open_store
    from ..subscribers import ReaderRow, check_reader, check_timezone

    try:
        address, lang, chosen = check_reader(
            email, lang, audiences, langs=config.site.languages, known=config.audiences
        )
        zone = check_timezone(zone) if zone is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    store = open_store(config.database_url)
    try:
        store.subscribers.import_subscribers(
            [ReaderRow(address, lang, chosen, status=status, consent_source=source, timezone=zone)],
            status=status,
            consent_source=source,
            now=wall_clock(),
            resubscribe=resubscribe,
        )
        reader = store.subscribers.subscriber(address)
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
    from ..state import open_store
    from ..subscribers import read_subscriber_csv

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
        added, updated = store.subscribers.import_subscribers(
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
    from ..state import open_store

    store = open_store(config.database_url)
    try:
        found = [_subscriber_record(s) for s in store.subscribers.all(status)]
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
    from ..sending.issuing import SAMPLE_SOURCE
    from ..state import open_store
    from ..subscribers import normalise_email

    if samples == (email is not None):
        raise UsageError("give either an EMAIL or --samples")
    if samples:
        store = open_store(config.database_url)
        try:
            count = store.subscribers.remove_consent_source(SAMPLE_SOURCE)
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
        removed = store.subscribers.remove_subscriber(address)
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

    from ..files import write_atomic
    from ..state import open_store
    from ..subscribers import EXPORT_COLUMNS

    store = open_store(config.database_url)
    try:
        found = [_subscriber_record(s) for s in store.subscribers.all()]
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


def _subscriber_record(s: Subscriber) -> dict[str, Any]:
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
        "last_bounce": s.last_bounce_at.isoformat() if s.last_bounce_at else None,
        "soft_bounces": s.soft_bounces,
        "soft_since": s.first_soft_at.isoformat() if s.first_soft_at else None,
        "last_reason": s.last_reason,
    }
