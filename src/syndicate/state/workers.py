"""Procrastinate's tables in the state database (``send.engine = "procrastinate"``): the
connection parameters its connector takes, its schema made where missing, the workers alive.

Only ``scale`` imports this module: it needs the scale extra (Procrastinate, psycopg), which
the rest of the state does not. Procrastinate runs its own statements on the parameters
handed out here; the statements it offers no call for are written here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from procrastinate.exceptions import ConnectorException
from procrastinate.schema import SchemaManager

from ..errors import DatabaseError, UsageError
from .database import shown_url


def conninfo(database_url: str) -> str:
    """The libpq parameters of a SQLAlchemy PostgreSQL URL, as SQLAlchemy parsed them (its
    options, such as a search path, kept). Not the URL rendered again: that writes a space
    as ``+``, which libpq takes literally, so ``options=-csearch_path%3Dx%20-c...`` reached
    the server as one garbled search path. Raises UsageError for a URL that is none."""
    try:
        url = sa.engine.make_url(database_url)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise UsageError(f"state.database: not a database URL ({exc})") from None
    given = {
        "host": url.host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "dbname": url.database,
    }
    params = {key: value for key, value in given.items() if value is not None}
    for key, value in url.query.items():  # a key given twice (host, port): libpq's a,b
        params[key] = value if isinstance(value, str) else ",".join(value)
    return psycopg.conninfo.make_conninfo("", **params)


def ensure_schema(db: sa.Connection) -> None:
    """Procrastinate's tables, on this connection (in its transaction), where they are missing."""
    # two processes starting at once: one applies it, the other then finds it
    db.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext("procrastinate schema"))))
    if not sa.inspect(db).has_table("procrastinate_jobs"):
        _driver(db).execute(SchemaManager.get_schema())


def jobs_connection(db: sa.Connection) -> psycopg.Connection[Any]:
    """The driver's connection under ``db``, Procrastinate's tables made on it where missing:
    jobs deferred on it commit, or roll back, with ``db``'s transaction."""
    ensure_schema(db)
    return _driver(db)


def _driver(db: sa.Connection) -> psycopg.Connection[Any]:
    driver = db.connection.driver_connection
    assert driver is not None  # an open connection
    return driver


def prepare_jobs(database_url: str) -> None:
    """Make Procrastinate's tables where missing, before a worker starts; a database that
    fails it is a DatabaseError (``jobs_database_errors``), as is a search path none of
    whose schemas exists (nowhere to make them)."""
    engine = sa.create_engine(database_url)
    try:
        with jobs_database_errors(database_url), engine.begin() as db:
            if db.scalar(sa.text("SELECT current_schema()")) is None:
                path = db.scalar(sa.text("SELECT current_setting('search_path')"))
                raise DatabaseError(
                    f"state database {shown_url(database_url)}: no schema of its search path"
                    f" ({path}) exists (CREATE SCHEMA it, or correct the URL's options)"
                )
            ensure_schema(db)
    finally:
        engine.dispose()


_STOPS = (ConnectorException, psycopg.Error, sa.exc.DBAPIError)
"""What the database answers a worker that cannot go on: a missing function or table, a
connection refused or lost."""


@contextmanager
def jobs_database_errors(database_url: str) -> Iterator[None]:
    """One of ``_STOPS`` as a DatabaseError of one line naming the database, not Procrastinate's
    traceback (whose own message says only "Database error": its cause says what failed)."""
    try:
        yield
    except _STOPS as exc:
        cause = exc.__cause__ if isinstance(exc, ConnectorException) else exc
        cause = getattr(cause, "orig", None) or cause or exc
        reason = next(iter(str(cause).strip().splitlines()), "") or type(cause).__name__
        raise DatabaseError(f"state database {shown_url(database_url)}: {reason}") from exc


@dataclass(frozen=True)
class WorkerAlive:
    """A worker whose heartbeat is recent (within ``send.stalled_seconds``)."""

    id: int
    """Procrastinate's id of the worker."""
    last_heartbeat: datetime
    silent: float
    """Seconds since its last heartbeat."""
    batches: int
    """Send jobs it is running."""


_WORKERS_ALIVE = sa.text(
    """
    SELECT w.id, w.last_heartbeat, extract(epoch FROM now() - w.last_heartbeat) AS silent,
           count(j.id) AS batches
      FROM procrastinate_workers w
      LEFT JOIN procrastinate_jobs j
        ON j.worker_id = w.id AND j.status = 'doing' AND j.task_name = :task
     WHERE w.last_heartbeat > now() - make_interval(secs => :stalled)
     GROUP BY w.id
     ORDER BY w.id
    """
)


def workers_alive(engine: sa.Engine, task: str, stalled_seconds: float) -> list[WorkerAlive]:
    """The workers heard from within ``stalled_seconds``, each with the jobs of ``task`` it
    runs, from Procrastinate's own tables (which it offers no call to list); none before its
    tables exist."""
    with engine.connect() as db:
        if not sa.inspect(db).has_table("procrastinate_workers"):
            return []
        values = {"task": task, "stalled": stalled_seconds}
        rows = db.execute(_WORKERS_ALIVE, values).all()
    return [WorkerAlive(r.id, r.last_heartbeat, float(r.silent), r.batches) for r in rows]
