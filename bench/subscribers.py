"""Subscriber import: ``import_subscribers`` against a bare insert of the same rows.

Imports 100,000 readers (mixed letter case, some on an IDN domain) into a fresh SQLite file,
then the same list again (every address known, nothing changed), and against a floor
measured in the same run: the same rows, already turned into column values, inserted by one
SQLAlchemy ``executemany`` into a fresh file of the same schema. The ratio is what an import
adds: each address's key, the lookup of the readers already there, the rules on who is new.

    .venv/bin/python bench/subscribers.py [READERS]
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from syndicate.state import open_store
from syndicate.state.schema import subscribers
from syndicate.state.subscribers import _imported
from syndicate.subscribers import ReaderRow

NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)


def readers(count: int) -> list[ReaderRow]:
    domains = ("Example.org", "bücher.example", "EXAMPLE.net")
    return [
        ReaderRow(f"Reader.{n}@{domains[n % 3]}", ("en", "nl", "de")[n % 3], ("cost",))
        for n in range(count)
    ]


def floor(folder: Path, rows: list[ReaderRow]) -> float:
    store = open_store(f"sqlite:///{folder}/floor.db")
    values = [_imported(r, status="active", consent_source="bench", now=NOW) for r in rows]
    start = time.perf_counter()
    with store.engine.begin() as db:
        db.execute(sa.insert(subscribers), values)
    seconds = time.perf_counter() - start
    store.close()
    return seconds


def imported(folder: Path, rows: list[ReaderRow]) -> tuple[float, float]:
    """Seconds of the first import, and of the same list again."""
    store = open_store(f"sqlite:///{folder}/import.db")
    times = []
    for expected in (len(rows), 0):
        start = time.perf_counter()
        added, updated = store.subscribers.import_subscribers(
            rows, status="active", consent_source="bench", now=NOW
        )
        times.append(time.perf_counter() - start)
        assert (added, updated) == (expected, 0), (added, updated)
    store.close()
    return times[0], times[1]


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rows = readers(count)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bare = floor(folder, rows)
        first, again = imported(folder, rows)
    print(f"{count:,} readers on SQLite")
    print(f"floor        {count / bare:9,.0f} readers/s  (one executemany of the column values)")
    print(f"import       {count / first:9,.0f} readers/s  {first / bare:5.2f}x floor")
    print(f"import again {count / again:9,.0f} readers/s  {again / bare:5.2f}x floor (all known)")


if __name__ == "__main__":
    main()
