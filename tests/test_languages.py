"""Every page and every mail in every built-in language, read back as a reader would; a fifth
language from the docs' block and a catalog in site.locales alone; the web's fallback."""

from __future__ import annotations

import re
import shutil
import smtplib
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from email.message import EmailMessage
from pathlib import Path

import lxml.html
import pytest
from babel.messages.pofile import read_po, write_po
from click.testing import CliRunner
from starlette.testclient import TestClient

from syndicate.build import build_feeds
from syndicate.cli import main
from syndicate.config import Config, load_config, parse_config
from syndicate.digest import select_digest
from syndicate.i18n import PARTS, missing_messages
from syndicate.language import identify
from syndicate.model import ArticleSet
from syndicate.previews import digest_variants
from syndicate.reader import read_articles
from syndicate.render import RenderedDigest, render_digest
from syndicate.state import open_store
from syndicate.tokens import CONFIRM, PREFERENCES, UNSUBSCRIBE, make_token
from syndicate.web import create_app
from tests.conftest import ARTICLES, DATA, ROOT
from tests.mailserver import free_port
from tests.websites import SAME_ORIGIN

BUILT_IN = ("en", "nl", "de", "fr")
SECRET = b"test secret key"
SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"
NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)


def smtp_mailer(port: int) -> Callable[[EmailMessage], None]:
    def send(message: EmailMessage) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as server:
            server.send_message(message)

    return send


BLOCKS = "//h1 | //h2 | //h3 | //p | //li | //label | //legend | //button | //a"
NAMES = re.compile(r"\b(Atom|RSS|JSON Feed|Syndicate|digests?)\b|https?://\S+")
"""Names that read the same in every language, left out of a passage's words."""


def visible_text(page: str) -> tuple[str, str, list[str]]:
    """The page's ``lang``, the text a reader sees in that language (without style and
    script, and without the parts marked as another language: article text, language names),
    and its passages of four words or more, one per block (heading, paragraph, item, ...)."""
    root = lxml.html.fromstring(page)
    lang = root.get("lang")
    for element in root.xpath("//style | //script | //head"):
        element.drop_tree()
    for element in root.xpath("//body//*[@lang]"):
        if element.get("lang") != lang and element.getparent() is not None:
            element.drop_tree()
    text = " ".join(root.text_content().split())
    for element in root.xpath("//div[@class='body']"):  # the article itself: the reader's care
        element.drop_tree()
    passages = [" ".join(NAMES.sub(" ", e.text_content()).split()) for e in root.xpath(BLOCKS)]
    long = [p for p in passages if len(re.findall(r"\w{2,}", p)) >= 4]
    return lang, text, long


def text_passages(text: str) -> list[str]:
    """A mail's plain-text paragraphs of four words or more, without links and names."""
    passages = [" ".join(NAMES.sub(" ", p).split()) for p in re.split(r"\n\s*\n", text)]
    return [p for p in passages if len(re.findall(r"\w{2,}", p)) >= 4]


def without_links(text: str) -> str:
    return " ".join(re.sub(r"https?://\S+", " ", text).split())


def assert_reads_as(lang: str, text: str, langs: tuple[str, ...], what: str) -> None:
    """py3langid's reading of the text, as the reader's second opinion judges an article."""
    found = identify(text, langs)
    assert found is not None and found[0] == lang, f"{what} reads as {found}, not {lang}: {text}"


def assert_all_read_as(lang: str, passages: list[str], langs: tuple[str, ...], what: str) -> None:
    """Each passage on its own, so that one sentence in another language cannot hide in a
    page. A short passage may leave the model unsure between neighbours (Dutch and German):
    only a confident reading as another language fails, as in the reader's second opinion."""
    for passage in passages:
        found = identify(passage, langs)
        assert found is not None, f"{what}: no reading of {passage!r}"
        wrong = found[0] != lang and found[1] >= 0.9
        assert not wrong, f"{what}: {passage!r} reads as {found}, not {lang}"


def assert_no_english_left(lang: str, text: str, what: str) -> None:
    """No interface sentence of several words is still in English (the source language)."""
    if lang == "en":
        return
    english = [
        "Read the full article",
        "View this email in your browser",
        "Change your preferences",
        "Key takeaways",
        "new article",
        "All articles",
        "The digest by email",
        "Past issues",
        "Back to the articles",
        "Email address",
        "Updated ",
        "more article",
        "For the address",
    ]
    left = [phrase for phrase in english if phrase in text]
    assert not left, f"{what} in {lang} still says {left}"


# -- every built-in language, every page and every mail ------------------------------------------


@pytest.fixture
def site(tmp_path: Path) -> tuple[Config, Path]:
    articles = tmp_path / "articles"
    shutil.copytree(ARTICLES, articles)
    shutil.copy(DATA / "articles" / "fr-trainium3.txt", articles)
    data = {
        "site": {"base_url": "http://testserver", "languages": list(BUILT_IN)},
        "web": {"subscribe_per_minute": 5},
    }
    return parse_config(data, root=tmp_path, source="(test)", env={}), articles


@pytest.fixture
def pages(site, smtp_server, tmp_path) -> Iterator[tuple[Callable[[str], list[str]], list]]:
    """A function that walks every page of one language, and the mails the walk sent."""
    config, articles = site
    found = read_articles(articles, config.profiles)
    assert not found.problems
    inbox, port = smtp_server
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    (tmp_path / "archive" / "fr").mkdir(parents=True)
    (tmp_path / "archive" / "fr" / "2025-12-15-weekly.html").write_text("<title>Semaine 51</title>")

    def app(mailer: Callable[[EmailMessage], None]) -> TestClient:
        made = create_app(
            config,
            store=store,
            send_message=mailer,
            articles=lambda: found,
            secret=SECRET,
            now=lambda: NOW,
        )
        return TestClient(made, follow_redirects=False)

    def walk(lang: str) -> list[str]:
        client = app(smtp_mailer(port))
        shown: list[str] = []

        def get(path: str, status: int = 200) -> lxml.html.HtmlElement:
            response = client.get(path, headers={"Accept-Language": lang})
            assert response.status_code == status, path
            shown.append(response.text)
            return lxml.html.fromstring(response.text)

        def post(path: str, data: dict, status: int = 200, via: TestClient = client) -> None:
            response = via.post(path, data=data, headers=SAME_ORIGIN)
            assert response.status_code == status, (path, data)
            shown.append(response.text)

        get(f"/{lang}/")
        get(f"/{lang}/{SLUG}/")
        get(f"/archive/{lang}/")
        get(f"/{lang}/no-such-article/", 404)
        form = {"lang": lang, "audiences": ["cost"]}
        post("/subscribe", {**form, "email": "not an address"}, 400)
        post("/subscribe", {**form, "email": f"new-{lang}@example.org", "audiences": []}, 400)
        post("/subscribe", {**form, "email": f"new-{lang}@example.org"})  # check your inbox
        post("/subscribe", {**form, "email": f"new-{lang}@example.org"})  # the known-address note
        cross_site = {"Origin": "https://elsewhere.example"}  # a page of another site
        refused = client.post("/subscribe", data={**form, "email": "x@"}, headers=cross_site)
        assert refused.status_code == 400
        shown.append(refused.text)
        post("/subscribe", {**form, "email": "y@example.org"}, 429)  # five a minute
        dead = app(smtp_mailer(free_port()))
        post("/subscribe", {**form, "email": "z@example.org"}, 503, via=dead)

        reader = store.subscribers.subscriber(f"new-{lang}@example.org")
        confirm = f"/confirm/{make_token(SECRET, CONFIRM, reader.id, issued=NOW)}"
        csrf = get(confirm).xpath("//input[@name='csrf']/@value")[0]
        post(confirm, {"csrf": csrf})
        preferences = f"/preferences/{make_token(SECRET, PREFERENCES, reader.id, issued=NOW)}"
        get(preferences)
        post(preferences, {"csrf": csrf, "lang": lang, "audiences": ["cost", "strategy"]})
        unsubscribe = f"/u/{make_token(SECRET, UNSUBSCRIBE, reader.id, issued=NOW)}"
        get(unsubscribe)
        post(unsubscribe, {"csrf": csrf})
        get("/u/not-a-token", 404)
        return shown

    yield walk, inbox
    store.close()


@pytest.mark.parametrize("lang", BUILT_IN)
def test_every_page_and_mail_speaks_the_readers_language(site, pages, lang: str) -> None:
    config, articles = site
    for part in PARTS:
        assert missing_messages(config, lang, part) == [], f"{lang} {part} catalog"
    walk, inbox = pages
    shown = walk(lang)
    assert len(shown) == 18
    for number, page in enumerate(shown):
        page_lang, text, passages = visible_text(page)
        assert page_lang == lang, f"page {number}"
        assert_no_english_left(lang, text, f"page {number}")
        assert_reads_as(lang, text, BUILT_IN, f"page {number}")
        assert_all_read_as(lang, passages, BUILT_IN, f"page {number}")

    mails = inbox.messages
    assert len(mails) == 3  # the confirmation, the welcome, the note to a known address
    for mail in mails:
        body = mail.get_body(("plain",))
        assert body is not None
        text = f"{mail['Subject']}\n{body.get_content()}"
        assert_no_english_left(lang, text, "confirmation mail")
        assert_reads_as(lang, without_links(text), BUILT_IN, f"mail {mail['Subject']!r}")
        assert_all_read_as(lang, text_passages(text), BUILT_IN, f"mail {mail['Subject']!r}")

    found = read_articles(articles, config.profiles)
    revised = {(lang, SLUG): "an older hash"}
    variants = [audiences for language, audiences in digest_variants(config) if language == lang]
    assert len(variants) == 6
    for audiences in variants:
        for options in ({}, {"since": date(2025, 12, 1)}, {"sent": revised}):
            digest = select_digest(found, lang, audiences, **options)
            assert digest is not None
            rendered = render_digest(digest, config)
            assert_digest_reads_as(rendered, lang)
    # A window longer than one email: the closing line counts the rest in the language too.
    digest = select_digest(found, lang, list(config.audiences))
    shortened = render_digest(replace(digest, more=14), config)
    assert_digest_reads_as(shortened, lang)
    assert f"{MORE[lang]}:\n{config.site.base_url}/{lang}/\n" in shortened.text


MORE = {
    "en": "And 14 more articles",
    "nl": "En nog 14 artikelen",
    "de": "Und 14 weitere Artikel",
    "fr": "Et 14 autres articles",
}


def assert_digest_reads_as(rendered: RenderedDigest, lang: str) -> None:
    assert rendered.ui_lang == lang
    page_lang, html_text, passages = visible_text(rendered.html)
    assert page_lang == lang
    for what, text in (("subject", rendered.subject), ("html", html_text), ("text", rendered.text)):
        assert_no_english_left(lang, text, f"{rendered.key} {what}")
        assert_reads_as(lang, without_links(text), BUILT_IN, f"{rendered.key} {what}")
    assert_all_read_as(lang, passages, BUILT_IN, f"{rendered.key} html")
    assert_all_read_as(lang, text_passages(rendered.text), BUILT_IN, f"{rendered.key} text")


# -- the web speaks the fallback wholly, and says so ---------------------------------------------


def test_a_page_in_a_language_without_catalog_is_wholly_in_the_fallback(tmp_path: Path) -> None:
    languages = {"it": {"name": "Italiano", "date_line": ["Aggiornato il"]}}
    languages["it"] |= {"takeaways": ["Punti chiave"], "references": ["Riferimenti"]}
    languages["it"]["audiences"] = {"cost": ["Per i team di ottimizzazione dei costi"]}
    data = {"site": {"languages": ["en", "it"], "fallback_language": "en"}, "languages": languages}
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    seeds = read_articles(ARTICLES, parse_config({}, root=tmp_path, source="(t)", env={}).profiles)
    italian = ArticleSet(tuple(replace(a, lang="it") for a in seeds if a.lang == "en"))
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    app = create_app(
        config,
        store=store,
        send_message=lambda message: None,
        articles=lambda: italian,
        secret=SECRET,
        now=lambda: NOW,
    )
    client = TestClient(app)
    for path in ("/it/", f"/it/{SLUG}/"):
        page = lxml.html.fromstring(client.get(path).text)
        assert page.get("lang") == "en"  # the interface
        assert page.xpath("//h1/text()")[0] in ("All articles", italian.articles[0].title)
        assert "Updated December 11, 2025" in page.text_content()
        _, interface, _passages = visible_text(client.get(path).text)
        assert_reads_as("en", interface, ("en", "it"), path)
    article = lxml.html.fromstring(client.get(f"/it/{SLUG}/").text)
    assert article.xpath("//article/@lang") == ["it"]  # the article's own words
    store.close()


# -- a fifth language: the docs' block and a catalog in site.locales ----------------------------


def language_block() -> str:
    """The TOML block of the docs' "Adding a language" section, as a publisher copies it."""
    page = (ROOT / "docs" / "digests.md").read_text("utf-8")
    section = page.split("## Adding a language", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```toml\n(.*?)```", section, re.S)[1]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_docs_language_block_and_a_catalog_add_a_language(tmp_path: Path, smtp_server) -> None:
    block = language_block()
    assert "[site]" not in block and "[languages.es]" in block
    bundled = (ROOT / "config.toml").read_text("utf-8")
    assert 'languages = ["en", "nl", "de"]' in bundled
    # The docs: add "es" to site.languages, paste the block at the end.
    text = bundled.replace('languages = ["en", "nl", "de"]', 'languages = ["en", "nl", "de", "es"]')
    path = tmp_path / "config.toml"
    path.write_text(text + "\n" + block, "utf-8")
    articles = tmp_path / "articles"
    shutil.copytree(ARTICLES, articles)
    shutil.copy(DATA / "articles" / "es-trainium3.txt", articles)

    # Before the catalog: check names it, mail and web apart, and digests are refused.
    code, _, stderr = run("check", "--config", str(path))
    catalog = tmp_path / "locales" / "es" / "LC_MESSAGES" / "messages.po"
    assert code == 1
    assert f"{catalog}: error: no catalog for 'es'" in stderr and " mail messages " in stderr
    assert f"{catalog}: warning: no catalog for 'es'" in stderr and " web messages " in stderr

    # `syndicate locale init es`, then the translator fills in every entry.
    code, stdout, stderr = run("locale", "init", "es", "--config", str(path))
    assert code == 0 and stdout.strip() == str(catalog)
    assert "nplurals=3" in stderr  # Spanish's plural rule, from CLDR
    with catalog.open("rb") as source:
        started = read_po(source)
    with (DATA / "locales" / "es" / "LC_MESSAGES" / "messages.po").open("rb") as source:
        translated = read_po(source)
    for message in started:
        if message.id:
            message.string = translated[message.id].string
    with catalog.open("wb") as target:
        write_po(target, started)
    code, stdout, _ = run("locale", "check", "--config", str(path))
    assert code == 0, stdout
    assert re.search(r"^es mail: (\d+) of \1 translated", stdout, re.M)
    assert re.search(r"^es web: (\d+) of \1 translated", stdout, re.M)
    code, _, stderr = run("check", "--config", str(path))
    assert code == 0, stderr

    config = load_config(path, env={})
    langs = ("en", "nl", "de", "es")
    report = build_feeds(config, articles, tmp_path / "feeds", now=NOW)
    assert "es.atom.xml" in report.written and "es.json" in report.written
    found = read_articles(articles, config.profiles)
    spanish = found.get("es", SLUG)
    assert spanish is not None and spanish.title.startswith("Trainium3 de Amazon")
    assert {a.lang for a in found.translations(spanish)} == {"en", "nl", "de"}

    for audiences in [a for lang, a in digest_variants(config) if lang == "es"]:
        rendered = render_digest(select_digest(found, "es", audiences), config)
        assert rendered.ui_lang == "es"
        assert_reads_as("es", without_links(rendered.text), langs, rendered.key)
        assert_reads_as("es", rendered.subject, langs, rendered.key)
    assert render_digest(select_digest(found, "es", ["cost"]), config).subject == (
        "Conclusiones clave para equipos de optimización de costes: 1 artículo nuevo"
    )

    inbox, port = smtp_server
    store = open_store(config.database_url)
    app = create_app(
        config,
        store=store,
        send_message=smtp_mailer(port),
        articles=lambda: found,
        secret=SECRET,
        now=lambda: NOW,
    )
    client = TestClient(app)
    english = {"Accept-Language": "en"}  # a missing page below /es/ is in Spanish all the same
    for page_path in ("/es/", f"/es/{SLUG}/", "/archive/es/", "/es/no/such/page/"):
        page_lang, text, passages = visible_text(client.get(page_path, headers=english).text)
        assert page_lang == "es"
        assert_reads_as("es", text, langs, page_path)
        assert_all_read_as("es", passages, langs, page_path)
    data = {"email": "lector@example.org", "lang": "es", "audiences": ["cost"]}
    posted = client.post("/subscribe", data=data, headers=SAME_ORIGIN)
    assert "Revisa tu bandeja de entrada" in posted.text
    [mail] = inbox.messages
    assert mail["Subject"] == "Confirma tu suscripción a Syndicate"
    store.close()


def test_locale_check_lists_untranslated_and_fuzzy_messages_by_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[site]\nlanguages = ["en", "fr", "it"]\n[languages.it]\nname = "Italiano"\n'
        'date_line = ["Aggiornato il"]\ntakeaways = ["Punti chiave"]\n'
        'references = ["Riferimenti"]\naudiences = { cost = ["Per i team"] }\n',
        "utf-8",
    )
    assert run("locale", "init", "it", "--config", str(path))[0] == 0
    assert run("locale", "init", "it", "--config", str(path))[0] == 1  # never overwritten
    catalog = tmp_path / "locales" / "it" / "LC_MESSAGES" / "messages.po"
    with catalog.open("rb") as source:
        started = read_po(source)
    assert "# Register:" in started.header_comment
    started["Save"].string = "Salva"
    started["Subscribe"].string = "Iscriviti"
    started["Subscribe"].flags.add("fuzzy")
    with catalog.open("wb") as target:
        write_po(target, started)

    code, stdout, _ = run("locale", "check", "--config", str(path))
    assert code == 1
    lines = stdout.splitlines()
    assert re.fullmatch(
        r"fr mail: (\d+) of \1 translated, .*/locales/fr/LC_MESSAGES/messages.po", lines[0]
    )
    web = lines.index(next(line for line in lines if line.startswith("it web: ")))
    assert re.fullmatch(rf"it web: 1 of (\d+) translated, {re.escape(str(catalog))}", lines[web])
    listed = lines[web + 1 :]
    assert any(
        re.fullmatch(r"  templates/web/index\.html:\d+: fuzzy: 'Subscribe'", x) for x in listed
    )
    assert any(
        re.fullmatch(r"  templates/web/preferences\.html:\d+: untranslated: 'Your preferences'", x)
        for x in listed
    )
    assert not any("'Save'" in line for line in listed)
    assert lines[1].startswith("fr web: ")  # French is complete: nothing listed


def test_check_names_the_line_of_a_broken_catalog(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[site]\nlanguages = ["en", "nl"]\n', "utf-8")
    catalog = tmp_path / "locales" / "nl" / "LC_MESSAGES" / "messages.po"
    catalog.parent.mkdir(parents=True)
    catalog.write_text('msgid ""\nmsgstr ""\n\nmsgid "Save"\nOpslaan\n', "utf-8")
    code, _, stderr = run("check", "--config", str(path), "--articles", str(ARTICLES))
    assert code == 1
    assert f"{catalog}:5: error: Unknown or misformatted keyword" in stderr


@pytest.mark.parametrize(
    ("lang", "register", "other"),
    [
        ("nl", '"je"', r"\b(u|uw)\b"),
        ("de", '"Sie"', r"\b(du|dich|dir|dein\w*|euch|euer)\b"),
        ("fr", '"vous"', r"\b(tu|toi|ton|ta|tes)\b"),
    ],
)
def test_each_catalog_keeps_the_one_register_its_header_names(
    lang: str, register: str, other: str
) -> None:
    path = ROOT / "src" / "syndicate" / "locales" / lang / "LC_MESSAGES" / "messages.po"
    with path.open("rb") as source:
        catalog = read_po(source)
    assert re.search(rf"^# Register: .*{register}", catalog.header_comment, re.M)
    for message in catalog:
        for text in message.string if isinstance(message.string, tuple) else [message.string]:
            assert not re.search(other, text, re.I), f"{lang}: {text!r}"


def test_the_french_subject_keeps_its_no_break_space_before_the_colon(site) -> None:
    config, articles = site
    digest = select_digest(read_articles(articles, config.profiles), "fr", ["cost"])
    rendered = render_digest(digest, config)
    assert rendered.subject == (
        "Points clés pour les équipes d'optimisation des coûts\u00a0: 1 nouvel article"
    )
    assert "Lire l'article complet\u00a0:" in rendered.text
