"""Pipeline: the functions that join the pure stages to the outside world (files, database, mail).

``send_digests``: articles → one digest per (language, audience set) of the active readers →
an issue with one delivery row per reader, recorded before anything leaves → delivery.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parseaddr
from pathlib import Path

from .compose import compose_message
from .config import Config
from .deliver import (
    MaildirMailer,
    Mailer,
    Progress,
    SendOptions,
    SmtpMailer,
    deliver,
    envelope_sender,
)
from .digest import audience_order, select_digest
from .errors import ConfigError
from .model import Diagnostic
from .reader import read_articles
from .render import RenderedDigest, render_digest
from .signing import DkimSigner
from .store import Claim, Issue, Store, Subscriber
from .tokens import PREFERENCES, UNSUBSCRIBE, link, make_token, secret_key


@dataclass
class SendReport:
    """What a send did: issues recorded (or, in a dry run, that would be) and delivery counts."""

    issues: list[tuple[str, int]] = field(default_factory=list)
    """(variant key, readers) per new issue."""
    sent: int = 0
    failed: int = 0
    uncertain: int = 0
    skipped: int = 0
    deferred: int = 0
    """Temporary failures left pending for the next run."""
    pending: int = 0
    """Deliveries waiting (dry run only: nothing is sent)."""
    failures: list[tuple[str, str]] = field(default_factory=list)
    problems: tuple[Diagnostic, ...] = ()
    """Article files that could not be read (the others were still used)."""


def open_mailer(config: Config) -> Mailer:
    """SMTP when a server is configured, else the Maildir in the outbox."""
    smtp = config.smtp
    if smtp.url:
        password = smtp.password.get_secret_value() if smtp.password else None
        return SmtpMailer.from_url(
            smtp.url, username=smtp.username, password=password, timeout=smtp.timeout
        )
    return MaildirMailer(config.path(config.email.outbox) / "maildir")


def dkim_signer(config: Config) -> DkimSigner | None:
    """The configured DKIM signer, or None when signing is off."""
    email = config.email
    if not (email.dkim_selector and email.dkim_key_file):
        return None
    path = config.path(email.dkim_key_file)
    try:
        pem = path.read_bytes()
        domain = email.dkim_domain or _domain(email.sender)
        return DkimSigner(domain, email.dkim_selector, pem)
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), [f"email.dkim_key_file: {exc}"]) from None


def _domain(sender: str) -> str:
    return parseaddr(sender)[1].rpartition("@")[2] or "localhost"


def message_id(domain: str, issue_id: int, subscriber_id: int) -> str:
    """Stable per (issue, reader): a resent or retried message keeps its Message-ID."""
    return f"<digest.{issue_id}.{subscriber_id}@{domain}>"


def variants(
    readers: Iterable[Subscriber],
    langs: Iterable[str] | None = None,
    audiences: Iterable[str] | None = None,
) -> dict[tuple[str, tuple[str, ...]], list[Subscriber]]:
    """Readers grouped by (language, exact audience set): each reader gets one message.

    ``audiences`` keeps the sets that include at least one of them.
    """
    wanted_langs = set(langs) if langs else None
    wanted = set(audiences) if audiences else None
    groups: dict[tuple[str, tuple[str, ...]], list[Subscriber]] = defaultdict(list)
    for reader in readers:
        if not reader.audiences or (wanted_langs and reader.lang not in wanted_langs):
            continue
        if wanted and not wanted & set(reader.audiences):
            continue
        groups[(reader.lang, audience_order(reader.audiences))].append(reader)
    return dict(sorted(groups.items()))


def _serialise(rendered: RenderedDigest) -> str:
    return json.dumps(
        {f.name: getattr(rendered, f.name) for f in dataclasses.fields(rendered) if f.init},
        ensure_ascii=False,
    )


def _restore(issue: Issue) -> RenderedDigest:
    data = json.loads(issue.rendered)
    data["audiences"] = tuple(data["audiences"])
    return RenderedDigest(**data)


def archive_name(issue: Issue) -> str:
    return f"{issue.id}-{issue.key}"


def view_url(config: Config, issue: Issue) -> str:
    return f"{config.site.base_url}/archive/{issue.lang}/{archive_name(issue)}/"


def write_archive(config: Config, issue: Issue, rendered: RenderedDigest) -> Path:
    """The issue as a public web page (no reader's links in it), written atomically."""
    base = config.site.base_url + "/"
    page = rendered.personalise(
        unsubscribe_url=base, preferences_url=base, view_url=view_url(config, issue)
    ).html
    path = config.path(config.web.archive) / issue.lang / f"{archive_name(issue)}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(page, "utf-8")
    os.replace(tmp, path)
    return path


def send_digests(
    config: Config,
    now: datetime,
    *,
    mailer: Mailer,
    store: Store,
    langs: Iterable[str] | None = None,
    audiences: Iterable[str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> SendReport:
    """Issue every digest variant with new content and deliver what is pending.

    An issue and its delivery rows are committed together before any message leaves; a rerun
    after a crash sends what is still pending, from the stored issue, and never re-issues the
    same content. Pending deliveries of earlier runs are sent too, whatever the filters.
    ``dry_run`` reports what would be issued and writes nothing.
    """
    articles = read_articles(config.path(config.site.articles), config.profiles)
    report = SendReport(problems=articles.problems)
    domain = _domain(config.email.sender)
    readers = variants(store.subscribers("active"), langs, audiences)
    for (lang, chosen), group in readers.items():
        digest = select_digest(articles, lang, chosen, sent=store.sent_articles(lang, chosen))
        if digest is None:
            continue
        if dry_run:
            report.issues.append((digest.key, len(group)))
            continue
        rendered = render_digest(digest, config)
        issue = store.create_issue(
            key=digest.key,
            lang=lang,
            audiences=digest.audiences,
            content_hash=digest.content_hash,
            subject=rendered.subject,
            rendered=_serialise(rendered),
            articles=[(i.article.lang, i.article.slug, i.article.digest) for i in digest.items],
            readers=group,
            message_id=lambda issue_id, reader_id: message_id(domain, issue_id, reader_id),
            now=now,
        )
        if issue is not None:
            write_archive(config, issue, rendered)
            report.issues.append((issue.key, len(group)))
    if dry_run:
        report.pending = store.pending_count()
        return report

    secret = secret_key(config)
    signer = dkim_signer(config)
    restored: dict[int, RenderedDigest] = {}

    def compose(issue: Issue, claim: Claim) -> bytes:
        if issue.id not in restored:
            restored[issue.id] = _restore(issue)
        token = {
            p: make_token(secret, p, claim.subscriber_id, issued=now)
            for p in (UNSUBSCRIBE, PREFERENCES)
        }
        message = compose_message(
            restored[issue.id],
            to=claim.email,
            sender=config.email.sender,
            message_id=claim.message_id,
            date=now,
            list_id=config.email.list_id,
            unsubscribe_url=link(config, UNSUBSCRIBE, token[UNSUBSCRIBE]),
            unsubscribe_mailto=config.email.unsubscribe_mailto,
            preferences_url=link(config, PREFERENCES, token[PREFERENCES]),
            view_url=view_url(config, issue),
            reply_to=config.email.reply_to,
        )
        return signer.sign(message, now=now) if signer else message

    smtp = config.smtp
    options = SendOptions(
        sender=envelope_sender(config.email.sender),
        workers=smtp.pool_size,
        rate=smtp.rate,
        retries=smtp.retries,
        backoff=smtp.retry_backoff,
        max_bounces=smtp.max_bounces,
    )
    counts = deliver(store, mailer, compose, options, now, progress=progress)
    for name in ("sent", "failed", "uncertain", "skipped", "deferred", "failures"):
        setattr(report, name, getattr(counts, name))
    return report


SAMPLE_AUDIENCES = (("architects",), ("cost", "procurement"), ("strategy", "ecosystem"))


def add_sample_readers(config: Config, store: Store, now: datetime) -> int:
    """A few readers at example.com for a first run with no mail server and nobody subscribed,
    so the whole path (issue, deliveries, Maildir) can be seen; returns how many were added."""
    if config.smtp.url or next(iter(store.subscribers()), None) is not None:
        return 0
    rows = [
        (f"sample-{lang}-{'-'.join(chosen)}@example.com", lang, chosen)
        for lang in config.site.languages
        for chosen in SAMPLE_AUDIENCES
    ]
    added, _ = store.import_subscribers(rows, status="active", consent_source="sample", now=now)
    return added
