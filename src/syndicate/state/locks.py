"""The locks: one acting scheduler at a time, and the liveness of a send run.

A lock dies with its holder (the OS drops a ``flock``, PostgreSQL a session's advisory locks),
so a process that is killed never leaves one behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import sqlalchemy as sa

from ..errors import SyndicateError
from .database import end_session


def run_lock(db: sa.Connection) -> int:
    """First key of the PostgreSQL advisory locks that mark a send run as alive, one per schema
    (run ids count from 1 in each). The run and each of its workers hold it shared, on their
    own sessions, so a run is dead only when none is left; a worker whose session the server
    ended writes no further end of data (``Ledger.check_session``)."""
    return run_lock_key(db.execute(sa.text("SELECT current_schema()")).scalar() or "")


def run_lock_key(schema: str) -> int:
    """``run_lock`` for the schema named."""
    digest = hashlib.sha256(f"syndicate.send:{schema}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


@contextmanager
def one_send_run(engine: sa.Engine) -> Iterator[None]:
    """SQLite: one send run at a time, by an exclusive ``flock`` on a file beside the database
    (a second run waits), so every row a run finds in flight belongs to a dead one. Nothing
    on PostgreSQL, whose runs proceed side by side, nor on an in-memory database."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    with open(f"{database}.send-lock", "a+b") as lock_file:  # closing releases the flock
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        yield


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


# -- connections to a relay, capped across workers -------------------------------------------


class RelaySlot:
    """One of a relay's connection slots, held by a database session of its own until
    ``release``."""

    def __init__(self, session: sa.Connection) -> None:
        self._session = session

    def release(self) -> None:
        """End the session, and with it the slot's advisory lock."""
        end_session(self._session)


def relay_slot(engine: sa.Engine, relay: str, slots: int) -> RelaySlot | None:
    """A session holding one of ``slots`` advisory locks of ``relay`` (in this schema), or
    None when every one is held. The slot is the holder's until ``RelaySlot.release``, or
    until its process dies: PostgreSQL frees a dead session's locks."""
    db = engine.connect()
    try:
        schema = db.execute(sa.text("SELECT current_schema()")).scalar() or ""
        digest = hashlib.sha256(f"syndicate.relay:{schema}:{relay}".encode()).digest()
        key = int.from_bytes(digest[:4], "big", signed=True)
        for slot in range(slots):
            if db.execute(sa.select(sa.func.pg_try_advisory_lock(key, slot))).scalar():
                db.commit()
                return RelaySlot(db)
        db.commit()
    except BaseException:
        end_session(db)
        raise
    end_session(db)
    return None
