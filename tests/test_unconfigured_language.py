"""An article in a language no profile describes: recognised from its text, read by where the
format puts each part, left unpublished with a warning that says what was read, and published
by the block ``syndicate check`` prints for it.

The translations are the sample article in languages without a built-in profile (in
``tests/data/unconfigured``) and the seeds and built-in languages read as if their profile were
missing: each must read as the English original does (its date, slugs, audiences in order, each
audience's bullets and the references its footnote marks point to)."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path

import feedparser
import pytest
from click.testing import CliRunner

from syndicate.build import build_feeds
from syndicate.cli import main
from syndicate.cli.articles import article_report
from syndicate.config import LanguageProfile, builtin_profiles, load_config, parse_config
from syndicate.model import Article, Severity
from syndicate.reader import parse_article, read_articles
from syndicate.reader.parse import UNPUBLISHED, profile_of
from tests.conftest import ARTICLES, DATA, ROOT, SEED_SLUG, TRANSLATED, with_invisible_marks

PROFILES = parse_config({}, root=ROOT, source="(test)", env={}).languages
ENGLISH = next(p for p in ARTICLES.iterdir() if b"\n\nUpdated " in p.read_bytes())
TRANSLATIONS = sorted(TRANSLATED.glob("*.txt"))


# Those whose audience labels share letter groups with the built-in profiles' (in Latin letters,
# and words of a European root): only these are like the known labels, which place a line when
# an audience has none (elsewhere, a line for each audience places them by position).
_LIKE_KNOWN = "ca cs da fi hr hu id it lt lv ms no pl pt ro sk sv tr"
LATIN = [p for p in TRANSLATIONS if p.name[:2] in _LIKE_KNOWN.split()]
BUILT_IN = [*sorted(ARTICLES.glob("*.txt")), DATA / "articles" / "fr-trainium3.txt"]


def read_unconfigured(path: Path, known: dict[str, LanguageProfile]) -> Article:
    """The article as the reader reads it with the profile its structure shows."""
    read = profile_of(path.read_bytes(), known)
    assert read is not None, f"{path.name}: no language or structure recognised"
    lang, profile = read
    article, problems = parse_article(path.read_bytes(), str(path), {**known, lang: profile})
    assert article is not None and article.lang == lang, problems
    assert [p for p in problems if p.severity is Severity.ERROR] == []
    return article


def same_structure(article: Article, original: Article) -> None:
    assert article.updated == original.updated
    assert (article.slug, article.seo.primary_slug) == (original.slug, original.seo.primary_slug)
    assert article.seo.alt_slugs  # a language may have slugs of its own
    assert [t.audience for t in article.takeaways] == [t.audience for t in original.takeaways]
    assert all(len(t.bullets) >= 2 for t in article.takeaways)
    assert {r.number for r in article.references} <= {r.number for r in original.references}
    assert article.summary and article.title
    marks = {part for block in article.blocks for part in block.parts if isinstance(part, int)}
    assert marks and marks <= {r.number for r in article.references}


@pytest.mark.parametrize(
    "path", [*TRANSLATIONS, DATA / "articles" / "es-trainium3.txt"], ids=lambda p: p.name
)
def test_a_translation_without_a_profile_reads_as_the_original(path: Path) -> None:
    original, _ = parse_article(ENGLISH.read_bytes(), str(ENGLISH), PROFILES)
    assert original is not None
    known = {lang: PROFILES[lang] for lang in ("en", "nl", "de")}
    article = read_unconfigured(path, known)
    assert article.lang == path.name.split("-")[0]
    same_structure(article, original)
    # Each part's words are the file's own: none of them is English.
    profile = profile_of(path.read_bytes(), known)[1]
    english = PROFILES["en"]
    assert profile.takeaways and profile.takeaways[0] not in english.takeaways
    assert profile.references and profile.references[0] not in english.references
    assert profile.date_line[0] not in english.date_line
    assert set(profile.audiences) == set(english.audiences)


@pytest.mark.parametrize("path", BUILT_IN, ids=lambda p: p.name)
def test_a_built_in_language_read_without_its_profile_finds_the_profiles_words(path: Path) -> None:
    """The seeds and the French sample, each read as if its language had no profile: the words
    read from the file are those of its built-in profile, and the article is the same."""
    data = path.read_bytes()
    lang = next(lang for lang in PROFILES if parse_article(data, "x", {lang: PROFILES[lang]})[0])
    others = {code: p for code, p in PROFILES.items() if code != lang}
    inferred = read_unconfigured(path, others)
    expected, _ = parse_article(data, str(path), PROFILES)
    assert inferred == expected
    found = profile_of(data, others)[1]
    builtin = PROFILES[lang]
    for part in ("date_line", "takeaways", "references", "seo"):
        assert set(getattr(found, part)) <= set(getattr(builtin, part)), part
    for audience, labels in found.audiences.items():
        assert set(labels) <= set(builtin.audiences[audience])
    fields = found.seo_fields.model_dump(exclude_defaults=True)
    for field, labels in fields.items():
        assert set(labels) <= set(getattr(builtin.seo_fields, field)), field


def test_an_unpublished_language_is_left_out_with_what_was_read(tmp_path: Path) -> None:
    folder = tmp_path / "articles"
    shutil.copytree(ARTICLES, folder)
    for path in TRANSLATIONS[:2]:
        shutil.copy(path, folder)
    found = read_articles(folder, {lang: PROFILES[lang] for lang in ("en", "nl", "de")})
    assert sorted(a.lang for a in found) == ["de", "en", "nl"]
    warned = [p for p in found.problems if p.message.startswith(UNPUBLISHED)]
    assert len(warned) == 2 and not found.has_errors
    for problem in warned:
        assert problem.severity is Severity.WARNING
        assert SEED_SLUG in problem.message and "5 audiences" in problem.message
        assert "2025-12-11" in problem.message


def test_text_no_structure_or_model_can_place_stays_an_unknown_language() -> None:
    seed = ENGLISH.read_text("utf-8")
    # The date line gone: the structure cannot be read, whatever the language.
    headless = seed.replace("Updated December 11, 2025", "Zuletzt geändert", 1).encode()
    article, problems = parse_article(headless, "x", {"nl": PROFILES["nl"]})
    assert article is None
    assert next(p.message for p in problems if p.severity is Severity.ERROR).startswith(
        "unknown language"
    )


def with_the_seeds(tmp_path: Path, files: dict[str, Path]) -> tuple[Path, Path, str]:
    """A folder of the seeds and ``files`` (by the names to give them), and the bundled
    config beside it: the folder, the config's path and its text."""
    folder = tmp_path / "articles"
    shutil.copytree(ARTICLES, folder)
    for name, path in files.items():
        shutil.copy(path, folder / name)
    bundled = (ROOT / "config.toml").read_text("utf-8")
    config_path = tmp_path / "config.toml"
    config_path.write_text(bundled, "utf-8")
    return folder, config_path, bundled


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("lang", "name"),
    [
        ("it", "Italian"),
        ("ja", "Japanese"),
        ("zh", "Chinese"),
        ("ko", "Korean"),
        ("ar", "Arabic"),
        ("fa", "Persian"),
        ("el", "Greek"),
        ("ru", "Russian"),
        ("hi", "Hindi"),
        ("th", "Thai"),
        ("vi", "Vietnamese"),
    ],
)
def test_the_block_check_prints_publishes_the_language(
    tmp_path: Path, lang: str, name: str
) -> None:
    """The publisher's path: check names the language and prints its block; with the block
    pasted and the code added to site.languages, the article is read with no warning and gets
    its own feed, which feedparser reads in its language, linked to its translations."""
    translation = next(p for p in TRANSLATIONS if p.name.startswith(f"{lang}-"))
    folder, config_path, bundled = with_the_seeds(tmp_path, {translation.name: translation})

    code, stdout, stderr = run("check", "--config", str(config_path))
    assert code == 0, stderr
    assert f"{folder / translation.name}:1: warning: {UNPUBLISHED} {name} ('{lang}')" in stderr
    block = stderr[stderr.index(f"[languages.{lang}]") :]
    assert tomllib.loads(block)["languages"][lang]["audiences"].keys() == set(
        PROFILES["en"].audiences
    )
    code, stdout, _ = run("check", "--config", str(config_path), "--json")
    report = json.loads(stdout)
    assert report["unpublished_languages"][lang]["file"] == str(folder / translation.name)
    assert (
        tomllib.loads(block)["languages"][lang] == report["unpublished_languages"][lang]["profile"]
    )

    published = bundled.replace(
        'languages = ["en", "nl", "de"]', f'languages = ["en", "nl", "de", "{lang}"]'
    )
    config_path.write_text(f"{published}\n{block}\n", "utf-8")
    config = load_config(config_path, env={})
    found = read_articles(folder, config.profiles)
    assert not [p for p in found.problems if str(p.file).endswith(translation.name)]
    article = found.get(lang, SEED_SLUG)
    assert article is not None
    assert article == read_unconfigured(folder / translation.name, dict(PROFILES))
    assert report["unpublished"] == [article_report(article)]  # as `check --json` read it

    report = build_feeds(config, folder, tmp_path / "feeds")
    assert f"{lang}.atom.xml" in report.written
    feed = feedparser.parse((tmp_path / "feeds" / f"{lang}.atom.xml").read_bytes())
    assert not feed.bozo and feed.feed.language == lang
    [entry] = feed.entries
    assert entry.title == article.title
    # A Thai date line says 2568, its era's year; a Persian one 20 Azar 1404 (Solar Hijri).
    assert entry.updated.startswith("2025-12-11")
    links = {(link.rel, link.get("hreflang")) for link in entry.links}
    assert links == {("alternate", lang), *(("related", other) for other in ("en", "nl", "de"))}
    english = feedparser.parse((tmp_path / "feeds" / "en.atom.xml").read_bytes())
    assert ("related", lang) in {
        (link.rel, link.get("hreflang")) for link in english.entries[0].links
    }


def test_the_block_check_prints_holds_every_writer_s_words(tmp_path: Path) -> None:
    """Two Korean articles by writers who word the date line, the takeaways heading and the
    audience labels differently ("전략 기획" against "전략 기획을 위한 시사점"): check prints one
    block with both writers' words, under which both read without a warning."""
    written = [DATA / "more" / topic / "ko.txt" for topic in ("memory-squeeze", "water-drought")]
    files = {f"ko-{number}.txt": path for number, path in enumerate(written)}
    folder, config_path, bundled = with_the_seeds(tmp_path, files)

    code, _, stderr = run("check", "--config", str(config_path))
    assert code == 0, stderr
    assert f"To publish 한국어 ({folder / 'ko-0.txt'} and 1 more)" in stderr
    block = stderr[stderr.index("[languages.ko]") :]
    code, stdout, _ = run("check", "--config", str(config_path), "--json")
    report = json.loads(stdout)["unpublished_languages"]["ko"]
    assert report["files"] == [str(folder / "ko-0.txt"), str(folder / "ko-1.txt")]
    assert tomllib.loads(block)["languages"]["ko"] == report["profile"]

    published = bundled.replace(
        'languages = ["en", "nl", "de"]', 'languages = ["en", "nl", "de", "ko"]'
    )
    config_path.write_text(f"{published}\n{block}\n", "utf-8")
    config = load_config(config_path, env={})
    found = read_articles(folder, config.profiles)
    assert found.problems == ()
    read = [a for a in found if a.lang == "ko"]
    assert sorted(len(a.takeaways) for a in read) == [5, 5]


def test_a_built_in_language_outside_site_languages_needs_only_its_code(tmp_path: Path) -> None:
    folder = tmp_path / "articles"
    shutil.copytree(ARTICLES, folder)
    shutil.copy(DATA / "articles" / "fr-trainium3.txt", folder)
    assert "fr" in builtin_profiles()
    code, _, stderr = run("check", "--articles", str(folder), "--config", str(ROOT / "config.toml"))
    assert code == 0, stderr
    assert "warning: not published: written in French ('fr')" in stderr
    assert 'add "fr" to site.languages.' in stderr and "\n[languages.fr]\n" not in stderr


@pytest.mark.parametrize("path", LATIN, ids=lambda p: p.name)
@pytest.mark.parametrize("dropped", ["architects", "ecosystem"])
def test_takeaways_for_fewer_audiences_keep_each_line_with_its_audience(
    path: Path, dropped: str
) -> None:
    """Without one line for each audience, position alone cannot tell: the lines keep the
    audiences' order, and their words' likeness to the known labels places them."""
    known = {lang: PROFILES[lang] for lang in ("en", "nl", "de")}
    whole = read_unconfigured(path, known)
    line = next(t for t in whole.takeaways if t.audience == dropped)
    text = path.read_text("utf-8")
    start = text.index(f"\n\n{line.label}:") + 2
    shorter = text[:start] + text[text.index("\n\n", start) + 2 :]
    data = shorter.encode()
    lang, profile = profile_of(data, known)
    article, _ = parse_article(data, str(path), {**known, lang: profile})
    assert article is not None
    expected = [(t.audience, t.label) for t in whole.takeaways if t.audience != dropped]
    assert [(t.audience, t.label) for t in article.takeaways] == expected


def _one_bullet_a_line(profile: LanguageProfile, text: str) -> str:
    """Each audience's bullets one a line below its label, as Markdown lists them."""
    for label in (label for labels in profile.audiences.values() for label in labels):
        text = re.sub(
            rf"^({re.escape(label)})\s*([:：])\s*(- .+)$",
            lambda found: (
                found[1]
                + found[2]
                + "".join(f"\n- {b.strip()}" for b in f" {found[3]}".split(" - ") if b.strip())
            ),
            text,
            flags=re.M,
        )
    return text


def _without(heading: list[str], text: str) -> str:
    return text.replace(f"\n\n{heading[0]}\n\n", "\n\n", 1) if heading else text


def _joined(heading: list[str], text: str) -> str:
    """The section's heading directly over its first line, with no blank line between."""
    return text.replace(f"\n\n{heading[0]}\n\n", f"\n\n{heading[0]}\n", 1) if heading else text


def _bold_labels(profile: LanguageProfile, text: str) -> str:
    """Each audience label and SEO label in Markdown bold, its colon inside: `**For …:** -`."""
    for label in (label for labels in profile.audiences.values() for label in labels):
        text = re.sub(rf"(?m)^({re.escape(label)})\s*([:：])", r"**\1\2**", text)
    if not profile.seo:
        return text
    body, heading, tail = text.rpartition(f"\n\n{profile.seo[0]}\n\n")
    tail = re.sub(r"(?m)^([^\n:：\d][^\n:：]{1,60}?)\s*([:：])", r"**\1\2**", tail)
    return body + heading + tail


VARIANTS: dict[str, Callable[[LanguageProfile, str], str]] = {
    "bullets one a line": _one_bullet_a_line,
    "no takeaways heading": lambda profile, text: _without(profile.takeaways, text),
    "no references heading": lambda profile, text: _without(profile.references, text),
    "no SEO heading": lambda profile, text: _without(profile.seo, text),
    "takeaways heading over the first line": lambda profile, text: _joined(profile.takeaways, text),
    "references heading over the first one": lambda profile, text: _joined(
        profile.references, text
    ),
    "Markdown headings": lambda profile, text: re.sub(
        r"\n\n([^\n:：\d][^\n:：]{0,59})\n\n", r"\n\n## \1\n\n", text
    ),
    "Windows line ends": lambda profile, text: text.replace("\n", "\r\n"),
    "invisible marks": lambda profile, text: with_invisible_marks(text),
    "rules between parts": lambda profile, text: text.replace("\n\n", "\n\n* * *\n\n"),
    "Markdown footnotes": lambda profile, text: re.sub(
        r"(?m)^(\d+)\. ", r"[^\1]: ", re.sub("[¹²³⁴⁵⁶⁷⁸⁹⁰]+", "", text)
    ),
    "Markdown bold labels": _bold_labels,
    "audience lines as a list": lambda profile, text: re.sub(
        "(?m)^(?:"
        + "|".join(re.escape(label) for labels in profile.audiences.values() for label in labels)
        + r")\s*[:：]",
        lambda found: f"- {found[0]}",
        text,
    ),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("path", TRANSLATIONS, ids=lambda p: p.name)
def test_the_usual_variations_of_the_format_read_alike_without_a_profile(
    path: Path, variant: str
) -> None:
    known = {lang: PROFILES[lang] for lang in ("en", "nl", "de")}
    whole = read_unconfigured(path, known)
    found = profile_of(path.read_bytes(), known)
    assert found is not None
    data = VARIANTS[variant](found[1], path.read_text("utf-8")).encode()
    assert data != path.read_bytes()
    reads_alike(path, data, whole, known)


def reads_alike(path: Path, data: bytes, whole: Article, known: dict[str, LanguageProfile]) -> None:
    """``data``, ``path`` written another way, reads without a profile as ``whole`` (the
    file's own reading) does."""
    found = profile_of(data, known)
    assert found is not None
    lang, profile = found
    article, problems = parse_article(data, str(path), {**known, lang: profile})
    assert article is not None and problems == []
    assert (article.title, article.takeaways) == (whole.title, whole.takeaways)
    assert (article.references, article.seo, article.slug) == (
        whole.references,
        whole.seo,
        whole.slug,
    )


# Japanese is written without spaces: wrapping it at those around Latin words is no wrapping a
# writer does (its lines would end in a label's colon and dash, "…向け：-").
SPACED = [p for p in TRANSLATIONS if not p.name.startswith("ja-")]


@pytest.mark.parametrize("path", SPACED, ids=lambda p: p.name)
def test_a_translation_hard_wrapped_at_72_columns_reads_alike(path: Path) -> None:
    known = {lang: PROFILES[lang] for lang in ("en", "nl", "de")}
    whole = read_unconfigured(path, known)
    wrapped = "\n\n".join(
        textwrap.fill(p, 72, break_long_words=False, break_on_hyphens=False)
        for p in path.read_text("utf-8").split("\n\n")
    ).encode()
    reads_alike(path, wrapped, whole, known)


@pytest.mark.parametrize(
    ("lang", "written", "after", "words"),
    [
        ("ja", "更新日：2025年12月11日", "2025年12月11日更新", "更新"),
        ("zh", "更新日期：2025年12月11日", "2025年12月11日更新", "更新"),
        ("ko", "업데이트: 2025년 12월 11일", "2025년 12월 11일 업데이트", "업데이트"),
        ("ja", "更新日：2025年12月11日", "更新日：令和7年12月11日", "更新日"),
        (
            "it",
            "Aggiornato in data 11 dicembre 2025",
            "Aggiornato l'11 dicembre 2025",
            "Aggiornato l'",
        ),
        (
            "it",
            "Aggiornato in data 11 dicembre 2025",
            "Aggiornato l’11 dicembre 2025",
            "Aggiornato l’",
        ),
    ],
)
def test_date_lines_written_otherwise_read_alike(
    lang: str, written: str, after: str, words: str
) -> None:
    """Chinese, Japanese and Korean may write the date line's words after the date (with no
    space between them in Chinese and Japanese); Japanese may count the year in the era;
    Italian (and Catalan) elide the article before a day that starts with a vowel's sound
    ("l'11 dicembre"), the words then running into the date."""
    path = TRANSLATED / f"{lang}-trainium3.txt"
    known = {code: PROFILES[code] for code in ("en", "nl", "de")}
    whole = read_unconfigured(path, known)
    data = path.read_text("utf-8").replace(f"\n\n{written}\n\n", f"\n\n{after}\n\n", 1).encode()
    assert data != path.read_bytes()
    found, profile = profile_of(data, known)
    assert (found, profile.date_line) == (lang, [words])
    article, problems = parse_article(data, str(path), {**known, lang: profile})
    assert (article, problems) == (whole, [])


@pytest.mark.parametrize("mark", [";", "\u037e"], ids=["semicolon", "Greek question mark"])
def test_a_question_in_greek_is_a_heading(mark: str) -> None:
    """Greek asks with a semicolon (or U+037E, which normalises to one): a line so ended is
    a heading, as one ending in "?" is; in another script it ends a clause."""
    path = TRANSLATED / "el-trainium3.txt"
    known = {lang: PROFILES[lang] for lang in ("en", "nl", "de")}
    text = path.read_text("utf-8").replace(";\n", f"{mark}\n")
    lang, profile = profile_of(text.encode(), known)
    article, _ = parse_article(text.encode(), str(path), {**known, lang: profile})
    assert article is not None
    headings = [block.text for block in article.blocks if block.kind == "heading"]
    assert headings == ["Γιατί έχει σημασία;", "Τι σημαίνει αυτό για τη NVIDIA;"]
    latin = parse_article(
        ENGLISH.read_text("utf-8")
        .replace("\n\nThe performance case\n", "\n\nThe case;\n")
        .encode(),
        str(ENGLISH),
        known,
    )[0]
    assert latin is not None and ("paragraph", "The case;") in [
        (b.kind, b.text) for b in latin.blocks
    ]


@pytest.mark.parametrize("lang", ["zh", "ja"])
def test_footnote_marks_in_full_width_brackets_read_as_superscripts(lang: str) -> None:
    """Chinese and Japanese may write a mark in brackets, full-width ones too ("芯片［1］"),
    and number the references so ("［1］ …"): the same marks and references."""
    path = TRANSLATED / f"{lang}-trainium3.txt"
    known = {code: PROFILES[code] for code in ("en", "nl", "de")}
    whole = read_unconfigured(path, known)
    plain = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
    text = re.sub("[⁰¹²³⁴⁵⁶⁷⁸⁹]+", lambda m: f"［{m[0].translate(plain)}］", path.read_text())
    text = re.sub(r"(?m)^(\d+)\. ", r"［\1］ ", text)
    assert "［1］" in text and "¹" not in text
    found, profile = profile_of(text.encode(), known)
    article, problems = parse_article(text.encode(), str(path), {**known, found: profile})
    assert article is not None and problems == []
    assert article.references == whole.references
    assert [(b.kind, b.notes) for b in article.blocks] == [(b.kind, b.notes) for b in whole.blocks]


def test_a_warning_quotes_the_words_with_their_joiners() -> None:
    """A warning quotes the article's words as written: the zero-width non-joiner Persian
    spells with stays a character, not an escape (``\\u200c``)."""
    path = TRANSLATED / "fa-trainium3.txt"
    article, problems = parse_article(path.read_bytes(), str(path), {"en": PROFILES["en"]})
    assert article is None
    [warning] = [p for p in problems if p.message.startswith(UNPUBLISHED)]
    title = path.read_text("utf-8").split("\n", 1)[0]
    assert "\u200c" in title and f"'{title}'" in warning.message


def test_a_language_is_named_without_the_region_babel_fills_in() -> None:
    """Babel reads "tl" as Filipino of the Philippines: the block check prints names the
    language alone, as the site's language menu shows it."""
    known = {lang: PROFILES[lang] for lang in ("en", "nl", "de")}
    found = profile_of((DATA / "more" / "subsea-cables" / "tl.txt").read_bytes(), known)
    assert found is not None and (found[0], found[1].name) == ("tl", "Filipino")
