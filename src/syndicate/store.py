"""The state database: every SQL statement of the project lives here.

SQLAlchemy Core, so one code path serves SQLite (the default: a file, nothing to install) and
PostgreSQL. The schema is owned by the Alembic migrations in ``migrations/``; ``open_store``
brings any database up to date before use.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy.engine import Engine

metadata = sa.MetaData()

published = sa.Table(
    "published",
    metadata,
    sa.Column("lang", sa.String(35), primary_key=True),
    sa.Column("slug", sa.String(200), primary_key=True),
    sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
)

subscribers = sa.Table(
    "subscribers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("email", sa.String(320), nullable=False, unique=True),
    sa.Column("lang", sa.String(35), nullable=False),
    sa.Column("audiences", sa.String(400), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("consent_source", sa.String(200), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("bounces", sa.Integer, nullable=False, server_default="0"),
)

SUBSCRIBER_STATUSES = ("pending", "active", "unsubscribed", "bounced")


def utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Subscriber:
    id: int
    email: str
    lang: str
    audiences: tuple[str, ...]
    status: str
    consent_source: str
    created_at: datetime
    bounces: int = 0


def _subscriber(row: sa.Row) -> Subscriber:
    return Subscriber(
        id=row.id,
        email=row.email,
        lang=row.lang,
        audiences=tuple(a for a in row.audiences.split(";") if a),
        status=row.status,
        consent_source=row.consent_source,
        created_at=utc(row.created_at),
        bounces=row.bounces,
    )


def create_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get their folder, WAL and a busy timeout."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, pool_pre_ping=True)
    if engine.dialect.name == "sqlite":

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection, _record) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

    return engine


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration (idempotent)."""
    config = AlembicConfig()
    config.set_main_option("script_location", str(resources.files("syndicate") / "migrations"))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


class Store:
    """The project's persistent state, on one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def close(self) -> None:
        self.engine.dispose()

    # -- feeds -----------------------------------------------------------------------------

    def first_published(self, entries: Sequence[tuple[str, str, datetime]]) -> dict:
        """(lang, slug, candidate) → the first publication time, recording new ones.

        The first time an entry is seen, its candidate (its current update time) becomes its
        publication time for good, so a revision later keeps the original ``published``.
        """
        keys = {(lang, slug) for lang, slug, _ in entries}
        with self.engine.begin() as db:
            known = {
                (row.lang, row.slug): utc(row.published_at)
                for row in db.execute(sa.select(published))
                if (row.lang, row.slug) in keys
            }
            new = [
                {"lang": lang, "slug": slug, "published_at": when.astimezone(UTC)}
                for lang, slug, when in entries
                if (lang, slug) not in known
            ]
            if new:
                db.execute(sa.insert(published), new)
        known.update({(n["lang"], n["slug"]): n["published_at"] for n in new})
        return known

    # -- subscribers -----------------------------------------------------------------------

    def add_subscriber(
        self,
        email: str,
        lang: str,
        audiences: Sequence[str],
        *,
        status: str,
        consent_source: str,
        now: datetime,
    ) -> Subscriber:
        """Insert a reader, or update language/audiences/status of an existing address."""
        values = {
            "lang": lang,
            "audiences": ";".join(sorted(set(audiences))),
            "status": status,
            "updated_at": now,
        }
        with self.engine.begin() as db:
            row = db.execute(sa.select(subscribers).where(subscribers.c.email == email)).first()
            if row is None:
                db.execute(
                    sa.insert(subscribers).values(
                        email=email, consent_source=consent_source, created_at=now, **values
                    )
                )
            else:
                db.execute(sa.update(subscribers).where(subscribers.c.id == row.id).values(values))
        found = self.subscriber(email)
        assert found is not None
        return found

    def subscriber(self, email: str) -> Subscriber | None:
        with self.engine.connect() as db:
            row = db.execute(sa.select(subscribers).where(subscribers.c.email == email)).first()
        return _subscriber(row) if row else None

    def subscriber_by_id(self, subscriber_id: int) -> Subscriber | None:
        with self.engine.connect() as db:
            row = db.execute(
                sa.select(subscribers).where(subscribers.c.id == subscriber_id)
            ).first()
        return _subscriber(row) if row else None

    def set_status(self, subscriber_id: int, status: str, now: datetime) -> None:
        with self.engine.begin() as db:
            db.execute(
                sa.update(subscribers)
                .where(subscribers.c.id == subscriber_id)
                .values(status=status, updated_at=now)
            )

    def remove_subscriber(self, email: str) -> bool:
        with self.engine.begin() as db:
            result = db.execute(sa.delete(subscribers).where(subscribers.c.email == email))
        return result.rowcount > 0

    def subscribers(self, status: str | None = None) -> Iterator[Subscriber]:
        query = sa.select(subscribers).order_by(subscribers.c.id)
        if status is not None:
            query = query.where(subscribers.c.status == status)
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        return map(_subscriber, rows)


def open_store(url: str) -> Store:
    """Connect to the state database at ``url`` and migrate it to the current schema."""
    engine = create_engine(url)
    migrate(engine)
    return Store(engine)
