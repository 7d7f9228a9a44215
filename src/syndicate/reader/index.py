"""The feed index's codec: an index reading as one line of JSON.

How the feed build keeps each file's index reading until the next build, and how reader
processes hand index readings back. An index reading is a summary reading cut to what the
feeds show of an article that is not among the newest (its archive entry, its audiences, its
place): no body, references, bullets, content hash or SEO fields but the description where
the summary is empty (the entry's summary then). The build holds one for every article while
it renders, so each field left out is memory saved per article: it holds them even without
their text (title, summary, description left empty, ``text=False``), and decodes an article's
line again when a document shows it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import date
from functools import cache, lru_cache
from importlib import resources

from ..model import (
    Article,
    Diagnostic,
    Seo,
    Severity,
    Takeaways,
)
from .parse import Reading, unlisted

_JSON = json.JSONEncoder(separators=(",", ":"))
_NO_SEO = Seo()


def _description(article: Article) -> str | None:
    """The SEO description an index reading keeps: the entry's summary where the article's
    is empty."""
    return None if article.summary else article.seo.description


def _seo(description: str | None) -> Seo:
    return _NO_SEO if description is None else Seo(description=description)


@lru_cache(maxsize=1024)
def _takeaways(labelled: tuple[tuple[str, str], ...]) -> tuple[Takeaways, ...]:
    """Each audience's takeaways without bullets, as index readings keep them: the articles
    of a language repeat the same few sets, so each is made once and shared."""
    return tuple(unlisted(audience, label) for audience, label in labelled)


def index_reading(reading: Reading, *, text: bool = True) -> Reading:
    """A summary reading cut to an index reading (what ``decode_reading`` makes)."""
    article, problems = reading
    if article is None:
        return reading
    kept = Article(
        source=article.source,
        lang=article.lang,
        slug=article.slug,
        title=article.title if text else "",
        updated=article.updated,
        summary=article.summary if text else "",
        blocks=(),
        takeaways=_takeaways(tuple((t.audience, t.label) for t in article.takeaways)),
        references=(),
        seo=_seo(_description(article)) if text else _NO_SEO,
        content_hash="",
    )
    return kept, problems


@cache
def reader_revision() -> str:
    """A hash of the code that makes a reading (the parser, its dates, the language model's
    use, this codec), for the feed build's index: readings kept from another revision are not
    trusted. Where the sources are not installed, the package's version stands in (the build
    adds it anyway)."""
    digest = hashlib.sha256()
    package = resources.files("syndicate")
    for name in ("reader/parse.py", "reader/dates.py", "reader/index.py", "language.py"):
        try:
            digest.update(package.joinpath(name).read_bytes())
        except OSError:
            return ""
    return digest.hexdigest()


def encode_reading(reading: Reading) -> str:
    article, problems = reading
    found = [[p.line, p.severity.value, p.message] for p in problems]
    if article is None:
        return _JSON.encode([None, found])
    fields = [
        article.lang,
        article.slug,
        article.title,
        article.updated.isoformat(),
        article.summary,
        [[t.audience, t.label] for t in article.takeaways],
        _description(article),
    ]
    return _JSON.encode([fields, found])


def decode_reading(source: str, line: str, *, text: bool = True) -> Reading:
    """``encode_reading``'s reading of the file ``source`` (without its title, summary and
    description unless ``text``). Raises ValueError if ``line`` is not such a reading."""
    try:
        fields, found = json.loads(line)
        problems = [
            Diagnostic(source, number, Severity(level), said) for number, level, said in found
        ]
        if fields is None:
            return None, problems
        lang, slug, title, updated, summary, takeaways, description = fields
        article = Article(
            source=source,
            lang=sys.intern(lang),
            slug=slug,
            title=title if text else "",
            updated=date.fromisoformat(updated),
            summary=summary if text else "",
            blocks=(),
            takeaways=_takeaways(tuple(map(tuple, takeaways))),
            references=(),
            seo=_seo(description) if text else _NO_SEO,
            content_hash="",
        )
    except (TypeError, KeyError) as exc:
        raise ValueError(f"not an encoded reading: {exc}") from None
    return article, problems


def with_text(article: Article, line: str) -> Article:
    """The index reading ``article``, decoded without its text, with the text of ``line``,
    its encoded reading. Raises ValueError if ``line`` is not such a reading."""
    try:
        (_, _, title, _, summary, _, description), _ = json.loads(line)
    except TypeError as exc:
        raise ValueError(f"not an encoded reading: {exc}") from None
    return Article(
        source=article.source,
        lang=article.lang,
        slug=article.slug,
        title=title,
        updated=article.updated,
        summary=summary,
        blocks=(),
        takeaways=article.takeaways,
        references=(),
        seo=_seo(description),
        content_hash="",
    )
