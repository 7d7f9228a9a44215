"""The clock: the one place the time of day is read. Everything else is handed ``now`` (or a
clock to call), so that one run sees one moment and a test sets the time it needs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def wall_clock() -> datetime:
    """The real time, in UTC."""
    return datetime.now(UTC)
