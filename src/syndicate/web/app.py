"""The web app: its routes, and the context every handler finds on ``app.state``.

``create_app`` builds the ASGI app; the store, the mail sender, the article source, the secret
and the clock are passed in, so the app reads no environment and no real clock of its own.
The handlers are module-level functions (web/feeds.py, pages.py, readers.py), each of the
request alone, so each can be imported and tested alone.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route

from .. import routes
from ..config import Config
from ..model import ArticleSet
from ..reader import read_articles, scan
from ..state import Store
from . import pages, readers
from .bounce_hooks import HOOKS
from .context import MessageSender, WebContext
from .feeds import FeedFolder, feed
from .previews import held_preview
from .security import RateLimit, proxy_middleware
from .sns import SnsClient

TOKEN_METHODS = ["GET", "POST"]


def web_routes() -> list[Route]:
    """Every route, at the paths routes.py spells for the links that lead to them."""
    token_pages = {
        routes.CONFIRM: readers.confirm,
        routes.UNSUBSCRIBE: readers.unsubscribe,
        routes.PREFERENCES: readers.preferences,
    }
    return [
        Route("/", pages.home),
        Route(routes.HEALTH, pages.healthz),
        Route(routes.FEEDS + "{path:path}", feed),
        Route(routes.SUBSCRIBE, readers.form_endpoint(readers.subscribe), methods=["POST"]),
        *(
            Route(routes.READER[purpose], readers.form_endpoint(handler), methods=TOKEN_METHODS)
            for purpose, handler in token_pages.items()
        ),
        Route(routes.HELD_PREVIEW, held_preview),
        *(
            Route(routes.BOUNCE_HOOK.format(relay=relay), endpoint, methods=["POST"])
            for relay, endpoint in HOOKS.items()
        ),
        Route(routes.ISSUES, pages.issue_list),
        Route(routes.ISSUE, pages.issue_page),
        Route(routes.SITEMAP, pages.sitemap_xml),
        Route(routes.SITEMAP_PART.replace("{number}", "{number:int}"), pages.sitemap_xml),
        Route(routes.ROBOTS, pages.robots_txt),
        Route(routes.HOME, pages.index),
        Route(routes.HOME_PAGE.replace("{number}", "{number:int}"), pages.index_more),
        Route(routes.ARTICLE, pages.article),
    ]


def create_app(
    config: Config,
    *,
    store: Store,
    send_message: MessageSender,
    articles: Callable[[], ArticleSet],
    secret: bytes,
    now: Callable[[], datetime],
    sns: SnsClient | None = None,
) -> Starlette:
    """The whole web side as one ASGI app; docs/web.md lists the routes. ``sns`` reaches
    Amazon SNS for the SES webhook (by default at SNS's own hosts only)."""
    web = config.web
    context = WebContext(
        config=config,
        store=store,
        send_message=send_message,
        articles=articles,
        secret=secret,
        now=now,
        feeds=FeedFolder(config.path(config.feeds.out)),
        issues=config.path(web.issues),
        zone=ZoneInfo(config.site.timezone),
        subscribe_limit=RateLimit(web.subscribe_per_minute),
        mail_limit=RateLimit(web.mails_per_address_hour, timedelta(hours=1)),
        sns=sns or SnsClient(),
    )
    app = Starlette(
        routes=web_routes(),
        middleware=proxy_middleware(web.trusted_proxies),
        exception_handlers={HTTPException: pages.not_found},
    )
    app.state.web = context
    return app


class ArticleWatch:
    """An article source for a long-running server: the set is read again when a file
    changed. The folder is looked at (each file stat'ed once) at most once per ``every``
    seconds of ``clock``, so pages in between cost no file system calls at all."""

    def __init__(
        self,
        folder: Path,
        config: Config,
        *,
        every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder, self.config, self.every, self.clock = folder, config, every, clock
        self._lock = threading.Lock()  # handlers run in the thread pool: one reads at a time
        self._stamp: tuple[tuple[str, tuple[int, int]], ...] | None = None
        self._articles = ArticleSet()
        self._looked = float("-inf")

    def __call__(self) -> ArticleSet:
        with self._lock:
            moment = self.clock()
            if self._stamp is not None and moment - self._looked < self.every:
                return self._articles
            self._looked = moment
            stamp = tuple(scan(self.folder).items()) if self.folder.is_dir() else ()
            if stamp != self._stamp:
                limit = self.config.site.max_article_bytes
                self._articles = read_articles(self.folder, self.config.profiles, max_bytes=limit)
                self._stamp = stamp
            return self._articles


def watch_articles(folder: Path, config: Config, *, every: float = 1.0) -> ArticleWatch:
    """The article source ``syndicate serve`` gives the app."""
    return ArticleWatch(folder, config, every=every)


def listening_url(host: str, port: int) -> str:
    """The base URL of a server listening at ``host``:``port``, as a browser here reaches it."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def base_url_elsewhere(base_url: str, host: str, port: int) -> str | None:
    """Why the links built from ``base_url`` would not reach a server at ``host``:``port``;
    None when they do. A base URL naming another machine is taken for the public name of a
    reverse proxy in front of this server, and is not second-guessed."""
    parts = urlsplit(base_url)
    named = parts.hostname or ""
    wildcard = host in ("0.0.0.0", "::", "")
    if not (_loopback(named) or named == host):
        return None
    reachable = named == host or wildcard or (_loopback(named) and _loopback(host))
    if reachable and (parts.port or {"https": 443}.get(parts.scheme, 80)) == port:
        return None
    return (
        f"site.base_url is {base_url} but this server listens on {listening_url(host, port)}: "
        "links in pages, feeds and mails lead elsewhere (serve --dev links here)"
    )
