"""The rate of each relay shared by every worker of a distributed send: a token bucket row in
PostgreSQL that each worker draws one token from before each message."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from .database import Database
from .schema import relay_buckets

_NOW = sa.func.clock_timestamp()
_FILLED = sa.func.least(
    relay_buckets.c.burst,
    relay_buckets.c.tokens
    + relay_buckets.c.rate * sa.extract("epoch", _NOW - relay_buckets.c.refilled_at),
)
"""The tokens the bucket holds now: what it had, plus what its rate added since, up to its
burst."""

_TAKE = (
    sa.update(relay_buckets)
    .where(relay_buckets.c.relay == sa.bindparam("name"), _FILLED >= 1)
    .values(tokens=_FILLED - 1, refilled_at=_NOW)
    .returning(relay_buckets.c.tokens)
)
_RATE = sa.select(relay_buckets.c.rate).where(relay_buckets.c.relay == sa.bindparam("name"))


class Buckets(Database):
    """One row per relay: its rate (messages a second), burst and the tokens left."""

    def ensure_bucket(self, relay: str, rate: float) -> None:
        """The relay's bucket, full, unless it is there already (its rate then stays: the
        workers share what a slow-down made of it)."""
        # a tenth of a second's worth at most at once: no second sees more than 1.1 x rate
        burst = max(1.0, rate / 10)
        row = {"relay": relay, "rate": rate, "burst": burst, "tokens": burst, "refilled_at": _NOW}
        with self._database(), self._transaction() as db:
            db.execute(pg_insert(relay_buckets).values(row).on_conflict_do_nothing())

    def take_token(self, relay: str) -> float:
        """Take one token; 0 when it was taken, else the seconds until one is due."""
        # each statement commits on the server as it runs (autocommit): a worker stopped
        # between two statements holds no lock on the row every other worker draws from
        with self._database(), self.engine.connect() as conn:
            db = conn.execution_options(isolation_level="AUTOCOMMIT")
            if db.execute(_TAKE, {"name": relay}).first() is not None:
                return 0.0
            rate = db.execute(_RATE, {"name": relay}).scalar_one()
        return 1.0 / rate
