"""Every public URL of the site, in one place: what feeds, mails and pages link to, and the
paths the web app answers (web/app.py routes these same patterns).

Pure: strings built from ``site.base_url`` (and ``site.article_url``); no I/O. A path here is
in mail already sent and in feed readers' subscriptions, so none may change.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config

CONFIRM = "confirm"
UNSUBSCRIBE = "unsubscribe"
PREFERENCES = "preferences"
"""The purposes of reader links (tokens.py signs a token for one of them)."""
PREVIEW = "preview"
"""The purpose of the editor's link to a held issue's preview (a token of the issue's id)."""

HOME = "/{lang}/"
HOME_PAGE = "/{lang}/page/{number}/"
"""The older articles of a language's index, from page 2 on (page 1 is HOME)."""
ARTICLE = "/{lang}/{slug}/"
"""The app's article page: the default of ``site.article_url``."""
FEEDS = "/feeds/"
"""The folder ``syndicate build`` writes is served below this path."""
ISSUES = "/archive/{lang}/"
ISSUE = "/archive/{lang}/{issue}/"
"""The web pages of sent newsletter issues (not the RFC 5005 feed archives below FEEDS)."""
SITEMAP = "/sitemap.xml"
SITEMAP_PART = "/sitemap-{number}.xml"
"""A part of a sitemap too large for one file (sitemaps.org's limits): ``SITEMAP`` is then
the index of the parts."""
ROBOTS = "/robots.txt"
NOT_FOUND = "404.html"
"""The not-found page a static site has at its top and in each language's folder."""
SUBSCRIBE = "/subscribe"
HEALTH = "/healthz"
HELD_PREVIEW = "/preview/{token}"
"""A held issue's preview, while it waits for approval (the approval copy links to it)."""
BOUNCE_HOOK = "/hooks/bounces/{relay}"
"""Where a relay service posts its bounces and complaints (web/bounce_hooks.py)."""
READER = {
    CONFIRM: "/confirm/{token}",
    UNSUBSCRIBE: "/u/{token}",
    PREFERENCES: "/preferences/{token}",
}
"""Where each purpose's links lead."""


def site_url(config: Config) -> str:
    return f"{config.site.base_url}/"


def home_url(config: Config, lang: str) -> str:
    """The language's index page."""
    return config.site.base_url + HOME.format(lang=lang)


def home_page_url(config: Config, lang: str, number: int) -> str:
    """Page ``number`` of the language's index (1 is the index itself)."""
    path = HOME if number == 1 else HOME_PAGE.format(lang="{lang}", number=number)
    return config.site.base_url + path.format(lang=lang)


def article_url(config: Config, lang: str, slug: str) -> str:
    """An article's page, as ``site.article_url`` places it."""
    return config.site.article_url.format(base_url=config.site.base_url, lang=lang, slug=slug)


def feed_url(config: Config, name: str) -> str:
    """Absolute URL of a file in the feeds folder (``name`` relative to it)."""
    return f"{config.site.base_url}{FEEDS}{name}"


def feed_archive_name(lang: str, number: int) -> str:
    """The file (below the feeds folder) of a language's RFC 5005 archive document."""
    return f"archive/{lang}-{number}.atom.xml"


def issues_url(config: Config, lang: str) -> str:
    """The list of a language's sent issues."""
    return config.site.base_url + ISSUES.format(lang=lang)


def issue_url(config: Config, lang: str, name: str) -> str:
    """One sent issue's page; ``name`` is its file's stem in ``web.issues``."""
    return config.site.base_url + ISSUE.format(lang=lang, issue=name)


ISSUE_NAME = re.compile(r"([0-9]+)-([^/\\\x00]+)")
"""A sent issue's page name, as ``issue_name`` makes it: the issue's id and key (a digest's,
``<lang>-<audience>+<audience>...``). The issue pages serve exactly these names: one path
segment, never ``.`` or ``..`` (it starts with a digit), so no name leaves ``web.issues``."""


def issue_name(issue_id: int, key: str) -> str:
    """A sent issue's page name: its file's stem in ``web.issues`` and the last part of its URL."""
    return f"{issue_id}-{key}"


def reader_url(config: Config, purpose: str, token: str) -> str:
    """The absolute URL a reader follows for ``token`` of ``purpose``."""
    return config.site.base_url + READER[purpose].format(token=token)


def held_preview_url(config: Config, token: str) -> str:
    """The absolute URL of the held issue's preview that ``token`` (of PREVIEW) names."""
    return config.site.base_url + HELD_PREVIEW.format(token=token)
