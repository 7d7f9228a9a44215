"""When each feed entry was first published: kept for good, so a revision keeps its date."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from .database import Database, utc
from .schema import published


class Publications(Database):
    """The first publication time of every (lang, slug) the feeds have shown."""

    def first_published(self, entries: Sequence[tuple[str, str, datetime]]) -> dict:
        """(lang, slug, candidate) → the first publication time, recording new ones.

        The first time an entry is seen, its candidate (its current update time) becomes its
        publication time for good, so a revision later keeps the original ``published``.
        """
        keys = {(lang, slug) for lang, slug, _ in entries}
        with self._transaction() as db:
            rows = db.execute(
                sa.select(published.c.lang, published.c.slug, published.c.published_at)
            )
            known = {(lang, slug): utc(at) for lang, slug, at in rows if (lang, slug) in keys}
            new: list[dict[str, Any]] = [
                {"lang": lang, "slug": slug, "published_at": when.astimezone(UTC)}
                for lang, slug, when in entries
                if (lang, slug) not in known
            ]
            if new:
                db.execute(sa.insert(published), new)
        known.update({(n["lang"], n["slug"]): n["published_at"] for n in new})
        return known
