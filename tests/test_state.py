"""The state database, on a SQLite file and on PostgreSQL: same code, same behaviour."""

from __future__ import annotations

import functools
import itertools
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory

from syndicate.state import Store, create_engine, open_store, schema
from syndicate.state.published import FEW
from tests.conftest import missing_real_part

POSTGRES_URL = os.environ.get(
    "SYNDICATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _fresh_postgres(request: pytest.FixtureRequest) -> str:
    """An empty schema of its own (dropped after the test): other test runs on the same
    server never see it."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.begin() as db:
            db.execute(sa.text(f"CREATE SCHEMA {schema}"))
    except sa.exc.OperationalError as exc:
        engine.dispose()
        missing_real_part(f"PostgreSQL not reachable at {POSTGRES_URL}: {exc.orig}")

    def drop() -> None:
        with engine.begin() as db:
            db.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()

    request.addfinalizer(drop)
    sep = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = (
        f"sqlite:///{tmp_path}/state.db" if request.param == "sqlite" else _fresh_postgres(request)
    )
    opened = open_store(url)
    yield opened
    opened.close()


def test_first_publication_time_is_kept_across_revisions(store: Store) -> None:
    first = datetime(2025, 12, 2, 8, 0, tzinfo=UTC)
    assert store.published.first_published([("en", "a", first)]) == {("en", "a"): first}
    later = first + timedelta(days=9)
    got = store.published.first_published([("en", "a", later), ("nl", "a", later)])
    assert got == {("en", "a"): first, ("nl", "a"): later}


def test_a_few_entries_are_looked_up_and_many_picked_from_every_row(store: Store) -> None:
    """Both ways answer alike: each key its own first time, whichever keys are asked."""
    first = datetime(2025, 12, 2, 8, 0, tzinfo=UTC)
    many = [(lang, f"s{n}", first + timedelta(hours=n)) for n in range(400) for lang in "ab"]
    assert len(many) > FEW
    assert store.published.first_published(many) == {
        (lang, slug): when for lang, slug, when in many
    }
    later = first + timedelta(days=900)
    # a few, crossing languages and slugs: ("a", "s1") and ("b", "s2") asked, not ("a", "s2")
    few = [("a", "s1", later), ("b", "s2", later), ("c", "s1", later)]
    assert store.published.first_published(few) == {
        ("a", "s1"): first + timedelta(hours=1),
        ("b", "s2"): first + timedelta(hours=2),
        ("c", "s1"): later,
    }
    again = store.published.first_published([(lang, slug, later) for lang, slug, _ in many])
    assert again == {(lang, slug): when for lang, slug, when in many}


def _at_once(calls: list[Any]) -> list[Any]:
    """Each of ``calls`` in a thread of its own, started together; their results, in order
    (an exception raised is the result of its call)."""
    start, results = threading.Barrier(len(calls)), [None] * len(calls)

    def run(n: int) -> None:
        start.wait()
        try:
            results[n] = calls[n]()
        except Exception as exc:
            results[n] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_runs_recording_the_same_new_entries_at_once_agree(store: Store) -> None:
    """A send beside a feed build (or two scheduled jobs) both find entries new: neither
    fails on the other's rows, and both return the times that stand."""
    url = store.engine.url.render_as_string(hide_password=False)
    others = [open_store(url) for _ in range(2)]
    first = datetime(2025, 12, 2, 8, 0, tzinfo=UTC)
    for round_ in range(5):
        slugs = [f"piece-{round_}-{n}" for n in range(300)]
        calls = [
            functools.partial(
                one.published.first_published,
                [("en", slug, first + timedelta(days=n)) for slug in slugs],
            )
            for n, one in enumerate(others)
        ]
        got = _at_once(calls)
        assert not [result for result in got if isinstance(result, Exception)], got
        assert (
            got[0] == got[1] == store.published.first_published([("en", s, first) for s in slugs])
        )
    for one in others:
        one.close()


def test_a_row_another_run_wrote_meanwhile_is_the_one_returned(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that finds its new entries all written by itself takes their times as given;
    where another run wrote one of them between its reading and its writing, the rows are
    read back, and that run's time stands."""
    from syndicate.state import published as module

    first, mine = datetime(2025, 12, 2, 8, 0, tzinfo=UTC), datetime(2025, 12, 9, tzinfo=UTC)
    plain = module.insert_or_skip

    def after_another_run(db: sa.Connection, *args: Any) -> sa.Insert:
        statement = plain(db, *args)
        db.execute(statement, [{"lang": "en", "slug": "b", "published_at": first}])
        return statement

    monkeypatch.setattr(module, "insert_or_skip", after_another_run)
    entries = [("en", slug, mine) for slug in "abc"]
    assert store.published.first_published(entries) == {
        ("en", "a"): mine,
        ("en", "b"): first,
        ("en", "c"): mine,
    }


def test_migrating_twice_changes_nothing(store: Store) -> None:
    store.published.first_published([("en", "a", datetime(2025, 1, 1, tzinfo=UTC))])
    reopened = open_store(str(store.engine.url.render_as_string(hide_password=False)))
    assert reopened.published.first_published([("en", "a", datetime(2026, 1, 1, tzinfo=UTC))]) == {
        ("en", "a"): datetime(2025, 1, 1, tzinfo=UTC)
    }
    reopened.close()


def test_the_head_revision_is_the_newest_migration(store: Store) -> None:
    """A database at HEAD_REVISION is taken as migrated without asking Alembic: it must be
    the revision Alembic itself upgrades to."""
    config = AlembicConfig()
    config.set_main_option("script_location", str(resources.files("syndicate") / "migrations"))
    assert ScriptDirectory.from_config(config).get_current_head() == schema.HEAD_REVISION
    assert schema.revision(store.engine) == schema.HEAD_REVISION


def _schema(engine: sa.Engine) -> dict[str, Any]:
    """Everything about the tables that a query could tell apart."""
    inspector = sa.inspect(engine)
    found: dict[str, Any] = {}
    for table in sorted(inspector.get_table_names()):
        found[table] = {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"], c.get("default"))
                for c in inspector.get_columns(table)
            ],
            "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
            "foreign keys": sorted(
                (fk["constrained_columns"], fk["referred_table"], fk["referred_columns"])
                for fk in inspector.get_foreign_keys(table)
            ),
            "indexes": sorted(
                (i["name"], i["column_names"], bool(i["unique"]))
                for i in inspector.get_indexes(table)
            ),
            "unique": sorted(
                sorted(u["column_names"]) for u in inspector.get_unique_constraints(table)
            ),
            "checks": sorted(c["sqltext"] for c in inspector.get_check_constraints(table)),
        }
    with engine.connect() as db:
        found["revision"] = db.execute(sa.text("SELECT version_num FROM alembic_version")).all()
    return found


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_new_database_gets_the_schema_the_migrations_make(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A new database is made from the tables in state/schema.py without loading Alembic: it must
    be the database the migrations make, or the next migration would meet another schema."""
    schemas = []
    for made_by in (schema.upgrade, schema.migrate):
        url = (
            f"sqlite:///{tmp_path}/{made_by.__name__}.db"
            if kind == "sqlite"
            else _fresh_postgres(request)
        )
        engine = create_engine(url)
        made_by(engine)
        schemas.append(_schema(engine))
        engine.dispose()
    assert schemas[0] == schemas[1]
    assert schemas[1]["revision"] == [(schema.HEAD_REVISION,)]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_every_downgrade_takes_the_schema_back_to_the_revision_before(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Upgraded one revision at a time, then downgraded one at a time: after each downgrade
    the schema is the one its revision before made (a release can be rolled back)."""
    config = AlembicConfig()
    config.set_main_option("script_location", str(resources.files("syndicate") / "migrations"))
    revisions = [r.revision for r in ScriptDirectory.from_config(config).walk_revisions()][::-1]
    url = f"sqlite:///{tmp_path}/steps.db" if kind == "sqlite" else _fresh_postgres(request)
    engine = create_engine(url)

    def step(move: Any, revision: str) -> None:
        with engine.begin() as db:
            config.attributes["connection"] = db
            move(config, revision)

    made = {}
    for revision in revisions:
        step(command.upgrade, revision)
        made[revision] = _schema(engine)
    for before, after in reversed(list(itertools.pairwise(revisions))):
        step(command.downgrade, before)
        assert _schema(engine) == made[before], f"the downgrade of {after}"
    step(command.downgrade, "base")
    assert sa.inspect(engine).get_table_names() == ["alembic_version"]
    engine.dispose()


@pytest.mark.parametrize("at", [None, "0008"])
def test_processes_may_migrate_one_postgresql_schema_at_once(
    at: str | None, request: pytest.FixtureRequest
) -> None:
    """A worker and the scheduler starting together after an upgrade (or on a new database):
    one migrates, the others wait for it and find the schema done."""
    url = _fresh_postgres(request)
    if at is not None:
        _upgrade_to(url, at).dispose()
    code = "import sys; from syndicate.state import open_store; open_store(sys.argv[1]).close()"
    starting = [
        subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errors = [process.communicate(timeout=300)[1] for process in starting]
    assert [process.returncode for process in starting] == [0] * 4, errors
    engine = create_engine(url)
    assert schema.revision(engine) == schema.HEAD_REVISION
    engine.dispose()


def test_threads_may_open_the_store_at_once(store: Store) -> None:
    """The scheduler's jobs run in threads and each opens the store, migrations and all."""
    url = store.engine.url.render_as_string(hide_password=False)
    errors: list[BaseException] = []

    def open_and_close() -> None:
        try:
            open_store(url).close()
        except BaseException as exc:  # any failure is the finding
            errors.append(exc)

    for _ in range(5):
        threads = [threading.Thread(target=open_and_close) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert errors == []


def test_subscriber_round_trip(store: Store, now: datetime) -> None:
    added = store.subscribers.add_subscriber(
        "reader@example.com",
        "de",
        ["procurement", "cost"],
        status="pending",
        consent_source="cli",
        now=now,
    )
    assert added.audiences == ("cost", "procurement")
    assert added.status == "pending" and added.created_at == now
    store.subscribers.set_status(added.id, "active", now)
    assert [s.email for s in store.subscribers.all("active")] == ["reader@example.com"]
    assert store.subscribers.remove_subscriber("reader@example.com")
    assert store.subscribers.subscriber("reader@example.com") is None


def _upgrade_to(url: str, target: str) -> sa.Engine:
    engine = create_engine(url)
    config = AlembicConfig()
    config.set_main_option("script_location", str(resources.files("syndicate") / "migrations"))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, target)
    return engine


def test_the_migration_merges_readers_who_differ_in_letter_case_only(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows from before addresses were matched without regard to case: one reader each."""
    engine = _upgrade_to(database_url, "0002")
    day = datetime(2025, 1, 1, tzinfo=UTC)
    rows = [  # (email, lang, audiences, status, source, created, updated)
        ("Reader@Example.org", "de", "cost", "active", "web form (de)", day, day),
        ("reader@example.org", "nl", "cost;strategy", "unsubscribed", "cli", day + timedelta(1),
         day + timedelta(3)),
        ("READER@example.org", "en", "cost", "active", "import:a.csv", day + timedelta(2),
         day + timedelta(2)),
        ("other@example.org", "en", "cost", "active", "cli", day, day),
    ]  # fmt: skip
    with engine.begin() as db:
        for email, lang, audiences, status, source, created, updated in rows:
            db.execute(
                schema.subscribers.insert().values(
                    email=email, lang=lang, audiences=audiences, status=status,
                    consent_source=source, created_at=created, updated_at=updated,
                )
            )  # fmt: skip
        ids = dict(db.execute(sa.select(schema.subscribers.c.email, schema.subscribers.c.id)).all())
        issue = db.execute(
            schema.issues.insert().values(
                key="en-cost", lang="en", audiences="cost", content_hash="h", subject="s",
                rendered="{}", created_at=day,
            )
        ).inserted_primary_key[0]  # fmt: skip
        for email in ("Reader@Example.org", "READER@example.org", "other@example.org"):
            db.execute(
                schema.deliveries.insert().values(
                    issue_id=issue, subscriber_id=ids[email], email=email, status="pending",
                    message_id=f"<{ids[email]}@x>", updated_at=day,
                )
            )  # fmt: skip
    engine.dispose()

    with caplog.at_level("WARNING", logger="syndicate.migrations"):
        store = open_store(database_url)
    [merged] = [r.getMessage() for r in caplog.records if r.name == "syndicate.migrations"]
    assert merged.startswith("merged 3 subscriber rows into Reader@Example.org")
    assert "reader@example.org" in merged and "READER@example.org" in merged
    found = list(store.subscribers.all())
    assert [s.email for s in found] == ["Reader@Example.org", "other@example.org"]
    reader = found[0]
    # The earliest consent, the most restrictive status, the latest choice of language.
    assert (reader.id, reader.consent_source, reader.created_at) == (
        ids["Reader@Example.org"], "web form (de)", day
    )  # fmt: skip
    assert reader.status == "unsubscribed"
    assert (reader.lang, reader.audiences) == ("nl", ("cost", "strategy"))
    # Any spelling finds the one reader, and a new spelling cannot make a second one.
    assert store.subscribers.subscriber("READER@EXAMPLE.ORG").id == reader.id
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as db:
        db.execute(
            schema.subscribers.insert().values(
                email="rEader@example.org", email_key="reader@example.org", lang="en",
                audiences="cost", status="active", consent_source="x", created_at=day,
                updated_at=day,
            )
        )  # fmt: skip
    # The ledger keeps one delivery per issue for the reader, nothing is lost.
    assert sorted(d.email for d in store.ledger.deliveries()) == [
        "READER@example.org", "Reader@Example.org", "other@example.org"
    ]  # fmt: skip
    store.close()


def test_the_migration_carries_old_bounce_counts_as_soft_ones(database_url: str) -> None:
    """The count before 0010 mixed hard and soft (any 5xx at the send counted): it goes on
    as soft bounces from its last one, so the upgrade drops nobody."""
    engine = _upgrade_to(database_url, "0009")
    day = datetime(2025, 1, 1, tzinfo=UTC)
    old = sa.table(
        "subscribers",
        *(sa.column(c) for c in ("email", "email_key", "lang", "audiences", "status")),
        *(sa.column(c) for c in ("consent_source", "created_at", "updated_at", "bounces")),
        sa.column("last_bounce_at"),
    )
    with engine.begin() as db:
        for email, bounces in (("twice@example.org", 2), ("never@example.org", 0)):
            db.execute(
                old.insert().values(
                    email=email, email_key=email, lang="en", audiences="cost", status="active",
                    consent_source="cli", created_at=day, updated_at=day, bounces=bounces,
                    last_bounce_at=day if bounces else None,
                )
            )  # fmt: skip
    engine.dispose()
    store = open_store(database_url)
    twice, never = (
        store.subscribers.subscriber(e) for e in ("twice@example.org", "never@example.org")
    )
    assert (twice.status, twice.bounces, twice.soft_bounces) == ("active", 0, 2)
    assert (never.bounces, never.soft_bounces) == (0, 0)
    [risk] = store.bounces.readers_at_risk()
    assert (risk.email, risk.soft_since, risk.counted_at) == ("twice@example.org", day, None)
    store.close()
