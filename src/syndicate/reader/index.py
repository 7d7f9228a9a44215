"""The feed index's codec: a summary reading as one line of JSON.

How the feed build keeps each file's index reading until the next build, and how reader
processes hand index readings back. The body and the references, which a summary reading
leaves out, are not kept.
"""

from __future__ import annotations

import json
from datetime import date

from ..model import (
    Article,
    Diagnostic,
    Seo,
    Severity,
    Takeaways,
)
from .parse import Reading, unlisted

_JSON = json.JSONEncoder(separators=(",", ":"))


def encode_reading(reading: Reading) -> str:
    article, problems = reading
    found = [[p.line, p.severity.value, p.message] for p in problems]
    if article is None:
        return _JSON.encode([None, found])
    seo = article.seo
    fields = [
        article.lang,
        article.slug,
        article.title,
        article.updated.isoformat(),
        article.summary,
        [[t.audience, t.label, list(t.bullets)] for t in article.takeaways],
        [seo.title, seo.description, seo.excerpt, seo.primary_slug, list(seo.alt_slugs)],
        article.content_hash,
    ]
    return _JSON.encode([fields, found])


def decode_reading(source: str, line: str) -> Reading:
    """``encode_reading``'s reading of the file ``source``. Raises ValueError if ``line`` is
    not such a reading."""
    try:
        fields, found = json.loads(line)
        problems = [
            Diagnostic(source, number, Severity(level), text) for number, level, text in found
        ]
        if fields is None:
            return None, problems
        lang, slug, title, updated, summary, takeaways, seo, hashed = fields
        article = Article(
            source=source,
            lang=lang,
            slug=slug,
            title=title,
            updated=date.fromisoformat(updated),
            summary=summary,
            blocks=(),
            takeaways=tuple(
                Takeaways(a, label, tuple(b)) if b else unlisted(a, label)
                for a, label, b in takeaways
            ),
            references=(),
            seo=Seo(seo[0], seo[1], seo[2], seo[3], alt_slugs=tuple(seo[4])),
            content_hash=hashed,
        )
    except (TypeError, KeyError) as exc:
        raise ValueError(f"not an encoded reading: {exc}") from None
    return article, problems
