"""The tables of the state database and the migrations that keep a database at them.

The schema is owned by the Alembic migrations in ``migrations/``; ``migrate`` brings any
database up to date before use (a new one straight from the tables below).
"""

from __future__ import annotations

import hashlib
import threading
from importlib import resources

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..subscribers import STATUSES

metadata = sa.MetaData()

published = sa.Table(
    "published",
    metadata,
    sa.Column("lang", sa.String(35), primary_key=True),
    sa.Column("slug", sa.String(200), primary_key=True),
    sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
    # when the entry was first recorded, whatever its date line says (a late article's is
    # after its group's last issue); NULL for rows recorded before it was kept
    sa.Column("seen_at", sa.DateTime(timezone=True), nullable=True),
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
    # hard bounces counted (``hard_bounces`` in Python; the column keeps its first name, so
    # no migration renames it under running deployments)
    sa.Column("bounces", sa.Integer, nullable=False, server_default="0", key="hard_bounces"),
    # The address as the reader gave it is ``email``; ``email_key`` (``address_key``) is what
    # makes two spellings one reader, unique on both databases alike (SQLite's lower() and
    # case-insensitive collations stop at ASCII).
    sa.Column("email_key", sa.String(320), nullable=False),
    sa.Column("timezone", sa.String(64), nullable=True),  # IANA name; none: the site's
    # when a hard bounce was last counted: a count older than ``bounces.hard_window_days`` is
    # forgotten at the next one
    sa.Column("last_bounce_at", sa.DateTime(timezone=True), nullable=True),
    # soft bounces with no successful delivery in between, and when the first of them came
    sa.Column("soft_bounces", sa.Integer, nullable=False, server_default="0"),
    sa.Column("first_soft_at", sa.DateTime(timezone=True), nullable=True),
    # the last bounce's reason (``bounces.reasons``' taxonomy), or ``feedback`` (a complaint)
    sa.Column("last_reason", sa.String(40), nullable=True),
    # the delivery whose soft bounce was counted last: a delivery of the reader's after it
    # and before the next soft bounce's, sent and never bounced, is a success in between
    sa.Column("last_soft_delivery", sa.Integer, nullable=True),
    sa.Index("ix_subscribers_email_key", "email_key", unique=True),
    # an issue's readers, read a chunk at a time in id order (``group_readers``)
    sa.Index("ix_subscribers_variant", "lang", "audiences", "status", "id"),
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
    # planned in chunks: the last reader id whose delivery is written; NULL once all are
    sa.Column("planned_through", sa.Integer, nullable=True),
    # HH:MM of a local-time digest, each reader's delivery waits for it (the later chunks too)
    sa.Column("local_time", sa.String(5), nullable=True),
    # when its last delivery was settled (sent, failed, uncertain, skipped)
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
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
    # Python calls it ``content_hash`` (the hash of what a newsletter shows of the article);
    # the column keeps its first name, so no migration renames it under running deployments.
    sa.Column("digest", sa.String(64), nullable=False, key="content_hash"),
    # the date line of the version the issue carried: a revision dated later goes out again
    sa.Column("updated", sa.Date, nullable=True),
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
    # the batch of its issue (about BATCH_SIZE rows) a worker sends as one job
    sa.Column("batch_no", sa.Integer, nullable=True),
    sa.UniqueConstraint("issue_id", "subscriber_id", name="uq_deliveries_reader"),
    sa.Index("ix_deliveries_status", "status", "id"),
    # a reader's deliveries in id order: those between two of their soft bounces
    sa.Index("ix_deliveries_reader", "subscriber_id", "id"),
    sa.Index("ix_deliveries_batch", "issue_id", "batch_no"),
    # the next pending row, of all or of one batch, read from an index whatever the
    # statistics say: a row sent leaves these, so a take never walks past the sent ones
    sa.Index(
        "ix_deliveries_pending",
        "id",
        sqlite_where=sa.text("status = 'pending'"),
        postgresql_where=sa.text("status = 'pending'"),
    ),
    sa.Index(
        "ix_deliveries_pending_batch",
        "issue_id",
        "batch_no",
        "id",
        sqlite_where=sa.text("status = 'pending'"),
        postgresql_where=sa.text("status = 'pending'"),
    ),
)

relay_buckets = sa.Table(
    "relay_buckets",
    metadata,
    sa.Column("relay", sa.String(255), primary_key=True),
    sa.Column("rate", sa.Float, nullable=False),
    sa.Column("burst", sa.Float, nullable=False),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=False),
    # the relay said slow down (421, 451, 4.7.x): the rate it was cut to, and when
    sa.Column("cut_rate", sa.Float, nullable=True),
    sa.Column("cut_at", sa.DateTime(timezone=True), nullable=True),
)
"""The rate of each relay (host:port), shared by every worker of a distributed send: a token
bucket refilled at ``rate`` tokens a second up to ``burst``."""

bounce_reports = sa.Table(
    "bounce_reports",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    # ``message_hash`` in Python; the column keeps its first name (see issue_articles).
    sa.Column("digest", sa.String(64), nullable=False, unique=True, key="message_hash"),
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
(``message_hash``: the SHA-256 of the message); ``counted`` when it added to the reader's
bounces."""

job_firings = sa.Table(
    "job_firings",
    metadata,
    sa.Column("job_id", sa.String(200), primary_key=True),
    sa.Column("due_at", sa.DateTime(timezone=True), primary_key=True),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
"""Each firing of a scheduled digest that came due: ``owed`` from the moment it is due until
its send is planned (``done``) or it is past the grace (``missed``); ``reason`` says why it is
still owed. A due run is a fact here before it is attempted, so no crash, lost session or stop
can drop it."""

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


# Alembic runs a migration through module-level proxies (``alembic.context``): two threads
# migrating at once (the scheduler's jobs each open the store) undo each other's.
_MIGRATING = threading.Lock()


HEAD_REVISION = "0011"
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
    with _MIGRATING, engine.begin() as db:
        _one_migration_at_a_time(db)
        if _revision(db) == HEAD_REVISION:  # another process migrated it meanwhile
            return
        if sa.inspect(db).get_table_names():
            _upgrade(db)
            return
        metadata.create_all(db)
        _alembic_version.create(db)
        db.execute(_alembic_version.insert().values(version_num=HEAD_REVISION))


def upgrade(engine: Engine) -> None:
    """Run the Alembic migrations up to the head."""
    with _MIGRATING, engine.begin() as db:
        _one_migration_at_a_time(db)
        _upgrade(db)


def _upgrade(db: sa.Connection) -> None:
    from alembic import command
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(resources.files("syndicate") / "migrations"))
    config.attributes["connection"] = db
    command.upgrade(config, "head")


def _one_migration_at_a_time(db: sa.Connection) -> None:
    """PostgreSQL: one migration of this schema at a time across processes too (a worker and
    the scheduler starting together after an upgrade): the second waits, then finds it done.
    The lock ends with the transaction. (SQLite takes one writer at a time by itself.)"""
    if db.dialect.name != "postgresql":
        return
    schema = db.execute(sa.text("SELECT current_schema()")).scalar() or ""
    digest = hashlib.sha256(f"syndicate.migration:{schema}".encode()).digest()
    key = int.from_bytes(digest[:8], "big", signed=True)
    db.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))


def revision(engine: Engine) -> str | None:
    """The database's schema revision; None before the first migration."""
    with engine.connect() as db:
        return _revision(db)


def _revision(db: sa.Connection) -> str | None:
    if not sa.inspect(db).has_table("alembic_version"):
        return None
    return db.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
