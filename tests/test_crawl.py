"""Every link a reader can click resolves: a crawl of the running site and of the mail it sent.

The site runs under uvicorn on loopback, over a real store (SQLite and PostgreSQL), with feeds
built (small pages, so RFC 5005 archives exist) and digests sent through a real SMTP server to
readers of one and of several audiences in every language; two addresses subscribe through the
form, so a confirmation and an already-subscribed note are sent too. The crawl starts at ``/``,
every language's index and issue list and the OPML list, adds every link of every delivered
message (HTML part, text part, List-Unsubscribe) and of the pages answering the form, and
follows every site link it finds: ``href``/``src`` in HTML (``<link>`` elements too), the links
of Atom, RSS and OPML documents, the URLs of JSON Feeds, and the links in the feeds' HTML.

An answer counts when it is 200, or a redirect to a site URL that (crawled in turn) answers
200. A link with a fragment counts only when the page it leads to has that ``id``. Nothing is
left out: readers' personal links (routes.READER: ``/confirm/``, ``/u/``, ``/preferences/``)
are crawled like any other, since their GET only shows a page (the POST acts, and the crawl
never posts). Links to other sites are not fetched.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urlencode, urljoin, urlsplit

import lxml.etree
import lxml.html
import pytest

from syndicate import routes
from syndicate.build import build_feeds
from syndicate.config import Config, parse_config
from syndicate.model import AUDIENCES
from syndicate.reader import read_articles
from syndicate.sending.issuing import send_digests
from syndicate.state import open_store
from syndicate.tokens import secret_key
from syndicate.web import create_app
from tests.conftest import ARTICLES, write_articles
from tests.mailserver import Inbox
from tests.sending import mailer
from tests.websites import base_url_of, listening_socket, running, smtp_mailer, web_config

NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)
READERS = [
    ("en-cost@example.org", "en", ["cost"]),
    ("en-all@example.org", "en", list(AUDIENCES)),
    ("nl-strategy@example.org", "nl", ["strategy"]),
    ("nl-two@example.org", "nl", ["cost", "procurement"]),
    ("de-architects@example.org", "de", ["architects"]),
    ("de-all@example.org", "de", list(AUDIENCES)),
]
"""Each reader a variant of their own: one audience and several, in every language."""
REDIRECTS = {301, 302, 303, 307, 308}
MAX_REDIRECTS = 5
XML_LINK_ATTRIBUTES = {"href", "src", "url", "xmlUrl", "htmlUrl"}
HTML_IN_XML = {"content", "summary", "description"}
"""The elements of feeds whose text is HTML (Atom type="html", RSS description)."""
JSON_URL_KEYS = {"icon", "favicon", "image", "banner_image"}
"""JSON Feed members that are URLs besides those named ``*url``."""


@dataclass
class Crawl:
    """What a crawl found: each URL's answer and every place a link to it was found."""

    base: str
    answered: dict[str, int] = field(default_factory=dict)
    found_on: dict[str, list[str]] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    ids: dict[str, set[str]] = field(default_factory=dict)
    """Per HTML page, the ids (and <a name>s) a fragment can lead to."""
    fragments: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """(page, fragment) → where links to it were found."""

    def on_site(self, url: str) -> bool:
        own, other = urlsplit(self.base), urlsplit(url)
        return (other.scheme, other.netloc) == (own.scheme, own.netloc)

    def resolves(self, page: str, hops: int = 0) -> bool:
        """200, or a redirect on the site to a page that resolves."""
        if self.answered.get(page) == 200:
            return True
        target = self.redirects.get(page)
        return target is not None and hops < MAX_REDIRECTS and self.resolves(target, hops + 1)

    def broken(self) -> list[str]:
        """Each link that does not resolve, with its answer and where it was found."""
        found = []
        for page, status in self.answered.items():
            if not self.resolves(page):
                moved = self.redirects.get(page)
                answer = f"redirects to {moved}" if moved else status
                found.append(f"{page}: {answer}, found on {_places(self.found_on[page])}")
        for (page, fragment), places in self.fragments.items():
            if page in self.ids and fragment not in self.ids[page]:
                found.append(f"{page}#{fragment}: no such id, found on {_places(places)}")
        return found


def _places(places: list[str]) -> str:
    more = f" and {len(places) - 3} more" if len(places) > 3 else ""
    return "; ".join(dict.fromkeys(places[:3])) + more


def crawl(base: str, seeds: Iterable[tuple[str, str]]) -> Crawl:
    """GET every site URL reachable from ``seeds`` ((url, where it was found)), each once."""
    found = Crawl(base)
    queue = deque(seeds)
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        while queue:
            url, where = queue.popleft()
            page, fragment = urldefrag(url)
            if not found.on_site(page):
                continue  # another site's: not this crawl's to check
            found.found_on.setdefault(page, []).append(where)
            if fragment:
                found.fragments.setdefault((page, fragment), []).append(where)
            if page in found.answered:
                continue
            target = urlsplit(page)
            connection.request("GET", target.path + (f"?{target.query}" if target.query else ""))
            response = connection.getresponse()
            body = response.read()
            found.answered[page] = response.status
            if response.status in REDIRECTS:
                location = urljoin(page, response.getheader("Location", ""))
                if found.on_site(location):
                    found.redirects[page] = location
                    queue.append((location, f"the redirect of {page}"))
            elif response.status == 200:
                kind = (response.getheader("Content-Type") or "").split(";")[0].strip()
                queue.extend((link, page) for link in links_in(kind, body, page, found))
    finally:
        connection.close()
    return found


def links_in(kind: str, body: bytes, url: str, found: Crawl) -> list[str]:
    """The links of a document by its media type; an HTML page's ids are noted in ``found``."""
    if kind == "text/html":
        tree = lxml.html.fromstring(body)
        found.ids[url] = set(tree.xpath("//@id | //a/@name"))
        return html_links(tree, url)
    if kind.endswith("xml") or kind == "text/x-opml":
        return xml_links(lxml.etree.fromstring(body), url)
    if kind.endswith("json"):
        return json_links(json.loads(body), url)
    return []


def html_links(tree: lxml.html.HtmlElement, base: str) -> list[str]:
    """Every href and src (a, link, img, script, ...), resolved against the page's base."""
    base = urljoin(base, (tree.xpath("//base/@href") or [""])[0])
    values = tree.xpath("//@href | //@src")
    return [urljoin(base, v.strip()) for v in values if not _not_fetched(v)]


def html_fragment_links(text: str, base: str) -> list[str]:
    if not text.strip():
        return []
    return html_links(lxml.html.fragment_fromstring(text, create_parent="div"), base)


def xml_links(root: Any, base: str) -> list[str]:
    """Atom links, RSS <link>/<guid>, OPML outlines' URLs, and links in feeds' HTML."""
    links = []
    for element in root.iter():
        if not isinstance(element.tag, str):
            continue  # a comment or processing instruction
        name = lxml.etree.QName(element).localname
        here = urljoin(base, element.base or "")
        for attribute, value in element.attrib.items():
            if lxml.etree.QName(attribute).localname in XML_LINK_ATTRIBUTES:
                links.append(urljoin(here, value.strip()))
        text = (element.text or "").strip()
        rss_link = name == "link" and "href" not in element.attrib
        permalink = name == "guid" and element.get("isPermaLink", "true") == "true"
        if (rss_link or permalink) and text:
            links.append(urljoin(here, text))
        elif name in HTML_IN_XML and element.get("type", "html") == "html" and text:
            links.extend(html_fragment_links(text, here))
    return links


def json_links(value: Any, base: str) -> list[str]:
    """A JSON Feed's URLs (``*url`` and the image members) and the links in its HTML."""
    links = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and (key.endswith("url") or key in JSON_URL_KEYS):
                links.append(urljoin(base, item))
            elif isinstance(item, str) and key == "content_html":
                links.extend(html_fragment_links(item, base))
            else:
                links.extend(json_links(item, base))
    elif isinstance(value, list):
        for item in value:
            links.extend(json_links(item, base))
    return links


def mail_links(message: EmailMessage) -> list[str]:
    """Every http(s) link of a delivered message: its HTML part's hrefs and srcs, the URLs in
    its text part, and the List-Unsubscribe header's."""
    links = re.findall(r"<(https?://[^>]+)>", str(message.get("List-Unsubscribe", "")))
    for part in message.walk():
        if part.get_content_type() == "text/html":
            links.extend(html_links(lxml.html.fromstring(part.get_content()), ""))
        elif part.get_content_type() == "text/plain":
            text = part.get_content()
            links.extend(u.rstrip(".,;:!?)") for u in re.findall(r"https?://[^\s<>\"]+", text))
    return [link for link in links if link.startswith(("http://", "https://"))]


def _not_fetched(value: str) -> bool:
    """What is no link to a page: other schemes."""
    return value.strip().lower().startswith(("mailto:", "tel:", "javascript:", "data:"))


def subscribe(base: str, email: str, lang: str, audiences: list[str]) -> bytes:
    """The index's form posted as a browser does (naming the page's origin): the answer."""
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        form = {"email": email, "lang": lang}
        body = urlencode([*form.items(), *(("audiences", a) for a in audiences)])
        headers = {"Origin": base, "Content-Type": "application/x-www-form-urlencoded"}
        connection.request("POST", routes.SUBSCRIBE, body, headers)
        response = connection.getresponse()
        answer = response.read()
        assert response.status == 200, answer
        return answer
    finally:
        connection.close()


def site_config(root: Path, base_url: str, database_url: str, smtp_port: int) -> Config:
    """Small feed pages and a digest cap below the articles of a language, so that archive
    documents and the digests' "more" link exist too."""
    data = {
        "site": {"base_url": base_url, "articles": "articles"},
        "state": {"database": database_url},
        "feeds": {"max_entries": 2, "archive_entries": 2},
        "email": {"sender": "News <digest@news.example.org>", "max_articles": 3},
        "smtp": {"url": f"smtp://127.0.0.1:{smtp_port}", "retry_backoff": 0},
    }
    return parse_config(data, root=root, source="(test)", env={})


@pytest.fixture
def published(tmp_path: Path, database_url: str, smtp_server) -> Iterator[tuple]:
    """A site with feeds built and digests sent, served: its config and the inbox."""
    inbox, smtp_port = smtp_server
    listener = listening_socket()
    config = site_config(tmp_path, base_url_of(listener), database_url, smtp_port)
    folder = tmp_path / "articles"
    shutil.copytree(ARTICLES, folder)
    write_articles(folder, 4, newest=date(2025, 12, 12), langs=tuple(config.site.languages))
    store = open_store(config.database_url)
    try:
        build_feeds(config, folder, now=NOW, store=store)
        for email, lang, audiences in READERS:
            store.subscribers.add_subscriber(
                email, lang, audiences, status="active", consent_source="test", now=NOW
            )
        report = send_digests(config, NOW, mailer=mailer(smtp_port), store=store)
        assert (report.sent, report.failed, report.uncertain) == (len(READERS), 0, 0)
        articles = read_articles(folder, config.profiles)
        app = create_app(
            config,
            store=store,
            send_message=smtp_mailer(smtp_port),
            articles=lambda: articles,
            secret=secret_key(config),  # the key the mails' personal links were signed with
            now=lambda: NOW,
        )
        with running(app, listener):
            yield config, inbox
    finally:
        store.close()


def test_every_link_of_the_site_and_of_the_sent_mail_resolves(
    published: tuple[Config, Inbox],
) -> None:
    config, inbox = published
    base = config.site.base_url
    start = "the crawl's start"
    seeds = [(routes.site_url(config), start), (routes.feed_url(config, "index.opml"), start)]
    for lang in config.site.languages:
        seeds += [(routes.home_url(config, lang), start), (routes.issues_url(config, lang), start)]
    # The subscription mails too: a new address's confirmation, a subscribed one's note.
    for email, lang in (("new@example.org", "nl"), (READERS[0][0], "de")):
        answer = subscribe(base, email, lang, ["cost", "strategy"])
        where = f"the answer to subscribing {email}"
        seeds += [(link, where) for link in html_links(lxml.html.fromstring(answer), base)]
    messages = inbox.messages
    assert len(messages) == len(READERS) + 2
    views = []
    for message in messages:
        where = f"the mail to {message['To']} ({message['Subject']})"
        links = mail_links(message)
        views += [link for link in links if link.startswith(f"{base}/archive/")]
        seeds += [(link, where) for link in links]

    found = crawl(base, seeds)

    broken = found.broken()
    assert not broken, "links that do not resolve:\n" + "\n".join(broken)
    # Not a crawl of nothing: every kind of page was reached, and every mail's issue page.
    issue_pages = {url for url in found.answered if re.search(r"/archive/\w+/\d+-", url)}
    assert len(issue_pages) == len(READERS)
    assert set(views) == issue_pages
    assert any("+" in url for url in issue_pages)  # a multi-audience issue's page
    reached = {urlsplit(url).path for url in found.answered}
    for lang in config.site.languages:
        assert {f"/{lang}/", f"/archive/{lang}/", f"/feeds/{lang}.json"} <= reached
        assert f"/feeds/archive/{lang}-1.atom.xml" in reached
        assert any(path.startswith(f"/{lang}/piece-") for path in reached)
    for purpose in routes.READER:  # the readers' own links too
        assert any(p.startswith(routes.READER[purpose].split("{")[0]) for p in reached)
    assert found.fragments  # the articles' footnote links, checked against their pages' ids


def test_the_issue_pages_serve_the_names_issue_name_makes_and_nothing_outside(
    tmp_path: Path, store, article_set, clock
) -> None:
    listener = listening_socket()
    config = web_config(tmp_path, base_url=base_url_of(listener))
    folder = tmp_path / "archive"
    (folder / "nl").mkdir(parents=True)
    name = routes.issue_name(7, "nl-cost+procurement")
    (folder / "nl" / f"{name}.html").write_text("<title>Week 7</title>")
    for other in ("welcome", ".8-nl-cost"):  # pages no link of the site's leads to
        (folder / "nl" / f"{other}.html").write_text(f"<title>{other}</title>")
    (folder / "secret.html").write_text("not an issue")
    (tmp_path / "secret.html").write_text("not an issue")
    app = create_app(
        config,
        store=store,
        send_message=lambda message: None,
        articles=lambda: article_set,
        secret=b"test",
        now=clock,
    )
    paths = {
        f"/archive/nl/{name}/": 200,
        f"/archive/nl/{name.replace('+', '%2B')}/": 200,  # as a mail client may encode it
        "/archive/nl/welcome/": 404,
        "/archive/nl/.8-nl-cost/": 404,
        "/archive/nl/../": 404,
        "/archive/nl/..%2Fsecret/": 404,
        "/archive/nl/7-..%2F..%2Fsecret/": 404,
        "/archive/nl/7-x%5C..%5C..%5Csecret/": 404,
        "/archive/nl/7-nl-cost%00/": 404,
        "/archive/nl/7-%ED%A0%80/": 404,  # a lone surrogate once decoded
        "/archive/nl/7-%FF/": 404,
    }
    answers = {}
    with running(app, listener):
        connection = http.client.HTTPConnection("127.0.0.1", listener.getsockname()[1])
        for path in paths:
            connection.request("GET", path)
            with connection.getresponse() as response:
                response.read()
                answers[path] = response.status
        connection.request("GET", "/archive/nl/")
        with connection.getresponse() as response:
            listed = lxml.html.fromstring(response.read()).xpath("//main//li/a/@href")
        connection.close()
    assert answers == paths
    assert listed == [f"/archive/nl/{name}/"]  # the list links only what is served
