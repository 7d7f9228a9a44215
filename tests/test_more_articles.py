"""Articles other than the sample, written for the tests by authors who knew the format only
from the sample (``tests/data/more``: twenty-four articles, 156 files in 68 languages; its
README says what each brings). Each language version must read as its English original does,
without a warning: through the built-in profile where its language has one, else through the
profile its structure shows (a writer's slip in ``SLIPS`` is warned of). Published with the
blocks ``syndicate check`` prints, the whole set builds a feed per language that feedparser
and newsboat read, each entry linked to its translations, a site that fits a phone, and
digests whose takeaways reach their readers through a real SMTP server."""

from __future__ import annotations

import email
import email.policy
import shutil
import textwrap
import tomllib
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import feedparser
import lxml.html
import pytest
from click.testing import CliRunner

from syndicate.build import build_feeds
from syndicate.cli import main
from syndicate.config import load_config, parse_config
from syndicate.model import Article, Diagnostic
from syndicate.reader import parse_article, read_articles
from syndicate.reader.parse import profile_of
from syndicate.routes import article_url, home_url
from syndicate.sending import issuing, transports
from syndicate.state import open_store
from tests.conftest import DATA, ROOT, newsboat_reading

MORE = DATA / "more"
VERSIONS = sorted(MORE.glob("*/*.txt"))
PROFILES = parse_config({}, root=ROOT, source="(test)", env={}).languages
KNOWN = {lang: PROFILES[lang] for lang in ("en", "nl", "de")}
# A writer's slip, the same in every version of the article, warned of as it is.
NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
SINCE = date(2025, 1, 1)  # every article is new to a first digest
KINDS = ("atom.xml", "rss.xml")  # the documents a reader subscribes to
# A writer's slip, warned of as it is: in every version of an article, or in one
# ("<article>/<language>").
SLIPS = {
    "optical-transceivers": ["footnote mark 7 has no reference"],
    "cdu-leaks/en": [
        "date '3/4/2026' read as 2026-03-04, in the order 'en' writes dates in figures: a "
        "month's name leaves no doubt"
    ],
}


def slips(path: Path) -> list[str]:
    return SLIPS.get(path.parent.name, []) + SLIPS.get(f"{path.parent.name}/{path.stem}", [])


def read(path: Path) -> tuple[Article | None, list[Diagnostic]]:
    return read_data(path.read_bytes(), path)


def read_data(data: bytes, path: Path) -> tuple[Article | None, list[Diagnostic]]:
    if path.stem in PROFILES:
        return parse_article(data, str(path), PROFILES)
    found = profile_of(data, KNOWN)
    assert found is not None, f"{path}: no language or structure recognised"
    lang, profile = found
    # As `syndicate check` reads it: the published English version says which audiences the
    # article has, where the structure alone cannot tell.
    english, _ = parse_article((path.parent / "en.txt").read_bytes(), "en.txt", PROFILES)
    assert english is not None
    profile = profile.aligned([t.audience for t in english.takeaways])
    return parse_article(data, str(path), {**KNOWN, lang: profile})


@pytest.mark.parametrize("path", VERSIONS, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_each_version_reads_as_the_english_one_without_a_warning(path: Path) -> None:
    original, said = read(path.parent / "en.txt")
    article, found = read(path)
    messages = ([d.message for d in said], [d.message for d in found])
    assert messages == (slips(path.parent / "en.txt"), slips(path))
    assert original is not None and article is not None
    assert article.lang == path.stem
    assert (article.updated, article.slug) == (original.updated, original.slug)
    assert [(t.audience, len(t.bullets)) for t in article.takeaways] == [
        (t.audience, len(t.bullets)) for t in original.takeaways
    ]
    assert [(r.number, r.url) for r in article.references] == [
        (r.number, r.url) for r in original.references
    ]
    # The same headings, paragraphs and marks: the update's label is no paragraph of the body.
    assert [(b.kind, b.notes) for b in article.blocks] == [
        (b.kind, b.notes) for b in original.blocks
    ]
    assert article.title and article.summary and article.summary not in article.title
    assert set(article.seo.alt_slugs) <= set(original.seo.alt_slugs)
    # Each SEO field is read as that field. The Dutch and German versions, and the French
    # beside them, keep the shorter tails of the Dutch and German samples.
    if path.stem not in ("nl", "de") and not (path.parent / "nl.txt").exists():
        fields = ("title", "description", "excerpt", "primary_slug")
        assert [getattr(article.seo, f) is None for f in fields] == [False] * len(fields)
        assert len(article.seo.title or "") < len(article.seo.description or "")


# Chinese, Japanese, Thai, Khmer and Burmese are written without spaces between words: no
# wrapping at them. A file without blank lines has a paragraph a line: wrapped, its lines
# would be paragraphs no reader could tell apart.
UNSPACED = ("gpu-spot-prices",)
SPACED = [
    path
    for path in VERSIONS
    if path.stem not in ("ja", "zh", "zh-Hant", "th", "km", "my")
    and path.parent.name not in UNSPACED
]


@pytest.mark.parametrize("path", SPACED, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_each_version_hard_wrapped_at_72_columns_reads_as_written(path: Path) -> None:
    """Every line wrapped at 72 columns, as an editor that hard-wraps leaves it: the SEO
    description's second line may hold a colon ("Mistral and Qwen license terms: …"), the
    bullets and references go on over lines, a heading longer than a line is wrapped. It reads
    as the file as written, with the same warnings."""
    data = path.read_bytes()
    encoding = "utf-16" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    written = data.decode(encoding).replace("\r\n", "\n")
    wrapped = "\n".join(
        textwrap.fill(line, 72, break_long_words=False, break_on_hyphens=False)
        for line in written.split("\n")
    )
    whole, said = read(path)
    article, found = read_data(wrapped.encode(), path)
    assert [d.message for d in found] == [d.message for d in said]
    assert whole is not None and article is not None
    assert (article.lang, article.updated, article.slug, article.title, article.summary) == (
        whole.lang,
        whole.updated,
        whole.slug,
        whole.title,
        whole.summary,
    )
    assert (article.takeaways, article.references, article.seo) == (
        whole.takeaways,
        whole.references,
        whole.seo,
    )
    assert [(b.kind, b.parts) for b in article.blocks] == [(b.kind, b.parts) for b in whole.blocks]


@dataclass(frozen=True)
class Published:
    """The set in a folder of its own, under names that carry no meaning, with the config
    that publishes every language in it: the bundled one, with the block `check` printed for
    each language that has no profile."""

    folder: Path
    config_path: Path
    topic_of: dict[str, str]  # file name -> the article it is a version of
    langs: list[str]


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    root = tmp_path_factory.mktemp("published")
    folder = root / "articles"
    folder.mkdir()
    topic_of = {}
    for number, path in enumerate(VERSIONS):  # names carry no meaning
        shutil.copy(path, folder / f"{number:03}.txt")
        topic_of[f"{number:03}.txt"] = path.parent.name
    bundled = (ROOT / "config.toml").read_text("utf-8")
    config_path = root / "config.toml"
    config_path.write_text(bundled, "utf-8")
    result = CliRunner().invoke(main, ["check", "--config", str(config_path)])
    assert result.exit_code == 0, result.stderr
    # Each language's block, between "To publish …" lines; French has a built-in profile.
    blocks = [
        chunk[chunk.index("[languages.") :]
        for chunk in result.stderr.split("\nTo publish ")
        if "[languages." in chunk
    ]
    langs = sorted({path.stem for path in VERSIONS})
    named = {tomllib.loads(block)["languages"].popitem()[0] for block in blocks}
    assert named == set(langs) - {"en", "nl", "de", "fr"}
    codes = ", ".join(f'"{lang}"' for lang in langs)
    publishing = bundled.replace('languages = ["en", "nl", "de"]', f"languages = [{codes}]")
    config_path.write_text("\n".join([publishing, *blocks]), "utf-8")
    return Published(folder, config_path, topic_of, langs)


def test_the_set_published_with_the_blocks_check_prints_reaches_feedparser(
    tmp_path: Path, published: Published
) -> None:
    folder, topic_of, langs = published.folder, published.topic_of, published.langs
    config = load_config(published.config_path, env={})
    found = read_articles(folder, config.profiles)
    assert {d.message for d in found.problems} <= {slip for s in SLIPS.values() for slip in s}
    build_feeds(config, folder, tmp_path / "feeds")

    versions: dict[str, set[str]] = {}
    for path in VERSIONS:
        versions.setdefault(path.parent.name, set()).add(path.stem)
    for lang in langs:
        feed = feedparser.parse((tmp_path / "feeds" / f"{lang}.atom.xml").read_bytes())
        assert not feed.bozo and feed.feed.language == lang
        assert sorted(entry.title for entry in feed.entries) == sorted(
            article.title for article in found if article.lang == lang
        )
        topics = [topic for topic, written in versions.items() if lang in written]
        assert len(feed.entries) == len(topics)
        for entry in feed.entries:
            [article] = [a for a in found if a.lang == lang and a.title == entry.title]
            others = versions[topic_of[Path(article.source).name]] - {lang}
            links = {(link.rel, link.get("hreflang")) for link in entry.links}
            assert links == {("alternate", lang), *(("related", other) for other in others)}
    # Each version goes to the audiences its English original goes to, with as many bullets.
    for article in found:
        english = found.get("en", article.slug)
        assert english is not None
        assert [(t.audience, len(t.bullets)) for t in article.takeaways] == [
            (t.audience, len(t.bullets)) for t in english.takeaways
        ], article.source


def test_newsboat_opens_each_language_s_entries_on_its_own_pages(
    tmp_path: Path, published: Published, newsboat: str
) -> None:
    """Every language's Atom and RSS documents in newsboat, a reader with its own parser: each
    document's link is its language's home page, and each item, one per article in the
    language, opens that article's page in the language."""
    config = load_config(published.config_path, env={})
    found = read_articles(published.folder, config.profiles)
    build_feeds(config, published.folder, tmp_path / "feeds")
    for kind in KINDS:  # one reload each: newsboat keeps one item per id across its feeds
        docs = [tmp_path / "feeds" / f"{lang}.{kind}" for lang in published.langs]
        feeds, items = newsboat_reading(newsboat, docs, tmp_path / kind)
        for lang, doc in zip(published.langs, docs, strict=True):
            pages = {article_url(config, a.lang, a.slug) for a in found if a.lang == lang}
            assert feeds[str(doc)] == home_url(config, lang), doc.name
            assert sorted(items[str(doc)].values()) == sorted(pages), doc.name


BUILT_IN = ("en", "nl", "de", "fr")  # the languages with a profile and catalogs of their own
SITE = """
[site]
title = "Syndicate"
base_url = "https://news.example.org"
languages = ["en", "nl", "de", "fr"]

[state]
database = "sqlite:///{folder}/state.db"

[email]
sender = "Syndicate <digest@news.example.org>"
list_id = "digest.news.example.org"
max_articles = 100

[smtp]
url = "smtp://127.0.0.1:{port}"
retry_backoff = 0
"""


def test_every_version_s_takeaways_reach_its_readers_through_smtp(
    tmp_path: Path, smtp_server: tuple[Any, int]
) -> None:
    """The versions in the built-in languages, published and sent through a real SMTP server:
    a reader of every audience and one of procurement alone, in each language, get one
    digest each, which, parsed back, holds every bullet of their audiences of each article
    it shows (the newest that fit under the size a mail client clips at) as a list item of
    its HTML and in its text part."""
    inbox, port = smtp_server
    folder = tmp_path / "articles"
    folder.mkdir()
    for number, path in enumerate(p for p in VERSIONS if p.stem in BUILT_IN):
        shutil.copy(path, folder / f"{number:03}.txt")
    (tmp_path / "config.toml").write_text(SITE.format(folder=tmp_path, port=port), "utf-8")
    config = load_config(tmp_path / "config.toml", env={})
    found = read_articles(folder, config.profiles)
    readers = {}
    store = open_store(config.database_url)
    try:
        for lang in BUILT_IN:
            for audiences in (list(config.audiences), ["procurement"]):
                address = f"{lang}.{len(audiences)}@example.org"
                store.subscribers.add_subscriber(
                    address, lang, audiences, status="active", consent_source="t", now=NOW
                )
                readers[address] = (lang, set(audiences))
        mailer = transports.open_mailer(config)
        report = issuing.send_digests(config, NOW, mailer=mailer, store=store, since=SINCE)
    finally:
        store.close()
    assert (report.refused, report.sent, report.failed) == ([], len(readers), 0)
    assert inbox.counts() == {address: 1 for address in readers}
    for address, raw in inbox.received:
        lang, audiences = readers[address]
        message = email.message_from_bytes(raw, policy=email.policy.default)
        html, text = (message.get_body((kind,)).get_content() for kind in ("html", "plain"))
        page = lxml.html.fromstring(html)
        items = {" ".join(li.text_content().split()) for li in page.iter("li")}
        text = " ".join(text.split())
        said = " ".join(page.text_content().split())
        shown = [a for a in found if a.lang == lang and " ".join(a.title.split()) in said]
        expected = [
            " ".join(bullet.split())
            for article in shown
            for takeaways in article.takeaways
            if takeaways.audience in audiences
            for bullet in takeaways.bullets
        ]
        assert len(shown) >= min(5, len(found.in_language(lang))) and expected, address
        assert [b for b in expected if b not in items or b not in text] == [], address


# The language names in the header laid out on more than one line.
BROKEN_NAMES = """[...document.querySelectorAll('header nav a')]
    .filter(a => a.getClientRects().length > 1).map(a => a.textContent)"""


def test_the_site_of_every_language_fits_a_phone_in_chromium(
    tmp_path: Path, published: Published, browser: Any
) -> None:
    """The site of all the set's languages (each page names every one in its header), in a
    real browser as wide as a phone and as a desktop: no page is wider than the window, and
    no language's name is broken over lines."""
    site = tmp_path / "www"
    args = ["build", "--config", str(published.config_path), "--articles", str(published.folder)]
    result = CliRunner().invoke(main, [*args, "--site", str(site)])
    assert result.exit_code == 0, result.stderr
    english = sorted((site / "en").glob("*/index.html"))
    # A subtitle stands under the title, once.
    subtitled = lxml.html.parse(
        site / "en" / "ai-server-depreciation-useful-life-capex" / "index.html"
    )
    [standfirst] = subtitled.xpath("//p[contains(., 'Useful-life assumptions for AI servers')]")
    assert standfirst.get("class") == "standfirst"
    assert standfirst.getprevious().tag == "h1"
    for width in (375, 1280):
        page = browser.new_page(viewport={"width": width, "height": 900})
        for path in (site / "en" / "index.html", english[0], site / "ar" / "index.html"):
            page.goto(path.as_uri())
            names = page.locator("header nav a")
            assert names.count() == len(published.langs)
            assert page.evaluate(BROKEN_NAMES) == [], f"{path} at {width} px"
            fits = "document.documentElement.scrollWidth <= window.innerWidth"
            assert page.evaluate(fits), f"{path} overflows at {width} px"
        page.close()
