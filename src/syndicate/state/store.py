"""The state database, one repository per aggregate, each handed to whoever needs it."""

from __future__ import annotations

import sqlalchemy as sa

from .bounce_reports import BounceReports
from .buckets import Buckets
from .database import create_engine, writer_lock
from .firings import Firings
from .issues import Issues
from .ledger import Deliveries
from .planning import IssuePlanning
from .published import Publications
from .schema import migrate
from .subscribers import Subscribers


class Store:
    """The project's persistent state on one database: its repositories, which share the
    engine and its write lock, so SQL stays in ``state`` and a caller takes only the part
    it works on (``store.subscribers``, ``store.ledger``, ...)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        lock = writer_lock(engine)
        self.published = Publications(engine, lock)
        """When each feed entry was first published."""
        self.subscribers = Subscribers(engine, lock)
        """The readers, their groups, consent and bounce state."""
        self.issues = Issues(engine, lock)
        """The issues of each group: what each carried, held, released or withdrawn."""
        self.planning = IssuePlanning(engine, lock, self.issues)
        """An issue opened with its first readers, the rest planned in chunks; closed once
        settled."""
        self.ledger = Deliveries(engine, lock)
        """The send runs and each reader's delivery of an issue: the exactly-once protocol."""
        self.bounces = BounceReports(engine, lock)
        """The bounce reports read, and the readers they put at risk."""
        self.relays = Buckets(engine, lock)
        """Each relay's sending rate, as learned and as shared by the workers."""
        self.firings = Firings(engine, lock)
        """The scheduled digest runs owed, done and missed."""

    def close(self) -> None:
        """Close the engine's pooled connections."""
        self.engine.dispose()


def open_store(url: str) -> Store:
    """Connect to the state database at ``url`` and migrate it to the current schema."""
    engine = create_engine(url)
    migrate(engine)
    return Store(engine)
