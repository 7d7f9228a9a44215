"""``syndicate build --site DIR``: the whole public site as files any static host serves.

Every page is made by web/public.py, as ``serve`` makes it, and lands where a static host
looks for that address (``/en/`` → ``en/index.html``). Besides the pages: ``404.html`` at the
top and in each language's folder (in that language), ``sitemap.xml`` with the translations of
each page as ``xhtml:link`` alternates, ``robots.txt`` naming the sitemap, and the feeds and
OPML as ``syndicate build`` wrote them, below ``feeds/``. The same input gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit
from xml.sax.saxutils import escape, quoteattr
from zoneinfo import ZoneInfo

from jinja2 import TemplateError

from .. import routes
from ..config import Config
from ..errors import OutputError, RenderError, UsageError, describe
from ..feeds import due_articles
from ..files import swapped_folder, write_new
from ..i18n import template_roots
from ..model import ArticleSet
from ..reader import read_articles
from ..render import template_error
from ..routes import article_url, home_page_url, home_url, issue_url, issues_url, site_url
from ..state import Store, database_errors, open_store
from .public import (
    SiteContent,
    article_page_html,
    index_html,
    issue_sends,
    issues_html,
    languages_html,
    not_found_html,
    page_count,
    versions,
)

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
XHTML_NS = "http://www.w3.org/1999/xhtml"


@dataclass(frozen=True)
class Listed:
    """One page in the sitemap: its URL, when it last changed, and its translations."""

    url: str
    lastmod: date | None = None
    alternates: tuple[tuple[str, str], ...] = ()


def site_root(base_url: str) -> str:
    """The site's path in links: what ``serve`` gets as root_path behind a proxy."""
    return urlsplit(base_url).path.rstrip("/")


def file_of(path: str) -> str:
    """The file a static host serves at the address ``path`` (below the site's root)."""
    path = path.lstrip("/")
    return f"{path}index.html" if path.endswith("/") or not path else path


@dataclass(frozen=True)
class Page:
    """One file of the site: where it goes, how it is made, and its sitemap entry."""

    file: str
    make: Callable[[], bytes]
    listed: Listed | None = None


def site_pages(content: SiteContent) -> list[Page]:
    """Every page of the site, in a fixed order, each made only when asked: ``serve`` lists
    them for its sitemap without rendering one."""
    config = content.config
    home = site_url(config)
    homes = (*((code, home_url(config, code)) for code in content.languages), ("x-default", home))
    found = [
        Page("index.html", lambda: languages_html(content).encode(), Listed(home, None, homes)),
        Page(routes.NOT_FOUND, partial(_not_found, content, content.languages[0])),
    ]
    for lang in content.languages:
        found.extend(_language_pages(content, lang, homes))
    return found


def site_files(content: SiteContent, feeds: Path) -> Iterator[tuple[str, bytes]]:
    """Every file of the static site as (its path in the folder, its bytes), in a fixed
    order; ``feeds``: the folder ``syndicate build`` wrote."""
    pages = site_pages(content)
    for page in pages:
        yield page.file, page.make()
    for number, document in enumerate(sitemaps(pages, content.config.site.base_url)):
        yield sitemap_file(number), document
    yield routes.ROBOTS.lstrip("/"), robots(content)
    yield from _feed_files(feeds)


def _not_found(content: SiteContent, lang: str) -> bytes:
    return not_found_html(content, lang).encode()


def _index(content: SiteContent, lang: str, number: int) -> bytes:
    page = index_html(content, lang, number)
    assert page is not None
    return page.encode()


def _article(content: SiteContent, lang: str, slug: str) -> bytes:
    page = article_page_html(content, lang, slug)
    assert page is not None
    return page.encode()


def _language_pages(
    content: SiteContent, lang: str, homes: tuple[tuple[str, str], ...]
) -> Iterator[Page]:
    """One language's pages: its index pages, its 404, its articles and its sent issues."""
    config = content.config
    articles = content.articles.in_language(lang)
    newest = articles[0].updated if articles else None
    for number in range(1, page_count(content, lang) + 1):
        path = routes.HOME if number == 1 else routes.HOME_PAGE
        alternates = homes if number == 1 else ()
        listed = Listed(home_page_url(config, lang, number), newest, alternates)
        yield Page(
            file_of(path.format(lang=lang, number=number)),
            partial(_index, content, lang, number),
            listed,
        )
    yield Page(f"{lang}/{routes.NOT_FOUND}", partial(_not_found, content, lang))
    for item in articles:
        url = article_url(config, lang, item.slug)
        every = tuple(
            (a.lang, article_url(config, a.lang, a.slug)) for a in versions(content, item)
        )
        # An article whose page of record is on another site (site.article_url) is not listed.
        listed = Listed(url, item.updated, every if len(every) > 1 else ())
        own = url.startswith(site_url(config))
        yield Page(
            file_of(routes.ARTICLE.format(lang=lang, slug=item.slug)),
            partial(_article, content, lang, item.slug),
            listed if own else None,
        )
    lists = tuple((code, issues_url(config, code)) for code in content.languages)
    yield Page(
        file_of(routes.ISSUES.format(lang=lang)),
        lambda: issues_html(content, lang).encode(),
        Listed(issues_url(config, lang), None, lists),
    )
    for day, variants in issue_sends(content, lang):
        for issue in variants:
            listed = Listed(issue_url(config, lang, issue.name), day)
            yield Page(
                file_of(routes.ISSUE.format(lang=lang, issue=issue.name)),
                issue.path.read_bytes,
                listed,
            )


def _feed_files(feeds: Path) -> Iterator[tuple[str, bytes]]:
    """The feeds folder's documents, below feeds/: not its hidden files (the build's
    manifest and index, a writer's temporary file)."""
    if not feeds.is_dir():
        return
    for path in sorted(feeds.rglob("*")):
        relative = path.relative_to(feeds)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            yield f"{routes.FEEDS.strip('/')}/{relative.as_posix()}", path.read_bytes()


SITEMAP_MAX_URLS = 50_000
SITEMAP_MAX_BYTES = 50 * 1024 * 1024
"""sitemaps.org's limits of one sitemap file. A site past either lists its pages in parts
(``routes.SITEMAP_PART``), and ``sitemap.xml`` is the sitemap index naming them."""
_URLSET_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    f'<urlset xmlns="{SITEMAP_NS}" xmlns:xhtml="{XHTML_NS}">\n'
).encode()
_URLSET_TAIL = b"</urlset>\n"


def sitemaps(pages: list[Page], base_url: str) -> list[bytes]:
    """The sitemap documents of ``pages``: one while they fit in one file, else the sitemap
    index (``routes.SITEMAP``) and then each part (``routes.SITEMAP_PART``, from 1), each
    within sitemaps.org's limits. Each listed page's translations are ``xhtml:link``
    alternates (itself among them, as search engines ask)."""
    parts: list[bytes] = []
    chunk: list[bytes] = []
    size = len(_URLSET_HEAD) + len(_URLSET_TAIL)
    for page in (p.listed for p in pages if p.listed is not None):
        entry = _sitemap_entry(page)
        if chunk and (len(chunk) == SITEMAP_MAX_URLS or size + len(entry) > SITEMAP_MAX_BYTES):
            parts.append(_URLSET_HEAD + b"".join(chunk) + _URLSET_TAIL)
            chunk, size = [], len(_URLSET_HEAD) + len(_URLSET_TAIL)
        chunk.append(entry)
        size += len(entry)
    parts.append(_URLSET_HEAD + b"".join(chunk) + _URLSET_TAIL)
    if len(parts) == 1:
        return parts
    names = (routes.SITEMAP_PART.format(number=n) for n in range(1, len(parts) + 1))
    index = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<sitemapindex xmlns="{SITEMAP_NS}">',
        *(f"<sitemap><loc>{escape(base_url + name)}</loc></sitemap>" for name in names),
        "</sitemapindex>",
    ]
    return [("\n".join(index) + "\n").encode(), *parts]


def _sitemap_entry(page: Listed) -> bytes:
    lines = [f"<url><loc>{escape(page.url)}</loc>"]
    if page.lastmod is not None:
        lines.append(f"<lastmod>{page.lastmod.isoformat()}</lastmod>")
    lines.extend(
        f'<xhtml:link rel="alternate" hreflang={quoteattr(code)} href={quoteattr(href)}/>'
        for code, href in page.alternates
    )
    lines.append("</url>\n")
    return "\n".join(lines).encode()


def sitemap_file(number: int) -> str:
    """Where the sitemap document ``number`` of ``sitemaps`` lies (0: the sitemap or index)."""
    path = routes.SITEMAP_PART.format(number=number) if number else routes.SITEMAP
    return path.lstrip("/")


def robots(content: SiteContent) -> bytes:
    """Every page may be crawled; the sitemap lists them."""
    sitemap_url = content.config.site.base_url + routes.SITEMAP
    return f"User-agent: *\nAllow: /\nSitemap: {sitemap_url}\n".encode()


@dataclass(frozen=True)
class SiteReport:
    """What ``build --site`` wrote: the folder, its files, and the pages among them."""

    out: Path
    files: int
    pages: int


def write_site(
    config: Config,
    out: Path,
    articles: ArticleSet,
    store: Store,
    feeds: Path | None = None,
    *,
    now: datetime | None = None,
) -> SiteReport:
    """Write the whole site into ``out`` in one step (``files.swapped_folder``): a server
    reading ``out`` sees the previous site or this one, and a build that fails leaves the
    previous one whole. ``feeds``: the folder ``syndicate build`` wrote (feeds.out). With
    ``now``, an article dated ahead is held back, as the feeds hold it."""
    content = SiteContent(
        config=config,
        articles=due_articles(config, articles, now)[0],
        issues=config.path(config.web.issues),
        issue_times=store.issues.issue_times,
        zone=ZoneInfo(config.site.timezone),
        root=site_root(config.site.base_url),
    )
    check_replaceable(config, out)
    files = 0
    try:
        with swapped_folder(out) as folder:
            for name, data in site_files(content, feeds or config.path(config.feeds.out)):
                write_new(folder / name, data, previous=out / name)
                files += 1
    except OSError as exc:
        raise OutputError(f"site in {out} unchanged: {describe(exc)}") from exc
    except TemplateError as exc:
        problem = template_error(exc, template_roots(config))
        raise RenderError(f"site in {out} unchanged: {problem}") from None
    return SiteReport(out, files, len(site_pages(content)))


SITE_MARKS = frozenset({routes.SITEMAP.lstrip("/"), routes.ROBOTS.lstrip("/"), routes.NOT_FOUND})
"""Files every site ``build --site`` writes has at its top: a folder with them may be replaced."""


def check_replaceable(config: Config, out: Path) -> None:
    """The folder the site replaces whole must be new, empty or a site written before: a
    mistyped ``--site`` must not take the place of the site's own folder, or any other."""
    where = out.resolve()
    holds = [config.root, config.path(config.site.articles), config.path(config.feeds.out)]
    inside = [p for p in holds if p.resolve() == where or where in p.resolve().parents]
    names = {p.name for p in out.iterdir()} if out.is_dir() else set()
    if inside or (out.exists() and not out.is_dir()) or (names and not names >= SITE_MARKS):
        reason = f"it holds {inside[0]}" if inside else "it is not empty nor a site written before"
        raise UsageError(f"{out}: not replaced by the site: {reason}; name a new or empty folder")


def build_site(
    config: Config, out: Path, folder: Path, feeds: Path, now: datetime | None = None
) -> SiteReport:
    """``build --site``: the article set of ``folder`` read as ``serve`` reads it (the
    articles due at ``now``), the sent issues dated by the configured state database, and the
    feeds built into ``feeds``, written into ``out``."""
    limit = config.site.max_article_bytes
    articles = read_articles(folder, config.profiles, max_bytes=limit)
    with database_errors(config.database_url, "site unchanged: "):
        store = open_store(config.database_url)
        try:
            return write_site(config, out, articles, store, feeds, now=now)
        finally:
            store.close()
