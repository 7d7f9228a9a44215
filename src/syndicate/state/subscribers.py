"""The readers: who they are, what they read, whether they still want it, and their bounces."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ..subscribers import ReaderRow, address_key
from .database import Database, audience_ids, stored_audiences, utc
from .schema import bounce_reports, deliveries, subscribers

_LEFT = ("unsubscribed", "bounced")
"""Statuses of a reader who left (or whose mailbox did): only ``--resubscribe`` undoes them."""


@dataclass(frozen=True, slots=True)
class Subscriber:
    id: int
    email: str
    lang: str
    audiences: tuple[str, ...]
    status: str
    consent_source: str
    created_at: datetime
    """When the reader gave their consent (``consent_source`` says where)."""
    bounces: int = 0
    """Hard bounces counted."""
    soft_bounces: int = 0
    """Soft bounces with no successful delivery in between (see ``COUNT_SOFT``)."""
    updated_at: datetime | None = None
    timezone: str | None = None
    """IANA time zone; None: the site's."""
    last_bounce_at: datetime | None = None
    """When the last hard bounce was counted (an older count is forgotten at the next)."""
    first_soft_at: datetime | None = None
    """When the first of the soft bounces counted came."""
    last_reason: str | None = None
    """The last bounce's reason, or ``feedback`` (a complaint)."""


def _subscriber(row: sa.Row) -> Subscriber:
    return Subscriber(
        id=row.id,
        email=row.email,
        lang=row.lang,
        audiences=audience_ids(row.audiences),
        status=row.status,
        consent_source=row.consent_source,
        created_at=utc(row.created_at),
        bounces=row.hard_bounces,
        soft_bounces=row.soft_bounces,
        updated_at=utc(row.updated_at),
        timezone=row.timezone,
        last_bounce_at=utc(row.last_bounce_at) if row.last_bounce_at else None,
        first_soft_at=utc(row.first_soft_at) if row.first_soft_at else None,
        last_reason=row.last_reason,
    )


@dataclass(frozen=True, slots=True)
class BouncePolicy:
    """When bounces stop a reader's mail (``[bounces]``): hard ones at ``hard_limit`` (each
    within ``hard_window`` of the one before), soft ones at ``soft_limit`` once they span
    ``soft_days`` with no successful delivery in between."""

    hard_limit: int = 1
    soft_limit: int = 5
    soft_days: timedelta = timedelta(days=14)
    hard_window: timedelta = timedelta(days=90)

    def values(self, now: datetime) -> dict[str, Any]:
        """The parameters of ``COUNT_*`` and ``MARK_*`` for a bounce at ``now``."""
        return {
            "now": now,
            "stale_before": now - self.hard_window,
            "hard_limit": self.hard_limit,
            "soft_limit": self.soft_limit,
            "soft_before": now - self.soft_days,
        }


# One more hard bounce for a reader: a 5xx at the send that says the address or its domain is
# gone (``Ledger.bounce``, compiled) and hard bounce mail (``count_bounce``) count alike. A
# count whose last bounce is older than ``stale_before`` (now less the hard window) is
# forgotten: this bounce is the first again, so with a hard limit above 1 a bounce now and
# then over the years never adds up to it.
COUNT_HARD = (
    sa.update(subscribers)
    .where(subscribers.c.id == sa.bindparam("subscriber_id"))
    .values(
        hard_bounces=sa.case(
            (subscribers.c.last_bounce_at < sa.bindparam("stale_before"), 1),
            else_=subscribers.c.hard_bounces + 1,
        ),
        last_bounce_at=sa.bindparam("now"),
        last_reason=sa.bindparam("reason"),
        updated_at=sa.bindparam("now"),
    )
)

# A success in between, decided when a soft bounce of delivery ``delivery_id`` is counted,
# not when a message is accepted: behind a relay ``sent`` only says the relay took it, and a
# full mailbox's bounce comes days later by mail, so a count cleared at each ``sent`` would
# go 1, 0, 1, 0 week after week and never reach the limit. A success is a delivery of the
# reader's after the one whose soft bounce was counted last and before this one, sent, and
# with no bounce or delay on record against it (a delay: the relay was still trying).
_SUCCESS_IN_BETWEEN = (
    sa.select(deliveries.c.id)
    .where(
        deliveries.c.subscriber_id == subscribers.c.id,
        deliveries.c.id > sa.func.coalesce(subscribers.c.last_soft_delivery, 0),
        deliveries.c.id < sa.bindparam("delivery_id", type_=sa.Integer),
        deliveries.c.status == "sent",
        ~sa.select(bounce_reports.c.id)
        .where(
            bounce_reports.c.subscriber_id == subscribers.c.id,  # by the reader's index
            bounce_reports.c.delivery_id == deliveries.c.id,
            bounce_reports.c.kind != "complaint",
        )
        .exists(),
    )
    .exists()
)
_SOFT_AFRESH = sa.or_(subscribers.c.soft_bounces == 0, _SUCCESS_IN_BETWEEN)

# One more soft bounce (a full mailbox, a filter, a policy, ...), for delivery ``delivery_id``
# (None: the reader's alone, one more): the first again after a success in between (see
# ``_SUCCESS_IN_BETWEEN``), which the delivery then bounds for the next one.
COUNT_SOFT = (
    sa.update(subscribers)
    .where(subscribers.c.id == sa.bindparam("subscriber_id"))
    .values(
        soft_bounces=sa.case((_SOFT_AFRESH, 1), else_=subscribers.c.soft_bounces + 1),
        first_soft_at=sa.case(
            (_SOFT_AFRESH, sa.bindparam("now")),
            else_=sa.func.coalesce(subscribers.c.first_soft_at, sa.bindparam("now")),
        ),
        last_soft_delivery=sa.func.coalesce(
            sa.bindparam("delivery_id", type_=sa.Integer), subscribers.c.last_soft_delivery
        ),
        last_reason=sa.bindparam("reason"),
        updated_at=sa.bindparam("now"),
    )
)

MARK_HARD = (
    sa.update(subscribers)
    .where(
        subscribers.c.id == sa.bindparam("subscriber_id"),
        subscribers.c.hard_bounces >= sa.bindparam("hard_limit"),
    )
    .values(status="bounced")
)

# Soft bounces stop a reader's mail only when they persist: as many as the limit, the first
# of them at least soft_days ago (``soft_before``).
MARK_SOFT = (
    sa.update(subscribers)
    .where(
        subscribers.c.id == sa.bindparam("subscriber_id"),
        subscribers.c.soft_bounces >= sa.bindparam("soft_limit"),
        subscribers.c.first_soft_at <= sa.bindparam("soft_before"),
    )
    .values(status="bounced")
)


def count_bounce(
    db: sa.Connection,
    subscriber_id: int,
    delivery_id: int | None,
    hard: bool,
    reason: str,
    policy: BouncePolicy,
    now: datetime,
) -> None:
    """One more hard or soft bounce for a reader, of ``delivery_id`` (None: unknown), marked
    bounced if it reaches the policy's limit (see ``COUNT_HARD``, ``COUNT_SOFT``)."""
    values = {
        "subscriber_id": subscriber_id,
        "delivery_id": delivery_id,
        "reason": reason[:40],
        **policy.values(now),
    }
    db.execute(COUNT_HARD if hard else COUNT_SOFT, values)
    db.execute(MARK_HARD if hard else MARK_SOFT, values)


def _imported(row: ReaderRow, *, status: str, consent_source: str, now: datetime) -> dict:
    """The values of a new reader from an import row (the import's options fill its gaps)."""
    return {
        "email": row.email,
        "email_key": address_key(row.email),
        "lang": row.lang,
        "audiences": stored_audiences(row.audiences),
        "status": row.status or status,
        "consent_source": row.consent_source or consent_source,
        "created_at": row.created or now,
        "updated_at": row.updated or now,
        **_bounce_counts(row, now),
        "timezone": row.timezone,
    }


def _bounce_counts(row: ReaderRow, now: datetime) -> dict[str, Any]:
    """The bounce counts an import row brings along, with their times: where a file gives a
    count without its time (an export from before the soft counts), it counts from the row's
    time, as the migration that added the times did. The delivery a soft count was last
    bounded by is this database's and stays behind: the next delivery after the import that
    is sent and never bounces is a success in between."""
    since = row.updated or now
    return {
        "hard_bounces": row.bounces or 0,
        "last_bounce_at": row.last_bounce or (since if row.bounces else None),
        "soft_bounces": row.soft_bounces or 0,
        "first_soft_at": row.soft_since or (since if row.soft_bounces else None),
        "last_reason": row.last_reason,
    }


def _changes(
    found: sa.Row,
    row: ReaderRow,
    *,
    status: str,
    consent_source: str,
    now: datetime,
    resubscribe: bool,
) -> dict[str, Any]:
    """What an import row changes of a known reader (see ``import_subscribers``)."""
    values: dict[str, Any] = {"lang": row.lang, "audiences": stored_audiences(row.audiences)}
    if row.timezone:
        values["timezone"] = row.timezone
    wanted = row.status or (status if resubscribe else None)
    if wanted and (found.status not in _LEFT or resubscribe):
        values["status"] = wanted
        if found.status in _LEFT and wanted not in _LEFT:
            # They come back: this import holds their consent now.
            values.update(
                consent_source=row.consent_source or consent_source,
                created_at=row.created or now,
                **_bounce_counts(row, now),
            )
    return {k: v for k, v in values.items() if getattr(found, k) != v}


def group_filter(
    lang: str, audiences: str, *, after: int | None, leave_out: str | None = None
) -> sa.ColumnElement[bool]:
    """The active readers of one variant (``lang`` and exactly the stored ``audiences``) with
    an id above ``after``; without those of consent source ``leave_out``."""
    found = sa.and_(
        subscribers.c.lang == lang,
        subscribers.c.audiences == audiences,
        subscribers.c.status == "active",
    )
    if after is not None:
        found = found & (subscribers.c.id > after)
    if leave_out is not None:
        found = found & (subscribers.c.consent_source != leave_out)
    return found


class Subscribers(Database):
    """The readers' rows."""

    def reader_groups(self, leave_out: str | None = None) -> dict[tuple[str, tuple[str, ...]], int]:
        """(language, audience ids) → active readers, per variant a reader can be in; without
        those of consent source ``leave_out``."""
        query = (
            sa.select(subscribers.c.lang, subscribers.c.audiences, sa.func.count())
            .where(subscribers.c.status == "active")
            .group_by(subscribers.c.lang, subscribers.c.audiences)
        )
        if leave_out is not None:
            query = query.where(subscribers.c.consent_source != leave_out)
        with self.engine.connect() as db:
            return {(lang, audience_ids(a)): n for lang, a, n in db.execute(query)}

    def count_readers(self, status: str, consent_source: str) -> int:
        """Readers of this status added with this consent source."""
        query = sa.select(sa.func.count()).where(
            subscribers.c.status == status, subscribers.c.consent_source == consent_source
        )
        with self.engine.connect() as db:
            return db.execute(query).scalar_one()

    def add_subscriber(
        self,
        email: str,
        lang: str,
        audiences: Sequence[str],
        *,
        status: str,
        consent_source: str,
        now: datetime,
        timezone: str | None = None,
    ) -> Subscriber:
        """Insert a reader, or update language/audiences/status (and time zone, when given)
        of an existing address (in whatever letter case it was first given: that spelling is
        kept)."""
        values = {
            "lang": lang,
            "audiences": stored_audiences(audiences),
            "status": status,
            "updated_at": now,
        }
        if timezone is not None:
            values["timezone"] = timezone
        key = address_key(email)
        with self._transaction() as db:
            row = db.execute(sa.select(subscribers).where(subscribers.c.email_key == key)).first()
            if row is None:
                db.execute(
                    sa.insert(subscribers).values(
                        email=email,
                        email_key=key,
                        consent_source=consent_source,
                        created_at=now,
                        **values,
                    )
                )
            else:
                db.execute(sa.update(subscribers).where(subscribers.c.id == row.id).values(values))
        found = self.subscriber(key)
        assert found is not None
        return found

    def subscriber(self, email: str) -> Subscriber | None:
        """The reader of this address, in any letter case."""
        query = sa.select(subscribers).where(subscribers.c.email_key == address_key(email))
        with self.engine.connect() as db:
            row = db.execute(query).first()
        return _subscriber(row) if row else None

    def subscriber_by_id(self, subscriber_id: int) -> Subscriber | None:
        with self.engine.connect() as db:
            row = db.execute(
                sa.select(subscribers).where(subscribers.c.id == subscriber_id)
            ).first()
        return _subscriber(row) if row else None

    def set_status(self, subscriber_id: int, status: str, now: datetime) -> None:
        with self._transaction() as db:
            db.execute(
                sa.update(subscribers)
                .where(subscribers.c.id == subscriber_id)
                .values(status=status, updated_at=now)
            )

    def remove_subscriber(self, email: str) -> Subscriber | None:
        """Delete the reader of this address (in any letter case); the one removed, if any."""
        found = self.subscriber(email)
        if found is None:
            return None
        with self._transaction() as db:
            db.execute(sa.delete(subscribers).where(subscribers.c.id == found.id))
        return found

    def remove_consent_source(self, source: str) -> int:
        """Delete every reader added with consent source ``source`` (the ledger keeps its rows)."""
        with self._transaction() as db:
            result = db.execute(
                sa.delete(subscribers).where(subscribers.c.consent_source == source)
            )
        return result.rowcount

    def all(self, status: str | None = None) -> Iterator[Subscriber]:
        """Every reader (of ``status``), in the order they subscribed."""
        query = sa.select(subscribers).order_by(subscribers.c.id)
        if status is not None:
            query = query.where(subscribers.c.status == status)
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        return map(_subscriber, rows)

    def import_subscribers(
        self,
        rows: Sequence[ReaderRow],
        *,
        status: str,
        consent_source: str,
        now: datetime,
        resubscribe: bool = False,
    ) -> tuple[int, int]:
        """Add or update readers in one transaction: all or nothing. Returns (added, updated);
        rows that change nothing count as neither.

        A new address gets what its row says (status, consent source and date, bounces), else
        ``status``, ``consent_source`` and ``now``. A known address (in any letter case) takes
        the row's language, audiences and status (when it has one), and keeps its consent;
        but a reader who left (unsubscribed, bounced) stays so: an import never re-subscribes
        anyone. With ``resubscribe`` it does: the row's status (else ``status``) holds, and a
        reader who comes back gets the row's consent in place of the old one.
        """
        updated = 0
        new: list[dict] = []  # inserted at once: a statement each was 9/10 of a large import
        with self._transaction() as db:
            known = {row.email_key: row for row in db.execute(sa.select(subscribers))}
            for row in rows:
                found = known.get(address_key(row.email))
                if found is None:
                    new.append(
                        _imported(row, status=status, consent_source=consent_source, now=now)
                    )
                elif changed := _changes(
                    found,
                    row,
                    status=status,
                    consent_source=consent_source,
                    now=now,
                    resubscribe=resubscribe,
                ):
                    db.execute(
                        sa.update(subscribers)
                        .where(subscribers.c.id == found.id)
                        .values(updated_at=now, **changed)
                    )
                    updated += 1
            if new:
                db.execute(sa.insert(subscribers), new)
        return len(new), updated
