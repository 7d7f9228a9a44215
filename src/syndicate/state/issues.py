"""The newsletter issues: each variant rendered once, with what it held and who gets it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from .database import Database, audience_ids, inserted_id, stored_audiences, utc
from .schema import deliveries, issue_articles, issues
from .subscribers import Subscriber


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


class Issues(Database):
    """The issues' rows and the articles each held."""

    def sent_articles(self, lang: str, audiences: Sequence[str]) -> dict[tuple[str, str], str]:
        """(lang, slug) → content hash of the article as last issued to this variant."""
        query = (
            sa.select(issue_articles.c.lang, issue_articles.c.slug, issue_articles.c.content_hash)
            .join(issues, issues.c.id == issue_articles.c.issue_id)
            .where(issues.c.lang == lang, issues.c.audiences == stored_audiences(audiences))
            .order_by(issues.c.id)
        )
        with self.engine.connect() as db:
            return {(row.lang, row.slug): row.content_hash for row in db.execute(query)}

    def last_issue(self, lang: str, audiences: Sequence[str]) -> datetime | None:
        """When this variant was last issued; None if never."""
        query = sa.select(sa.func.max(issues.c.created_at)).where(
            issues.c.lang == lang, issues.c.audiences == stored_audiences(audiences)
        )
        with self.engine.connect() as db:
            found = db.execute(query).scalar()
        return utc(found) if found is not None else None

    def create_issue(
        self,
        *,
        key: str,
        lang: str,
        audiences: Sequence[str],
        content_hash: str,
        subject: str,
        rendered: str,
        articles: Sequence[tuple[str, str, str]],
        readers: Sequence[Subscriber],
        message_id: Callable[[int, int], str],
        now: datetime,
    ) -> Issue | None:
        """Record a new issue, the (lang, slug, content hash) of its ``articles`` and one
        pending delivery per reader, in one transaction.

        Nothing leaves before this commits, so a crash can never lose track of a reader.
        Returns None when this variant already had an issue with the same content (also when
        a concurrent run recorded it first).
        """
        values = {
            "key": key,
            "lang": lang,
            "audiences": stored_audiences(audiences),
            "content_hash": content_hash,
            "subject": subject,
            "rendered": rendered,
            "created_at": now,
        }
        try:
            with self._transaction() as db:
                issue_id = inserted_id(db.execute(sa.insert(issues).values(values)))
                if articles:
                    db.execute(
                        sa.insert(issue_articles),
                        [
                            {"issue_id": issue_id, "lang": a_lang, "slug": slug, "content_hash": h}
                            for a_lang, slug, h in articles
                        ],
                    )
                if readers:
                    db.execute(
                        sa.insert(deliveries),
                        [
                            {
                                "issue_id": issue_id,
                                "subscriber_id": reader.id,
                                "email": reader.email,
                                "message_id": message_id(issue_id, reader.id),
                                "status": "pending",
                                "updated_at": now,
                            }
                            for reader in readers
                        ],
                    )
        except sa.exc.IntegrityError:
            return None
        return self.issue(issue_id)

    def issue_times(self, lang: str) -> dict[tuple[int, str], datetime]:
        """When each issue of ``lang`` was made, by (id, key): the dates the web archive shows."""
        query = sa.select(issues.c.id, issues.c.key, issues.c.created_at).where(
            issues.c.lang == lang
        )
        with self.engine.connect() as db:
            return {(row.id, row.key): utc(row.created_at) for row in db.execute(query)}

    def issue(self, issue_id: int) -> Issue | None:
        with self._database(), self.engine.connect() as db:
            row = db.execute(sa.select(issues).where(issues.c.id == issue_id)).first()
        if row is None:
            return None
        return Issue(
            id=row.id,
            key=row.key,
            lang=row.lang,
            audiences=audience_ids(row.audiences),
            content_hash=row.content_hash,
            subject=row.subject,
            rendered=row.rendered,
            created_at=utc(row.created_at),
        )
