"""Bounce reports: every bounce, delay or complaint that came back by mail, recorded once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from .database import Database, utc
from .schema import bounce_reports, deliveries, subscribers
from .subscribers import BOUNCE_WINDOW, count_bounce


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
    """Permanent failures counted (at the send and from bounce mail)."""
    counted_at: datetime | None
    """When the last of them was counted (older than the bounce window: forgotten at the
    next)."""
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
    """Whether a permanent failure of this delivery counted already (bounce mail can repeat)."""
    if delivery_id is None:
        return False
    query = sa.select(bounce_reports.c.id).where(
        bounce_reports.c.delivery_id == delivery_id, bounce_reports.c.counted
    )
    return db.execute(query).first() is not None


def _act(
    db: sa.Connection,
    kind: str,
    counted: bool,
    subscriber_id: int,
    max_bounces: int,
    now: datetime,
    window: timedelta,
) -> str:
    """What a report does to its reader (see ``record_bounce``), and what was done."""
    if kind == "complaint":
        db.execute(
            sa.update(subscribers)
            .where(subscribers.c.id == subscriber_id)
            .values(status="unsubscribed", updated_at=now)
        )
        return "unsubscribed"
    if kind != "permanent":
        return "recorded"
    if not counted:
        return "already counted"
    count_bounce(db, subscriber_id, max_bounces, now, window)
    status_now = db.execute(
        sa.select(subscribers.c.status).where(subscribers.c.id == subscriber_id)
    ).scalar()
    return "bounced" if status_now == "bounced" else "counted"


def _at_risk(row: Any) -> AtRisk:
    """An ``AtRisk`` from a row of ``readers_at_risk``'s query (its labels are the fields)."""
    times = {k: utc(row[k]) if row[k] is not None else None for k in ("counted_at", "last_at")}
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
        max_bounces: int,
        now: datetime,
        window: timedelta = BOUNCE_WINDOW,
    ) -> str:
        """Record one bounce report, once (by ``message_hash``), and act on it in one transaction.

        A permanent failure counts towards ``max_bounces`` once per delivery; a temporary one
        is only recorded; a complaint unsubscribes the reader at once. Returns what was done:
        ``duplicate``, ``counted``, ``bounced`` (counted, and the reader reached the limit),
        ``already counted``, ``recorded`` or ``unsubscribed``.
        """
        with self._transaction() as db:
            if _known(db, message_hash):
                return "duplicate"
            counted = kind == "permanent" and not _counted_before(db, target.delivery_id)
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
            return _act(db, kind, counted, target.subscriber_id, max_bounces, now, window)

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
                subscribers.c.bounces,
                subscribers.c.last_bounce_at.label("counted_at"),
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
            .where(sa.or_(subscribers.c.bounces > 0, kinds.c.subscriber_id.is_not(None)))
            .order_by(subscribers.c.bounces.desc(), subscribers.c.email)
        )
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        return [_at_risk(row._mapping) for row in rows]

    def bounce_counts(self) -> dict[str, int]:
        """Bounce reports on record by kind (permanent, temporary, complaint)."""
        query = sa.select(bounce_reports.c.kind, sa.func.count()).group_by(bounce_reports.c.kind)
        with self.engine.connect() as db:
            return {kind: n for kind, n in db.execute(query)}
