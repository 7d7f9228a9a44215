"""``serve``: the feeds, the article pages and the readers' links over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..clock import wall_clock
from .articles import print_feed_report
from .shared import article_folder, articles_option, with_config

if TYPE_CHECKING:
    from ..config import Config


@click.command()
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

    from ..build import build_feeds
    from ..sending.messages import message_sender
    from ..state import open_store
    from ..tokens import secret_key
    from ..web import base_url_elsewhere, bind, create_app, listening_url, serve_app, watch_articles

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
