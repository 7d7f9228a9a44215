"""The site's pages: index, article, sent issues, 404s, and the publisher's templates."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from syndicate.config import parse_config
from syndicate.model import ArticleSet
from syndicate.sending.messages import issue_page_name
from syndicate.web import ArticleWatch, pages
from tests.sending import create_issue
from tests.websites import (
    SLUG,
    html,
    make_client,
    smtp_mailer,
    subscribe,
    web_config,
)


def test_index_lists_the_language_with_feed_and_translation_links(site, article_set):
    client, *_ = site
    response = client.get("/nl/")
    assert response.status_code == 200
    page = html(response)
    assert page.get("lang") == "nl"
    links = page.xpath("//ol[@class='articles']//h2/a/@href")
    assert links == [f"http://testserver/nl/{a.slug}/" for a in article_set.in_language("nl")]
    types = page.xpath("//head/link[@rel='alternate'][@type]/@type")
    audiences = ["architects", "cost", "procurement", "strategy", "ecosystem"]
    formats = ["application/atom+xml", "application/rss+xml", "application/feed+json"]
    assert types == formats * (1 + len(audiences))  # the language's feed, then each audience's
    assert page.xpath("//head/link[@type='application/atom+xml']/@href") == [
        "http://testserver/feeds/nl.atom.xml",
        *(f"http://testserver/feeds/nl/{a}.atom.xml" for a in audiences),
    ]
    cost = page.xpath("//head/link[@href='http://testserver/feeds/nl/cost.rss.xml']/@title")
    assert cost == ["Syndicate: Kostenoptimalisatieteams (nl, RSS)"]
    hreflang = page.xpath("//head/link[@hreflang]/@hreflang")
    assert sorted(hreflang) == ["de", "en", "nl"]
    form = page.xpath("//form[@method='post']")[0]
    assert form.get("action").startswith("/subscribe")
    assert not form.xpath(".//input[@name='csrf']")  # the same page for every visitor
    assert set(form.xpath(".//input[@name='audiences']/@value")) == {
        "architects",
        "cost",
        "procurement",
        "strategy",
        "ecosystem",
    }
    assert "Aanmelden" in response.text  # localised


def test_article_page_has_body_footnotes_takeaways_and_translations(site, article_set):
    client, *_ = site
    article = article_set.get("nl", SLUG)
    response = client.get(f"/nl/{SLUG}/")
    assert response.status_code == 200
    page = html(response)
    assert page.xpath("//h1/text()") == [article.title]
    assert page.xpath("//link[@rel='canonical']/@href") == [f"http://testserver/nl/{SLUG}/"]
    alternates = dict(
        zip(
            page.xpath("//head/link[@hreflang]/@hreflang"),
            page.xpath("//head/link[@hreflang]/@href"),
            strict=True,
        )
    )
    assert alternates == {code: f"http://testserver/{code}/{SLUG}/" for code in ("de", "en", "nl")}
    notes = page.xpath("//sup/a/@href")
    assert notes[0] == f"#nl-{SLUG}-ref-1"  # the same anchors as the feed entry's content
    for target in set(notes):
        assert page.xpath(f"//li[@id='{target[1:]}']"), target
    assert "Kostenoptimalisatieteams" in page.xpath("//h3/text()")
    assert article.takeaways_for("cost").bullets[0] in page.xpath("//li/text()")
    reference = article.reference(1)
    assert page.xpath(f"//li[@id='nl-{SLUG}-ref-1']/a/@href") == [reference.url]
    assert "Bijgewerkt op" in response.text


@pytest.mark.parametrize("path", ["/fr/", f"/fr/{SLUG}/", "/nl/no-such-article/", "/a/b/c/"])
def test_unknown_pages_are_404(site, path):
    client, *_ = site
    response = client.get(path)
    assert response.status_code == 404
    assert "text/html" in response.headers["content-type"]


def test_pages_and_mails_carry_the_title_of_their_language(
    tmp_path, store, smtp_server, article_set, clock
):
    data = {"site": {"title": "Gardening Weekly"}, "languages": {"de": {"title": "Gartenwoche"}}}
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    inbox, port = smtp_server
    client = make_client(config, store, smtp_mailer(port), article_set, clock)
    assert html(client.get("/de/")).xpath("//header/a[@class='site']/text()") == ["Gartenwoche"]
    assert html(client.get("/en/")).xpath("//title/text()")[0].endswith("· Gardening Weekly")
    subscribe(client, "leser@example.org", lang="de")
    assert inbox.messages[-1]["Subject"] == "Bestätigen Sie Ihr Abonnement bei Gartenwoche"


def test_root_redirects_to_the_readers_language(site):
    client, *_ = site
    response = client.get("/", headers={"Accept-Language": "de-DE,de;q=0.9,en;q=0.5"})
    assert response.status_code in (302, 307)
    assert response.headers["location"] == "/de/"


def test_pages_are_gzipped_when_asked(site):
    client, *_ = site
    response = client.get("/nl/", headers={"Accept-Encoding": "gzip"})
    assert response.headers["content-encoding"] == "gzip"


def test_healthz(site):
    client, *_ = site
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.text == "ok"


def test_a_running_server_sees_article_changes(articles_dir, tmp_path):
    config = web_config(tmp_path)
    moment = [0.0]
    current = ArticleWatch(articles_dir, config, every=1.0, clock=lambda: moment[0])
    first = current()
    removed = sorted(articles_dir.iterdir())[0]
    removed.unlink()
    # Within a second the folder is not looked at again: pages cost no file system calls.
    moment[0] = 0.9
    assert current() is first
    moment[0] = 1.0
    assert len(current()) == len(first) - 1
    moment[0] = 2.5
    again = current()
    assert current() is again  # unchanged files are not read again


def test_a_page_asks_the_article_source_once(site, article_set):
    """With ArticleWatch behind it, a page stats each article file at most once."""
    client, *_ = site
    calls: list[str] = []

    def counted() -> ArticleSet:
        calls.append("read")
        return article_set

    client.app.state.web = replace(client.app.state.web, articles=counted)
    for path in ("/nl/", f"/nl/{SLUG}/", "/en/", "/nl/no-such-article/"):
        calls.clear()
        client.get(path)
        assert calls == ["read"], path
    calls.clear()
    assert subscribe(client, "not an address").status_code == 400  # the form again
    assert calls == ["read"]


# -- sent issues ---------------------------------------------------------------------------


def test_archive_lists_and_serves_past_issues(site, tmp_path):
    client, *_ = site
    folder = tmp_path / "archive" / "nl"
    folder.mkdir(parents=True)
    (folder / "2025-12-15-weekly.html").write_text("<html><title>Week 51 &amp; more</title></html>")
    (folder / "2025-12-08-weekly.html").write_text("<html><title>Week 50</title></html>")
    # Pages the store does not know are dated by their files.
    os.utime(folder / "2025-12-15-weekly.html", (1_765_800_000, 1_765_800_000))
    os.utime(folder / "2025-12-08-weekly.html", (1_765_200_000, 1_765_200_000))
    page = html(client.get("/archive/nl/"))
    assert page.xpath("//main//li/a/text()") == ["Week 51 & more", "Week 50"]
    assert page.xpath("//main//h2/time/@datetime") == ["2025-12-15", "2025-12-08"]
    assert page.xpath("//main//li/a/@href")[0] == "/archive/nl/2025-12-15-weekly/"
    issue = client.get("/archive/nl/2025-12-15-weekly/")
    assert issue.status_code == 200
    assert "Week 51" in issue.text
    assert client.get("/archive/nl/2025-01-01-none/").status_code == 404
    assert "Noch keine Ausgaben." in client.get("/archive/de/").text


def test_archive_lists_issues_newest_first_with_their_dates(site, tmp_path, clock):
    """Issue ids as text sort 6, 5, 4, 11, 10; the list goes by when each issue was made."""
    client, store, *_ = site
    folder = tmp_path / "archive" / "nl"
    folder.mkdir(parents=True)
    start = datetime(2025, 10, 6, 6, 30, tzinfo=UTC)
    made = {}
    for week in range(11):
        issue = create_issue(
            store,
            key="nl-cost",
            lang="nl",
            audiences=["cost"],
            content_hash=f"{week:064d}",
            subject=f"Week {week + 1}",
            rendered="{}",
            articles=[],
            readers=[],
            message_id=lambda issue_id, reader_id: f"<{issue_id}.{reader_id}@example.org>",
            now=start + timedelta(weeks=week),
        )
        made[issue.id] = issue
    for issue_id in (4, 5, 6, 10, 11):
        page = folder / f"{issue_page_name(made[issue_id])}.html"
        page.write_text(f"<html><title>{made[issue_id].subject}</title></html>")
        os.utime(page, (1_800_000_000, 1_800_000_000 + issue_id % 3))  # copied: mtimes lost
    # An id the store knows, with another key: not that issue, so dated by its file.
    stray = folder / "2-nl-strategy.html"
    stray.write_text("<html><title>Stray</title></html>")
    os.utime(stray, (1_700_000_000, 1_700_000_000))
    response = client.get("/archive/nl/")
    page = html(response)
    assert page.xpath("//main//li/a/text()") == [
        "Week 11",
        "Week 10",
        "Week 6",
        "Week 5",
        "Week 4",
        "Stray",
    ]
    assert page.xpath("//main//li/a/@href")[0] == f"/archive/nl/{issue_page_name(made[11])}/"
    assert page.xpath("//main//h2/time/@datetime") == [
        "2025-12-15",
        "2025-12-08",
        "2025-11-10",
        "2025-11-03",
        "2025-10-27",
        "2023-11-14",
    ]
    assert page.xpath("//main//h2/time/text()")[0] == "15 december 2025"


def test_the_publishers_templates_and_catalogs_change_a_running_site(
    tmp_path, store, article_set, clock
):
    own = tmp_path / "layout" / "web"
    own.mkdir(parents=True)
    (own / "archive.html").write_text(
        '{% extends "web/base.html" %}{% block main %}<h1>{{ _("Past issues") }}</h1>'
        "<p>{{ issues|length }}</p>{% endblock %}"
    )
    data = {"site": {"base_url": "http://testserver", "templates": "layout"}}
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    client = make_client(config, store, lambda message: None, article_set, clock)
    page = html(client.get("/archive/de/"))
    assert page.xpath("//main/h1/text()") == ["Frühere Ausgaben"]
    assert page.xpath("//main/p/text()") == ["0"]  # the publisher's archive page
    assert page.xpath("//footer//a[contains(@href, '/archive/')]/text()") == ["Frühere Ausgaben"]
    po = tmp_path / "locales" / "de" / "LC_MESSAGES" / "messages.po"
    po.parent.mkdir(parents=True)
    po.write_text(
        'msgid ""\nmsgstr ""\n"Language: de\\n"\n\nmsgid "Past issues"\nmsgstr "Archiv"\n'
    )
    page = html(client.get("/archive/de/"))  # the same app, no restart
    assert page.xpath("//main/h1/text()") == ["Archiv"]
    assert "Alle Artikel" in client.get("/de/").text  # every other sentence still built in


@pytest.mark.parametrize("key", ["issues", "archive"])
def test_the_sent_issues_folder_is_web_issues_or_its_old_key(
    key, tmp_path, store, article_set, clock
):
    config = web_config(tmp_path, **{key: "sent"})
    assert config.web.issues == Path("sent")
    (tmp_path / "sent" / "nl").mkdir(parents=True)
    (tmp_path / "sent" / "nl" / "1-nl-cost.html").write_text("<title>Week 1</title>")
    client = make_client(config, store, lambda message: None, article_set, clock)
    assert html(client.get("/archive/nl/")).xpath("//main//li/a/text()") == ["Week 1"]


def test_a_handler_runs_alone_on_its_context(site):
    """A handler needs only the WebContext on app.state: no closure of create_app's."""
    client, *_ = site
    alone = Starlette(routes=[Route("/{lang}/{slug}/", pages.article)])
    alone.state.web = client.app.state.web
    response = TestClient(alone).get(f"/nl/{SLUG}/")
    assert response.status_code == 200
    assert html(response).xpath("//link[@rel='canonical']/@href") == [
        f"http://testserver/nl/{SLUG}/"
    ]
