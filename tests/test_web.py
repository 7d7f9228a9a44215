"""The web side through an ASGI client: every route, against a real SQLite file and SMTP server."""

from __future__ import annotations

import gzip
import logging
import os
import re
import smtplib
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path

import feedparser
import lxml.html
import pytest
from aiosmtpd.controller import Controller
from starlette.testclient import TestClient

from syndicate.config import Config, parse_config
from syndicate.errors import ConfigError
from syndicate.pipeline import archive_name, build_feeds, message_sender
from syndicate.reader import read_articles
from syndicate.store import Store, open_store
from syndicate.tokens import (
    CONFIRM,
    PREFERENCES,
    UNSUBSCRIBE,
    make_token,
    read_token,
    secret_key,
)
from syndicate.web import create_app, watch_articles
from tests.conftest import ARTICLES

SECRET = b"test secret key"
SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Inbox:
    """An aiosmtpd handler that keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.messages.append(message_from_bytes(envelope.content, policy=policy.default))
        return "250 OK"

    def link(self, index: int = -1) -> str:
        body = self.messages[index].get_content()
        return re.search(r"https?://\S+", body)[0]


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    controller.stop()


def smtp_mailer(port: int):
    def send(message: EmailMessage) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as server:
            server.send_message(message)

    return send


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def web_config(root: Path, base_url: str = "http://testserver", **web: object) -> Config:
    data = {"site": {"base_url": base_url}, "web": web}
    return parse_config(data, root=root, source="(test)", env={})


def write_feeds(folder: Path) -> dict[str, bytes]:
    """A few files as `syndicate build` writes them."""
    files = {
        "nl.atom.xml": b'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom">'
        + b"<title>nl</title>" * 100
        + b"</feed>",
        "nl.rss.xml": b'<?xml version="1.0"?><rss version="2.0"><channel/></rss>',
        "nl.json": b'{"version": "https://jsonfeed.org/version/1.1", "items": []}',
        "index.opml": b'<?xml version="1.0"?><opml version="2.0"/>',
        "archive/nl.atom.1.xml": b'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"/>',
    }
    for name, body in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(body)
    return files


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def article_set():
    config = parse_config({}, root=ARTICLES, source="(test)", env={})
    return read_articles(ARTICLES, config.profiles)


def make_client(config, store, mailer, article_set, clock) -> TestClient:
    app = create_app(
        config, store=store, mailer=mailer, articles=lambda: article_set, secret=SECRET, now=clock
    )
    return TestClient(app, follow_redirects=False)


@pytest.fixture
def site(tmp_path, store, smtp, article_set, clock):
    """A client of the whole app plus what it writes to: store, inbox, clock, feed files."""
    config = web_config(tmp_path, subscribe_per_minute=3)
    (tmp_path / "feeds").mkdir()
    files = write_feeds(tmp_path / "feeds")
    inbox, port = smtp
    client = make_client(config, store, smtp_mailer(port), article_set, clock)
    return client, store, inbox, clock, files


def html(response) -> lxml.html.HtmlElement:
    return lxml.html.fromstring(response.text)


def csrf(client: TestClient, path: str = "/nl/") -> str:
    return html(client.get(path)).xpath("//input[@name='csrf']/@value")[0]


def subscribe(
    client: TestClient, email: str, lang: str = "nl", audiences=("cost",), headers=None, **extra
):
    data = {"email": email, "lang": lang, "audiences": list(audiences), "csrf": csrf(client)}
    return client.post("/subscribe", data={**data, **extra}, headers=headers)


# -- feeds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("nl.atom.xml", "application/atom+xml; charset=utf-8"),
        ("nl.rss.xml", "application/rss+xml; charset=utf-8"),
        ("nl.json", "application/feed+json"),
        ("index.opml", "text/x-opml; charset=utf-8"),
        ("archive/nl.atom.1.xml", "application/atom+xml; charset=utf-8"),
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


def test_a_changed_feed_gets_a_new_etag(site, tmp_path):
    client, *_ = site
    plain = {"Accept-Encoding": "identity"}
    etag = client.get("/feeds/nl.rss.xml", headers=plain).headers["etag"]
    path = tmp_path / "feeds" / "nl.rss.xml"
    path.write_bytes(b'<?xml version="1.0"?><rss version="2.0"><channel><title>new</title>')
    os.utime(path, (1_900_000_000, 1_900_000_000))
    again = client.get("/feeds/nl.rss.xml", headers={**plain, "If-None-Match": etag})
    assert again.status_code == 200
    assert again.headers["etag"] != etag
    assert b"new" in again.content


def test_feeds_are_gzipped_when_asked(site):
    client, *_, files = site
    zipped = client.get("/feeds/nl.atom.xml", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.headers["vary"] == "Accept-Encoding"
    assert zipped.content == files["nl.atom.xml"]  # httpx inflated it
    assert int(zipped.headers["content-length"]) < len(files["nl.atom.xml"])
    assert gzip.decompress(gzip.compress(files["nl.atom.xml"])) == zipped.content
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


# -- pages ---------------------------------------------------------------------------------


def test_index_lists_the_language_with_feed_and_translation_links(site, article_set):
    client, *_ = site
    response = client.get("/nl/")
    assert response.status_code == 200
    page = html(response)
    assert page.get("lang") == "nl"
    links = page.xpath("//ol[@class='articles']//h2/a/@href")
    assert links == [f"http://testserver/nl/{a.slug}/" for a in article_set.in_language("nl")]
    types = page.xpath("//head/link[@rel='alternate'][@type]/@type")
    assert types == ["application/atom+xml", "application/rss+xml", "application/feed+json"]
    assert page.xpath("//head/link[@type='application/atom+xml']/@href") == [
        "http://testserver/feeds/nl.atom.xml"
    ]
    hreflang = page.xpath("//head/link[@hreflang]/@hreflang")
    assert sorted(hreflang) == ["de", "en", "nl"]
    form = page.xpath("//form[@method='post']")[0]
    assert form.get("action").startswith("/subscribe")
    assert form.xpath(".//input[@name='csrf']/@value")[0]
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
    tmp_path, store, smtp, article_set, clock
):
    data = {"site": {"title": "Gardening Weekly"}, "languages": {"de": {"title": "Gartenwoche"}}}
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    inbox, port = smtp
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


# -- subscribing ---------------------------------------------------------------------------


def test_double_opt_in(site, caplog):
    client, store, inbox, *_ = site
    caplog.set_level(logging.INFO, logger="syndicate")
    response = subscribe(client, "Lezer@Example.org", audiences=("cost", "architects"))
    assert response.status_code == 200
    assert "Kijk in je inbox" in response.text
    reader = store.subscriber("Lezer@example.org")
    assert (reader.status, reader.lang, reader.audiences) == (
        "pending",
        "nl",
        ("architects", "cost"),
    )
    [mail] = inbox.messages
    assert mail["To"] == "Lezer@example.org"
    assert mail["Subject"] == "Bevestig je aanmelding bij Syndicate"
    link = inbox.link()
    assert link.startswith("http://testserver/confirm/")

    page = client.get(link)
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert store.subscriber_by_id(reader.id).status == "pending"  # GET alone does nothing
    token = html(page).xpath("//form//input[@name='csrf']/@value")[0]
    confirmed = client.post(link, data={"csrf": token})
    assert confirmed.status_code == 200
    assert "Aanmelding bevestigd" in confirmed.text
    assert store.subscriber_by_id(reader.id).status == "active"
    assert "lezer" not in caplog.text.lower()
    assert f"reader {reader.id} confirmed" in caplog.text


def test_invalid_input_is_refused_without_side_effects(site):
    client, store, inbox, *_ = site
    bad_email = subscribe(client, "not an address")
    assert bad_email.status_code == 400
    assert "Vul een geldig e-mailadres in." in bad_email.text
    no_group = subscribe(client, "a@example.org", audiences=())
    assert no_group.status_code == 400
    assert list(store.subscribers()) == []
    assert inbox.messages == []


def test_echoed_input_is_escaped(site):
    client, *_ = site
    response = subscribe(client, '"><script>alert(1)</script>')
    assert response.status_code == 400
    assert "<script>alert" not in response.text
    assert html(response).xpath("//input[@name='email']/@value") == ['"><script>alert(1)</script>']


def test_form_posts_need_the_csrf_token(site, clock):
    client, store, inbox, *_ = site
    data = {"email": "a@example.org", "lang": "nl", "audiences": "cost"}
    assert client.post("/subscribe", data=data).status_code == 400
    assert client.post("/subscribe", data={**data, "csrf": "0" * 64}).status_code == 400
    stranger = TestClient(client.app)  # no cookie of its own
    assert stranger.post("/subscribe", data={**data, "csrf": csrf(client)}).status_code == 400
    assert list(store.subscribers()) == []

    reader = store.add_subscriber(
        "a@example.org", "nl", ["cost"], status="pending", consent_source="t", now=clock()
    )
    confirm = f"/confirm/{make_token(SECRET, CONFIRM, reader.id, issued=clock())}"
    assert client.post(confirm, data={}).status_code == 400
    store.set_status(reader.id, "active", clock())
    unsubscribe = f"/u/{make_token(SECRET, UNSUBSCRIBE, reader.id, issued=clock())}"
    assert client.post(unsubscribe, data={}).status_code == 400
    prefs = f"/preferences/{make_token(SECRET, PREFERENCES, reader.id, issued=clock())}"
    assert client.post(prefs, data={"lang": "de", "audiences": "cost"}).status_code == 400
    after = store.subscriber_by_id(reader.id)
    assert (after.status, after.lang) == ("active", "nl")
    assert inbox.messages == []


def test_subscribing_a_known_address_reveals_nothing(site, clock):
    client, store, inbox, *_ = site
    active = store.add_subscriber(
        "known@example.org", "de", ["strategy"], status="active", consent_source="t", now=clock()
    )
    new = subscribe(client, "new@example.org")
    known = subscribe(client, "known@example.org")
    assert (known.status_code, known.text) == (new.status_code, new.text)
    unchanged = store.subscriber_by_id(active.id)
    assert (unchanged.status, unchanged.lang, unchanged.audiences) == (
        "active",
        "de",
        ("strategy",),
    )
    # The owner, not the visitor, learns of it: a note in the reader's own language.
    note = inbox.messages[-1]
    assert note["To"] == "known@example.org"
    assert note["Subject"] == "Ihr Abonnement bei Syndicate"
    assert "/preferences/" in inbox.link()
    # In another letter case it is still the same reader: no second one, nothing changed.
    again = subscribe(client, "KNOWN@Example.ORG")
    assert (again.status_code, again.text) == (new.status_code, new.text)
    assert [s.email for s in store.subscribers()] == ["known@example.org", "new@example.org"]
    assert store.subscriber_by_id(active.id).status == "active"
    assert inbox.messages[-1]["Subject"] == "Ihr Abonnement bei Syndicate"


def test_subscribe_is_rate_limited_per_client(site, clock):
    client, _, inbox, *_ = site
    statuses = [subscribe(client, f"r{i}@example.org").status_code for i in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert len(inbox.messages) == 3
    clock.now += timedelta(seconds=61)
    assert subscribe(client, "later@example.org").status_code == 200


def test_mails_to_one_address_are_limited_per_hour(tmp_path, store, smtp, article_set, clock):
    config = web_config(tmp_path, mails_per_address_hour=2)
    inbox, port = smtp
    client = make_client(config, store, smtp_mailer(port), article_set, clock)
    pages = [subscribe(client, "Victim@example.org") for _ in range(3)]
    pages.append(subscribe(client, "victim@EXAMPLE.org"))  # the same mailbox
    assert [p.status_code for p in pages] == [200] * 4
    assert len({p.text for p in pages}) == 1  # the visitor cannot tell the difference
    assert len(inbox.messages) == 2
    assert subscribe(client, "other@example.org").status_code == 200
    assert len(inbox.messages) == 3
    clock.now += timedelta(minutes=61)
    subscribe(client, "victim@example.org")
    assert len(inbox.messages) == 4


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(
    tmp_path, store, smtp, article_set, clock
):
    _, port = smtp

    def client_from(address: str, **web: object) -> TestClient:
        config = web_config(tmp_path, subscribe_per_minute=2, **web)
        app = create_app(
            config,
            store=store,
            mailer=smtp_mailer(port),
            articles=lambda: article_set,
            secret=SECRET,
            now=clock,
        )
        return TestClient(app, client=(address, 40000), follow_redirects=False)

    def statuses(client: TestClient, forwarded: list[str]) -> list[int]:
        return [
            subscribe(client, f"r{i}@example.org", headers={"X-Forwarded-For": value}).status_code
            for i, value in enumerate(forwarded)
        ]

    # By default no one is trusted: a client naming a new address each time is still one client.
    direct = client_from("203.0.113.9")
    assert statuses(direct, ["198.51.100.1", "198.51.100.2", "198.51.100.3"]) == [200, 200, 429]
    # Behind a trusted proxy, each client forwarded has its own bucket...
    proxied = client_from("10.0.0.2", trusted_proxies=["10.0.0.0/8"])
    assert statuses(proxied, ["198.51.100.1", "198.51.100.2", "198.51.100.1"]) == [200] * 3
    assert statuses(proxied, ["198.51.100.1"]) == [429]
    # ...and what a client puts in front of the proxy's own entry changes nothing.
    spoofed = ["1.1.1.1, 198.51.100.7", "2.2.2.2, 198.51.100.7", "3.3.3.3, 198.51.100.7"]
    assert statuses(proxied, spoofed) == [200, 200, 429]
    # A proxy not on the list is a client like any other.
    untrusted = client_from("192.0.2.1", trusted_proxies=["10.0.0.0/8"])
    assert statuses(untrusted, ["198.51.100.20", "198.51.100.21", "198.51.100.22"]) == [
        200,
        200,
        429,
    ]


def test_trusted_proxies_must_be_addresses(tmp_path):
    with pytest.raises(ConfigError, match=r"web\.trusted_proxies: not an IP address"):
        web_config(tmp_path, trusted_proxies=["proxy.example.org"])


def test_a_mail_server_failure_is_a_polite_503(tmp_path, store, article_set, clock):
    config = web_config(tmp_path)
    client = make_client(config, store, smtp_mailer(free_port()), article_set, clock)
    response = subscribe(client, "a@example.org")
    assert response.status_code == 503
    assert "Niet verzonden" in response.text


# -- reader links --------------------------------------------------------------------------


@pytest.fixture
def active(site, clock):
    _, store, *_ = site
    return store.add_subscriber(
        "reader@example.org", "de", ["cost"], status="active", consent_source="t", now=clock()
    )


def test_unsubscribe_page_then_post(site, active, clock):
    client, store, *_ = site
    url = f"/u/{make_token(SECRET, UNSUBSCRIBE, active.id, issued=clock())}"
    page = client.get(url)
    assert page.status_code == 200
    assert html(page).get("lang") == "de"
    assert "Abbestellen" in page.text
    assert "reader@example.org" not in page.text
    assert html(page).xpath("//main/p[1]/text()") == ["Für die Adresse r•••@example.org"]
    assert store.subscriber_by_id(active.id).status == "active"
    token = html(page).xpath("//form//input[@name='csrf']/@value")[0]
    done = client.post(url, data={"csrf": token})
    assert done.status_code == 200
    assert "Sie haben abbestellt" in done.text
    assert "Für die Adresse r•••@example.org" in done.text
    assert store.subscriber_by_id(active.id).status == "unsubscribed"


def test_rfc8058_one_click_post_needs_no_cookie(site, active, clock):
    client, store, *_ = site
    url = f"/u/{make_token(SECRET, UNSUBSCRIBE, active.id, issued=clock())}"
    mail_client = TestClient(client.app)
    response = mail_client.post(
        url,
        content=b"List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 200
    assert "cookie" not in {k.lower() for k in response.request.headers}
    assert store.subscriber_by_id(active.id).status == "unsubscribed"
    # Repeating it is harmless.
    again = mail_client.post(url, data={"List-Unsubscribe": "One-Click"})
    assert again.status_code == 200


def test_preferences_change_language_and_audiences(site, active, clock):
    client, store, *_ = site
    url = f"/preferences/{make_token(SECRET, PREFERENCES, active.id, issued=clock())}"
    response = client.get(url)
    assert "reader@example.org" not in response.text
    page = html(response)
    assert page.xpath("//main/p[1]/text()") == ["Für die Adresse r•••@example.org"]
    assert page.xpath("//select[@name='lang']/option[@selected]/@value") == ["de"]
    assert page.xpath("//input[@name='audiences'][@checked]/@value") == ["cost"]
    token = page.xpath("//input[@name='csrf']/@value")[0]
    saved = client.post(url, data={"csrf": token, "lang": "nl", "audiences": ["strategy", "cost"]})
    assert saved.status_code == 200
    assert "Je voorkeuren zijn opgeslagen." in saved.text  # now shown in the new language
    after = store.subscriber_by_id(active.id)
    assert (after.lang, after.audiences, after.status) == ("nl", ("cost", "strategy"), "active")
    unsubscribe = html(saved).xpath("//a[contains(@href, '/u/')]/@href")[0]
    assert client.get(unsubscribe).status_code == 200


def test_preferences_set_the_readers_time_zone(site, active, clock):
    client, store, *_ = site
    url = f"/preferences/{make_token(SECRET, PREFERENCES, active.id, issued=clock())}"
    page = html(client.get(url))
    zone = "//select[@name='timezone']/option[@selected]/@value"
    assert page.xpath(zone) == ["Europe/Amsterdam"]  # the site's, until the reader picks one
    assert "Asia/Tokyo" in page.xpath("//select[@name='timezone']/option/@label")
    token = page.xpath("//input[@name='csrf']/@value")[0]
    form = {"csrf": token, "lang": "de", "audiences": ["cost"]}
    saved = client.post(url, data={**form, "timezone": "Asia/Tokyo"})
    assert html(saved).xpath(zone) == ["Asia/Tokyo"]
    assert store.subscriber_by_id(active.id).timezone == "Asia/Tokyo"
    client.post(url, data={**form, "timezone": "Mars/Olympus_Mons"})  # not a zone: kept
    assert store.subscriber_by_id(active.id).timezone == "Asia/Tokyo"


def test_bad_tokens_get_one_plain_page(site, active, clock, store):
    client, *_ = site
    good = make_token(SECRET, UNSUBSCRIBE, active.id, issued=clock())
    flipped = good[:10] + ("A" if good[10] != "A" else "B") + good[11:]
    gone = store.add_subscriber(
        "gone@example.org", "nl", ["cost"], status="active", consent_source="t", now=clock()
    )
    gone_token = make_token(SECRET, UNSUBSCRIBE, gone.id, issued=clock())
    store.remove_subscriber("gone@example.org")
    expired = make_token(SECRET, CONFIRM, active.id, issued=clock() - timedelta(days=8))
    cases = [
        f"/u/{flipped}",
        f"/u/{good[:-4]}",
        "/u/not-a-token",
        f"/u/{make_token(b'other key', UNSUBSCRIBE, active.id, issued=clock())}",
        f"/u/{make_token(SECRET, PREFERENCES, active.id, issued=clock())}",  # wrong purpose
        f"/u/{gone_token}",
        f"/confirm/{expired}",
        f"/preferences/{good}",
    ]
    bodies = set()
    for path in cases:
        for method in (client.get, client.post):
            response = method(path)
            assert response.status_code == 404, path
            assert "reader@example.org" not in response.text
            bodies.add(response.text)
    assert len(bodies) == 1
    assert store.subscriber_by_id(active.id).status == "active"


def test_a_running_server_sees_article_changes(articles_dir, tmp_path):
    config = web_config(tmp_path)
    current = watch_articles(articles_dir, config)
    first = current()
    assert current() is first  # unchanged files are not read again
    removed = sorted(articles_dir.iterdir())[0]
    removed.unlink()
    assert len(current()) == len(first) - 1


# -- archive -------------------------------------------------------------------------------


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
    assert page.xpath("//main//li/time/@datetime") == ["2025-12-15", "2025-12-08"]
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
        issue = store.create_issue(
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
        page = folder / f"{archive_name(made[issue_id])}.html"
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
    assert page.xpath("//main//li/a/@href")[0] == f"/archive/nl/{archive_name(made[11])}/"
    assert page.xpath("//main//li/time/@datetime") == [
        "2025-12-15",
        "2025-12-08",
        "2025-11-10",
        "2025-11-03",
        "2025-10-27",
        "2023-11-14",
    ]
    assert page.xpath("//main//li/time/text()")[0] == "15 december 2025"


# -- tokens --------------------------------------------------------------------------------


def test_token_decoding_is_strict(clock):
    token = make_token(SECRET, UNSUBSCRIBE, 42, issued=clock())
    assert len(token) == 64
    assert read_token(SECRET, UNSUBSCRIBE, token) == 42
    for altered in (
        token + "=",
        token + "==",
        token + "A",
        token + "!",
        token[:32] + "!" + token[32:],
        token[:32] + "." + token[33:],
        token[:-1],
        token + "\n",
        token.replace("-", "+").replace("_", "/"),
        " " + token,
    ):
        if altered != token:
            assert read_token(SECRET, UNSUBSCRIBE, altered) is None, altered


def test_tokens_carry_id_purpose_and_age(clock):
    token = make_token(SECRET, CONFIRM, 42, issued=clock())
    assert read_token(SECRET, CONFIRM, token) == 42
    assert read_token(SECRET, UNSUBSCRIBE, token) is None
    assert read_token(b"another", CONFIRM, token) is None
    day = timedelta(days=1)
    assert read_token(SECRET, CONFIRM, token, day, now=clock() + day / 2) == 42
    assert read_token(SECRET, CONFIRM, token, day, now=clock() + 2 * day) is None
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token)


def test_a_missing_secret_is_generated_once_and_kept(tmp_path):
    config = parse_config({}, root=tmp_path, source="(test)", env={})
    first = secret_key(config)
    assert len(first) >= 32
    assert secret_key(config) == first
    key_file = tmp_path / "state" / "secret_key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    configured = parse_config({}, root=tmp_path, source="(t)", env={"SYNDICATE_SECRET_KEY": "k"})
    assert secret_key(configured) == b"k"


# -- single messages (confirmations) through the configured mailer ------------------------


def test_confirmation_mail_goes_to_the_configured_smtp_server(tmp_path, smtp, clock):
    inbox, port = smtp
    config = parse_config(
        {"smtp": {"url": f"smtp://127.0.0.1:{port}"}}, root=tmp_path, source="(t)", env={}
    )
    message = EmailMessage()
    message["To"], message["Subject"] = "a@example.org", "hello"
    message.set_content("body")
    message_sender(config)(message)
    assert [m["Subject"] for m in inbox.messages] == ["hello"]


def test_without_smtp_the_mail_lands_in_the_outbox_maildir(tmp_path):
    config = parse_config({}, root=tmp_path, source="(t)", env={})
    message = EmailMessage()
    message["To"], message["Subject"] = "a@example.org", "hello"
    message.set_content("body")
    message_sender(config)(message)
    [stored] = list((tmp_path / "outbox" / "maildir" / "new").iterdir())
    assert b"Subject: hello" in stored.read_bytes()


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
