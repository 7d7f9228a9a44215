"""Every language, end to end: the built-in ones (en, nl, de, fr), Arabic, a right-to-left
language, and Japanese, whose labels end at a full-width colon: each added by a publisher with
a [languages.<code>] block and a catalog of their own (made here).

Each goes through everything a reader or a feed reader sees: the feeds, the article page, every
digest variant and its .eml preview, a real delivery through an SMTP server and the
confirmation mail. Each message that arrives is parsed back by the standard library: its
Subject decodes to the catalog's exact string (French's no-break space before the colon,
Arabic, Japanese, an emoji), its HTML says its language and, for Arabic, ``dir="rtl"``.
"""

from __future__ import annotations

import email
import email.policy
import json
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import lxml.etree
import lxml.html
import pytest
from babel import Locale
from babel.lists import format_list
from babel.numbers import format_decimal
from click.testing import CliRunner
from starlette.testclient import TestClient

from syndicate.build import build_feeds
from syndicate.cli import main
from syndicate.compose import HeaderError, compose_message, compose_note, note_bytes
from syndicate.config import Config, load_config
from syndicate.digest import select_digest
from syndicate.i18n import language, template_catalog, text_direction, write_catalog
from syndicate.previews import digest_variants, write_previews
from syndicate.reader import read_articles
from syndicate.render import RenderedNote, render_digest
from syndicate.sending import issuing, messages, transports
from syndicate.state import open_store
from syndicate.web import create_app
from tests.conftest import ARTICLES, DATA, SEED_SLUG
from tests.websites import SAME_ORIGIN, Clock

NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)
LANGS = ("en", "nl", "de", "fr", "ar", "ja")
SECRET = b"every language"

ARABIC_BLOCK = """
[languages.ar]
name = "العربية"
title = "سينديكيت"
description = "تحليلات البنية التحتية للذكاء الاصطناعي وتكاليفها واستراتيجيتها"
date_line = ["آخر تحديث"]
takeaways = ["أهم النقاط"]
references = ["المراجع"]
seo = ["عناصر تحسين محركات البحث"]

[languages.ar.seo_fields]
title = ["عنوان SEO"]
description = ["وصف SEO"]
primary_slug = ["الرئيسي"]
alt_slugs = ["بديل"]

[languages.ar.audiences]
architects = ["لمهندسي البنية التحتية"]
cost = ["لفرق تحسين التكاليف"]
procurement = ["لفرق المشتريات"]
strategy = ["للتخطيط الاستراتيجي"]
ecosystem = ["للمنظومة الأوسع"]

[languages.ar.audience_names]
architects = "مهندسو البنية التحتية"
cost = "فرق تحسين التكاليف"
procurement = "فرق المشتريات"
strategy = "التخطيط الاستراتيجي"
ecosystem = "المنظومة الأوسع"
"""

JAPANESE_BLOCK = """
[languages.ja]
name = "日本語"
title = "シンジケート"
description = "AIインフラのコストと戦略の分析"
date_line = ["更新日"]
takeaways = ["要点"]
references = ["参考文献"]
seo = ["SEO要素"]

[languages.ja.seo_fields]
title = ["SEOタイトル"]
description = ["SEOディスクリプション"]
excerpt = ["Squarespace抜粋"]
primary_slug = ["プライマリ"]
alt_slugs = ["代替"]

[languages.ja.audiences]
architects = ["インフラストラクチャアーキテクト向け"]
cost = ["コスト最適化チーム向け"]
procurement = ["調達チーム向け"]
strategy = ["戦略計画担当者向け"]
ecosystem = ["より広いエコシステム向け"]

[languages.ja.audience_names]
architects = "インフラストラクチャアーキテクト"
cost = "コスト最適化チーム"
procurement = "調達チーム"
strategy = "戦略計画担当者"
ecosystem = "より広いエコシステム"
"""

CONFIG = (
    """
[site]
title = "Syndicate"
base_url = "https://news.example.org"
languages = ["en", "nl", "de", "fr", "ar", "ja"]

[site.description]
fr = "Analyses de l’infrastructure de l’IA, de ses coûts et de sa stratégie"

[state]
database = "{database}"

[email]
sender = "Syndicate <digest@news.example.org>"
preview_to = "editor@news.example.org"
list_id = "digest.news.example.org"

[smtp]
url = "smtp://127.0.0.1:{port}"
retry_backoff = 0
"""
    + ARABIC_BLOCK
    + JAPANESE_BLOCK
)

ARABIC_ARTICLE = """\
«ترينيوم3» من أمازون يشعل حرب رقائق الذكاء الاصطناعي

آخر تحديث 11 ديسمبر 2025

تحديث ديسمبر 2025: تُصنع ترينيوم3 بتقنية 3 نانومتر لدى TSMC، وتقدّم 2.52 بيتافلوبس بدقة FP8 \
لكل شريحة مع 144 غيغابايت من ذاكرة HBM3e. وتشغّل Anthropic وAmazon Bedrock عليها أحمالاً إنتاجية.

أطلقت AWS خوادم ترينيوم3 في مؤتمر re:Invent 2025، وتستحق مواصفاتها الاهتمام.¹ فعلى مستوى خادم \
كامل من 144 شريحة يحصل العملاء على 362 بيتافلوبس من قدرة المعالجة.

حجة الأداء

صمّمت AWS ترينيوم3 لمنافسة NVIDIA من خلال الاقتصاد لا من خلال القوة الخام.²

أهم النقاط

لمهندسي البنية التحتية: - تقدّم ترينيوم3 \u200f2.52 بيتافلوبس لكل شريحة - يبلغ عرض نطاق الذاكرة \
4.9 تيرابايت في الثانية

لفرق تحسين التكاليف: - تعلن AWS عن تكاليف تدريب واستدلال أقل بنسبة 50% من وحدات GPU - يستفيد \
الاستدلال أكثر من غيره من ترينيوم

لفرق المشتريات: - تتوسع UltraClusters 3.0 حتى مليون شريحة - يعلن عدة عملاء عن خفض التكاليف إلى النصف

للتخطيط الاستراتيجي: - خارطة طريق ترينيوم4 (أواخر 2026 أو مطلع 2027) - تنافس AWS شركة NVIDIA في \
السيليكون وتتبنّى وصلتها البينية

للمنظومة الأوسع: - المنافسة تفيد الجميع - تزيد وحدات TPU من Google وسلسلة MI من AMD هذا الضغط

المراجع

1. Amazon. "Trainium3 UltraServers now available." About Amazon, 2 ديسمبر 2025. \
https://www.aboutamazon.com/news/aws/trainium-3-ultraserver-faster-ai-training-lower-cost

2. The Next Platform. "With Trainium4, AWS Will Crank Up Everything But The Clocks." \
https://www.nextplatform.com/2025/12/03/with-trainium4-aws-will-crank-up-everything-but-the-clocks/

عناصر تحسين محركات البحث

عنوان SEO: ترينيوم3 من أمازون: AWS تتحدى NVIDIA في رقائق الذكاء الاصطناعي

وصف SEO: تقدّم ترينيوم3 من AWS \u200f362 بيتافلوبس لكل عنقود بتكاليف أقل بالنصف.

روابط URL: - الرئيسي: amazon-trainium3-aws-nvidia-ai-chip-competition
"""


@dataclass(frozen=True)
class Translator:
    """What a translator writes into a language's catalog after ``syndicate locale init``:
    some messages by hand, the subjects (with the audiences, and for all of them) followed by
    one word per plural form (CLDR's), and for the rest a sentence of ``words``."""

    strings: dict[str, str]
    subjects: tuple[str, str]
    forms: tuple[str, ...]
    words: str


TRANSLATORS = {
    # An emoji, the script, then a word per plural form: Arabic has six.
    "ar": Translator(
        strings={
            "Key takeaways": "أهم النقاط",
            "Key takeaways %(audiences)s": "أهم النقاط %(audiences)s",
            "Confirm your subscription to %(site)s": "أكِّد اشتراكك في «%(site)s»",
            "Hello,": "مرحبًا،",
            "Updated %(date)s": "آخر تحديث %(date)s",
        },
        subjects=("📬 أهم النقاط %(audiences)s: %(num)s ", "📬 أهم النقاط: %(num)s "),
        forms=("مقالات جديدة", "مقال جديد", "مقالان جديدان", "مقالات جديدة", "مقالًا جديدًا", "مقال"),
        words="نص عربي",
    ),
    # One plural form, and full-width punctuation.
    "ja": Translator(
        strings={
            "Key takeaways": "要点",
            "Key takeaways %(audiences)s": "要点（%(audiences)s）",
            "Confirm your subscription to %(site)s": "「%(site)s」の購読の確認",
            "Hello,": "こんにちは。",
            "Updated %(date)s": "%(date)s更新",
        },
        subjects=("要点（%(audiences)s）：新着記事%(num)s件", "要点：新着記事%(num)s件"),
        forms=("",),
        words="日本語の文",
    ),
}


def translated_catalog(config: Config, lang: str) -> Path:
    """The catalog ``TRANSLATORS[lang]`` writes for ``lang``: every message of the templates,
    in each of the language's plural forms, made here."""
    translator = TRANSLATORS[lang]
    catalog = template_catalog(config, Locale.parse(lang))
    assert catalog.num_plurals == len(translator.forms)
    for message in catalog:
        if not message.id:
            continue
        if isinstance(message.id, (tuple, list)):
            singular = message.id[0]
            if singular.startswith("Key takeaways"):
                head = translator.subjects["%(audiences)s" not in singular]
                message.string = tuple(head + form for form in translator.forms)
            else:
                text = _generated(singular, translator.words)
                message.string = tuple(f"{text} ({n})" for n in range(len(translator.forms)))
        else:
            message.string = translator.strings.get(message.id) or _generated(
                message.id, translator.words
            )
    path = config.path(config.site.locales) / lang / "LC_MESSAGES" / "messages.po"
    write_catalog(catalog, path)
    return path


def _generated(msgid: str, words: str) -> str:
    """A sentence of ``words`` that keeps the message's placeholders."""
    names = [part.split(")s")[0] for part in msgid.split("%(")[1:]]
    return " ".join([words, *(f"%({name})s" for name in names)])


def make_site(tmp_path: Path, database: str, port: int, *, translated: bool = True) -> Config:
    """A site folder: config.toml with Arabic and Japanese added, the seed articles in four
    languages, an Arabic and a Japanese one, and the Arabic and Japanese catalogs in the
    publisher's locales/ (``translated``; without them, English is the fallback language)."""
    articles = tmp_path / "articles"
    articles.mkdir()
    japanese = DATA / "unconfigured" / "ja-trainium3.txt"
    for source in (*ARTICLES.glob("*.txt"), DATA / "articles" / "fr-trainium3.txt", japanese):
        shutil.copy(source, articles / source.name)
    (articles / "ar-trainium3.txt").write_text(ARABIC_ARTICLE, "utf-8")
    path = tmp_path / "config.toml"
    text = CONFIG.format(database=database, port=port)
    if not translated:
        text = text.replace("[site]\n", '[site]\nfallback_language = "en"\n', 1)
    path.write_text(text, "utf-8")
    config = load_config(path, env={})
    if translated:
        for lang in TRANSLATORS:
            translated_catalog(config, lang)
    return config


@pytest.fixture
def site(tmp_path: Path, database_url: str, smtp_server) -> Config:
    """The site on SQLite, then on PostgreSQL, sending through a real SMTP server."""
    return make_site(tmp_path, database_url, smtp_server[1])


@pytest.fixture
def offline_site(tmp_path: Path) -> Config:
    """The site for what needs neither the state database nor a mail server."""
    return make_site(tmp_path, f"sqlite:///{tmp_path}/unused.db", 9)


def expected_subject(config: Config, lang: str, audiences: tuple[str, ...], count: int) -> str:
    """A digest's subject straight from the language's catalog and profile."""
    translations = language(config, lang).translations
    num = format_decimal(count, locale=lang)
    if set(audiences) >= set(config.audiences):
        singular, plural = (
            "Key takeaways: %(num)s new article",
            "Key takeaways: %(num)s new articles",
        )
        return translations.ngettext(singular, plural, count) % {"num": num}
    labels = [config.languages[lang].audiences[a][0] for a in audiences]
    joined = format_list([label[0].lower() + label[1:] for label in labels], locale=lang)
    singular = "Key takeaways %(audiences)s: %(num)s new article"
    plural = "Key takeaways %(audiences)s: %(num)s new articles"
    return translations.ngettext(singular, plural, count) % {"num": num, "audiences": joined}


def parse(raw: bytes) -> EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)  # type: ignore[return-value]


def check_html(page: str, lang: str) -> None:
    """The document says its language and direction, and MJML's inline styles agree."""
    root = lxml.html.fromstring(page)
    assert root.get("lang") == lang
    assert root.get("dir") == text_direction(lang)
    if text_direction(lang) == "rtl":
        assert "direction:ltr" not in page and "direction:rtl" in page
        # The digest's own texts (16px; the small print around them is 13px) start at the right.
        aligned = re.findall(r"font-size:16px;line-height:1.55;text-align:(\w+)", page)
        assert aligned and set(aligned) == {"right"}


def titles(config: Config) -> dict[str, str]:
    """The one article's title in each language."""
    return {
        a.lang: a.title for a in read_articles(config.path(config.site.articles), config.profiles)
    }


def check_digest(
    raw: bytes, lang: str, audiences: tuple[str, ...], config: Config, title: str
) -> None:
    """A digest as a reader's client reads it: exact subject, language and direction."""
    message = parse(raw)
    assert raw.split(b"\r\n\r\n")[0].isascii(), "headers are 7-bit: RFC 2047, not raw UTF-8"
    assert message["Subject"] == expected_subject(config, lang, audiences, 1)
    assert not message.defects
    text, page = message.iter_parts()
    assert not text.defects and not page.defects
    check_html(page.get_content(), lang)
    assert title in text.get_content()
    assert title in lxml.html.fromstring(page.get_content()).text_content()


# -- the tests ---------------------------------------------------------------------------------


def test_text_direction_comes_from_cldr() -> None:
    assert [text_direction(lang) for lang in LANGS] == ["ltr"] * 4 + ["rtl", "ltr"]
    assert text_direction("he") == text_direction("fa") == text_direction("ur") == "rtl"
    assert text_direction("xx-unknown") == "ltr"


def test_subjects_hold_every_character_a_catalog_or_title_may(offline_site: Config) -> None:
    """Composing refuses line breaks and controls only, and the Subject decodes exactly."""
    site = offline_site
    found = read_articles(site.path(site.site.articles), site.profiles)
    rendered = render_digest(select_digest(found, "fr", ["cost"]), site)
    values = {
        "to": "lecteur@example.org",
        "sender": "Synthèse «IA» <digest@news.example.org>",
        "message_id": "<m1@news.example.org>",
        "date": NOW,
        "list_id": "digest.news.example.org",
        "unsubscribe_url": "https://news.example.org/u/t",
        "preferences_url": "https://news.example.org/p/t",
        "view_url": "https://news.example.org/archive/fr/",
    }
    subjects = [
        # The standard library alone folds two encoded-words apart at the space before «.
        "Points clés\xa0: 2\u202f345 nouveaux articles « cités »",
        "„Zitat“ und ‚so‘ – 3 Artikel",
        "📬 أهم النقاط لفرق تحسين التكاليف: \u200f1 مقال 👩\u200d💻",
        "שלום \u200fעולם: 3",
        # ... writes this as it is, and a reader decodes it.
        "=?utf-8?q?looks_encoded?= but is the text itself",
        "\xa0" + "très long sujet " * 12 + "\xa0",
        # ... folds this right after "Subject:", and a reader keeps a leading space.
        "Belangrijkste conclusies voor infrastructuurarchitecten: 1 nieuw artikel",
        "Key takeaways: 1 new article",
    ]
    for subject in subjects:
        raw = compose_message(replace(rendered, subject=subject), **values)
        assert raw.isascii()
        assert parse(raw)["Subject"] == subject
        assert parse(raw)["From"].addresses[0].display_name == "Synthèse «IA»"
        note = RenderedNote(subject, "Bonjour\xa0!\n", "fr")
        for to in ("lecteur@example.org", "josé@exämple.fr"):
            sent = parse(note_bytes(compose_note(note, **_note_values(values, to))))
            assert sent["Subject"] == subject
            assert sent.get_content().replace("\r\n", "\n") == "Bonjour\xa0!\n"
    for bad in (
        "a\r\nBcc: x@y",
        "a\nb",
        "a\rb",
        "a\tb",
        "a\x00b",
        "a\x85b",
        "a\u2028b",
        "a\u2029b",
    ):
        with pytest.raises(HeaderError, match="Subject: control character or line break"):
            compose_message(replace(rendered, subject=bad), **values)
        with pytest.raises(HeaderError, match="Subject: control character or line break"):
            compose_note(RenderedNote(bad, "x\n", "fr"), **_note_values(values, "a@example.org"))


def _note_values(values: dict, to: str) -> dict:
    return {"to": to, "sender": values["sender"], "message_id": "<n1@x.org>", "date": NOW}


def test_a_note_is_7bit_unless_the_address_needs_smtputf8() -> None:
    note = RenderedNote("Confirmez votre abonnement à Syndicate", "Délai\xa0: 7 jours\n", "fr")
    plain = note_bytes(compose_note(note, **_note_values({"sender": "S <s@x.org>"}, "a@b.org")))
    assert plain.isascii()
    assert b"Content-Transfer-Encoding: quoted-printable" in plain
    international = note_bytes(
        compose_note(note, **_note_values({"sender": "S <s@x.org>"}, "josé@b.org"))
    )
    assert "To: josé@b.org".encode() in international  # RFC 6532, the envelope has SMTPUTF8
    assert international.split(b"\r\n\r\n", 1)[1].isascii()
    assert parse(international)["Subject"] == note.subject


def test_feeds_of_every_language(site: Config) -> None:
    store = open_store(site.database_url)
    try:
        report = build_feeds(site, now=NOW, store=store)
    finally:
        store.close()
    assert not [p for p in report.problems if p.severity.name == "ERROR"]
    found = {a.lang: a for a in read_articles(site.path(site.site.articles), site.profiles)}
    out = site.path(site.feeds.out)
    atom = "{http://www.w3.org/2005/Atom}"
    for lang in LANGS:
        feed = lxml.etree.parse(str(out / f"{lang}.atom.xml")).getroot()
        assert feed.get("{http://www.w3.org/XML/1998/namespace}lang") == lang
        assert feed.findtext(f"{atom}entry/{atom}title") == found[lang].title
        rss = lxml.etree.parse(str(out / f"{lang}.rss.xml")).getroot()
        assert rss.findtext("channel/language") == lang
        assert rss.findtext("channel/item/title") == found[lang].title
        document = json.loads((out / f"{lang}.json").read_text("utf-8"))
        assert document["language"] == lang
        assert document["items"][0]["title"] == found[lang].title
    arabic = lxml.etree.parse(str(out / "ar.atom.xml")).getroot()
    assert arabic.findtext(f"{atom}title") == "سينديكيت"
    assert "\u200f2.52" in (out / "ar.atom.xml").read_text("utf-8")  # the mark is kept
    # an entry's content says its direction (a feed reader shows it outside any page)
    assert arabic.findtext(f"{atom}entry/{atom}content").startswith('<div dir="rtl">')
    english = lxml.etree.parse(str(out / "en.atom.xml")).getroot()
    assert "dir=" not in english.findtext(f"{atom}entry/{atom}content")


@contextmanager
def site_client(
    site: Config, send_message: Callable[[Any], None] | None = None
) -> Iterator[TestClient]:
    """The site's web app on its state database and articles, as a reader's browser reaches
    it (mail through ``send_message``, else the site's mailer)."""
    store = open_store(site.database_url)
    found = read_articles(site.path(site.site.articles), site.profiles)
    app = create_app(
        site, store=store, send_message=send_message or messages.message_sender(site),
        articles=lambda: found, secret=SECRET, now=Clock(),
    )  # fmt: skip
    try:
        yield TestClient(app, base_url="https://testserver", follow_redirects=False)
    finally:
        store.close()


def test_article_and_index_pages_say_their_language_and_direction(site: Config) -> None:
    with site_client(site) as client:
        for lang in LANGS:
            page = client.get(f"/{lang}/{SEED_SLUG}/")
            assert page.status_code == 200, page.text
            root = lxml.html.fromstring(page.text)
            assert (root.get("lang"), root.get("dir")) == (lang, text_direction(lang))
            [article] = root.xpath("//article")
            assert (article.get("lang"), article.get("dir")) == (lang, text_direction(lang))
            others = root.xpath("//article//a[@hreflang]")
            assert {(a.get("lang"), a.get("dir")) for a in others} == {
                (other, text_direction(other)) for other in LANGS if other != lang
            }
            index = lxml.html.fromstring(client.get(f"/{lang}/").text)
            assert (index.get("lang"), index.get("dir")) == (lang, text_direction(lang))
        arabic = lxml.html.fromstring(client.get(f"/ar/{SEED_SLUG}/").text)
        assert arabic.findtext(".//h1") == "«ترينيوم3» من أمازون يشعل حرب رقائق الذكاء الاصطناعي"
        assert "آخر تحديث 11 ديسمبر 2025" in arabic.xpath("string(//p[@class='meta'])")


def test_every_digest_variant_previews_in_every_language(
    offline_site: Config, tmp_path: Path
) -> None:
    site = offline_site
    found = read_articles(site.path(site.site.articles), site.profiles)
    out = tmp_path / "preview"
    paths, failures = write_previews(site, found, out, now=NOW)
    assert failures == []
    variants = digest_variants(site)
    assert {lang for lang, _ in variants} == set(LANGS)
    assert len(paths) == 3 * len(variants)
    title = titles(site)
    for lang, audiences in variants:
        key = f"{lang}-{'+'.join(sorted(audiences))}"
        raw = (out / f"{key}.eml").read_bytes()
        check_digest(raw, lang, audiences, site, title[lang])
        check_html((out / f"{key}.html").read_text("utf-8"), lang)
    french = parse((out / "fr-cost.eml").read_bytes())["Subject"]
    assert french == "Points clés pour les équipes d'optimisation des coûts\xa0: 1 nouvel article"
    arabic = parse((out / "ar-cost.eml").read_bytes())["Subject"]
    assert arabic == "📬 أهم النقاط لفرق تحسين التكاليف: 1 مقال جديد"
    japanese = parse((out / "ja-cost.eml").read_bytes())["Subject"]
    assert japanese == "要点（コスト最適化チーム向け）：新着記事1件"


@pytest.mark.parametrize("lang", ["fr", "ar"])
def test_the_digest_command_writes_a_french_or_arabic_digest(site: Config, lang: str) -> None:
    out = site.root / "out"
    result = CliRunner().invoke(
        main,
        ["digest", "--config", str(site.root / "config.toml"), "--lang", lang,
         "--audience", "cost", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    check_digest((out / f"{lang}-cost.eml").read_bytes(), lang, ("cost",), site, titles(site)[lang])


def test_every_variant_reaches_its_reader_through_smtp(site: Config, smtp_server) -> None:
    inbox, _ = smtp_server
    store = open_store(site.database_url)
    groups = {
        (lang, audiences)
        for lang, audiences in [
            *digest_variants(site),
            *((la, ("cost", "strategy")) for la in LANGS),
        ]
    }
    readers = {}
    for n, (lang, audiences) in enumerate(sorted(groups)):
        address = f"reader{n}.{lang}@example.org"
        store.subscribers.add_subscriber(
            address, lang, list(audiences), status="active", consent_source="t", now=NOW
        )
        readers[address] = (lang, tuple(sorted(audiences)))
    try:
        report = issuing.send_digests(site, NOW, mailer=transports.open_mailer(site), store=store)
    finally:
        store.close()
    assert report.refused == []
    assert (report.sent, report.failed, report.uncertain) == (len(readers), 0, 0)
    assert inbox.counts() == {address: 1 for address in readers}
    title = titles(site)
    for address, raw in inbox.received:
        lang, audiences = readers[address]
        check_digest(raw, lang, audiences, site, title[lang])
    [french] = [
        parse(raw) for address, raw in inbox.received if readers[address] == ("fr", ("cost",))
    ]
    assert french["Subject"] == (
        "Points clés pour les équipes d'optimisation des coûts\xa0: 1 nouvel article"
    )
    for lang in LANGS:  # the issue pages the archive shows are the mails' HTML
        pages = list(site.path(site.web.issues).joinpath(lang).glob("*.html"))
        assert len(pages) == len([g for g in groups if g[0] == lang])
        for page in pages:
            check_html(page.read_text("utf-8"), lang)


def test_the_confirmation_mail_in_every_language(site: Config, smtp_server) -> None:
    inbox, _ = smtp_server
    with site_client(site) as client:
        for lang in LANGS:
            data = {"email": f"new.{lang}@example.org", "lang": lang, "audiences": ["cost"]}
            sent = client.post("/subscribe", data=data, headers=SAME_ORIGIN)
            assert sent.status_code in (200, 303)
    assert inbox.counts() == {f"new.{lang}@example.org": 1 for lang in LANGS}
    for address, raw in inbox.received:
        lang = address.split(".")[1].split("@")[0]
        message = parse(raw)
        assert raw.isascii(), "7-bit: headers in RFC 2047, the text quoted-printable"
        title = site.title(lang)
        wanted = language(site, lang).translations.gettext("Confirm your subscription to %(site)s")
        assert message["Subject"] == wanted % {"site": title}
        assert message["Auto-Submitted"] == "auto-generated"
        body = message.get_content()
        assert "https://news.example.org/" in body
        hello = language(site, lang).translations.gettext("Hello,")
        assert body.startswith(hello)
    arabic = next(parse(raw) for address, raw in inbox.received if ".ar@" in address)
    assert arabic["Subject"] == "أكِّد اشتراكك في «سينديكيت»"
    japanese = next(parse(raw) for address, raw in inbox.received if ".ja@" in address)
    assert japanese["Subject"] == "「シンジケート」の購読の確認"
    french = next(parse(raw) for address, raw in inbox.received if ".fr@" in address)
    assert french["Subject"] == "Confirmez votre abonnement à Syndicate"


def test_arabic_articles_keep_their_direction_in_an_english_interface(tmp_path: Path) -> None:
    """Without an Arabic catalog, the fallback's interface is left to right throughout, and
    the articles' own words are marked right to left where they stand."""
    site = make_site(tmp_path, f"sqlite:///{tmp_path}/state.db", 9, translated=False)
    found = read_articles(site.path(site.site.articles), site.profiles)
    rendered = render_digest(select_digest(found, "ar", ["cost"]), site)
    assert rendered.ui_lang == "en"
    check_html(rendered.html, "en")
    page = lxml.html.fromstring(rendered.html)
    [heading] = page.xpath("//h2")
    assert (heading.get("lang"), heading.get("dir")) == ("ar", "rtl")
    assert {(ul.get("lang"), ul.get("dir")) for ul in page.xpath("//ul")} == {("ar", "rtl")}

    with site_client(site, send_message=lambda message: None) as client:
        root = lxml.html.fromstring(client.get(f"/ar/{SEED_SLUG}/").text)
    assert (root.get("lang"), root.get("dir")) == ("en", "ltr")
    [article] = root.xpath("//article")
    assert (article.get("lang"), article.get("dir")) == ("ar", "rtl")
    [meta] = root.xpath("//article/p[@class='meta']")
    assert (meta.get("lang"), meta.get("dir")) == ("en", "ltr")
