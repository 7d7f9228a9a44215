"""The web side: feeds over HTTP, article pages, subscribing and the links in readers' mail.

``create_app`` builds the ASGI app; the store, the mailer, the article source, the secret and
the clock are passed in, so the app reads no environment and no real clock of its own.
Reader data never reaches the log: lines name subscriber ids, not addresses.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import html
import ipaddress
import logging
import mimetypes
import re
import secrets
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.utils import format_datetime, formatdate, make_msgid, parseaddr, parsedate_to_datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, available_timezones

from email_validator import EmailNotValidError, validate_email
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from .config import Config
from .feeds import article_html, feed_names, feed_url
from .i18n import (
    SOURCE_LANGUAGE,
    environment,
    interface_language,
    language,
    long_date,
    one_line,
    template_roots,
    web_language,
)
from .model import ArticleSet
from .reader import read_articles, scan
from .store import Store, Subscriber
from .subscribers import mask_email
from .tokens import CONFIRM, PREFERENCES, UNSUBSCRIBE, read_token, reader_link

log = logging.getLogger("syndicate.web")

Mailer = Callable[[EmailMessage], None]
"""Hands one message to the mail transport; raises when it cannot."""

CONFIRM_MAX_AGE = timedelta(days=7)
"""How long a confirmation link works. Unsubscribe and preference links do not expire."""

CSRF_COOKIE = "syndicate_csrf"
_PAGE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
}
# Token pages: no caching, no indexing, and no Referer carrying the token to another site.
_TOKEN_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex",
}


def feed_content_type(name: str) -> str:
    """The media type a feed reader expects for a file ``syndicate build`` writes."""
    if name.endswith(".json"):
        return "application/feed+json"
    if name.endswith(".opml"):
        return "text/x-opml; charset=utf-8"
    if name.endswith(".xml"):
        if ".atom" in name:
            return "application/atom+xml; charset=utf-8"
        if ".rss" in name:
            return "application/rss+xml; charset=utf-8"
        return "application/xml; charset=utf-8"
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


@dataclass(frozen=True, slots=True)
class FeedFile:
    """One file's bytes, read once per change, with both encodings and their validators."""

    stamp: tuple[int, int]
    body: bytes
    gzipped: bytes
    etag: str
    modified: datetime
    content_type: str


class FeedFolder:
    """The files below the feeds folder; re-read only when a file's mtime or size changes.

    The ETag is a hash of the bytes, so a rebuild that writes the same feed keeps it.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cache: dict[Path, FeedFile] = {}

    def get(self, relative: str) -> FeedFile | None:
        parts = PurePosixPath(relative).parts
        if not parts or any(p.startswith(".") or "\\" in p for p in parts):
            return None
        path = self.folder.joinpath(*parts)
        try:
            info = path.stat()
        except (OSError, ValueError):  # ValueError: a NUL or lone surrogate, no file's name
            return None
        if not path.is_file() or not path.resolve().is_relative_to(self.folder.resolve()):
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        cached = self._cache.get(path)
        if cached is not None and cached.stamp == stamp:
            return cached
        body = path.read_bytes()
        found = FeedFile(
            stamp=stamp,
            body=body,
            gzipped=gzip.compress(body, 9, mtime=0),
            etag=hashlib.sha256(body).hexdigest()[:32],
            modified=datetime.fromtimestamp(int(info.st_mtime), UTC),
            content_type=feed_content_type(path.name),
        )
        self._cache[path] = found
        return found


def _accepts_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return not re.fullmatch(r"\s*q\s*=\s*0(\.0*)?\s*", params)
    return False


def _not_modified(request: Request, etag: str, modified: datetime) -> bool:
    """RFC 9110 §13.1: If-None-Match (weak comparison) wins over If-Modified-Since."""
    none_match = request.headers.get("if-none-match")
    if none_match is not None:
        tags = {t.strip().removeprefix("W/") for t in none_match.split(",")}
        return "*" in tags or etag in tags
    since = request.headers.get("if-modified-since")
    if since:
        try:
            return modified <= parsedate_to_datetime(since)
        except (TypeError, ValueError):
            return False
    return False


class RateLimit:
    """At most ``limit`` hits per key in any ``window``, kept in memory."""

    def __init__(self, limit: int, window: timedelta = timedelta(minutes=1)) -> None:
        self.limit = limit
        self.window = window
        self._hits: dict[str, deque[datetime]] = defaultdict(deque)

    def allow(self, key: str, now: datetime) -> bool:
        window = now - self.window
        if len(self._hits) > 10_000:  # forget idle clients so the table cannot grow unbounded
            for idle in [k for k, q in self._hits.items() if not q or q[-1] <= window]:
                del self._hits[idle]
        hits = self._hits[key]
        while hits and hits[0] <= window:
            hits.popleft()
        if len(hits) >= self.limit:
            return False
        hits.append(now)
        return True


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


def watch_articles(folder: Path, config: Config) -> Callable[[], ArticleSet]:
    """An article source for a long-running server: re-reads the set when a file changes."""
    seen: dict[str, Any] = {}

    def current() -> ArticleSet:
        stamp = tuple(scan(folder).items()) if folder.is_dir() else ()
        if seen.get("stamp") != stamp:
            limit = config.site.max_article_bytes
            found = read_articles(folder, config.profiles, max_bytes=limit)
            seen["stamp"], seen["articles"] = stamp, found
        return seen["articles"]

    return current


def confirmation_message(
    config: Config, lang: str, to: str, url: str, *, known: bool, now: datetime
) -> EmailMessage:
    """The double opt-in mail, or (``known``) the note to an address that is already active,
    in the reader's language (its mail catalog complete), else the fallback language."""
    ui_lang = interface_language(config, lang, "mail") or SOURCE_LANGUAGE
    env = environment(template_roots(config), ui_lang, language(config, ui_lang).translations)
    template = env.get_template("email/subscribed.txt" if known else "email/confirm.txt")
    values = {"site_title": config.title(ui_lang), "link": url, "days": CONFIRM_MAX_AGE.days}
    message = EmailMessage()
    message["From"] = config.email.sender
    message["To"] = to
    message["Subject"] = one_line(template.make_module(values).subject())
    message["Date"] = format_datetime(now.astimezone(UTC))
    domain = parseaddr(config.email.sender)[1].rpartition("@")[2] or None
    message["Message-ID"] = make_msgid(domain=domain)
    message["Auto-Submitted"] = "auto-generated"
    if config.email.reply_to:
        message["Reply-To"] = config.email.reply_to
    message.set_content(template.render(values).rstrip() + "\n")
    return message


def create_app(
    config: Config,
    *,
    store: Store,
    mailer: Mailer,
    articles: Callable[[], ArticleSet],
    secret: bytes,
    now: Callable[[], datetime],
) -> Starlette:
    """The whole web side as one ASGI app; see the README's "Web" section for the routes."""
    languages = list(config.site.languages)
    feeds = FeedFolder(config.path(config.feeds.out))
    archive_root = config.path(config.web.archive)
    zone = ZoneInfo(config.site.timezone)
    limiter = RateLimit(config.web.subscribe_per_minute)
    mails_to = RateLimit(config.web.mails_per_address_hour, timedelta(hours=1))
    secure_cookie = config.site.base_url.startswith("https://")

    def negotiate(request: Request) -> str:
        for part in request.headers.get("accept-language", "").split(","):
            tag = part.split(";")[0].strip().lower().split("-")[0]
            if tag in languages:
                return tag
        return languages[0]

    def csrf_field(nonce: str) -> str:
        return hmac.new(secret, b"csrf\0" + nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(request: Request, form: FormData) -> bool:
        nonce = request.cookies.get(CSRF_COOKIE, "")
        sent = form.get("csrf")
        if not nonce or not isinstance(sent, str):
            return False
        return hmac.compare_digest(sent, csrf_field(nonce))

    def page(
        request: Request,
        template: str,
        lang: str,
        status: int = 200,
        *,
        token_page: bool = False,
        **context: Any,
    ) -> HTMLResponse:
        nonce = request.cookies.get(CSRF_COOKIE)
        new_nonce = None if nonce else secrets.token_urlsafe(24)
        root = request.scope.get("root_path", "")
        # The page's words in one language: its own, or wholly the fallback's (said in lang=).
        ui_lang = web_language(config, lang)
        env = environment(template_roots(config), ui_lang, language(config, ui_lang).translations)
        text = env.get_template(f"web/{template}").render(
            site=config.site,
            site_title=config.title(ui_lang),
            lang=lang,
            ui_lang=ui_lang,
            long_date=long_date,
            audiences=audience_choices(ui_lang),
            root=root,
            languages=[(code, config.languages[code].name) for code in languages],
            csrf=csrf_field(nonce or new_nonce or ""),
            feed_links=[
                (feed_url(config, name), feed_content_type(name))
                for name in feed_names(lang).values()
            ],
            **context,
        )
        headers = {
            **_PAGE_HEADERS,
            **(_TOKEN_HEADERS if token_page else {}),
            "Vary": "Accept-Encoding",
        }
        body = text.encode()
        if _accepts_gzip(request):
            body = gzip.compress(body, 6)
            headers["Content-Encoding"] = "gzip"
        response = HTMLResponse(body, status, headers=headers)
        if new_nonce:
            response.set_cookie(
                CSRF_COOKIE, new_nonce, httponly=True, samesite="lax", secure=secure_cookie
            )
        return response

    def notice(
        request: Request,
        lang: str,
        kind: str,
        status: int = 200,
        *,
        token_page: bool = False,
        manage: str | None = None,
        address: str | None = None,
    ) -> HTMLResponse:
        """One of notice.html's short pages (``kind`` names it there); ``address`` is the
        masked address a token page acts for."""
        return page(
            request,
            "notice.html",
            lang,
            status,
            token_page=token_page,
            kind=kind,
            days=CONFIRM_MAX_AGE.days,
            manage=manage,
            address=address,
        )

    def audience_choices(lang: str) -> list[tuple[str, str]]:
        names = config.languages[lang].audience_names if lang in config.languages else {}
        return [(a, names.get(a, a)) for a in config.audiences]

    # -- feeds and pages -------------------------------------------------------------------

    async def home(request: Request) -> Response:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/{negotiate(request)}/")

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok", headers={"Cache-Control": "no-store"})

    async def feed(request: Request) -> Response:
        found = feeds.get(request.path_params["path"])
        if found is None:
            raise HTTPException(404)
        zipped = _accepts_gzip(request)
        etag = f'"{found.etag}-gz"' if zipped else f'"{found.etag}"'
        headers = {
            "ETag": etag,
            "Last-Modified": formatdate(found.modified.timestamp(), usegmt=True),
            "Cache-Control": "public, max-age=300",
            "Vary": "Accept-Encoding",
            "X-Content-Type-Options": "nosniff",
        }
        if _not_modified(request, etag, found.modified):
            return Response(status_code=304, headers=headers)
        if zipped:
            headers["Content-Encoding"] = "gzip"
        body = found.gzipped if zipped else found.body
        return Response(body, media_type=found.content_type, headers=headers)

    def language_of(request: Request) -> str:
        lang = request.path_params["lang"]
        if lang not in languages:
            raise HTTPException(404)
        return lang

    def index_page(request: Request, lang: str, status: int = 200, **form: Any) -> HTMLResponse:
        return page(
            request,
            "index.html",
            lang,
            status,
            articles=articles().in_language(lang),
            url=config.article_url,
            alternates=[(code, f"{config.site.base_url}/{code}/") for code in languages],
            form={"lang": lang, "audiences": (), "email": "", "error": None, **form},
        )

    async def index(request: Request) -> Response:
        return index_page(request, language_of(request))

    async def article(request: Request) -> Response:
        lang = language_of(request)
        found = articles()
        item = found.get(lang, request.path_params["slug"])
        if item is None:
            raise HTTPException(404)
        versions = sorted((item, *found.translations(item)), key=lambda a: a.lang)
        return page(
            request,
            "article.html",
            lang,
            article=item,
            url=config.article_url,
            body=Markup(article_html(config, item)),  # the feeds' HTML, so both say the same
            alternates=[(a.lang, config.article_url(a.lang, a.slug)) for a in versions],
            translations=[(a, config.languages[a.lang].name) for a in versions if a is not item],
        )

    async def archive(request: Request) -> Response:
        """The issues of a language, newest first: dated by the store, where each was made."""
        lang = language_of(request)
        folder = archive_root / lang
        made = store.issue_times(lang)
        found = []
        for path in folder.glob("*.html") if folder.is_dir() else ():
            if path.name.startswith("."):
                continue
            named = _ISSUE_NAME.fullmatch(path.stem)
            issue = (int(named[1]), named[2]) if named else (0, path.stem)
            # A page the store does not know (put there by hand) is dated by its file.
            when = made.get(issue) or datetime.fromtimestamp(path.stat().st_mtime, UTC)
            found.append((when, issue, path))
        issues = [
            (path.stem, _html_title(path), when.astimezone(zone).date())
            for when, _, path in sorted(found, reverse=True)
        ]
        return page(request, "archive.html", lang, issues=issues)

    async def archive_issue(request: Request) -> Response:
        lang = language_of(request)
        name = request.path_params["issue"]
        path = archive_root / lang / f"{name}.html"
        if not re.fullmatch(r"[\w][\w.-]*", name) or not path.is_file():
            raise HTTPException(404)
        headers = {
            **_PAGE_HEADERS,
            "Content-Security-Policy": "default-src 'none'; "
            "style-src 'unsafe-inline'; img-src 'self' https: data:; base-uri 'none'",
        }
        return HTMLResponse(path.read_bytes(), headers=headers)

    # -- subscribing and the links in readers' mail ----------------------------------------

    async def send(message: EmailMessage) -> bool:
        try:
            await run_in_threadpool(mailer, message)
        except Exception as exc:  # the transport's failure must not become a 500 page
            log.error("could not send a confirmation mail: %s", type(exc).__name__)
            return False
        return True

    async def subscribe(request: Request) -> Response:
        moment = now()
        client = request.client.host if request.client else "-"
        form = await request.form()
        chosen = form.get("lang")
        lang = chosen if isinstance(chosen, str) and chosen in languages else negotiate(request)
        if not limiter.allow(client, moment):
            log.warning("subscribe rate limit reached")
            limited = notice(request, lang, "too_many", 429)
            limited.headers["Retry-After"] = "60"
            return limited
        if not csrf_ok(request, form):
            return notice(request, lang, "form_expired", 400)
        raw = str(form.get("email", "")).strip()
        audiences = [a for a in config.audiences if a in form.getlist("audiences")]
        try:
            email = validate_email(raw, check_deliverability=False).normalized
        except EmailNotValidError:
            return index_page(
                request, lang, 400, email=raw, audiences=audiences, error="invalid_email"
            )
        if not audiences:
            return index_page(request, lang, 400, email=raw, error="no_audience")
        if not mails_to.allow(email.casefold(), moment):
            # The page a sent mail gets: the visitor learns nothing about the address.
            log.warning("subscribe mail limit reached for one address")
            return notice(request, lang, "check_inbox")
        known = store.subscriber(email)
        if known is not None and known.status == "active":
            # Tell the owner, not the visitor: the page below is the same either way.
            url = reader_link(config, secret, PREFERENCES, known.id, issued=moment)
            message = confirmation_message(
                config, reader_lang(known), email, url, known=True, now=moment
            )
        else:
            reader = store.add_subscriber(
                email,
                lang,
                audiences,
                status="pending",
                consent_source=f"web form ({lang})",
                now=moment,
            )
            log.info("reader %d pending confirmation", reader.id)
            url = reader_link(config, secret, CONFIRM, reader.id, issued=moment)
            message = confirmation_message(config, lang, email, url, known=False, now=moment)
        if not await send(message):
            return notice(request, lang, "send_failed", 503)
        return notice(request, lang, "check_inbox")

    def reader_of(request: Request, purpose: str) -> Subscriber | None:
        max_age = CONFIRM_MAX_AGE if purpose == CONFIRM else None
        found = read_token(secret, purpose, request.path_params["token"], max_age, now=now())
        return None if found is None else store.subscriber_by_id(found)

    def invalid_link(request: Request) -> HTMLResponse:
        return notice(request, negotiate(request), "invalid_link", 404, token_page=True)

    def reader_lang(reader: Subscriber) -> str:
        return reader.lang if reader.lang in config.languages else languages[0]

    async def confirm(request: Request) -> Response:
        reader = reader_of(request, CONFIRM)
        if reader is None:
            return invalid_link(request)
        lang = reader_lang(reader)
        if request.method == "GET":
            # A button, not an action on GET: mail scanners open links on their own.
            address = mask_email(reader.email)
            return notice(request, lang, "confirm", token_page=True, address=address)
        if not csrf_ok(request, await request.form()):
            return notice(request, lang, "form_expired", 400, token_page=True)
        if reader.status != "active":
            store.set_status(reader.id, "active", now())
            log.info("reader %d confirmed", reader.id)
        manage = reader_link(config, secret, PREFERENCES, reader.id, issued=now())
        return notice(request, lang, "confirmed", token_page=True, manage=manage)

    async def unsubscribe(request: Request) -> Response:
        reader = reader_of(request, UNSUBSCRIBE)
        if reader is None:
            return invalid_link(request)
        lang = reader_lang(reader)
        address = mask_email(reader.email)
        if request.method == "GET":
            return notice(request, lang, "unsubscribe", token_page=True, address=address)
        form = await request.form()
        # RFC 8058: the mail client's one-click POST carries no cookie; the token is the proof.
        one_click = form.get("List-Unsubscribe") == "One-Click"
        if not one_click and not csrf_ok(request, form):
            return notice(request, lang, "form_expired", 400, token_page=True)
        if reader.status != "unsubscribed":
            store.set_status(reader.id, "unsubscribed", now())
            log.info("reader %d unsubscribed%s", reader.id, " (one-click)" if one_click else "")
        manage = reader_link(config, secret, PREFERENCES, reader.id, issued=now())
        return notice(
            request, lang, "unsubscribed", token_page=True, manage=manage, address=address
        )

    site_zone = config.site.timezone
    zone_names = sorted(available_timezones() | {site_zone})
    zones = frozenset(zone_names)

    async def preferences(request: Request) -> Response:
        reader = reader_of(request, PREFERENCES)
        if reader is None:
            return invalid_link(request)
        saved = False
        if request.method == "POST":
            form = await request.form()
            if not csrf_ok(request, form):
                return notice(request, reader_lang(reader), "form_expired", 400, token_page=True)
            chosen = form.get("lang")
            audiences = [a for a in config.audiences if a in form.getlist("audiences")]
            zone = form.get("timezone")
            zone = zone if zone in zones else None  # a forged one changes nothing
            if isinstance(chosen, str) and chosen in languages and audiences:
                reader = store.add_subscriber(
                    reader.email,
                    chosen,
                    audiences,
                    status=reader.status,
                    consent_source=reader.consent_source,
                    now=now(),
                    timezone=None if zone == (reader.timezone or site_zone) else zone,
                )
                saved = True
                log.info("reader %d changed preferences", reader.id)
        lang = reader_lang(reader)
        return page(
            request,
            "preferences.html",
            lang,
            token_page=True,
            reader=reader,
            address=mask_email(reader.email),
            saved=saved,
            zones=zone_names,
            reader_zone=reader.timezone or site_zone,
            unsubscribe=reader_link(config, secret, UNSUBSCRIBE, reader.id, issued=now()),
        )

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status != 404:
            return PlainTextResponse(f"{status}", status)
        return notice(request, negotiate(request), "not_found", 404)

    routes = [
        Route("/", home),
        Route("/healthz", healthz),
        Route("/feeds/{path:path}", feed),
        Route("/subscribe", subscribe, methods=["POST"]),
        Route("/confirm/{token}", confirm, methods=["GET", "POST"]),
        Route("/u/{token}", unsubscribe, methods=["GET", "POST"]),
        Route("/preferences/{token}", preferences, methods=["GET", "POST"]),
        Route("/archive/{lang}/", archive),
        Route("/archive/{lang}/{issue}/", archive_issue),
        Route("/{lang}/", index),
        Route("/{lang}/{slug}/", article),
    ]
    # The client address (the subscribe limit's key) comes from X-Forwarded-For only when the
    # connection comes from a trusted proxy; the header of anyone else is ignored.
    proxies = [Middleware(ProxyHeadersMiddleware, trusted_hosts=config.web.trusted_proxies)]
    return Starlette(
        routes=routes,
        middleware=proxies if config.web.trusted_proxies else [],
        exception_handlers={HTTPException: not_found},
    )


_ISSUE_NAME = re.compile(r"(\d+)-(.+)")
"""An archived page's name: the issue's id and key (``pipeline.archive_name``)."""


def _html_title(path: Path) -> str:
    """An archived issue's <title>, or its file name when it has none."""
    head = path.read_text("utf-8", errors="replace")[:4096]
    found = re.search(r"<title[^>]*>(.*?)</title>", head, re.S | re.I)
    title = html.unescape(re.sub(r"\s+", " ", found[1])).strip() if found else ""
    return title or path.stem
