"""When each feed entry was first published: kept for good, so a revision keeps its date."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa

from .database import Database, insert_or_skip, utc
from .schema import published

FEW = 500
"""Up to this many entries are looked up by key; more are picked from every row (one scan
costs less than that many lookups)."""
CHUNK = 5000
"""New entries are recorded this many rows a statement: a first build of a large set does not
hold every row's parameters at once."""


class Publications(Database):
    """The first publication time of every (lang, slug) the feeds have shown."""

    def first_published(
        self, entries: Sequence[tuple[str, str, datetime]], seen: datetime | None = None
    ) -> dict:
        """(lang, slug, candidate) → the first publication time, recording new ones.

        The first time an entry is seen, its candidate (its current update time) becomes its
        publication time for good, so a revision later keeps the original ``published``;
        ``seen`` (now) is kept beside it: when it appeared, however it is dated.
        """
        # The result holds a row per entry while a feed build renders: keyed by the same
        # tuple each time, each time of day made once (a day's translations share theirs).
        keys = {key: key for key in ((lang, slug) for lang, slug, _ in entries)}
        query = sa.select(published.c.lang, published.c.slug, published.c.published_at)
        if len(keys) <= FEW:  # a revision's few: looked up, not every row read
            langs, slugs = sorted({k[0] for k in keys}), sorted({k[1] for k in keys})
            query = query.where(published.c.lang.in_(langs), published.c.slug.in_(slugs))

        def recorded(db: sa.Connection) -> dict[tuple[str, str], datetime]:
            found: dict[tuple[str, str], datetime] = {}
            times: dict[datetime, datetime] = {}
            for lang, slug, at in db.execute(query):
                if (key := keys.get((lang, slug))) is not None:
                    found[key] = times.get(at) or times.setdefault(at, utc(at))
            return found

        with self._transaction() as db:
            known = recorded(db)
            new = [entry for entry in entries if (entry[0], entry[1]) not in known]
            # Two runs at once (a send beside a feed build, two scheduled jobs) may both
            # find an entry new: the first row written stands, and both return it.
            statement = insert_or_skip(db, published, published.c.lang, published.c.slug)
            for start in range(0, len(new), CHUNK):  # the rows' parameters a chunk at a time
                rows = [
                    {
                        "lang": lang,
                        "slug": slug,
                        "published_at": when.astimezone(UTC),
                        "seen_at": seen,
                    }
                    for lang, slug, when in new[start : start + CHUNK]
                ]
                db.execute(statement, rows)
            if new:
                known = recorded(db)
        return known

    def appeared(self, lang: str) -> dict[tuple[str, str], datetime]:
        """(lang, slug) → when each recorded article of ``lang`` appeared: first recorded, or
        for a row from before that was kept, its first publication time."""
        query = sa.select(
            published.c.lang,
            published.c.slug,
            sa.func.coalesce(published.c.seen_at, published.c.published_at),
        ).where(published.c.lang == lang)
        with self.engine.connect() as db:
            return {(row[0], row[1]): utc(row[2]) for row in db.execute(query)}
