"""The engine, its failures in one line, and the one way the parts of the store write.

SQLAlchemy Core, so one code path serves SQLite (the default: a file, nothing to install) and
PostgreSQL (psycopg, which the postgres extra installs).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from ..errors import DatabaseError, UsageError
from ..files import create_private

SQLITE_SIDECARS = ("-wal", "-shm", "-journal")
"""What SQLite keeps beside a database file (with the file's own mode, which SQLite copies)."""


def database_files(url: str) -> list[Path]:
    """The files of a SQLite state database (the file, then its sidecars); none for another
    database, or one in memory."""
    parsed = sa.engine.make_url(url)
    name = parsed.database
    if parsed.get_backend_name() != "sqlite" or not name or name == ":memory:":
        return []
    if name.startswith("file:"):  # a URI filename (?uri=true): SQLite's to read
        return []
    return [Path(name + suffix) for suffix in ("", *SQLITE_SIDECARS)]


def create_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get their folder, WAL and a busy timeout.

    A new SQLite file and its folder are created owner-only before SQLite opens it: it holds
    every reader's address, consent record and the ledger, and SQLite gives its -wal, -shm and
    -journal files the database file's mode."""
    files = database_files(url)
    if files:
        create_private(files[0])
    try:
        engine = sa.create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        if sa.engine.make_url(url).get_backend_name() != "postgresql":
            raise
        raise missing_driver(url, exc) from None
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


def missing_driver(url: str, exc: ModuleNotFoundError) -> UsageError:
    """A PostgreSQL URL whose driver is not installed, as one line saying what to install: a
    plain install has SQLite only; psycopg comes with the postgres (or scale) extra."""
    parsed = sa.engine.make_url(url)
    if parsed.get_driver_name() == "psycopg":
        return UsageError(
            "state.database: PostgreSQL needs the postgres extra: "
            f"pip install 'syndicate[postgres]' ({exc})"
        )
    return UsageError(
        f"state.database: the {parsed.get_driver_name()} driver is not installed ({exc}); "
        "the postgres extra (pip install 'syndicate[postgres]') brings psycopg, for a "
        "postgresql+psycopg:// URL"
    )


def utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def stored_audiences(value: Sequence[str]) -> str:
    """Audience ids as stored: sorted, ';'-separated (the order never matters)."""
    return ";".join(sorted(set(value)))


def audience_ids(stored: str) -> tuple[str, ...]:
    return tuple(a for a in stored.split(";") if a)


def inserted_id(result: sa.CursorResult) -> int:
    """The primary key of the one row an INSERT made."""
    key = result.inserted_primary_key
    assert key is not None  # an INSERT of one row
    return key[0]


def insert_or_skip(db: sa.Connection, table: sa.Table, *key: sa.Column[Any]) -> sa.Insert:
    """An insert into ``table`` that skips a row whose ``key`` (a unique index) is there
    already, rather than fail: ``ON CONFLICT DO NOTHING`` in either dialect."""
    dialect = sqlite if db.dialect.name == "sqlite" else postgresql
    return dialect.insert(table).on_conflict_do_nothing(index_elements=list(key))


def database_error(exc: BaseException, dialect: str) -> DatabaseError:
    """One line for a failed database statement: what failed, in the driver's own words."""
    orig = getattr(exc, "orig", None) or exc
    detail = next(iter(str(orig).strip().splitlines()), "") or type(orig).__name__
    kinds = {c.__name__ for c in type(orig).__mro__}
    lost = dialect == "postgresql" and bool(kinds & {"OperationalError", "InterfaceError"})
    return DatabaseError(f"{'database connection lost' if lost else 'database error'} ({detail})")


def shown_url(url: str) -> str:
    """A database URL as messages show it: without its password."""
    return sa.engine.make_url(url).render_as_string(hide_password=True)


@contextmanager
def database_errors(url: str, kept: str = "", *, every: bool = False) -> Iterator[None]:
    """A state database that cannot be reached, or whose connection is lost, as one line
    naming it (without its password), after ``kept``: what the failure left as it was.

    With ``every``, any other failure of SQLAlchemy's too (a statement refused, a pool
    timeout): for callers that log the line and go on. Without it those stay raised as they
    are, so a command's unexpected failure keeps its traceback under ``--debug``.
    """
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else "lost"
        raise DatabaseError(f"{kept}state database {shown_url(url)}: {reason}") from None
    except sa.exc.SQLAlchemyError as exc:
        if not every:
            raise
        reason = next(iter(str(exc).strip().splitlines()), "") or type(exc).__name__
        raise DatabaseError(f"{kept}state database {shown_url(url)}: {reason}") from exc


def end_session(db: sa.Connection) -> None:
    """Close a connection's session for good (not back into the pool), and with it the session
    advisory locks it holds; a session already lost is simply dropped."""
    with suppress(sa.exc.SQLAlchemyError):
        db.invalidate()


def release_session(db: sa.Connection) -> None:
    """PostgreSQL: give a connection back to the pool without the session advisory locks it
    holds (a new session for every batch cost the database a process and the worker a
    handshake, for each of a batch's connections); one whose state is in doubt is closed for
    good instead (``end_session``)."""
    try:
        raw = db.connection.dbapi_connection
        if raw is None:  # already closed
            return
        raw.rollback()
        cursor = raw.cursor()
        cursor.execute("SELECT pg_advisory_unlock_all()")
        cursor.close()
        raw.commit()
    except (sa.exc.SQLAlchemyError, db.dialect.loaded_dbapi.Error):
        end_session(db)


def writer_lock(engine: Engine) -> AbstractContextManager:
    """What the writers of one engine queue on: SQLite has one writer at a time and its busy
    handler waits by sleeping, so threads of one process wait on a lock instead; PostgreSQL
    needs none."""
    return threading.Lock() if engine.dialect.name == "sqlite" else nullcontext()


class Database:
    """What every part of the store shares: the engine, and the one way to write.

    Every write is one transaction under ``_write_lock`` (``_transaction``); the per-message
    statements of a send do the same on their worker's own connection (``Ledger``).
    """

    def __init__(self, engine: Engine, write_lock: AbstractContextManager | None = None) -> None:
        self.engine = engine
        self._write_lock = write_lock if write_lock is not None else writer_lock(engine)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _transaction(self) -> Iterator[sa.Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises."""
        with self._write_lock, self.engine.begin() as db:
            yield db

    @contextmanager
    def _database(self) -> Iterator[None]:
        """Database failures of the send path, as a DatabaseError that names them in one line."""
        try:
            yield
        except sa.exc.DBAPIError as exc:
            raise database_error(exc, self.engine.dialect.name) from exc
