"""Feeds as real readers open them: every entry of every document (the language feeds, their
archives and the audience feeds) leads to the page in that document's language, in feedparser
and in newsboat (Debian's package, run headless). Japanese and Arabic beside the built-in
languages, each published with the block ``syndicate check`` reads from its articles."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import feedparser
import pytest
from lxml import etree

from syndicate.build import INDEX, MANIFEST, build_feeds
from syndicate.config import Config, parse_config
from syndicate.reader.parse import profile_of
from syndicate.routes import article_url, home_url
from tests.conftest import TRANSLATED, newsboat_reading, write_articles

LANGS = ("en", "nl", "de", "ja", "ar")
ATOM = "{http://www.w3.org/2005/Atom}"
FORMATS = ("atom.xml", "rss.xml", "json")
AUDIENCES = 5  # every written article has takeaways for the five built-in audiences


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, Path]:
    """Five articles per language, two per document: each language has a subscription
    document per format and two Atom archive pages."""
    root = tmp_path_factory.mktemp("readers")
    write_articles(root / "articles", 5, newest=date(2025, 12, 1), langs=LANGS)
    builtin = parse_config({}, root=root, source="(test)", env={}).profiles
    blocks = {}
    for lang in LANGS:
        if lang not in builtin:
            found = profile_of((TRANSLATED / f"{lang}-trainium3.txt").read_bytes(), builtin)
            assert found is not None and found[0] == lang
            blocks[lang] = found[1].model_dump(exclude_defaults=True)
    settings = {
        "site": {"languages": list(LANGS)},
        "languages": blocks,
        "feeds": {"max_entries": 2, "archive_entries": 2},
    }
    config = parse_config(settings, root=root, source="(test)", env={})
    report = build_feeds(config, root / "articles")
    assert report.entries == dict.fromkeys(LANGS, 5) and not report.problems
    return config, root / "feeds"


def documents(out: Path, kind: str) -> dict[str, Path]:
    """Every document of one format, archives included, by its name in the feeds folder."""
    found = {
        str(p.relative_to(out)): p
        for p in sorted(out.rglob(f"*.{kind}"))
        if p.name not in (INDEX, MANIFEST)  # the build's own files
    }
    # the subscription document (and 2 archive pages), and one per audience
    per_lang = (3 if kind == "atom.xml" else 1) + AUDIENCES
    assert len(found) == len(LANGS) * per_lang, sorted(found)
    return found


def language_of(name: str) -> str:
    """``de.atom.xml``, ``de/cost.atom.xml`` and ``archive/de-2.atom.xml`` are German."""
    if name.startswith("archive/"):
        return name.removeprefix("archive/").partition("-")[0]
    return name.partition("/")[0].partition(".")[0]


def expected_links(config: Config, name: str, ids: list[str]) -> dict[str, str]:
    """Each entry id's own page: the article's page in the document's language."""
    lang = language_of(name)
    expected = {}
    for id_ in ids:
        entry_lang, _, path = id_.rpartition(":")[2].partition("/")  # <slug>, <audience>/<slug>
        assert entry_lang == lang, (name, id_)
        expected[id_] = article_url(config, lang, path.rpartition("/")[2])
    return expected


def entry_ids(path: Path) -> list[str]:
    """The ids the document holds, read without either reader."""
    if path.name.endswith(".json"):
        return [item["id"] for item in json.loads(path.read_bytes())["items"]]
    root = etree.parse(str(path)).getroot()
    if root.tag == f"{ATOM}feed":
        return [e.findtext(f"{ATOM}id") for e in root.iter(f"{ATOM}entry")]
    return [item.findtext("guid") for item in root.iter("item")]


@pytest.mark.parametrize("kind", FORMATS)
def test_feedparser_opens_every_entry_in_its_own_language(
    built: tuple[Config, Path], kind: str
) -> None:
    config, out = built
    for name, path in documents(out, kind).items():
        parsed = feedparser.parse(path.read_bytes())
        if kind == "json" and not parsed.version:
            # feedparser 6.0 reads no JSON Feed; a JSON Feed reader opens the item's "url".
            items = json.loads(path.read_bytes())["items"]
            links = {item["id"]: item["url"] for item in items}
        else:
            assert not parsed.bozo, (name, parsed.get("bozo_exception"))
            assert parsed.feed.link == home_url(config, language_of(name)), name
            links = {entry.id: entry.link for entry in parsed.entries}
        assert links == expected_links(config, name, entry_ids(path)), name


@pytest.mark.parametrize("kind", FORMATS)
def test_newsboat_opens_every_entry_in_its_own_language(
    built: tuple[Config, Path], kind: str, newsboat: str, tmp_path: Path
) -> None:
    """One reload per format: newsboat keeps one item per id across its feeds, and a
    language's Atom, RSS and JSON Feed documents share their entries' ids."""
    config, out = built
    docs = documents(out, kind)
    feeds, items = newsboat_reading(newsboat, list(docs.values()), tmp_path / "newsboat")
    if kind == "json" and not feeds:
        return  # newsboat (2.21) reads no JSON Feed: not a document it could open wrongly
    for name, path in docs.items():
        assert feeds[str(path)] == home_url(config, language_of(name)), name
        assert items.get(str(path)) == expected_links(config, name, entry_ids(path)), name


def test_lists_links_and_emphasis_in_the_body_reach_feedparser(tmp_path: Path) -> None:
    """An article whose body holds a bulleted list and a numbered one, links (Markdown's and
    bare addresses) and Markdown emphasis: in the Atom and RSS entries as feedparser gives
    them to a reader, and in the JSON Feed item, each list is a list of its items (the
    footnote mark in an item a link to its reference), each link a link, each emphasis
    marked, the stars and underscores of a sum and a name stay text, a quotation is one, a
    table a table, and a subtitle under the title the content's first, emphasised paragraph."""
    folder = write_articles(tmp_path / "articles", 1, newest=date(2025, 12, 1))
    path = next(folder.iterdir())
    first, rest = path.read_text("utf-8").split("\n\nThe performance case\n", 1)
    lists = "Three forces:\n- Power crossed 1 kW\n- Contracts price heat¹\n\n1. Rear doors\n2. Cold"
    prose = (
        "See [the survey](https://example.org/s_(2025)) and https://example.org/a?b=1&c=2. "
        "**Bottom line:** plan for *liquid* cooling, not 5 * 3 racks of snake_case_names."
        "\n\n> We fit the same compute\n> in a third of the floor.\n\n> Said one lead."
        "\n\n| Chip | FP8 |\n|---|---:|\n| Trainium3 | 2.52¹ |\n| A \\| B | 1 |"
    )
    first = first.replace("\n\n", "\n\nThe bill that falls first\n\n", 1)
    path.write_text(f"{first}\n\n{lists}\n\n{prose}\n\nThe performance case\n{rest}", "utf-8")
    config = parse_config({}, root=tmp_path, source="(test)", env={})
    assert not build_feeds(config, folder).problems
    out = tmp_path / "feeds"
    atom = feedparser.parse((out / "en.atom.xml").read_bytes()).entries[0].content[0].value
    rss = feedparser.parse((out / "en.rss.xml").read_bytes()).entries[0].content[0].value
    item = json.loads((out / "en.json").read_bytes())["items"][0]["content_html"]
    for html in (atom, rss, item):
        page = etree.HTML(html)
        assert page.xpath("//body/*[1][self::p]/em/text()") == ["The bill that falls first"]
        assert page.xpath("//p[.='Three forces:']/following-sibling::*[1]/li/text()") == [
            "Power crossed 1 kW",
            "Contracts price heat",
        ]
        assert page.xpath("//ul/li[2]/sup/a/@href")[0].endswith("-ref-1")
        assert page.xpath("(//ol)[1]/li/text()") == ["Rear doors", "Cold"]
        said = page.xpath("//p[starts-with(., 'See ')]")[0]
        assert [(a.text, a.get("href")) for a in said.iter("a")] == [
            ("the survey", "https://example.org/s_(2025)"),
            ("https://example.org/a?b=1&c=2", "https://example.org/a?b=1&c=2"),
        ]
        assert [(e.tag, e.text) for e in said.iter("strong", "em")] == [
            ("strong", "Bottom line:"),
            ("em", "liquid"),
        ]
        assert said.xpath("string()").endswith("not 5 * 3 racks of snake_case_names.")
        assert page.xpath("//blockquote/p/text()") == [
            "We fit the same compute in a third of the floor.",
            "Said one lead.",
        ]
        assert page.xpath("//table/thead/tr/th/text()") == ["Chip", "FP8"]
        assert [row.xpath("td/text()") for row in page.xpath("//table/tbody/tr")] == [
            ["Trainium3", "2.52"],
            ["A | B", "1"],
        ]
        assert page.xpath("//table//td/sup/a/@href")[0].endswith("-ref-1")
