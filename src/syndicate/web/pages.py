"""The site's pages as served: a language's index, an article, the sent issues, the short
notices. The public ones are rendered by web/public.py, which ``build --site`` uses too.

Handlers that render templates, query the store or read files are sync ``def``: Starlette
runs them in its thread pool, so the event loop never waits on them.
"""

from __future__ import annotations

import gzip
import secrets
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from ..feeds import due_articles
from .context import WebContext, context_of
from .feeds import accepts_gzip
from .public import (
    SiteContent,
    article_page_html,
    index_html,
    issue_file,
    issues_html,
    not_found_html,
    render_page,
)
from .security import CSRF_COOKIE, ISSUE_HEADERS, PAGE_HEADERS, TOKEN_HEADERS, csrf_field
from .static import robots, site_pages, sitemaps

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


def root_of(request: Request) -> str:
    return str(request.scope.get("root_path", ""))


def content_of(request: Request) -> SiteContent:
    """What the public pages show now, for the app that answers ``request``: made once per
    request (a 404 page after a handler's lookup asks the article source no second time)."""
    found: SiteContent | None = getattr(request.state, "site_content", None)
    if found is None:
        ctx = context_of(request)
        found = SiteContent(
            config=ctx.config,
            # An article dated ahead is held back here as in the feeds.
            articles=due_articles(ctx.config, ctx.articles(), ctx.now())[0],
            issues=ctx.issues,
            issue_times=ctx.store.issues.issue_times,
            zone=ctx.zone,
            root=root_of(request),
        )
        request.state.site_content = found
    return found


def html_response(
    request: Request, text: str, status: int = 200, extra: dict[str, str] | None = None
) -> HTMLResponse:
    """A rendered page as served, gzipped when asked."""
    headers = {**PAGE_HEADERS, **(extra or {}), "Vary": "Accept-Encoding"}
    body = text.encode()
    if accepts_gzip(request):
        body = gzip.compress(body, 6)
        headers["Content-Encoding"] = "gzip"
    return HTMLResponse(body, status, headers=headers)


def page(
    request: Request,
    template: str,
    lang: str,
    status: int = 200,
    *,
    token_page: bool = False,
    **context: Any,
) -> HTMLResponse:
    """A page with a form of its own, and the CSRF cookie a visitor without one gets."""
    ctx = context_of(request)
    nonce = request.cookies.get(CSRF_COOKIE)
    new_nonce = None if nonce else secrets.token_urlsafe(24)
    csrf = csrf_field(ctx.secret, nonce or new_nonce or "")
    feeds = content_of(request).has_feeds(lang)
    text = render_page(ctx.config, root_of(request), template, lang, csrf, feeds=feeds, **context)
    response = html_response(request, text, status, TOKEN_HEADERS if token_page else None)
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
    return RedirectResponse(f"{root_of(request)}/{lang}/")


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok", headers={"Cache-Control": "no-store"})


def index_page(request: Request, lang: str, status: int = 200, **form: Any) -> HTMLResponse:
    """The language's index with the subscribe form, filled in with ``form`` when a post of
    it is refused."""
    text = index_html(content_of(request), lang, 1, form)
    assert text is not None  # the first page always exists
    return html_response(request, text, status)


def index(request: Request) -> Response:
    return index_page(request, language_of(request))


def index_more(request: Request) -> Response:
    """Page 2 and on of a language's index; page 1 is the index itself, at its own address."""
    text = index_html(content_of(request), language_of(request), request.path_params["number"])
    if text is None or request.path_params["number"] == 1:
        raise HTTPException(404)
    return html_response(request, text)


def article(request: Request) -> Response:
    text = article_page_html(content_of(request), language_of(request), request.path_params["slug"])
    if text is None:
        raise HTTPException(404)
    return html_response(request, text)


def issue_list(request: Request) -> Response:
    """The sent issues of a language, one entry per send, newest first."""
    return html_response(request, issues_html(content_of(request), language_of(request)))


def issue_page(request: Request) -> Response:
    """One sent issue, as the newsletter's HTML was written."""
    found = issue_file(content_of(request), language_of(request), request.path_params["issue"])
    if found is None:
        raise HTTPException(404)
    return HTMLResponse(found.read_bytes(), headers=ISSUE_HEADERS)


def not_found(request: Request, exc: Exception) -> Response:
    """Every HTTPException: a 404 is the site's page in the language of the folder asked for
    (as a static site's <lang>/404.html), else in the visitor's."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status != 404:
        return PlainTextResponse(f"{status}", status)
    ctx = context_of(request)
    path = str(request.scope.get("path", ""))
    root = root_of(request)
    first = path.removeprefix(root if path.startswith(root) else "").lstrip("/").split("/")[0]
    lang = first if first in ctx.languages else negotiate(ctx, request)
    return html_response(request, not_found_html(content_of(request), lang), 404)


def sitemap_xml(request: Request) -> Response:
    """The sitemap (or sitemap index) ``build --site`` writes, of the pages as they are now;
    with a number, that part of a sitemap too large for one file."""
    content = content_of(request)
    documents = sitemaps(site_pages(content), content.config.site.base_url)
    number = request.path_params.get("number")
    if number is None:
        return Response(documents[0], media_type="application/xml")
    if not 1 <= number < len(documents):
        raise HTTPException(404)
    return Response(documents[number], media_type="application/xml")


def robots_txt(request: Request) -> Response:
    return PlainTextResponse(robots(content_of(request)))
