"""email.approval sends the editor one test copy per language, however many variants a send
holds, linking each variant's preview; delivered to a real server, parsed back, and its links
followed on the site's web app, which shows each held variant until it is approved or
rejected."""

from __future__ import annotations

import re
from datetime import date, timedelta
from email.message import EmailMessage
from pathlib import Path

import lxml.html
from starlette.testclient import TestClient

from syndicate.config import Config, load_config
from syndicate.reader import read_articles
from syndicate.sending import issuing
from syndicate.sending.transports import SmtpMailer
from syndicate.state import Store, open_store
from syndicate.tokens import PREVIEW, UNSUBSCRIBE, make_token, secret_key
from syndicate.web import create_app
from tests.conftest import write_articles
from tests.sending import NOW
from tests.test_send import write_config
from tests.websites import Clock

EDITOR = "editor@news.example.org"
LINK = re.compile(r"^Issue (\d+) \(([^)]+)\): .*\n  preview: (\S+)$", re.MULTILINE)


def _held_send(tmp_path: Path, database_url: str, port: int) -> tuple[Config, Store]:
    """A send with email.approval: three English variants and a Dutch one held."""
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
    return config, store


def _site(config: Config, store: Store, clock: Clock) -> TestClient:
    """The site as `syndicate serve` runs it: the same state, the same secret key."""

    def refuse(message: EmailMessage) -> None:
        raise AssertionError("a preview sends no mail")

    found = read_articles(config.path(config.site.articles), config.profiles)
    app = create_app(
        config, store=store, send_message=refuse, articles=lambda: found,
        secret=secret_key(config), now=clock,
    )  # fmt: skip
    return TestClient(app, base_url=config.site.base_url, follow_redirects=False)


def _links(copy: EmailMessage) -> dict[str, tuple[int, str]]:
    """Variant key → (issue id, preview link), as the copy's text lists them."""
    body = copy.get_body(("plain",))
    assert body is not None
    text = body.get_content().replace("\r\n", "\n")
    return {key: (int(i), url) for i, key, url in LINK.findall(text)}


def test_one_test_copy_per_language_links_every_variants_preview(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    config, store = _held_send(tmp_path, database_url, port)
    assert inbox.counts() == {EDITOR: 2}
    copies = {str(m["Subject"]).split(")")[0]: m for m in inbox.messages}
    assert sorted(copies) == ["Held for approval (en", "Held for approval (nl"]
    held = {i.key: i for i in store.issues.held_issues()}

    english = copies["Held for approval (en"]
    assert list(english.iter_attachments()) == []  # linked, not attached
    links = _links(english)
    assert sorted(links) == ["en-architects", "en-cost", "en-strategy"]
    body = english.get_body(("plain",))
    assert body is not None
    for key, (issue_id, url) in links.items():
        assert issue_id == held[key].id
        assert url.startswith("https://news.example.org/preview/")
        assert f"syndicate send approve {issue_id}" in body.get_content()
    assert sorted(_links(copies["Held for approval (nl"])) == ["nl-cost"]

    clock = Clock()
    clock.now = NOW
    client = _site(config, store, clock)
    pages = {}
    for key, (_, url) in links.items():
        page = client.get(url)
        assert page.status_code == 200, page.text
        assert page.headers["x-robots-tag"] == "noindex"
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "default-src 'none'" in page.headers["content-security-policy"]
        root = lxml.html.fromstring(page.text)
        assert root.get("lang") == "en"
        assert root.findtext(".//title") == held[key].subject
        pages[key] = root
    # each variant its own page: its audience's takeaways
    assert len({lxml.html.tostring(root) for root in pages.values()}) == 3
    # the preview's links act on no reader: the site answers them as any forged token
    unsubscribe = [a for a in pages["en-cost"].iterlinks() if "/u/" in a[2]]
    assert unsubscribe
    for _, _, href, _ in unsubscribe:
        assert client.get(href).status_code == 404
    store.close()


def test_a_preview_link_serves_only_while_its_issue_is_held_and_only_its_own_token(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    config, store = _held_send(tmp_path, database_url, port)
    links = {
        key: found
        for copy in inbox.messages
        for key, found in _links(copy).items()  # type: ignore[arg-type]
    }
    clock = Clock()
    clock.now = NOW
    client = _site(config, store, clock)
    issue_id, url = links["en-cost"]
    assert client.get(url).status_code == 200

    token = url.rpartition("/")[2]
    forged = token[:-1] + ("A" if token[-1] != "A" else "B")
    other_issue = make_token(secret_key(config), PREVIEW, links["nl-cost"][0], issued=NOW)
    assert client.get(f"/preview/{other_issue}").status_code == 200  # a genuine one
    for bad in [
        forged,
        make_token(b"another site's key", PREVIEW, issue_id, issued=NOW),
        make_token(secret_key(config), UNSUBSCRIBE, issue_id, issued=NOW),  # another purpose
        "not-a-token",
    ]:
        refused = client.get(f"/preview/{bad}")
        assert refused.status_code == 404
        assert refused.headers["cache-control"] == "no-store"
        assert "<title>" in refused.text  # the site's invalid-link page, not the issue

    # past email.approval_expires_days the link is dead, whatever the issue's state
    clock.now = NOW + timedelta(days=config.email.approval_expires_days, minutes=1)
    assert client.get(url).status_code == 404
    clock.now = NOW + timedelta(hours=1)
    assert client.get(url).status_code == 200

    # approved (sent) or rejected, a variant's link no longer serves; the others still do
    assert issuing.approve_issue(config, store, issue_id, clock.now) is not None
    assert client.get(url).status_code == 404
    rejected, rejected_url = links["en-strategy"]
    assert store.issues.withdraw_issue(rejected, "rejected", "not this one", clock.now)
    assert client.get(rejected_url).status_code == 404
    assert client.get(links["en-architects"][1]).status_code == 200
    store.close()
