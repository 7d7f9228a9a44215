"""Feeds as subscribers' readers see them: valid, stable, exact, and never half-written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from email.utils import parsedate_to_datetime
from html import escape as html_escape
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import feedparser
import pytest
from babel.dates import format_date
from click.testing import CliRunner
from lxml import etree

from syndicate import feeds, reader
from syndicate.build import INDEX, MANIFEST, build_feeds
from syndicate.cli import main
from syndicate.config import Config, parse_config
from syndicate.errors import SyndicateError
from syndicate.model import Article, ArticleSet, Block, Reference, Seo, Takeaways
from syndicate.routes import article_url
from tests.conftest import ARTICLES, SCHEMAS
from tests.golden import assert_golden_folder

SEED_SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"
DATE_LINES = {"en": "Updated", "nl": "Bijgewerkt op", "de": "Aktualisiert am"}
ATOM = "{http://www.w3.org/2005/Atom}"
AUDIENCES = ("architects", "cost", "procurement", "strategy", "ecosystem")
"""The audiences every seed article has takeaways for: each has a feed per language."""
RFC822 = re.compile(r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}$")


def make_config(root: Path, **feeds_section: Any) -> Config:
    return parse_config({"feeds": feeds_section}, root=root, source="(test)", env={})


def seeds() -> dict[str, str]:
    """The bundled articles by language."""
    found = {}
    for path in sorted(ARTICLES.iterdir()):
        text = path.read_text("utf-8")
        lang = next(lang for lang, words in DATE_LINES.items() if f"\n\n{words} " in text)
        found[lang] = text
    return found


def variant(text: str, lang: str, *, slug: str, day: date, title: str | None = None) -> str:
    """A seed turned into another article: new slug, date line and (optionally) title."""
    paras = text.split("\n\n")
    paras[1] = f"{DATE_LINES[lang]} {format_date(day, 'long', locale=lang)}"
    if title is not None:
        paras[0] = title
    return "\n\n".join(paras).replace(SEED_SLUG, slug)


def write_set(folder: Path, count: int, *, start: date = date(2025, 1, 1)) -> None:
    """``count`` articles per language, one day apart, translations sharing a slug."""
    folder.mkdir(parents=True, exist_ok=True)
    for lang, text in seeds().items():
        for n in range(count):
            day = date.fromordinal(start.toordinal() + n)
            body = variant(text, lang, slug=f"article-{n:03d}", day=day)
            (folder / f"{lang}-{n:03d}.txt").write_text(body, "utf-8")


BOOKKEEPING = (MANIFEST, INDEX)  # the build's own files, not documents


def outputs(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name not in BOOKKEEPING
    }


def index_lines(path: Path) -> dict[str, bytes]:
    """The index file's line of each article file: the last one with its path."""
    _key, *lines = path.read_bytes().splitlines()
    return {json.loads(line.partition(b"\t")[0])[0]: line for line in lines}


def mtimes(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def atom_schema() -> etree.RelaxNG:
    return etree.RelaxNG(etree.parse(str(SCHEMAS / "atom.rng")))


@pytest.fixture
def archived(tmp_path: Path) -> tuple[Config, Path]:
    """Five articles per language, two per document: a subscription feed and two archives."""
    write_set(tmp_path / "articles", 5)
    config = make_config(tmp_path, max_entries=2, archive_entries=2, hub="https://hub.example.org/")
    build_feeds(config, tmp_path / "articles")
    return config, tmp_path / "feeds"


# ---------------------------------------------------------------------------------------------


def test_seed_feeds_match_golden(tmp_path: Path, articles_dir: Path) -> None:
    """Regenerate with ``UPDATE_GOLDEN=1 pytest``; review the diff like code."""
    config = make_config(tmp_path, hub="https://hub.example.org/")
    build_feeds(config, articles_dir)
    assert_golden_folder("feeds", outputs(tmp_path / "feeds"))


def test_every_atom_document_validates_against_the_schema(
    archived: tuple[Config, Path], atom_schema: etree.RelaxNG, tmp_path: Path
) -> None:
    _, out = archived
    documents = sorted(out.rglob("*.atom.xml"))
    # per language: subscription + 2 archives, and one per audience
    assert len(documents) == 3 * (3 + len(AUDIENCES))
    for path in documents:
        assert atom_schema.validate(etree.parse(str(path))), (path, atom_schema.error_log)


def test_rss_has_the_required_structure(archived: tuple[Config, Path]) -> None:
    config, out = archived
    for lang in config.site.languages:
        channel = etree.parse(str(out / f"{lang}.rss.xml")).getroot().find("channel")
        assert channel.findtext("title") == config.title(lang)
        assert channel.findtext("link") == f"{config.site.base_url}/{lang}/"
        assert channel.findtext("description")
        assert channel.findtext("language") == lang
        self_link = channel.find(f"{ATOM}link[@rel='self']")
        assert self_link.get("href") == f"{config.site.base_url}/feeds/{lang}.rss.xml"
        assert channel.find(f"{ATOM}link[@rel='hub']").get("href") == "https://hub.example.org"
        items = channel.findall("item")
        assert len(items) == 2
        for item in items:
            assert item.find("guid").get("isPermaLink") == "false"
            assert item.findtext("guid").startswith("tag:")
            assert RFC822.match(item.findtext("pubDate")), item.findtext("pubDate")
            assert parsedate_to_datetime(item.findtext("pubDate")).tzinfo is not None
            assert item.findtext("link") == article_url(config, lang, item.findtext("guid")[-11:])
        assert RFC822.match(channel.findtext("lastBuildDate"))
        assert channel.findtext("lastBuildDate") == items[0].findtext("pubDate")


def test_feedparser_sees_every_field(archived: tuple[Config, Path]) -> None:
    config, out = archived
    for lang in config.site.languages:
        for name in (f"{lang}.atom.xml", f"{lang}.rss.xml"):
            parsed = feedparser.parse((out / name).read_bytes())
            assert not parsed.bozo, (name, parsed.get("bozo_exception"))
            feed = parsed.feed
            assert feed.title == config.title(lang)
            assert feed.subtitle == config.description(lang)
            assert feed.language == lang
            assert feed.updated_parsed is not None
            assert feed.link == f"{config.site.base_url}/{lang}/"
            if name.endswith(".atom.xml"):
                assert feed.id == f"tag:127.0.0.1,2025-01-01:feeds/{lang}"
                other_feeds = {
                    link.hreflang: link.href
                    for link in feed.links
                    if link.rel == "alternate" and link.type == "application/atom+xml"
                }
                assert other_feeds == {
                    other: f"{config.site.base_url}/feeds/{other}.atom.xml"
                    for other in config.site.languages
                    if other != lang
                }
                assert feed.author == "Syndicate editors"
                assert feed.generator == "syndicate"
            assert [e.title for e in parsed.entries]
            for entry in parsed.entries:
                slug = entry.id.rsplit("/", 1)[1]
                assert entry.id == f"tag:127.0.0.1,2025-01-01:{lang}/{slug}"
                own = article_url(config, lang, slug)
                assert entry.link == own
                assert entry.title and entry.summary and entry.author == "Syndicate editors"
                assert entry.published_parsed is not None
                assert [t.label or t.term for t in entry.tags] == [
                    config.languages[lang].audience_names[a] for a in config.audiences
                ]
                assert "<h2>" in entry.content[0].value
                if name.endswith(".atom.xml"):
                    assert entry.updated_parsed is not None
                    # The own page is the one alternate: readers take the first alternate
                    # (Miniflux, SimplePie) or the last (feedparser, newsboat).
                    by_rel: dict[str, dict[str, str]] = {}
                    for link in entry.links:
                        assert link.type == "text/html"
                        by_rel.setdefault(link.rel, {})[link.hreflang] = link.href
                    assert by_rel == {
                        "alternate": {lang: own},
                        "related": {
                            other: article_url(config, other, slug)
                            for other in config.site.languages
                            if other != lang
                        },
                    }


def test_atom_dates_come_from_the_date_line_in_the_site_zone(
    archived: tuple[Config, Path],
) -> None:
    _, out = archived
    root = etree.parse(str(out / "en.atom.xml")).getroot()
    entries = root.findall(f"{ATOM}entry")
    # Newest first; 2025-01-05 at 09:00 in Europe/Amsterdam (CET, +01:00).
    assert [e.findtext(f"{ATOM}updated") for e in entries] == [
        "2025-01-05T09:00:00+01:00",
        "2025-01-04T09:00:00+01:00",
    ]
    assert root.findtext(f"{ATOM}updated") == "2025-01-05T09:00:00+01:00"
    # First build: published is the update time, recorded in the state database.
    assert [e.findtext(f"{ATOM}published") for e in entries] == [
        "2025-01-05T09:00:00+01:00",
        "2025-01-04T09:00:00+01:00",
    ]


def test_ids_are_unique_across_languages_and_documents(archived: tuple[Config, Path]) -> None:
    config, out = archived
    ids = []
    for path in out.rglob("*.atom.xml"):
        ids += [e.findtext(f"{ATOM}id") for e in etree.parse(str(path)).iter(f"{ATOM}entry")]
    # each article once in its language's documents, and in each audience's feed (which shows
    # the newest two here): an id of its own there
    assert len(ids) == len(set(ids)) == (5 + 2 * len(AUDIENCES)) * len(config.site.languages)
    feed_ids = {feeds.feed_id(config, lang) for lang in config.site.languages}
    assert len(feed_ids) == 3


def test_archives_form_an_rfc5005_chain(archived: tuple[Config, Path]) -> None:
    config, out = archived
    url = f"{config.site.base_url}/feeds/"

    def links(path: Path) -> dict[str, str]:
        root = etree.parse(str(path)).getroot()
        return {link.get("rel"): link.get("href") for link in root.findall(f"{ATOM}link")}

    def updated(path: Path) -> list[str]:
        root = etree.parse(str(path)).getroot()
        return [e.findtext(f"{ATOM}updated")[:10] for e in root.findall(f"{ATOM}entry")]

    assert links(out / "en.atom.xml")["prev-archive"] == url + "archive/en-2.atom.xml"
    newest = links(out / "archive/en-2.atom.xml")
    assert newest["current"] == url + "en.atom.xml"
    assert newest["prev-archive"] == url + "archive/en-1.atom.xml"
    assert "next-archive" not in newest
    oldest = links(out / "archive/en-1.atom.xml")
    assert oldest["next-archive"] == url + "archive/en-2.atom.xml"
    assert "prev-archive" not in oldest
    history = "{http://purl.org/syndication/history/1.0}archive"
    assert etree.parse(str(out / "archive/en-1.atom.xml")).getroot().find(history) is not None
    assert etree.parse(str(out / "en.atom.xml")).getroot().find(history) is None
    # Oldest page first, filled from the old end; entries newest first within a document.
    assert updated(out / "archive/en-1.atom.xml") == ["2025-01-02", "2025-01-01"]
    assert updated(out / "archive/en-2.atom.xml") == ["2025-01-03"]


def test_archive_documents_have_their_own_size(tmp_path: Path) -> None:
    """Six articles, one in the feed, archive pages of three: pages of 3 and 2 entries."""
    write_set(tmp_path / "articles", 6)
    config = make_config(tmp_path, max_entries=1, archive_entries=3)
    build_feeds(config, tmp_path / "articles")
    out = tmp_path / "feeds"

    def count(name: str) -> int:
        return len(etree.parse(str(out / name)).getroot().findall(f"{ATOM}entry"))

    assert sorted(p.name for p in (out / "archive").glob("en-*")) == [
        "en-1.atom.xml",
        "en-2.atom.xml",
    ]
    assert [count("en.atom.xml"), count("archive/en-1.atom.xml")] == [1, 3]
    assert count("archive/en-2.atom.xml") == 2


def test_a_new_article_leaves_full_archive_pages_alone(tmp_path: Path) -> None:
    write_set(tmp_path / "articles", 6)
    config = make_config(tmp_path, max_entries=2, archive_entries=2)
    build_feeds(config, tmp_path / "articles")
    before = outputs(tmp_path / "feeds")
    write_set(tmp_path / "articles", 7)
    report = build_feeds(config, tmp_path / "articles")
    assert "archive/en-1.atom.xml" in report.unchanged
    assert "archive/en-2.atom.xml" in report.written
    assert outputs(tmp_path / "feeds")["archive/en-1.atom.xml"] == before["archive/en-1.atom.xml"]


def test_an_audience_feed_is_each_articles_takeaways_for_that_audience(
    archived: tuple[Config, Path], atom_schema: etree.RelaxNG
) -> None:
    config, out = archived
    found = reader.read_articles(config.root / "articles", config.profiles)
    tag = "tag:127.0.0.1,2025-01-01"
    words = {"en": ("Key takeaways for", "Read the full article")}
    words["nl"] = ("Belangrijkste conclusies voor", "Lees het volledige artikel")
    words["de"] = ("Wichtige Erkenntnisse für", "Den vollständigen Artikel lesen")
    for lang in config.site.languages:
        language_feed = feedparser.parse((out / f"{lang}.atom.xml").read_bytes())
        dates = {e.link: (e.updated, e.published) for e in language_feed.entries}
        for audience in AUDIENCES:
            atom = out / lang / f"{audience}.atom.xml"
            assert atom_schema.validate(etree.parse(str(atom))), (atom, atom_schema.error_log)
            parsed = feedparser.parse(atom.read_bytes())
            assert not parsed.bozo, (atom, parsed.get("bozo_exception"))
            assert parsed.feed.id == f"{tag}:feeds/{lang}/{audience}"
            assert parsed.feed.title.startswith(f"Syndicate: {words[lang][0]} ")
            assert parsed.feed.link == f"{config.site.base_url}/{lang}/"
            # the newest two (feeds.max_entries), as in the language's feed, same dates
            slugs = [e.id.rsplit("/", 1)[1] for e in parsed.entries]
            assert slugs == ["article-004", "article-003"]
            for entry, slug in zip(parsed.entries, slugs, strict=True):
                assert entry.id == f"{tag}:{lang}/{audience}/{slug}"
                assert entry.link == article_url(config, lang, slug)
                assert (entry.updated, entry.published) == dates[entry.link]
                article = found.get(lang, slug)
                assert article is not None
                html = entry.content[0].value
                assert html.startswith(f"<h2>{words[lang][0]} ")
                assert f'<a href="{entry.link}">{words[lang][1]}</a>' in html
                for t in article.takeaways:
                    for bullet in t.bullets:
                        shown = html_escape(bullet, quote=False) in html
                        assert shown == (t.audience == audience), (lang, audience, bullet)
                assert [tag_.term for tag_ in entry.tags] == [audience]
            rss = feedparser.parse((out / lang / f"{audience}.rss.xml").read_bytes())
            assert not rss.bozo and [e.id for e in rss.entries] == [e.id for e in parsed.entries]
            assert rss.feed.title == parsed.feed.title
            doc = json.loads((out / lang / f"{audience}.json").read_text("utf-8"))
            assert [i["id"] for i in doc["items"]] == [e.id for e in parsed.entries]
            assert doc["feed_url"] == f"{config.site.base_url}/feeds/{lang}/{audience}.json"


def test_json_feed_matches_the_atom_feed(archived: tuple[Config, Path]) -> None:
    config, out = archived
    doc = json.loads((out / "de.json").read_text("utf-8"))
    assert doc["version"] == "https://jsonfeed.org/version/1.1"
    assert doc["language"] == "de"
    assert doc["feed_url"] == f"{config.site.base_url}/feeds/de.json"
    assert doc["hubs"] == [{"type": "WebSub", "url": "https://hub.example.org"}]
    atom = feedparser.parse((out / "de.atom.xml").read_bytes())
    assert [i["id"] for i in doc["items"]] == [e.id for e in atom.entries]
    for item in doc["items"]:
        assert datetime.fromisoformat(item["date_modified"]).utcoffset() is not None
        assert item["content_html"].startswith("<p>")


def test_opml_lists_every_feed(archived: tuple[Config, Path]) -> None:
    config, out = archived
    root = etree.parse(str(out / "index.opml")).getroot()
    urls = {o.get("xmlUrl") for o in root.iter("outline")}
    assert urls == {
        f"{config.site.base_url}/feeds/{lang}{audience}.{kind}"
        for lang in config.site.languages
        for audience in ("", *(f"/{a}" for a in AUDIENCES))
        for kind in ("atom.xml", "rss.xml", "json")
    }
    for url in urls:  # each names a document the build wrote
        assert (out / url.removeprefix(f"{config.site.base_url}/feeds/")).is_file()
    # each feed's page is its own language's, not the site's front page
    assert {(o.get("language"), o.get("htmlUrl")) for o in root.iter("outline")} == {
        (lang, f"{config.site.base_url}/{lang}/") for lang in config.site.languages
    }


def test_feed_titles_and_subtitles_come_from_the_site(tmp_path: Path, articles_dir: Path) -> None:
    data = {
        "site": {
            "title": "Gardening Weekly",
            "description": {"en": "Soil, seeds and sheds", "nl": "Aarde, zaden en schuren"},
        },
        "languages": {"de": {"title": "Gartenwoche", "description": "Erde, Saat und Schuppen"}},
    }
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    build_feeds(config, articles_dir)
    out = tmp_path / "feeds"
    expected = {
        "en": ("Gardening Weekly", "Soil, seeds and sheds"),
        "nl": ("Gardening Weekly", "Aarde, zaden en schuren"),
        "de": ("Gartenwoche", "Erde, Saat und Schuppen"),
    }
    for lang, (title, subtitle) in expected.items():
        for name in (f"{lang}.atom.xml", f"{lang}.rss.xml"):
            feed = feedparser.parse((out / name).read_bytes()).feed
            assert (feed.title, feed.subtitle) == (title, subtitle), name
        doc = json.loads((out / f"{lang}.json").read_text("utf-8"))
        assert (doc["title"], doc["description"]) == (title, subtitle)
    outlines = etree.parse(str(out / "index.opml")).getroot().iter("outline")
    assert {o.get("text").split(" (")[0].split(":")[0] for o in outlines} == {
        "Gardening Weekly",
        "Gartenwoche",
    }
    # an audience feed is titled by its language's site title
    de_cost = feedparser.parse((out / "de/cost.atom.xml").read_bytes()).feed
    assert de_cost.title.startswith("Gartenwoche: ")
    assert de_cost.subtitle == "Erde, Saat und Schuppen"
    # One description for every language; without any, the title stands in.
    shared = parse_config({"site": {"description": "One"}}, root=tmp_path, source="(t)", env={})
    assert [shared.description(lang) for lang in ("en", "de")] == ["One", "One"]
    assert make_config(tmp_path).description("nl") == "Syndicate"


def test_a_description_for_an_unpublished_language_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SyndicateError, match=r"site: description names fr, not one of site"):
        parse_config({"site": {"description": {"fr": "x"}}}, root=tmp_path, source="t", env={})


def test_footnote_links_in_feeds_are_absolute(tmp_path: Path, articles_dir: Path) -> None:
    """RSS has no xml:base, and an Atom or JSON entry has none either: a fragment alone would
    be read against the feed's own URL."""
    config = make_config(tmp_path)
    build_feeds(config, articles_dir)
    url = article_url(config, "en", SEED_SLUG)
    rss = etree.parse(str(tmp_path / "feeds" / "en.rss.xml")).getroot()
    content = rss.findtext("channel/item/{http://purl.org/rss/1.0/modules/content/}encoded")
    atom = feedparser.parse((tmp_path / "feeds" / "en.atom.xml").read_bytes())
    item = json.loads((tmp_path / "feeds" / "en.json").read_text("utf-8"))["items"][0]
    for text in (content, atom.entries[0].content[0].value, item["content_html"]):
        hrefs = lxml_hrefs(text)
        assert f"{url}#en-{SEED_SLUG}-ref-1" in hrefs
        assert all(href.startswith(("http://", "https://")) for href in hrefs), hrefs


def lxml_hrefs(text: str) -> list[str]:
    return etree.fromstring(f"<div>{text}</div>", etree.HTMLParser()).xpath("//a/@href")


def test_hostile_text_is_escaped_never_interpreted(tmp_path: Path) -> None:
    hostile = "Tom & Jerry <script>alert(1)</script> ]]> {{ config }} {% if %}\x01\x0b\ud800\uffff"
    article = Article(
        source="x.txt",
        lang="en",
        slug="hostile",
        title=hostile,
        updated=date(2025, 12, 11),
        summary=hostile,
        blocks=(Block("heading", (hostile,), 4), Block("paragraph", (hostile, 1, "]]>"), 5)),
        takeaways=(Takeaways("cost", hostile, (hostile, "b")),),
        references=(Reference(1, hostile, "https://example.org/?a=1&b=<2>"),),
        seo=Seo(),
        content_hash="0",
    )
    config = make_config(tmp_path)
    when = feeds.updated_at(config, article.updated)
    docs = dict(feeds.render_feeds(config, ArticleSet((article,)), {article.key: when}))
    clean = "Tom & Jerry <script>alert(1)</script> ]]> {{ config }} {% if %}"
    for name in ("en.atom.xml", "en.rss.xml"):
        etree.fromstring(docs[name])  # well-formed
        entry = feedparser.parse(docs[name]).entries[0]
        assert entry.title == clean
    atom = feedparser.parse(docs["en.atom.xml"], sanitize_html=False).entries[0]
    assert "&lt;script&gt;" in atom.content[0].value
    assert "<script>" not in atom.content[0].value
    item = json.loads(docs["en.json"])["items"][0]
    assert item["title"] == clean
    assert "&lt;script&gt;" in item["content_html"]


def test_revision_moves_updated_but_never_id_or_published(tmp_path: Path) -> None:
    write_set(tmp_path / "articles", 2)
    config = make_config(tmp_path)
    build_feeds(config, tmp_path / "articles")
    out = tmp_path / "feeds"

    def entry(name: str) -> dict[str, str]:
        root = etree.parse(str(out / name)).getroot()
        first = root.find(f"{ATOM}entry")
        return {
            "feed": root.findtext(f"{ATOM}updated"),
            **{k: first.findtext(ATOM + k) for k in ("id", "published", "updated", "title")},
        }

    before = entry("en.atom.xml")
    path = tmp_path / "articles" / "en-001.txt"
    text = path.read_text("utf-8")
    path.write_text(text.replace("January 2, 2025", "February 20, 2025"), "utf-8")
    build_feeds(config, tmp_path / "articles")
    after = entry("en.atom.xml")
    assert after["updated"] == after["feed"] == "2025-02-20T09:00:00+01:00"
    assert (after["id"], after["published"]) == (before["id"], before["published"])
    assert before["published"] == "2025-01-02T09:00:00+01:00"

    # Whitespace alone: the files are rebuilt from scratch and nothing changes.
    kept = mtimes(out)
    respaced = path.read_text("utf-8").replace("\n\n", "\n  \n\n").replace(". ", ".  ")
    path.write_text(respaced + "\n\n\n", "utf-8")
    report = build_feeds(config, tmp_path / "articles")
    assert not report.skipped
    assert report.written == ()
    assert mtimes(out) == {**kept, **{k: mtimes(out)[k] for k in BOOKKEEPING}}


def test_rebuild_is_byte_identical_and_keeps_mtimes(tmp_path: Path, articles_dir: Path) -> None:
    config = make_config(tmp_path)
    first = build_feeds(config, articles_dir)
    assert len(first.written) == 10 + 3 * 3 * len(AUDIENCES)
    out = tmp_path / "feeds"
    before, kept = outputs(out), mtimes(out)
    assert build_feeds(config, articles_dir).skipped  # the manifest says nothing changed
    for name in BOOKKEEPING:
        (out / name).unlink()  # a full rebuild, every file read again
    again = build_feeds(config, articles_dir)
    assert not again.skipped and again.written == ()
    assert len(again.unchanged) == len(first.written)
    assert outputs(out) == before
    assert {k: v for k, v in mtimes(out).items() if k not in BOOKKEEPING} == {
        k: v for k, v in kept.items() if k not in BOOKKEEPING
    }


def test_a_revised_text_remakes_only_the_documents_that_show_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revision that moves no article reads that one file and makes only the documents
    showing it again, byte for byte as a build from scratch makes them; the others keep
    their mtime. A revision that moves one (a new date) is built as a whole. The index table
    is written to the manifest in pieces (of 5 rows here) and read back whole."""
    from syndicate import build

    monkeypatch.setattr(build, "TABLE_PIECE", 5)
    folder = tmp_path / "articles"
    write_set(folder, 7)  # per language: the feed shows 006, 005; archives [001, 000],
    config = make_config(tmp_path, max_entries=2, archive_entries=2)  # [003, 002], [004]
    build_feeds(config, folder)
    out = tmp_path / "feeds"
    newest = {f"en.{kind}" for kind in ("atom.xml", "rss.xml", "json")}
    newest |= {f"en/{a}.{kind}" for a in AUDIENCES for kind in ("atom.xml", "rss.xml", "json")}
    made: list[str] = []  # the archive documents rendered
    archive_document = feeds.archive_document

    def counted(config: Config, lang: str, entries: Any, page: feeds.Page) -> bytes:
        made.append(page.self_url.rpartition("/")[2])
        return archive_document(config, lang, entries, page)

    monkeypatch.setattr(feeds, "archive_document", counted)
    for number, (name, written, archives) in enumerate(
        [("en-006.txt", newest, []), ("nl-001.txt", {"archive/nl-1.atom.xml"}, ["nl-1.atom.xml"])]
    ):
        made.clear()
        path = folder / name
        paras = path.read_text("utf-8").split("\n\n")
        paras[2] += " Revised."  # the summary
        path.write_text("\n\n".join(paras), "utf-8")
        kept = mtimes(out)
        report = build_feeds(config, folder)
        assert report.read == 1 and set(report.written) == written and made == archives
        assert {k: v for k, v in mtimes(out).items() if k not in written | set(BOOKKEEPING)} == {
            k: v for k, v in kept.items() if k not in written | set(BOOKKEEPING)
        }
        fresh = tmp_path / f"fresh-{number}"
        assert build_feeds(config, folder, fresh).read == len(list(folder.iterdir()))
        assert outputs(out) == outputs(fresh)
        # the revision appended the file's new line: the last line of a file stands for it
        assert index_lines(out / INDEX) == index_lines(fresh / INDEX)
    (out / "archive/en-1.atom.xml").unlink()  # with a revision: both are made again
    path = folder / "en-005.txt"
    path.write_text(path.read_text("utf-8").replace("Trainium3", "Trainium 3", 1), "utf-8")
    report = build_feeds(config, folder)
    assert {"archive/en-1.atom.xml", "en.atom.xml"} <= set(report.written)
    assert build_feeds(config, folder).skipped
    assert outputs(out) == outputs(build_feeds(config, folder, tmp_path / "fresh-gone").out)
    moved = folder / "de-002.txt"
    moved.write_text(variant(seeds()["de"], "de", slug="article-002", day=date(2026, 1, 1)))
    report = build_feeds(config, folder)
    assert report.read == 1 and {"de.atom.xml", "archive/de-2.atom.xml"} <= set(report.written)
    assert outputs(out) == outputs(build_feeds(config, folder, tmp_path / "fresh-moved").out)


def test_a_manifest_whose_revision_line_is_damaged_builds_as_a_whole(tmp_path: Path) -> None:
    """The manifest's first line tells whether anything changed; the others (the plan and the
    index table) are decoded only for a revision. Missing (an older manifest) or damaged, the
    changed set is built as a whole, as a build from scratch builds it."""
    folder = tmp_path / "articles"
    write_set(folder, 3)
    config = make_config(tmp_path, max_entries=2, archive_entries=2)
    out = build_feeds(config, folder).out
    path = folder / "en-002.txt"
    plan = (out / MANIFEST).read_bytes().split(b"\n")[1]
    damages = [b"", b'\n{"plan": [', b"\n[]", b"\n" + plan, b"\n" + plan + b"\n[]"]
    for number, damage in enumerate(damages):
        head = (out / MANIFEST).read_bytes().partition(b"\n")[0]
        (out / MANIFEST).write_bytes(head + damage)
        assert build_feeds(config, folder).skipped  # the first line alone says nothing changed
        path.write_text(path.read_text("utf-8").replace("Trainium3", f"Trainium {number}", 1))
        assert not build_feeds(config, folder).skipped
        fresh = build_feeds(config, folder, tmp_path / f"fresh-{number}").out
        assert outputs(out) == outputs(fresh)
        assert build_feeds(config, folder).skipped


def test_a_rebuild_reads_only_the_files_that_changed(
    tmp_path: Path, articles_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index of the last build stands in for unchanged files; the feeds come out as a
    build from scratch makes them, problems included."""
    config = make_config(tmp_path)
    (articles_dir / "broken.txt").write_bytes(b"\xff not text")
    build_feeds(config, articles_dir)
    read: list[str] = []
    parse = reader.parse_article

    def counted(data: bytes, source: str, *args, **kwargs):
        read.append(source)
        return parse(data, source, *args, **kwargs)

    monkeypatch.setattr(reader.folder, "parse_article", counted)  # what reads each file
    changed = next(p for p in sorted(articles_dir.iterdir()) if p.name != "broken.txt")
    changed.write_text(changed.read_text("utf-8").replace("2025", "2026", 1), "utf-8")
    report = build_feeds(config, articles_dir)
    assert read == [str(changed)]
    assert [p.file for p in report.problems] == [str(articles_dir / "broken.txt")]

    read.clear()
    build_feeds(config, articles_dir, tmp_path / "fresh-feeds")  # no index there: all read
    assert len(read) == len(list(articles_dir.iterdir()))
    assert outputs(tmp_path / "feeds") == outputs(tmp_path / "fresh-feeds")

    read.clear()
    index = tmp_path / "feeds" / INDEX
    lines = index.read_bytes().splitlines(keepends=True)
    # Damaged entries: one cut short, one whose path is not JSON. Their files are read again.
    lines[-1] = lines[-1][:-40] + b"garbage\n"
    lines[2] = b"[not json" + lines[2]
    index.write_bytes(b"".join(lines))
    changed.write_text(changed.read_text("utf-8") + "\n", "utf-8")
    build_feeds(config, articles_dir)
    files = reader.article_files(articles_dir)
    assert sorted(read) == sorted(str(p) for p in {changed, files[1], files[-1]})
    assert outputs(tmp_path / "feeds") == outputs(tmp_path / "fresh-feeds")

    read.clear()
    index.write_bytes(b"not the key\n" + index.read_bytes())  # not this build's: read all
    changed.write_text(changed.read_text("utf-8") + "\n\n", "utf-8")
    build_feeds(config, articles_dir)
    assert len(read) == len(list(articles_dir.iterdir()))

    # A reader that reads differently (an upgrade) trusts no reading of the one before,
    # though no file and no setting changed.
    read.clear()
    assert build_feeds(config, articles_dir).skipped
    monkeypatch.setattr(reader, "reader_revision", lambda: "another reader")
    report = build_feeds(config, articles_dir)
    assert not report.skipped and len(read) == len(list(articles_dir.iterdir()))

    read.clear()
    other = make_config(tmp_path, hub="https://hub.example.org/")  # the key changes
    build_feeds(other, articles_dir)
    assert len(read) == len(list(articles_dir.iterdir()))


def test_a_deleted_output_is_written_again(tmp_path: Path, articles_dir: Path) -> None:
    config = make_config(tmp_path)
    build_feeds(config, articles_dir)
    (tmp_path / "feeds" / "nl.rss.xml").unlink()
    report = build_feeds(config, articles_dir)
    assert report.written == ("nl.rss.xml",)


def test_readers_polling_during_builds_never_see_invalid_xml(tmp_path: Path) -> None:
    write_set(tmp_path / "articles", 3)
    config = make_config(tmp_path)
    build_feeds(config, tmp_path / "articles")
    out = tmp_path / "feeds"
    path = tmp_path / "articles" / "en-002.txt"
    text = path.read_text("utf-8")
    stop = threading.Event()
    seen: list[int] = []
    failures: list[str] = []

    def poll() -> None:
        while not stop.is_set():
            for name in ("en.atom.xml", "en.rss.xml"):
                data = (out / name).read_bytes()
                try:
                    etree.fromstring(data)
                except etree.XMLSyntaxError as exc:
                    failures.append(f"{name}: {exc}")
                seen.append(len(data))
            json.loads((out / "en.json").read_bytes())

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for n in range(12):
            # Alternate between two titles of different lengths: every build rewrites.
            title = "A short title" if n % 2 else "A much longer title " * 20
            paras = text.split("\n\n")
            path.write_text("\n\n".join([title, *paras[1:]]), "utf-8")
            assert "en.atom.xml" in build_feeds(config, tmp_path / "articles").written
    finally:
        stop.set()
        reader.join()
    assert not failures
    assert len(set(seen)) >= 2  # the reader saw both versions, not just one


def test_a_failing_build_leaves_the_previous_feeds(tmp_path: Path, articles_dir: Path) -> None:
    config = make_config(tmp_path)
    build_feeds(config, articles_dir)
    out = tmp_path / "feeds"
    before, kept = outputs(out), mtimes(out)
    # The state database cannot be opened (its path is a folder): nothing may be written.
    (tmp_path / "state" / "broken.db").mkdir()
    broken = parse_config(
        {"state": {"database": "sqlite:///state/broken.db"}, "site": {"title": "Changed"}},
        root=tmp_path,
        source="(test)",
        env={},
    )
    with pytest.raises(Exception, match="unable to open database file"):
        build_feeds(broken, articles_dir)
    with pytest.raises(SyndicateError, match="article folder not found"):
        build_feeds(config, tmp_path / "missing")
    assert outputs(out) == before
    assert mtimes(out) == kept
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_build_command_writes_the_feeds_and_says_where(tmp_path: Path, articles_dir: Path) -> None:
    out = tmp_path / "public"
    runner = CliRunner()
    config_file = tmp_path / "config.toml"
    config_file.write_text('[state]\ndatabase = "sqlite:///state/s.db"\n', "utf-8")
    args = ["--config", str(config_file), "--articles", str(articles_dir)]
    result = runner.invoke(main, ["build", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"feeds in {out}" in result.output
    assert f"; {len(list(articles_dir.iterdir()))} article file(s) read" in result.output
    assert (out / "en.atom.xml").is_file() and (out / "index.opml").is_file()
    result = runner.invoke(main, ["run", "--once", *args])
    assert result.exit_code == 0, result.output
    assert f"feeds in {tmp_path / 'feeds'}" in result.output
    assert (tmp_path / "feeds" / "de.json").is_file()


def test_an_article_dated_ahead_waits_for_its_time(tmp_path: Path) -> None:
    write_set(tmp_path / "articles", 3)  # dated 2025-01-01 .. 2025-01-03, 09:00 Amsterdam
    config = make_config(tmp_path)
    before = datetime.fromisoformat("2025-01-02T12:00:00+01:00")
    report = build_feeds(config, tmp_path / "articles", now=before)
    assert report.entries == {"de": 2, "en": 2, "nl": 2}
    assert report.next_due == datetime.fromisoformat("2025-01-03T09:00:00+01:00")
    atom = feedparser.parse((tmp_path / "feeds" / "en.atom.xml").read_bytes())
    assert atom.feed.updated == "2025-01-02T09:00:00+01:00"
    # Nothing changed on disk, but the held-back article fell due: the build must not skip.
    assert build_feeds(config, tmp_path / "articles", now=before).skipped
    after = datetime.fromisoformat("2025-01-03T09:00:00+01:00")
    report = build_feeds(config, tmp_path / "articles", now=after)
    assert not report.skipped and report.next_due is None
    assert report.entries == {"de": 3, "en": 3, "nl": 3}
    atom = feedparser.parse((tmp_path / "feeds" / "en.atom.xml").read_bytes())
    assert atom.entries[0].published == "2025-01-03T09:00:00+01:00"


@pytest.mark.parametrize("email", [None, "desk@example.org"])
@pytest.mark.parametrize("content", [None, "", "<p>a &amp; b</p>\r\n<p>]]> {{ x }} 日本</p>"])
def test_documents_are_the_bytes_feedgen_writes(
    tmp_path: Path, atom_schema: etree.RelaxNG, email: str | None, content: str | None
) -> None:
    """Atom and RSS documents skip feedgen's per-entry work; their bytes stay exactly
    feedgen's, for archives (no content) and subscription documents, empty values too."""
    config = parse_config(
        {"site": {"author_email": email}, "feeds": {"hub": "https://hub.example.org/"}},
        root=tmp_path,
        source="(test)",
        env={},
    )
    hostile = "a < b && c ]]> {{ x }} \"quoted\" 'single' é ü 日本"
    when = datetime.fromisoformat("2025-03-30T09:00:00+02:00")
    # Published as dated; earlier; and at the same wall time in the hour that the end of
    # summer time repeats, but the first time round (another offset).
    zone = ZoneInfo("Europe/Amsterdam")
    repeated = datetime(2025, 10, 26, 2, 30, tzinfo=zone)
    published = [when, when - timedelta(days=3), repeated]
    updated = [when, when, repeated.replace(fold=1)]
    entries = [
        feeds.Entry(
            id=f"tag:example.org,2025:en/{n}",
            title=f"{hostile} {n}",
            url=f"https://example.org/en/{n}/?a=1&b=<2>",
            published=published[n],
            updated=updated[n],
            summary=hostile if n else "",
            content=content,
            categories=(("cost", hostile), ("strategy", "")) if n else (),
            translations=(("de", f"https://example.org/de/{n}/"), ("nl", f"/nl/{n}/?a&b"))[:n],
        )
        for n in range(3)
    ]
    page = feeds.Page(
        feeds.feed_url(config, feeds.feed_archive_name("en", 2)),
        current=feeds.feed_url(config, "en.atom.xml"),
        prev_archive=feeds.feed_url(config, feeds.feed_archive_name("en", 1)),
    )
    for archive in (True, False):
        fast = feeds.atom_document(config, "en", entries, page, archive=archive)
        slow = feeds.feedgen_document(config, "en", entries, page, archive=archive)
        assert fast == slow
        assert atom_schema.validate(etree.fromstring(fast)), atom_schema.error_log
    assert feeds.archive_document(config, "en", entries, page) == feeds.feedgen_document(
        config, "en", entries, page, archive=True
    )
    rss = feeds.rss_document(config, "en", entries)
    assert rss == feeds.feedgen_document(config, "en", entries, page, kind="rss")
    assert not feedparser.parse(rss).bozo


def test_the_index_keeps_a_reading_whole(config: Config, articles_dir: Path) -> None:
    """What the next build takes from the index is the reading this build made."""
    (articles_dir / "broken.txt").write_text("Title only\n", "utf-8")
    paths = list(reader.scan(articles_dir))
    readings = list(reader.read_index(paths, config.profiles, known={}))
    assert any(article is None for _, (article, _), _ in readings)
    for source, reading, encoded in readings:
        assert "\n" not in encoded and "\t" not in encoded  # one line of the index file
        assert reader.decode_reading(source, encoded) == reading
    # Taken from the index, or handed back encoded by a worker process, a reading comes out
    # as it went in.
    known = {source: encoded for source, _, encoded in readings}
    assert list(reader.read_index(paths, config.profiles, known=known)) == readings
    threads = threading.active_count()
    assert list(reader.read_index(paths, config.profiles, known={}, processes=2)) == readings
    assert threading.active_count() == threads  # the worker processes are gone


def test_an_index_reading_without_its_text_gets_it_back(config: Config, articles_dir: Path) -> None:
    """A full build holds each article without its title, summary and description, and
    reads them back from the index line when a document shows it: as if never left out.
    Read by workers started before the paths are known, which end with the last reading."""
    paths = list(reader.scan(articles_dir))
    whole = list(reader.read_index(paths, config.profiles, known={}))
    threads = threading.active_count()
    readers = reader.index_readers(config.profiles)
    read = reader.read_index(
        paths, config.profiles, known={}, processes=2, text=False, readers=readers
    )
    bare = list(read)
    assert threading.active_count() == threads  # the worker processes are gone
    assert [line for *_, line in bare] == [line for *_, line in whole]
    for (_, (article, problems), line), (_, (full, same), _) in zip(bare, whole, strict=True):
        assert problems == same and full is not None and article is not None
        assert (article.title, article.summary, article.seo) == ("", "", Seo())
        assert reader.with_text(article, line) == full


def test_a_large_first_build_reads_as_a_small_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first build of a set large enough for reader workers starts them during the walk,
    and makes the documents one process would make, the archives' text read back from the
    index; no worker is left once it is done."""
    import multiprocessing

    from syndicate import build
    from syndicate.reader import folder

    write_set(tmp_path / "articles", 6)
    config = make_config(tmp_path, max_entries=2, archive_entries=2)
    build_feeds(config, tmp_path / "articles", tmp_path / "alone")
    for module in (build, folder):
        monkeypatch.setattr(module, "PARALLEL_FROM", 4)
    started = []

    def readers(profiles: Any) -> Any:
        started.append(profiles)
        return reader.index_readers(profiles)

    monkeypatch.setattr(build, "index_readers", readers)
    build_feeds(config, tmp_path / "articles", tmp_path / "shared")
    assert len(started) == 1
    assert outputs(tmp_path / "shared") == outputs(tmp_path / "alone")
    assert any("archive" in name for name in outputs(tmp_path / "shared"))
    assert not multiprocessing.active_children()


def test_archive_text_is_read_back_for_files_walked_out_of_string_order(tmp_path: Path) -> None:
    """The walk orders paths part by part ("set/…" before "set-…"), where plain string order
    puts "-" before "/": each archive entry still gets its own file's text back from the
    index."""
    write_set(tmp_path / "flat", 6)
    nested = tmp_path / "nested"
    for n, path in enumerate(sorted((tmp_path / "flat").iterdir())):
        moved = nested / "set" / path.name if n % 2 else nested / f"set-{path.name}"
        moved.parent.mkdir(parents=True, exist_ok=True)
        moved.write_bytes(path.read_bytes())
    walked = list(reader.scan(nested))
    assert walked != sorted(walked)  # the case this test is for
    config = make_config(tmp_path, max_entries=2, archive_entries=2)
    build_feeds(config, tmp_path / "flat", tmp_path / "from-flat")
    build_feeds(config, nested, tmp_path / "from-nested")
    made = outputs(tmp_path / "from-nested")
    assert any("archive" in name for name in made)
    assert made == outputs(tmp_path / "from-flat")


def test_a_build_failing_while_rendering_leaves_nothing_staged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Documents are staged language by language as they are rendered: a failure in the last
    language removes what the others staged and leaves the previous feeds as they were."""
    write_set(tmp_path / "articles", 4)
    config = make_config(tmp_path, max_entries=2)  # archive documents too
    build_feeds(config, tmp_path / "articles")
    out = tmp_path / "feeds"
    before, kept = outputs(out), mtimes(out)
    last = config.site.languages[-1]
    render = feeds.render_feeds
    staged: list[Path] = []

    def fails_last(
        config: Config, articles: ArticleSet, *args: Any, **kwargs: Any
    ) -> Iterator[tuple[str, bytes]]:
        for name, data in render(config, articles, *args, **kwargs):
            if name.startswith((f"{last}.", f"archive/{last}-")):
                staged.extend(p for p in out.rglob("*.tmp") if INDEX not in p.name)
                raise RuntimeError(f"cannot render {last}")
            yield name, data

    monkeypatch.setattr(feeds, "render_feeds", fails_last)
    write_set(tmp_path / "articles", 5)  # a change: the build renders
    with pytest.raises(RuntimeError, match="cannot render"):
        build_feeds(config, tmp_path / "articles")
    assert staged  # the other languages' documents were staged when it failed
    assert not list(out.rglob("*.tmp"))
    assert outputs(out) == before and mtimes(out) == kept


def test_a_build_sweeps_what_a_killed_build_left(tmp_path: Path, articles_dir: Path) -> None:
    """A build killed part-way leaves its staged files behind; the next build removes those
    whose process is gone, and leaves a running writer's alone."""
    config = make_config(tmp_path)
    build_feeds(config, articles_dir)
    out = tmp_path / "feeds"
    gone = subprocess.Popen(["true"])
    gone.wait()
    left = [
        out / f".en.atom.xml.{gone.pid}.x1y2.tmp",
        out / f"archive/.en-1.atom.xml.{gone.pid}.z.tmp",
    ]
    alive = out / f".nl.rss.xml.{os.getpid()}.abc.tmp"
    for path in (*left, alive):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"<half")
    changed = next(p for p in sorted(articles_dir.iterdir()))
    changed.write_text(changed.read_text("utf-8") + "\n", "utf-8")
    build_feeds(config, articles_dir)
    assert not any(path.exists() for path in left)
    assert alive.exists()


def test_a_build_records_publication_times_in_the_store_it_is_given(
    tmp_path: Path, articles_dir: Path, database_url: str
) -> None:
    from syndicate.state import open_store

    config = make_config(tmp_path)
    later = datetime(2100, 1, 1, tzinfo=ZoneInfo("UTC"))
    built = reader.read_articles(articles_dir, config.profiles)
    store = open_store(database_url)
    try:
        build_feeds(config, articles_dir, store=store)
        # a time the build recorded stays: asked again with a later one, the first comes back
        recorded = store.published.first_published([(a.lang, a.slug, later) for a in built])
    finally:
        store.close()
    assert len(recorded) == len(built) > 0
    assert all(when < later for when in recorded.values())
    assert not (tmp_path / "state").exists()  # the configured database was never opened
