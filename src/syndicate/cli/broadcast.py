"""``broadcast``: one article sent now, as an issue of its own, to every reader of its
language (``sending.broadcast``)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..clock import wall_clock
from .send import print_send_report
from .shared import article_folder, articles_option, check_known, with_articles, with_config
from .signals import stopping_on_signals

if TYPE_CHECKING:
    from ..config import Config


@click.command()
@with_config
@articles_option
@click.argument("article")
@click.option("--lang", "langs", multiple=True, help="Only this language's version (repeatable).")
@click.option(
    "--audience", "audiences", multiple=True, help="Only readers of this audience (repeatable)."
)
@click.option("--dry-run", is_flag=True, help="Show what would be issued; record and send nothing.")
def broadcast(
    config: Config,
    articles: Path | None,
    article: str,
    langs: tuple[str, ...],
    audiences: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Send ARTICLE now to every active reader of its language, as an issue of its own.

    ARTICLE is the article's file, LANG/SLUG, or its slug (every language version, or those
    of --lang). Each reader gets it once however often this runs; with email.approval it is
    held for approval like any issue.
    """
    from ..sending.broadcast import broadcast_article
    from ..sending.engine import dispatcher
    from ..sending.transports import open_mailer
    from ..state import open_store

    check_known(config, langs=langs, audiences=audiences)
    article_folder(config, articles)
    config = with_articles(config, articles)
    store = open_store(config.database_url)
    stop = threading.Event()
    try:
        with stopping_on_signals(stop, config.smtp.timeout):
            report = broadcast_article(
                config,
                wall_clock(),
                article,
                mailer=open_mailer(config),
                store=store,
                langs=langs,
                audiences=audiences,
                dry_run=dry_run,
                dispatch=dispatcher(config),
                stop=stop,
            )
    finally:
        store.close()
    for key, had, added in report.already:
        now_or_not = "would get it" if dry_run else "get it now"
        since = f"; {added} reader(s) of the group without it {now_or_not}" if added else ""
        click.echo(f"{key}: already broadcast to {had} reader(s), not again{since}", err=True)
    sys.exit(print_send_report(report, dry_run=dry_run))
