"""Issues and messages for delivery tests, built with the standard library only.

Also the body of the sender processes that the crash and concurrency tests start and kill:
``python -m tests.sending DATABASE_URL PORT WORKERS``.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from email.message import EmailMessage

from syndicate.deliver import SendOptions, SmtpMailer, deliver
from syndicate.state import Claim, Issue, Store, Subscriber, open_store

NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)
SENDER = "digest@news.example.org"


def add_readers(store: Store, count: int, *, lang: str = "en") -> list[Subscriber]:
    return [
        store.add_subscriber(
            f"reader{n}@example.com",
            lang,
            ["cost"],
            status="active",
            consent_source="test",
            now=NOW,
        )
        for n in range(count)
    ]


def make_issue(store: Store, readers: list[Subscriber], *, content: str = "one") -> Issue:
    issue = store.create_issue(
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


def options(workers: int = 2, **kwargs) -> SendOptions:
    return SendOptions(sender=SENDER, workers=workers, rate=10_000, backoff=0, **kwargs)


def mailer(port: int) -> SmtpMailer:
    return SmtpMailer("127.0.0.1", port, timeout=10)


if __name__ == "__main__":
    url, port, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = open_store(url)
    counts = deliver(store, mailer(port), compose, options(workers), NOW)
    print(counts.sent, counts.failed, counts.uncertain)
