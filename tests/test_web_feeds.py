"""The feed files over HTTP: media types, validators, gzip, and nothing else served."""

from __future__ import annotations

import os
from dataclasses import replace
from email.utils import formatdate, parsedate_to_datetime

import feedparser
import pytest

from syndicate.build import build_feeds
from syndicate.config import parse_config
from syndicate.web.feeds import FeedFolder
from tests.conftest import ARTICLES
from tests.websites import make_client, web_config, write_feeds


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("nl.atom.xml", "application/atom+xml; charset=utf-8"),
        ("nl.rss.xml", "application/rss+xml; charset=utf-8"),
        ("nl.json", "application/feed+json"),
        ("nl/cost.atom.xml", "application/atom+xml; charset=utf-8"),
        ("nl/cost.rss.xml", "application/rss+xml; charset=utf-8"),
        ("nl/cost.json", "application/feed+json"),
        ("index.opml", "text/x-opml; charset=utf-8"),
        ("archive/nl-1.atom.xml", "application/atom+xml; charset=utf-8"),
    ],
)
def test_feed_files_are_served_with_their_media_type(site, name, content_type):
    client, *_, files = site
    response = client.get(f"/feeds/{name}", headers={"Accept-Encoding": "identity"})
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    assert response.content == files[name]
    assert "content-encoding" not in response.headers
    assert response.headers["etag"].startswith('"')
    assert response.headers["last-modified"].endswith("GMT")


def test_every_file_build_writes_is_served_and_every_feed_link_resolves(site, tmp_path, now):
    client, *_ = site
    config = web_config(tmp_path)
    out = tmp_path / "feeds"
    report = build_feeds(config, ARTICLES, out, now=now)
    assert report.written
    expected = {
        ".atom.xml": "application/atom+xml",
        ".rss.xml": "application/rss+xml",
        ".json": "application/feed+json",
        ".opml": "text/x-opml",
    }
    links = set()
    for name in report.written:
        response = client.get(f"/feeds/{name}")
        assert response.status_code == 200, name
        kind = next(t for suffix, t in expected.items() if name.endswith(suffix))
        assert response.headers["content-type"].split(";")[0] == kind, name
        if name.endswith(".atom.xml"):
            links |= {e.link for e in feedparser.parse(response.content).entries}
    assert links
    for url in links:
        assert url.startswith("http://testserver/")
        assert client.get(url).status_code == 200, url


def test_conditional_get_answers_304(site):
    client, *_ = site
    plain = {"Accept-Encoding": "identity"}
    first = client.get("/feeds/nl.atom.xml", headers=plain)
    etag, modified = first.headers["etag"], first.headers["last-modified"]

    def status(**headers: str) -> int:
        return client.get("/feeds/nl.atom.xml", headers={**plain, **headers}).status_code

    assert status(**{"If-None-Match": etag}) == 304
    assert status(**{"If-None-Match": f'"other", W/{etag}'}) == 304
    assert status(**{"If-None-Match": "*"}) == 304
    assert status(**{"If-None-Match": '"other"'}) == 200
    assert status(**{"If-Modified-Since": modified}) == 304
    earlier = formatdate(parsedate_to_datetime(modified).timestamp() - 60, usegmt=True)
    assert status(**{"If-Modified-Since": earlier}) == 200
    # If-None-Match wins over If-Modified-Since (RFC 9110 §13.2.2).
    assert status(**{"If-None-Match": '"other"', "If-Modified-Since": modified}) == 200
    not_modified = client.get("/feeds/nl.atom.xml", headers={**plain, "If-None-Match": etag})
    assert not_modified.content == b""
    assert not_modified.headers["etag"] == etag


def test_head_gives_the_validators_without_the_body(site):
    client, *_ = site
    plain = {"Accept-Encoding": "identity"}
    response = client.head("/feeds/nl.atom.xml", headers=plain)
    assert response.status_code == 200
    assert response.content == b""
    assert (
        response.headers["etag"] == client.get("/feeds/nl.atom.xml", headers=plain).headers["etag"]
    )


def test_a_changed_feed_gets_a_new_etag_within_a_second(site, tmp_path):
    client, *_ = site
    moment = [0.0]
    feeds = FeedFolder(tmp_path / "feeds", every=1.0, clock=lambda: moment[0])
    client.app.state.web = replace(client.app.state.web, feeds=feeds)
    plain = {"Accept-Encoding": "identity"}
    etag = client.get("/feeds/nl.rss.xml", headers=plain).headers["etag"]
    path = tmp_path / "feeds" / "nl.rss.xml"
    path.write_bytes(b'<?xml version="1.0"?><rss version="2.0"><channel><title>new</title>')
    os.utime(path, (1_900_000_000, 1_900_000_000))
    moment[0] = 0.5  # looked at just now: answered from memory
    assert (
        client.get("/feeds/nl.rss.xml", headers={**plain, "If-None-Match": etag}).status_code == 304
    )
    moment[0] = 1.0
    again = client.get("/feeds/nl.rss.xml", headers={**plain, "If-None-Match": etag})
    assert again.status_code == 200
    assert again.headers["etag"] != etag
    assert b"new" in again.content
    path.unlink()
    moment[0] = 2.0
    assert client.get("/feeds/nl.rss.xml", headers=plain).status_code == 404


def test_feeds_are_gzipped_when_asked(site):
    client, *_, files = site
    zipped = client.get("/feeds/nl.atom.xml", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.headers["vary"] == "Accept-Encoding"
    assert zipped.content == files["nl.atom.xml"]  # httpx inflated it
    assert int(zipped.headers["content-length"]) < len(files["nl.atom.xml"])
    plain = client.get("/feeds/nl.atom.xml", headers={"Accept-Encoding": "gzip;q=0"})
    assert "content-encoding" not in plain.headers
    # Each encoding is its own representation with its own validator.
    assert plain.headers["etag"] != zipped.headers["etag"]
    repeat = {"Accept-Encoding": "gzip", "If-None-Match": zipped.headers["etag"]}
    assert client.get("/feeds/nl.atom.xml", headers=repeat).status_code == 304


@pytest.mark.parametrize(
    "path",
    [
        "/feeds/missing.xml",
        "/feeds/%2e%2e/state.db",
        "/feeds/.hidden",
        "/feeds/",
        "/feeds/nl.atom.xml%00",
        "/feeds/nl.atom.xml%00.txt",
        "/feeds/%ED%A0%80.xml",  # a lone surrogate once decoded
        "/archive/nl/%00/",
        "/nl/%00/",
    ],
)
def test_nothing_outside_the_feed_files_is_served(site, tmp_path, path):
    client, *_ = site
    (tmp_path / "feeds" / ".hidden").write_text("secret")
    assert client.get(path).status_code == 404


def test_a_subscription_feed_names_its_hubs_and_itself_in_a_link_header(
    tmp_path, store, article_set, clock
):
    hubs = ["https://hub.example.net/websub", "https://push.example.org/hub"]
    config = parse_config(
        {"site": {"base_url": "https://news.example.org"}, "feeds": {"hub": hubs}},
        root=tmp_path,
        source="(test)",
        env={},
    )
    (tmp_path / "feeds").mkdir()
    write_feeds(tmp_path / "feeds")
    client = make_client(config, store, None, article_set, clock)
    for name in ("nl.atom.xml", "nl.rss.xml", "nl.json", "nl/cost.atom.xml", "nl/cost.json"):
        response = client.get(f"/feeds/{name}")
        assert response.headers["link"] == (
            '<https://hub.example.net/websub>; rel="hub", '
            '<https://push.example.org/hub>; rel="hub", '
            f'<https://news.example.org/feeds/{name}>; rel="self"'
        )
        again = client.get(f"/feeds/{name}", headers={"If-None-Match": response.headers["etag"]})
        assert again.status_code == 304 and again.headers["link"] == response.headers["link"]
    for name in ("index.opml", "archive/nl-1.atom.xml"):  # no topic of their own
        assert "link" not in client.get(f"/feeds/{name}").headers
    plain = make_client(web_config(tmp_path), store, None, article_set, clock)
    assert "link" not in plain.get("/feeds/nl.atom.xml").headers
