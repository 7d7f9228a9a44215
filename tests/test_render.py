"""Rendering: golden output, the quality list, escaping, catalogs and error messages."""

from __future__ import annotations

import html
import os
import re
import shutil
from dataclasses import replace
from datetime import date, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest

from syndicate.config import Config, parse_config
from syndicate.digest import select_digest
from syndicate.errors import RenderError
from syndicate.i18n import (
    PARTS,
    catalog_problems,
    environment,
    language,
    missing_messages,
    one_line,
    template_messages,
    template_roots,
    templates_dir,
)
from syndicate.model import ArticleSet, Takeaways
from syndicate.reader import read_articles
from syndicate.render import HTML_LIMIT, RenderedDigest, render_digest
from syndicate.sending.messages import preview_files, preview_links
from tests.conftest import ARTICLES, write_articles
from tests.golden import assert_golden

SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"
LINKS = {
    "unsubscribe_url": "https://news.example.org/unsubscribe?token=abc&list=1",
    "preferences_url": "https://news.example.org/preferences?token=abc",
    "view_url": "https://news.example.org/digest/view?token=abc",
}


@pytest.fixture
def seeds(config: Config) -> ArticleSet:
    return read_articles(ARTICLES, config.profiles)


def render(seeds: ArticleSet, config: Config, lang: str, *audiences: str, **kw) -> RenderedDigest:
    digest = select_digest(seeds, lang, audiences, **kw)
    assert digest is not None
    return render_digest(digest, config)


class Links(HTMLParser):
    """Collects hrefs and the text of the page (outside <style> and <title>)."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.links: dict[str, str] = {}
        self.text: list[str] = []
        self._skip = 0
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("style", "title"):
            self._skip += 1
        if tag == "a":
            self._href = dict(attrs)["href"]
            self.hrefs.append(self._href)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "title"):
            self._skip -= 1
        if tag == "a":
            self._href = None

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)
            if self._href and data.strip():
                self.links[data.strip()] = self._href


def parse(html: str) -> Links:
    found = Links()
    found.feed(html)
    return found


@pytest.mark.parametrize(("lang", "audiences"), [("en", ("cost",)), ("nl", ("cost", "strategy"))])
def test_golden(
    seeds: ArticleSet, config: Config, now: datetime, lang: str, audiences: tuple[str, ...]
) -> None:
    rendered = render(seeds, config, lang, *audiences)
    for suffix, data in preview_files(rendered, config, now=now).items():
        assert_golden(f"email/{rendered.key}{suffix}", data)


@pytest.mark.parametrize(
    ("lang", "audiences", "subject"),
    [
        ("en", ("cost",), "Key takeaways for cost optimization teams: 1 new article"),
        (
            "nl",
            ("cost",),
            "Belangrijkste conclusies voor kostenoptimalisatieteams: 1 nieuw artikel",
        ),
        ("de", ("cost",), "Wichtige Erkenntnisse für Kostenoptimierungsteams: 1 neuer Artikel"),
        (
            "en",
            ("strategy", "architects"),
            "Key takeaways for infrastructure architects and for strategic planning: 1 new article",
        ),
        (
            "de",
            ("architects", "cost", "procurement", "strategy", "ecosystem"),
            "Wichtige Erkenntnisse: 1 neuer Artikel",
        ),
    ],
)
def test_localised_subject(
    seeds: ArticleSet, config: Config, lang: str, audiences: tuple[str, ...], subject: str
) -> None:
    assert render(seeds, config, lang, *audiences).subject == subject


def test_subject_counts_articles_in_the_plural(seeds: ArticleSet, config: Config) -> None:
    first = seeds.get("nl", SLUG)
    second = replace(first, slug="tweede", title="Tweede", updated=date(2025, 12, 1))
    rendered = render(ArticleSet((*seeds.articles, second)), config, "nl", "cost")
    assert rendered.subject.endswith(": 2 nieuwe artikelen")
    assert "2 nieuwe artikelen in deze editie." in rendered.text


@pytest.mark.parametrize(
    ("lang", "day", "heading", "read", "why"),
    [
        (
            "en",
            "December 11, 2025",
            "Cost optimization teams",
            "Read the full article",
            "You receive this email because you subscribed to the key takeaways for "
            "cost optimization teams from Syndicate, in English.",
        ),
        (
            "nl",
            "11 december 2025",
            "Kostenoptimalisatieteams",
            "Lees het volledige artikel",
            "Je ontvangt deze e-mail omdat je je hebt aangemeld voor de belangrijkste "
            "conclusies voor kostenoptimalisatieteams van Syndicate, in het Nederlands.",
        ),
        (
            "de",
            "11. Dezember 2025",
            "Kostenoptimierungsteams",
            "Den vollständigen Artikel lesen",
            "Sie erhalten diese E-Mail, weil Sie die wichtigen Erkenntnisse für "
            "Kostenoptimierungsteams von Syndicate auf Deutsch abonniert haben.",
        ),
    ],
)
def test_quality_list(
    seeds: ArticleSet, config: Config, lang: str, day: str, heading: str, read: str, why: str
) -> None:
    rendered = render(seeds, config, lang, "cost")
    page, text = rendered.personalise(**LINKS)
    found = parse(page)
    visible = " ".join(" ".join(found.text).split())

    assert len(page.encode()) < HTML_LIMIT
    assert re.search(rf'<html lang="{lang}"', page)
    assert f"<title>{rendered.subject}</title>" in page
    title = seeds.get(lang, SLUG).title
    preheader = re.search(r'<div style="display:none;[^"]*">([^<]+)</div>', page)
    assert preheader and html.unescape(preheader[1]).startswith(title)
    assert '<meta name="color-scheme" content="light dark"' in page
    assert "@media (prefers-color-scheme: dark)" in page
    # Every link is absolute, and the plain-text part carries every one of them.
    assert found.hrefs and all(h.startswith(("https://", "http://")) for h in found.hrefs)
    for href in found.hrefs:
        assert href.replace("&amp;", "&") in text
    # The footer: unsubscribe and preferences links, and why the reader gets this.
    unsubscribe, preferences = found.hrefs[-3:-1]
    assert unsubscribe == LINKS["unsubscribe_url"] and preferences == LINKS["preferences_url"]
    assert why in visible and why in " ".join(text.split())
    # Content: the article's date in the language, its audience heading, bullets and link.
    article_url = f"http://127.0.0.1:8080/{lang}/{SLUG}/"
    assert found.links[title] == article_url and found.links[f"{read} →"] == article_url
    assert day in visible and day in text
    assert heading in visible and heading in text
    for bullet in seeds.get(lang, SLUG).takeaways_for("cost").bullets:
        assert bullet in visible
    # Privacy: nothing is fetched from elsewhere.
    for remote in ("<img", "<link", "@import", "googleapis", "<script", "<iframe", "url("):
        assert remote not in page


def test_revised_articles_are_marked(seeds: ArticleSet, config: Config) -> None:
    fresh = render(seeds, config, "nl", "cost")
    revised = render(seeds, config, "nl", "cost", sent={("nl", SLUG): "older"})
    assert "herzien sinds de vorige editie" not in fresh.html + fresh.text
    assert "11 december 2025 &#183; <strong>herzien sinds de vorige editie</strong>" in revised.html
    assert "11 december 2025 (herzien sinds de vorige editie)" in revised.text


@pytest.mark.parametrize(
    ("lang", "intro"),
    [
        ("en", "1,500 new articles in this issue."),
        ("de", "1.500 neue Artikel in dieser Ausgabe."),
        ("fr", "1\u202f500 nouveaux articles dans ce numéro."),
    ],
)
def test_counts_are_written_as_the_language_writes_numbers(
    config: Config, lang: str, intro: str
) -> None:
    env = environment(template_roots(config), lang, language(config, lang).translations)
    strings = env.get_template("email/strings.txt").make_module({"count": 1500, "since": None})
    assert one_line(strings.intro()) == intro


def test_since_is_shown_in_the_language(seeds: ArticleSet, config: Config) -> None:
    rendered = render(seeds, config, "de", "cost", since=date(2025, 12, 1))
    assert "1 neuer Artikel seit dem 1. Dezember 2025." in rendered.text


def test_hostile_article_text_is_escaped_never_evaluated(seeds: ArticleSet, config: Config) -> None:
    hostile = "<script>alert(1)</script> {{ 7*7 }} {% for x in range(3) %}x{% endfor %} @@"
    article = seeds.get("en", SLUG)
    evil = replace(
        article,
        title=f"Title {hostile}",
        takeaways=(Takeaways("cost", "For cost optimization teams", (f"Bullet {hostile}",)),),
    )
    others = tuple(a for a in seeds.articles if a.lang != "en")
    rendered = render(ArticleSet((*others, evil)), config, "en", "cost")
    page, text = rendered.personalise(**LINKS)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; {{ 7*7 }} {% for x in range(3) %}" in page
    assert "49" not in page.replace(rendered.content_hash, "") and "xxx" not in page
    flat = " ".join(text.split())
    assert f"Title {hostile}" in flat and f"- Bullet {hostile}" in flat


def test_article_text_cannot_forge_a_reader_placeholder(seeds: ArticleSet, config: Config) -> None:
    article = seeds.get("en", SLUG)
    forged = replace(article, title="@@unsubscribe_url.0123456789abcdef@@ {{ unsubscribe_url }}")
    others = tuple(a for a in seeds.articles if a.lang != "en")
    page, text = render(ArticleSet((*others, forged)), config, "en", "cost").personalise(**LINKS)
    assert "@@unsubscribe_url.0123456789abcdef@@ {{ unsubscribe_url }}" in page
    assert page.count("token=abc&amp;list=1") == 1  # the footer link only
    assert "@@unsubscribe_url.0123456789abcdef@@" in text
    assert text.count(LINKS["unsubscribe_url"]) == 1


def test_personalise_fills_every_placeholder_and_escapes(seeds: ArticleSet, config: Config) -> None:
    rendered = render(seeds, config, "en", "cost", "strategy")
    assert re.search(r"@@unsubscribe_url\.[0-9a-f]{16}@@", rendered.html)
    page, text = rendered.personalise(**LINKS)
    assert "@@" not in page and "@@" not in text
    assert 'href="https://news.example.org/unsubscribe?token=abc&amp;list=1"' in page
    assert LINKS["unsubscribe_url"] in text and LINKS["view_url"] in text
    with pytest.raises(ValueError, match="view_url"):
        rendered.personalise(**{**LINKS, "view_url": "https://x.org/\r\nBcc: a@b.c"})
    with pytest.raises(ValueError, match="unsubscribe_url"):
        rendered.personalise(**{**LINKS, "unsubscribe_url": "javascript:alert(1)"})


def test_every_variant_renders_in_every_language(seeds: ArticleSet, config: Config) -> None:
    for lang in ("en", "nl", "de"):
        for audiences in [(a,) for a in config.audiences] + [config.audiences]:
            rendered = render(seeds, config, lang, *audiences)
            assert rendered.ui_lang == lang
            assert len(rendered.html.encode()) < HTML_LIMIT


def test_preview_links_use_the_real_routes_with_a_token_no_reader_has(config: Config) -> None:
    links = preview_links(config, "nl")
    base = config.site.base_url
    assert links == {
        "unsubscribe_url": f"{base}/u/PREVIEW-ONLY-NOT-A-READER-TOKEN",
        "preferences_url": f"{base}/preferences/PREVIEW-ONLY-NOT-A-READER-TOKEN",
        "view_url": f"{base}/archive/nl/",
    }


# --- catalogs --------------------------------------------------------------------------------

ITALIAN = {
    "site": {"languages": ["en", "nl", "de", "it"]},
    "languages": {
        "it": {
            "name": "Italiano",
            "date_line": ["Aggiornato il"],
            "takeaways": ["Punti chiave"],
            "references": ["Riferimenti"],
            "audiences": {"cost": ["Per i team di ottimizzazione dei costi"]},
            "audience_names": {"cost": "Team di ottimizzazione dei costi"},
        }
    },
}


def italian(tmp_path: Path, **site: object) -> Config:
    """A fifth language with a profile and no catalog of its own."""
    data = {**ITALIAN, "site": {**ITALIAN["site"], **site}}
    return parse_config(data, root=tmp_path, source="(test)", env={})


def as_italian(seeds: ArticleSet) -> ArticleSet:
    return ArticleSet(tuple(replace(a, lang="it") for a in seeds.articles if a.lang == "en"))


def write_po(folder: Path, lang: str, entries: dict[str, str]) -> Path:
    """A publisher's catalog in site.locales, as `syndicate locale init` lays it out."""
    path = folder / lang / "LC_MESSAGES" / "messages.po"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = [
        'msgid ""',
        'msgstr ""',
        f'"Language: {lang}\\n"',
        '"Content-Type: text/plain; charset=utf-8\\n"',
    ]
    body = [f'msgid "{k}"\nmsgstr "{v}"' for k, v in entries.items()]
    path.write_text("\n".join(head) + "\n\n" + "\n\n".join(body) + "\n", "utf-8")
    return path


def test_shipped_catalogs_are_complete(tmp_path: Path) -> None:
    config = parse_config(
        {"site": {"languages": ["en", "nl", "de", "fr"]}}, root=tmp_path, source="(t)", env={}
    )
    roots = template_roots(config)
    assert len(template_messages(roots, "mail")) >= 20
    assert len(template_messages(roots, "web")) >= 40
    for lang in ("en", "nl", "de", "fr"):
        for part in PARTS:
            assert missing_messages(config, lang, part) == [], (lang, part)
    assert catalog_problems(config) == []


def test_a_language_without_catalog_is_reported_and_its_digests_refused(
    seeds: ArticleSet, tmp_path: Path
) -> None:
    config = italian(tmp_path)
    mail, web = catalog_problems(config)
    roots = template_roots(config)
    assert mail.severity == "error" and web.severity == "warning"
    assert mail.file == web.file == str(tmp_path / "locales/it/LC_MESSAGES/messages.po")
    total = len(template_messages(roots, "mail"))
    assert "no catalog for 'it'" in mail.message
    assert f"{total} of {total} mail messages untranslated" in mail.message
    total = len(template_messages(roots, "web"))
    assert f"{total} of {total} web messages untranslated" in web.message
    with pytest.raises(RenderError, match=r"cannot render 'it' digests.*site\.fallback_language"):
        render(as_italian(seeds), config, "it", "cost")


def assert_whole_english(rendered: RenderedDigest) -> None:
    """The interface entirely in English, the article's own words in Italian's place."""
    assert rendered.ui_lang == "en"
    assert rendered.subject == "Key takeaways for cost optimization teams: 1 new article"
    assert '<html lang="en"' in rendered.html
    assert re.search(r'<h2 [^>]*lang="it"', rendered.html)
    assert "December 11, 2025" in rendered.text  # the date is interface too
    assert "Cost optimization teams" in rendered.text
    assert "from Syndicate, in Italian." in " ".join(rendered.text.split())


def test_the_fallback_language_renders_the_whole_interface(
    seeds: ArticleSet, tmp_path: Path
) -> None:
    config = italian(tmp_path, fallback_language="en")
    assert {p.severity for p in catalog_problems(config)} == {"warning"}
    assert_whole_english(render(as_italian(seeds), config, "it", "cost"))


def test_english_fallback_still_works_with_a_deprecation_note(
    seeds: ArticleSet, tmp_path: Path
) -> None:
    data = {**ITALIAN, "email": {"english_fallback": True}}
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    note, *_ = catalog_problems(config)
    assert note.severity == "warning" and "email.english_fallback is deprecated" in note.message
    assert 'site.fallback_language = "en"' in note.message
    assert_whole_english(render(as_italian(seeds), config, "it", "cost"))


def test_a_partial_catalog_is_never_mixed_with_the_fallback(
    seeds: ArticleSet, tmp_path: Path
) -> None:
    config = italian(tmp_path, fallback_language="en")
    write_po(tmp_path / "locales", "it", {"Read the full article": "Leggi l'articolo completo"})
    [mail, web] = [p for p in catalog_problems(config) if "catalog for 'it'" in p.message]
    assert "is incomplete" in mail.message and "is incomplete" in web.message
    rendered = render(as_italian(seeds), config, "it", "cost")
    assert_whole_english(rendered)
    assert "Leggi" not in rendered.html + rendered.text


def test_the_publishers_catalog_rewords_a_sentence_without_reinstalling(
    seeds: ArticleSet, config: Config, tmp_path: Path
) -> None:
    assert "Lees het volledige artikel" in render(seeds, config, "nl", "cost").text
    po = write_po(tmp_path / "locales", "nl", {"Read the full article:": "Verder lezen:"})
    assert "Verder lezen:" in render(seeds, config, "nl", "cost").text
    po.write_text(po.read_text("utf-8").replace("Verder lezen:", "Lees alles:"), "utf-8")
    os.utime(po, ns=(po.stat().st_mtime_ns + 10**9,) * 2)
    rendered = render(seeds, config, "nl", "cost")
    assert "Lees alles:" in rendered.text and "Verder lezen" not in rendered.text
    assert "Lees het volledige artikel" in rendered.html  # the rest is still the built-in one


def test_a_broken_catalog_names_its_file_and_line(
    seeds: ArticleSet, config: Config, tmp_path: Path
) -> None:
    po = tmp_path / "locales" / "nl" / "LC_MESSAGES" / "messages.po"
    po.parent.mkdir(parents=True)
    po.write_text('msgid ""\nmsgstr ""\n\nmsgid "Save"\nOpslaan\n', "utf-8")
    with pytest.raises(RenderError, match=rf"{re.escape(str(po))}:5: Unknown or misformatted"):
        render(seeds, config, "nl", "cost")


def test_site_templates_override_the_built_in_ones_file_by_file(
    seeds: ArticleSet, tmp_path: Path
) -> None:
    own = tmp_path / "layout" / "email"
    own.mkdir(parents=True)
    (own / "digest.txt").write_text(
        "{{ heading }}\n{{ _('Unsubscribe:') }} {{ unsubscribe_url }}\n"
    )
    config = parse_config({"site": {"templates": "layout"}}, root=tmp_path, source="(t)", env={})
    rendered = render(seeds, config, "de", "cost")
    page, text = rendered.personalise(**LINKS)
    heading = "Wichtige Erkenntnisse für Kostenoptimierungsteams"
    assert text == f"{heading}\nAbbestellen: {LINKS['unsubscribe_url']}\n"
    assert "Den vollständigen Artikel lesen" in page  # digest.mjml is still the built-in one
    (own / "digest.txt").write_text("{{ no_such_value }}\n")
    with pytest.raises(RenderError, match=rf"{re.escape(str(own / 'digest.txt'))}:1: "):
        render(seeds, config, "de", "cost")


# --- errors name the template and line -------------------------------------------------------


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    copy = tmp_path / "templates"
    shutil.copytree(templates_dir(), copy)
    return copy


def break_line(templates: Path, name: str, find: str, insert: str) -> int:
    """Insert a line after the first line containing ``find``; returns the new line's number."""
    path = templates / "email" / name
    lines = path.read_text("utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if find in line) + 1
    lines.insert(at, insert)
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return at + 1


def test_undefined_variable_fails_loudly(
    seeds: ArticleSet, config: Config, templates: Path
) -> None:
    line = break_line(templates, "digest.mjml", "<h1", "<p>{{ no_such_value }}</p>")
    digest = select_digest(seeds, "en", ["cost"])
    with pytest.raises(RenderError, match=rf"templates/email/digest\.mjml:{line}: .*no_such_value"):
        render_digest(digest, config, templates=templates)


def test_undefined_in_the_text_template(seeds: ArticleSet, config: Config, templates: Path) -> None:
    line = break_line(templates, "digest.txt", "{{ intro", "{{ item_count }}")
    digest = select_digest(seeds, "en", ["cost"])
    with pytest.raises(RenderError, match=rf"templates/email/digest\.txt:{line}: .*item_count"):
        render_digest(digest, config, templates=templates)


def test_template_syntax_error(seeds: ArticleSet, config: Config, templates: Path) -> None:
    line = break_line(templates, "base.mjml", "<mj-head>", "{% if %}")
    digest = select_digest(seeds, "en", ["cost"])
    with pytest.raises(RenderError, match=rf"templates/email/base\.mjml:{line}: "):
        render_digest(digest, config, templates=templates)


@pytest.mark.parametrize(
    "broken",
    [
        "<mj-text padding=>broken attribute</mj-text>",  # no position from mjml-python
        '<mj-section css-class="never-closed">',  # unexpected end of stream
    ],
)
def test_mjml_error_names_template_and_line(
    seeds: ArticleSet, config: Config, templates: Path, broken: str
) -> None:
    line = break_line(templates, "digest.mjml", "{% block body %}", broken)
    digest = select_digest(seeds, "en", ["cost"])
    with pytest.raises(RenderError, match=rf"templates/email/digest\.mjml:{line}: MJML: "):
        render_digest(digest, config, templates=templates)


# --- too much for one email ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lang", "line", "one"),
    [
        ("en", "And {n} more articles", "And 1 more article"),
        ("nl", "En nog {n} artikelen", "En nog 1 artikel"),
        ("de", "Und {n} weitere Artikel", "Und 1 weiterer Artikel"),
    ],
)
def test_a_window_too_large_for_one_email_lists_the_newest_that_fit(
    tmp_path: Path, lang: str, line: str, one: str
) -> None:
    """A few hundred articles for every audience: far over the HTML limit when listed whole."""
    config = parse_config({"email": {"max_articles": 1000}}, root=tmp_path, source="(t)", env={})
    folder = write_articles(tmp_path / "archive", 300, newest=date(2025, 12, 11), langs=(lang,))
    archive = read_articles(folder, config.profiles, bodies=False)
    digest = select_digest(archive, lang, config.audiences, limit=1000)
    assert len(digest.items) == 300
    rendered = render_digest(digest, config)
    page, text = rendered.personalise(**LINKS)
    assert len(page.encode()) < HTML_LIMIT < 102_000  # Gmail clips at about 102 KB
    assert 5 < rendered.listed < 300
    shown = digest.shortened(rendered.listed)
    assert rendered.content_hash == shown.content_hash
    titles = [i.article.title for i in shown.items]
    assert titles == [archive.get(lang, f"piece-{n}").title for n in range(len(titles))]
    # Each listed article once, nothing of the others, then the line and link to the rest.
    found = parse(page)
    assert all(found.links.get(t) for t in titles)
    assert f"(piece {rendered.listed})" not in page
    more = line.format(n=300 - rendered.listed)
    index = f"{config.site.base_url}/{lang}/"
    assert found.links[f"{more} →"] == index
    assert f"{more}:\n{index}\n" in text
    # One article over the cap: the singular.
    one_more = render_digest(replace(digest.shortened(3), more=1), config)
    assert one_more.listed == 3 and f"{one}:\n{index}\n" in one_more.text


def test_a_digest_that_fits_has_no_closing_line(seeds: ArticleSet, config: Config) -> None:
    rendered = render(seeds, config, "en", "cost")
    assert rendered.listed == 1 and "more article" not in rendered.text + rendered.html
