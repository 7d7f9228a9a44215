"""The rate of each relay shared by every worker of a distributed send: a token bucket row in
PostgreSQL that each worker draws a token from before each message (a few at once at high
rates).

A relay's slow-down reply cuts the row's rate for every worker at once (``cut_rate``,
``cut_at``); the rate then climbs back by itself: what it is at any moment is computed from
the cut in each statement that reads it (``_RATE_NOW``), so nothing has to raise it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from .database import Database
from .schema import relay_buckets

_NOW = sa.func.clock_timestamp()
_ROW = relay_buckets.c
_SINCE_CUT = sa.func.greatest(sa.extract("epoch", _NOW - _ROW.cut_at), 0)
_RATE_NOW = sa.func.least(
    _ROW.rate,
    sa.func.coalesce(
        _ROW.cut_rate + _ROW.rate * _SINCE_CUT / sa.bindparam("recover", type_=sa.Float),
        _ROW.rate,
    ),
)
"""The rate now: the configured one, or after a cut the rate it was cut to plus the configured
rate for every ``recover`` seconds since, up to the configured one."""
_FILLED = sa.func.least(
    _ROW.burst, _ROW.tokens + _RATE_NOW * sa.extract("epoch", _NOW - _ROW.refilled_at)
)
"""The tokens the bucket holds now: what it had, plus what its rate added since, up to its
burst."""

_WANT = sa.bindparam("want", type_=sa.Integer)
_FOUND = (
    sa.select(_ROW.relay, sa.func.least(_WANT, sa.func.floor(_FILLED)).label("taken"))
    .where(_ROW.relay == sa.bindparam("name"), _FILLED >= 1)
    .with_for_update()
    .cte("found")
)
_TAKE = (
    sa.update(relay_buckets)
    .where(_ROW.relay == _FOUND.c.relay)
    .values(tokens=_FILLED - _FOUND.c.taken, refilled_at=_NOW)
    .returning(_FOUND.c.taken)
)
"""Up to ``want`` whole tokens, as many as the bucket holds, in one statement."""
_RATE = sa.select(_RATE_NOW).where(_ROW.relay == sa.bindparam("name"))
_CUT = (
    sa.update(relay_buckets)
    .where(
        _ROW.relay == sa.bindparam("name"),
        sa.or_(_ROW.cut_at.is_(None), sa.bindparam("interval", type_=sa.Float) <= _SINCE_CUT),
    )
    .values(
        cut_rate=sa.func.greatest(
            sa.func.least(sa.bindparam("floor", type_=sa.Float), _ROW.rate),
            _RATE_NOW * sa.bindparam("factor", type_=sa.Float),
        ),
        cut_at=_NOW,
    )
    .returning(_ROW.cut_rate)
)
_MADE_UP = (_ROW.rate - _ROW.cut_rate) / _ROW.rate * sa.bindparam("recover", type_=sa.Float)
"""Seconds the climb back from the last cut takes."""
_BACK_AT = _ROW.cut_at + sa.func.make_interval(0, 0, 0, 0, 0, 0, _MADE_UP)
_RATES = sa.select(
    _ROW.relay, _ROW.rate, _RATE_NOW.label("current"), _ROW.cut_rate, _ROW.cut_at, _BACK_AT
).order_by(_ROW.relay)


@dataclass(frozen=True)
class RelayRate:
    """A relay's shared rate as the workers see it now (messages a second)."""

    relay: str
    rate: float
    """The configured rate (``smtp.rate``)."""
    current: float
    """The rate now: below ``rate`` while a cut is in force."""
    cut_rate: float | None
    """What the last cut left (none yet: None)."""
    cut_at: datetime | None
    back_at: datetime | None
    """When the last cut is (or was) made up."""


class Buckets(Database):
    """One row per relay: its rate (messages a second), burst and the tokens left, and the
    last cut of its rate."""

    def ensure_bucket(self, relay: str, rate: float) -> None:
        """The relay's bucket, full if new; an existing one takes ``rate`` as its configured
        rate (a changed config), and a cut of it stays in force."""
        # a tenth of a second's worth at most at once: no second sees more than 1.1 x rate
        burst = max(1.0, rate / 10)
        row = {"relay": relay, "rate": rate, "burst": burst, "tokens": burst, "refilled_at": _NOW}
        insert = pg_insert(relay_buckets).values(row).on_conflict_do_nothing()
        # an UPDATE locks only the row it changes: the one every worker draws from stays free
        # when the config is the same (an upsert would lock it in any case)
        changed = (
            sa.update(relay_buckets)
            .where(_ROW.relay == relay, sa.or_(_ROW.rate != rate, _ROW.burst != burst))
            .values(rate=rate, burst=burst, tokens=sa.func.least(_ROW.tokens, burst))
        )
        with self._database(), self._transaction() as db:
            db.execute(insert)
            db.execute(changed)

    def take_tokens(self, relay: str, recover_seconds: float, want: int) -> tuple[int, float]:
        """Take up to ``want`` tokens, as many as there are: how many were taken, and when
        none was, the seconds until one is due (at the rate now, which climbs back to the
        configured one in ``recover_seconds`` after a cut to nothing)."""
        # each statement commits on the server as it runs (autocommit): a worker stopped
        # between two statements holds no lock on the row every other worker draws from
        with self._database(), self.engine.connect() as conn:
            db = conn.execution_options(isolation_level="AUTOCOMMIT")
            values = {"name": relay, "recover": recover_seconds, "want": want}
            taken = db.execute(_TAKE, values).scalar()
            if taken:
                return int(taken), 0.0
            rate = db.execute(_RATE, values).scalar_one()
        return 0, 1.0 / rate

    def cut_rate(
        self, relay: str, factor: float, floor: float, interval: float, recover_seconds: float
    ) -> float | None:
        """Cut the relay's rate now to ``factor`` of what it is, not below ``floor`` (nor the
        configured rate): the rate cut to, or None when it was cut less than ``interval``
        seconds ago (the replies of one burst cut it once)."""
        values = {
            "name": relay,
            "factor": factor,
            "floor": floor,
            "interval": interval,
            "recover": recover_seconds,
        }
        # a concurrent cut waits for this one's row lock, then finds it recent: one cut
        with self._database(), self.engine.connect() as conn:
            db = conn.execution_options(isolation_level="AUTOCOMMIT")
            return db.execute(_CUT, values).scalar_one_or_none()

    def relay_rates(self, recover_seconds: float) -> list[RelayRate]:
        """Every relay's rate now, and its last cut."""
        with self._database(), self.engine.connect() as db:
            rows = db.execute(_RATES, {"recover": recover_seconds}).all()
        return [RelayRate(*row) for row in rows]
