"""The newsletter issues: each variant rendered once, with what it held and who gets it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa

from ..model import variant_key
from .database import Database, audience_ids, inserted_id, stored_audiences, utc
from .schema import deliveries, issue_articles, issues


@dataclass(frozen=True, slots=True)
class Issue:
    """One digest variant with new content, rendered once and kept for every reader's message."""

    id: int
    key: str
    lang: str
    audiences: tuple[str, ...]
    content_hash: str
    subject: str
    rendered: str
    """The rendered variant as the pipeline serialised it; every reader's message is built
    from it, so a run that resumes after a crash sends exactly what was issued."""
    created_at: datetime
    state: str = "issued"
    planned_through: int | None = None
    """Planned in chunks: the last reader id whose delivery is written; None once every
    reader's is."""
    local_time: str | None = None
    """HH:MM: each reader's delivery waits for that time of the day in their zone."""
    finished_at: datetime | None = None
    """When a run found nothing of it left to send (``close_finished``)."""


BATCH_SIZE = 500
"""Deliveries per batch: the unit one job sends when sends are spread over workers."""

Within = Callable[[sa.Connection, int, range], None]
"""Called in each transaction that writes delivery rows of an issue, with (connection, issue
id, the numbers of the batches written): what must commit with those rows (the jobs that
will send them)."""

STANDING = ("issued", "held")
"""Issue states whose content counts as issued (the window, the same-content rule)."""

SAMPLE = "sample"
"""The state of an issue whose readers were all sample readers (``add_sample_readers``): it is
delivered like any other, but it is no group's last issue for anyone else, so a real reader
who comes later still gets the group's first digest."""

LIVE = (*STANDING, SAMPLE)
"""Issue states whose readers are planned and sent to."""

CarriedArticle = tuple[str, str, str] | tuple[str, str, str, date]
"""(lang, slug, content hash[, date line]) of an article an issue carried."""


def batch_range(first: int, rows: int, batch_size: int) -> range:
    return range(first, first + -(-rows // batch_size))


def issue_from_row(row: sa.Row) -> Issue:
    return Issue(
        id=row.id,
        key=row.key,
        lang=row.lang,
        audiences=audience_ids(row.audiences),
        content_hash=row.content_hash,
        subject=row.subject,
        rendered=row.rendered,
        created_at=utc(row.created_at),
        state=row.state,
        planned_through=row.planned_through,
        local_time=row.local_time,
        finished_at=utc(row.finished_at) if row.finished_at is not None else None,
    )


def issue_values(
    key: str,
    lang: str,
    audiences: Sequence[str],
    content_hash: str,
    subject: str,
    rendered: str,
    now: datetime,
    held: bool,
    sample: bool = False,
) -> dict[str, Any]:
    return {
        "key": key,
        "lang": lang,
        "audiences": stored_audiences(audiences),
        "content_hash": content_hash,
        "subject": subject,
        "rendered": rendered,
        "created_at": now,
        "state": SAMPLE if sample else "held" if held else "issued",
    }


def insert_issue(
    db: sa.Connection, values: dict[str, Any], articles: Sequence[CarriedArticle]
) -> int:
    """The issue's row and its articles'; raises IntegrityError when its variant already has
    an issue of the same content."""
    issue_id = inserted_id(db.execute(sa.insert(issues).values(values)))
    if articles:
        db.execute(
            sa.insert(issue_articles),
            [
                {
                    "issue_id": issue_id,
                    "lang": a[0],
                    "slug": a[1],
                    "content_hash": a[2],
                    "updated": a[3] if len(a) > 3 else None,
                }
                for a in articles
            ],
        )
    return issue_id


class Issues(Database):
    """The issues' rows and the articles each held."""

    def sent_articles(self, lang: str, audiences: Sequence[str]) -> dict[tuple[str, str], str]:
        """(lang, slug) → content hash of the article as last issued to this variant."""
        return {key: carried[0] for key, carried in self.carried(lang, audiences).items()}

    def carried(
        self, lang: str, audiences: Sequence[str], samples: bool = False
    ) -> dict[tuple[str, str], tuple[str, date | None]]:
        """(lang, slug) → (content hash, date line) of the article as last issued to this
        variant (the date line None for issues from before it was kept); ``samples``: the
        sample issues count too (for a group of sample readers only)."""
        query = (
            sa.select(
                issue_articles.c.lang,
                issue_articles.c.slug,
                issue_articles.c.content_hash,
                issue_articles.c.updated,
            )
            .join(issues, issues.c.id == issue_articles.c.issue_id)
            .where(
                issues.c.lang == lang,
                issues.c.audiences == stored_audiences(audiences),
                issues.c.state.in_(LIVE if samples else STANDING),
            )
            .order_by(issues.c.id)
        )
        with self.engine.connect() as db:
            rows = db.execute(query)
            return {(row.lang, row.slug): (row.content_hash, row.updated) for row in rows}

    def last_issue(
        self, lang: str, audiences: Sequence[str], samples: bool = False
    ) -> datetime | None:
        """When this variant was last issued; None if never. ``samples``: a sample issue
        counts too (for a group of sample readers only)."""
        query = sa.select(sa.func.max(issues.c.created_at)).where(
            issues.c.lang == lang,
            issues.c.audiences == stored_audiences(audiences),
            issues.c.key == variant_key(lang, audiences),  # a broadcast is no digest's last
            issues.c.state.in_(LIVE if samples else STANDING),
        )
        with self.engine.connect() as db:
            found = db.execute(query).scalar()
        return utc(found) if found is not None else None

    def issue_times(self, lang: str) -> dict[tuple[int, str], datetime]:
        """When each issue of ``lang`` was made, by (id, key): the dates the web archive shows."""
        query = sa.select(issues.c.id, issues.c.key, issues.c.created_at).where(
            issues.c.lang == lang, issues.c.state == "issued"
        )
        with self.engine.connect() as db:
            return {(row.id, row.key): utc(row.created_at) for row in db.execute(query)}

    def latest_issue(self, lang: str, audiences: Sequence[str]) -> Issue | None:
        """The group's latest digest that went out (``issued``; no broadcast); None if none."""
        query = (
            sa.select(sa.func.max(issues.c.id))
            .where(issues.c.key == variant_key(lang, audiences), issues.c.state == "issued")
            .scalar_subquery()
        )
        with self.engine.connect() as db:
            row = db.execute(sa.select(issues).where(issues.c.id == query)).first()
        return None if row is None else issue_from_row(row)

    def issue_article_keys(self, issue_id: int) -> list[tuple[str, str]]:
        """(lang, slug) of each article an issue carried."""
        query = sa.select(issue_articles.c.lang, issue_articles.c.slug).where(
            issue_articles.c.issue_id == issue_id
        )
        with self.engine.connect() as db:
            return [(row.lang, row.slug) for row in db.execute(query)]

    def standing_issue(self, key: str) -> Issue | None:
        """The issue of this key that stands (issued or held), if any: a broadcast's."""
        query = sa.select(issues).where(issues.c.key == key, issues.c.state.in_(STANDING))
        with self.engine.connect() as db:
            row = db.execute(query.order_by(issues.c.id.desc()).limit(1)).first()
        return None if row is None else issue_from_row(row)

    def issue(self, issue_id: int) -> Issue | None:
        with self._database(), self.engine.connect() as db:
            row = db.execute(sa.select(issues).where(issues.c.id == issue_id)).first()
        return None if row is None else issue_from_row(row)

    # -- approval --------------------------------------------------------------------------

    def held_issues(self) -> list[Issue]:
        """The issues waiting for an editor, oldest first."""
        query = sa.select(issues.c.id).where(issues.c.state == "held").order_by(issues.c.id)
        with self.engine.connect() as db:
            ids = db.execute(query).scalars().all()
        return [issue for issue in map(self.issue, ids) if issue is not None]

    def release_issue(self, issue_id: int, now: datetime) -> bool:
        """An editor approved a held issue: it and its deliveries go out with the next send.
        False when it is not held (unknown, released already, rejected or expired)."""
        with self._database(), self._transaction() as db:
            released = db.execute(
                sa.update(issues)
                .where(issues.c.id == issue_id, issues.c.state == "held")
                .values(state="issued")
            ).rowcount
            db.execute(
                sa.update(deliveries)
                .where(deliveries.c.issue_id == issue_id, deliveries.c.status == "held")
                .values(status="pending", updated_at=now)
            )
        return bool(released)

    def withdraw_issue(self, issue_id: int, state: str, reply: str, now: datetime) -> bool:
        """A held issue is ``rejected`` or ``expired``: none of its deliveries is sent, and as
        it was never issued its articles and content may be issued again (nor are the rest of
        its readers planned). False when the issue is not held."""
        with self._database(), self._transaction() as db:
            withdrawn = db.execute(
                sa.update(issues)
                .where(issues.c.id == issue_id, issues.c.state == "held")
                .values(state=state, planned_through=None)
            ).rowcount
            db.execute(
                sa.update(deliveries)
                .where(deliveries.c.issue_id == issue_id, deliveries.c.status == "held")
                .values(status="skipped", reply=reply, updated_at=now)
            )
        return bool(withdrawn)

    def issue_changes(self, issue: Issue) -> dict[str, list[str]]:
        """The articles of ``issue`` against the previous issue of its variant (rejected and
        expired ones aside): added, revised (a new content hash) and removed, as lang/slug."""
        previous = (
            sa.select(sa.func.max(issues.c.id))
            .where(
                issues.c.lang == issue.lang,
                issues.c.audiences == stored_audiences(issue.audiences),
                issues.c.id < issue.id,
                issues.c.state.in_(STANDING),
            )
            .scalar_subquery()
        )
        query = sa.select(
            issue_articles.c.issue_id,
            issue_articles.c.lang,
            issue_articles.c.slug,
            issue_articles.c.content_hash,
        ).where(issue_articles.c.issue_id.in_([issue.id, previous]))
        with self.engine.connect() as db:
            rows = db.execute(query).all()
        current = {f"{r.lang}/{r.slug}": r.content_hash for r in rows if r.issue_id == issue.id}
        before = {f"{r.lang}/{r.slug}": r.content_hash for r in rows if r.issue_id != issue.id}
        return {
            "added": sorted(current.keys() - before.keys()),
            "revised": sorted(k for k in current.keys() & before.keys() if current[k] != before[k]),
            "removed": sorted(before.keys() - current.keys()),
        }
