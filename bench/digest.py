"""Digest benchmark: render every variant, then build 10,000 personalised, serialised messages.

The baseline, measured in the same run, is the plain standard-library way: a new
email.message.EmailMessage per reader from the rendered HTML and text. Both must give messages
that parse to the same structure and content. Run: .venv/bin/python bench/digest.py
"""

from __future__ import annotations

import email
import email.policy
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from syndicate.compose import compose_message
from syndicate.config import parse_config
from syndicate.digest import select_digest
from syndicate.previews import digest_variants
from syndicate.reader import read_articles
from syndicate.render import render_digest

# This project's tests/, before any installed package named tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.sending import reference_message

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = 10_000
BASELINE_MESSAGES = 1_000
TARGET = 5.0


def reader(i: int) -> dict[str, object]:
    token = f"{i:08x}deadbeef{i:06d}"
    return {
        "to": f"reader{i}@example.org",
        "sender": "Syndicate <digest@example.com>",
        "message_id": f"<digest.{i}.{token}@example.com>",
        "date": datetime(2025, 12, 15, 7, 30, tzinfo=UTC),
        "list_id": "digest.example.com",
        "unsubscribe_url": f"https://news.example.com/unsubscribe?token={token}",
        "unsubscribe_mailto": f"mailto:unsubscribe+{token}@example.com",
        "preferences_url": f"https://news.example.com/preferences?token={token}",
        "view_url": f"https://news.example.com/digest/view?token={token}",
    }


def shape(raw: bytes) -> tuple[object, ...]:
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    headers = {k: " ".join(str(v).split()) for k, v in msg.items() if k != "Content-Type"}
    parts = [
        (p.get_content_type(), p.get_content().replace("\r\n", "\n")) for p in msg.iter_parts()
    ]
    return msg.get_content_type(), headers, parts


def main() -> None:
    config = parse_config({}, root=ROOT, source="(bench)", env={})
    articles = read_articles(ROOT / "articles", config.profiles)

    start = time.perf_counter()
    rendered = []
    for lang, audiences in digest_variants(config):
        digest = select_digest(articles, lang, audiences)
        if digest is not None:
            rendered.append(render_digest(digest, config))
    render_seconds = time.perf_counter() - start
    print(
        f"render: {len(rendered)} variants in {render_seconds * 1000:.0f} ms "
        f"({render_seconds / len(rendered) * 1000:.1f} ms each, first use included); "
        f"HTML {min(len(r.html) for r in rendered) // 1024}-"
        f"{max(len(r.html) for r in rendered) // 1024} KB"
    )

    readers = [reader(i) for i in range(MESSAGES)]
    for i in range(0, MESSAGES, 997):  # same structure and content as the stdlib's messages
        variant = rendered[i % len(rendered)]
        fast = compose_message(variant, **readers[i])
        assert shape(fast) == shape(reference_message(variant, **readers[i])), i

    start = time.perf_counter()
    for i in range(BASELINE_MESSAGES):
        reference_message(rendered[i % len(rendered)], **readers[i])
    baseline = BASELINE_MESSAGES / (time.perf_counter() - start)

    start = time.perf_counter()
    size = 0
    for i in range(MESSAGES):
        size += len(compose_message(rendered[i % len(rendered)], **readers[i]))
    ours = MESSAGES / (time.perf_counter() - start)

    print(
        f"baseline (EmailMessage per reader): {baseline:8.0f} messages/s "
        f"({1000 / baseline:.2f} ms each, {BASELINE_MESSAGES} messages)"
    )
    print(
        f"compose_message:                    {ours:8.0f} messages/s "
        f"({1e6 / ours:.0f} µs each, {MESSAGES} messages, {size / MESSAGES / 1024:.0f} KB avg)"
    )
    ratio = ours / baseline
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(f"ratio: {ratio:.1f}x the baseline ({verdict} the {TARGET:.0f}x target)")


if __name__ == "__main__":
    main()
