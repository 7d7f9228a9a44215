"""A broadcast: one article sent now, as an issue of its own, to every active reader of its
language (all audiences, or those named). Each reader group gets one issue keyed by the
article (``Digest.broadcast``), so a second run finds it and sends it only to the group's
readers who have no delivery of it (``plan_unreached``: who came since, or moved into the
group by their preferences); it goes through approval and the ledger like any issue, and
counts as carried, so no digest repeats the article. It is never a group's last issue: the
digests' windows go on as before."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..config import Config
from ..digest import audience_order
from ..errors import UsageError
from ..model import Article, ArticleSet, Digest, DigestItem
from ..reader import read_articles
from ..state import Store
from .dispatch import BatchContext, Dispatcher
from .issuing import (
    Issuing,
    SendReport,
    deliver_pending,
    finish_issuing,
    issue_digest,
    last_day_out,
    local_dispatcher,
    planning,
    reader_groups,
    variants,
)
from .transports import Mailer


@dataclass
class BroadcastReport(SendReport):
    """A send report, and the groups that had this broadcast already."""

    already: list[tuple[str, int, int]] = field(default_factory=list)
    """(issue key, readers who had it, readers of the group without it, who get it now) per
    group that was sent this article before: nobody gets it twice."""


def find_article(articles: ArticleSet, ref: str, langs: Iterable[str] = ()) -> list[Article]:
    """The language versions ``ref`` names: an article file's path, ``LANG/SLUG`` or a slug
    (the versions of every language, or of ``langs``). Raises UsageError naming what it
    looked for when none is found, or when one is dated after today's publish time."""
    wanted = set(langs)
    path = Path(ref).resolve() if ref.endswith(".txt") or Path(ref).is_file() else None
    lang, _, slug = ref.partition("/") if "/" in ref and path is None else ("", "", ref)
    found = [
        a
        for a in articles
        if (Path(a.source).resolve() == path if path is not None else a.slug == slug)
        and (not lang or a.lang == lang)
        and (not wanted or a.lang in wanted)
    ]
    if not found:
        raise UsageError(
            f"no article {ref!r} in the article set"
            + (f" in {', '.join(sorted(wanted))}" if wanted else "")
            + ": give its file, LANG/SLUG or its slug (syndicate check lists them)"
        )
    return sorted(found, key=lambda a: a.lang)


def broadcast_article(
    config: Config,
    now: datetime,
    ref: str,
    *,
    mailer: Mailer,
    store: Store,
    langs: Iterable[str] = (),
    audiences: Iterable[str] = (),
    dry_run: bool = False,
    dispatch: Dispatcher | None = None,
    stop: threading.Event | None = None,
) -> BroadcastReport:
    """Send the article ``ref`` names (``find_article``) now, as an issue of its own per
    reader group of its language(s) (``audiences``: the groups with one of them), each
    reader once however often it runs; held first with ``email.approval``. Then deliver what
    is pending, as ``send`` does (until ``stop`` is set)."""
    articles = read_articles(
        config.path(config.site.articles),
        config.profiles,
        bodies=False,
        max_bytes=config.site.max_article_bytes,
    )
    versions = {a.lang: a for a in find_article(articles, ref, langs)}
    not_out = [a for a in versions.values() if a.updated > last_day_out(config, now)]
    if not_out:
        raise UsageError(f"{not_out[0].source}: dated {not_out[0].updated}, not published yet")
    report = BroadcastReport(problems=articles.problems)
    groups = variants(reader_groups(config, store, report), versions, audiences or None)
    dispatch = dispatch or local_dispatcher(config)
    run = Issuing(config, store, mailer, now, report, dry_run, None, dispatch)
    for (lang, chosen), readers in groups.items():
        digest = broadcast_digest(versions[lang], chosen)
        made = store.issues.standing_issue(digest.key)
        if made is None:
            issue_digest(run, digest, readers)
            continue
        plan = planning(config, now, dispatch)
        added = (
            store.planning.unreached_count(made.id, plan.leave_out)
            if dry_run
            else store.planning.plan_unreached(made.id, plan)
        )
        report.already.append((digest.key, readers - added, added))
    finish_issuing(run)
    if dry_run:
        report.pending = store.ledger.pending_count()
        return report
    deliver_pending(BatchContext(config, store, mailer, now, None, stop), report, dispatch)
    return report


def broadcast_digest(article: Article, audiences: Iterable[str]) -> Digest:
    """The one-article issue of a reader group: its audiences' takeaways of ``article``."""
    chosen = audience_order(list(audiences))
    takeaways = tuple(t for a in chosen if (t := article.takeaways_for(a)) is not None)
    return Digest(article.lang, chosen, (DigestItem(article, takeaways),), broadcast=True)
