"""What a send stands at, as values: the deliveries of each issue by status, the uncertain
ones, the held issues, the deliveries waiting for their readers' local time, the bounce
reports, and with the procrastinate engine the workers alive and the relays' rates. It reads
the state database and prints nothing (``syndicate send status`` prints it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..errors import UsageError
from ..state import DELIVERY_STATUSES, AtRisk, Delivery, Store
from ..state.buckets import RelayRate

if TYPE_CHECKING:  # it imports Procrastinate: the scale extra
    from ..state.workers import WorkerAlive

BOUNCE_KINDS = ("permanent", "temporary", "complaint")


@dataclass(frozen=True, slots=True)
class IssueDeliveries:
    """An issue and its deliveries in each status."""

    id: int
    key: str
    deliveries: dict[str, int]
    """Every status of ``DELIVERY_STATUSES``, in that order, with its count (0 too)."""
    planning: bool
    """Its readers are still being planned in chunks."""
    finished: datetime | None
    """When a run found nothing of it left to send; None while it is open."""


@dataclass(frozen=True, slots=True)
class HeldIssue:
    """An issue waiting for an editor, with what it changes against the last one sent."""

    id: int
    key: str
    subject: str
    lang: str
    audiences: tuple[str, ...]
    readers: int
    created: datetime
    changes: dict[str, list[str]]
    """added, revised and removed articles, as lang/slug (``Store.issue_changes``)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """The deliveries of an issue waiting for their readers' local time in one zone."""

    issue: int
    issue_key: str
    timezone: str
    not_before: datetime
    deliveries: int


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """With ``send.engine = "procrastinate"``: the workers alive and each relay's shared rate
    now (cut by its slow-down replies, climbing back)."""

    workers: list[WorkerAlive]
    relays: list[RelayRate]


@dataclass(frozen=True, slots=True)
class SendStatus:
    """Where the sends stand (``send_status``)."""

    issues: list[IssueDeliveries]
    uncertain: list[Delivery]
    """Deliveries that may or may not have arrived: never resent unless a person says so."""
    held: list[HeldIssue]
    waiting: list[Waiting]
    bounces: dict[str, int]
    """Bounce reports on record by kind, every one of ``BOUNCE_KINDS``."""
    engine: EngineStatus | None = None
    readers: list[AtRisk] = field(default_factory=list)
    """The readers with bounces or complaints on record, worst first (``bounces list``)."""

    def to_json(self) -> dict[str, Any]:
        """The ``send status --json`` contract."""
        document = {
            "issues": [
                {
                    "id": issue.id,
                    "key": issue.key,
                    "deliveries": issue.deliveries,
                    "planning": issue.planning,
                    "finished": _when(issue.finished),
                }
                for issue in self.issues
            ],
            "uncertain": [
                {
                    "id": d.id,
                    "issue": d.issue_id,
                    "issue_key": d.issue_key,
                    "email": d.email,
                    "message_id": d.message_id,
                    "since": d.updated_at.isoformat(),
                    "reason": d.reply,
                }
                for d in self.uncertain
            ],
            "held": [
                {
                    "id": h.id,
                    "key": h.key,
                    "subject": h.subject,
                    "lang": h.lang,
                    "audiences": list(h.audiences),
                    "readers": h.readers,
                    "created": h.created.isoformat(),
                    "changes": h.changes,
                }
                for h in self.held
            ],
            "waiting": [
                {
                    "issue": w.issue,
                    "issue_key": w.issue_key,
                    "timezone": w.timezone,
                    "not_before": w.not_before.isoformat(),
                    "deliveries": w.deliveries,
                }
                for w in self.waiting
            ],
            "bounces": self.bounces,
            "readers_at_risk": [_reader_json(r) for r in self.readers],
        }
        return document | (_engine_json(self.engine) if self.engine is not None else {})


def _reader_json(r: AtRisk) -> dict[str, Any]:
    return {
        "email": r.email,
        "status": r.status,
        "hard_bounces": r.bounces,
        "soft_bounces": r.soft_bounces,
        "soft_since": _when(r.soft_since),
        "reason": r.reason,
        "complaints": r.complaints,
    }


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _engine_json(engine: EngineStatus) -> dict[str, Any]:
    return {
        "workers": [
            {
                "id": w.id,
                "last_heartbeat": w.last_heartbeat.isoformat(),
                "seconds_since": round(w.silent, 1),
                "batches": w.batches,
            }
            for w in engine.workers
        ],
        "relays": [
            {
                "relay": r.relay,
                "rate": r.rate,
                "current": round(r.current, 3),
                "cut_to": r.cut_rate,
                "cut_at": _when(r.cut_at),
                "back_at": _when(r.back_at),
            }
            for r in engine.relays
        ],
    }


def send_status(config: Config, store: Store, now: datetime) -> SendStatus:
    """Where the sends stand at ``now``: a reader without a time zone of their own waits in
    ``site.timezone``; the workers and relays only with the procrastinate engine."""
    counts = store.ledger.delivery_counts()
    reports = store.bounces.bounce_counts()
    progress = store.planning.issue_progress()
    issues = [
        IssueDeliveries(
            issue_id,
            key,
            {s: counts.get((issue_id, key, s), 0) for s in DELIVERY_STATUSES},
            *progress.get(issue_id, (False, None)),
        )
        for issue_id, key in sorted({(issue_id, key) for issue_id, key, _ in counts})
    ]
    held = [
        HeldIssue(
            issue.id,
            issue.key,
            issue.subject,
            issue.lang,
            issue.audiences,
            counts.get((issue.id, issue.key, "held"), 0),
            issue.created_at,
            store.issues.issue_changes(issue),
        )
        for issue in store.issues.held_issues()
    ]
    site_zone = config.site.timezone
    waiting = [
        Waiting(issue_id, key, zone or site_zone, when, n)
        for issue_id, key, zone, when, n in store.ledger.waiting(now)
    ]
    return SendStatus(
        issues,
        store.ledger.deliveries("uncertain"),
        held,
        waiting,
        {kind: reports.get(kind, 0) for kind in BOUNCE_KINDS},
        engine_status(config, store) if config.send.engine == "procrastinate" else None,
        store.bounces.readers_at_risk(),
    )


def engine_status(config: Config, store: Store) -> EngineStatus:
    """The workers alive (heard from within ``send.stalled_seconds``) and the relays' rates."""
    try:
        from .scale import workers_alive
    except ImportError as exc:
        extra = "pip install 'syndicate[scale]'"
        raise UsageError(f"the procrastinate engine needs the scale extra: {extra}") from exc
    workers = workers_alive(store, config.send.stalled_seconds)
    return EngineStatus(workers, store.relays.relay_rates(config.send.recover_seconds))
