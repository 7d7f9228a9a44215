"""The state database: every SQL statement of the project lives here.

SQLAlchemy Core, so one code path serves SQLite (the default: a file, nothing to install) and
PostgreSQL. The schema is owned by the Alembic migrations in ``migrations/``; ``open_store``
brings any database up to date before use (a new one straight from the tables below).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .errors import DatabaseError, SyndicateError
from .subscribers import STATUSES, ReaderRow, address_key

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
    # The address as the reader gave it is ``email``; ``email_key`` (``address_key``) is what
    # makes two spellings one reader, unique on both databases alike (SQLite's lower() and
    # case-insensitive collations stop at ASCII).
    sa.Column("email_key", sa.String(320), nullable=False),
    sa.Column("timezone", sa.String(64), nullable=True),  # IANA name; none: the site's
    sa.Index("ix_subscribers_email_key", "email_key", unique=True),
)

issues = sa.Table(
    "issues",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("key", sa.String(200), nullable=False),
    sa.Column("lang", sa.String(35), nullable=False),
    sa.Column("audiences", sa.String(400), nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("rendered", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("state", sa.String(20), nullable=False, server_default="issued"),
    # the same content is never issued twice; a rejected or expired issue was never issued
    sa.Index(
        "uq_issues_content",
        "lang",
        "audiences",
        "content_hash",
        unique=True,
        sqlite_where=sa.text("state IN ('issued', 'held')"),
        postgresql_where=sa.text("state IN ('issued', 'held')"),
    ),
)
"""An issue is ``issued``, or with ``email.approval`` first ``held`` (its deliveries too) until
an editor approves it (``issued``), rejects it (``rejected``) or it ``expired``."""

issue_articles = sa.Table(
    "issue_articles",
    metadata,
    sa.Column("issue_id", sa.Integer, sa.ForeignKey("issues.id"), primary_key=True),
    sa.Column("lang", sa.String(35), primary_key=True),
    sa.Column("slug", sa.String(200), primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False),
)

send_runs = sa.Table(
    "send_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
)

deliveries = sa.Table(
    "deliveries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("issue_id", sa.Integer, sa.ForeignKey("issues.id"), nullable=False),
    sa.Column("subscriber_id", sa.Integer, nullable=False),
    sa.Column("email", sa.String(320), nullable=False),
    sa.Column("message_id", sa.String(255), nullable=False, unique=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("run_id", sa.Integer, nullable=True),
    sa.Column("reply", sa.Text, nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    # not taken before this time: a local-time digest reaches each zone at its hour
    sa.Column("not_before", sa.DateTime(timezone=True), nullable=True),
    sa.UniqueConstraint("issue_id", "subscriber_id", name="uq_deliveries_reader"),
    sa.Index("ix_deliveries_status", "status", "id"),
)

bounce_reports = sa.Table(
    "bounce_reports",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("subscriber_id", sa.Integer, nullable=False),
    sa.Column("delivery_id", sa.Integer, nullable=True),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("status", sa.String(40), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("matched_by", sa.String(20), nullable=False),
    sa.Column("counted", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_bounce_reports_subscriber", "subscriber_id", "id"),
)
"""Every bounce, delay or complaint that arrived as mail and was matched to a reader, once
(``digest``: the SHA-256 of the message); ``counted`` when it added to the reader's bounces."""

SUBSCRIBER_STATUSES = STATUSES
DELIVERY_STATUSES = ("held", "pending", "sending", "sent", "failed", "uncertain", "skipped")
"""A delivery is ``pending`` until its message is complete but for its end of data; ``sending``
from just before the end of data (the final dot) is written until the reply is recorded (from
then on the server may accept it at any moment); then ``sent`` (the server said 250),
``failed`` (5xx, or the message could not be built or sent at all), ``skipped`` (the reader left
first, or is a sample reader and a real server is set) or ``uncertain`` (the connection or the
run died while ``sending``: it may or may not have arrived, so it is never resent without a
person deciding). Before its end of data a message is only reserved, not recorded: a run that
dies then leaves the row pending, and the server discards the message it never saw end.
``held``: its issue waits for an editor's approval; released, it is pending."""


def _run_lock(db: sa.Connection) -> int:
    """First key of the PostgreSQL advisory locks that mark a send run as alive, one per schema
    (run ids count from 1 in each). The run and each of its workers hold it shared, on their
    own sessions, so a run is dead only when none is left; a worker that lost its session
    fails at its next statement, before the end of its next data."""
    schema = db.execute(sa.text("SELECT current_schema()")).scalar()
    digest = hashlib.sha256(f"syndicate.send:{schema}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


_LEFT = ("unsubscribed", "bounced")
"""Statuses of a reader who left (or whose mailbox did): only ``--resubscribe`` undoes them."""


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
    """When the reader gave their consent (``consent_source`` says where)."""
    bounces: int = 0
    updated_at: datetime | None = None
    timezone: str | None = None
    """IANA time zone; None: the site's."""


@dataclass(frozen=True, slots=True)
class Issue:
    """One digest variant with new content, rendered once and kept for every reader's message."""

    id: int
    key: str
    lang: str
    audiences: tuple[str, ...]
    content_hash: str
    subject: str
    rendered: str
    """The rendered variant as the pipeline serialised it; every reader's message is built
    from it, so a run that resumes after a crash sends exactly what was issued."""
    created_at: datetime
    state: str = "issued"


@dataclass(frozen=True, slots=True)
class Claim:
    """A delivery a worker has taken: one message to one reader, reserved while it is written."""

    id: int
    issue_id: int
    subscriber_id: int
    email: str
    message_id: str


@dataclass(frozen=True, slots=True)
class Delivery:
    id: int
    issue_key: str
    email: str
    message_id: str
    status: str
    attempts: int
    reply: str | None
    issue_id: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Bounced:
    """The delivery a bounce report is about (None when only the reader is known)."""

    delivery_id: int | None
    subscriber_id: int
    email: str


@dataclass(frozen=True, slots=True)
class AtRisk:
    """A reader with bounces or complaints on record, and the latest of them."""

    email: str
    status: str
    bounces: int
    """Permanent failures counted (at the send and from bounce mail)."""
    temporary: int
    complaints: int
    last_kind: str | None
    last_status: str | None
    last_reason: str | None
    last_at: datetime | None


_STANDING = ("issued", "held")
"""Issue states whose content counts as issued (the window, the same-content rule)."""

_DUE = sa.or_(deliveries.c.not_before.is_(None), deliveries.c.not_before <= sa.bindparam("now"))
"""A delivery's time has come (a local-time digest's rows wait for their reader's hour)."""

# The statements of every delivery, built once (SQLAlchemy then reuses their compiled form).
_TAKE = (
    sa.select(
        deliveries.c.id,
        deliveries.c.issue_id,
        deliveries.c.subscriber_id,
        deliveries.c.email,
        deliveries.c.message_id,
    )
    .where(
        deliveries.c.status == "pending",
        sa.select(subscribers.c.id)
        .where(subscribers.c.id == deliveries.c.subscriber_id, subscribers.c.status == "active")
        .exists(),
        # what this run gave back after its retries waits for the next run
        sa.or_(deliveries.c.run_id.is_(None), deliveries.c.run_id != sa.bindparam("run_id")),
        _DUE,
    )
    .order_by(deliveries.c.id)
    .limit(sa.bindparam("n", type_=sa.Integer))
    .with_for_update(skip_locked=True, of=deliveries)
)

_TAKE_BACK = (
    sa.select(deliveries.c.id)
    .where(deliveries.c.id == sa.bindparam("delivery_id"), deliveries.c.status == "pending")
    .with_for_update(skip_locked=True)
)

_SENDING = (
    sa.update(deliveries)
    .where(deliveries.c.id == sa.bindparam("delivery_id"))
    .values(status="sending", run_id=sa.bindparam("run_id"), updated_at=sa.bindparam("now"))
)

# Every try ends in one of these two (and counts as an attempt).
_FINISH = (
    sa.update(deliveries)
    .where(deliveries.c.id == sa.bindparam("delivery_id"))
    .values(
        status=sa.bindparam("status"),
        reply=sa.bindparam("reply"),
        attempts=deliveries.c.attempts + 1,
        updated_at=sa.bindparam("now"),
    )
)

_GIVE_BACK = (
    sa.update(deliveries)
    .where(deliveries.c.id == sa.bindparam("delivery_id"))
    .values(
        status="pending",
        reply=sa.bindparam("reply"),
        run_id=sa.bindparam("run_id"),
        attempts=deliveries.c.attempts + 1,
        updated_at=sa.bindparam("now"),
    )
)

_BOUNCES = (
    sa.update(subscribers)
    .where(subscribers.c.id == sa.bindparam("subscriber_id"))
    .values(bounces=subscribers.c.bounces + 1, updated_at=sa.bindparam("now"))
)

_BOUNCED = (
    sa.update(subscribers)
    .where(
        subscribers.c.id == sa.bindparam("subscriber_id"),
        subscribers.c.bounces >= sa.bindparam("max_bounces"),
    )
    .values(status="bounced")
)


def _database_error(exc: BaseException, dialect: str) -> DatabaseError:
    """One line for a failed database statement: what failed, in the driver's own words."""
    orig = getattr(exc, "orig", None) or exc
    detail = next(iter(str(orig).strip().splitlines()), "") or type(orig).__name__
    kinds = {c.__name__ for c in type(orig).__mro__}
    lost = dialect == "postgresql" and bool(kinds & {"OperationalError", "InterfaceError"})
    return DatabaseError(f"{'database connection lost' if lost else 'database error'} ({detail})")


def _end_session(db: sa.Connection) -> None:
    """Close a connection's session for good (not back into the pool), and with it the session
    advisory locks it holds; a session already lost is simply dropped."""
    with suppress(sa.exc.SQLAlchemyError):
        db.invalidate()


def _audiences(value: Sequence[str]) -> str:
    """Audience ids as stored: sorted, ';'-separated (the order never matters)."""
    return ";".join(sorted(set(value)))


def _audience_ids(stored: str) -> tuple[str, ...]:
    return tuple(a for a in stored.split(";") if a)


def _subscriber(row: sa.Row) -> Subscriber:
    return Subscriber(
        id=row.id,
        email=row.email,
        lang=row.lang,
        audiences=_audience_ids(row.audiences),
        status=row.status,
        consent_source=row.consent_source,
        created_at=utc(row.created_at),
        bounces=row.bounces,
        updated_at=utc(row.updated_at),
        timezone=row.timezone,
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
            # WAL + NORMAL: a commit survives the process being killed (only power loss can
            # lose the last ones), at a fraction of the cost of an fsync per delivery.
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

    return engine


# Alembic runs a migration through module-level proxies (``alembic.context``): two threads
# migrating at once (the scheduler's jobs each open the store) undo each other's.
_MIGRATING = threading.Lock()


HEAD_REVISION = "0005"
"""The newest migration's revision; a test holds it to what Alembic finds."""


# Alembic's own record of the revision, as its ``upgrade`` creates it.
_alembic_version = sa.Table(
    "alembic_version",
    sa.MetaData(),
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration (idempotent).

    Loading Alembic costs a fifth of a second, so it is loaded only to upgrade an existing
    schema: a database already at the head is told by one query, and a new, empty one gets
    the tables above and the head revision, which a test holds to what the migrations make.
    """
    if revision(engine) == HEAD_REVISION:
        return
    with _MIGRATING:
        if sa.inspect(engine).get_table_names():
            upgrade(engine)
            return
        with engine.begin() as db:
            metadata.create_all(db)
            _alembic_version.create(db)
            db.execute(_alembic_version.insert().values(version_num=HEAD_REVISION))


def upgrade(engine: Engine) -> None:
    """Run the Alembic migrations up to the head (under ``_MIGRATING``)."""
    from alembic import command
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(resources.files("syndicate") / "migrations"))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def revision(engine: Engine) -> str | None:
    """The database's schema revision; None before the first migration."""
    if not sa.inspect(engine).has_table("alembic_version"):
        return None
    with engine.connect() as db:
        return db.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


class Store:
    """The project's persistent state, on one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # SQLite has one writer at a time and its busy handler waits by sleeping; threads of
        # one process queue on this lock instead. PostgreSQL needs none.
        self._write_lock = threading.Lock() if engine.dialect.name == "sqlite" else nullcontext()
        self._reserved: set[int] = set()
        """SQLite: deliveries this process's workers are writing (PostgreSQL locks the rows)."""

    @contextmanager
    def _writing(self) -> Iterator[sa.Connection]:
        with self._write_lock, self.engine.begin() as db:
            yield db

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
            rows = db.execute(
                sa.select(published.c.lang, published.c.slug, published.c.published_at)
            )
            known = {(lang, slug): utc(at) for lang, slug, at in rows if (lang, slug) in keys}
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
        timezone: str | None = None,
    ) -> Subscriber:
        """Insert a reader, or update language/audiences/status (and time zone, when given)
        of an existing address (in whatever letter case it was first given: that spelling is
        kept)."""
        values = {
            "lang": lang,
            "audiences": _audiences(audiences),
            "status": status,
            "updated_at": now,
        }
        if timezone is not None:
            values["timezone"] = timezone
        key = address_key(email)
        with self.engine.begin() as db:
            row = db.execute(sa.select(subscribers).where(subscribers.c.email_key == key)).first()
            if row is None:
                db.execute(
                    sa.insert(subscribers).values(
                        email=email,
                        email_key=key,
                        consent_source=consent_source,
                        created_at=now,
                        **values,
                    )
                )
            else:
                db.execute(sa.update(subscribers).where(subscribers.c.id == row.id).values(values))
        found = self.subscriber(key)
        assert found is not None
        return found

    def subscriber(self, email: str) -> Subscriber | None:
        """The reader of this address, in any letter case."""
        query = sa.select(subscribers).where(subscribers.c.email_key == address_key(email))
        with self.engine.connect() as db:
            row = db.execute(query).first()
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

    def remove_subscriber(self, email: str) -> Subscriber | None:
        """Delete the reader of this address (in any letter case); the one removed, if any."""
        found = self.subscriber(email)
        if found is None:
            return None
        with self.engine.begin() as db:
            db.execute(sa.delete(subscribers).where(subscribers.c.id == found.id))
        return found

    def subscribers(self, status: str | None = None) -> Iterator[Subscriber]:
        query = sa.select(subscribers).order_by(subscribers.c.id)
        if status is not None:
            query = query.where(subscribers.c.status == status)
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        return map(_subscriber, rows)

    def import_subscribers(
        self,
        rows: Sequence[ReaderRow],
        *,
        status: str,
        consent_source: str,
        now: datetime,
        resubscribe: bool = False,
    ) -> tuple[int, int]:
        """Add or update readers in one transaction: all or nothing. Returns (added, updated);
        rows that change nothing count as neither.

        A new address gets what its row says (status, consent source and date, bounces), else
        ``status``, ``consent_source`` and ``now``. A known address (in any letter case) takes
        the row's language, audiences and status (when it has one), and keeps its consent;
        but a reader who left (unsubscribed, bounced) stays so: an import never re-subscribes
        anyone. With ``resubscribe`` it does: the row's status (else ``status``) holds, and a
        reader who comes back gets the row's consent in place of the old one.
        """
        added = updated = 0
        with self.engine.begin() as db:
            known = {row.email_key: row for row in db.execute(sa.select(subscribers))}
            for row in rows:
                key = address_key(row.email)
                joined = _audiences(row.audiences)
                source = row.consent_source or consent_source
                found = known.get(key)
                if found is None:
                    db.execute(
                        sa.insert(subscribers).values(
                            email=row.email,
                            email_key=key,
                            lang=row.lang,
                            audiences=joined,
                            status=row.status or status,
                            consent_source=source,
                            created_at=row.created or now,
                            updated_at=row.updated or now,
                            bounces=row.bounces or 0,
                            timezone=row.timezone,
                        )
                    )
                    added += 1
                    continue
                values: dict[str, Any] = {"lang": row.lang, "audiences": joined}
                if row.timezone:
                    values["timezone"] = row.timezone
                wanted = row.status or (status if resubscribe else None)
                if wanted and (found.status not in _LEFT or resubscribe):
                    values["status"] = wanted
                    if found.status in _LEFT and wanted not in _LEFT:
                        # They come back: this import holds their consent now.
                        values.update(
                            consent_source=source,
                            created_at=row.created or now,
                            bounces=row.bounces or 0,
                        )
                changed = {k: v for k, v in values.items() if getattr(found, k) != v}
                if changed:
                    db.execute(
                        sa.update(subscribers)
                        .where(subscribers.c.id == found.id)
                        .values(updated_at=now, **changed)
                    )
                    updated += 1
        return added, updated

    # -- issues ----------------------------------------------------------------------------

    def sent_articles(self, lang: str, audiences: Sequence[str]) -> dict[tuple[str, str], str]:
        """(lang, slug) → content digest of the article as last issued to this variant."""
        query = (
            sa.select(issue_articles.c.lang, issue_articles.c.slug, issue_articles.c.digest)
            .join(issues, issues.c.id == issue_articles.c.issue_id)
            .where(
                issues.c.lang == lang,
                issues.c.audiences == _audiences(audiences),
                issues.c.state.in_(_STANDING),
            )
            .order_by(issues.c.id)
        )
        with self.engine.connect() as db:
            return {(row.lang, row.slug): row.digest for row in db.execute(query)}

    def last_issue(self, lang: str, audiences: Sequence[str]) -> datetime | None:
        """When this variant was last issued; None if never."""
        query = sa.select(sa.func.max(issues.c.created_at)).where(
            issues.c.lang == lang,
            issues.c.audiences == _audiences(audiences),
            issues.c.state.in_(_STANDING),
        )
        with self.engine.connect() as db:
            found = db.execute(query).scalar()
        return utc(found) if found is not None else None

    def create_issue(
        self,
        *,
        key: str,
        lang: str,
        audiences: Sequence[str],
        content_hash: str,
        subject: str,
        rendered: str,
        articles: Sequence[tuple[str, str, str]],
        readers: Sequence[Subscriber],
        message_id: Callable[[int, int], str],
        now: datetime,
        held: bool = False,
        not_before: Callable[[Subscriber], datetime | None] | None = None,
    ) -> Issue | None:
        """Record a new issue and one pending delivery per reader, in one transaction.

        Nothing leaves before this commits, so a crash can never lose track of a reader.
        Returns None when this variant already had an issue with the same content (also when
        a concurrent run recorded it first). ``held``: the issue and its deliveries wait for
        ``release_issue``; ``not_before`` gives each reader's delivery the time before which
        it is not sent.
        """
        values = {
            "key": key,
            "lang": lang,
            "audiences": _audiences(audiences),
            "content_hash": content_hash,
            "subject": subject,
            "rendered": rendered,
            "created_at": now,
            "state": "held" if held else "issued",
        }
        try:
            with self.engine.begin() as db:
                issue_id = db.execute(sa.insert(issues).values(values)).inserted_primary_key[0]
                if articles:
                    db.execute(
                        sa.insert(issue_articles),
                        [
                            {"issue_id": issue_id, "lang": a_lang, "slug": slug, "digest": digest}
                            for a_lang, slug, digest in articles
                        ],
                    )
                if readers:
                    db.execute(
                        sa.insert(deliveries),
                        [
                            {
                                "issue_id": issue_id,
                                "subscriber_id": reader.id,
                                "email": reader.email,
                                "message_id": message_id(issue_id, reader.id),
                                "status": "held" if held else "pending",
                                "updated_at": now,
                                "not_before": not_before(reader) if not_before else None,
                            }
                            for reader in readers
                        ],
                    )
        except sa.exc.IntegrityError:
            return None
        return self.issue(issue_id)

    def issue_times(self, lang: str) -> dict[tuple[int, str], datetime]:
        """When each issue of ``lang`` was made, by (id, key): the dates the web archive shows."""
        query = sa.select(issues.c.id, issues.c.key, issues.c.created_at).where(
            issues.c.lang == lang, issues.c.state == "issued"
        )
        with self.engine.connect() as db:
            return {(row.id, row.key): utc(row.created_at) for row in db.execute(query)}

    def issue(self, issue_id: int) -> Issue | None:
        with self._database(), self.engine.connect() as db:
            row = db.execute(sa.select(issues).where(issues.c.id == issue_id)).first()
        if row is None:
            return None
        return Issue(
            id=row.id,
            key=row.key,
            lang=row.lang,
            audiences=_audience_ids(row.audiences),
            content_hash=row.content_hash,
            subject=row.subject,
            rendered=row.rendered,
            created_at=utc(row.created_at),
            state=row.state,
        )

    # -- approval --------------------------------------------------------------------------

    def held_issues(self) -> list[Issue]:
        """The issues waiting for an editor, oldest first."""
        query = sa.select(issues.c.id).where(issues.c.state == "held").order_by(issues.c.id)
        with self.engine.connect() as db:
            ids = db.execute(query).scalars().all()
        return [issue for issue in map(self.issue, ids) if issue is not None]

    def release_issue(self, issue_id: int, now: datetime) -> bool:
        """An editor approved a held issue: it and its deliveries go out with the next send.
        False when it is not held (unknown, released already, rejected or expired)."""
        with self._database(), self._writing() as db:
            released = db.execute(
                sa.update(issues)
                .where(issues.c.id == issue_id, issues.c.state == "held")
                .values(state="issued")
            ).rowcount
            db.execute(
                sa.update(deliveries)
                .where(deliveries.c.issue_id == issue_id, deliveries.c.status == "held")
                .values(status="pending", updated_at=now)
            )
        return bool(released)

    def withdraw_issue(self, issue_id: int, state: str, reply: str, now: datetime) -> bool:
        """A held issue is ``rejected`` or ``expired``: none of its deliveries is sent, and as
        it was never issued its articles and content may be issued again. False when the
        issue is not held."""
        with self._database(), self._writing() as db:
            withdrawn = db.execute(
                sa.update(issues)
                .where(issues.c.id == issue_id, issues.c.state == "held")
                .values(state=state)
            ).rowcount
            db.execute(
                sa.update(deliveries)
                .where(deliveries.c.issue_id == issue_id, deliveries.c.status == "held")
                .values(status="skipped", reply=reply, updated_at=now)
            )
        return bool(withdrawn)

    def issue_changes(self, issue: Issue) -> dict[str, list[str]]:
        """The articles of ``issue`` against the previous issue of its variant (rejected and
        expired ones aside): added, revised (a new content digest) and removed, as lang/slug."""
        previous = (
            sa.select(sa.func.max(issues.c.id))
            .where(
                issues.c.lang == issue.lang,
                issues.c.audiences == _audiences(issue.audiences),
                issues.c.id < issue.id,
                issues.c.state.in_(_STANDING),
            )
            .scalar_subquery()
        )
        query = sa.select(
            issue_articles.c.issue_id, issue_articles.c.lang, issue_articles.c.slug,
            issue_articles.c.digest,
        ).where(issue_articles.c.issue_id.in_([issue.id, previous]))
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        current = {f"{r.lang}/{r.slug}": r.digest for r in rows if r.issue_id == issue.id}
        before = {f"{r.lang}/{r.slug}": r.digest for r in rows if r.issue_id != issue.id}
        return {
            "added": sorted(current.keys() - before.keys()),
            "revised": sorted(k for k in current.keys() & before.keys() if current[k] != before[k]),
            "removed": sorted(before.keys() - current.keys()),
        }

    # -- delivery --------------------------------------------------------------------------

    @contextmanager
    def _database(self) -> Iterator[None]:
        """Database failures of the send path, as a DatabaseError that names them in one line."""
        try:
            yield
        except sa.exc.DBAPIError as exc:
            raise _database_error(exc, self.engine.dialect.name) from exc

    @contextmanager
    def send_run(self, now: datetime) -> Iterator[int]:
        """Register a send run and hold its liveness lock until the block ends.

        PostgreSQL: a session advisory lock per run, held shared by the run and by each of its
        workers (``ledger``), so runs proceed side by side and each can tell a dead run's rows
        in flight from a live one's. SQLite: one run at a time (an exclusive lock on a file
        beside the database; a second run waits), so every row found in flight at the start of
        a run belongs to a dead one.
        """
        lock_file = None
        lock_conn = None
        database = self.engine.url.database
        if self.engine.dialect.name == "sqlite" and database and database != ":memory:":
            lock_file = open(f"{database}.send-lock", "a+b")  # noqa: SIM115 (held for the run)
            fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            with self._database():
                with self.engine.begin() as db:
                    run_id = db.execute(
                        sa.insert(send_runs).values(
                            host=socket.gethostname()[:255], pid=os.getpid(), started_at=now
                        )
                    ).inserted_primary_key[0]
                if self.engine.dialect.name == "postgresql":
                    lock_conn = self.engine.connect()
                    key = _run_lock(lock_conn)
                    lock_conn.execute(sa.select(sa.func.pg_advisory_lock_shared(key, run_id)))
                    lock_conn.commit()
            yield run_id
            with self._database(), self.engine.begin() as db:
                db.execute(
                    sa.update(send_runs).where(send_runs.c.id == run_id).values(finished_at=now)
                )
        finally:
            if lock_conn is not None:
                _end_session(lock_conn)
            if lock_file is not None:
                lock_file.close()  # releases the flock

    def mark_lost(self, run_id: int, now: datetime) -> int:
        """Mark ``uncertain`` every delivery left ``sending`` by a run that is no longer alive:
        its end of data was written, or about to be, when the run died."""
        with self._database(), self.engine.connect() as db:
            others = (
                db.execute(
                    sa.select(deliveries.c.run_id)
                    .where(deliveries.c.status == "sending", deliveries.c.run_id != run_id)
                    .distinct()
                )
                .scalars()
                .all()
            )
            dead = []
            key = _run_lock(db) if others and self.engine.dialect.name == "postgresql" else 0
            for other in others:
                if self.engine.dialect.name != "postgresql":
                    dead.append(other)
                elif db.execute(sa.select(sa.func.pg_try_advisory_lock(key, other))).scalar():
                    db.execute(sa.select(sa.func.pg_advisory_unlock(key, other)))
                    dead.append(other)
            db.commit()
        if not dead:
            return 0
        with self._database(), self.engine.begin() as db:
            return db.execute(
                sa.update(deliveries)
                .where(deliveries.c.status == "sending", deliveries.c.run_id.in_(dead))
                .values(
                    status="uncertain",
                    reply="the run ended after the end of data was written, before the reply",
                    updated_at=now,
                )
            ).rowcount

    def skip_inactive(self, now: datetime) -> int:
        """Pending deliveries of readers who left (or were removed) since the issue: skipped."""
        active = sa.select(subscribers.c.id).where(subscribers.c.status == "active")
        with self._database(), self.engine.begin() as db:
            result = db.execute(
                sa.update(deliveries)
                .where(deliveries.c.status == "pending", deliveries.c.subscriber_id.not_in(active))
                .values(status="skipped", reply="reader no longer active", updated_at=now)
            )
        return result.rowcount

    def skip_consent_source(self, source: str, reply: str, now: datetime) -> int:
        """Pending deliveries of the readers added with consent source ``source``: skipped."""
        readers = sa.select(subscribers.c.id).where(subscribers.c.consent_source == source)
        with self._database(), self.engine.begin() as db:
            result = db.execute(
                sa.update(deliveries)
                .where(deliveries.c.status == "pending", deliveries.c.subscriber_id.in_(readers))
                .values(status="skipped", reply=reply, updated_at=now)
            )
        return result.rowcount

    def remove_consent_source(self, source: str) -> int:
        """Delete every reader added with consent source ``source`` (the ledger keeps its rows)."""
        with self.engine.begin() as db:
            result = db.execute(
                sa.delete(subscribers).where(subscribers.c.consent_source == source)
            )
        return result.rowcount

    def pending_count(self, now: datetime | None = None) -> int:
        """Pending deliveries; with ``now``, only those whose time has come."""
        query = sa.select(sa.func.count()).where(deliveries.c.status == "pending")
        if now is not None:
            query = query.where(_DUE).params(now=now)
        with self._database(), self.engine.connect() as db:
            return db.execute(query).scalar_one()

    def waiting(self, now: datetime) -> list[tuple[int, str, str | None, datetime, int]]:
        """(issue id, issue key, time zone, not before, deliveries) of the pending deliveries
        whose time has not come, soonest first: a local-time digest waiting for its zones."""
        query = (
            sa.select(
                issues.c.id,
                issues.c.key,
                subscribers.c.timezone,
                deliveries.c.not_before,
                sa.func.count(),
            )
            .join(issues, issues.c.id == deliveries.c.issue_id)
            .outerjoin(subscribers, subscribers.c.id == deliveries.c.subscriber_id)
            .where(
                deliveries.c.status.in_(("pending", "held")),
                deliveries.c.not_before > now,
            )
            .group_by(issues.c.id, issues.c.key, subscribers.c.timezone, deliveries.c.not_before)
            .order_by(deliveries.c.not_before, issues.c.id)
        )
        with self.engine.connect() as db:
            return [(i, k, z, utc(t), n) for i, k, z, t, n in db.execute(query)]

    @contextmanager
    def ledger(self, run_id: int) -> Iterator[Ledger]:
        """One delivery worker's own connection, held for its whole run; on PostgreSQL it holds
        the run's liveness lock too, so the run is alive for others as long as it can record."""
        with self._database(), self.engine.connect() as db:
            if self.engine.dialect.name != "postgresql":
                yield Ledger(db, self._write_lock, self._reserved, run_id)
                return
            try:
                db.execute(sa.select(sa.func.pg_advisory_lock_shared(_run_lock(db), run_id)))
                db.commit()
                yield Ledger(db, self._write_lock, set(), run_id)
            finally:
                _end_session(db)

    def delivery_counts(self) -> dict[tuple[int, str, str], int]:
        """(issue id, issue key, status) → number of deliveries."""
        query = (
            sa.select(issues.c.id, issues.c.key, deliveries.c.status, sa.func.count())
            .join(issues, issues.c.id == deliveries.c.issue_id)
            .group_by(issues.c.id, issues.c.key, deliveries.c.status)
        )
        with self.engine.connect() as db:
            return {(i, key, status): n for i, key, status, n in db.execute(query)}

    def deliveries(
        self,
        status: str | None = None,
        *,
        ids: Sequence[int] | None = None,
        issue_id: int | None = None,
    ) -> list[Delivery]:
        query = (
            sa.select(
                deliveries.c.id,
                issues.c.key,
                deliveries.c.email,
                deliveries.c.message_id,
                deliveries.c.status,
                deliveries.c.attempts,
                deliveries.c.reply,
                deliveries.c.issue_id,
                deliveries.c.updated_at,
            )
            .join(issues, issues.c.id == deliveries.c.issue_id)
            .order_by(deliveries.c.id)
        )
        if status is not None:
            query = query.where(deliveries.c.status == status)
        if ids is not None:
            query = query.where(deliveries.c.id.in_(ids))
        if issue_id is not None:
            query = query.where(deliveries.c.issue_id == issue_id)
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        return [Delivery(*row[:-1], updated_at=utc(row.updated_at)) for row in rows]

    def resend_uncertain(self, delivery_ids: Sequence[int], now: datetime) -> int:
        """Put uncertain deliveries back in the queue: a person decided they did not arrive."""
        with self.engine.begin() as db:
            result = db.execute(
                sa.update(deliveries)
                .where(deliveries.c.status == "uncertain", deliveries.c.id.in_(delivery_ids))
                .values(status="pending", run_id=None, updated_at=now)
            )
        return result.rowcount

    # -- bounces ---------------------------------------------------------------------------

    def bounced_deliveries(
        self,
        *,
        ids: Sequence[int] = (),
        message_ids: Sequence[str] = (),
        emails: Sequence[str] = (),
    ) -> list[Bounced]:
        """The deliveries a bounce names: by delivery id, by Message-ID, or (``emails``) each
        address's latest delivery, else its reader alone."""
        query = sa.select(deliveries.c.id, deliveries.c.subscriber_id, deliveries.c.email)
        with self.engine.connect() as db:
            if ids:
                rows = db.execute(query.where(deliveries.c.id.in_(ids)).order_by(deliveries.c.id))
                return [Bounced(*row) for row in rows]
            if message_ids:
                rows = db.execute(query.where(deliveries.c.message_id.in_(message_ids)))
                return [Bounced(*row) for row in rows]
            found = []
            for email in emails:
                row = db.execute(
                    query.where(sa.func.lower(deliveries.c.email) == email.lower())
                    .order_by(deliveries.c.id.desc())
                    .limit(1)
                ).first()
                if row is None:
                    row = db.execute(
                        sa.select(sa.null(), subscribers.c.id, subscribers.c.email).where(
                            sa.func.lower(subscribers.c.email) == email.lower()
                        )
                    ).first()
                if row is not None:
                    found.append(Bounced(*row))
            return found

    def bounce_known(self, digest: str) -> bool:
        """Whether the bounce message with this SHA-256 was recorded already."""
        with self.engine.connect() as db:
            query = sa.select(bounce_reports.c.id).where(bounce_reports.c.digest == digest)
            return db.execute(query).first() is not None

    def record_bounce(
        self,
        *,
        digest: str,
        target: Bounced,
        kind: str,
        status: str,
        reason: str,
        matched_by: str,
        max_bounces: int,
        now: datetime,
    ) -> str:
        """Record one bounce report, once (by ``digest``), and act on it in one transaction.

        A permanent failure counts towards ``max_bounces`` once per delivery; a temporary one
        is only recorded; a complaint unsubscribes the reader at once. Returns what was done:
        ``duplicate``, ``counted``, ``bounced`` (counted, and the reader reached the limit),
        ``already counted``, ``recorded`` or ``unsubscribed``.
        """
        with self._writing() as db:
            if db.execute(
                sa.select(bounce_reports.c.id).where(bounce_reports.c.digest == digest)
            ).first():
                return "duplicate"
            counted = kind == "permanent" and not (
                target.delivery_id is not None
                and db.execute(
                    sa.select(bounce_reports.c.id).where(
                        bounce_reports.c.delivery_id == target.delivery_id,
                        bounce_reports.c.counted,
                    )
                ).first()
            )
            db.execute(
                sa.insert(bounce_reports).values(
                    digest=digest,
                    subscriber_id=target.subscriber_id,
                    delivery_id=target.delivery_id,
                    kind=kind,
                    status=status[:40],
                    reason=reason[:2000],
                    matched_by=matched_by,
                    counted=counted,
                    created_at=now,
                )
            )
            if kind == "complaint":
                db.execute(
                    sa.update(subscribers)
                    .where(subscribers.c.id == target.subscriber_id)
                    .values(status="unsubscribed", updated_at=now)
                )
                return "unsubscribed"
            if kind != "permanent":
                return "recorded"
            if not counted:
                return "already counted"
            _count_bounce(db, target.subscriber_id, max_bounces, now)
            status_now = db.execute(
                sa.select(subscribers.c.status).where(subscribers.c.id == target.subscriber_id)
            ).scalar()
            return "bounced" if status_now == "bounced" else "counted"

    def readers_at_risk(self) -> list[AtRisk]:
        """Readers with counted bounces, or any bounce or complaint on record, worst first."""
        kinds = (
            sa.select(
                bounce_reports.c.subscriber_id,
                sa.func.sum(sa.case((bounce_reports.c.kind == "temporary", 1), else_=0)).label(
                    "temporary"
                ),
                sa.func.sum(sa.case((bounce_reports.c.kind == "complaint", 1), else_=0)).label(
                    "complaints"
                ),
                sa.func.max(bounce_reports.c.id).label("last_id"),
            )
            .group_by(bounce_reports.c.subscriber_id)
            .subquery()
        )
        last = bounce_reports.alias("latest")
        query = (
            sa.select(
                subscribers.c.email,
                subscribers.c.status,
                subscribers.c.bounces,
                sa.func.coalesce(kinds.c.temporary, 0),
                sa.func.coalesce(kinds.c.complaints, 0),
                last.c.kind,
                last.c.status,
                last.c.reason,
                last.c.created_at,
            )
            .select_from(subscribers)
            .outerjoin(kinds, kinds.c.subscriber_id == subscribers.c.id)
            .outerjoin(last, last.c.id == kinds.c.last_id)
            .where(sa.or_(subscribers.c.bounces > 0, kinds.c.subscriber_id.is_not(None)))
            .order_by(subscribers.c.bounces.desc(), subscribers.c.email)
        )
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        return [
            AtRisk(*row[:-1], last_at=utc(row[-1]) if row[-1] is not None else None) for row in rows
        ]

    def bounce_counts(self) -> dict[str, int]:
        """Bounce reports on record by kind (permanent, temporary, complaint)."""
        query = sa.select(bounce_reports.c.kind, sa.func.count()).group_by(bounce_reports.c.kind)
        with self.engine.connect() as db:
            return {kind: n for kind, n in db.execute(query)}


class _Compiled:
    """A statement compiled once for one dialect and run straight on the DBAPI cursor.

    The per-message path of a send runs two statements per message; SQLAlchemy's per-call
    work (cache keys, result objects, pool checkout) was measured at more than the database's
    own, so these skip it. The SQL is still SQLAlchemy's, rendered for the dialect.
    """

    def __init__(self, statement: sa.Executable, dialect: sa.Dialect) -> None:
        self.compiled = statement.compile(dialect=dialect)
        self.sql = str(self.compiled)
        self.order = self.compiled.positiontup if self.compiled.positional else None
        self.when = deliveries.c.updated_at.type.bind_processor(dialect)

    def run(self, cursor: Any, values: dict[str, Any]) -> None:
        if self.when is not None and "now" in values:
            values["now"] = self.when(values["now"])
        params = self.compiled.construct_params(values)
        cursor.execute(self.sql, [params[n] for n in self.order] if self.order else params)


class Ledger:
    """The per-message statements of delivery, on one worker's connection.

    A delivery is first only reserved (``take``: PostgreSQL locks the row ``FOR UPDATE SKIP
    LOCKED`` in a transaction left open; SQLite, one run at a time, keeps the ids its workers
    hold in memory), so a run that dies while writing a message leaves nothing in flight. Just
    before the end of data it is marked ``sending`` and committed (``sending``), together with
    the previous message's 250 (``sent`` only notes it): one commit per message. A database
    failure is raised as a DatabaseError.
    """

    def __init__(
        self, db: sa.Connection, lock: AbstractContextManager, reserved: set[int], run_id: int
    ) -> None:
        self.db = db
        self._lock = lock
        self._reserved = reserved
        self._run_id = run_id
        self._raw = db.connection.dbapi_connection
        self._dialect = db.dialect.name
        self._errors = (db.dialect.loaded_dbapi.Error, sa.exc.DBAPIError)
        self._take = _Compiled(_TAKE, db.dialect)
        self._take_back = _Compiled(_TAKE_BACK, db.dialect)
        self._sending = _Compiled(_SENDING, db.dialect)
        self._finish = _Compiled(_FINISH, db.dialect)
        self._give_back = _Compiled(_GIVE_BACK, db.dialect)
        self._bounces = _Compiled(_BOUNCES, db.dialect)
        self._bounced = _Compiled(_BOUNCED, db.dialect)
        self._noted: dict[str, Any] | None = None
        """The last 250, recorded with the next commit."""

    def _commit(self, *steps: tuple[_Compiled, dict[str, Any]]) -> None:
        """Run ``steps`` and the noted 250, if any, in one transaction (under the write lock)."""
        if self._noted is not None:
            steps = ((self._finish, self._noted), *steps)
        with self._lock, self._statements():
            cursor = self._raw.cursor()
            try:
                for statement, values in steps:
                    statement.run(cursor, values)
                self._raw.commit()
            except BaseException:
                with suppress(*self._errors):
                    self._raw.rollback()
                raise
            finally:
                with suppress(*self._errors):
                    cursor.close()
        self._noted = None

    @contextmanager
    def _statements(self) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            raise _database_error(exc, self._dialect) from exc

    def _query(self, statement: _Compiled, values: dict[str, Any]) -> list[Any]:
        cursor = self._raw.cursor()
        try:
            statement.run(cursor, values)
            return cursor.fetchall()
        finally:
            cursor.close()

    def take(self, now: datetime) -> Claim | None:
        """Reserve the next pending delivery of an active reader whose time has come at
        ``now`` (nothing is recorded yet)."""
        with self._lock, self._statements():
            if self._dialect == "postgresql":
                rows = self._query(self._take, {"run_id": self._run_id, "n": 1, "now": now})
            else:  # skip what the other workers hold
                n = len(self._reserved) + 1
                rows = self._query(self._take, {"run_id": self._run_id, "n": n, "now": now})
                rows = [row for row in rows if row[0] not in self._reserved][:1]
                self._reserved.update(row[0] for row in rows)
        return Claim(*rows[0]) if rows else None

    def take_back(self, delivery_id: int) -> bool:
        """Reserve again a delivery this worker gave back for a retry; False if another run
        has taken it meanwhile."""
        with self._lock, self._statements():
            rows = self._query(self._take_back, {"delivery_id": delivery_id})
            if rows and self._dialect != "postgresql":
                self._reserved.add(delivery_id)
        return bool(rows)

    def _release(self, delivery_id: int) -> None:
        with self._lock:
            self._reserved.discard(delivery_id)

    def sending(self, delivery_id: int, now: datetime) -> None:
        """The end of data is about to be written: from now on the message may be accepted."""
        values = {"delivery_id": delivery_id, "run_id": self._run_id, "now": now}
        self._commit((self._sending, values))
        self._release(delivery_id)

    def sent(self, delivery_id: int, reply: str, now: datetime) -> None:
        """Note a 250, to be committed with the worker's next commit (or ``flush``)."""
        self._noted = {"delivery_id": delivery_id, "status": "sent", "reply": reply, "now": now}

    def flush(self) -> None:
        """Commit the noted 250, if any."""
        if self._noted is not None:
            self._commit()

    def finish(self, delivery_id: int, status: str, reply: str, now: datetime) -> None:
        """Record how a delivery ended (failed, uncertain), in its own transaction."""
        values = {"delivery_id": delivery_id, "status": status, "reply": reply[:2000], "now": now}
        self._commit((self._finish, values))
        self._release(delivery_id)

    def give_back(self, delivery_id: int, reply: str, now: datetime) -> None:
        """Pending again, with the reply that put it back; this run does not take it again but
        by ``take_back``."""
        values = {"delivery_id": delivery_id, "reply": reply[:2000], "run_id": self._run_id}
        self._commit((self._give_back, {**values, "now": now}))
        self._release(delivery_id)

    def bounce(
        self, delivery_id: int, subscriber_id: int, reply: str, max_bounces: int, now: datetime
    ) -> None:
        """A permanent failure: the delivery fails and the reader is bounced after max_bounces."""
        failed = {"delivery_id": delivery_id, "status": "failed", "reply": reply[:2000]}
        reader = {"subscriber_id": subscriber_id}
        self._commit(
            (self._finish, {**failed, "now": now}),
            (self._bounces, {**reader, "now": now}),
            (self._bounced, {**reader, "max_bounces": max_bounces}),
        )
        self._release(delivery_id)


def _count_bounce(db: sa.Connection, subscriber_id: int, max_bounces: int, now: datetime) -> None:
    """One more permanent failure for a reader, who is marked bounced at ``max_bounces``: a
    5xx during the send (``Ledger.bounce``, with the same statements) and a bounce that
    arrives later by mail count alike."""
    reader = {"subscriber_id": subscriber_id}
    db.execute(_BOUNCES, {**reader, "now": now})
    db.execute(_BOUNCED, {**reader, "max_bounces": max_bounces})


# -- one scheduler at a time ---------------------------------------------------------------


class SchedulerLock:
    """Held for the life of the acting scheduler; a second one cannot take it."""

    def acquire(self) -> bool:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def holder(self) -> str:
        """Who holds the lock, for the message a second scheduler prints."""
        raise NotImplementedError

    def held(self) -> bool:
        """Whether this process still holds it (checked before every run)."""
        raise NotImplementedError


class FileLock(SchedulerLock):
    """``flock`` on a file beside the SQLite database; the OS drops it when the process dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> str:
        try:
            who = self.path.read_text("utf-8").strip()
        except OSError:
            who = ""
        return f"{who or 'another process'} (lock file {self.path})"


class AdvisoryLock(SchedulerLock):
    """A PostgreSQL session advisory lock on a dedicated connection; dies with the session.

    Advisory locks are per database, so the key names the schema the job store lives in:
    deployments in separate schemas of one database do not block each other.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.key: int | None = None
        self._connection: sa.Connection | None = None

    def acquire(self) -> bool:
        connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        schema = connection.execute(sa.text("SELECT current_schema()")).scalar()
        digest = hashlib.sha256(f"syndicate.scheduler:{schema}".encode()).digest()
        self.key = int.from_bytes(digest[:8], "big", signed=True)
        query = sa.text("SELECT pg_try_advisory_lock(:key)")
        if connection.execute(query, {"key": self.key}).scalar():
            self._connection = connection
            return True
        connection.close()
        return False

    def release(self) -> None:
        if self._connection is not None:
            # close() only returns the session to the pool: unlock explicitly (a dead
            # process's session ends, and that releases the lock too)
            with suppress(sa.exc.SQLAlchemyError):  # a dead session holds nothing
                unlock = sa.text("SELECT pg_advisory_unlock(:key)")
                self._connection.execute(unlock, {"key": self.key})
            self._connection.close()
            self._connection = None

    def held(self) -> bool:
        if self._connection is None:
            return False
        try:
            self._connection.execute(sa.text("SELECT 1"))
        except sa.exc.SQLAlchemyError:
            return False  # the session, and the lock with it, is gone
        return True

    def holder(self) -> str:
        query = sa.text(
            "SELECT a.pid, a.client_addr, a.backend_start FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory'"
            " AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = :key"
        )
        with self.engine.connect() as connection:
            row = connection.execute(query, {"key": self.key}).first()
        where = f"server pid {row.pid} from {row.client_addr or 'local'}" if row else "a session"
        return f"{where} (PostgreSQL advisory lock {self.key})"


class NoLock(SchedulerLock):
    """An in-memory database is private to its process: nothing to share, nothing to lock."""

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        pass

    def held(self) -> bool:
        return True

    def holder(self) -> str:
        return "nobody"


def scheduler_lock(url: str, engine: sa.Engine) -> SchedulerLock:
    """The lock that matches the state database at ``url``."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "postgresql":
        return AdvisoryLock(engine)
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            return NoLock()
        return FileLock(Path(parsed.database + ".scheduler.lock"))
    raise SyndicateError(
        f"state.database: the scheduler needs SQLite or PostgreSQL, not {parsed.drivername}"
    )


@contextmanager
def database_errors(url: str, kept: str = "") -> Iterator[None]:
    """A state database that cannot be reached, or whose connection is lost, as one line
    naming it (without its password), after ``kept``: what the failure left as it was."""
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        shown = sa.engine.make_url(url).render_as_string(hide_password=True)
        reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else "lost"
        raise DatabaseError(f"{kept}state database {shown}: {reason}") from None


def open_store(url: str) -> Store:
    """Connect to the state database at ``url`` and migrate it to the current schema."""
    engine = create_engine(url)
    migrate(engine)
    return Store(engine)
