"""Issuing: select → render → store. Each group's next digest, rendered once, recorded as an
issue with one delivery row per reader (in chunks, resumed after a crash), before any message
leaves; then the handed-in dispatcher delivers what is pending. Issues held for approval (their
test copy, approving, expiring), and deliveries at each reader's local time. No SMTP here, and
no choice of engine: the caller hands in the ``Dispatcher`` (``engine.dispatcher``).

So a rerun after a crash sends what is left and never re-issues the same content.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TypedDict, Unpack
from zoneinfo import ZoneInfo

from ..config import Config
from ..digest import (
    FIRST_ZONE,
    audience_order,
    late_articles,
    local_send_time,
    select_digest,
    window_start,
)
from ..errors import UsageError
from ..feeds import publication_candidates, updated_at
from ..files import write_atomic
from ..model import ArticleSet, Diagnostic, Digest
from ..reader import read_articles
from ..render import RenderedDigest, render_digest
from ..routes import site_url
from ..state import Finished, Issue, Planning, Store, open_store
from ..subscribers import ReaderRow
from .approval import test_copies
from .dispatch import BatchContext, Dispatcher, LocalDispatcher
from .loop import DeliveryCounts, Progress
from .messages import (
    issue_page_name,
    message_ids,
    restore_rendered,
    sender_domain,
    serialise_rendered,
    view_url,
)
from .transports import Mailer, open_mailer

logger = logging.getLogger("syndicate.send")
"""Named as before the modules moved into ``sending/``: ``--log-json`` lines carry it."""


def next_digest(
    config: Config,
    articles: ArticleSet,
    lang: str,
    audiences: Sequence[str],
    *,
    now: datetime,
    since: date | None = None,
    store: Store | None = None,
    samples: bool = False,
) -> Digest | None:
    """The next digest of one group (language and audience set): from ``since`` when given,
    else what is new since the group's last issue (and what no issue of it carried that
    appeared since, however it is dated: ``late_articles``), else its first window; never
    what it already had, nor an article ``site.publish_time`` still holds back, and at most
    ``email.max_articles`` listed (the rest counted). ``samples``: the group's readers are
    all sample readers, whose issues count for them alone."""
    chosen = audience_order(audiences)
    carried = store.issues.carried(lang, chosen, samples) if store is not None else {}
    late: set[tuple[str, str]] = set()
    if since is None:
        zone = ZoneInfo(config.site.timezone)
        last = store.issues.last_issue(lang, chosen, samples) if store is not None else None
        since = window_start(
            last.astimezone(zone).date() if last is not None else None,
            now.astimezone(zone).date(),
            config.email.first_window_days,
        )
        if last is not None and store is not None:
            late = late_articles(
                articles.in_language(lang), carried, store.published.appeared(lang), last
            )
    return select_digest(
        articles,
        lang,
        chosen,
        since=since,
        sent={key: content for key, (content, _) in carried.items()},
        limit=config.email.max_articles,
        late=late,
        until=last_day_out(config, now),
    )


def last_day_out(config: Config, now: datetime) -> date:
    """The last date line whose articles are out at ``now``: today once ``site.publish_time``
    has come in the site's zone, else yesterday. The feeds hold the later ones back, and so
    do the mails."""
    today = now.astimezone(ZoneInfo(config.site.timezone)).date()
    return today if updated_at(config, today) <= now else today - timedelta(days=1)


@dataclass
class SendReport(DeliveryCounts):
    """What a send did: issues recorded (or, in a dry run, that would be) and delivery counts."""

    issues: list[tuple[str, int]] = field(default_factory=list)
    """(variant key, readers) per new issue."""
    pending: int = 0
    """Deliveries waiting (dry run only: nothing is sent)."""
    problems: tuple[Diagnostic, ...] = ()
    """Article files that could not be read (the others were still used)."""
    samples: int = 0
    """Sample readers left out because a real SMTP server is set."""
    refused: list[tuple[str, int, str]] = field(default_factory=list)
    """(variant key, readers, reason) per group whose digest could not be rendered; every
    other group was still issued (in a dry run: would fail)."""
    held: list[tuple[int, str, int, str]] = field(default_factory=list)
    """(issue id, variant key, readers, what became of its test copy) per new issue held for
    approval (``email.approval``)."""
    expired: list[tuple[int, str]] = field(default_factory=list)
    """(issue id, key) per held issue cancelled by ``email.approval_expires_days``."""
    waiting: int = 0
    """Deliveries whose local time has not come yet."""
    resumed: list[tuple[int, str]] = field(default_factory=list)
    """(issue id, key) per issue whose planning, stopped between two chunks, went on."""
    finished: list[Finished] = field(default_factory=list)
    """The issues this run found with nothing left to send, closed."""

    @property
    def partial(self) -> bool:
        """Some reader did not get what was due: a group refused, or deliveries that failed,
        are uncertain or wait for the next run (deferred, and not sent by another run since)."""
        return bool(self.refused or self.failed or self.uncertain or (self.deferred and self.left))


def variants(
    groups: Mapping[tuple[str, tuple[str, ...]], int],
    langs: Iterable[str] | None = None,
    audiences: Iterable[str] | None = None,
) -> dict[tuple[str, tuple[str, ...]], int]:
    """Readers per (language, exact audience set), from the readers per stored variant
    (``Store.reader_groups``): each reader gets one message.

    ``audiences`` keeps the sets that include at least one of them.
    """
    wanted_langs = set(langs) if langs else None
    wanted = set(audiences) if audiences else None
    chosen: dict[tuple[str, tuple[str, ...]], int] = {}
    for (lang, ids), readers in groups.items():
        if not ids or (wanted_langs and lang not in wanted_langs):
            continue
        if wanted and not wanted & set(ids):
            continue
        key = (lang, audience_order(ids))
        chosen[key] = chosen.get(key, 0) + readers
    return dict(sorted(chosen.items()))


def write_issue_page(config: Config, issue: Issue, rendered: RenderedDigest) -> Path:
    """The issue as a public web page (no reader's links in it), written atomically."""
    base = site_url(config)
    page = rendered.personalise(
        unsubscribe_url=base, preferences_url=base, view_url=view_url(config, issue)
    ).html
    path = config.path(config.web.issues) / issue.lang / f"{issue_page_name(issue)}.html"
    write_atomic(path, page.encode())
    return path


class SendChoices(TypedDict, total=False):
    """What a caller of ``send_due`` may choose of a send: ``send_digests``' keywords but
    the mailer and the store, which ``send_due`` opens from the config."""

    langs: Iterable[str] | None
    audiences: Iterable[str] | None
    since: date | None
    dry_run: bool
    progress: Progress | None
    stop: threading.Event | None
    issue: bool
    local_time: tuple[int, int] | None
    dispatch: Dispatcher | None


def send_due(config: Config, now: datetime, **choices: Unpack[SendChoices]) -> SendReport:
    """``send_digests`` on the configured state database and mailer: what the schedule and the
    ``send`` command call, each with the dispatcher of ``send.engine`` (``engine.dispatcher``)."""
    store = open_store(config.database_url)
    try:
        return send_digests(config, now, mailer=open_mailer(config), store=store, **choices)
    finally:
        store.close()


def send_digests(
    config: Config,
    now: datetime,
    *,
    mailer: Mailer,
    store: Store,
    langs: Iterable[str] | None = None,
    audiences: Iterable[str] | None = None,
    since: date | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    issue: bool = True,
    local_time: tuple[int, int] | None = None,
    dispatch: Dispatcher | None = None,
) -> SendReport:
    """Issue every digest variant with new content and deliver what is pending (``dispatch``
    sends it or leaves it to the workers; by default, with the local engine, this process).

    With ``email.approval`` a new issue is held, its test copy sent to ``email.preview_to``,
    until ``approve_issue``; a held issue past ``email.approval_expires_days`` is cancelled
    first. ``issue=False`` only delivers what is pending (after an approval).

    Each group's window is what is new since its last issue (its first: the newest
    ``email.max_articles``, within ``email.first_window_days`` when set); ``since`` sets the
    first day of every window instead. A group whose digest cannot be rendered is reported in
    ``SendReport.refused`` and the others go ahead. ``local_time`` (hour, minute): each
    reader's delivery waits for that time of the day in their own zone (``local_send_time``).

    An issue and its delivery rows (``send.plan_chunk`` readers a transaction, the first with
    the issue) are committed before any message leaves; a rerun after a crash plans the rest
    of an issue stopped between two chunks, sends what is pending, from the stored issue, and
    never re-issues the same content. Pending deliveries of earlier runs are sent too,
    whatever the filters; an issue with nothing left to send is closed.
    ``dry_run`` reports what would be issued and writes nothing. Once ``stop`` is set, no
    more deliveries start (see ``deliver``). The sample readers of a first run are never sent
    to through a real SMTP server.
    """
    # A digest shows titles, dates and takeaways: the summaries hold them.
    articles = read_articles(
        config.path(config.site.articles),
        config.profiles,
        bodies=False,
        max_bytes=config.site.max_article_bytes,
    )
    report = SendReport(problems=articles.problems)
    groups = variants(reader_groups(config, store, report), langs, audiences) if issue else {}
    dispatch = dispatch or local_dispatcher(config)
    if not dry_run:
        report.expired = expire_held(config, store, now)
        report.resumed = resume_planning(config, store, now, dispatch)
    run = Issuing(config, store, mailer, now, report, dry_run, local_time, dispatch)
    _issue_groups(run, articles, groups, since)
    if dry_run:
        report.pending = store.ledger.pending_count()
        return report
    deliver_pending(BatchContext(config, store, mailer, now, progress, stop), report, dispatch)
    return report


def local_dispatcher(config: Config) -> Dispatcher:
    """The dispatcher when none is handed in: this process sends, which only the local engine
    does (the others' dispatchers are made where the program is put together)."""
    if config.send.engine != "local":
        raise ValueError(f"send.engine = {config.send.engine!r}: hand in its dispatcher")
    return LocalDispatcher()


def reader_groups(
    config: Config, store: Store, report: SendReport
) -> dict[tuple[str, tuple[str, ...]], int]:
    """The active readers per stored variant; with a real SMTP server, without the sample
    readers of a first run (counted in ``report.samples``)."""
    leave_out = _left_out(config)
    if leave_out is not None:
        report.samples = store.subscribers.count_readers("active", leave_out)
    return store.subscribers.reader_groups(leave_out)


def _left_out(config: Config) -> str | None:
    """The consent source whose readers get no delivery: the sample readers, once a real SMTP
    server is set."""
    return SAMPLE_SOURCE if config.smtp.url else None


def planning(
    config: Config,
    now: datetime,
    dispatch: Dispatcher,
    created_at: datetime | None = None,
    local_time: str | None = None,
) -> Planning:
    """How this run writes an issue's delivery rows: ``send.plan_chunk`` readers per
    transaction, each with its batches' jobs (``dispatch.plan``). ``local_time`` (HH:MM):
    each reader's delivery waits for it, on the day of the issue (``created_at``, else
    ``now``), whichever run plans the reader."""
    domain = sender_domain(config.email.sender)
    not_before = None
    if local_time is not None:
        hour, minute = (int(part) for part in local_time.split(":"))
        not_before = local_times(config, created_at or now, hour, minute)
    return Planning(
        message_id=message_ids(domain),
        now=now,
        not_before=not_before,
        within=dispatch.plan,
        batch_size=config.send.batch_size,
        chunk=config.send.plan_chunk,
        leave_out=_left_out(config),
    )


def plan_rest(store: Store, issue: Issue, plan: Planning) -> None:
    """Plan an issue's readers from its cursor on, a chunk per transaction, until none is
    left; another planner at it meanwhile only moves the cursor on faster."""
    cursor = issue.planned_through
    while cursor is not None:
        cursor = store.planning.plan_chunk(issue.id, cursor, plan)


def resume_planning(
    config: Config, store: Store, now: datetime, dispatch: Dispatcher
) -> list[tuple[int, str]]:
    """Plan the rest of every issue whose planning stopped between two chunks (its process
    died, or is still at it: the cursor keeps the two apart); (issue id, key) of each."""
    resumed = []
    for issue in store.planning.issues_in_planning():
        plan_rest(store, issue, planning(config, now, dispatch, issue.created_at, issue.local_time))
        logger.info(
            "issue %s (%s): the planning of its readers resumed and done",
            *(issue.id, issue.key),
            extra={"fields": {"issue": issue.id, "digest": issue.key, "outcome": "planned"}},
        )
        resumed.append((issue.id, issue.key))
    return resumed


def close_finished(store: Store, now: datetime) -> list[Finished]:
    """Close the issues with nothing left to send, one log line each with its counts."""
    closed = store.planning.close_finished(now)
    for issue in closed:
        counts = issue.counts
        logger.info(
            "issue %s (%s) finished: %s sent, %s failed, %s uncertain, %s skipped",
            *(issue.id, issue.key, counts["sent"], counts["failed"]),
            *(counts["uncertain"], counts["skipped"]),
            extra={"fields": {"issue": issue.id, "digest": issue.key, "finished": True, **counts}},
        )
    return closed


def deliver_pending(context: BatchContext, report: SendReport, dispatch: Dispatcher) -> None:
    """Send what is pending and due (counted into ``report``), then count what waits for its
    readers' local time."""
    config, store, now = context.config, context.store, context.now
    if config.smtp.url:
        report.skipped += store.ledger.skip_consent_source(
            SAMPLE_SOURCE, "sample reader: not sent through an SMTP server", now
        )
    dispatch.run(context, report)
    waiting = store.ledger.waiting(now)
    report.waiting = sum(n for *_, n in waiting)
    report.finished = close_finished(store, now)


@dataclass(frozen=True)
class Issuing:
    """What issuing one group's digest needs of the run it is part of."""

    config: Config
    store: Store
    mailer: Mailer
    now: datetime
    report: SendReport
    dry_run: bool = False
    local_time: tuple[int, int] | None = None
    dispatch: Dispatcher = field(default_factory=LocalDispatcher)
    opened: list[tuple[Issue, Planning]] = field(default_factory=list)
    """The issues this run opened, with how the rest of their readers are planned."""


def _issue_groups(
    run: Issuing,
    articles: ArticleSet,
    groups: Mapping[tuple[str, tuple[str, ...]], int],
    since: date | None,
) -> None:
    """Issue each group's next digest (``groups``: its readers); a group of sample readers
    only is told apart, its issues counting for it alone."""
    if not groups:
        return
    config, store, now = run.config, run.store, run.now
    real = variants(store.subscribers.reader_groups(SAMPLE_SOURCE))
    if not run.dry_run:
        record_appearances(config, store, articles, now)
    for (lang, chosen), n in groups.items():
        sample = (lang, chosen) not in real
        digest = next_digest(
            config, articles, lang, chosen, now=now, since=since, store=store, samples=sample
        )
        if digest is not None:
            issue_digest(run, digest, n, sample)
    finish_issuing(run)


def waiting_digests(
    config: Config, articles: ArticleSet, store: Store, now: datetime
) -> list[tuple[str, int, int]]:
    """(variant key, articles, readers) per group whose next digest would hold something:
    what waits for the next send (``check`` says so); nothing is recorded."""
    real = variants(store.subscribers.reader_groups(SAMPLE_SOURCE))
    waiting = []
    for (lang, chosen), n in variants(store.subscribers.reader_groups(_left_out(config))).items():
        sample = (lang, chosen) not in real
        digest = next_digest(config, articles, lang, chosen, now=now, store=store, samples=sample)
        if digest is not None:
            waiting.append((digest.key, len(digest.items) + digest.more, n))
    return waiting


def record_appearances(config: Config, store: Store, articles: ArticleSet, now: datetime) -> None:
    """Record when each article out by now first appeared, as the feed build does: a site that
    sends before its feeds are built still knows which articles came after a group's issue."""
    until = last_day_out(config, now)
    due = [a for a in articles if a.updated <= until]
    store.published.first_published(publication_candidates(due, config), seen=now)


def issue_digest(run: Issuing, digest: Digest, readers: int, sample: bool = False) -> None:
    """Render one group's digest and record it as an issue with a delivery per reader (in a
    dry run: count it); one that is not held gets its page among the sent issues
    (``web.issues``). A digest that fails to render (no catalog for its language,
    a template error) is this group's alone: it is reported, and every other group goes
    ahead. ``run.local_time`` (hour, minute): each reader's delivery waits for it in their
    zone. ``sample``: the group's readers are all sample readers (never held; see ``SAMPLE``).

    The issue commits with its first chunk of readers and its page is written; its test
    copy, then its other chunks, come in ``finish_issuing``, once every group is opened."""
    config, store, report = run.config, run.store, run.report
    try:
        rendered = render_digest(digest, config)
    except Exception as exc:  # whatever it is, it is this variant's alone
        report.refused.append((digest.key, readers, str(exc) or type(exc).__name__))
        return
    if run.dry_run:
        report.issues.append((digest.key, readers))
        return
    digest = digest.shortened(rendered.listed)
    at = f"{run.local_time[0]:02}:{run.local_time[1]:02}" if run.local_time else None
    plan = planning(config, run.now, run.dispatch, local_time=at)
    issue = store.planning.open_issue(
        key=digest.key,
        lang=digest.lang,
        audiences=digest.audiences,
        content_hash=digest.content_hash,
        subject=rendered.subject,
        rendered=serialise_rendered(rendered),
        articles=[(*a.key, a.content_hash, a.updated) for a in (i.article for i in digest.items)],
        plan=plan,
        held=config.email.approval and not sample,
        local_time=at,
        sample=sample,
    )
    if issue is None:
        return
    report.issues.append((issue.key, readers))
    if issue.state == "held":
        report.held.append((issue.id, issue.key, readers, "no test copy sent"))
    else:
        write_issue_page(config, issue, rendered)
    run.opened.append((issue, plan))  # its other chunks: once the test copies went out


def local_times(
    config: Config, now: datetime, hour: int, minute: int
) -> Callable[[str | None], datetime]:
    """Each reader's time for a local-time job fired at ``now``, by their zone (None: the
    site's): that job's day (the date in ``FIRST_ZONE``) at hour:minute in that zone."""
    day = now.astimezone(FIRST_ZONE).date()

    def when(zone: str | None) -> datetime:
        return max(local_send_time(day, hour, minute, ZoneInfo(zone or config.site.timezone)), now)

    return when


def finish_issuing(run: Issuing) -> None:
    """After a run opened its issues (each with its first chunk of readers): the test copies
    of those held, one per language (``approval``), how each went into ``run.report.held``;
    then the rest of every issue's readers (a crash meanwhile leaves them to
    ``resume_planning``)."""
    held = [issue for issue, _ in run.opened if issue.state == "held"]
    if held:
        said = test_copies(run.config, run.mailer, held, run.now)
        report = run.report
        report.held = [(i, key, n, said.get(i, copy)) for i, key, n, copy in report.held]
    for issue, plan in run.opened:
        plan_rest(run.store, issue, plan)


def expire_held(config: Config, store: Store, now: datetime) -> list[tuple[int, str]]:
    """Cancel the held issues older than ``email.approval_expires_days``: never sent stale."""
    return [
        (held.id, held.key)
        for held in store.issues.held_issues()
        if _stale(config, held, now) and _expire(config, store, held.id, now)
    ]


def _stale(config: Config, issue: Issue, now: datetime) -> bool:
    return issue.created_at < now - timedelta(days=config.email.approval_expires_days)


def _expire(config: Config, store: Store, issue_id: int, now: datetime) -> bool:
    reply = f"held longer than {config.email.approval_expires_days} day(s) without approval"
    return store.issues.withdraw_issue(issue_id, "expired", reply, now)


class ApprovalExpired(UsageError):
    """An approval came after ``email.approval_expires_days``: the issue is expired instead,
    as the next send would do, so that no approval sends it stale."""


def approve_issue(config: Config, store: Store, issue_id: int, now: datetime) -> Issue | None:
    """Release a held issue (its deliveries go out with the next send) and write its page
    among the sent issues (``web.issues``), which show only what was sent; None when it is
    not held. One held longer than ``email.approval_expires_days`` is expired instead
    (ApprovalExpired, naming the expiry)."""
    held = store.issues.issue(issue_id)
    if (
        held is not None
        and held.state == "held"
        and _stale(config, held, now)
        and _expire(config, store, issue_id, now)
    ):
        since = held.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        days = config.email.approval_expires_days
        raise ApprovalExpired(
            f"issue {issue_id} ({held.key}) not approved: held since {since}, longer than "
            f"email.approval_expires_days ({days}), so it expired unsent"
        )
    if not store.issues.release_issue(issue_id, now):
        return None
    released = store.issues.issue(issue_id)
    assert released is not None
    write_issue_page(config, released, restore_rendered(released))
    return released


SAMPLE_AUDIENCES = (("architects",), ("cost", "procurement"), ("strategy", "ecosystem"))
SAMPLE_SOURCE = "sample"
"""The consent source of the sample readers: ``subscribers remove --samples`` removes them."""


def add_sample_readers(config: Config, store: Store, now: datetime) -> int:
    """A few readers at example.com for a first run with no mail server and nobody subscribed,
    so the whole path (issue, deliveries, Maildir) can be seen; returns how many were added."""
    if config.smtp.url or next(iter(store.subscribers.all()), None) is not None:
        return 0
    rows = [
        ReaderRow(f"sample-{lang}-{'-'.join(chosen)}@example.com", lang, chosen)
        for lang in config.site.languages
        for chosen in SAMPLE_AUDIENCES
    ]
    added, _ = store.subscribers.import_subscribers(
        rows, status="active", consent_source=SAMPLE_SOURCE, now=now
    )
    return added
