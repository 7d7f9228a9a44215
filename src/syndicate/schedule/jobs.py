"""The work the schedule triggers, joined to the stages: the feed rebuild, the digest send, the
release of deliveries waiting for their readers' local time, and the extra steps of
``run --once`` (previews, the first run's sample readers), each reported as the counts and
reason of its one log line. The scheduler itself only knows ``Jobs``."""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from pathlib import Path

from ..build import FeedReport, build_feeds
from ..config import Config, DigestJob
from ..model import Severity
from ..previews import write_previews
from ..reader import read_articles
from ..sending.engine import dispatcher
from ..sending.issuing import SendReport, add_sample_readers, send_due
from ..state import open_store
from ..websub import HubNotifier
from .scheduler import Jobs, Report, Step

log = logging.getLogger("syndicate")


def default_jobs(config: Config, stop: threading.Event | None = None) -> Jobs:
    """What the schedule triggers: the feed rebuild, the digest send and the release of
    deliveries whose readers' local time has come, each reported as the counts of its log
    line. Once ``stop`` is set, a send takes no new delivery."""

    def rebuild_feeds(now: datetime) -> Report:
        return feeds_report(build_feeds(config, now=now, notify=HubNotifier()))

    def send_digest(job: DigestJob, now: datetime) -> Report:
        sent = send_due(
            config,
            now,
            langs=job.languages or None,
            audiences=job.audiences or None,
            stop=stop,
            local_time=(job.hour, job.minute) if job.local_time else None,
            dispatch=dispatcher(config),
        )
        return digest_report(job, sent)

    def deliver_due(now: datetime) -> Report:
        """The deliveries of local-time digests whose readers' time has come."""
        sent = send_due(config, now, stop=stop, issue=False, dispatch=dispatcher(config))
        counts = {"sent": sent.sent, "failed": sent.failed, "uncertain": sent.uncertain}
        counts |= {"skipped": sent.skipped, "left": sent.left, "waiting": sent.waiting}
        complete = not (sent.partial or sent.stopped)
        return Report(counts, None, complete=complete)

    return Jobs(
        build_feeds=rebuild_feeds,
        send_digest=send_digest,
        deliver_due=deliver_due,
        read_bounces=(lambda now: read_bounces(config, now)) if config.bounces.imap_url else None,
    )


def read_bounces(config: Config, now: datetime) -> Report:
    """The IMAP folder of bounce mail (``bounces.imap_url``), read and acted on as ``bounces
    process`` does, as the counts of its log line."""
    from ..bouncebox import UNREADABLE, bounce_source, process_bounces

    box = bounce_source(config, None)
    try:
        store = open_store(config.database_url)
        try:
            outcomes = process_bounces(config, store, box, now)
        finally:
            store.close()
    finally:
        box.close()
    kinds = [o.kind for o in outcomes]
    counts = {kind: kinds.count(kind) for kind in ("permanent", "temporary", "complaint")}
    counts |= {"not a bounce": kinds.count("none"), UNREADABLE: kinds.count(UNREADABLE)}
    return Report({"read": len(outcomes), **counts}, None)


def feeds_report(report: FeedReport) -> Report:
    """A feed rebuild as its log line: the counts, and a warning per file left out."""
    for problem in report.problems if not report.skipped else ():
        if problem.severity is Severity.ERROR:  # a file left out of the feeds
            fields = {"file": problem.file, "line": problem.line, "message": problem.message}
            log.warning("%s", problem, extra={"fields": {"problem": "article", **fields}})
    counts = {
        "entries": sum(report.entries.values()),
        "written": len(report.written),
        "unchanged": len(report.unchanged),
        "removed": len(report.removed),
        "problems": len(report.problems),
        "unannounced": sum(map(len, report.unannounced.values())),
    }
    return Report(counts, "no input changed since the last build" if report.skipped else None)


def digest_report(job: DigestJob, sent: SendReport) -> Report:
    """A digest send as its log line, with a line of its own per issue held, expired or not
    rendered."""
    counts = {
        "issues": len(sent.issues),
        "sent": sent.sent,
        "failed": sent.failed,
        "uncertain": sent.uncertain,
        "skipped": sent.skipped,
        "deferred": sent.deferred,
        "left": sent.left,
        "refused": len(sent.refused),
        "problems": len(sent.problems),
        "held": len(sent.held),
        "expired": len(sent.expired),
        "waiting": sent.waiting,
    }
    for issue_id, variant, readers, copy in sent.held:
        fields = {"issue": issue_id, "digest": variant, "readers": readers, "held": copy}
        log.info(
            "issue %s (%s) held for approval, %s reader(s); %s",
            *(issue_id, variant, readers, copy),
            extra={"fields": fields},
        )
    for issue_id, variant in sent.expired:
        fields = {"issue": issue_id, "digest": variant, "outcome": "expired"}
        log.warning("issue %s (%s) expired unapproved", issue_id, variant, extra={"fields": fields})
    for variant, _, why in sent.refused:
        fields = {"digest": variant, "outcome": "error", "reason": why}
        log.warning("digest %s not rendered: %s", variant, why, extra={"fields": fields})
    if not any(counts.values()):
        langs = ", ".join(job.languages) or "all languages"
        audiences = ", ".join(job.audiences) or "all audiences"
        return Report(counts, f"no new content for {langs} / {audiences}")
    complete = not (sent.partial or sent.stopped)
    return Report(counts, refused_reason(sent.refused), complete=complete)


def refused_reason(refused: list[tuple[str, int, str]]) -> str | None:
    """The run's reason for the groups not rendered: the first in full, then how many more,
    each logged above in a line of its own (a language without a catalog refuses each of its
    groups in the same words, and a site of many languages made one line of pages)."""
    if not refused:
        return None
    key, _, why = refused[0]
    more = len(refused) - 1
    return f"{key}: {why}" + (
        f"; and {more} more group(s) not rendered, each logged" if more else ""
    )


def once_steps(config: Config, jobs: Jobs) -> dict[str, Step]:
    """The steps ``run --once`` runs after the feed rebuild: the previews into
    ``<email.outbox>/preview``, and without a mail server the first run's sample readers."""
    previews = preview_folder(config)
    steps: dict[str, Step] = {"previews": lambda now: preview_step(config, previews, now)}
    if not config.smtp.url:
        steps["samples"] = lambda now: sample_step(config, jobs, now)
    return steps


def preview_folder(config: Config) -> Path:
    return config.path(config.email.outbox) / "preview"


def preview_step(config: Config, out: Path, now: datetime) -> Report:
    """``run --once``'s previews: every variant into ``out``; one that cannot be rendered is
    a warning naming it, and the others are still written."""
    folder = config.path(config.site.articles)
    found = read_articles(  # a digest shows no body
        folder, config.profiles, bodies=False, max_bytes=config.site.max_article_bytes
    )
    written, failures = write_previews(config, found, out, now=now)
    for variant, why in failures:
        log.warning(
            "preview %s not rendered: %s",
            variant,
            why,
            extra={"fields": {"preview": variant, "outcome": "error", "reason": why}},
        )
    return Report({"files": len(written), "failed": len(failures)}, complete=not failures)


def sample_step(config: Config, jobs: Jobs, now: datetime) -> Report | None:
    """A first run with no mail server and nobody subscribed subscribes a few readers at
    example.com and sends them the current digests at once, so the whole path (issue,
    deliveries, Maildir) shows; no line at all on later runs."""
    store = open_store(config.database_url)
    try:
        added = add_sample_readers(config, store, now)
    finally:
        store.close()
    if not added:
        return None
    sent = jobs.send_digest(DigestJob(name="samples"), now)
    return Report({"readers": added, **sent.counts}, sent.reason, sent.complete)
