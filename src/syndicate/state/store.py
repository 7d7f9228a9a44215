"""The one façade the rest of the project uses: every part of the state, on one database."""

from __future__ import annotations

from .bounce_reports import BounceReports
from .buckets import Buckets
from .database import create_engine
from .firings import Firings
from .issues import Issues
from .ledger import Deliveries
from .planning import IssuePlanning
from .published import Publications
from .schema import migrate
from .subscribers import Subscribers


class Store(
    Publications, Subscribers, IssuePlanning, Issues, Deliveries, BounceReports, Buckets, Firings
):
    """The project's persistent state, on one database.

    Each part (its own module) holds the statements of one aggregate; they share the engine
    and its write lock (``Database``), so callers hold one object and SQL stays in ``state``.
    """


def open_store(url: str) -> Store:
    """Connect to the state database at ``url`` and migrate it to the current schema."""
    engine = create_engine(url)
    migrate(engine)
    return Store(engine)
