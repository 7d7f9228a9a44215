"""email.approval sends the editor one test copy per language, however many variants a send
holds, with each variant's preview attached; delivered to a real server and parsed back."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from syndicate.config import load_config
from syndicate.sending import issuing
from syndicate.sending.transports import SmtpMailer
from syndicate.state import open_store
from tests.conftest import write_articles
from tests.sending import NOW
from tests.test_send import write_config

EDITOR = "editor@news.example.org"


def test_one_test_copy_per_language_carries_every_variants_preview(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    articles = write_articles(
        tmp_path / "articles", 2, newest=date(2025, 12, 14), langs=("en", "nl")
    )
    email = ["approval = true", f'preview_to = "{EDITOR}"']
    config = load_config(write_config(tmp_path, database_url, port, articles, email=email))
    store = open_store(database_url)
    for address, lang, audience in [
        ("a@example.com", "en", "cost"),
        ("b@example.com", "en", "strategy"),
        ("c@example.com", "en", "architects"),
        ("d@example.com", "nl", "cost"),
    ]:
        store.subscribers.add_subscriber(
            address, lang, [audience], status="active", consent_source="t", now=NOW
        )
    report = issuing.send_digests(
        config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store
    )
    assert len(report.held) == 4
    assert inbox.counts() == {EDITOR: 2}
    copies = {str(m["Subject"]).split(")")[0]: m for m in inbox.messages}
    assert sorted(copies) == ["Held for approval (en", "Held for approval (nl"]

    english = copies["Held for approval (en"]
    held = {i.key: i.id for i in store.issues.held_issues() if i.lang == "en"}
    assert sorted(held) == ["en-architects", "en-cost", "en-strategy"]
    overview = english.get_body(("plain",))
    assert overview is not None
    for key, issue_id in held.items():
        assert f"Issue {issue_id} ({key})" in overview.get_content()
        assert f"syndicate send approve {issue_id}" in overview.get_content()
    previews = {part.get_filename(): part.get_content() for part in english.iter_attachments()}
    assert sorted(previews) == sorted(f"{i}-{key}.html" for key, i in held.items())
    for page in previews.values():
        assert page.startswith("<!doctype html>") and '<html lang="en"' in page
        assert "PREVIEW-ONLY-NOT-A-READER-TOKEN" in page  # links that act on no reader
    dutch = list(copies["Held for approval (nl"].iter_attachments())
    assert [part.get_filename() for part in dutch] == [
        f"{store.issues.held_issues()[-1].id}-nl-cost.html"
    ]
    store.close()
