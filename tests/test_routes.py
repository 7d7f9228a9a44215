"""Every public URL routes.py builds is one the web app answers; and where the config says."""

from __future__ import annotations

from pathlib import Path

from syndicate import routes
from syndicate.config import parse_config
from syndicate.tokens import make_token
from tests.websites import SECRET, SLUG, web_config


def test_every_url_the_site_links_to_is_answered(site, tmp_path, clock) -> None:
    client, store, *_ = site
    config = web_config(tmp_path)
    reader = store.subscribers.add_subscriber(
        "reader@example.org", "nl", ["cost"], status="active", consent_source="t", now=clock()
    )
    (tmp_path / "archive" / "nl").mkdir(parents=True)
    (tmp_path / "archive" / "nl" / "3-nl-cost.html").write_text("<title>Week 3</title>")
    urls = [
        routes.home_url(config, "nl"),
        routes.article_url(config, "nl", SLUG),
        routes.feed_url(config, "nl.atom.xml"),
        routes.feed_url(config, routes.feed_archive_name("nl", 1)),
        routes.issues_url(config, "nl"),
        routes.issue_url(config, "nl", "3-nl-cost"),
        *(
            routes.reader_url(
                config, purpose, make_token(SECRET, purpose, reader.id, issued=clock())
            )
            for purpose in routes.READER
        ),
    ]
    for url in urls:
        assert url.startswith("http://testserver/"), url
        assert client.get(url).status_code == 200, url
    assert client.get(routes.site_url(config)).status_code in (302, 307)


def test_article_urls_follow_site_article_url(tmp_path: Path) -> None:
    data = {
        "site": {
            "base_url": "https://news.example.org",
            "article_url": "{base_url}/read/{slug}.{lang}.html",
        }
    }
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    assert (
        routes.article_url(config, "de", "chips") == "https://news.example.org/read/chips.de.html"
    )
    assert routes.home_url(config, "de") == "https://news.example.org/de/"
    assert routes.reader_url(config, routes.UNSUBSCRIBE, "t") == "https://news.example.org/u/t"
