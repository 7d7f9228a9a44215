"""Digest stage: which articles and takeaways one (language, audience set, window) issue holds.

Pure selection over an ArticleSet; no templates, no clock, no state. What was sent before comes
in as a mapping, so the same rules serve the by-hand preview and the scheduled send.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from .model import AUDIENCES, Article, ArticleSet, Digest, DigestItem


def audience_order(audiences: Sequence[str]) -> tuple[str, ...]:
    """Distinct audience ids in display order: the standard ones first, then others by name."""
    rank = {a: i for i, a in enumerate(AUDIENCES)}
    return tuple(sorted(set(audiences), key=lambda a: (rank.get(a, len(rank)), a)))


FIRST_ZONE = ZoneInfo("Etc/GMT-14")
"""UTC+14, the first zone a day reaches: a local-time job fires at its hour there."""


def local_send_time(day: date, hour: int, minute: int, zone: ZoneInfo) -> datetime:
    """``day`` at hour:minute on the clocks of ``zone``, in UTC. On the night the clocks go
    back the first of the two such moments; in the gap when they go forward, the wall time
    as it is reached after the gap (02:30 is then 03:30), as the schedule does."""
    wall = datetime.combine(day, time(hour, minute))
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)


def window_start(
    last_issue: date | None, today: date, first_window_days: int | None = None
) -> date | None:
    """The first day of a group's next window: the day of its last issue (what is dated that
    day or later and was not in it is new); for a group that never had an issue, the
    ``first_window_days`` days before ``today`` (None: no limit; the cap keeps the newest).
    """
    if last_issue is not None:
        return last_issue
    if first_window_days is None:
        return None
    return today - timedelta(days=first_window_days)


def late_articles(
    articles: Iterable[Article],
    carried: Mapping[tuple[str, str], tuple[str, date | None]],
    appeared: Mapping[tuple[str, str], datetime],
    last_issue: datetime,
) -> set[tuple[str, str]]:
    """The articles a group's next digest takes however they are dated: one no issue of the
    group carried that appeared (was first recorded; one never recorded appears now) after
    its last issue, a backdated piece or a late translation; and a revision whose date line
    the publisher moved past the version the group got, the mark of one worth sending again
    (a correction that keeps its date is not). ``carried``: (lang, slug) → (content hash,
    date line or None) as last issued to the group."""
    late = set()
    for article in articles:
        before = carried.get(article.key)
        if before is None:
            when = appeared.get(article.key)
            if when is None or when > last_issue:
                late.add(article.key)
        elif before[0] != article.content_hash and before[1] and article.updated > before[1]:
            late.add(article.key)
    return late


def select_digest(
    articles: ArticleSet,
    lang: str,
    audiences: Sequence[str],
    *,
    since: date | None = None,
    sent: Mapping[tuple[str, str], str] | None = None,
    limit: int | None = None,
    late: Collection[tuple[str, str]] = (),
    until: date | None = None,
) -> Digest | None:
    """The digest of ``lang`` for ``audiences``, or None when nothing in it would be new.

    An article is chosen when it has takeaways for at least one of the audiences, was updated
    on or after ``since`` (when given) or is in ``late`` (``late_articles``), is dated no later
    than ``until`` (when given: the last day whose articles are out, ``site.publish_time``)
    and is not in ``sent`` with the same content hash. An article in ``sent`` with another
    hash is a revision and is marked so. The digest lists the newest ``limit`` of them (all
    without one) and counts the rest in ``Digest.more``.
    """
    if not audiences:
        raise ValueError("a digest needs at least one audience")
    chosen = audience_order(audiences)
    sent = sent or {}
    items = []
    for article in articles.in_language(lang):
        if until is not None and article.updated > until:
            continue
        if since is not None and article.updated < since and article.key not in late:
            continue
        before = sent.get(article.key)
        if before == article.content_hash:
            continue
        takeaways = tuple(t for a in chosen if (t := article.takeaways_for(a)) is not None)
        if takeaways:
            items.append(DigestItem(article, takeaways, revised=before is not None))
    if not items:
        return None
    digest = Digest(lang, chosen, tuple(items), since)
    return digest if limit is None else digest.shortened(limit)
