"""Pacing: how fast a send goes (``smtp.rate``), and how it slows when the relay asks its
senders to (``throttling``, ``SlowDown``), within one run (``Pacer``); a rate shared by
several machines is the scale-out's (``scale.SharedPace``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..config import Config

SLOW_DOWN = 0.7
"""A slow-down reply cuts the rate to this share of what it was."""
CUT_INTERVAL = 1.0
"""Seconds after a cut in which slow-down replies cut nothing more: they answer messages sent
before it took effect (every connection hears the relay at once)."""

_TEMPORARY_REPLY = re.compile(r"4\d\d(?:[ -]|$)")
_SLOW_DOWN_STATUS = re.compile(r"4\d\d[ -]4\.7\.\d{1,3}\b")
"""An enhanced status 4.7.x (RFC 3463: security or policy), where relays put their rate and
connection limits: Gmail's 421 4.7.28, Microsoft's 451 4.7.500, Postfix's 450 4.7.1 "too much
mail from"."""
_SLOW_DOWN_WORDS = re.compile(
    r"\brate[- ]?limit|\b(?:sending|send|message|connection|maximum) rate\b"
    r"|\btoo many (?:[\w-]+ ){0,3}?(?:connections|messages|sessions)\b|\btoo much mail\b"
    r"|\bthrottl|\bslow(?:ing)? down\b",
    re.IGNORECASE,
)
"""Replies without a 4.7.x that speak of the sender's rate or connections: "Rate limit
exceeded", Exim's "Too many concurrent SMTP connections", Amazon SES's "454 Throttling
failure: Maximum sending rate exceeded", "try again later, slow down"."""
_GREYLISTING = re.compile(r"gr[ae]y[- ]?list", re.IGNORECASE)
"""Greylisting is about one (sender, recipient, client) triplet, whatever its status says
(often 4.7.1): waiting between messages never shortens it."""


def throttling(reply: str) -> bool:
    """Whether a temporary failure is the relay asking its senders to slow down, which cuts
    the rate of every connection: a 421 (the relay closes the connection: too many
    connections or messages), an enhanced status 4.7.x, or a 4xx that speaks of rate, too
    many connections or messages, throttling or slowing down. Any other 4xx (a plain 451,
    greylisting, a full mailbox) is one reader's: that reader alone is retried, later, and
    the rate is left as it is; cutting it for each of them took a send with 5 % greylisted
    readers from 7 s to 193 s. A lost connection says nothing of the kind either."""
    if _TEMPORARY_REPLY.match(reply) is None:
        return False
    if reply.startswith("421"):
        return True
    if _GREYLISTING.search(reply):
        return False
    status = _SLOW_DOWN_STATUS.match(reply) is not None
    return status or _SLOW_DOWN_WORDS.search(reply) is not None


@dataclass(frozen=True)
class SlowDown:
    """How a rate falls on slow-down replies and climbs back (AIMD): each cut to
    ``SLOW_DOWN`` of what it is, never below ``min_rate``; then back up linearly, by the full
    rate every ``recover_seconds`` (so a cut to 70 % is undone in 30 % of it)."""

    min_rate: float = 1.0
    recover_seconds: float = 600.0

    def cut(self, rate: float, current: float) -> float:
        """The rate after a cut from ``current`` (``rate`` is the configured one)."""
        return max(min(self.min_rate, rate), current * SLOW_DOWN)

    def climbed(self, rate: float, cut_rate: float, since: float) -> float:
        """The rate ``since`` seconds after a cut to ``cut_rate``."""
        return min(rate, cut_rate + rate * max(since, 0.0) / self.recover_seconds)


Pause = Callable[[float], bool]
"""Wait so many seconds; False (at once) when the run is stopping."""


class Pace(Protocol):
    """Waits for a sender's turn: ``Pacer`` within one run, or a rate shared by runs."""

    def wait(self, pause: Pause) -> bool: ...

    def slowed(self, reply: str) -> None:
        """The relay answered ``reply``, a slow-down reply (``throttling``): lower the rate."""
        ...


class Pacer:
    """Spaces sends ``1/rate`` seconds apart across threads; slower for a while after the
    relay asks to slow down (``slow_down``)."""

    def __init__(
        self,
        rate: float,
        slow_down: SlowDown = SlowDown(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.slow_down = slow_down
        self.clock = clock
        self.cut: tuple[float, float] | None = None
        """The rate the last cut left, and when (``clock``)."""
        self.next = clock()
        self.lock = threading.Lock()

    def wait(self, pause: Pause) -> bool:
        """Wait for this sender's slot; False when the run stops meanwhile."""
        with self.lock:
            now = self.clock()
            slot = max(self.next, now)
            self.next = slot + 1.0 / self._current(now)
        return pause(slot - now) if slot > now else True

    def current(self) -> float:
        """The rate now: ``rate``, or less after a cut."""
        with self.lock:
            return self._current(self.clock())

    def slowed(self, reply: str) -> None:
        """Cut the rate, unless it was cut less than ``CUT_INTERVAL`` ago."""
        with self.lock:
            now = self.clock()
            if self.cut is None or now - self.cut[1] >= CUT_INTERVAL:
                self.cut = (self.slow_down.cut(self.rate, self._current(now)), now)

    def _current(self, now: float) -> float:
        if self.cut is None:
            return self.rate
        cut_rate, at = self.cut
        return self.slow_down.climbed(self.rate, cut_rate, now - at)


def slow_down(config: Config) -> SlowDown:
    """How the rate backs off when the relay asks senders to slow down."""
    return SlowDown(config.send.min_rate, config.send.recover_seconds)
