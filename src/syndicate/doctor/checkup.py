"""A whole doctor run: every check in order, each one's trouble kept to its own verdict (a DNS
server that does not answer fails the DNS checks, not the run)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from datetime import datetime

from ..config import Config
from ..errors import SyndicateError
from ..model import ArticleSet
from ..state import Store
from .message import check_messages
from .readers import check_readers
from .records import DNS_CHECKS, dns_verdicts
from .relay import check_relay
from .report import Check, failed
from .resolver import DnsUnreachable, Lookups
from .setup import Setup, read_setup


def _dns(setup: Setup, lookups: Lookups) -> tuple[list[Check], str | None]:
    """The DNS checks and the DMARC refusal; each DNS check failed when DNS is unreachable."""
    try:
        return dns_verdicts(setup, lookups)
    except DnsUnreachable as exc:
        fix = "ask another server with --nameserver HOST[:PORT] (or SYNDICATE_NAMESERVER)"
        return [failed(name, str(exc), fix) for name in DNS_CHECKS], None


def _guarded(name: str, check: Callable[[], list[Check]]) -> list[Check]:
    """``check``'s verdicts, or one failure saying what stopped it."""
    try:
        return check()
    except DnsUnreachable as exc:
        return [failed(name, str(exc), "ask another server with --nameserver HOST[:PORT]")]
    except SyndicateError as exc:
        return [failed(name, str(exc), "")]


def run_doctor(
    config: Config,
    *,
    articles: ArticleSet,
    store: Store,
    lookups: Lookups,
    now: datetime,
    tls_context: ssl.SSLContext | None = None,
    online: bool = False,
) -> tuple[list[Check], str | None]:
    """Every check: dns, relay, message (one per language; ``online``: site.base_url asked
    too), list; and the DMARC refusal."""
    checks, refusal = _dns(read_setup(config), lookups)
    checks += _guarded("relay", lambda: [check_relay(config, tls_context)])
    checks += _guarded(
        "message", lambda: check_messages(config, articles, lookups, now, online=online)
    )
    readers = store.subscribers.all(status="active")
    checks += _guarded(
        "list", lambda: [check_readers(readers, store.bounces.readers_at_risk(), lookups)]
    )
    return checks, refusal
