"""The data that flows between the stages: plain frozen values, no I/O, no library imports.

The reader produces these; feeds, digests, messages and delivery only consume them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from enum import StrEnum

AUDIENCES: tuple[str, ...] = ("architects", "cost", "procurement", "strategy", "ecosystem")
"""Audience ids in the order articles list them and digests show them."""


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem with one input, reported compiler-style: ``file:line: severity: message``."""

    file: str
    line: int | None
    severity: Severity
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.severity}: {self.message}"


@dataclass(frozen=True, slots=True)
class Reference:
    number: int
    text: str
    url: str | None


@dataclass(frozen=True, slots=True)
class Block:
    """A heading, a paragraph, a list's item, a quoted paragraph or a table's row of the body
    (the items next to each other of one kind are one list, the quoted paragraphs one
    quotation, the rows one table).

    ``parts`` is the text split at footnote marks: strings are text, ints are reference numbers,
    so renderers can link a mark to its reference without re-parsing superscripts.
    """

    # "standfirst" (a subtitle between the title and the date line) | "heading" | "paragraph" |
    # "item" (bulleted) | "numbered" (item) | "quote" | a table's "head" or "row" (its text the
    # row as written: the cells between pipes)
    kind: str
    parts: tuple[str | int, ...]
    line: int

    @property
    def text(self) -> str:
        """The text without footnote marks."""
        return "".join(p for p in self.parts if isinstance(p, str))

    @property
    def notes(self) -> tuple[int, ...]:
        return tuple(p for p in self.parts if isinstance(p, int))


@dataclass(frozen=True, slots=True)
class Takeaways:
    """The bullets one audience gets from one article."""

    audience: str  # an id from AUDIENCES (or a configured one)
    label: str  # the label as the article wrote it, e.g. "For cost optimization teams"
    bullets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Seo:
    title: str | None = None
    description: str | None = None
    excerpt: str | None = None
    primary_slug: str | None = None
    alt_slugs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Article:
    """One language version of one article.

    ``slug`` is the translation key shared by every language version; ``(lang, slug)`` is unique
    in an ArticleSet. ``content_hash`` is a hash of what a digest shows (title, date, takeaways), so
    an edit to the body alone, or lines wrapped anew, do not count as revisions in digests.
    """

    source: str
    lang: str
    slug: str
    title: str
    updated: date
    summary: str
    blocks: tuple[Block, ...]
    takeaways: tuple[Takeaways, ...]
    references: tuple[Reference, ...]
    seo: Seo
    content_hash: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.lang, self.slug)

    def takeaways_for(self, audience: str) -> Takeaways | None:
        return next((t for t in self.takeaways if t.audience == audience), None)

    def reference(self, number: int) -> Reference | None:
        return next((r for r in self.references if r.number == number), None)


@dataclass(frozen=True, slots=True)
class ArticleSet:
    """Every article that was read without error, plus every problem found on the way."""

    articles: tuple[Article, ...] = ()
    problems: tuple[Diagnostic, ...] = ()
    _by_slug: dict[str, list[Article]] = field(default_factory=dict, repr=False, compare=False)
    """Each slug's language versions, by language: the one lookup a set keeps (a feed build
    holds a set of every article while it renders)."""

    def __post_init__(self) -> None:
        for article in sorted(self.articles, key=lambda a: a.lang):
            self._by_slug.setdefault(article.slug, []).append(article)

    def __iter__(self) -> Iterator[Article]:
        return iter(self.articles)

    def __len__(self) -> int:
        return len(self.articles)

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(sorted({a.lang for a in self.articles}))

    def in_language(self, lang: str) -> tuple[Article, ...]:
        """Articles of one language, newest first, ties broken by slug for a stable order."""
        chosen = [a for a in self.articles if a.lang == lang]
        chosen.sort(key=lambda a: a.slug)
        chosen.sort(key=lambda a: a.updated, reverse=True)
        return tuple(chosen)

    def translations(self, article: Article) -> tuple[Article, ...]:
        """The other language versions of ``article``, ordered by language."""
        return tuple(a for a in self._by_slug.get(article.slug, ()) if a.lang != article.lang)

    def get(self, lang: str, slug: str) -> Article | None:
        versions = self._by_slug.get(slug, ())
        return next((a for a in reversed(versions) if a.lang == lang), None)

    @property
    def has_errors(self) -> bool:
        return any(p.severity is Severity.ERROR for p in self.problems)


def variant_key(lang: str, audiences: Iterable[str]) -> str:
    """The id of a group's digests: its language and audiences, e.g. ``nl-cost+strategy``."""
    return f"{lang}-{'+'.join(sorted(audiences))}"


@dataclass(frozen=True, slots=True)
class DigestItem:
    """One article in a digest, with only the takeaways of the digest's audiences."""

    article: Article
    takeaways: tuple[Takeaways, ...]
    revised: bool = False
    """An earlier version of this article already went out in this digest."""


@dataclass(frozen=True, slots=True)
class Digest:
    """What one (language, audience set, window) issue contains; rendered once, sent to many."""

    lang: str
    audiences: tuple[str, ...]
    """Audience ids in display order."""
    items: tuple[DigestItem, ...]
    since: date | None = None
    more: int = 0
    """Articles of the window that the digest does not list (over the cap): one line with a
    link to the rest."""
    broadcast: bool = False
    """One article sent now as an issue of its own (``syndicate broadcast``), beside the
    group's digests: its key names the article, and it is no digest's last issue."""

    @property
    def key(self) -> str:
        """Stable id of the variant, e.g. ``nl-cost+strategy``; also the preview file name.
        A broadcast's adds its article's slug: ``nl-cost+strategy.some-article``."""
        variant = variant_key(self.lang, self.audiences)
        return f"{variant}.{self.items[0].article.slug}" if self.broadcast else variant

    @property
    def content_hash(self) -> str:
        """Changes exactly when what the digest shows changes."""
        h = hashlib.sha256(self.key.encode())
        for item in self.items:
            h.update(
                f"\n{item.article.slug}:{item.article.content_hash}:{int(item.revised)}".encode()
            )
        if self.more:
            h.update(f"\n+{self.more}".encode())
        return h.hexdigest()[:32]

    def shortened(self, listed: int) -> Digest:
        """The same digest listing only its first (newest) ``listed`` items; the others join
        the ones counted in ``more``."""
        if listed >= len(self.items):
            return self
        rest = len(self.items) - listed
        return replace(self, items=self.items[:listed], more=self.more + rest)
