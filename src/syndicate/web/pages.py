"""The site's pages: a language's index, an article, the sent issues, the short notices.

Handlers that render templates, query the store or read files are sync ``def``: Starlette
runs them in its thread pool, so the event loop never waits on them.
"""

from __future__ import annotations

import gzip
import html
import re
import secrets
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from markupsafe import Markup
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from ..config import Config
from ..feeds import article_html, feed_audiences, feed_names
from ..i18n import environment, language, long_date, template_roots, web_language
from ..routes import ISSUE_NAME, article_url, feed_url, home_url
from .context import WebContext, context_of
from .feeds import accepts_gzip, feed_content_type
from .security import CSRF_COOKIE, ISSUE_HEADERS, PAGE_HEADERS, TOKEN_HEADERS, csrf_field

FORMATS = ("Atom", "RSS", "JSON Feed")
"""The formats of a feed, in ``feed_names`` order, as the pages name them."""
CONFIRM_DAYS = 7
"""How many days a confirmation link works (the notices and the mail say so)."""


def negotiate(ctx: WebContext, request: Request) -> str:
    """The first configured language the browser asks for, else the first configured."""
    for part in request.headers.get("accept-language", "").split(","):
        tag = part.split(";")[0].strip().lower().split("-")[0]
        if tag in ctx.languages:
            return tag
    return ctx.languages[0]


def language_of(request: Request) -> str:
    """The page's language from its path; a language the site does not publish is a 404."""
    lang = request.path_params["lang"]
    if lang not in context_of(request).languages:
        raise HTTPException(404)
    return lang


def audience_choices(ctx: WebContext, lang: str) -> list[tuple[str, str]]:
    return audience_choices_of(ctx.config, lang)


def audience_choices_of(config: Config, lang: str) -> list[tuple[str, str]]:
    """Each configured audience's id and name in ``lang``."""
    names = config.languages[lang].audience_names if lang in config.languages else {}
    return [(a, names.get(a, a)) for a in config.audiences]


def render_page(
    ctx: WebContext, request: Request, template: str, lang: str, csrf: str, **context: Any
) -> str:
    """A page's HTML: its words in one language, its own or wholly the fallback's (said in
    lang=), with what every page shows around it."""
    config = ctx.config
    ui_lang = web_language(config, lang)
    env = environment(template_roots(config), ui_lang, language(config, ui_lang).translations)
    return env.get_template(f"web/{template}").render(
        site=config.site,
        site_title=config.title(ui_lang),
        lang=lang,
        ui_lang=ui_lang,
        long_date=long_date,
        audiences=audience_choices(ctx, ui_lang),
        root=request.scope.get("root_path", ""),
        languages=[(code, config.languages[code].name) for code in ctx.languages],
        csrf=csrf,
        feed_links=[
            (feed_url(config, name), feed_content_type(name)) for name in feed_names(lang).values()
        ],
        **context,
    )


def page(
    request: Request,
    template: str,
    lang: str,
    status: int = 200,
    *,
    token_page: bool = False,
    **context: Any,
) -> HTMLResponse:
    """A rendered page, gzipped when asked, with the CSRF cookie a visitor without one gets."""
    ctx = context_of(request)
    nonce = request.cookies.get(CSRF_COOKIE)
    new_nonce = None if nonce else secrets.token_urlsafe(24)
    csrf = csrf_field(ctx.secret, nonce or new_nonce or "")
    text = render_page(ctx, request, template, lang, csrf, **context)
    headers = {**PAGE_HEADERS, **(TOKEN_HEADERS if token_page else {}), "Vary": "Accept-Encoding"}
    body = text.encode()
    if accepts_gzip(request):
        body = gzip.compress(body, 6)
        headers["Content-Encoding"] = "gzip"
    response = HTMLResponse(body, status, headers=headers)
    if new_nonce:
        response.set_cookie(
            CSRF_COOKIE, new_nonce, httponly=True, samesite="lax", secure=ctx.secure_cookie
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
        days=CONFIRM_DAYS,
        manage=manage,
        address=address,
    )


async def home(request: Request) -> Response:
    lang = negotiate(context_of(request), request)
    return RedirectResponse(f"{request.scope.get('root_path', '')}/{lang}/")


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok", headers={"Cache-Control": "no-store"})


def index_page(request: Request, lang: str, status: int = 200, **form: Any) -> HTMLResponse:
    """The language's index with the subscribe form, filled in with ``form`` when a post of
    it is refused."""
    ctx = context_of(request)
    config = ctx.config
    articles = ctx.articles().in_language(lang)
    return page(
        request,
        "index.html",
        lang,
        status,
        articles=articles,
        audience_feeds=audience_feeds(config, lang, feed_audiences(config, articles)),
        url=partial(article_url, config),
        alternates=[(code, home_url(config, code)) for code in ctx.languages],
        form={"lang": lang, "audiences": (), "email": "", "error": None, **form},
    )


def audience_feeds(config: Config, lang: str, audiences: list[str]) -> list[tuple[str, ...]]:
    """(URL, media type, audience name, format) of each audience feed of ``lang``."""
    names = dict(audience_choices_of(config, lang))
    return [
        (feed_url(config, name), feed_content_type(name), names[audience], kind)
        for audience in audiences
        for name, kind in zip(feed_names(lang, audience).values(), FORMATS, strict=True)
    ]


def index(request: Request) -> Response:
    return index_page(request, language_of(request))


def article(request: Request) -> Response:
    lang = language_of(request)
    config = context_of(request).config
    found = context_of(request).articles()
    item = found.get(lang, request.path_params["slug"])
    if item is None:
        raise HTTPException(404)
    versions = sorted((item, *found.translations(item)), key=lambda a: a.lang)
    return page(
        request,
        "article.html",
        lang,
        article=item,
        url=partial(article_url, config),
        body=Markup(article_html(config, item)),  # the feeds' HTML, so both say the same
        alternates=[(a.lang, article_url(config, a.lang, a.slug)) for a in versions],
        translations=[(a, config.languages[a.lang].name) for a in versions if a is not item],
    )


def issue_list(request: Request) -> Response:
    """The sent issues of a language, newest first: dated by the store, where each was made."""
    lang = language_of(request)
    ctx = context_of(request)
    folder = ctx.issues / lang
    made = ctx.store.issue_times(lang)
    found = []
    for path in folder.glob("*.html") if folder.is_dir() else ():
        named = ISSUE_NAME.fullmatch(path.stem)
        if not named:  # a page issue_page would not serve (a dot file, say): no link to it
            continue
        issue = (int(named[1]), named[2])
        # A page the store does not know (put there by hand) is dated by its file.
        when = made.get(issue) or datetime.fromtimestamp(path.stat().st_mtime, UTC)
        found.append((when, issue, path))
    issues = [
        (path.stem, _html_title(path), when.astimezone(ctx.zone).date())
        for when, _, path in sorted(found, reverse=True)
    ]
    return page(request, "archive.html", lang, issues=issues)


def issue_page(request: Request) -> Response:
    """One sent issue, as the newsletter's HTML was written."""
    lang = language_of(request)
    name = request.path_params["issue"]
    path = context_of(request).issues / lang / f"{name}.html"
    if not ISSUE_NAME.fullmatch(name) or not path.is_file():
        raise HTTPException(404)
    return HTMLResponse(path.read_bytes(), headers=ISSUE_HEADERS)


def _html_title(path: Path) -> str:
    """A sent issue's <title>, or its file name when it has none."""
    head = path.read_text("utf-8", errors="replace")[:4096]
    found = re.search(r"<title[^>]*>(.*?)</title>", head, re.S | re.I)
    title = html.unescape(re.sub(r"\s+", " ", found[1])).strip() if found else ""
    return title or path.stem


def not_found(request: Request, exc: Exception) -> Response:
    """Every HTTPException: a 404 is the site's page in the visitor's language."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status != 404:
        return PlainTextResponse(f"{status}", status)
    return notice(request, negotiate(context_of(request), request), "not_found", 404)
