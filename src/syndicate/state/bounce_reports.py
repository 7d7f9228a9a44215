"""Bounce reports: every bounce, delay or complaint that came back by mail, recorded once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from .database import Database, utc
from .schema import bounce_reports, deliveries, subscribers
from .subscribers import BouncePolicy, count_bounce


@dataclass(frozen=True, slots=True)
class Bounced:
    """The delivery a bounce report is about (None when only the reader is known)."""

    delivery_id: int | None
    subscriber_id: int
    email: str


@dataclass(frozen=True, slots=True)
class AtRisk:
    """A reader with bounces or complaints on record, and the latest of them."""

    email: str
    status: str
    bounces: int
    """Hard bounces counted (at the send and from bounce mail)."""
    counted_at: datetime | None
    """When the last of them was counted (older than the hard window: forgotten at the
    next)."""
    soft_bounces: int
    """Soft bounces counted with no successful delivery in between."""
    soft_since: datetime | None
    """When the first of those came."""
    reason: str | None
    """The last counted bounce's reason (``userunknown``, ``mailboxfull``, ...), or
    ``feedback`` for a complaint."""
    temporary: int
    complaints: int
    last_kind: str | None
    last_status: str | None
    last_reason: str | None
    last_at: datetime | None


def _known(db: sa.Connection, message_hash: str) -> bool:
    query = sa.select(bounce_reports.c.id).where(bounce_reports.c.message_hash == message_hash)
    return db.execute(query).first() is not None


def _counted_before(db: sa.Connection, delivery_id: int | None) -> bool:
    """Whether a bounce of this delivery counted already (bounce mail can repeat, and a
    delay notice may come before the bounce)."""
    if delivery_id is None:
        return False
    query = sa.select(bounce_reports.c.id).where(
        bounce_reports.c.delivery_id == delivery_id, bounce_reports.c.counted
    )
    return db.execute(query).first() is not None


def _counts(kind: str, status: str) -> bool:
    """Whether a report counts as a bounce: a hard one, or a soft one that failed (5.x.x: a
    full mailbox, a filter); a delay (4.x.x: the relay still tries) is only recorded."""
    return kind == "permanent" or (kind == "temporary" and status.startswith("5"))


def _act(
    db: sa.Connection,
    kind: str,
    status: str,
    counted: bool,
    target: Bounced,
    reason: str,
    policy: BouncePolicy,
    now: datetime,
) -> str:
    """What a report does to its reader (see ``record_bounce``), and what was done."""
    if kind == "complaint":
        db.execute(
            sa.update(subscribers)
            .where(subscribers.c.id == target.subscriber_id)
            .values(status="unsubscribed", last_reason="feedback", updated_at=now)
        )
        return "unsubscribed"
    if not _counts(kind, status):
        return "recorded"
    if not counted:
        return "already counted"
    hard = kind == "permanent"
    count_bounce(db, target.subscriber_id, target.delivery_id, hard, reason, policy, now)
    status_now = db.execute(
        sa.select(subscribers.c.status).where(subscribers.c.id == target.subscriber_id)
    ).scalar()
    return "bounced" if status_now == "bounced" else "counted"


_TIMES = ("counted_at", "soft_since", "last_at")


def _at_risk(row: Any) -> AtRisk:
    """An ``AtRisk`` from a row of ``readers_at_risk``'s query (its labels are the fields)."""
    times = {k: utc(row[k]) if row[k] is not None else None for k in _TIMES}
    return AtRisk(**{**row, **times})


class BounceReports(Database):
    """The bounce reports' rows, and what they do to the readers they name."""

    def bounced_deliveries(
        self,
        *,
        ids: Sequence[int] = (),
        message_ids: Sequence[str] = (),
        emails: Sequence[str] = (),
    ) -> list[Bounced]:
        """The deliveries a bounce names: by delivery id, by Message-ID, or (``emails``) each
        address's latest delivery, else its reader alone."""
        query = sa.select(deliveries.c.id, deliveries.c.subscriber_id, deliveries.c.email)
        with self.engine.connect() as db:
            if ids:
                rows = db.execute(query.where(deliveries.c.id.in_(ids)).order_by(deliveries.c.id))
                return [Bounced(*row) for row in rows]
            if message_ids:
                rows = db.execute(query.where(deliveries.c.message_id.in_(message_ids)))
                return [Bounced(*row) for row in rows]
            found = []
            for email in emails:
                row = db.execute(
                    query.where(sa.func.lower(deliveries.c.email) == email.lower())
                    .order_by(deliveries.c.id.desc())
                    .limit(1)
                ).first()
                if row is None:
                    row = db.execute(
                        sa.select(sa.null(), subscribers.c.id, subscribers.c.email).where(
                            sa.func.lower(subscribers.c.email) == email.lower()
                        )
                    ).first()
                if row is not None:
                    found.append(Bounced(*row))
            return found

    def bounce_known(self, message_hash: str) -> bool:
        """Whether the bounce message with this SHA-256 was recorded already."""
        with self.engine.connect() as db:
            return _known(db, message_hash)

    def record_bounce(
        self,
        *,
        message_hash: str,
        target: Bounced,
        kind: str,
        status: str,
        reason: str,
        matched_by: str,
        policy: BouncePolicy,
        now: datetime,
        cause: str = "",
    ) -> str:
        """Record one bounce report, once (by ``message_hash``), and act on it in one transaction.

        A permanent failure (a hard bounce) counts towards the policy's hard limit, a soft
        one that failed (5.x.x) towards its soft limit, each once per delivery (a delay,
        4.x.x, is only recorded); a complaint
        unsubscribes the reader at once. ``cause`` is the failure's reason in the taxonomy of
        ``bounces.reasons``, kept as the reader's last. Returns what was done: ``duplicate``,
        ``counted``, ``bounced`` (counted, and the reader reached a limit), ``already
        counted``, ``recorded`` or ``unsubscribed``.
        """
        with self._transaction() as db:
            if _known(db, message_hash):
                return "duplicate"
            counted = _counts(kind, status) and not _counted_before(db, target.delivery_id)
            db.execute(
                sa.insert(bounce_reports).values(
                    message_hash=message_hash,
                    subscriber_id=target.subscriber_id,
                    delivery_id=target.delivery_id,
                    kind=kind,
                    status=status[:40],
                    reason=reason[:2000],
                    matched_by=matched_by,
                    counted=counted,
                    created_at=now,
                )
            )
            why = cause or kind
            return _act(db, kind, status, counted, target, why, policy, now)

    def readers_at_risk(self) -> list[AtRisk]:
        """Readers with counted bounces, or any bounce or complaint on record, worst first."""
        kinds = (
            sa.select(
                bounce_reports.c.subscriber_id,
                sa.func.sum(sa.case((bounce_reports.c.kind == "temporary", 1), else_=0)).label(
                    "temporary"
                ),
                sa.func.sum(sa.case((bounce_reports.c.kind == "complaint", 1), else_=0)).label(
                    "complaints"
                ),
                sa.func.max(bounce_reports.c.id).label("last_id"),
            )
            .group_by(bounce_reports.c.subscriber_id)
            .subquery()
        )
        last = bounce_reports.alias("latest")
        query = (
            sa.select(
                subscribers.c.email,
                subscribers.c.status,
                subscribers.c.hard_bounces.label("bounces"),
                subscribers.c.last_bounce_at.label("counted_at"),
                subscribers.c.soft_bounces,
                subscribers.c.first_soft_at.label("soft_since"),
                subscribers.c.last_reason.label("reason"),
                sa.func.coalesce(kinds.c.temporary, 0).label("temporary"),
                sa.func.coalesce(kinds.c.complaints, 0).label("complaints"),
                last.c.kind.label("last_kind"),
                last.c.status.label("last_status"),
                last.c.reason.label("last_reason"),
                last.c.created_at.label("last_at"),
            )
            .select_from(subscribers)
            .outerjoin(kinds, kinds.c.subscriber_id == subscribers.c.id)
            .outerjoin(last, last.c.id == kinds.c.last_id)
            .where(
                sa.or_(
                    subscribers.c.hard_bounces > 0,
                    subscribers.c.soft_bounces > 0,
                    kinds.c.subscriber_id.is_not(None),
                )
            )
            .order_by(
                subscribers.c.hard_bounces.desc(),
                subscribers.c.soft_bounces.desc(),
                subscribers.c.email,
            )
        )
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        return [_at_risk(row._mapping) for row in rows]

    def bounce_counts(self) -> dict[str, int]:
        """Bounce reports on record by kind (permanent, temporary, complaint)."""
        query = sa.select(bounce_reports.c.kind, sa.func.count()).group_by(bounce_reports.c.kind)
        with self.engine.connect() as db:
            return {kind: n for kind, n in db.execute(query)}
