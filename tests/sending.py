"""Issues and messages for delivery tests (and bench/), the messages built with the standard
library only.

Also the body of the sender processes that the crash and concurrency tests start and kill:
``python -m tests.sending DATABASE_URL PORT WORKERS``.
"""

from __future__ import annotations

import email.policy
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from email.message import EmailMessage

import sqlalchemy as sa

from syndicate.render import RenderedDigest
from syndicate.sending.loop import SendOptions, deliver
from syndicate.sending.transports import SmtpMailer
from syndicate.state import BATCH_SIZE, Claim, Issue, Store, Subscriber, open_store
from syndicate.state.issues import insert_issue, issue_values
from syndicate.state.schema import deliveries

NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)
SENDER = "digest@news.example.org"


def add_readers(store: Store, count: int, *, lang: str = "en") -> list[Subscriber]:
    return [
        store.subscribers.add_subscriber(
            f"reader{n}@example.com",
            lang,
            ["cost"],
            status="active",
            consent_source="test",
            now=NOW,
        )
        for n in range(count)
    ]


def create_issue(
    store: Store,
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
    """An issue with one pending delivery for each of the ``readers`` a test picks, in one
    transaction: the rows ``open_issue`` writes for the readers it reads from the database.
    None when the variant already had an issue of the same content."""
    values = issue_values(key, lang, audiences, content_hash, subject, rendered, now, False)
    try:
        with store.engine.begin() as db:
            issue_id = insert_issue(db, values, articles)
            if readers:
                rows = [
                    {
                        "issue_id": issue_id,
                        "subscriber_id": reader.id,
                        "email": reader.email,
                        "message_id": message_id(issue_id, reader.id),
                        "status": "pending",
                        "updated_at": now,
                        "batch_no": number // BATCH_SIZE,
                    }
                    for number, reader in enumerate(readers)
                ]
                db.execute(sa.insert(deliveries), rows)
    except sa.exc.IntegrityError:
        return None
    return store.issues.issue(issue_id)


def make_issue(store: Store, readers: list[Subscriber], *, content: str = "one") -> Issue:
    issue = create_issue(
        store,
        key="en-cost",
        lang="en",
        audiences=["cost"],
        content_hash=f"hash-{content}",
        subject=f"Digest {content}",
        rendered=content,
        articles=[("en", "a", f"article-{content}")],
        readers=readers,
        message_id=lambda issue_id, reader_id: f"<{issue_id}.{reader_id}@news.example.org>",
        now=NOW,
    )
    assert issue is not None
    return issue


def compose(issue: Issue, claim: Claim) -> bytes:
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = claim.email
    message["Subject"] = issue.subject
    message["Message-ID"] = claim.message_id
    message.set_content(issue.rendered)
    return message.as_bytes()


def reference_message(
    rendered: RenderedDigest,
    *,
    to: str,
    sender: str,
    message_id: str,
    date: datetime,
    list_id: str,
    unsubscribe_url: str,
    unsubscribe_mailto: str | None = None,
    preferences_url: str,
    view_url: str,
    reply_to: str | None = None,
) -> bytes:
    """The message ``compose_message`` builds, the plain standard-library way: a new
    EmailMessage per reader. Slow; the tests' oracle for it and bench/digest.py's baseline."""
    personal = rendered.personalise(
        unsubscribe_url=unsubscribe_url, preferences_url=preferences_url, view_url=view_url
    )
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = rendered.subject
    msg["Date"] = date
    msg["Message-ID"] = message_id if message_id.startswith("<") else f"<{message_id}>"
    if reply_to:
        msg["Reply-To"] = reply_to
    msg["List-Id"] = list_id if "<" in list_id else f"<{list_id}>"
    unsubscribe = f"<{unsubscribe_url}>"
    if unsubscribe_mailto:
        mailto = unsubscribe_mailto
        unsubscribe += f", <{mailto if mailto.startswith('mailto:') else 'mailto:' + mailto}>"
    msg["List-Unsubscribe"] = unsubscribe
    msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    msg.set_content(personal.text)
    msg.add_alternative(personal.html, subtype="html")
    return msg.as_bytes(policy=email.policy.SMTP)


def options(workers: int = 2, **kwargs) -> SendOptions:
    return SendOptions(sender=SENDER, workers=workers, rate=10_000, backoff=0, **kwargs)


def mailer(port: int) -> SmtpMailer:
    return SmtpMailer("127.0.0.1", port, timeout=10)


if __name__ == "__main__":
    url, port, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = open_store(url)
    counts = deliver(store, mailer(port), compose, options(workers), NOW)
    print(counts.sent, counts.failed, counts.uncertain)


def everyone(count: int) -> Counter[str]:
    """What the inbox holds once each of ``add_readers``' first ``count`` readers has one."""
    return Counter({f"reader{n}@example.com": 1 for n in range(count)})
