"""The parser (reader/parse.py): seeds pinned field by field, every diagnostic, format
variations, robustness, and the summary reading agreeing with the full one."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from syndicate import feeds
from syndicate.config import Config, parse_config
from syndicate.model import Article, Severity
from syndicate.reader import parse as reader_parse
from syndicate.reader import parse_article, read_articles
from syndicate.reader.parse import paragraphs, profile_of, split_marks
from tests.conftest import ARTICLES, DATA, ROOT, TRANSLATED, with_invisible_marks
from tests.golden import assert_golden

SEEDS = {
    "nl": ARTICLES / "000_155b2b46303fac14.txt",
    "de": ARTICLES / "002_dfeedf542ab175c6.txt",
    "en": ARTICLES / "003_f25c1f93821d1bd3.txt",
}


def as_json(article: Article) -> dict:
    """Every field of an article, as the golden files hold it."""
    data = dataclasses.asdict(article)
    data["source"] = Path(article.source).name
    data["updated"] = article.updated.isoformat()
    return data


def parse(config: Config, data: bytes | str, *, body: bool = True):
    raw = data.encode() if isinstance(data, str) else data
    return parse_article(raw, "a.txt", config.profiles, body=body)


def problems(found) -> list[tuple[int | None, str, str]]:
    return [(d.line, str(d.severity), d.message) for d in found]


def seed(lang: str) -> str:
    return SEEDS[lang].read_text("utf-8")


def edited(text: str, edits: list[tuple[str, str]]) -> str:
    """``text`` with each (old, new) edit made once; each old text must be there."""
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    return text


def mutated(lang: str, edits: list) -> str:
    """A seed with line edits applied: (action, line, text[, section line]) each; "join" (or
    any action that does not apply) joins the line with the next."""
    lines = seed(lang).split("\n")
    for action, at, text, *section in edits:
        at %= len(lines) or 1
        if not lines:
            break
        if action == "delete":
            del lines[at]
        elif action == "duplicate":
            lines.insert(at, lines[at])
        elif action == "insert":
            lines.insert(at, text)
        elif action == "section":
            lines[at:at] = ["", section[0], ""]
        elif action == "pad":
            lines[at] = f"{text[:2]} {lines[at]}\t"
        elif action == "wrap" and " " in lines[at]:
            lines[at] = lines[at].replace(" ", "\n", 1)
        elif at + 1 < len(lines):
            lines[at : at + 2] = [lines[at] + lines[at + 1]]
    return "\n".join(lines)


# --- the seeds, pinned ---------------------------------------------------------------------


@pytest.mark.parametrize("lang", sorted(SEEDS))
def test_seed_matches_golden(config: Config, lang: str) -> None:
    article, found = parse_article(SEEDS[lang].read_bytes(), str(SEEDS[lang]), config.profiles)
    assert found == []
    assert article is not None and article.lang == lang
    text = json.dumps(as_json(article), ensure_ascii=False, indent=2) + "\n"
    assert_golden(f"articles/{lang}.json", text.encode())


def test_seed_facts_by_eye(config: Config) -> None:
    """Independent of the goldens: the facts a reader of the seeds sees."""
    de, _ = parse(config, seed("de"))
    assert de is not None
    assert de.title == "Amazons Trainium3 wirft den Fehdehandschuh im KI-Chip-Wettstreit"
    assert str(de.updated) == "2025-12-11"
    assert de.slug == "amazon-trainium3-aws-nvidia-ai-chip-competition"
    assert de.seo.alt_slugs == ("trainium3-vs-nvidia-gpu-enterprise-ai-costs",)
    assert [b.text for b in de.blocks if b.kind == "heading"] == [
        "Das Leistungsargument",
        "Kundenvalidierung",
        "Die Trainium4-Roadmap signalisiert größere Ambitionen",
        "Was der Wettbewerb für Unternehmen bedeutet",
        "Die breiteren Implikationen",
    ]
    architects = de.takeaways_for("architects")
    assert architects is not None and architects.bullets[1] == (
        "Leistung: 4,4-fache Verbesserung gegenüber Trainium2, 4-fach bessere "
        "Energieeffizienz, 5-mal mehr Tokens pro Megawatt"
    )
    cost = de.takeaways_for("cost")
    assert cost is not None and "GPU-Alternativen" in cost.bullets[0]
    assert [len(t.bullets) for t in de.takeaways] == [3, 3, 3, 3, 3]
    assert [t.audience for t in de.takeaways] == [
        "architects",
        "cost",
        "procurement",
        "strategy",
        "ecosystem",
    ]
    # ¹¹ is footnote eleven, not one and one.
    eleven = next(b for b in de.blocks if 11 in b.notes)
    assert eleven.text.startswith("Noch bedeutsamer ist")
    assert [r.number for r in de.references] == list(range(1, 12))
    assert de.references[3].url == (
        "https://www.nextplatform.com/2025/12/03/with-trainium4-aws-will-crank-up-everything-but-the-clocks/"
    )
    assert de.references[1].url is None

    en, _ = parse(config, seed("en"))
    assert en is not None
    assert en.seo.title == "Amazon Trainium3: AWS Challenges NVIDIA's AI Chip Throne"
    assert en.seo.alt_slugs == (
        "aws-trainium3-ultraserver-ai-accelerator-2025",
        "trainium3-vs-nvidia-gpu-enterprise-ai-costs",
        "amazon-ai-chip-trainium3-anthropic-production",
    )
    assert en.summary.startswith("December 2025 Update: Trainium3 shipping on TSMC 3nm")

    nl, _ = parse(config, seed("nl"))
    assert nl is not None and nl.seo.description is not None and nl.seo.title is None
    assert nl.seo.description.startswith("AWS Trainium3 levert 362 petaflops")


def test_summaries_drop_the_body_and_the_references_and_nothing_else(config: Config) -> None:
    full, _ = parse(config, seed("en"))
    light, _ = parse(config, seed("en"), body=False)
    assert full is not None and light is not None and full.references
    assert light.blocks == () and light.references == ()
    assert dataclasses.replace(full, blocks=(), references=()) == light


def test_an_index_reading_keeps_the_audiences_not_their_bullets(config: Config) -> None:
    light, _ = parse(config, seed("nl"), body=False)
    index, _ = parse_article(
        seed("nl").encode(), "a.txt", config.profiles, body=False, bullets=False
    )
    assert light is not None and index is not None
    assert [(t.audience, t.label) for t in index.takeaways] == [
        (t.audience, t.label) for t in light.takeaways
    ]
    assert all(t.bullets == () for t in index.takeaways)
    assert dataclasses.replace(index, takeaways=light.takeaways) == light  # content_hash included


# --- diagnostics -----------------------------------------------------------------------------


def test_empty_file_is_an_error(config: Config) -> None:
    for data in (b"", b"\n \n\t\n"):
        article, found = parse(config, data)
        assert article is None
        assert problems(found) == [(None, "error", "empty file: no text to read")]


def test_bytes_that_are_not_utf8(config: Config) -> None:
    data = seed("en").encode()
    at = data.index(b"Trainium3 shipping")
    article, found = parse(config, data[:at] + b"\xff" + data[at:])
    assert article is None
    assert problems(found) == [
        (
            5,
            "error",
            f"not UTF-8 text: byte 0xff at offset {at} cannot be decoded ('ÿ' in Windows-1252):"
            " save the file as UTF-8",
        )
    ]


def test_a_file_saved_in_windows_1252_names_the_letter(config: Config) -> None:
    """German saved by an older editor: the error names the first umlaut as the letter it is."""
    text = seed("de")
    data = "".join(c for c in text if c.encode("cp1252", "ignore")).encode("cp1252")
    at = data.index("vollständig".encode("cp1252")) + len("vollst")
    assert all(byte < 0x80 for byte in data[:at])  # the first letter beyond ASCII
    article, found = parse(config, data)
    assert article is None
    assert problems(found) == [
        (
            data.count(b"\n", 0, at) + 1,
            "error",
            f"not UTF-8 text: byte 0xe4 at offset {at} cannot be decoded ('ä' in Windows-1252):"
            " save the file as UTF-8",
        )
    ]


@pytest.mark.parametrize("lang", sorted(SEEDS))
def test_bom_crlf_and_utf16_parse_like_the_plain_file(config: Config, lang: str) -> None:
    plain, plain_found = parse(config, seed(lang))
    for variant in (
        b"\xef\xbb\xbf" + seed(lang).encode(),
        seed(lang).replace("\n", "\r\n").encode(),
        b"\xef\xbb\xbf" + seed(lang).replace("\n", "\r\n").encode(),
        seed(lang).encode("utf-16"),  # with its byte order mark, as Windows editors save it
        seed(lang).replace("\n", "\r\n").encode("utf-16"),
        b"\xfe\xff" + seed(lang).encode("utf-16-be"),
    ):
        article, found = parse(config, variant)
        assert found == plain_found == []
        assert article == plain
    truncated = seed(lang).encode("utf-16")[:-1]  # half a character at the end
    assert problems(parse(config, truncated)[1]) == [
        (
            None,
            "error",
            "not UTF-16 text after its byte order mark: bytes at offset "
            f"{len(truncated) - 1} cannot be decoded",
        )
    ]


@pytest.mark.parametrize("lang", sorted(SEEDS))
def test_a_section_heading_with_no_blank_line_under_it(config: Config, lang: str) -> None:
    """The takeaways' and the references' headings directly over their first line (`Key
    Takeaways` over `For …:`, `References` over `1. …`) read as with the blank line."""
    plain, _ = parse(config, seed(lang))
    assert plain is not None
    text = seed(lang)
    first_label = plain.takeaways[0].label
    for under in (first_label, "1. "):
        text = re.sub(rf"\n\n([^\n]+)\n\n({re.escape(under)})", r"\n\n\1\n\2", text, count=1)
    assert text.count("\n\n") == seed(lang).count("\n\n") - 2
    article, found = parse(config, text)
    assert found == []
    assert article == plain and len(article.references) == 11


@pytest.mark.parametrize("lang", sorted(SEEDS))
def test_seo_labels_in_markdown_bold(config: Config, lang: str) -> None:
    """`**URL Slugs:** - Primary: …` and `**SEO Title (56 characters):** …`: the emphasis
    closing each label is not part of its value, and the slugs are read."""
    plain, _ = parse(config, seed(lang))
    assert plain is not None
    text, tail = seed(lang).rsplit("\n\n1. ", 1)
    tail, seo = tail.split("\n\n", 1)[0], tail.split("\n\n", 1)[1]
    bold = re.sub(r"(?m)^([^\n:\d][^\n:]{1,60}?):", r"**\1:**", seo)
    assert bold.count("**") >= 4  # two labels at least
    article, found = parse(config, f"{text}\n\n1. {tail}\n\n{bold}")
    assert found == [] and article == plain


@pytest.mark.parametrize("lang", sorted(SEEDS))
def test_a_file_hard_wrapped_at_72_columns(config: Config, lang: str) -> None:
    """Every paragraph wrapped as a plain-text editor wraps it: the SEO fields go on over
    their lines (`SEO Description: … petaflops` over `per cluster …`), an inline list of
    bullets or slugs goes on past a line that starts or ends with its dash."""
    plain, _ = parse(config, seed(lang))
    wrapped = "\n\n".join(
        textwrap.fill(p, 72, break_long_words=False, break_on_hyphens=False)
        for p in seed(lang).split("\n\n")
    )
    assert wrapped.count("\n") > seed(lang).count("\n") * 2
    article, found = parse(config, wrapped)
    assert found == []
    assert article is not None and plain is not None
    assert (article.seo, article.takeaways) == (plain.seo, plain.takeaways)
    assert [(b.kind, b.parts) for b in article.blocks] == [(b.kind, b.parts) for b in plain.blocks]
    assert dataclasses.replace(article, blocks=()) == dataclasses.replace(plain, blocks=())


@pytest.mark.parametrize("emphasis", ["", "**"])
@pytest.mark.parametrize("lang", sorted(SEEDS))
def test_audience_lines_written_as_a_list(config: Config, lang: str, emphasis: str) -> None:
    """`- For infrastructure architects: - a - b` (or `- **For …:** - a`): each line of a
    list of the audiences is read by the label the profile knows."""
    plain, _ = parse(config, seed(lang))
    assert plain is not None
    text = seed(lang)
    for takeaways in plain.takeaways:
        label = f"\n\n{takeaways.label}:"
        assert label in text
        text = text.replace(label, f"\n\n- {emphasis}{takeaways.label}:{emphasis}", 1)
    article, found = parse(config, text)
    assert found == [] and article is not None
    assert article.takeaways == plain.takeaways


# In a process of its own: another test's server thread may leave garbage of its own meanwhile.
CYCLES = """
import gc, json, sys
from pathlib import Path
from syndicate.config import parse_config
from syndicate.reader import parse_article
texts = json.loads(sys.stdin.read())
profiles = parse_config({}, root=Path(sys.argv[1]), source="(test)", env={}).profiles

def read_each():
    for text in texts:
        for body, bullets in [(True, True), (False, True), (False, False)]:
            parse_article(text.encode(), "x", profiles, body=body, bullets=bullets)

read_each()  # what the first readings import and cache (the language model) is made
gc.collect()
gc.disable()
read_each()
print(gc.collect())
"""


def test_a_reading_leaves_no_reference_cycle() -> None:
    """A build reads with the cycle collector off: whatever a reading leaves in a reference
    cycle (compiled, a nested function and its closure can make one; a re-raised exception
    and its frames another) is never freed. Each kind of reading of each seed, and of files
    with problems, leaves nothing to collect."""
    texts = [seed(lang) for lang in sorted(SEEDS)]
    texts += [SHORT, SHORT[: SHORT.index("SEO Title")], "Title\n\nno date\n\ntext", ""]
    done = subprocess.run(
        [sys.executable, "-c", CYCLES, str(ROOT)],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["0"], done.stderr


def test_missing_date_line(config: Config) -> None:
    text = seed("en").replace("Updated December 11, 2025", "Written by the editors")
    article, found = parse(config, text)
    assert article is None
    assert problems(found) == [
        (
            3,
            "error",
            "missing date line: expected 'Updated' and a date, found 'Written by the editors'",
        )
    ]


def test_unparseable_date(config: Config) -> None:
    text = seed("de").replace("am 11. Dezember 2025", "am 41. Dezember 2025")
    article, found = parse(config, text)
    assert article is None
    assert problems(found) == [
        (3, "error", "cannot read the date in 'Aktualisiert am 41. Dezember 2025'")
    ]


def test_unknown_language(config: Config) -> None:
    text = (
        "El chip de Amazon\n\nActualizado el 11 de diciembre de 2025\n\n"
        "Resumen de la actualización de diciembre.\n\n"
        "Amazon presentó su nuevo chip para inteligencia artificial en Las Vegas este año.\n"
    )
    article, found = parse(config, text)
    assert article is None
    assert problems(found) == [
        (
            3,
            "error",
            "unknown language: no configured language profile (en, nl, de) matches its "
            "date line or headings",
        )
    ]


def test_the_language_model_warns_when_the_profile_and_the_text_disagree(
    config: Config,
) -> None:
    """An English article under a Dutch date line: the profile decides, the model objects
    (in a full read; a summary read does not ask it when one profile matches)."""
    text = seed("en").replace("Updated December 11, 2025", "Bijgewerkt op 11 december 2025")
    article, found = parse(config, text)
    assert article is not None and article.lang == "nl"
    assert (1, "warning", "the 'nl' profile matches, but the text reads like 'en'") in problems(
        found
    )
    light, light_found = parse(config, text, body=False)
    assert light is not None and light.lang == "nl"
    assert not any("reads like" in d.message for d in light_found)


def test_no_takeaways_is_a_warning_and_the_article_stays(config: Config) -> None:
    text = seed("en")
    start, end = text.index("Key takeaways"), text.index("References")
    article, found = parse(config, text[:start] + text[end:])
    assert article is not None and article.takeaways == ()
    assert len(article.references) == 11
    assert problems(found) == [
        (55, "warning", "no key-takeaways section: the article goes to feeds only")
    ]


def test_unknown_audience_label(config: Config) -> None:
    text = seed("en").replace("For procurement teams:", "For marketing teams:")
    article, found = parse(config, text)
    assert article is not None
    assert [t.audience for t in article.takeaways] == [
        "architects",
        "cost",
        "strategy",
        "ecosystem",
    ]
    assert len(found) == 1
    assert found[0].line == 63 and found[0].severity is Severity.WARNING
    assert found[0].message.startswith("unknown audience label 'For marketing teams' (known: ")


@pytest.mark.parametrize(
    ("written", "lang", "reworded", "audience"),
    [
        ("For strategic planning:", "en", "For strategic planners:", "strategy"),
        ("For cost optimization teams:", "en", "For cost optimisation teams:", "cost"),
        ("For the broader ecosystem:", "en", "For broader ecosystem:", "ecosystem"),
        ("For procurement teams:", "en", "For procurement:", "procurement"),
        ("Für Beschaffungsteams:", "de", "Für das Beschaffungsteam:", "procurement"),
        ("Für strategische Planung:", "de", "Für die strategische Planung:", "strategy"),
        ("Voor strategische planning:", "nl", "Voor strategische planners:", "strategy"),
    ],
)
def test_a_reworded_audience_label_is_read_by_its_place_and_words(
    config: Config, written: str, lang: str, reworded: str, audience: str
) -> None:
    """The lines keep the audiences' order: a label the profile does not know, in the place
    of an audience no other line names and with that audience's own words, is read as it,
    with a warning that says so (its readers still get the takeaways)."""
    original, _ = parse(config, seed(lang))
    assert written in seed(lang)
    article, found = parse(config, seed(lang).replace(written, reworded, 1))
    assert article is not None and original is not None
    assert [t.audience for t in article.takeaways] == [t.audience for t in original.takeaways]
    [changed] = [t for t in article.takeaways if t.audience == audience]
    assert changed.label == reworded.rstrip(":")
    assert changed.bullets == original.takeaways_for(audience).bullets
    [warning] = found
    assert warning.severity is Severity.WARNING
    assert warning.message.startswith(
        f"unknown audience label {reworded.rstrip(':')!r} read as {audience!r} by its place"
    )


def test_unknown_labels_are_read_only_where_their_words_tell(config: Config) -> None:
    """Of two unknown lines in the places of two audiences, each is read where its own words
    (not those every label shares, "For", "teams") are like the audience's; one whose words
    are like none is left out."""
    text = edited(
        seed("en"),
        [
            ("For procurement teams:", "For purchasing:"),
            ("For strategic planning:", "For strategic planners:"),
        ],
    )
    article, found = parse(config, text)
    assert article is not None
    assert [t.audience for t in article.takeaways] == [
        "architects",
        "cost",
        "strategy",
        "ecosystem",
    ]
    assert [p.message.split(" (")[0] for p in found] == [
        "unknown audience label 'For strategic planners' read as 'strategy' by its place and words",
        "unknown audience label 'For purchasing'",
    ]


def test_footnote_mark_without_reference(config: Config) -> None:
    text = seed("en").replace("training throughput.", "training throughput.¹²")
    article, found = parse(config, text)
    assert article is not None
    assert problems(found) == [(15, "warning", "footnote mark 12 has no reference")]


def test_control_characters_are_dropped_with_a_warning(config: Config) -> None:
    plain, _ = parse(config, seed("nl"))
    text = (
        seed("nl")
        .replace("AWS lanceerde", "AWS\x07 lanceerde\x00")
        .replace("Klantvalidatie", "Klant\x1bvalidatie", 1)
    )
    article, found = parse(config, text)
    assert article == plain
    assert problems(found) == [
        (7, "warning", "dropped 2 control character(s) (U+0000, U+0007)"),
        (19, "warning", "dropped 1 control character(s) (U+001B)"),
    ]


# --- variations of the format ---------------------------------------------------------------

SHORT = """\
Chips and costs

Updated Dec 3, 2025

December 2025 Update: a short note on chips.

Why it matters?

Cheaper chips change
the economics of
training.¹

Key Takeaways

For infrastructure architects:
- First bullet with a 4-fach hyphen
- Second bullet that wraps
  onto a second line

For cost optimization teams: • one • two

References

1. A source without a link.
2. A source with one https://example.com/a.

SEO Title: Chips and costs explained
Primary slug: chips-and-costs
"""


SHORT_UPDATE = "December 2025 Update: a short note on chips."


def test_variations_one_bullet_a_line_wrapped_text_and_lists(config: Config) -> None:
    article, found = parse(config, SHORT)
    assert problems(found) == []
    assert article is not None
    assert str(article.updated) == "2025-12-03"
    assert [(b.kind, b.text) for b in article.blocks] == [
        ("heading", "Why it matters?"),
        ("paragraph", "Cheaper chips change the economics of training."),
    ]
    assert article.blocks[1].parts == ("Cheaper chips change the economics of training.", 1)
    assert [(t.audience, t.bullets) for t in article.takeaways] == [
        (
            "architects",
            ("First bullet with a 4-fach hyphen", "Second bullet that wraps onto a second line"),
        ),
        ("cost", ("one", "two")),
    ]
    assert [(r.number, r.text, r.url) for r in article.references] == [
        (1, "A source without a link.", None),
        (2, "A source with one", "https://example.com/a"),
    ]
    assert (article.slug, article.seo.title) == ("chips-and-costs", "Chips and costs explained")


def test_references_one_a_line_and_seo_heading(config: Config) -> None:
    assert "link.\n2." in SHORT  # its references are one a line
    article, found = parse(config, SHORT.replace("\nSEO Title", "\nSEO Elements\n\nSEO Title"))
    assert problems(found) == []
    assert article is not None and [r.number for r in article.references] == [1, 2]
    assert article.seo.title == "Chips and costs explained"


def test_title_and_date_without_blank_line(config: Config) -> None:
    text = SHORT.replace("Chips and costs\n\nUpdated", "Chips and costs\nUpdated")
    article, found = parse(config, text)
    assert problems(found) == []
    assert article is not None and article.title == "Chips and costs"
    assert str(article.updated) == "2025-12-03"


def test_missing_seo_tail_takes_the_slug_from_the_title(config: Config) -> None:
    text = SHORT[: SHORT.index("SEO Title")]
    article, found = parse(config, text)
    assert article is not None and article.slug == "chips-and-costs"
    assert problems(found) == [
        (1, "warning", "no primary slug in the SEO tail; using 'chips-and-costs' from the title")
    ]


@pytest.mark.parametrize(
    ("title", "slug"),
    [
        ("Чипы и цены", "chipy-i-tseny"),
        ("Τα τσιπ και το κόστος", "ta-tsip-kai-to-kostos"),
        ("芯片与成本", "xin-pian-yu-cheng-ben"),
        ("Straße, Złoty & København", "strasse-zloty-kobenhavn"),
    ],
)
def test_a_title_in_any_script_gives_a_slug_a_revision_keeps(
    config: Config, title: str, slug: str
) -> None:
    """With no primary slug, the slug is the title spelt in Latin letters: a title in another
    script gives one too, and a revised text and date keep it (its entry's id)."""
    text = SHORT[: SHORT.index("SEO Title")].replace("Chips and costs", title, 1)
    article, _ = parse(config, text)
    revised, _ = parse(config, text.replace("Dec 3", "Dec 9").replace("• two", "• three"))
    assert article is not None and revised is not None
    assert article.slug == revised.slug == slug


def test_takeaways_written_inline_split_only_on_spaced_hyphens(config: Config) -> None:
    text = SHORT.replace(
        "For cost optimization teams: • one • two",
        "For cost optimization teams: - GPU-Alternativen stay - 4-fach - x-y - last",
    )
    article, _ = parse(config, text)
    assert article is not None
    cost = article.takeaways_for("cost")
    assert cost is not None and cost.bullets == ("GPU-Alternativen stay", "4-fach", "x-y", "last")


def test_paragraph_lines_count_blank_runs() -> None:
    found = paragraphs("\n\nA\nb\n\n \n\n\nC\n")
    assert [(p.text, p.line, p.rows) for p in found] == [("A b", 3, ("A", "b")), ("C", 9, ("C",))]


def _paragraphs_by_regex(text: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """The plain definition: paragraphs are what blank lines (white space only) separate."""
    found, line = [], 1
    for piece in re.split(r"(\n\s*\n)", text):
        rows = [row.strip() for row in piece.split("\n")]
        if any(rows) and not re.fullmatch(r"\n\s*\n", piece):
            skipped = next(i for i, row in enumerate(rows) if row)
            kept = tuple(row for row in rows if row)
            found.append((" ".join(kept), line + skipped, kept))
        line += piece.count("\n")
    return found


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("ab: \t\n\u00a0\u2028\x0c\x85"), max_size=60))
def test_paragraphs_are_runs_of_lines_that_are_not_blank(text: str) -> None:
    found = [(p.text, p.line, p.rows) for p in paragraphs(text)]
    assert found == _paragraphs_by_regex(text)


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(
            "a\n\t\r\x00\x1f\x7f\x80\x85\x9f\xa0\xad\xb9\u0301\ufeff\uffff\u2074"
            # invisible marks, the joiners that stay, and their byte neighbours
            "\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202e\u2060\u2064\u2066"
            "\u2069\u200a\u2010\u2013\u201c\u2029\u202f\u2065\u206a\u060c\u180d"
        ),
        max_size=30,
    )
)
def test_cleaning_a_clean_file_skips_only_what_changes_nothing(text: str) -> None:
    """Given the bytes, ``clean`` skips the character-level work when they look clean: it
    must give exactly what the full work gives, and the same warnings."""
    quick: list[tuple[int, str]] = []
    full: list[tuple[int, str]] = []
    assert reader_parse.clean(text, quick, text.encode()) == reader_parse.clean(text, full)
    assert quick == full


def test_invisible_marks_go_where_they_would_hide_the_format() -> None:
    """A soft hyphen goes anywhere, a direction mark or a zero-width space at a line's ends
    and a zero-width space beside a space; within a line a direction mark stays (it orders a
    number in Arabic), as do a zero-width space between Thai words and the joiners Persian
    ("می‌شود", U+200C) and emoji sequences (U+200D) are spelt with."""
    warn: list[tuple[int, str]] = []
    text = (
        "\u200fInfra\u00adstruktur:\u200b -\u200b a\u200e\n"
        "\u2067تقدّم \u200f2.52 ไทย\u200bภาษา می\u200cشود 👩\u200d💻\u2069"
    )
    assert reader_parse.clean(text, warn, text.encode()) == (
        "Infrastruktur: - a\nتقدّم \u200f2.52 ไทย\u200bภาษา می\u200cشود 👩\u200d💻"
    )
    assert warn == []


def test_a_quotation_in_the_body_is_one(config: Config) -> None:
    """Lines that each start with ">" (Markdown's quotation) are a quoted paragraph, even a
    short one that would otherwise read as a heading."""
    quoted = "> We fit the same compute\n>in a third of the floor.¹\n\n> Less is more"
    text = SHORT.replace("Cheaper chips change\n", f"{quoted}\n\nCheaper chips change\n")
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert [(b.kind, b.parts) for b in article.blocks[1:3]] == [
        ("quote", ("We fit the same compute in a third of the floor.", 1)),
        ("quote", ("Less is more",)),
    ]


def test_labels_with_the_typographic_apostrophe_are_the_profiles(config: Config) -> None:
    """A word processor types ’ where the French profile has ' ("Pour l'écosystème au sens
    large"): the labels are the same."""
    typed = (DATA / "articles" / "fr-trainium3.txt").read_text("utf-8")
    assert typed.count("'") > 20
    profiles = {"fr": config.languages["fr"]}
    article, found = parse_article(typed.replace("'", "’").encode(), "a.txt", profiles)
    assert problems(found) == [] and article is not None
    assert [t.audience for t in article.takeaways] == list(config.languages["en"].audiences)


@pytest.mark.parametrize(
    "update",
    [
        "January 2026 update — a short note on chips.",
        "Update, January 2026 – a note.",
        "Aktualizacja z lutego 2026 r.: krótka notatka.",
        "2025. decemberi frissítés: rövid megjegyzés.",
    ],
)
def test_an_update_label_with_a_dash_or_an_abbreviation_is_the_summarys(
    config: Config, update: str
) -> None:
    """The summary's "<Month year> Update" label ends at a dash too, and its words may hold an
    abbreviation's period: the paragraph is the summary, not the body's first paragraph."""
    article, found = parse(
        config, SHORT.replace("December 2025 Update: a short note on chips.", update)
    )
    assert problems(found) == [] and article is not None
    assert article.summary == update
    assert article.blocks[0].text == "Why it matters?"


@pytest.mark.parametrize(
    "opening",
    [
        "In 2025 — the year of the chip — costs fell.",
        "Costs fell in 2025. Then: chips.",
    ],
)
def test_a_first_paragraph_with_a_year_is_no_update_label(config: Config, opening: str) -> None:
    article, _ = parse(config, SHORT.replace(SHORT_UPDATE, opening))
    assert article is not None
    assert (article.summary, article.blocks[0].text) == (opening, opening)


def test_a_table_in_the_body_is_its_rows(config: Config) -> None:
    """A Markdown table is its head row and body rows, the rule under the head left out, a
    footnote mark in a cell a mark and a cell's own pipe escaped; lines with pipes and no rule
    under the first are prose."""
    table = (
        "| Chip | FP8 | HBM |\n|:---|---:|:-:|\n| Trainium3 | 2.52¹ | 144GB |\n"
        "| Trainium4 \\| planned | ~15 | 288GB |"
    )
    prose = "Cost | per chip\nfalls | fast"
    text = SHORT.replace("Cheaper chips change\n", f"{table}\n\n{prose}\n\nCheaper chips change\n")
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert [(b.kind, b.parts) for b in article.blocks[1:5]] == [
        ("head", ("Chip | FP8 | HBM",)),
        ("row", ("Trainium3 | 2.52", 1, " | 144GB")),
        ("row", ("Trainium4 \\| planned | ~15 | 288GB",)),
        ("paragraph", ("Cost | per chip falls | fast",)),
    ]


@pytest.mark.parametrize(
    ("written", "kinds"),
    [
        ("11. Dezember 2025 markierte den Start.", ["paragraph"]),
        ("Der Termin steht fest:\n11. Dezember 2025 ist der Tag.", ["paragraph"]),
        ("Drei Schritte:\n3. drei\n4. vier", ["paragraph", "numbered", "numbered"]),
        ("1. Nur einer, ein ganzer Satz.", ["numbered"]),
    ],
)
def test_a_number_that_starts_no_list_stays_prose(
    config: Config, written: str, kinds: list[str]
) -> None:
    """German writes a date with a number and a full stop ("11. Dezember"): one such line is
    no list, unless it is its first item; two numbered lines are one."""
    article, found = parse(
        config,
        SHORT.replace(
            "Cheaper chips change\nthe economics of\n",
            f"{written}\n\nCheaper chips change\nthe economics of\n",
        ),
    )
    assert article is not None and problems(found) == []
    assert [b.kind for b in article.blocks[1:-1]] == kinds


@pytest.mark.parametrize(
    ("lang", "line"),
    [
        ("en", "Published December 1, 2025 · Updated December 11, 2025"),
        ("en", "Published: December 1, 2025 | Updated: December 11, 2025"),
        ("en", "By the research desk · updated December 11, 2025"),
        ("nl", "Gepubliceerd op 1 december 2025 · Bijgewerkt op 11 december 2025"),
        ("de", "Veröffentlicht am 1. Dezember 2025 | Aktualisiert am 11. Dezember 2025"),
    ],
)
def test_the_date_after_the_date_lines_words_is_the_update(
    config: Config, lang: str, line: str
) -> None:
    """A date line that names the first publication or the author before its words reads
    the date those words give, as the plain line does."""
    text = seed(lang)
    head, _, rest = text.split("\n\n", 2)
    expected = parse(config, text)
    assert parse(config, f"{head}\n\n{line}\n\n{rest}") == expected
    assert expected[0] is not None and str(expected[0].updated) == "2025-12-11"


def test_split_marks() -> None:
    assert split_marks("a.¹ b.¹¹") == ("a.", 1, " b.", 11)
    assert split_marks("x²³ y") == ("x", 23, " y")
    assert split_marks("a.[1] b [12]. c[^3]") == ("a.", 1, " b", 12, ". c", 3)
    assert split_marks("in 2025 [sic] x[1234]") == ("in 2025 [sic] x[1234]",)
    assert split_marks("a.¹ [2] b") == ("a.", 1, 2, " b")
    assert split_marks("芯片［1］，成本［12］。") == ("芯片", 1, "，成本", 12, "。")


def test_readings_with_new_profiles_each_time_hold_a_bounded_cache(config: Config) -> None:
    """A long-running process may make its profiles' mapping for each reading (a property
    that builds it, a reloaded config): what is cached by it stays bounded."""
    limit = reader_parse._CACHED_PROFILES
    for _ in range(limit + 5):
        article, _ = parse_article(seed("en").encode(), "a.txt", dict(config.profiles))
        assert article is not None
    assert 0 < len(reader_parse._DATE_WORDS) <= limit


def _bracketed(text: str, mark: str, number: str) -> str:
    """``text`` with each footnote mark written ``mark`` and each reference numbered
    ``number`` (``{}`` for the number)."""
    plain = str.maketrans(reader_parse.SUPERSCRIPTS, "0123456789")
    text = re.sub(
        f"[{reader_parse.SUPERSCRIPTS}]+", lambda m: mark.format(m[0].translate(plain)), text
    )
    return re.sub(r"(?m)^(\d+)\. ", lambda m: number.format(m[1]), text)


@pytest.mark.parametrize(
    ("mark", "number"),
    [("[{}]", "{}. "), (" [{}]", "[{}] "), ("[^{}]", "[^{}]: ")],
    ids=["brackets", "spaced, references in brackets", "Markdown footnotes"],
)
@pytest.mark.parametrize("lang", SEEDS)
def test_footnote_marks_in_brackets_read_as_superscripts(
    config: Config, lang: str, mark: str, number: str
) -> None:
    """Marks written as plain text or Markdown writes them ("memory.[1]", "memory [1].",
    "memory[^1]", with "[^1]: …" for the reference) point to the same references."""
    whole, _ = parse(config, seed(lang))
    assert whole is not None and any(block.notes for block in whole.blocks)
    text = _bracketed(seed(lang), mark, number)
    assert text != seed(lang) and "¹" not in text
    article, found = parse(config, text)
    assert problems(found) == []
    assert article is not None and article.references == whole.references
    assert [(b.kind, b.notes, b.text.replace(" .", ".")) for b in article.blocks] == [
        (b.kind, b.notes, b.text) for b in whole.blocks
    ]
    checked = parse_article(text.encode(), "a.txt", config.profiles, blocks=False)  # as `check`
    assert checked[0] is not None and problems(checked[1]) == []


def test_a_mark_in_brackets_without_its_reference_is_reported(config: Config) -> None:
    text = SHORT.replace("training.¹", "training [3].")
    article, found = parse(config, text)
    assert article is not None and article.blocks[1].parts[-2:] == (3, ".")
    expected = [(9, "warning", "footnote mark 3 has no reference")]
    assert problems(found) == expected
    checked = parse_article(text.encode(), "a.txt", config.profiles, blocks=False)  # as `check`
    assert problems(checked[1]) == expected


@pytest.mark.parametrize("rule", ["---", "***", "* * *", "___", "- - -"])
def test_a_rule_between_parts_reads_as_a_blank_line(config: Config, rule: str) -> None:
    """Markdown's thematic break, between any two parts, only sets them apart."""
    whole, _ = parse(config, seed("en"))
    article, found = parse(config, seed("en").replace("\n\n", f"\n\n{rule}\n\n"))
    assert problems(found) == []
    assert same_but_lines(article, whole)


def test_headings_underlined_read_as_headings(config: Config) -> None:
    """A heading underlined (Markdown's "setext" headings) reads as the heading alone."""
    whole, _ = parse(config, seed("de"))
    count = itertools.count()
    underlined = re.sub(
        r"(?<=\n\n)([^\n:\d][^\n:]{0,59})(?=\n\n)",
        lambda m: f"{m[1]}\n{'=-'[next(count) % 2] * len(m[1])}",
        seed("de"),
    )
    assert underlined.count("\n----") > 2 and underlined.count("\n====") > 2
    article, found = parse(config, underlined)
    assert problems(found) == []
    assert same_but_lines(article, whole)


def same_but_lines(article: Article | None, whole: Article) -> bool:
    """Whether ``article`` is ``whole`` but for the lines its blocks start on."""
    assert article is not None
    blocks = [(b.kind, b.parts) for b in article.blocks]
    return (blocks, dataclasses.replace(article, blocks=())) == (
        [(b.kind, b.parts) for b in whole.blocks],
        dataclasses.replace(whole, blocks=()),
    )


def test_slugs_listed_with_asterisks(config: Config) -> None:
    """ "URL Slugs: * Primary: … * Alt 1: …": a list, not emphasis around the value."""
    whole, _ = parse(config, seed("en"))
    tail = seed("en").rindex("URL Slugs:")
    text = seed("en")[:tail] + seed("en")[tail:].replace(" - ", " * ")
    article, found = parse(config, text)
    assert problems(found) == []
    assert (article.slug, article.seo) == (whole.slug, whole.seo)


# --- a language that is not built in ------------------------------------------------------

FRENCH = """\
La puce d'Amazon relance la guerre des processeurs

Mis à jour le 3 mars 2026

Mise à jour de mars 2026 : la nouvelle puce est livrée aux premiers clients.

Les performances

Amazon affirme que sa nouvelle puce réduit de moitié le coût de l'entraînement des modèles.¹

Points clés

Pour les architectes d'infrastructure : - Bande passante mémoire doublée - Réseau plus rapide

Pour les équipes achats : - Coûts réduits de 50 % selon Amazon

Références

1. Amazon. « Trainium3 ». https://www.aboutamazon.com/news

Slug principal : puce-amazon-trainium3
"""

FRENCH_BLOCK = """
[site]
languages = ["en", "fr"]

[languages.fr]
name = "Français"
date_line = ["Mis à jour le"]
takeaways = ["Points clés"]
references = ["Références"]

[languages.fr.seo_fields]
primary_slug = ["Slug principal"]

[languages.fr.audiences]
architects = ["Pour les architectes d'infrastructure"]
procurement = ["Pour les équipes achats"]

[languages.fr.audience_names]
architects = "Architectes d'infrastructure"
procurement = "Équipes achats"
"""


def test_adding_a_language_is_a_config_block(tmp_path: Path) -> None:
    from syndicate.config import load_config

    (tmp_path / "config.toml").write_text(FRENCH_BLOCK, "utf-8")
    (tmp_path / "articles").mkdir()
    (tmp_path / "articles" / "puce.txt").write_text(FRENCH, "utf-8")
    shutil.copy(SEEDS["en"], tmp_path / "articles")
    config = load_config(tmp_path / "config.toml", env={})
    found = read_articles(config.path(config.site.articles), config.profiles)
    assert found.problems == ()
    fr = found.get("fr", "puce-amazon-trainium3")
    assert fr is not None
    assert fr.title == "La puce d'Amazon relance la guerre des processeurs"
    assert str(fr.updated) == "2026-03-03"
    assert fr.summary.startswith("Mise à jour de mars 2026 :")
    assert [(b.kind, b.text) for b in fr.blocks] == [
        ("heading", "Les performances"),
        (
            "paragraph",
            "Amazon affirme que sa nouvelle puce réduit de moitié le coût de l'entraînement "
            "des modèles.",
        ),
    ]
    assert [(t.audience, t.bullets) for t in fr.takeaways] == [
        ("architects", ("Bande passante mémoire doublée", "Réseau plus rapide")),
        ("procurement", ("Coûts réduits de 50 % selon Amazon",)),
    ]
    assert fr.references[0].url == "https://www.aboutamazon.com/news"
    assert found.get("en", "amazon-trainium3-aws-nvidia-ai-chip-competition") is not None


# --- robustness -----------------------------------------------------------------------------


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_give_diagnostics_not_exceptions(config: Config, data: bytes) -> None:
    article, found = parse(config, data)
    assert article is not None or any(d.severity is Severity.ERROR for d in found)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=2000))
def test_arbitrary_text_gives_diagnostics_not_exceptions(config: Config, text: str) -> None:
    article, found = parse(config, text)
    assert article is not None or any(d.severity is Severity.ERROR for d in found)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lang=st.sampled_from(sorted(SEEDS)),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["delete", "duplicate", "insert", "join"]),
            st.integers(min_value=0, max_value=200),
            st.text(max_size=40),
        ),
        max_size=8,
    ),
)
def test_mutated_seeds_never_crash(config: Config, lang: str, edits: list) -> None:
    article, found = parse(config, mutated(lang, edits))
    assert article is not None or any(d.severity is Severity.ERROR for d in found)


# --- the summary reading agrees with the full one --------------------------------------------


STRAY = "\nA line without a label.\n"


def assert_summary_agrees(config: Config, text: str) -> None:
    """``body=False`` gives the full reading's article without blocks and references, and the
    same diagnostics except the warnings about them (footnote marks, repeated references) and
    the language model's second opinion."""
    full, full_found = parse(config, text)
    light, light_found = parse(config, text, body=False)
    expected = full if full is None else dataclasses.replace(full, blocks=(), references=())
    assert light == expected
    # An index reading (no bullets) says the same, bullets aside.
    index, index_found = parse_article(
        text.encode(), "a.txt", config.profiles, body=False, bullets=False
    )
    assert index_found == light_found
    assert (index and dataclasses.replace(index, takeaways=light.takeaways)) == light
    assert index is None or [(t.audience, t.label, ()) for t in light.takeaways] == [
        (t.audience, t.label, t.bullets) for t in index.takeaways
    ]
    # A check's reading (the body read for its problems, no blocks kept) says all the full
    # reading says.
    checked, checked_found = parse_article(text.encode(), "a.txt", config.profiles, blocks=False)
    assert checked_found == full_found
    assert checked == (full and dataclasses.replace(full, blocks=()))
    assert light_found == [
        d
        for d in full_found
        if not d.message.startswith("footnote mark")
        and "appears twice" not in d.message
        and "but the text reads like" not in d.message
    ]


@pytest.mark.parametrize(
    "text",
    [
        SHORT,
        SHORT.replace("Key Takeaways\n\n", ""),
        SHORT[: SHORT.index("SEO Title")],
        seed("en")
        .replace("\n\n", "\n  \n \n", 9)
        .replace("specifications", "specifications  \n   wrapped"),
        seed("de").replace("\nReferences\n", "\n"),
        seed("nl").replace("Belangrijkste conclusies", "Belangrijkste punten")
        + "\n\nReferenties\n\n1. x\n",
        seed("en").replace("\n\nThe performance case\n\n", "\n\nFor cost teams: a label\n\n"),
        seed("en").replace("\n\nThe performance case\n\n", "\n\n  Key takeaways:  \n\n"),
        seed("en").replace("\n\nThe performance case\n\n", "\n\nKEY\n   TAKEAWAYS\n\n"),
        seed("en").replace("\n\nThe performance case\n\n", "\n\nReferences\n\n"),
        # Headings that only white space makes longer than a heading can be:
        seed("en").replace("\nKey takeaways\n", "\n" + " " * 90 + "Key takeaways\n" + STRAY),
        seed("en").replace("\nKey takeaways\n", "\nKey takeaways" + " " * 90 + "\n" + STRAY),
        seed("en").replace("\nKey takeaways\n", "\nKey" + " " * 90 + "\ntakeaways\n" + STRAY),
        seed("en").replace("Updated December 11, 2025", "Updated 31 Februari 2025"),
        seed("de").replace("\n\n", "\r\n\r\n"),
        # Footnote marks no reference answers, in a paragraph of several lines:
        seed("en").replace("training throughput.", "training\n  throughput.¹²  \n³⁴ and"),
        "\n\n" + seed("de"),
        seed("en") + "\n\n   \n",
    ],
)
def test_the_summary_reading_agrees_on_variations(config: Config, text: str) -> None:
    assert_summary_agrees(config, text)


_SECTION_LINES = [
    "Key takeaways",
    "References",
    "SEO Elements",
    "For cost optimization teams: - a - b",
    "For infrastructure architects:",
    "1. Someone. https://example.com/x",
    "Primary slug: another-slug",
    "  ",
    "",
]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lang=st.sampled_from(sorted(SEEDS)),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["delete", "duplicate", "insert", "section", "join", "pad", "wrap"]),
            st.integers(min_value=0, max_value=200),
            st.text(max_size=40),
            st.sampled_from(_SECTION_LINES),
        ),
        max_size=8,
    ),
)
def test_the_summary_reading_agrees_on_mutated_seeds(
    config: Config, lang: str, edits: list
) -> None:
    assert_summary_agrees(config, mutated(lang, edits))


@settings(max_examples=500, deadline=None)
@example(raw="²¹")  # a run of marks is one number, with no text after it
@example(raw=" \n 12) x")
@given(
    raw=st.text(
        alphabet=st.sampled_from(list("12[]().: \t\n¹²³x-")) | st.characters(codec="utf-8"),
        max_size=30,
    )
)
def test_a_reference_is_recognised_as_written_as_on_its_first_line(raw: str) -> None:
    """The summary reading counts references on the text as written; it must agree with the
    full reading, which parses each first line."""
    as_written = reader_parse._REF_HEAD.match(raw) is not None
    assert as_written == (reader_parse._reference(reader_parse._first_row(raw)) is not None)


@settings(max_examples=500, deadline=None)
@example(text="¹⁰ x ⁰ ²¹")
@example(text="5 m² ²")
@given(
    text=st.text(
        alphabet=st.sampled_from(list(reader_parse.SUPERSCRIPTS + "x m \n\u00a0«¹"))
        | st.characters(codec="utf-8"),
        max_size=40,
    )
)
def test_a_check_finds_the_runs_of_marks_the_full_reading_finds(text: str) -> None:
    """The check looks for footnote marks in the body's bytes; it must find the runs the full
    reading's regex finds in its text (superscript digits: a mark in brackets sends the check
    to the regex), no fewer, and no more but a unit's square or cube (which, unanswered, sends
    the check to the regex too)."""
    found = reader_parse._MARKS.findall(text)
    expected = {raised.encode() for _, raised, *_ in found if raised}
    units = {unit[-1].encode() for unit, *_ in found if unit}
    assert expected <= reader_parse._mark_runs(text.encode()) <= expected | units


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    word=st.sampled_from(["Updated", "Bijgewerkt op", "Aktualisiert am", "Update", ""]),
    rest=st.text(alphabet=st.sampled_from(list("ab _:-.1 ")) | st.characters(), max_size=12),
    tail=st.sampled_from(["", " updated", "2025年updated", "bijgewerkt op", "x am"]),
)
def test_date_lines_are_found_as_trying_every_profile_finds_them(
    config: Config, word: str, rest: str, tail: str
) -> None:
    """The date words are looked up by their first word; the answer is the plain search's
    (of words before the date, else after it)."""
    head = reader_parse._fold(f"{word}{rest}{tail}"[:80])
    plain = {
        lang
        for lang, profile in config.profiles.items()
        if reader_parse._folded_starts_with(head, reader_parse._markers(profile).date_line)
    } or {
        lang
        for lang, profile in config.profiles.items()
        for phrase in reader_parse._markers(profile).date_line
        if len(head) < 80 and reader_parse._folded_ends_with(head, phrase)
    }
    assert reader_parse._dated((head,), config.profiles) == plain


# -- a folder a person edits while it is read ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "heading"),
    [
        ("The performance case", True),
        ("Is this the end of CUDA?", True),
        ("Trainium3 ships. Is this the end of CUDA?", False),
        ("性能面での主張", True),
        ("这一数字意味着性能提升了 4.4 倍。", False),
        ("数字は何を意味するのか？", True),
        ("速い。本当に速いのか？", False),
        ("प्रदर्शन का पक्ष", True),
        ("ये आंकड़े प्रदर्शन में 4.4 गुना सुधार दर्शाते हैं।", False),
        ("ये आंकड़े बड़े हैं। क्या यह अंत है?", False),
        ("این اعداد بزرگ هستند۔", False),
        ("ဒီကိန်းဂဏန်းတွေက ကြီးတယ်။", False),
        ("Trainium3 ships", True),
    ],
)
def test_a_line_that_ends_like_a_sentence_in_its_script_is_no_heading(
    text: str, heading: bool
) -> None:
    """Body headings are told from short paragraphs by how they end, in each script's marks:
    a Japanese or Hindi sentence of 30 characters is no heading."""
    assert reader_parse._is_heading(reader_parse.Paragraph(text, 1, (text,))) is heading


MARKDOWN = {
    "title": [("Amazon's Trainium3 throws", "# Amazon's Trainium3 throws")],
    "bold title": [
        (
            "Amazon's Trainium3 throws down the gauntlet in the AI chip wars",
            "**Amazon's Trainium3 throws down the gauntlet in the AI chip wars**",
        )
    ],
    "takeaways heading": [("\n\nKey takeaways\n\n", "\n\n## Key takeaways\n\n")],
    "bold takeaways heading": [("\n\nKey takeaways\n\n", "\n\n**Key takeaways**\n\n")],
    "body headings": [
        ("\n\nThe performance case\n\n", "\n\n## The performance case\n\n"),
        ("\n\nCustomer validation\n\n", "\n\n### Customer validation ###\n\n"),
    ],
    "tail headings": [
        ("\n\nReferences\n\n", "\n\n## References\n\n"),
        ("\n\nSEO Elements\n\n", "\n\n**SEO Elements:**\n\n"),
    ],
}


@pytest.mark.parametrize("variant", MARKDOWN)
@pytest.mark.parametrize("body", [True, False])
def test_markdown_marks_around_a_title_or_heading_read_alike(
    config: Config, variant: str, body: bool
) -> None:
    """Some writers mark a heading as Markdown would: the article reads as without them."""
    expected, _ = parse(config, seed("en"), body=body)
    assert parse(config, edited(seed("en"), MARKDOWN[variant]), body=body) == (expected, [])


HEADINGS = {
    "takeaways": [("\n\nKey takeaways\n\n", "\n\nWhat it means\n\n")],
    "references": [("\n\nReferences\n\n", "\n\nNotes\n\n")],
    "SEO tail": [("\n\nSEO Elements\n\n", "\n\nPublishing details\n\n")],
    "all three": [
        ("\n\nKey takeaways\n\n", "\n\nKey insights\n\n"),
        ("\n\nReferences\n\n", "\n\nBibliography\n\n"),
        ("\n\nSEO Elements\n\n", "\n\nSEO metadata\n\n"),
    ],
}


@pytest.mark.parametrize("variant", HEADINGS)
@pytest.mark.parametrize("body", [True, False])
def test_section_headings_in_words_the_profile_does_not_know_read_alike(
    config: Config, variant: str, body: bool
) -> None:
    """A short line just above the takeaways' first label, the first numbered reference or
    the first SEO field is that section's heading, whatever its words: not a body heading,
    and not text the reader warns about."""
    expected, _ = parse(config, seed("en"), body=body)
    assert parse(config, edited(seed("en"), HEADINGS[variant]), body=body) == (expected, [])


@pytest.mark.parametrize("label", ["Main", "Canonical slug"])
def test_a_primary_slug_under_a_label_the_profile_does_not_know(config: Config, label: str) -> None:
    """The primary slug ties the translations together: the tail's first slug is taken for it
    when no label says which, with a warning; the others are the alternatives."""
    expected, _ = parse(config, seed("en"))
    article, found = parse(config, seed("en").replace("Primary:", f"{label}:", 1))
    assert article == expected
    [warning] = found
    assert warning.severity is Severity.WARNING
    assert warning.message == (
        f"unknown SEO label {label!r} read as the primary slug"
        " (add it to seo_fields.primary_slug to say so)"
    )
    renamed, found = parse(config, seed("en").replace("Alt 1:", "Other 1:", 1))
    assert (renamed, found) == (expected, [])


@pytest.mark.parametrize("before", ["\n\nCustomer validation\n\n", "\n\nKey takeaways\n\n"])
@pytest.mark.parametrize("body", [True, False])
def test_a_body_paragraph_may_address_an_audience(config: Config, before: str, body: bool) -> None:
    """A paragraph of prose that starts with an audience's label and a colon stays in the body:
    no bullets follow it, nor another label; the takeaways start where they do."""
    prose = (
        "For cost optimization teams: the arithmetic is simple. Half the price per token "
        "changes every budget line this year."
    )
    expected, _ = parse(config, seed("en"), body=body)
    article, found = parse(config, seed("en").replace(before, f"\n\n{prose}{before}", 1), body=body)
    assert found == [] and article is not None
    assert (article.takeaways, article.references) == (expected.takeaways, expected.references)
    if body:
        assert len(article.blocks) == len(expected.blocks) + 1
        assert prose in [block.parts[0] for block in article.blocks]


@pytest.mark.parametrize(
    ("lang", "written", "line", "read", "warned"),
    [
        ("en", "Updated December 11, 2025", "Updated 12/11/2025", "2025-12-11", True),
        ("en", "Updated December 11, 2025", "Updated 12/13/2025", "2025-12-13", False),
        ("en", "Updated December 11, 2025", "Updated 2025-11-12", "2025-11-12", False),
        (
            "de",
            "Aktualisiert am 11. Dezember 2025",
            "Aktualisiert am 03.04.2026",
            "2026-04-03",
            False,
        ),
        ("nl", "Bijgewerkt op 11 december 2025", "Bijgewerkt op 11-12-2025", "2025-12-11", False),
    ],
)
def test_a_date_in_figures_is_read_in_the_languages_order(
    config: Config, lang: str, written: str, line: str, read: str, warned: bool
) -> None:
    """CLDR's order for the language decides; where it is month first (English), a day of 12
    or less could be meant the other way round (British English): a warning says how it was
    read."""
    article, found = parse(config, seed(lang).replace(written, line, 1))
    assert article is not None and article.updated.isoformat() == read
    messages = [p.message for p in found]
    if warned:
        assert messages == [
            f"date '12/11/2025' read as {read}, in the order 'en' writes dates in figures: "
            "a month's name leaves no doubt"
        ]
    else:
        assert messages == []


@pytest.mark.parametrize("heading", ["", "What it means"])
@pytest.mark.parametrize("body", [True, False])
def test_a_reworded_first_label_without_the_known_heading_stays_a_takeaway(
    config: Config, heading: str, body: bool
) -> None:
    """Without the heading the profile knows, the takeaways open at the first known label;
    takeaway lines just above it (a label, a colon, bullets) belong to them too."""
    expected, _ = parse(config, seed("en"), body=body)
    text = seed("en").replace("\n\nKey takeaways\n\n", f"\n\n{heading}\n\n" if heading else "\n\n")
    text = text.replace("For infrastructure architects:", "For infra architects:", 1)
    article, found = parse(config, text, body=body)
    assert article is not None and expected is not None
    assert [t.audience for t in article.takeaways] == [t.audience for t in expected.takeaways]
    assert article.blocks == expected.blocks
    assert [p.message.split(" by ")[0] for p in found] == [
        "unknown audience label 'For infra architects' read as 'architects'"
    ]


@pytest.mark.parametrize("marks", ["**", "*", "__"])
@pytest.mark.parametrize("body", [True, False])
def test_emphasised_audience_labels_read_alike(config: Config, marks: str, body: bool) -> None:
    """ "**For cost optimization teams:** - a - b": the emphasis closes after the colon, and
    the bullets still follow it."""
    expected, _ = parse(config, seed("en"), body=body)
    text = re.sub(
        r"^(For [^:\n]+):", lambda found: f"{marks}{found[1]}:{marks}", seed("en"), flags=re.M
    )
    assert text.count(f":{marks} - ") == 5
    assert parse(config, text, body=body) == (expected, [])


def test_emphasised_labels_of_an_unconfigured_language_read_alike() -> None:
    italian = TRANSLATED / "it-trainium3.txt"
    profiles = parse_config({}, root=ROOT, source="(test)", env={}).profiles
    known = {lang: profiles[lang] for lang in ("en", "nl", "de")}
    text = re.sub(r"^(Per [^:\n]+):", r"**\1:**", italian.read_text("utf-8"), flags=re.M)
    assert profile_of(text.encode(), known) == profile_of(italian.read_bytes(), known)


def _labels(config: Config, lang: str) -> str:
    """The language's audience labels, as one regex alternative."""
    return "|".join(
        re.escape(label) for labels in config.languages[lang].audiences.values() for label in labels
    )


def _emphasised_seo_fields(text: str) -> str:
    """Each labelled line after the references in bold, bullet aside: "• **Primary: …**"."""
    body, last, tail = text.rpartition("\n11. ")
    tail_start = tail.index("\n\n")
    tail = tail[:tail_start] + re.sub(
        r"(?m)^([•\-] )?([^\n:]{2,60}:[^\n]*)$", r"\1**\2**", tail[tail_start:]
    )
    return body + last + tail


WRITTEN_OTHERWISE = {
    "bullets one a line": lambda config, lang, text: re.sub(
        rf"^({_labels(config, lang)}): (- .+)$",
        lambda found: (
            found[1]
            + ":"
            + "".join(f"\n- {b.strip()}" for b in f" {found[2]}".split(" - ") if b.strip())
        ),
        text,
        flags=re.M,
    ),
    "emphasised labels": lambda config, lang, text: re.sub(
        rf"^({_labels(config, lang)}):", r"**\1:**", text, flags=re.M
    ),
    "Markdown headings": lambda config, lang, text: re.sub(
        r"\n\n([^\n:\d][^\n:]{0,59})\n\n", r"\n\n## \1\n\n", text
    ),
    "Markdown title, italic date line": lambda config, lang, text: (
        "# " + re.sub(r"\n\n([^\n]*20\d\d)\n\n", r"\n\n*\1*\n\n", text, count=1)
    ),
    "Windows line ends": lambda config, lang, text: text.replace("\n", "\r\n"),
    "invisible marks": lambda config, lang, text: with_invisible_marks(text),
    "SEO fields in emphasis, whole": lambda config, lang, text: _emphasised_seo_fields(text),
}


@pytest.mark.parametrize("variant", WRITTEN_OTHERWISE)
@pytest.mark.parametrize("lang", SEEDS)
@pytest.mark.parametrize("body", [True, False])
def test_each_seed_written_otherwise_reads_alike(
    config: Config, lang: str, variant: str, body: bool
) -> None:
    """The usual ways a writer's habits change the format read as the seed itself does."""
    text = WRITTEN_OTHERWISE[variant](config, lang, seed(lang))
    assert text != seed(lang)
    assert parse(config, text, body=body) == parse(config, seed(lang), body=body)


@pytest.mark.parametrize("mark", ["{n}. ", "{n}) "])
@pytest.mark.parametrize("body", [True, False])
def test_numbered_bullets_one_a_line_read_as_bullets(config: Config, mark: str, body: bool) -> None:
    """Bullets numbered one a line below the label ("1. a", "2) b") are the same bullets."""
    expected, _ = parse(config, seed("en"), body=body)

    def numbered(found: re.Match[str]) -> str:
        bullets = [b.strip() for b in f" {found[2]}".split(" - ") if b.strip()]
        return (
            found[1] + ":" + "".join(f"\n{mark.format(n=n)}{b}" for n, b in enumerate(bullets, 1))
        )

    text = re.sub(r"^(For [^:\n]+): (- .+)$", numbered, seed("en"), flags=re.M)
    assert "\n2. " in text or "\n2) " in text
    article, found = parse(config, text, body=body)
    assert found == [] and article is not None and expected is not None
    assert article.takeaways == expected.takeaways
    assert (article.references, article.blocks) == (expected.references, expected.blocks)


@pytest.mark.parametrize(
    ("written", "label", "field"),
    [
        ("SEO Title (56 characters):", "Meta page title", "title"),
        ("SEO Description (153 characters):", "SEO meta description", "description"),
    ],
)
def test_an_seo_field_under_a_label_the_profile_does_not_know(
    config: Config, written: str, label: str, field: str
) -> None:
    """An SEO or meta field is the title when short, the description when long, as in a
    language without a profile; a label that names neither (Title tag) is left out."""
    expected, _ = parse(config, seed("en"))
    article, found = parse(config, seed("en").replace(written, f"{label} (99 characters):", 1))
    assert article == expected
    assert [p.message for p in found] == [
        f"unknown SEO label {label!r} read as the SEO {field}"
        f" (add it to seo_fields.{field} to say so)"
    ]
    untold, found = parse(config, seed("en").replace(written, "Title tag:", 1))
    assert untold is not None and getattr(untold.seo, field) is None and found == []


@pytest.mark.parametrize(
    "written",
    ["{url}.", "({url})", "<{url}>", "[With Trainium4]({url})"],
)
def test_a_reference_url_however_it_is_set_off(config: Config, written: str) -> None:
    """A reference's URL in brackets, after a full stop or as a Markdown link: the URL alone
    is the link, and the text keeps no bracket the URL left behind."""
    url = "https://www.nextplatform.com/2025/12/03/with-trainium4-aws-will-crank-up-everything-but-the-clocks/"
    expected, _ = parse(config, seed("en"))
    article, found = parse(config, seed("en").replace(url, written.format(url=url), 1))
    assert found == [] and article is not None and expected is not None
    reference = article.reference(4)
    assert reference is not None and reference.url == url
    assert reference.text.startswith(expected.reference(4).text.removesuffix(" December 3, 2025."))
    assert not any(mark in reference.text for mark in "()<>[]")


def test_a_subtitle_under_the_title_is_the_body_s_standfirst(config: Config) -> None:
    """A line between the title and the date line is the article's standfirst: the body's
    first block, its marks read, not text dropped with a warning."""
    text = SHORT.replace("Chips and costs\n\n", "Chips and costs\n\nWhy the bill falls¹\n\n", 1)
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert (article.title, str(article.updated), article.summary) == (
        "Chips and costs",
        "2025-12-03",
        "December 2025 Update: a short note on chips.",
    )
    assert [(b.kind, b.parts) for b in article.blocks[:2]] == [
        ("standfirst", ("Why the bill falls", 1)),
        ("heading", ("Why it matters?",)),
    ]


def test_a_subtitle_s_footnote_mark_is_checked_and_links_on_the_page(config: Config) -> None:
    """A mark in the subtitle is checked against the references as a body paragraph's is,
    whether the blocks are kept or only checked (the build's reading); on the page, where the
    subtitle stands under the title, it links to its reference as in the feeds."""
    for mark, said in (("¹", []), ("⁹", [(3, "warning", "footnote mark 9 has no reference")])):
        text = SHORT.replace("Chips and costs\n\n", f"Chips and costs\n\nWhy it falls{mark}\n\n", 1)
        for blocks in (True, False):
            article, found = parse_article(text.encode(), "a.txt", config.profiles, blocks=blocks)
            assert article is not None and problems(found) == said, (mark, blocks)
    article, _ = parse(config, text.replace("⁹", "¹"))
    assert article is not None
    assert feeds.standfirst_html(article) == (
        f'Why it falls<sup><a href="#en-{article.slug}-ref-1">1</a></sup>'
    )
    assert feeds.standfirst_html(dataclasses.replace(article, blocks=article.blocks[1:])) is None


@pytest.mark.parametrize(
    ("written", "parts"),
    [
        ("training.^1", ("Cheaper chips change the economics of training.", 1)),
        (
            "training until 2027^2.",
            ("Cheaper chips change the economics of training until 2027", 2, "."),
        ),
        ("10^9 trainings.", ("Cheaper chips change the economics of 10", 9, " trainings.")),
        ("training. ^1 x^", ("Cheaper chips change the economics of training. ^1 x^",)),
        (
            "800 mm², W/m² and м³.²",
            ("Cheaper chips change the economics of 800 mm², W/m² and м³.", 2),
        ),
    ],
)
def test_a_caret_raises_a_number_as_a_footnote_mark(
    config: Config, written: str, parts: tuple[str | int, ...]
) -> None:
    """Plain text from a web editor raises a number with a caret: after a word, a sign or a
    number it is a mark, as ¹ is (a power so written is raised too, and warned of as a mark no
    reference answers); a caret after a space or with no number is text, as is a unit's square
    or cube."""
    article, found = parse(config, SHORT.replace("training.¹", written, 1))
    assert article is not None and article.blocks[1].parts == parts
    unanswered = [n for n in parts if isinstance(n, int) and n not in (1, 2)]
    assert [d.message for d in found] == [f"footnote mark {n} has no reference" for n in unanswered]


def test_character_references_left_by_a_web_editor_are_their_characters(config: Config) -> None:
    """A paste from a web editor leaves HTML's character references in the text: each is read
    as the character it stands for, in the title, the body, a bullet and an address, and what
    it stands for is cleaned as if typed (a soft hyphen goes). A reference for a line break
    and text that only looks like one stay as written."""
    text = (
        SHORT.replace("Chips and costs\n", "Chips &amp; costs: NVIDIA&#8217;s&#xAD; bill\n", 1)
        .replace("economics of", "economics of 800&nbsp;mm² R&D; AT&T&#10;", 1)
        .replace("- First bullet", "- First &laquo;bullet&raquo;", 1)
        .replace("https://example.com/a.", "https://example.com/a?b=1&amp;c=2.", 1)
    )
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert article.title == "Chips & costs: NVIDIA’s bill"
    assert article.blocks[1].text == (
        "Cheaper chips change the economics of 800\u00a0mm² R&D; AT&T&#10; training."
    )
    assert article.takeaways[0].bullets[0] == "First «bullet» with a 4-fach hyphen"
    assert article.references[1].url == "https://example.com/a?b=1&c=2"


@pytest.mark.parametrize("lang", ["en", "nl", "de"])
def test_a_file_that_lost_its_blank_lines_reads_as_written(config: Config, lang: str) -> None:
    """A paste that lost every blank line: each line is a paragraph, a label's list
    (``URL Slugs:`` over its ``•`` lines) one with its label."""
    text = seed(lang)
    slugs = re.search(r"(?m)^(URL Slugs:) (- .*)$", text)  # in the English one
    if slugs is not None:  # one item a line under its label, as such a writer has it
        text = text.replace(slugs[0], slugs[1] + "\n" + slugs[2].replace(" - ", "\n- "))
    article, found = parse(config, text.replace("\n\n", "\n"))
    expected, said = parse(config, seed(lang))
    assert article is not None and expected is not None
    assert [d.message for d in found] == [d.message for d in said]
    assert (article.takeaways, article.references, article.seo) == (
        expected.takeaways,
        expected.references,
        expected.seo,
    )
    assert [(b.kind, b.parts) for b in article.blocks] == [
        (b.kind, b.parts) for b in expected.blocks
    ]


def test_a_byline_over_the_update_note_opens_the_body(config: Config) -> None:
    """A byline and a note between the date line and the update note: the update is the
    summary, they open the body as paragraphs. A label that names no month ("Outlook for
    2027:") is no update note, wherever it stands."""
    front = "By Helen Marsh, Senior Analyst\n\nAbout this analysis: no advice.\n\n"
    text = SHORT.replace("December 2025 Update:", front + "December 2025 Update:", 1)
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert article.summary == SHORT_UPDATE
    assert [(b.kind, b.text) for b in article.blocks[:3]] == [
        ("paragraph", "By Helen Marsh, Senior Analyst"),
        ("paragraph", "About this analysis: no advice."),
        ("heading", "Why it matters?"),
    ]
    outlook = SHORT.replace(
        "December 2025 Update: a short note on chips.", front + "Outlook for 2027: more chips."
    )
    article, _ = parse(config, outlook)
    assert article is not None and article.summary == "By Helen Marsh, Senior Analyst"


def test_a_reference_wrapped_before_its_year_stays_one(config: Config) -> None:
    """A hard-wrapped reference whose next line opens with a year and a full stop is one
    reference: 2026 cannot follow 2. A number that can is the next reference."""
    text = SHORT.replace(
        "2. A source with one https://example.com/a.",
        '2. Rates by Generation, September\n2026." September 8, 2026.\nhttps://example.com/a\n'
        "3. The next one.",
    )
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert [(r.number, r.text, r.url) for r in article.references] == [
        (1, "A source without a link.", None),
        (2, 'Rates by Generation, September 2026." September 8, 2026.', "https://example.com/a"),
        (3, "The next one.", None),
    ]


def test_a_french_heading_with_a_spaced_colon_opens_its_section(config: Config) -> None:
    """French puts a (no-break) space before a heading's colon: "Points clés à retenir :" and
    "Références :" open their sections as "Points clés" does."""
    text = (DATA / "articles" / "fr-trainium3.txt").read_text("utf-8")
    plain, _ = parse_article(text.encode(), "a.txt", {"fr": config.languages["fr"]})
    text = edited(text, [("\nPoints clés\n", "\nPoints clés à retenir\u00a0: \n")])
    text = text.replace("\nRéférences\n", "\nRéférences\u00a0:\n")
    article, found = parse_article(text.encode(), "a.txt", {"fr": config.languages["fr"]})
    assert problems(found) == [] and article is not None and plain is not None
    assert (article.takeaways, article.references) == (plain.takeaways, plain.references)


def test_audience_labels_before_a_dash_are_labels(config: Config) -> None:
    """A writer may put a dash between spaces where the colon goes: the text after it is the
    first bullet, and the bullets after it split as inline ones do."""
    text = SHORT.replace(
        "For cost optimization teams: • one • two",
        "For cost optimization teams – prices fell 6–8% - lead times grew • not split",
    )
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert [(t.audience, t.bullets) for t in article.takeaways][1] == (
        "cost",
        ("prices fell 6–8%", "lead times grew • not split"),
    )


def test_meta_and_url_labels_in_the_seo_tail(config: Config) -> None:
    """A CMS's "Meta title:" and "URL:" (a slug) are the SEO title and the primary slug."""
    text = SHORT.replace("SEO Title:", "Meta title:").replace("Primary slug:", "URL:")
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert (article.seo.title, article.seo.primary_slug) == (
        "Chips and costs explained",
        "chips-and-costs",
    )


@pytest.mark.parametrize(
    ("label", "first", "second"),
    [
        # Short of the characters its label counts: the next line goes on it.
        ("SEO Description (89 characters)", "How cheaper chips,", "Trainium and TPUs: the costs"),
        # Or a sentence left open, and the next line's words in lower case.
        ("SEO Description", "Retrofitting air-cooled halls", "for liquid cooling: RDHx vs"),
    ],
)
def test_a_wrapped_seo_description_keeps_its_line_with_a_colon(
    config: Config, label: str, first: str, second: str
) -> None:
    """A hard-wrapped description whose second line holds a colon is one field, not a field
    under a label of its second line's words."""
    rest = "of training and inference, and who gains."
    text = SHORT.replace(
        "SEO Title: Chips and costs explained\n",
        f"SEO Title: Chips and costs explained\n{label}: {first}\n{second} {rest}\n",
    )
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert article.seo.description == f"{first} {second} {rest}"


def test_a_heading_wrapped_onto_two_lines_is_a_heading(config: Config) -> None:
    """A heading longer than the width an editor wraps at is a filled line over a shorter one
    that ends no sentence; two short lines, or two that end one, are a paragraph."""
    heading = "Why the economics of training change when chips get cheaper and\nfaster"
    prose = "Why the economics of training change when chips get cheaper and\nfaster."
    short = "Why it matters\nfor us"
    text = SHORT.replace("Why it matters?\n", f"{heading}\n\n{prose}\n\n{short}\n")
    article, found = parse(config, text)
    assert article is not None and problems(found) == []
    assert [(b.kind, b.text) for b in article.blocks[:3]] == [
        ("heading", heading.replace("\n", " ")),
        ("paragraph", prose.replace("\n", " ")),
        ("paragraph", short.replace("\n", " ")),
    ]
