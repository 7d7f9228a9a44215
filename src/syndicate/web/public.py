"""The public pages as HTML, from one ``SiteContent``: what ``serve`` answers and what
``build --site`` writes are made by these same functions, so both give the same bytes.

A public page carries nothing of its visitor (no CSRF field, no cookie): the subscribe form
is checked by its origin instead (``security.same_origin``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from markupsafe import Markup

from ..config import Config
from ..feeds import article_html, feed_audiences, feed_names, standfirst_html
from ..i18n import environment, language, long_date, template_roots, web_language
from ..model import Article, ArticleSet
from ..routes import ISSUE_NAME, article_url, feed_url, home_page_url, home_url
from .feeds import feed_content_type

IssueTimes = Callable[[str], Mapping[tuple[int, str], datetime]]
"""A language → when each of its issues was made, by (id, key) (``Store.issue_times``)."""


@dataclass(frozen=True)
class SiteContent:
    """What the public pages are made of: the config, one reading of the article set, the
    sent issues' pages and when each was made, and the site's path in links (``root``:
    "" at a host's top; under ``serve``, the request's root_path)."""

    config: Config
    articles: ArticleSet
    issues: Path
    """The folder of sent issues' pages: <issues>/<lang>/<issue>.html."""
    issue_times: IssueTimes
    zone: ZoneInfo
    root: str = ""

    @property
    def languages(self) -> list[str]:
        return list(self.config.site.languages)

    def has_feeds(self, lang: str) -> bool:
        """The feed build writes a language's feeds once it has an article."""
        return lang in self.articles.languages


def audience_choices(config: Config, lang: str) -> list[tuple[str, str]]:
    names = config.languages[lang].audience_names if lang in config.languages else {}
    return [(a, names.get(a, a)) for a in config.audiences]


def render_page(
    config: Config, root: str, template: str, lang: str, csrf: str, *, feeds: bool, **context: Any
) -> str:
    """A page's HTML: its words in one language, its own or wholly the fallback's (said in
    lang=), with what every page shows around it. ``root``: the site's path in links;
    ``feeds``: whether the language has feeds to link to (a language without an article has
    none yet)."""
    ui_lang = web_language(config, lang)
    env = environment(template_roots(config), ui_lang, language(config, ui_lang).translations)
    return env.get_template(f"web/{template}").render(
        site=config.site,
        site_title=config.title(ui_lang),
        lang=lang,
        ui_lang=ui_lang,
        long_date=long_date,
        audiences=audience_choices(config, ui_lang),
        root=root,
        languages=[(code, config.languages[code].name) for code in config.site.languages],
        csrf=csrf,
        feed_links=[
            (feed_url(config, name), feed_content_type(name)) for name in feed_names(lang).values()
        ]
        if feeds
        else [],
        **context,
    )


def public_page(content: SiteContent, template: str, lang: str, **context: Any) -> str:
    feeds = content.has_feeds(lang)
    return render_page(content.config, content.root, template, lang, "", feeds=feeds, **context)


FORMATS = ("Atom", "RSS", "JSON Feed")
"""The formats of a feed, in ``feed_names`` order, as the pages name them."""


def audience_feeds(config: Config, lang: str, audiences: list[str]) -> list[tuple[str, ...]]:
    """(URL, media type, audience name, format) of each audience feed of ``lang``."""
    names = dict(audience_choices(config, lang))
    return [
        (feed_url(config, name), feed_content_type(name), names[audience], kind)
        for audience in audiences
        for name, kind in zip(feed_names(lang, audience).values(), FORMATS, strict=True)
    ]


def page_count(content: SiteContent, lang: str) -> int:
    """How many pages the language's index has (one even when it has no article)."""
    size = content.config.site.page_size
    return max(1, -(-len(content.articles.in_language(lang)) // size))


def index_html(
    content: SiteContent, lang: str, number: int = 1, form: Mapping[str, Any] | None = None
) -> str | None:
    """Page ``number`` of the language's index, newest first, with the subscribe form (filled
    in with ``form`` when a post of it is refused); None past the last page."""
    config = content.config
    pages = page_count(content, lang)
    if not 1 <= number <= pages:
        return None
    size = config.site.page_size
    shown = content.articles.in_language(lang)[(number - 1) * size : number * size]
    return public_page(
        content,
        "index.html",
        lang,
        articles=shown,
        audience_feeds=audience_feeds(
            config, lang, feed_audiences(config, content.articles.in_language(lang))
        ),
        url=partial(article_url, config),
        number=number,
        pages=pages,
        page_url=partial(home_page_url, config, lang),
        # The indexes of the other languages are translations of the first page only.
        alternates=[(code, home_url(config, code)) for code in content.languages]
        if number == 1
        else [],
        form={"lang": lang, "audiences": (), "email": "", "error": None, **(form or {})},
    )


def versions(content: SiteContent, item: Article) -> list[Article]:
    """An article and its translations, by language."""
    return sorted((item, *content.articles.translations(item)), key=lambda a: a.lang)


def article_page_html(content: SiteContent, lang: str, slug: str) -> str | None:
    config = content.config
    item = content.articles.get(lang, slug)
    if item is None:
        return None
    every = versions(content, item)
    # A subtitle stands under the title on the page; in a feed, it opens the content.
    standfirst = standfirst_html(item)
    body = replace(item, blocks=item.blocks[1:]) if standfirst is not None else item
    return public_page(
        content,
        "article.html",
        lang,
        article=item,
        standfirst=None if standfirst is None else Markup(standfirst),
        url=partial(article_url, config),
        body=Markup(article_html(config, body)),  # the feeds' HTML, so both say the same
        alternates=[(a.lang, article_url(config, a.lang, a.slug)) for a in every],
        translations=[(a, config.languages[a.lang].name) for a in every if a is not item],
    )


@dataclass(frozen=True)
class SentIssue:
    name: str
    """Its page's name (``routes.ISSUE_NAME``)."""
    title: str
    path: Path


def issue_sends(content: SiteContent, lang: str) -> list[tuple[date, list[SentIssue]]]:
    """The sent issues of a language, one entry per send, newest first: the variants a send
    issued for its audiences were made at the same moment (by the store; a page put there by
    hand goes by its file's date), each entry its day and its variants in the order issued."""
    folder = content.issues / lang
    made = content.issue_times(lang)
    sends: dict[datetime, list[tuple[int, str, Path]]] = {}
    for path in folder.glob("*.html") if folder.is_dir() else ():
        named = ISSUE_NAME.fullmatch(path.stem)
        if not named:  # a page issue_file would not serve (a dot file, say): no link to it
            continue
        number = int(named[1])
        when = made.get((number, named[2])) or datetime.fromtimestamp(path.stat().st_mtime, UTC)
        sends.setdefault(when, []).append((number, path.stem, path))
    return [
        (
            when.astimezone(content.zone).date(),
            [SentIssue(name, html_title(path), path) for _, name, path in sorted(sends[when])],
        )
        for when in sorted(sends, reverse=True)
    ]


def issues_html(content: SiteContent, lang: str) -> str:
    sends = issue_sends(content, lang)
    # ``issues``: every variant on its own, as templates of earlier versions list them.
    issues = [(issue.name, issue.title, day) for day, variants in sends for issue in variants]
    return public_page(content, "archive.html", lang, sends=sends, issues=issues)


def issue_file(content: SiteContent, lang: str, name: str) -> Path | None:
    """One sent issue's page, as the newsletter's HTML was written; None if there is none."""
    path = content.issues / lang / f"{name}.html"
    return path if ISSUE_NAME.fullmatch(name) and path.is_file() else None


def html_title(path: Path) -> str:
    """A sent issue's <title>, or its file name when it has none."""
    head = path.read_text("utf-8", errors="replace")[:4096]
    found = re.search(r"<title[^>]*>(.*?)</title>", head, re.S | re.I)
    title = html.unescape(re.sub(r"\s+", " ", found[1])).strip() if found else ""
    return title or path.stem


def not_found_html(content: SiteContent, lang: str) -> str:
    """The not-found page in ``lang``: what a missing address below /<lang>/ shows."""
    return public_page(
        content, "notice.html", lang, kind="not_found", days=0, manage=None, address=None
    )


def languages_html(content: SiteContent) -> str:
    """The site's top page on a static host, which cannot pick a language per visitor: every
    language's index, each named in its own language."""
    config = content.config
    return public_page(
        content,
        "languages.html",
        content.languages[0],
        alternates=[(code, home_url(config, code)) for code in content.languages],
    )
