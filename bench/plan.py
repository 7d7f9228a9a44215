"""Planning a send for a large list: an issue's delivery rows, written as a send writes them,
against a bare ``INSERT … SELECT`` of the same rows in the same run.

For each list size (100,000 and 1,000,000 readers by default) and each database (a SQLite
file, and PostgreSQL when ``SYNDICATE_TEST_POSTGRES_URL`` names one), the readers are made
once, then two child processes each measure one thing, with its time and peak resident
memory: syndicate opening an issue and planning all of its readers (``send.plan_chunk``
readers a transaction, the reader query, each row's Message-ID and batch, the batches'
jobs as the local engine plans them), and the bare statement that writes the same rows with
nothing around it (the floor).

Targets: memory flat (the largest list's peak within 1.2x the smallest's), time linear in
readers, and within 2x the bare insert.

Then the issue is planned again (``plan_unreached``, as a broadcast run again does) after
one reader in fifty lost their delivery (readers who moved into the group): every reader
of the group is looked at for a delivery of the issue, and the one in fifty written.
Target: within the bare insert of the whole list.

Usage: python bench/plan.py [READERS ...] [--sqlite-only]
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from syndicate.sending.dispatch import LocalDispatcher
from syndicate.sending.messages import message_ids
from syndicate.state import PLAN_CHUNK, Planning, open_store

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
DOMAIN = "news.example.org"
AUDIENCES = "architects;cost"
BATCH = 500


def make_readers(url: str, readers: int) -> None:
    """``readers`` active readers of one variant, and as many of others around them (a
    planner must skip those), written by the database itself."""
    open_store(url).close()
    engine = sa.create_engine(url)
    every = 2 * readers
    columns = "email, email_key, lang, audiences, status, consent_source, created_at, updated_at"
    variant = f"CASE WHEN n % 2 = 0 THEN '{AUDIENCES}' ELSE 'strategy' END"
    values = (
        f"'reader' || n || '@example.org', 'reader' || n || '@example.org', 'en', {variant}, "
        "'active', 'bench', :now, :now"
    )
    if engine.dialect.name == "sqlite":
        numbers = (
            f"WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq "
            f"WHERE n < {every}) SELECT {values} FROM seq"
        )
    else:
        numbers = f"SELECT {values} FROM generate_series(1, {every}) AS n"
    with engine.begin() as db:
        db.execute(sa.text(f"INSERT INTO subscribers ({columns}) {numbers}"), {"now": NOW})
        if engine.dialect.name == "postgresql":
            db.execute(sa.text("ANALYZE subscribers"))
    engine.dispose()


def measured(work: Callable[[str], int], url: str, out: multiprocessing.Queue) -> None:
    started = time.perf_counter()
    rows = work(url)
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.put((seconds, peak_kib / 1024, rows))


def planning() -> Planning:
    """As a send plans: the digests' Message-IDs, the local engine's jobs."""
    return Planning(
        message_id=message_ids(DOMAIN),
        now=NOW,
        within=LocalDispatcher().plan,
        batch_size=BATCH,
        chunk=PLAN_CHUNK,
    )


def syndicate_plan(url: str) -> int:
    """An issue opened and planned to its last reader, as a send does."""
    store = open_store(url)
    plan = planning()
    issue = store.planning.open_issue(
        key=f"bench-{uuid.uuid4().hex}",
        lang="en",
        audiences=("architects", "cost"),
        content_hash="0" * 64,
        subject="Key takeaways",
        rendered="{}",
        articles=[],
        plan=plan,
    )
    assert issue is not None
    cursor = issue.planned_through
    while cursor is not None:
        cursor = store.planning.plan_chunk(issue.id, cursor, plan)
    written = store.ledger.delivery_counts()
    store.close()
    return sum(n for (issue_id, _, _), n in written.items() if issue_id == issue.id)


def unreach(url: str) -> int:
    """One reader in fifty of the planned issue without a delivery (the group's ids are even;
    done before the clock starts)."""
    engine = sa.create_engine(url)
    with engine.begin() as db:
        gone = db.execute(
            sa.text(
                "DELETE FROM deliveries WHERE subscriber_id % 100 = 0 AND issue_id = "
                "(SELECT id FROM issues WHERE key LIKE 'bench-%')"
            )
        ).rowcount
        if engine.dialect.name == "postgresql":
            db.execute(sa.text("ANALYZE deliveries"))
    engine.dispose()
    return gone


def syndicate_replan(url: str) -> int:
    """The planned issue planned again for the readers without a delivery of it."""
    store = open_store(url)
    plan = planning()
    with store.engine.connect() as db:
        issue_id = db.execute(sa.text("SELECT id FROM issues WHERE key LIKE 'bench-%'")).scalar()
    added = store.planning.plan_unreached(issue_id, plan)
    store.close()
    return added


def bare_insert(url: str) -> int:
    """The same rows, from one statement and nothing around it."""
    engine = sa.create_engine(url)
    with engine.begin() as db:
        issue = db.execute(
            sa.text(
                "INSERT INTO issues (key, lang, audiences, content_hash, subject, rendered, "
                "created_at, state) VALUES (:key, 'en', :audiences, :hash, 's', '{}', :now, "
                "'issued') RETURNING id"
            ),
            {
                "key": f"bare-{uuid.uuid4().hex}",
                "audiences": AUDIENCES,
                "hash": "1" * 64,
                "now": NOW,
            },
        ).scalar_one()
        rows = db.execute(
            sa.text(
                "INSERT INTO deliveries (issue_id, subscriber_id, email, message_id, status, "
                "updated_at, batch_no) SELECT :issue, id, email, "
                "'<digest.' || :issue || '.' || id || '@' || :domain || '>', 'pending', :now, "
                "(row_number() OVER (ORDER BY id) - 1) / :batch FROM subscribers "
                "WHERE lang = 'en' AND audiences = :audiences AND status = 'active' ORDER BY id"
            ),
            {"issue": issue, "domain": DOMAIN, "now": NOW, "audiences": AUDIENCES, "batch": BATCH},
        ).rowcount
    engine.dispose()
    return rows


def in_child(work: Callable[[str], int], url: str) -> tuple[float, float, int]:
    """(seconds, peak MiB, rows) of ``work`` in a process of its own."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=measured, args=(work, url, out))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise SystemExit(f"{work.__name__} failed in its process (exit code {child.exitcode})")
    return out.get()


def databases(sqlite_only: bool) -> list[tuple[str, Callable[[int], str]]]:
    folder = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    found: list[tuple[str, Callable[[int], str]]] = [
        ("sqlite", lambda n: f"sqlite:///{folder / f'state-{n}.sqlite'}")
    ]
    base = os.environ.get("SYNDICATE_TEST_POSTGRES_URL")
    if base and not sqlite_only:

        def schema(n: int) -> str:
            name = f"plan_bench_{n}_{uuid.uuid4().hex[:6]}"
            engine = sa.create_engine(base)
            with engine.begin() as db:
                db.execute(sa.text(f"CREATE SCHEMA {name}"))
            engine.dispose()
            return f"{base}?options=-csearch_path%3D{name}"

        found.append(("postgresql", schema))
    return found


def main(argv: list[str]) -> None:
    sizes = [int(arg) for arg in argv if arg.isdigit()] or [100_000, 1_000_000]
    for name, url_for in databases("--sqlite-only" in argv):
        print(f"{name}: plan_chunk {PLAN_CHUNK}, batches of {BATCH}")
        first: tuple[int, float, float] | None = None
        for readers in sizes:
            url = url_for(readers)
            make_readers(url, readers)
            floor, _, bare_rows = in_child(bare_insert, url)
            seconds, peak, rows = in_child(syndicate_plan, url)
            assert rows == bare_rows == readers, (rows, bare_rows, readers)
            per_reader = seconds / readers * 1e6
            line = (
                f"  {readers:>9,} readers: planned in {seconds:6.2f} s ({per_reader:.1f} µs a "
                f"reader), bare insert {floor:6.2f} s, ratio {seconds / floor:.2f}x "
                f"(target <= 2x); peak {peak:.0f} MiB"
            )
            if first is None:
                first = (readers, per_reader, peak)
            else:
                line += (
                    f"; per reader {per_reader / first[1]:.2f}x and peak {peak / first[2]:.2f}x "
                    f"the {first[0]:,} list's (targets ~1x, <= 1.2x)"
                )
            print(line, flush=True)
            gone = unreach(url)
            again, _, added = in_child(syndicate_replan, url)
            assert added == gone, (added, gone)
            print(
                f"  {'':>9} planned again: {added:,} without a delivery found among "
                f"{readers:,} in {again:6.2f} s, {again / floor:.2f}x the bare insert of all "
                "(target <= 1x)",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
