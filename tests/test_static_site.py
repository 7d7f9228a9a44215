"""``syndicate build --site``: the public site as files, served by a plain static file server.

The site is built after digests went out to readers of one and of several audiences, twice
(two sends), so the past issues hold several variants per send. A standard library
``http.server`` serves the folder on an ephemeral port (the site's base URL), and the crawl of
tests/test_crawl.py follows every link from the top, the indexes, the issue lists, the OPML
and every page the sitemap lists. The sitemap is validated against the sitemaps.org schema,
and every page's bytes are compared with what ``serve`` answers at the same address.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import lxml.etree
import lxml.html
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from syndicate import routes
from syndicate.build import build_feeds
from syndicate.cli import main
from syndicate.config import Config, parse_config
from syndicate.errors import OutputError, RenderError
from syndicate.i18n import language
from syndicate.model import ArticleSet
from syndicate.reader import read_articles
from syndicate.sending.issuing import send_digests
from syndicate.state import Store, open_store
from syndicate.web import create_app, static
from syndicate.web.static import write_site
from tests.conftest import ARTICLES, write_articles
from tests.sending import mailer
from tests.test_crawl import NOW, READERS, crawl
from tests.websites import SECRET

SCHEMAS = Path(__file__).parent / "schemas"
SITEMAP = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
XHTML = "{http://www.w3.org/1999/xhtml}"
LANGS = ["en", "nl", "de", "fr"]
"""Every language with a built-in catalog."""
PAGE_SIZE = 2


@dataclass
class Built:
    config: Config
    store: Store
    articles: ArticleSet
    out: Path
    server: http.server.ThreadingHTTPServer
    now: datetime
    """When the site is built and served: after the second send."""

    @property
    def base(self) -> str:
        return self.config.site.base_url

    def write(self, out: Path | None = None) -> Path:
        write_site(self.config, out or self.out, self.articles, self.store, now=self.now)
        return out or self.out

    def serve_client(self) -> TestClient:
        app = create_app(
            self.config,
            store=self.store,
            send_message=lambda message: None,
            articles=lambda: self.articles,
            secret=SECRET,
            now=lambda: self.now,
        )
        return TestClient(app, follow_redirects=False)


def site_config(root: Path, base_url: str, database_url: str, **site: object) -> Config:
    data = {
        "site": {"base_url": base_url, "languages": LANGS, "page_size": PAGE_SIZE, **site},
        "state": {"database": database_url},
        "feeds": {"max_entries": 2, "archive_entries": 2},
        "email": {"sender": "News <digest@news.example.org>", "max_articles": 3},
    }
    return parse_config(data, root=root, source="(test)", env={})


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def built(tmp_path: Path, database_url: str, smtp_server) -> Iterator[Built]:
    """Feeds built, two sends to readers of every language, the site written into public/
    and served by http.server (bound first: its address is the site's base URL)."""
    _, smtp_port = smtp_server
    out = tmp_path / "public"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(out)))
    config = site_config(tmp_path, f"http://127.0.0.1:{server.server_address[1]}", database_url)
    folder = tmp_path / "articles"
    shutil.copytree(ARTICLES, folder)
    write_articles(folder, 4, newest=date(2025, 12, 12), langs=tuple(LANGS[:3]))
    store = open_store(config.database_url)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    try:
        build_feeds(config, folder, now=NOW, store=store)
        for email, lang, audiences in READERS:
            store.subscribers.add_subscriber(
                email, lang, audiences, status="active", consent_source="test", now=NOW
            )
        send_digests(config, NOW, mailer=mailer(smtp_port), store=store)
        write_articles(folder, 1, newest=date(2025, 12, 20), langs=tuple(LANGS[:3]), slug="late")
        later = NOW + timedelta(days=7)
        build_feeds(config, folder, now=later, store=store)
        send_digests(config, later, mailer=mailer(smtp_port), store=store)
        articles = read_articles(folder, config.profiles)
        site = Built(config, store, articles, out, server, later)
        site.write()
        thread.start()
        yield site
    finally:
        if thread.is_alive():
            server.shutdown()
        server.server_close()
        store.close()


def tree(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` by its relative path, with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def sitemap_urls(folder: Path) -> list[str]:
    root = lxml.etree.parse(str(folder / "sitemap.xml")).getroot()
    return [loc.text for loc in root.iter(f"{SITEMAP}loc")]


def test_every_link_of_the_static_site_resolves_on_a_plain_file_server(built: Built) -> None:
    config, base, start = built.config, built.base, "the crawl's start"
    seeds = [(routes.site_url(config), start), (routes.feed_url(config, "index.opml"), start)]
    seeds += [(url, "sitemap.xml") for url in sitemap_urls(built.out)]
    for lang in LANGS:
        seeds += [(routes.home_url(config, lang), start), (routes.issues_url(config, lang), start)]

    found = crawl(base, seeds)

    broken = found.broken()
    assert not broken, "links that do not resolve:\n" + "\n".join(broken)
    reached = {urlsplit(url).path for url in found.answered}
    for lang in LANGS[:3]:
        assert {f"/{lang}/", f"/{lang}/page/2/", f"/archive/{lang}/"} <= reached
        assert {f"/feeds/{lang}.atom.xml", f"/feeds/archive/{lang}-1.atom.xml"} <= reached
        assert any(path.startswith(f"/{lang}/piece-") for path in reached)
        assert any(re.fullmatch(rf"/archive/{lang}/\d+-{lang}-[a-z+]+/", p) for p in reached)
    assert "/fr/" in reached and "/sitemap.xml" not in reached  # no page links the sitemap
    assert found.fragments  # the footnote links, checked against their pages' ids


def test_the_sitemap_validates_and_links_every_translation(built: Built) -> None:
    schema = lxml.etree.XMLSchema(lxml.etree.parse(str(SCHEMAS / "sitemap-hreflang.xsd")))
    document = lxml.etree.parse(str(built.out / "sitemap.xml"))
    assert schema.validate(document), schema.error_log
    # The schema holds the alternates to the XHTML <link>: a misspelt one fails.
    for wrong in ('<xhtml:link rel="alternate" hreflang="not a code" href="/"/>', "<xhtml:lnk/>"):
        text = (built.out / "sitemap.xml").read_text("utf-8").replace("</url>", wrong + "</url>", 1)
        assert not schema.validate(lxml.etree.fromstring(text.encode()))

    alternates = {
        url.findtext(f"{SITEMAP}loc"): {
            link.get("hreflang"): link.get("href") for link in url.iter(f"{XHTML}link")
        }
        for url in document.getroot()
    }
    base = built.base
    article = f"{base}/nl/amazon-trainium3-aws-nvidia-ai-chip-competition/"
    every = alternates[article]
    assert set(every) == {"en", "nl", "de"} and every["nl"] == article
    for lang, url in every.items():  # each translation names all of them, itself too
        assert alternates[url] == every, lang
    assert alternates[f"{base}/en/"]["x-default"] == f"{base}/"
    assert alternates[f"{base}/"] == alternates[f"{base}/en/"]  # the top page among them
    assert alternates[f"{base}/en/page/2/"] == {}  # page 2 has no translation of its own
    files = set(tree(built.out))
    for url in alternates:  # every page listed is in the folder
        assert routes.NOT_FOUND not in url
        path = urlsplit(url).path.lstrip("/")
        assert (path + "index.html" if path.endswith("/") or not path else path) in files
    robots = (built.out / "robots.txt").read_text("utf-8")
    assert f"Sitemap: {base}/sitemap.xml" in robots.splitlines()


def test_a_sitemap_too_large_for_one_file_is_an_index_a_crawler_follows(
    built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past sitemaps.org's limits (here made 7 URLs a file), sitemap.xml is the index of
    parts. A crawler's parser (ultimate-sitemap-parser) finds every page from robots.txt on;
    each part validates, and serve answers each file with the bytes the site holds."""
    from usp.tree import sitemap_tree_for_homepage

    listed = set(sitemap_urls(built.out))
    monkeypatch.setattr(static, "SITEMAP_MAX_URLS", 7)
    files = tree(built.write())
    parts = sorted(name for name in files if re.fullmatch(r"sitemap-\d+\.xml", name))
    assert len(parts) == -(-len(listed) // 7) >= 2
    index = lxml.etree.fromstring(files["sitemap.xml"])
    assert index.tag == f"{SITEMAP}sitemapindex"
    named = [loc.text for loc in index.iter(f"{SITEMAP}loc")]
    assert named == [f"{built.base}/sitemap-{n}.xml" for n in range(1, len(parts) + 1)]
    schema = lxml.etree.XMLSchema(lxml.etree.parse(str(SCHEMAS / "sitemap-hreflang.xsd")))
    found: list[str] = []
    for name in parts:
        part = lxml.etree.fromstring(files[name])
        assert schema.validate(part), schema.error_log
        assert len(part) <= 7
        found += [loc.text for loc in part.iter(f"{SITEMAP}loc")]
    assert sorted(found) == sorted(listed)  # each page once, in one part

    tree_found = sitemap_tree_for_homepage(built.base + "/", use_known_paths=False)
    assert {page.url for page in tree_found.all_pages()} == listed

    client = built.serve_client()
    for name in ["sitemap.xml", *parts]:
        assert client.get("/" + name).content == files[name], name
    assert client.get(f"/sitemap-{len(parts) + 1}.xml").status_code == 404
    assert client.get("/sitemap-0.xml").status_code == 404


def test_sitemap_parts_keep_to_both_limits_of_the_protocol() -> None:
    """50,000 URLs a file, and 50 MiB: pages with many long alternates reach the second
    first. Every page is listed once, in order."""
    base = "https://news.example.org"
    pages = [static.Page(f"p{n}", bytes, static.Listed(f"{base}/{n}/")) for n in range(120_001)]
    documents = static.sitemaps(pages, base)
    sizes = [document.count(b"<url>") for document in documents[1:]]
    assert sizes == [50_000, 50_000, 20_001] and b"<sitemapindex" in documents[0]
    many = tuple((f"x{n}", f"{base}/{'a' * 4000}/{n}/") for n in range(12))  # ~50 KB a page
    pages = [
        static.Page(f"p{n}", bytes, static.Listed(f"{base}/{n}/", alternates=many))
        for n in range(1_500)
    ]
    documents = static.sitemaps(pages, base)
    assert len(documents) == 3 and all(
        len(d) <= static.SITEMAP_MAX_BYTES and b"</urlset>" in d for d in documents[1:]
    )
    assert sum(d.count(b"<url>") for d in documents[1:]) == 1_500
    one = static.sitemaps(pages[:10], base)
    assert len(one) == 1 and one[0].startswith(b"<?xml") and one[0].count(b"<url>") == 10


def test_two_builds_of_the_same_input_are_byte_identical(built: Built, tmp_path: Path) -> None:
    first = tree(built.out)
    again = tree(built.write(tmp_path / "again"))
    assert again == first
    past = 1_700_000_000_000_000_000
    for path in built.out.rglob("*"):
        os.utime(path, ns=(past, past))
    built.write()  # over itself
    assert tree(built.out) == first
    # A file whose bytes did not change keeps its mtime (a server's Last-Modified and ETag).
    assert {p.stat().st_mtime_ns for p in built.out.rglob("*") if p.is_file()} == {past}
    site = built.config.site.model_copy(update={"title": "Renamed"})  # on every page
    write_site(
        built.config.model_copy(update={"site": site}), built.out, built.articles, built.store
    )
    assert (built.out / "nl" / "index.html").stat().st_mtime_ns != past
    assert (built.out / "feeds" / "nl.atom.xml").stat().st_mtime_ns == past
    assert [p.name for p in built.out.parent.iterdir() if p.name.startswith(".public")] == []
    assert len(first) > 60


def test_a_build_that_fails_midway_leaves_the_previous_site_whole(
    built: Built, tmp_path: Path
) -> None:
    before = tree(built.out)
    layout = tmp_path / "layout" / "web"
    layout.mkdir(parents=True)
    # The past-issues pages come after every article page: a template that fails there
    # fails the build well after the first files were written.
    (layout / "archive.html").write_text("{{ no_such_value }}")
    site = built.config.site.model_copy(update={"templates": Path("layout"), "title": "New"})
    broken = built.config.model_copy(update={"site": site})
    with pytest.raises(
        RenderError, match=r"site in .*public unchanged: .*archive.html:1: .*no_such_value"
    ):
        write_site(broken, built.out, built.articles, built.store)
    assert tree(built.out) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    # A site that cannot be written says so, naming the folder.
    (tmp_path / "a file").write_text("")
    with pytest.raises(OutputError, match=r"site in .*a file/www unchanged"):
        write_site(built.config, tmp_path / "a file" / "www", built.articles, built.store)


def test_the_indexes_are_paginated_with_next_and_prev(built: Built) -> None:
    for lang in LANGS[:3]:
        titles = []
        url = f"{built.base}/{lang}/"
        numbers = []
        while url:
            page = lxml.html.parse(str(_file(built, url))).getroot()
            titles += page.xpath("//ol[@class='articles']//h2/a/@href")
            numbers.append(url)
            assert page.xpath("//link[@rel='canonical']/@href") == [url]
            prev = page.xpath("//head/link[@rel='prev']/@href")
            assert prev == ([numbers[-2]] if len(numbers) > 1 else [])
            assert len(page.xpath("//ol[@class='articles']/li")) <= PAGE_SIZE
            url = (page.xpath("//head/link[@rel='next']/@href") or [None])[0]
            if url:
                assert page.xpath("//nav[@class='pages']/a[@rel='next']/@href") == [url]
        wanted = [
            f"{built.config.site.base_url}/{lang}/{a.slug}/"
            for a in built.articles.in_language(lang)
        ]
        assert titles == wanted  # each article once, newest first, across the pages
        assert numbers[1] == f"{built.base}/{lang}/page/2/" and len(numbers) == 3
    client = built.serve_client()
    assert client.get("/en/page/1/").status_code == 404  # page 1 is /en/
    assert client.get("/en/page/4/").status_code == 404
    assert client.get("/en/page/3/").status_code == 200
    assert not (built.out / "en" / "page" / "1").exists()
    fr = lxml.html.parse(str(built.out / "fr" / "index.html")).getroot()
    assert not fr.xpath("//link[@rel='next']")  # a language with no article: one page


def test_a_404_page_per_language_in_that_language(built: Built) -> None:
    client = built.serve_client()
    for lang in LANGS:
        path = built.out / lang / routes.NOT_FOUND
        page = lxml.html.fromstring(path.read_bytes())
        wanted = language(built.config, lang).translations.gettext("Page not found")
        assert page.get("lang") == lang
        assert page.xpath("//main/h1/text()") == [wanted]
        if lang != "en":
            assert wanted != "Page not found"
        # serve answers a missing address below /<lang>/ with the same page, whatever the
        # browser prefers.
        missing = client.get(f"/{lang}/no/such/page/", headers={"Accept-Language": "de"})
        assert missing.status_code == 404 and missing.content == path.read_bytes()
    top = lxml.html.fromstring((built.out / routes.NOT_FOUND).read_bytes())
    assert top.get("lang") == LANGS[0]
    assert client.get("/nothing-here/").content == (built.out / routes.NOT_FOUND).read_bytes()


def test_every_page_is_the_bytes_serve_answers(built: Built) -> None:
    client = built.serve_client()
    files = tree(built.out)
    compared = 0
    for name, data in files.items():
        if name == "index.html":  # a static host's top page: serve picks the language
            assert client.get("/").status_code == 307
            continue
        if name.endswith(routes.NOT_FOUND):
            continue  # compared in the 404 test
        path = "/" + (name.removesuffix("index.html"))
        answer = client.get(path)
        assert answer.status_code == 200, path
        assert answer.content == data, path
        compared += 1
    assert compared == len(files) - 1 - (1 + len(LANGS))
    assert any(name.startswith("feeds/") for name in files)


def test_the_past_issues_list_one_entry_per_send_with_its_variants(built: Built) -> None:
    client = built.serve_client()
    for lang in LANGS[:3]:
        variants = {tuple(a) for _, reader_lang, a in READERS if reader_lang == lang}
        page = lxml.html.parse(str(_file(built, f"{built.base}/archive/{lang}/"))).getroot()
        sends = page.xpath("//main/ol[@class='issues']/li")
        assert len(sends) == 2  # two sends, however many variants each
        days = [s.xpath("h2/time/@datetime")[0] for s in sends]
        assert days == ["2025-12-22", "2025-12-15"]  # newest first
        for send in sends:
            links = send.xpath("ul/li/a/@href")
            assert len(links) == len(variants)
            keys = {re.fullmatch(rf"/archive/{lang}/\d+-(.+)/", link)[1] for link in links}
            assert keys == {f"{lang}-{'+'.join(sorted(a))}" for a in variants}
        assert (
            client.get(f"/archive/{lang}/").content
            == _file(built, f"/archive/{lang}/").read_bytes()
        )


def test_build_site_from_the_command_line(tmp_path: Path) -> None:
    shutil.copytree(ARTICLES, tmp_path / "articles")
    (tmp_path / "config.toml").write_text('[site]\nbase_url = "https://news.example.org/x"\n')
    config = str(tmp_path / "config.toml")
    result = CliRunner().invoke(
        main, ["build", "--config", config, "--site", str(tmp_path / "www")]
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"site in .*www: \d+ pages, \d+ files", result.output)
    page = lxml.html.parse(str(tmp_path / "www" / "nl" / "index.html")).getroot()
    # Below a path of a host: the site's own links carry it.
    assert page.xpath("//header/a[@class='site']/@href") == ["/x/nl/"]
    assert (tmp_path / "www" / "feeds" / "nl.atom.xml").read_bytes() == (
        tmp_path / "feeds" / "nl.atom.xml"
    ).read_bytes()
    assert not (tmp_path / "www" / "feeds" / ".manifest.json").exists()


def test_build_site_replaces_only_a_folder_it_wrote(tmp_path: Path) -> None:
    """The site takes the place of the folder it is given, whole: not of one that holds the
    site's own files, nor of one with anything else in it."""
    shutil.copytree(ARTICLES, tmp_path / "articles")
    (tmp_path / "config.toml").write_text('[site]\nbase_url = "https://news.example.org"\n')
    other = tmp_path / "documents"
    other.mkdir()
    (other / "letter.txt").write_text("keep me")
    for folder, reason in (
        (tmp_path, "it holds"),
        (tmp_path / "articles", "it holds"),
        (tmp_path / "feeds", "it holds"),
        (other, "it is not empty nor a site written before"),
    ):
        args = ["build", "--config", str(tmp_path / "config.toml"), "--site", str(folder)]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert f"{folder}: not replaced by the site: {reason}" in result.output
    assert (other / "letter.txt").read_text() == "keep me"
    assert len(list((tmp_path / "articles").iterdir())) == len(list(ARTICLES.iterdir()))
    (tmp_path / "empty").mkdir()
    for _ in range(2):  # an empty folder, then the site it holds
        args = [
            "build",
            "--config",
            str(tmp_path / "config.toml"),
            "--site",
            str(tmp_path / "empty"),
        ]
        assert CliRunner().invoke(main, args).exit_code == 0


def test_a_build_killed_midway_leaves_a_folder_the_next_build_removes(built: Built) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its id now names no running process
    left = built.out.parent / f".{built.out.name}.{gone.pid}.x1y2.new"
    (left / "en").mkdir(parents=True)
    (left / "en" / "index.html").write_text("half")
    running = built.out.parent / f".{built.out.name}.{os.getpid()}.x3y4.new"
    running.mkdir()  # a build still at work (this process): left alone
    built.write()
    assert not left.exists() and running.is_dir()
    running.rmdir()


def _file(built: Built, url: str) -> Path:
    path = urlsplit(url).path.lstrip("/")
    return built.out / (path + "index.html" if path.endswith("/") or not path else path)


def test_an_article_dated_ahead_is_on_no_page_until_its_time(
    tmp_path: Path, database_url: str
) -> None:
    """The feeds hold back an article whose date line is still ahead; the site and ``serve``
    hold it back too, its page, the indexes and the sitemap alike, and show it once due."""
    config = site_config(tmp_path, "https://news.example.org", database_url)
    folder = write_articles(tmp_path / "articles", 2, newest=date(2025, 12, 16), slug="soon")
    articles = read_articles(folder, config.profiles)
    early = datetime(2025, 12, 15, 12, tzinfo=UTC)  # "soon-0" is dated the 16th
    page = urlsplit(routes.article_url(config, "en", "soon-0")).path
    store = open_store(config.database_url)
    try:
        for name, now in (("early", early), ("due", early + timedelta(days=1))):
            write_site(config, tmp_path / name, articles, store, tmp_path / "feeds", now=now)
            client = TestClient(
                create_app(
                    config,
                    store=store,
                    send_message=lambda message: None,
                    articles=lambda: articles,
                    secret=SECRET,
                    now=lambda now=now: now,
                )
            )
            assert client.get(page).status_code == (404 if name == "early" else 200)
            assert ("soon-0" in client.get("/en/").text) is (name == "due")
            assert ("soon-0" in client.get(routes.SITEMAP).text) is (name == "due")
    finally:
        store.close()
    early_site, due_site = tree(tmp_path / "early"), tree(tmp_path / "due")
    assert not any(b"soon-0" in data or "soon-0" in name for name, data in early_site.items())
    assert any("soon-1" in name for name in early_site)
    assert page.lstrip("/") + "index.html" in due_site or page.lstrip("/") in due_site
    assert b"soon-0" in due_site["sitemap.xml"]
