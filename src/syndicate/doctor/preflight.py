"""What ``send`` checks first: the DNS checks, again only when the last doctor run (or
preflight) is a day old or the settings changed since, and asked with a short timeout. A send
that receivers would reject (DMARC fails under p=reject) is refused; where DNS cannot be
reached the preflight says so in a line, keeps that answer, and lets the send go on. A Maildir
outbox is a local setup, and a sender at a reserved example domain asks the public DNS about
nothing it knows: neither is checked."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from ..config import Config
from ..files import write_atomic
from .records import DNS_CHECKS, dns_verdicts
from .report import Check
from .resolver import DnsUnreachable, Lookups
from .setup import read_setup

MAX_AGE = timedelta(days=1)
TIMEOUT = 3.0
"""Seconds the preflight waits for a DNS answer: an offline machine must not hold a send."""


@dataclass(frozen=True)
class LastRun:
    """What the last doctor run or preflight found, for which settings."""

    at: datetime
    fingerprint: str
    checks: list[dict[str, object]] = field(default_factory=list)
    refusal: str | None = None
    unreachable: str | None = None

    def fresh(self, fingerprint: str, now: datetime) -> bool:
        return self.fingerprint == fingerprint and timedelta(0) <= now - self.at < MAX_AGE

    def as_bytes(self) -> bytes:
        data = {**self.__dict__, "at": self.at.isoformat()}
        return json.dumps(data, indent=2).encode()


def fingerprint(config: Config) -> str:
    """The settings the checks depend on, hashed: the whole config and the DKIM key."""
    key = b""
    if config.email.dkim_key_file is not None:
        try:
            key = config.path(config.email.dkim_key_file).read_bytes()
        except OSError:
            key = b"unreadable"
    return hashlib.sha256(config.model_dump_json().encode() + key).hexdigest()


def read_last(path: Path) -> LastRun | None:
    """The kept result; None when there is none or it cannot be read (then the checks run)."""
    try:
        data = json.loads(path.read_text("utf-8"))
        return LastRun(**{**data, "at": datetime.fromisoformat(data["at"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def keep(config: Config, run: LastRun) -> None:
    write_atomic(config.path(config.state.doctor_file), run.as_bytes())


def recorded(
    config: Config, checks: Sequence[Check], refusal: str | None, now: datetime
) -> LastRun:
    """A doctor run's result, as the preflight keeps it."""
    found = [check.as_json() for check in checks]
    return LastRun(now, fingerprint(config), found, refusal)


RESERVED = ("example.com", "example.net", "example.org", "test", "example", "invalid", "localhost")
"""Names no publisher sends from (RFC 2606, RFC 6761): an example configuration's."""


def reserved(domain: str) -> bool:
    return any(domain == name or domain.endswith("." + name) for name in RESERVED)


@dataclass(frozen=True)
class Verdict:
    lines: list[str]
    """What to tell the operator, one line each."""
    refusal: str | None = None
    """Why the send is refused, or None."""


def preflight(
    config: Config, now: datetime, *, nameserver: str | None = None, timeout: float = TIMEOUT
) -> Verdict:
    """The verdict on sending now; the DNS is asked (and the answer kept) only when the kept
    one is stale."""
    if config.smtp.url is None:
        return Verdict([])  # the Maildir: nothing leaves this machine
    if nameserver is None and reserved(read_setup(config).from_domain):
        return Verdict([])  # the public DNS knows nothing of an example site
    path = config.path(config.state.doctor_file)
    stamp = fingerprint(config)
    last = read_last(path)
    lines = []
    if last is None or not last.fresh(stamp, now):
        last = _ask(config, now, stamp, nameserver, timeout)
        try:
            keep(config, last)
        except OSError as exc:  # the checks are done; the next send asks again
            lines.append(f"preflight: {path}: not kept ({exc})")
        if last.unreachable:
            return Verdict([f"preflight: {last.unreachable}; the DNS checks are skipped", *lines])
    failures = [c for c in last.checks if c.get("name") in DNS_CHECKS and not c.get("ok", True)]
    lines += [f"preflight: {c['name']} failed: {c['detail']}" for c in failures]
    if failures:
        lines.append("preflight: `syndicate doctor` says how to fix each")
    return Verdict(lines, last.refusal)


def _ask(
    config: Config, now: datetime, stamp: str, nameserver: str | None, timeout: float
) -> LastRun:
    try:
        checks, refusal = dns_verdicts(read_setup(config), Lookups(nameserver, timeout=timeout))
    except DnsUnreachable as exc:
        return LastRun(now, stamp, unreachable=str(exc))
    return LastRun(now, stamp, [c.as_json() for c in checks], refusal)
