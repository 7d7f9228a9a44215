"""``doctor``: the setup around the program checked (DNS, the relay, a sample digest per
language, the reader list), each failure with its fix; and the preflight ``send`` runs first."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..clock import wall_clock
from ..errors import Exit, SyndicateError
from .shared import articles_option, with_config

if TYPE_CHECKING:
    from ..config import Config

ENV_NAMESERVER = "SYNDICATE_NAMESERVER"


class SendRefused(SyndicateError):
    """The preflight found that receivers would reject the send."""


@click.command()
@with_config
@articles_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option(
    "--nameserver",
    envvar=ENV_NAMESERVER,
    metavar="HOST[:PORT]",
    help="Ask this DNS server instead of the system's (also $SYNDICATE_NAMESERVER): a zone "
    "can be checked before it is live.",
)
@click.option("--online", is_flag=True, help="Also ask site.base_url, where the links go.")
def doctor(
    config: Config, articles: Path | None, as_json: bool, nameserver: str | None, online: bool
) -> None:
    """Check what decides whether the digests reach the inbox: SPF, DKIM, DMARC and alignment,
    MX for the bounces, the relay (nothing is sent), a sample digest per language, the reader
    list. Each failure says how to fix it; exit status 1 when a check fails."""
    from ..doctor.checkup import run_doctor
    from ..doctor.preflight import keep, recorded
    from ..doctor.report import all_passed, as_text
    from ..doctor.report import as_json as json_report
    from ..doctor.resolver import Lookups
    from ..state import open_store
    from .articles import load_articles

    now = wall_clock()
    found = load_articles(config, articles, bodies=False)
    store = open_store(config.database_url)
    try:
        lookups = Lookups(nameserver)
        checks, refusal = run_doctor(
            config, articles=found, store=store, lookups=lookups, now=now, online=online
        )
    finally:
        store.close()
    try:
        keep(config, recorded(config, checks, refusal, now))
    except OSError as exc:  # the checks are done: say they could not be kept, and go on
        click.echo(f"syndicate: {config.state.doctor_file}: not kept ({exc})", err=True)
    click.echo(json_report(checks) if as_json else as_text(checks))
    sys.exit(Exit.OK if all_passed(checks) else Exit.FAILED)


def checked_before_send(config: Config, now: datetime, *, skip: bool, dry_run: bool) -> None:
    """The preflight of ``send``: its lines on stderr; SendRefused when receivers would reject
    the send. ``--skip-checks`` skips it, and says so."""
    if dry_run:
        return
    if skip:
        click.echo("syndicate: send --skip-checks: the preflight checks are skipped", err=True)
        return
    from ..doctor.preflight import preflight

    verdict = preflight(config, now, nameserver=os.environ.get(ENV_NAMESERVER))
    for line in verdict.lines:
        click.echo(f"syndicate: {line}", err=True)
    if verdict.refusal:
        raise SendRefused(
            f"send refused: receivers would reject these digests: {verdict.refusal}. Fix it "
            "(syndicate doctor says how), or send --skip-checks"
        )
