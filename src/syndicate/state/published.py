"""When each feed entry was first published: kept for good, so a revision keeps its date."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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


class FirstPublished(Mapping[tuple[str, str], datetime]):
    """(lang, slug) → when that entry was first published, held per language."""

    def __init__(self, times: dict[str, dict[str, datetime | None]]) -> None:
        self._times = times

    def __getitem__(self, key: tuple[str, str]) -> datetime:
        lang, slug = key
        try:
            time = self._times[lang][slug]
        except KeyError:
            time = None
        if time is None:
            raise KeyError(key)
        return time

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for lang, slugs in self._times.items():
            yield from ((lang, slug) for slug, time in slugs.items() if time is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Publications(Database):
    """The first publication time of every (lang, slug) the feeds have shown."""

    def first_published(
        self, entries: Sequence[tuple[str, str, datetime]], seen: datetime | None = None
    ) -> FirstPublished:
        """(lang, slug, candidate) → the first publication time, recording new ones.

        The first time an entry is seen, its candidate (its current update time) becomes its
        publication time for good, so a revision later keeps the original ``published``;
        ``seen`` (now) is kept beside it: when it appeared, however it is dated.
        """
        # Filled in place: a time set for a slug already there keeps the entry's own slug
        # string as the key, so that the result held while a feed build renders adds a
        # dict slot a row and no string. Each time of day is made once.
        times: dict[str, dict[str, datetime | None]] = {}
        for lang, slug, _ in entries:
            (times.get(lang) or times.setdefault(lang, {}))[slug] = None
        query = sa.select(published.c.lang, published.c.slug, published.c.published_at)
        if len(entries) <= FEW:  # a revision's few: looked up, not every row read
            slugs = sorted({slug for _, slug, _ in entries})
            query = query.where(published.c.lang.in_(sorted(times)), published.c.slug.in_(slugs))

        made: dict[datetime, datetime] = {}

        def record(db: sa.Connection) -> None:
            for lang, slug, at in db.execute(query):
                slugs = times.get(lang)
                if slugs is not None and slug in slugs:
                    slugs[slug] = made.get(at) or made.setdefault(at, utc(at))

        with self._transaction() as db:
            record(db)
            new = [
                (lang, slug, when.astimezone(UTC))
                for lang, slug, when in entries
                if times[lang][slug] is None
            ]
            # Two runs at once (a send beside a feed build, two scheduled jobs) may both
            # find an entry new: the first row written stands, and both return it.
            statement = insert_or_skip(db, published, published.c.lang, published.c.slug)
            written = 0
            for start in range(0, len(new), CHUNK):  # the rows' parameters a chunk at a time
                rows = [
                    {
                        "lang": lang,
                        "slug": slug,
                        "published_at": when,
                        "seen_at": seen,
                    }
                    for lang, slug, when in new[start : start + CHUNK]
                ]
                written += db.execute(statement, rows).rowcount
            # Where the driver counts the rows written (SQLite does; psycopg's batches do
            # not), and they are all of them, no other run's are to be read back.
            if written == len(new):
                for lang, slug, at in new:
                    times[lang][slug] = made.get(at) or made.setdefault(at, at)
            else:
                record(db)
        return FirstPublished(times)

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
