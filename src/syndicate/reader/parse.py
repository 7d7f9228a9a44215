"""Text → ``Article``: pure, bytes in and values out, no I/O (the one compiled module).

A broken file yields diagnostics, never an exception. The format: paragraphs separated by
blank lines. Title; date line; update summary; body (single-line headings and paragraphs with
superscript footnote marks); the key-takeaways section ("<audience label>: - bullet - bullet",
or one bullet a line); numbered references; an optional SEO tail. Which words mark each part
is per-language data (``LanguageProfile``), never code; for a language no profile describes,
they are read from where the format puts them (the end of this module).
"""

from __future__ import annotations

import hashlib
import html
import re
import sys
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from functools import cache, lru_cache
from itertools import combinations
from typing import overload

from anyascii import anyascii
from babel import Locale, UnknownLocaleError

from ..config import LanguageProfile, SeoFields
from ..language import EVERY, identify, likeliest, written_language
from ..model import (
    Article,
    Block,
    Diagnostic,
    Reference,
    Seo,
    Severity,
    Takeaways,
)
from .dates import APOSTROPHES, find_date, month_first, names_a_month

SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SUPER_DIGIT = str.maketrans(SUPERSCRIPTS, "0123456789")
_TO_SUPER = str.maketrans("0123456789", SUPERSCRIPTS)
# A footnote mark: superscript digits ("memory.¹"), or a number in brackets as plain text and
# Markdown write one ("memory.[1]", "memory [1].", "memory[^1]", in Chinese and Japanese
# also full-width: "芯片［1］"); spaces before brackets go. A caret is how plain text raises a
# number ("memory.^1", "until 2027^6."): a mark, raised as a power written so would be. A unit
# squared or cubed ("800 mm²", "W/m²", "10 000 м³") is no mark but the unit, text.
_MARKS = re.compile(
    rf"(\b(?:[kcmdµn]?m|ft|[кмсд]?м)[²³](?![{SUPERSCRIPTS}]))|([{SUPERSCRIPTS}]+)"
    rf"|[\[［]\^?(\d{{1,3}})[\]］]|(?<=[^\s^])\^(\d{{1,3}})(?!\d)"
)
_MARK_SIGNS = ("[", "［", "^")  # where a mark is more than its superscript digits
# C0/C1 controls except tab and newline, plus non-characters and stray BOMs.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff\ufffe\uffff]")
# A character reference a web editor's paste leaves in plain text ("AT&amp;S", "NVIDIA&#8217;s",
# "800&nbsp;mm²"); "R&D" and "AT&T;" are no reference.
_REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# What a word processor leaves that no reader sees, where it would hide a label, a heading, a
# bullet or a slug from the reading: soft hyphens and word joiners anywhere; direction marks,
# embeddings, isolates and zero-width spaces at a line's ends, and a zero-width space beside a
# space. They go, unremarked. Within a line a direction mark stays (it orders a number in
# Arabic text), as do a zero-width space between letters (a word break in Thai) and the
# joiners Persian and the Indic scripts spell with (U+200C, U+200D).
_MARKS_AT_EDGES = "\u200b\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069"
_INVISIBLE = re.compile("[\u00ad\u180e\u2060-\u2064]|(?<=\\s)\u200b+|\u200b+(?=\\s)")
_INVISIBLE_AT_EDGES = re.compile(
    f"(?m)^([ \\t]*)[{_MARKS_AT_EDGES}]+|[{_MARKS_AT_EDGES}]+(?=[ \\t]*$)"
)
_BULLETS = "-–—•*·▪◦‣"
# A label ends at a colon: ":" or, in Chinese and Japanese, the full-width "：", in Amharic the
# Ethiopic preface colon "፦", in Khmer the camnuc pii kuuh "៖".
_COLONS = ":：፦៖"
_REF_START = re.compile(
    rf"(?:[\[［]\^?(\d{{1,4}})[\]］]:?|(\d{{1,4}})[.)]|([{SUPERSCRIPTS}]+))\s*(.*)"
)
_INLINE_LIST = re.compile(f"[{_COLONS}]\\s*[{_BULLETS}]\\s")  # "URL slugs: - Primary: …"
# A line that ends where its list's next item or its label's value starts.
_DANGLING = re.compile(f"(?:\\s[{_BULLETS}]|[{_COLONS}])$")
# What _reference accepts, tested on a paragraph as written: its first line starts numbered.
_REF_HEAD = re.compile(
    rf"\s*(?:[\[［]\^?\d{{1,4}}[\]］]:?|\d{{1,4}}[.)]|[{SUPERSCRIPTS}]+(?![{SUPERSCRIPTS}]))"
    r"[^\S\n]*\S"
)
# A line drawn across (Markdown's thematic break, or a heading's underline) only sets parts
# apart: read as a blank line.
_RULE = re.compile(r"\s*(?:([-*_])(?:\s*\1){2,}|[-=]{2,})\s*")
_RULE_STARTS = "-*_= \t"
_URL = re.compile(r"<?(https?://[^\s<>]+)>?")
_LINK_OPENED = re.compile(r"\[([^\]]*)\]\($")  # what a Markdown link writes before its URL
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_HYPHENED_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)+")  # a slug, not a word
_NUMBERED_ITEM = re.compile(r"\d{1,2}[.)]\s+")  # "1. ", "2) ": a numbered list's item
_TABLE_RULE = re.compile(r"\|?(\s*:?-+:?\s*\|)*\s*:?-+:?\s*\|?")  # "|---|:--:|" under a head
# "December 2025 Update: ..." in any language: a short label holding a year, then a colon.
_SUMMARY_LABEL = re.compile(
    rf"[^{_COLONS}!?。]{{0,60}}(?<!\d)\d{{4}}(?!\d)[^{_COLONS}!?。]{{0,40}}(?::\s|[{_COLONS[1:]}])"
)
_PERIOD_THEN = re.compile(r"\.\s+(\w)")  # a period and the word after it
# Or a short one before a dash: "January 2026 update — …", "Mise à jour de janvier 2026 — …".
_SUMMARY_LABEL_DASHED = re.compile(
    rf"[^{_COLONS}!?。—–]{{0,40}}(?<!\d)\d{{4}}(?!\d)[^{_COLONS}!?。—–]{{0,30}} [—–] "
)
# A line written as Markdown marks a heading ("## The performance case", "**Key takeaways**")
# or sets it apart ("*Updated December 11, 2025*").
_MARKDOWN_HEADING = re.compile(
    r"#{1,6}[^\S\n]+(.*?)(?:[^\S\n]+#+)?|\*\*(.+)\*\*|__(.+)__|\*([^*]+)\*|_([^_]+)_"
)
_NUMBERED = re.compile(r"[^\w\s]*\s*\d+\s*$")  # "Alt 1", "Alt. 2": a numbered label's stem
_SEO_ITEM = re.compile(r"(?:^|\s)[•·▪]\s*")
_PARENS = re.compile(r"\s*[(（][^)）]*[)）]")
_HEADING_MAX = 120
# How a sentence (or a quote, or an aside) ends, in the scripts' own marks too: the Chinese
# and Japanese full stop and commas, the Devanagari danda, the Urdu, Armenian, Ethiopic,
# Burmese, Khmer and Tibetan full stops. A line that ends so is no heading.
_SENTENCE_ENDS = ".:;,…\"'”’»)。．：；，、」』）।۔։።။។།"
_ASKS = "?!？！؟"
# Greek asks with what Latin writes as a semicolon (U+037E, which the reading normalises to ";").
_GREEK = re.compile("[\u0370-\u03ff\u1f00-\u1fff]")
# Where one sentence ends and another starts: a space after the Latin marks, none after the
# Chinese and Japanese ones.
_SENTENCE_BREAK = re.compile(r"[.?!؟।۔]\s|[。？！]")
TITLE_MAX = 300
"""Characters a title may have; a longer first paragraph is no title."""
_LABEL_MAX = 80
_DATE_LINE_MAX = 80
_DATE_LINE_MARKS = " ,;–—-、。" + _COLONS  # what may stand between a date line's words and its date
_LANGID_MIN_PROB = 0.9
_LANGID_SAMPLE = 100
UNPUBLISHED = "not published: written in"
"""How the warning about an article in a language that is not published begins."""


# The joiners that Persian, the Indic scripts and emoji spell with: repr() would escape them.
_JOINER_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u200([cd])")


def _quoted(text: str) -> str:
    """``text`` quoted for a message, as repr() writes it (a control character shown by its
    escape) but with the zero-width joiners left as they are: `'می‌گذارد'`, not
    `'می\\u200cگذارد'`."""
    return _JOINER_ESCAPE.sub(lambda m: m[1] + chr(0x2000 + int(m[2], 16)), repr(text))


class ArticleProblem(Exception):
    """Stops parsing one file; becomes an error diagnostic."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class Paragraph:
    """A run of non-blank lines: ``text`` joins them with spaces; ``line`` is the first line.

    A plain class, which the compiled reader makes and reads at C speed: every file makes
    dozens, and a named tuple's constructor and fields are Python-level calls.
    """

    __slots__ = ("line", "rows", "text")

    def __init__(self, text: str, line: int, rows: tuple[str, ...]) -> None:
        self.text = text
        self.line = line
        self.rows = rows


@lru_cache(maxsize=8192)
def _fold(text: str) -> str:
    """Case-, space- and apostrophe-insensitive form for comparing labels and headings (a word
    processor types ’ where the profile has ': "Pour l’écosystème")."""
    return " ".join(text.casefold().translate(APOSTROPHES).split())


@lru_cache(maxsize=8192)
def _bare_label(text: str) -> str:
    """A label as compared: no bullet, emphasis, trailing colon or "(158 characters)" note."""
    if "(" in text or "（" in text:
        text = _PARENS.sub("", text)
    text = text.strip().lstrip(_BULLETS).strip(" *_#")
    return _fold(text.rstrip(_COLONS))


def _heading_key(text: str) -> str:
    """A heading as compared: folded, without the colon after it, nor the (no-break) space
    French puts before that colon ("Points clés :")."""
    return _fold(text.rstrip().rstrip(_COLONS))


def _colon(text: str, end: int) -> int:
    """Where the first colon (of any kind) is in the first ``end`` characters, or -1."""
    at = text.find(":", 0, end)
    if text.isascii():  # the usual line: no other kind to look for
        return at
    other = _SCRIPT_COLON.search(text, 0, at if at >= 0 else end)
    return at if other is None else other.start()


_SCRIPT_COLON = re.compile(f"[{_COLONS[1:]}]")


def _split_label(text: str) -> tuple[str, str, str]:
    """``text`` split at its first colon (either kind), as ``str.partition`` splits."""
    at = _colon(text, len(text))
    return (text, "", "") if at < 0 else (text[:at], text[at], text[at + 1 :])


def utf8(data: bytes) -> bytes:
    """A file's bytes as UTF-8 without a BOM: a file saved as UTF-16 with its BOM (as some
    Windows editors save "Unicode" text) is read as the text it is. Raises ArticleProblem for
    UTF-16 that does not decode."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:]
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError as exc:
            raise ArticleProblem(
                f"not UTF-16 text after its byte order mark: bytes at offset {exc.start} "
                "cannot be decoded",
                None,
            ) from None
    return data


def decode(data: bytes) -> str:
    """``utf8``'s bytes → text. Raises ArticleProblem naming the bad byte and, where the file
    was most likely saved in Windows-1252 or Latin-1 (as older editors do), the letter it is
    there."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        byte = data[exc.start]
        legacy = bytes([byte]).decode("cp1252", errors="replace")
        letter = f" ('{legacy}' in Windows-1252)" if legacy.isalpha() else ""
        raise ArticleProblem(
            f"not UTF-8 text: byte 0x{byte:02x} at offset {exc.start} cannot be decoded"
            f"{letter}: save the file as UTF-8",
            line,
        ) from None


# Bytes that may need cleaning: C0 controls and DEL, lead bytes of combining marks
# (U+0300-036F), C1 controls and the soft hyphen (after 0xC2), the invisible marks of
# _INVISIBLE (after 0xE2 0x80 or 0xE2 0x81, and the Arabic letter mark), BOMs and
# non-characters (after 0xEF). A few C-speed passes over the bytes let a clean file skip the
# character-level scans; text without combining marks is taken as NFC already.
_PLAIN = bytes(b for b in range(256) if (b >= 0x20 and b not in b"\x7f\xcc\xcd") or b in b"\t\n\r")
_HIDDEN_AFTER_E2 = {
    0x80: frozenset([*range(0x8B, 0x90), *range(0xAA, 0xAF)]),  # U+200B-200F, U+202A-202E
    0x81: frozenset([*range(0xA0, 0xA5), *range(0xA6, 0xAA)]),  # U+2060-2064, U+2066-2069
}


def _suspect(data: bytes) -> bool:
    if data.translate(None, _PLAIN):
        return True
    if b"\xef" in data and (b"\xef\xbb\xbf" in data or b"\xef\xbf" in data):
        return True
    # C1 controls and the soft hyphen: 0xC2 then 0x80-0x9F or 0xAD. A 0xC2 is rare (a
    # superscript digit, a no-break space), so visiting each costs a fraction of a regex's
    # pass over every byte; an 0xE2 (a dash, a curly quote) is a few a paragraph at most.
    at = data.find(b"\xc2")
    while 0 <= at < len(data) - 1:
        if 0x80 <= data[at + 1] <= 0x9F or data[at + 1] == 0xAD:
            return True
        at = data.find(b"\xc2", at + 1)
    at = data.find(b"\xe2")
    while 0 <= at < len(data) - 2:
        hidden = _HIDDEN_AFTER_E2.get(data[at + 1])
        if hidden is not None and data[at + 2] in hidden:
            return True
        at = data.find(b"\xe2", at + 1)
    return b"\xd8\x9c" in data or b"\xe1\xa0\x8e" in data


def clean(text: str, warn: list[tuple[int, str]], data: bytes | None = None) -> str:
    """Normalise newlines and Unicode; drop control characters, noting where they were, and
    invisible marks.

    ``data``, the bytes ``text`` was decoded from (BOM removed), lets a clean file skip the
    character-level scans.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "&" in text:
        referenced = _REFERENCE.sub(_referenced, text)
        data = data if referenced == text else None  # what it stands for may need cleaning
        text = referenced
    if data is not None and not _suspect(data):
        return text
    if _CONTROL.search(text):
        for number, line in enumerate(text.split("\n"), 1):
            found = _CONTROL.findall(line)
            if found:
                codes = ", ".join(sorted({f"U+{ord(c):04X}" for c in found}))
                warn.append((number, f"dropped {len(found)} control character(s) ({codes})"))
        text = _CONTROL.sub("", text)
    text = _INVISIBLE_AT_EDGES.sub(lambda found: found[1] or "", _INVISIBLE.sub("", text))
    return unicodedata.normalize("NFC", text)


def _referenced(reference: re.Match[str]) -> str:
    """The character a reference stands for; one for a line break or a control character,
    or none, stays as written (a reader's lines are the file's)."""
    character = html.unescape(reference[0])
    return reference[0] if character == "\n" or _CONTROL.fullmatch(character) else character


_UNSPACED_MIN = 8  # lines in a file without a blank one, more than an article's head has


def _unspaced(lines: list[str], start: int, end: int) -> list[tuple[int, int]]:
    """The paragraphs of a text without a blank line (a paste that lost them): each line is
    one, but a label's list (``URL Slugs:`` over ``• Primary: …`` lines) is one with it."""
    spans: list[tuple[int, int]] = []
    listing = False  # the line above is a label's, or an item of its list
    for number in range(start, end):
        line = lines[number].strip()
        if listing and line[:1] in _BULLETS and line[1:2].isspace():
            spans[-1] = (spans[-1][0], number + 1)
        else:
            spans.append((number, number + 1))
            listing = line.endswith(tuple(_COLONS))
    return spans


class Paragraphs(Sequence[Paragraph]):
    """A text's paragraphs (runs of lines that are not blank), each made the first time it is
    read.

    The text is split into lines at C speed, and a paragraph is a span of them, so its line
    number is known without counting. Making a Paragraph (stripped rows, joined text) is the
    costly part, and a summary reads only the head and the sections after the body, not the
    dozens of body paragraphs between them. ``raws`` gives paragraphs' text as written, for
    the cheap checks that let the reader pass over a body paragraph without making it.
    """

    __slots__ = ("_items", "_lines")

    def __init__(self, text: str) -> None:
        # A line of white space only is blank, as ``str.strip`` (and a regex's \s) sees it.
        # A rule drawn across (``_RULE``) is blank too.
        lines = text.split("\n")
        spans: list[tuple[int, int]] = []
        first = -1
        for number, line in enumerate(lines):
            if (
                line
                and not line.isspace()
                and not (line[0] in _RULE_STARTS and _RULE.fullmatch(line))
            ):
                if first < 0:
                    first = number
            elif first >= 0:
                spans.append((first, number))
                first = -1
        if first >= 0:
            spans.append((first, len(lines)))
        if len(spans) == 1 and spans[0][1] - spans[0][0] >= _UNSPACED_MIN:
            spans = _unspaced(lines, *spans[0])
        self._lines = lines
        self._items: list[Paragraph | tuple[int, int]] = [*spans]  # made, or a span of lines

    def __len__(self) -> int:
        return len(self._items)

    def replace_head(self, count: int, head: list[Paragraph]) -> None:
        """Put ``head`` in place of the first ``count`` paragraphs."""
        self._items[:count] = head

    def split_headings(self, start: int, heading: Callable[[tuple[str, ...]], bool]) -> None:
        """From ``start`` on, a paragraph of several lines whose first is a heading over the
        rest (``heading`` tells, from the lines), with no blank line between (`References`
        over `1. …`), becomes two: the heading's and the rest's."""
        items, at = self._items, start
        while at < len(items):
            item = items[at]
            if isinstance(item, Paragraph):
                rows = item.rows
                if len(rows) > 1 and heading(rows):
                    rest = rows[1:]
                    items[at : at + 1] = [
                        Paragraph(rows[0], item.line, rows[:1]),
                        Paragraph(" ".join(rest), item.line + 1, rest),
                    ]
                    at += 1
            else:
                first, end = item
                if end - first > 1 and heading(tuple(r.strip() for r in self._lines[first:end])):
                    items[at : at + 1] = [(first, first + 1), (first + 1, end)]
                    at += 1
            at += 1

    def raws(self, start: int) -> list[str]:
        """The texts of the paragraphs from ``start`` on, as written (lines, indentation and
        all): enough to pass over most body paragraphs without making them."""
        return [self._raw(item) for item in self._items[start:]]

    def _raw(self, item: Paragraph | tuple[int, int]) -> str:
        if isinstance(item, Paragraph):
            return "\n".join(item.rows)
        first, end = item
        return self._lines[first] if end - first == 1 else "\n".join(self._lines[first:end])

    def line(self, index: int) -> int:
        """The paragraph's first line number, without making it."""
        item = self._items[index]
        return item.line if isinstance(item, Paragraph) else item[0] + 1

    def _make(self, index: int) -> Paragraph:
        item = self._items[index]
        if isinstance(item, Paragraph):
            return item
        first, end = item
        if end - first == 1:
            row = self._lines[first].strip()
            made = Paragraph(row, first + 1, (row,))
        else:
            rows = tuple(line.strip() for line in self._lines[first:end])
            made = Paragraph(" ".join(rows), first + 1, rows)
        self._items[index] = made
        return made

    @overload
    def __getitem__(self, index: int) -> Paragraph: ...

    @overload
    def __getitem__(self, index: slice) -> list[Paragraph]: ...

    def __getitem__(self, index: int | slice) -> Paragraph | list[Paragraph]:
        if type(index) is slice:
            return [self._make(i) for i in range(*index.indices(len(self._items)))]
        if index < 0:
            index += len(self._items)
        if not 0 <= index < len(self._items):
            raise IndexError(index)
        return self._make(index)


def paragraphs(text: str) -> list[Paragraph]:
    """Split on blank lines; a paragraph keeps its stripped lines and their joined text."""
    return Paragraphs(text)[:]


def split_marks(text: str) -> tuple[str | int, ...]:
    """'memory.¹ Scale' → ('memory.', 1, ' Scale'). A run of marks is one number: '¹¹' is 11.
    'memory [1].' → ('memory', 1, '.'); 'memory.^1' → ('memory.', 1); '5 m².' → ('5 m².',)."""
    parts: list[str | int] = []
    pos = 0
    for mark in _MARKS.finditer(text):
        unit, raised, bracketed, caret = mark.groups()
        if unit:
            continue  # stays in the text before the next mark
        before = text[pos : mark.start()]
        if bracketed:
            before = before.rstrip()
        if before:
            parts.append(before)
        parts.append(int(bracketed or caret or raised.translate(_SUPER_DIGIT)))
        pos = mark.end()
    if pos < len(text):
        parts.append(text[pos:])
    return tuple(parts)


def strip_marks(text: str) -> str:
    # Marks are rare in a title or a summary: a few substring tests cost less than the regex.
    marked = any(sign in text for sign in _MARK_SIGNS) or any(m in text for m in SUPERSCRIPTS)
    return "".join(p for p in split_marks(text) if isinstance(p, str)) if marked else text


# ---------------------------------------------------------------------------------------------
# Per-language markers, folded once per profile.


@dataclass(frozen=True, slots=True)
class _Markers:
    date_line: tuple[str, ...]
    date_line_within: re.Pattern[str]  # the date line's words further on ("Published … · Updated")
    headings: dict[str, str]  # folded heading -> "takeaways" | "references" | "seo"
    heading_starts: frozenset[str]  # the first word of each folded heading
    labels: dict[str, str]  # folded audience label -> audience id
    seo_fields: dict[str, str]  # folded SEO label -> Seo field name
    alt_slugs: tuple[str, ...]  # folded prefixes of alternative-slug labels


# Cached by identity, and held: a long-running process reads with new profiles now and then
# (a reloaded config, a language's inferred profile), so the caches are emptied when full.
_CACHED_PROFILES = 64
_MARKERS: dict[int, tuple[LanguageProfile, _Markers]] = {}


def _markers(profile: LanguageProfile) -> _Markers:
    cached = _MARKERS.get(id(profile))
    if cached is not None and cached[0] is profile:
        return cached[1]
    if len(_MARKERS) >= _CACHED_PROFILES:
        _MARKERS.clear()
    headings = {
        _heading_key(h): kind
        for kind in ("seo", "references", "takeaways")
        for h in getattr(profile, kind)
    }
    fields = profile.seo_fields
    seo = {
        _bare_label(label): name
        for name in ("title", "description", "excerpt", "primary_slug")
        for label in getattr(fields, name)
    }
    date_line = tuple(sorted({_fold(p) for p in profile.date_line}, key=len, reverse=True))
    made = _Markers(
        date_line=date_line,
        date_line_within=_words_within(date_line),
        headings=headings,
        heading_starts=frozenset(h.split()[0].rstrip(_COLONS) for h in headings if h.split()),
        labels={_bare_label(x): a for a, labels in profile.audiences.items() for x in labels},
        seo_fields=seo,
        alt_slugs=tuple(_bare_label(a) for a in fields.alt_slugs),
    )
    if len(_MARKERS) >= 64:  # profiles read from unconfigured articles come and go
        _MARKERS.clear()
    _MARKERS[id(profile)] = (profile, made)
    return made


def _words_within(phrases: Sequence[str]) -> re.Pattern[str]:
    """Any of ``phrases`` as whole words, spaced as may be, in any case."""
    words = (
        r"\s+".join(map(re.escape, phrase.split())) + (r"(?!\w)" if phrase[-1:].isalnum() else "")
        for phrase in phrases
        if phrase
    )
    return re.compile(rf"(?<!\w)(?:{'|'.join(words) or '(?!)'})", re.I)


_LEADING_WORD = re.compile(r"[^\W_]*")  # what str.isalnum accepts


def _leading_word(text: str) -> str:
    found = _LEADING_WORD.match(text)
    return found[0] if found else ""


@dataclass(frozen=True, slots=True)
class _DateWords:
    """Every profile's date-line words: longest first, and by their first word with the
    language they belong to."""

    longest_first: tuple[str, ...]
    by_first_word: dict[str, list[tuple[str, str]]]


_DATE_WORDS: dict[int, tuple[Mapping[str, LanguageProfile], _DateWords]] = {}


def _date_words(profiles: Mapping[str, LanguageProfile]) -> _DateWords:
    cached = _DATE_WORDS.get(id(profiles))
    if cached is not None and cached[0] is profiles:
        return cached[1]
    if len(_DATE_WORDS) >= _CACHED_PROFILES:  # a caller may make its mapping for each reading
        _DATE_WORDS.clear()
    by_first_word: dict[str, list[tuple[str, str]]] = {}
    for lang, profile in profiles.items():
        for phrase in _markers(profile).date_line:
            by_first_word.setdefault(_leading_word(phrase), []).append((phrase, lang))
    words = {phrase for pairs in by_first_word.values() for phrase, _ in pairs}
    made = _DateWords(tuple(sorted(words, key=len, reverse=True)), by_first_word)
    _DATE_WORDS[id(profiles)] = (profiles, made)
    return made


def _dated(heads: tuple[str, ...], profiles: Mapping[str, LanguageProfile]) -> set[str]:
    """The languages whose date-line words one of the folded ``heads`` starts with (or, for
    a head as short as a date line, ends with). The words are looked up by their first word,
    not tried one profile after another."""
    by_first_word = _date_words(profiles).by_first_word
    found = set()
    for head in heads:
        for phrase, lang in by_first_word.get(_leading_word(head), ()):
            if _folded_starts_with(head, (phrase,)):
                found.add(lang)
    if not found:  # the rare date line with its words after the date
        for head in heads:
            if len(head) < _DATE_LINE_MAX:
                for pairs in by_first_word.values():
                    found.update(lang for phrase, lang in pairs if _folded_ends_with(head, phrase))
    return found


def _date_line_words(text: str, phrases: Sequence[str]) -> str | None:
    """The date-line words (folded ``phrases``) ``text`` starts with, or, if it is as short as
    a date line, ends with; None if neither."""
    folded = _fold(text[:_DATE_LINE_MAX])
    found = _folded_starts_with(folded, phrases)
    if found is None and len(text) < _DATE_LINE_MAX:
        found = next((p for p in phrases if _folded_ends_with(folded, p)), None)
    return found


def _starts_with(text: str, phrases: Sequence[str]) -> str | None:
    """The longest folded phrase ``text`` starts with as whole words, or None."""
    return _folded_starts_with(_fold(text[:80]), phrases)


def _folded_starts_with(folded: str, phrases: Sequence[str]) -> str | None:
    for phrase in phrases:  # longest first; one may end in an elision ("l'11 de desembre")
        if folded.startswith(phrase) and (
            len(folded) == len(phrase)
            or not folded[len(phrase)].isalnum()
            or not phrase[-1].isalnum()
        ):
            return phrase
    return None


def _folded_ends_with(folded: str, phrase: str) -> bool:
    """Whether ``folded`` ends with ``phrase`` as whole words: after a character that is no
    letter or digit, or after a wide (Chinese, Japanese) one, whose words have no spaces
    between them ("2025年12月11日更新")."""
    if not phrase or not folded.endswith(phrase) or len(folded) == len(phrase):
        return False
    before = folded[-len(phrase) - 1]
    return not before.isalnum() or unicodedata.east_asian_width(before) == "W"


# ---------------------------------------------------------------------------------------------
# Language: the profiles decide; an offline language-identification model cross-checks.


def _langid_sample(paras: Sequence[Paragraph]) -> str:
    """A short stretch of running prose: the model's cost grows with every byte it reads."""
    prose = next(
        (p.text for i in range(3, len(paras)) if len((p := paras[i]).text) > _LANGID_SAMPLE), ""
    )
    if not prose:
        prose = " ".join(p.text for p in paras[:3])
    cut = prose.rfind(" ", 0, _LANGID_SAMPLE)
    return prose[: cut if cut > 0 else _LANGID_SAMPLE]


def detect_language(
    paras: Sequence[Paragraph],
    profiles: Mapping[str, LanguageProfile],
    warn: list[tuple[int, str]],
    *,
    second_opinion: bool = True,
) -> str:
    """The profile whose date line, headings and audience labels the text uses.

    The language model only breaks ties and, with ``second_opinion``, warns when the text
    clearly reads as another language than the one profile that matches.
    """
    dated = _dated(tuple(_fold(_unmarked(p.text)[:80]) for p in paras[1:3]), profiles)
    scores = _scores(paras, profiles, dated)
    best = max(scores.values(), default=0)
    candidates = [lang for lang, s in scores.items() if s == best and s > 0]
    # No date line, one heading or label: a word languages share ("SEO-elemente" in Afrikaans
    # is German's "SEO-Elemente") is no language; the model says whether it is this one.
    weak = not dated and best < _SURE_WITHOUT_DATE
    if len(candidates) == 1 and not second_opinion and not weak:
        return candidates[0]
    guess = identify(_langid_sample(paras), tuple(profiles))
    sure = guess[0] if guess is not None and guess[1] >= _LANGID_MIN_PROB else None
    if weak and len(candidates) == 1 and sure not in (None, candidates[0]):
        candidates = []
    if not candidates:
        hint = f"; the text looks like '{sure}'" if sure else ""
        raise ArticleProblem(
            f"unknown language: no configured language profile ({', '.join(profiles)}) "
            f"matches its date line or headings{hint}",
            paras[1].line if len(paras) > 1 else paras[0].line,
        )
    if len(candidates) > 1:
        return guess[0] if guess and guess[0] in candidates else candidates[0]
    lang = candidates[0]
    if sure is not None and sure != lang and scores[sure] == 0:
        warn.append(
            (paras[0].line, f"the '{lang}' profile matches, but the text reads like '{sure}'")
        )
    return lang


_SURE_WITHOUT_DATE = 3  # a score without a date line that tells a language: two headings, say


def _scores(
    paras: Sequence[Paragraph], profiles: Mapping[str, LanguageProfile], dated: set[str]
) -> dict[str, int]:
    """How well each profile matches: its date line alone where one profile's does; else
    two points for each of its headings, one for each of its audience labels."""
    if len(dated) == 1:  # the usual case: the date line alone decides
        return {lang: 4 if lang in dated else 0 for lang in profiles}
    shorts = {_heading_key(p.text) for p in paras[3:] if len(p.text) <= _LABEL_MAX}
    labels = set()
    for p in paras[3:]:
        colon = _colon(p.rows[0], _LABEL_MAX)
        if colon > 0:
            labels.add(_bare_label(p.rows[0][:colon]))
    scores = {}
    for lang, profile in profiles.items():
        m = _markers(profile)
        score = 4 if lang in dated else 0
        scores[lang] = score + 2 * len(shorts & m.headings.keys()) + len(labels & m.labels.keys())
    return scores


# ---------------------------------------------------------------------------------------------
# The head: title, date line, summary.


def _split_head(paras: list[Paragraph], date_words: Sequence[str]) -> list[Paragraph]:
    """Let title, date line and summary share a paragraph (no blank lines between them)."""
    for index, para in enumerate(paras):
        rows = para.rows
        for row_no in range(1 if index == 0 else 0, len(rows)):
            if row_no == 0 or not _starts_with(rows[row_no], date_words):
                continue
            parts = [rows[:row_no], rows[row_no : row_no + 1], rows[row_no + 1 :]]
            made = [
                Paragraph(" ".join(part), para.line + start, tuple(part))
                for part, start in zip(parts, (0, row_no, row_no + 1), strict=True)
                if part
            ]
            return paras[:index] + made + paras[index + 1 :]
    return paras


def _first_row(raw: str) -> str:
    """A paragraph's first line as its ``rows[0]`` would be, from the text as written."""
    if "\n" not in raw:
        return raw.strip()
    return next((row for line in raw.split("\n") if (row := line.strip())), "")


def _unmarked(text: str) -> str:
    """A title, heading or date line without the Markdown marks some writers put around
    one line."""
    if text[:1] not in "#*_":
        return text
    found = _MARKDOWN_HEADING.fullmatch(text.strip())
    return next((part.strip() for part in found.groups() if part), text) if found else text


def _is_heading(para: Paragraph) -> bool:
    """A body heading: one short line that does not end like a sentence."""
    return len(para.rows) == 1 and _reads_as_heading(para.text)


def _reads_as_heading(text: str) -> bool:
    """Whether ``text`` is short and does not end like a sentence, as a heading."""
    if len(text) > _HEADING_MAX:
        return False
    bare = strip_marks(_unmarked(text)).rstrip()
    if not bare or bare[0] in _BULLETS:
        return False
    last = bare[-1]
    if last == ";" and _GREEK.search(bare):  # "Γιατί έχει σημασία;" asks
        last = "?"
    opening = bare.rfind("(" if last == ")" else "（") if last in ")）" else -1
    if opening > 0:  # a term glossed at the end, "… of the buffer (buffer)": what it glosses
        return _reads_as_heading(bare[:opening])
    if last in _SENTENCE_ENDS:
        return False
    # A question or exclamation can be a heading, as long as it is a single sentence.
    return last not in _ASKS or not _SENTENCE_BREAK.search(bare[:-1])


# ---------------------------------------------------------------------------------------------
# Sections after the body.


def _bullet_marker(text: str) -> str | None:
    if len(text) > 1 and text[0] in _BULLETS and text[1].isspace():
        return text[0]
    return None


def _list_item(text: str) -> str | None:
    """``text`` without its list mark ("- a", "• a", "1. a", "2) a"), or None if it has none."""
    if _bullet_marker(text) is not None:
        return text[1:].strip()
    found = _NUMBERED_ITEM.match(text)
    return text[found.end() :].strip() if found else None


@cache
def _bullet_split(marker: str) -> re.Pattern[str]:
    return re.compile(rf"\s+{re.escape(marker)}\s+")


def _bullets(first: str, rows: Sequence[str]) -> list[str]:
    """Bullets written inline (": - a - b", wrapped onto lines or not) or one a line ("- a",
    "1. a"); hyphens in words never split. A list that starts on the label's line is inline:
    a line that then starts with a dash is where the wrapping fell."""
    first = first.strip()
    texts = [t for t in (first, *rows) if t] if rows else [first] if first else []
    inline = _bullet_marker(first) is not None
    if rows and not inline and sum(_list_item(t) is not None for t in texts) >= 2:
        items: list[str] = []
        for text in texts:
            item = _list_item(text)
            if item is not None or not items:
                items.append(text.lstrip(_BULLETS).strip() if item is None else item)
            else:  # a wrapped bullet continues on the next line
                items[-1] += " " + text
        return [i for i in items if i]
    joined = " ".join(texts)
    marker = _bullet_marker(joined)
    if marker is None:
        return [joined] if joined else []
    if joined.isprintable():  # no whitespace but plain spaces: a plain split does
        pieces = f" {joined}".split(f" {marker} ")
    else:
        pieces = _bullet_split(marker).split(" " + joined)
    return [bullet for p in pieces if (bullet := p.strip())]


_Label = tuple[str | None, str, str]  # _audience_label's: audience id, label, rest of the row


def _audience_label(row: str, m: _Markers) -> _Label | None:
    """(audience id or None if unknown, label as written, rest of the row) for a label row."""
    colon = _colon(row, _LABEL_MAX + 1)
    if colon < 0:  # no colon in a row this short, or in the first words of a longer one
        dashed = _dashed_label(row, m)
        if dashed is not None or len(row) > _LABEL_MAX:
            return dashed
        audience = m.labels.get(_bare_label(row))
        return (audience, row.strip(" *_" + _COLONS), "") if audience else None
    label = row[:colon]
    if _bullet_marker(label):  # a list of the audiences: only a label the profile knows
        audience = m.labels.get(_bare_label(label))
        if audience is None:
            return None
        unbulleted = row[1:].lstrip()
        colon -= len(row) - len(unbulleted)
        return audience, label[1:].strip(" *_"), _after_label(unbulleted, colon)
    if _REF_START.fullmatch(label):
        return None
    return m.labels.get(_bare_label(label)), label.strip(" *_"), _after_label(row, colon)


def _label_dash(row: str) -> tuple[int, int] | None:
    """Where a dash between spaces stands in a label's place, instead of its colon: its start
    and end, if one does."""
    for dash in _LABEL_DASHES:
        at = row.find(dash, 0, _LABEL_MAX + len(dash))
        if at > 1:
            return at, at + len(dash)
    return None


def _dash_after_label(row: str) -> int:
    """Where the dash is that ends a label over inline bullets ("For procurement teams – Lead
    times … - Second bullet"), or -1: a short label that ends no sentence, and a bullet
    between spaces after its dash."""
    found = _label_dash(row)
    if found is None or ". " in row[: found[0]]:
        return -1
    return found[0] if any(f" {b} " in row[found[1] :] for b in "-•") else -1


def _dashed_label(row: str, m: _Markers) -> _Label | None:
    """A known audience's label before a dash where the colon goes: the text after the dash
    is the first bullet."""
    found = _label_dash(row)
    if found is None:
        return None
    audience = m.labels.get(_bare_label(row[: found[0]]))
    if audience is None:
        return None
    rest = row[found[1] :].strip()
    if _bullet_marker(rest) is None:
        rest = f"{next((b for b in _BULLETS if f' {b} ' in rest), '-')} {rest}"
    return audience, row[: found[0]].strip(" *_"), rest


_LABEL_DASHES = (" – ", " — ")


def _after_label(row: str, colon: int) -> str:
    """What follows a label's colon, past the emphasis the label closes there
    ("**For cost optimization teams:** - a - b")."""
    rest = row[colon + 1 :]
    return rest.lstrip("*_") if row[:1] in "*_" else rest


@lru_cache(maxsize=1024)
def unlisted(audience: str, label: str) -> Takeaways:
    """An audience's takeaways without their bullets, as summary readings keep them: the
    articles of a language repeat the same few, so each is made once and shared."""
    return Takeaways(audience, label, ())


_Open = tuple[str, str, int]  # the audience whose takeaways are being read: id, label, line


def _takeaways(
    paras: list[Paragraph],
    heads: list[_Label | None],
    m: _Markers,
    warn: list[tuple[int, str]],
    *,
    split: bool = True,
) -> tuple[tuple[Takeaways, ...], list[str]]:
    """Each audience's bullets (none unless ``split``), and what a digest shows of them: the
    id, the label and the text the bullets come from, in order, for the digest hash.
    ``heads`` holds ``_audience_label`` of each paragraph's first row."""
    heads = _placed(heads, paras, m, warn)
    found: dict[str, Takeaways] = {}
    shown: list[str] = []
    current: _Open | None = None
    pieces: list[tuple[str, tuple[str, ...]]] = []  # the text after the label, as _bullets takes it
    # No nested function closes each audience: compiled, its closure and this call's locals
    # would form a reference cycle, which a build with the collector off never frees.
    for para, head in zip(paras, heads, strict=True):
        rows = para.rows
        if head is None:
            if current is not None and _bullet_marker(rows[0]):
                pieces.append(("", rows))
            else:
                warn.append(
                    (
                        para.line,
                        f"takeaways line without '<audience>:' label: {_quoted(para.text[:60])}",
                    )
                )
            continue
        _close(current, pieces, (found, shown), warn, split)
        audience, label, rest = head
        current, pieces = None, []
        if audience is None:
            known = "; ".join(sorted({v: k for k, v in m.labels.items()}.values()))
            warn.append((para.line, f"unknown audience label {_quoted(label)} (known: {known})"))
            continue
        current = (audience, label, para.line)
        pieces = [(rest, rows[1:])]
    _close(current, pieces, (found, shown), warn, split)
    return tuple(found.values()), shown


def _close(
    current: _Open | None,
    pieces: list[tuple[str, tuple[str, ...]]],
    into: tuple[dict[str, Takeaways], list[str]],
    warn: list[tuple[int, str]],
    split: bool,
) -> None:
    """The ``current`` audience's takeaways from the text after its label (``pieces``), into
    ``_takeaways``' found takeaways and what a digest shows."""
    if current is None:
        return
    found, shown = into
    audience, label, line = current
    if not any(first.strip() or rows for first, rows in pieces):
        warn.append((line, f"no bullets after {_quoted(label)}"))
    elif audience in found:
        warn.append((line, f"second takeaways line for {_quoted(label)} ignored"))
    else:
        if split:
            bullets = [b for first, rows in pieces for b in _bullets(first, rows)]
            found[audience] = Takeaways(audience, sys.intern(label), tuple(bullets))
        else:
            found[audience] = unlisted(audience, label)
        text = " ".join(t for first, rows in pieces for t in (first.strip(), *rows) if t)
        shown.extend((audience, label, text))


_PLACE_MIN = 0.3
"""How alike an unknown label's own words must be to an audience's to be read as its
(``_likeness`` of the words no two audiences' labels share: "strategic planners" and "strategic
planning" score 0.74, "cost optimisation" and "cost optimization" 0.83, "marketing" and
"procurement" 0)."""


def _placed(
    heads: list[_Label | None], paras: list[Paragraph], m: _Markers, warn: list[tuple[int, str]]
) -> list[_Label | None]:
    """``heads`` with each unknown label placed where the others and its words tell it, with
    a warning: the lines keep the audiences' order, so unknown lines between two known ones
    are audiences between theirs that no line names, those whose labels their own words are
    likest (each at least ``_PLACE_MIN``). A line that cannot be told stays unknown (and is
    left out, with a warning)."""
    labelled = [(n, head) for n, head in enumerate(heads) if head is not None]
    if all(head[0] is not None for _, head in labelled):
        return heads
    order = list(dict.fromkeys(m.labels.values()))
    rank = {audience: n for n, audience in enumerate(order)}
    taken = {head[0] for _, head in labelled if head[0] is not None}
    placed = list(heads)
    start = 0
    while start < len(labelled):
        if labelled[start][1][0] is not None:
            start += 1
            continue
        end = start
        while end < len(labelled) and labelled[end][1][0] is None:
            end += 1
        before = labelled[start - 1][1][0] if start else None
        after = labelled[end][1][0] if end < len(labelled) else None
        low = rank[before] + 1 if before is not None else 0
        high = rank[after] if after is not None else len(order)
        free = [audience for audience in order[low:high] if audience not in taken]
        for (n, (_, label, rest)), audience in _free_places(labelled[start:end], free, m):
            placed[n] = (audience, label, rest)
            warn.append(
                (
                    paras[n].line,
                    f"unknown audience label {_quoted(label)} read as {audience!r} by its place and"
                    " words (add it to that audience's labels to say so)",
                )
            )
        start = end
    return placed


def _free_places(
    unknown: list[tuple[int, _Label]], free: list[str], m: _Markers
) -> list[tuple[tuple[int, _Label], str]]:
    """The ``unknown`` lines with their audiences among the ``free`` ones, in order
    (``_placed``): the order likest in all, less the lines whose words do not tell."""
    if not free or len(unknown) > len(free):
        return []
    words = {known: set(known.split()) for known in m.labels}
    audiences_of: dict[str, set[str]] = {}
    for known, audience in m.labels.items():
        for word in words[known]:
            audiences_of.setdefault(word, set()).add(audience)
    shared = {word for word, audiences in audiences_of.items() if len(audiences) > 1}

    def own(text: str) -> str:  # "for strategic planners" -> "strategic planners"
        return " ".join(w for w in _bare_label(text).split() if w not in shared)

    likeness = [
        [
            max(
                (_likeness(own(label), own(known)) for known, a in m.labels.items() if a == to),
                default=0.0,
            )
            for to in free
        ]
        for _, (_, label, _) in unknown
    ]
    chosen = max(
        combinations(range(len(free)), len(unknown)),
        key=lambda places: sum(likeness[i][at] for i, at in enumerate(places)),
    )
    return [
        (line, free[at])
        for i, (line, at) in enumerate(zip(unknown, chosen, strict=True))
        if likeness[i][at] >= _PLACE_MIN
    ]


_REFERENCE_STEP = 10  # how far a reference's number may pass the one above it in its paragraph


def _reference(row: str) -> tuple[int, str] | None:
    found = _REF_START.fullmatch(row)
    if not found or not found[4]:
        return None
    digits = found[1] or found[2] or found[3].translate(_SUPER_DIGIT)
    return int(digits), found[4]


def _references(paras: list[Paragraph], warn: list[tuple[int, str]]) -> tuple[Reference, ...]:
    """The numbered references in ``paras``, one a paragraph or one a line; a line that does
    not start with a number continues the reference above it, as does one of the same
    paragraph whose number could not come next: a title wrapped before its year ("…,
    September" over "2026." September 8, 2026.")."""
    raw: list[tuple[int, str, int]] = []
    for para in paras:
        for offset, row in enumerate(para.rows):
            ref = _reference(row)
            if ref is not None and offset and not 0 < ref[0] - raw[-1][0] <= _REFERENCE_STEP:
                ref = None
            if ref is not None:
                raw.append((ref[0], ref[1], para.line + offset))
            else:
                number, text, line = raw[-1]
                raw[-1] = (number, f"{text} {row}", line)
    return _finish_references(raw, warn)


def _finish_references(
    raw: list[tuple[int, str, int]], warn: list[tuple[int, str]]
) -> tuple[Reference, ...]:
    refs: dict[int, Reference] = {}
    for number, body, line in raw:
        urls = list(_URL.finditer(body)) if "http" in body else []  # the scan is slow
        url = urls[-1][1].rstrip(".,;:)]'\"") if urls else None
        text = body
        if urls:
            last = urls[-1]
            # A Markdown link, "[title](https://…)", keeps its title; "(https://…)" goes whole.
            before = _LINK_OPENED.sub(r"\1", body[: last.start()]).rstrip("(<")
            text = before + body[last.end() :]
        text = " ".join(text.split()).rstrip(" -–—") or body
        if number in refs:
            warn.append((line, f"reference {number} appears twice; the first one is kept"))
            continue
        # The same source is often cited many times (and in every language): share the text.
        refs[number] = Reference(number, sys.intern(text), sys.intern(url) if url else None)
    return tuple(refs.values())


_COUNTED = re.compile(r"[(（]\s*(\d{2,4})\b[^)）]*[)）]")  # "(157 characters)", "(১৬৯ অক্ষর)"


def _short_of_its_count(item: str) -> bool:
    """Whether a labelled SEO line's value is well short of the characters its label counts:
    it was wrapped, and the next line goes on it."""
    colon = _colon(item, _LABEL_MAX)
    counted = _COUNTED.search(item, 0, colon) if colon > 0 else None
    return counted is not None and len(item) - colon < 0.8 * int(counted[1])


_CLOSED = ".!?…。！？\"”»)'"  # what a finished sentence, or its quotation, ends in


def _seo_rows(rows: Sequence[str]) -> Sequence[str]:
    """The SEO tail's lines as items: a line that opens with neither a label nor a bullet,
    that opens with a bullet under an inline list (`URL slugs: - Primary: …`), or that follows
    one ending in a list's dash or a label's colon, goes on the line before (a hard-wrapped
    field: `SEO Description: … 362 petaflops` over `per cluster …`)."""
    if len(rows) == 1:
        return rows
    items: list[str] = []
    for row in rows:
        if _bullet_marker(row) is not None:  # an item, or the next of an inline list
            opens = not items or not _INLINE_LIST.search(items[-1])
        else:  # a label, but not the number that ends one wrapped before it ("Alt" over "2:"),
            # nor words with a colon that go on a sentence the line before left open
            # ("… air-cooled data centers" over "for liquid cooling: RDHx vs …")
            colon = _colon(row, _LABEL_MAX)
            opens = colon > 0 and not row[:colon].strip().isdigit()
            if opens and items and row[:1].islower():
                opens = items[-1].rstrip()[-1:] in _CLOSED
            # … or a value shorter than the count its label gives ("SEO Description (157
            # characters): Analysis of Llama," over "Mistral and Qwen license terms: …")
            opens = opens and not (items and _short_of_its_count(items[-1]))
        if items and (not opens or _DANGLING.search(items[-1])):
            items[-1] = f"{items[-1]} {row}"
        else:
            items.append(row)
    return items


def _seo_items(para: Paragraph) -> Iterator[tuple[str, str]]:
    """(label, value) pairs of the SEO tail, whether written as lines, bullets or inline lists."""
    for row in _seo_rows(para.rows):
        # The split scans every character: only where one of its markers is.
        marked = "•" in row or "·" in row or "▪" in row
        for item in _SEO_ITEM.split(row) if marked else (row,):
            label, sep, value = _split_label(_unmarked(item.strip()).lstrip(_BULLETS))
            value = _value(value)
            if not sep:
                continue
            if _bullet_marker(value):
                for sub in _bullets(value, ()):
                    sub_label, sub_sep, sub_value = _split_label(sub)
                    if sub_sep:
                        yield sub_label, sub_value.strip()
                continue
            yield label, value


def _value(written: str) -> str:
    """A labelled line's value, without the emphasis around it or closing its label there
    ("**URL slugs:** - …", "SEO title: **…**")."""
    value = written.strip()
    emphasis = value[:1] in "*_" and _bullet_marker(value) is None  # "* a - b": a list
    return value.strip("*_").strip() if emphasis else value


def _seo_field(label: str, m: _Markers) -> str | None:
    bare = _bare_label(label)
    name = m.seo_fields.get(bare)
    if name is None and _alternative(bare, m.alt_slugs):
        name = "alt_slugs"
    return name


def _alternative(bare: str, alts: Sequence[str]) -> bool:
    """Whether the label ``bare`` names an alternative slug: "alt", "alt 2" or, with no
    space, "代替2"."""
    if any(bare == a or bare.startswith(a + " ") for a in alts):
        return True
    return bare[-1:].isdigit() and _NUMBERED.sub("", bare).strip() in alts


def _is_seo(para: Paragraph, m: _Markers) -> bool:
    return any(_seo_field(label, m) for label, _ in _seo_items(para))


def _seo(paras: list[Paragraph], m: _Markers, warn: list[tuple[int, str]]) -> Seo:
    values: dict[str, str] = {}
    alts: list[str] = []
    unknown: list[tuple[str, str, int]] = []  # label, value, line: labels the profile lacks
    for number, para in enumerate(paras):
        items = [(label, value) for label, value in _seo_items(para) if value]
        if not items and number == 0 and len(paras) > 1 and _is_heading(para):
            continue  # the tail's heading, in words the profile does not know
        if not items:
            warn.append(
                (para.line, f"text after the references ignored: {_quoted(para.text[:60])}")
            )
        for label, value in items:
            name = _seo_field(label, m)
            if name is None:
                unknown.append((_PARENS.sub("", label).strip(), value, para.line))
            if name == "alt_slugs" or (name is None and _HYPHENED_SLUG.fullmatch(value)):
                alts.append(value)
            elif name is not None:
                values.setdefault(name, value)
    _read_unknown(unknown, values, alts, warn)
    return Seo(
        title=values.get("title"),
        description=values.get("description"),
        excerpt=values.get("excerpt"),
        primary_slug=values.get("primary_slug"),
        alt_slugs=tuple(alts),
    )


_SEO_NAMES = {
    "primary_slug": "primary slug",
    "title": "SEO title",
    "description": "SEO description",
}


def _read_unknown(
    unknown: list[tuple[str, str, int]],
    values: dict[str, str],
    alts: list[str],
    warn: list[tuple[int, str]],
) -> None:
    """The SEO fields under labels the profile does not know, where their values tell which
    they are, as a language without a profile has them read: the first slug is the primary
    one when no label says so (it ties the language versions together; the others stay
    alternatives), and an SEO or meta field the description when ``_a_description`` says so,
    else the title. Each one read so gets a warning."""
    for label, value, line in unknown:
        if _HYPHENED_SLUG.fullmatch(value):
            if "primary_slug" in values:
                continue
            alts.remove(value)
            field = "primary_slug"
        elif _names_seo(label):
            field = "description" if _a_description(value) else "title"
            if field in values:
                continue
        else:
            continue
        values[field] = value
        warn.append(
            (
                line,
                f"unknown SEO label {_quoted(label)} read as the {_SEO_NAMES[field]}"
                f" (add it to seo_fields.{field} to say so)",
            )
        )


_IDEOGRAPH = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def slugify(text: str) -> str:
    """A URL slug of ``text``: lower-case ASCII words joined by "-", every script spelt in
    Latin letters first (`Чипы и цены` → `chipy-i-tseny`, `Straße` → `strasse`), so that a
    title in any language gives one, and the same one when the article is revised. A Chinese
    character is a syllable of its own (`芯片` → `xin-pian`): no space tells the words."""
    spelt = anyascii(_IDEOGRAPH.sub(r" \g<0> ", text))
    return "-".join(re.findall(r"[a-z0-9]+", spelt.lower()))[:80].strip("-")


def content_hash(lang: str, title: str, updated: date, takeaways: Sequence[str]) -> str:
    """A hash of what a digest shows of the article: its title, date and takeaways (each
    audience's id, label and text, as ``_takeaways`` gives them).

    A revision of the body or the references alone, or lines wrapped anew, leave it as it
    was, so a digest never sends an article again for a change its readers would not see.
    """
    shown = "\0".join((lang, title, updated.isoformat(), *takeaways))
    return hashlib.blake2b(shown.encode(), digest_size=16).hexdigest()


# ---------------------------------------------------------------------------------------------


Reading = tuple[Article | None, list[Diagnostic]]
"""One file's reading: its article (None when the file is unusable) and its diagnostics."""


def parse_article(
    data: bytes,
    source: str,
    profiles: Mapping[str, LanguageProfile],
    *,
    body: bool = True,
    bullets: bool = True,
    blocks: bool = True,
    second_opinion: bool = True,
) -> Reading:
    """Parse one file's bytes. Returns the article (None if unusable) and its diagnostics.

    Never raises on bad input: every problem is a diagnostic. With ``body=False`` neither the
    body blocks nor the references are made, nor the checks that only warn about them
    (footnote marks, repeated reference numbers) or about the language: when one profile
    matches, the language model's second opinion is not asked. Everything else is, which is
    what summaries, digests and feed indexes need, at a fraction of the time and memory. With
    ``bullets=False`` each audience's takeaways keep their label but not their bullets, which
    is all a feed index shows (the article's ``content_hash`` still covers them). With
    ``blocks=False`` the body is read for its problems but its blocks are not made: what a
    check of the whole set needs, at about half the cost of the body. With
    ``second_opinion=False`` the language model is not asked either when the body is read: for
    a caller that has the file's diagnostics from an earlier reading.
    """
    warnings: list[tuple[int, str]] = []

    def report(error: ArticleProblem | None = None) -> list[Diagnostic]:
        found = [Diagnostic(source, line, Severity.WARNING, msg) for line, msg in warnings]
        if error is not None:
            found.append(Diagnostic(source, error.line, Severity.ERROR, str(error)))
        return found

    if not profiles:
        return None, [Diagnostic(source, None, Severity.ERROR, "no language profiles configured")]
    try:
        parts = (body, bullets, blocks, body and second_opinion)
        article = _parse(data, source, profiles, parts, warnings)
    except ArticleProblem as problem:
        # Its traceback's frames hold it (one re-raises it): a reference cycle, which a build
        # with the collector off would keep. Nothing reads the traceback.
        problem.__traceback__ = None
        return None, report(problem)
    if article.lang not in profiles:
        return None, [*report(), _unpublished(article)]
    return article, report()


def _unpublished(article: Article) -> Diagnostic:
    """What was read of an article in a language that is not published, and how to publish
    it."""
    name = Locale.parse(article.lang.replace("-", "_")).get_display_name("en")
    audiences = len(article.takeaways)
    return Diagnostic(
        article.source,
        1,
        Severity.WARNING,
        f"{UNPUBLISHED} {name} ('{article.lang}'), which site.languages does not "
        f"name; read as {_quoted(article.title)} of {article.updated.isoformat()}, "
        f"{audiences} audience{'' if audiences == 1 else 's'}, slug {_quoted(article.slug)}. "
        "`syndicate check` says how to publish it",
    )


def _parse(
    data: bytes,
    source: str,
    profiles: Mapping[str, LanguageProfile],
    parts: tuple[bool, bool, bool, bool],
    warn: list[tuple[int, str]],
) -> Article:
    """The phases of ``parse_article``, each a function below: the paragraphs, the language,
    the head, where each section starts, then each section. ``parts``: its ``body``,
    ``bullets``, ``blocks`` and ``second_opinion``."""
    body, bullets, keep_blocks, second_opinion = parts
    paras = _paragraphs(data, profiles, warn)
    try:
        lang = detect_language(paras, profiles, warn, second_opinion=second_opinion)
    except ArticleProblem as unknown:
        lang, profiles = _unconfigured(paras, profiles, unknown)
    m = _markers(profiles[lang])
    updated, summary, body_start, subtitled = _head(
        paras, lang, profiles[lang].date_line[0], m, warn
    )
    paras.split_headings(body_start, lambda rows: _section_heading(rows[0], m) is not None)
    raws = paras.raws(body_start)
    starts = _section_starts(paras, raws, body_start, m)
    body_end = starts[0][0] if starts else len(paras)
    spans = _spans(paras, starts, warn)
    takeaway_paras, heads, seo_paras = _within_takeaways(paras, spans, m)
    takeaways, shown = _key_takeaways(
        paras, starts, spans, body_end, (takeaway_paras, heads), m, warn, bullets
    )
    references, tail = _references_and_tail(paras, spans, raws, body_start, body, warn)
    seo = _seo(tail + seo_paras, m, warn)
    blocks: tuple[Block, ...] = ()
    if body:
        span = (body_start, body_end)
        blocks = _body_blocks(paras, raws, span, (subtitled, keep_blocks), references, warn)
    title = strip_marks(_unmarked(paras[0].text))
    hashed = content_hash(lang, title, updated, shown)
    slug, seo = _slugs(seo, paras[0], hashed, warn)
    return Article(
        source=source,
        lang=lang,
        slug=slug,
        title=title,
        updated=updated,
        summary=strip_marks(paras[summary].text),
        blocks=blocks,
        takeaways=takeaways,
        references=references,
        seo=seo,
        content_hash=hashed,
    )


def _body_blocks(
    paras: Paragraphs,
    raws: list[str],
    body: tuple[int, int],
    wanted: tuple[bool, bool],
    references: tuple[Reference, ...],
    warn: list[tuple[int, str]],
) -> tuple[Block, ...]:
    """The body's blocks between ``body``'s two indexes, a subtitle's first, each footnote
    mark checked against the references; ``wanted``: whether a subtitle stands over the date
    line, and whether the blocks are kept (else only their marks are checked)."""
    subtitled, keep = wanted
    blocks: tuple[Block, ...] = ()
    if keep:
        blocks = _blocks(paras[body[0] : body[1]], references, warn)
        # What stood over the update note (``_update_first``) is no heading: a byline, a note.
        above = paras[body[0] - 1].line
        blocks = tuple(_as_paragraph(b) if b.line < above else b for b in blocks)
    else:
        _unanswered_marks(paras, raws, body, references, warn)
    if not subtitled:
        return blocks
    standfirst = Block("standfirst", split_marks(_unmarked(paras[1].text)), paras[1].line)
    _unanswered(standfirst.parts, frozenset(r.number for r in references), standfirst.line, warn)
    return (standfirst, *blocks) if keep else ()


def _as_paragraph(block: Block) -> Block:
    return Block("paragraph", block.parts, block.line) if block.kind == "heading" else block


def _unconfigured(
    paras: Paragraphs, profiles: Mapping[str, LanguageProfile], unknown: ArticleProblem
) -> tuple[str, Mapping[str, LanguageProfile]]:
    """The language no profile matches, as the text reads, and the profiles with the one its
    own structure shows (below). Raises ``unknown`` when either cannot be told."""
    found = _read_unconfigured(paras, profiles)
    if found is None:
        raise unknown
    lang, profile = found
    return lang, {**profiles, lang: profile}


def _paragraphs(
    data: bytes, profiles: Mapping[str, LanguageProfile], warn: list[tuple[int, str]]
) -> Paragraphs:
    """The file's paragraphs, the head split where title, date line and summary share one.
    Raises ArticleProblem for a file with no text, no title or too little to be an article."""
    data = utf8(data)
    paras = Paragraphs(clean(decode(data), warn, data))
    if not paras:
        raise ArticleProblem("empty file: no text to read")
    head = paras[:2]
    paras.replace_head(len(head), _split_head(head, _date_words(profiles).longest_first))
    if len(paras[0].text) > TITLE_MAX:
        raise ArticleProblem(
            f"title is {len(paras[0].text):,} characters long, over {TITLE_MAX}: not published"
            " (is a blank line missing after it?)",
            paras[0].line,
        )
    if len(paras) < 3:
        raise ArticleProblem(
            "too short: expected a title, a date line and a summary paragraph", paras[-1].line
        )
    return paras


def _head(
    paras: Paragraphs, lang: str, expected: str, m: _Markers, warn: list[tuple[int, str]]
) -> tuple[date, int, int, bool]:
    """The date line's date, the summary's paragraph, the body's first and whether a subtitle
    (a standfirst) sits between the title and the date line. The date line is the second
    paragraph, or the third after a subtitle; ``expected`` is the date line's words, for the
    messages. Without a "<Month year> Update:" paragraph, the first body paragraph is also the
    summary."""
    at = (
        2
        if _date_line_words(_unmarked(paras[2].text), m.date_line)
        and not _date_line_words(_unmarked(paras[1].text), m.date_line)
        else 1
    )
    date_para = paras[at]
    written = _unmarked(date_para.text)
    named = _date_line_words(written, m.date_line) is not None
    # "Published 1 December 2025 · Updated 11 December 2025": the date after the words.
    within = None if named else m.date_line_within.search(written)
    found = find_date(written[within.end() :], lang) if within is not None else None
    if found is not None and within is not None:
        named, written = True, written[within.end() :]
    else:
        found = find_date(written, lang)
    updated = found[0] if found else None
    if found and month_first(lang) and _ambiguous(written[found[1] : found[2]], found[0]):
        warn.append(
            (
                date_para.line,
                f"date {_quoted(written[found[1] : found[2]])} read as {found[0].isoformat()}, "
                f"in the order {lang!r} writes dates in figures: a month's name leaves no doubt",
            )
        )
    if not named:
        if updated is None:
            raise ArticleProblem(
                f"missing date line: expected {_quoted(expected)} and a date, "
                f"found {_quoted(date_para.text[:60])}",
                date_para.line,
            )
        warn.append((date_para.line, f"date line without {_quoted(expected)}"))
    if updated is None:
        raise ArticleProblem(
            f"cannot read the date in {_quoted(date_para.text[:80])}", date_para.line
        )
    if len(paras) <= at + 1:
        raise ArticleProblem("too short: no summary paragraph after the date line", date_para.line)
    summary = at + 1
    labelled = _update_first(paras, summary, lang)
    return updated, summary, summary + 1 if labelled else summary, at == 2


_FRONT_MATTER = 3  # paragraphs a writer may put between the date line and the update note


def _update_first(paras: Paragraphs, summary: int, lang: str) -> bool:
    """Whether the summary's paragraph (``summary``) is labelled as an update: where a byline
    or a note stands before it ("By Helen Marsh, Senior Analyst"), the update is moved over
    them, the summary, and they open the body."""
    if _labels_an_update(paras[summary].text, lang):
        return True
    for at in range(summary + 1, min(summary + _FRONT_MATTER + 1, len(paras))):
        text = paras[at].text
        # Further down, the label must name its month: "Outlook for 2027:" opens no update.
        if _labels_an_update(text, lang) and names_a_month(text[: _colon(text, len(text))], lang):
            head = paras[:summary]
            paras.replace_head(at + 1, [*head, paras[at], *paras[summary:at]])
            return True
    return False


def _labels_an_update(text: str, lang: str) -> bool:
    """Whether the summary opens with its "<Month year> Update:" label: a year before a colon,
    or with a month's name in a few words before a dash; its words may hold an abbreviation's
    period ("Aktualizacja z lutego 2026 r.:", "2025. decemberi frissítés:") but end no
    sentence."""
    found = _SUMMARY_LABEL.match(text)
    if found is None:
        found = _SUMMARY_LABEL_DASHED.match(text)
        if found is not None and not names_a_month(found[0], lang):
            return False
    return found is not None and not any(w.isupper() for w in _PERIOD_THEN.findall(found[0]))


_Start = tuple[int, str, int]  # a section's heading index, its kind, its first content index


def _section_starts(
    paras: Paragraphs, raws: list[str], body_start: int, m: _Markers
) -> list[_Start]:
    """Where each section after the body starts. Each runs from its heading to the next; the
    body ends at the first of them. Takeaways without their heading start at the first
    audience-label line. The scan reads the paragraphs as written (``raws``, from
    ``body_start`` on): most are passed over without being made."""
    starts: list[_Start] = []
    for index, raw in enumerate(raws, body_start):
        if len(raw) <= _LABEL_MAX:  # the text is no longer than as written
            kind = _section_heading(raw, m)
        elif "\n" not in raw and not raw[0].isspace() and not raw[-1].isspace():
            # The text is as written: too long for a heading, and an audience line only if a
            # colon comes early. Most of the body ends here.
            if starts or _colon(raw, _LABEL_MAX) <= 0:
                continue
            kind = None
        else:
            text = paras[index].text
            kind = (
                m.headings.get(_heading_key(_unmarked(text))) if len(text) <= _LABEL_MAX else None
            )
        if kind is not None:
            starts.append((index, kind, index + 1))
        elif not starts and _opens_takeaways(paras, raws, index, body_start, m):
            # Takeaway lines just above, under labels the profile does not know, are the
            # section's, and so is a heading above them, in words it does not know.
            first = index
            while first - 1 >= body_start and _is_audience_line(paras[first - 1]):
                first -= 1
            above = first - 1 >= body_start and _is_heading(paras[first - 1])
            starts.append((first - 1 if above else first, "takeaways", first))
    return starts


def _section_heading(row: str, m: _Markers) -> str | None:
    """The kind of section ``row`` is the heading of, if it is one ("takeaways",
    "references", "seo")."""
    bare = _unmarked(row)
    word = bare.split(None, 1)  # a heading's first word tells most lines apart
    if not word or word[0].casefold().rstrip(_COLONS) not in m.heading_starts:
        return None
    return m.headings.get(_heading_key(bare))


def _is_audience_line(para: Paragraph) -> bool:
    """Whether ``para`` is a takeaways line: a label, a colon and inline bullets, or the
    label alone with a bullet on each line below. A line of a list of the audiences
    (`- For …: - a - b`) is one when its bullets are inline."""
    row = para.rows[0]
    listed = _bullet_marker(row) is not None
    if listed:
        row = row[1:].lstrip()
    colon = _colon(row, _LABEL_MAX + 1)
    if colon < 0 and not listed:
        return _dash_after_label(row) > 0
    if colon < 2 or _bullet_marker(row) or _REF_HEAD.match(row):
        return False
    rest = _after_label(row, colon).strip()
    if rest:
        return _bullet_marker(rest) is not None and len(_bullets(rest, ())) >= 1
    return not listed and len(para.rows) > 1 and _list_item(para.rows[1]) is not None


def _opens_takeaways(
    paras: Paragraphs, raws: list[str], index: int, body_start: int, m: _Markers
) -> bool:
    """Whether paragraph ``index`` (``raws`` start at the body's first, ``body_start``) opens
    the takeaways without their heading: it starts with a known audience's label, and
    is a takeaways line or the next paragraph starts with a known label too. A body paragraph
    may address an audience ("For procurement teams: the message is clear.") without ending
    the body."""
    after = index + 1 - body_start
    return _labels_an_audience(raws[index - body_start], m) and (
        _is_audience_line(paras[index])
        or (after < len(raws) and _labels_an_audience(raws[after], m))
    )


def _labels_an_audience(raw: str, m: _Markers) -> bool:
    """Whether the paragraph written ``raw`` starts with a known audience's label."""
    row = _first_row(raw)
    label = _audience_label(row, m) if _colon(row, _LABEL_MAX) > 0 else None
    return label is not None and label[0] is not None


def _spans(
    paras: Paragraphs, starts: list[_Start], warn: list[tuple[int, str]]
) -> dict[str, tuple[int, int]]:
    """Each section kind's (first, end) paragraph index; a second section of a kind is
    ignored, with a warning."""
    spans: dict[str, tuple[int, int]] = {}
    for number, (index, kind, first) in enumerate(starts):
        end = starts[number + 1][0] if number + 1 < len(starts) else len(paras)
        if kind in spans:
            warn.append((paras[index].line, f"second {kind} section ignored"))
            continue
        spans[kind] = (first, end)
    return spans


def _within_takeaways(
    paras: Paragraphs, spans: dict[str, tuple[int, int]], m: _Markers
) -> tuple[list[Paragraph], list[_Label | None], list[Paragraph]]:
    """The takeaways' paragraphs with each one's audience label (if it starts with one), and
    the SEO tail's paragraphs. Within the takeaways, a numbered list starts the references
    (recorded in ``spans``) and labelled SEO lines the tail."""
    seo_paras = paras[slice(*spans["seo"])] if "seo" in spans else []
    first, end = spans.get("takeaways", (0, 0))
    heads: list[_Label | None] = []
    for index in range(first, end):
        row = paras[index].rows[0]
        heads.append(_audience_label(row, m))
        if heads[-1] is not None:
            continue
        # A heading just above either, in words the profile does not know, is theirs.
        under = index + 1 < end and _is_heading(paras[index])
        if _reference(row) and "references" not in spans:
            spans["references"] = (index, end)
        elif under and _reference(paras[index + 1].rows[0]) and "references" not in spans:
            spans["references"] = (index + 1, end)
        elif _is_seo(paras[index], m):
            seo_paras = paras[index:end] + seo_paras
        elif under and _is_seo(paras[index + 1], m):
            seo_paras = paras[index + 1 : end] + seo_paras
        else:
            continue
        end = index
        break
    takeaway_paras = paras[first:end]
    return takeaway_paras, heads[: len(takeaway_paras)], seo_paras


def _key_takeaways(
    paras: Paragraphs,
    starts: list[_Start],
    spans: dict[str, tuple[int, int]],
    body_end: int,
    section: tuple[list[Paragraph], list[_Label | None]],
    m: _Markers,
    warn: list[tuple[int, str]],
    bullets: bool,
) -> tuple[tuple[Takeaways, ...], list[str]]:
    """``_takeaways`` of the ``section`` ``_within_takeaways`` found, with a warning when the
    article has no takeaways (it goes to feeds only) or an empty section."""
    if "takeaways" not in spans:
        line = paras[body_end - 1].line
        warn.append((line, "no key-takeaways section: the article goes to feeds only"))
        return (), []
    found, heads = section
    if not found:
        heading = next(index for index, kind, _ in starts if kind == "takeaways")
        warn.append((paras[heading].line, "key-takeaways section is empty"))
    return _takeaways(found, heads, m, warn, split=bullets)


def _references_and_tail(
    paras: Paragraphs,
    spans: dict[str, tuple[int, int]],
    raws: list[str],
    body_start: int,
    body: bool,
    warn: list[tuple[int, str]],
) -> tuple[tuple[Reference, ...], list[Paragraph]]:
    """The references (made only with ``body``), and the paragraphs after them: they run
    from the section's start for as long as paragraphs start numbered."""
    if "references" not in spans:
        return (), []
    first, end = spans["references"]
    listed = next((i for i in range(first, end) if not _REF_HEAD.match(raws[i - body_start])), end)
    references = _references(paras[first:listed], warn) if body else ()
    return references, paras[listed:end]


def _blocks(
    paras: list[Paragraph], references: tuple[Reference, ...], warn: list[tuple[int, str]]
) -> tuple[Block, ...]:
    """The body's headings, paragraphs, lists' items and quotations, with a warning for each
    footnote mark that no reference answers."""
    numbers = frozenset(r.number for r in references)
    blocks: list[Block] = []
    for para in paras:
        parts = split_marks(para.text)
        _unanswered(parts, numbers, para.line, warn)
        if all(row.startswith(">") for row in para.rows):  # Markdown's quotation
            quoted = " ".join(row[1:].strip() for row in para.rows)
            blocks.append(Block("quote", split_marks(quoted), para.line))
        elif _is_table(para.rows):
            blocks += _table(para)
        elif _is_heading(para) or _a_wrapped_heading(para):
            blocks.append(Block("heading", split_marks(_unmarked(para.text)), para.line))
        elif len(para.rows) > 1 or _list_item(para.text) is not None:
            blocks += _listed(para)
        else:
            blocks.append(Block("paragraph", parts, para.line))
    return tuple(blocks)


_FILLED = 60  # a line this long was filled to the width an editor wraps at


def _a_wrapped_heading(para: Paragraph) -> bool:
    """A heading too long for the width the file is wrapped at: a filled line over a
    shorter one, together a heading's length, ending no sentence."""
    rows = para.rows
    return (
        len(rows) == 2
        and len(rows[0]) >= _FILLED
        and len(rows[1]) < len(rows[0])
        and _reads_as_heading(para.text)
    )


def _listed(para: Paragraph) -> list[Block]:
    """A paragraph that is a list ("- a" over "- b", "1. a" over "2. b"), or that leads into
    one ("Three forces converged:" over its items), as its items; else the paragraph. A line
    that starts no item goes on the item above it (it was wrapped)."""
    rows = para.rows
    listed = [_list_item(row) for row in rows]
    first = next((i for i, item in enumerate(listed) if item is not None), None)
    if (
        first is None
        or (first > 0 and not rows[first - 1].rstrip().endswith(tuple(_COLONS)))
        or _a_date_not_a_list(rows[first:])
    ):
        return [Block("paragraph", split_marks(para.text), para.line)]
    blocks = [Block("paragraph", split_marks(" ".join(rows[:first])), para.line)] if first else []
    items: list[tuple[str, list[str], int]] = []
    for offset in range(first, len(rows)):
        row, item = rows[offset], listed[offset]
        if item is None:
            items[-1][1].append(row.strip())
        else:
            kind = "item" if _bullet_marker(row) is not None else "numbered"
            items.append((kind, [item], para.line + offset))
    blocks += [Block(kind, split_marks(" ".join(texts)), line) for kind, texts, line in items]
    return blocks


def _is_table(rows: tuple[str, ...]) -> bool:
    """A Markdown table: a head row, the rule under it, body rows, each with its cells
    between pipes."""
    return (
        len(rows) > 2
        and "|" in rows[1]
        and _TABLE_RULE.fullmatch(rows[1].strip()) is not None
        and all("|" in row for row in rows)
    )


def _table(para: Paragraph) -> list[Block]:
    """A table's rows, the head's and the body's, the rule left out: each a block whose text
    is its cells with the pipes between them (a cell's own pipe is written ``\\|``)."""
    blocks = []
    for offset, row in enumerate(para.rows):
        if offset != 1:
            cells = row.strip().removeprefix("|")
            cells = cells if cells.endswith("\\|") else cells.removesuffix("|")
            kind = "head" if offset == 0 else "row"
            blocks.append(Block(kind, split_marks(cells.strip()), para.line + offset))
    return blocks


def _a_date_not_a_list(rows: Sequence[str]) -> bool:
    """Whether ``rows`` open with a number that starts no list: one numbered line, not the
    first ("11. Dezember 2025 markierte …", as German writes a date)."""
    numbered = [row for row in rows if _NUMBERED_ITEM.match(row)]
    return len(numbered) == 1 and not rows[0].startswith(("1.", "1)"))


def _unanswered_marks(
    paras: Paragraphs,
    raws: list[str],
    body: tuple[int, int],
    references: tuple[Reference, ...],
    warn: list[tuple[int, str]],
) -> None:
    """``_blocks``' warnings alone, from the body paragraphs as written (``raws`` start at the
    body): joining a paragraph's lines moves no footnote mark, so making it is not needed."""
    start, end = body
    answered = {str(r.number).translate(_TO_SUPER).encode() for r in references}
    written = "\n".join(raws[: end - start])
    signed = any(sign in written for sign in _MARK_SIGNS)
    if not signed and _mark_runs(written.encode()) <= answered:
        return  # the usual case: every mark in the body is answered
    numbers = frozenset(r.number for r in references)
    for index in range(start, end):
        _unanswered(split_marks(raws[index - start]), numbers, paras.line(index), warn)


def _unanswered(
    parts: tuple[str | int, ...], numbers: frozenset[int], line: int, warn: list[tuple[int, str]]
) -> None:
    """A warning for each footnote mark among a paragraph's ``split_marks`` parts that no
    reference (``numbers``) answers."""
    for note in parts:
        if isinstance(note, int) and note not in numbers:
            warn.append((line, f"footnote mark {note} has no reference"))


_SUPER_2 = frozenset(c.encode() for c in SUPERSCRIPTS if len(c.encode()) == 2)  # ¹²³
_SUPER_3 = frozenset(c.encode() for c in SUPERSCRIPTS if len(c.encode()) == 3)  # ⁰⁴-⁹


def _super_at(data: bytes, at: int) -> int:
    """The length of the superscript digit at ``at`` in UTF-8 ``data``; 0 if none is there."""
    if at < 0:
        return 0
    return 2 if data[at : at + 2] in _SUPER_2 else 3 if data[at : at + 3] in _SUPER_3 else 0


def _mark_runs(data: bytes) -> set[bytes]:
    """Each run of superscript digits in UTF-8 ``data``, as written. A regex over the text
    tests every character (about 90 µs for an article); finding the digits' two lead byte
    sequences tests only where they are (a few µs)."""
    runs: set[bytes] = set()
    for lead in (b"\xc2", b"\xe2\x81"):
        at = data.find(lead)
        while at >= 0:
            if _super_at(data, at - 2) != 2 and _super_at(data, at - 3) != 3:  # a run starts
                end = at
                while step := _super_at(data, end):
                    end += step
                if end > at:
                    runs.add(data[at:end])
            at = data.find(lead, at + 1)
    return runs


def _slugs(seo: Seo, title: Paragraph, hashed: str, warn: list[tuple[int, str]]) -> tuple[str, Seo]:
    """The article's slug (the SEO tail's primary slug, else one made from the title) and the
    SEO tail with its alternative slugs made URL slugs."""
    slug = seo.primary_slug
    if slug is not None and not _SLUG.fullmatch(slug):
        warn.append(
            (1, f"primary slug {_quoted(slug)} is not a URL slug; using {_quoted(slugify(slug))}")
        )
        slug = slugify(slug)
    if not slug:
        slug = slugify(seo.title or title.text) or f"article-{hashed[:12]}"
        warn.append(
            (title.line, f"no primary slug in the SEO tail; using {_quoted(slug)} from the title")
        )
    alt_slugs = tuple(dict.fromkeys(a if _SLUG.fullmatch(a) else slugify(a) for a in seo.alt_slugs))
    alts = tuple(a for a in alt_slugs if a)
    return slug, Seo(seo.title, seo.description, seo.excerpt, seo.primary_slug, alts)


# ---------------------------------------------------------------------------------------------
# An article in a language no profile describes: its words read from where the format puts them.
#
# The format places every part: the date line is the second paragraph, the takeaways are a run
# of "<label>: - bullet - bullet" lines, the references a numbered list, the SEO tail labelled
# lines with the slugs last. So a translation into a language nobody configured still shows,
# by position alone, which words open each part; the audiences follow the order every language
# version lists them in. What is read here is the profile a publisher would write for that
# language: the reader parses the article with it, and ``syndicate check`` offers it as the
# ``[languages.<code>]`` block that publishes the language.


_INFER_SAMPLE = 1_000  # characters of prose the model reads: a short sample can mislead it
_INFER_MIN_PROB = 0.9
_INFER_RIVALS = 3  # close languages the model may hesitate between (Indonesian, Malay)
# An SEO title is short (search results show about 60 characters), a description is not.
_SEO_TITLE_MAX = 80
_LABELLED = re.compile(
    rf"(?P<label>[^{_COLONS}\n]{{2,80}}?)\s*(?:[(（][^)）]*[)）])?\s*[{_COLONS}]\s*(?P<value>.*)"
)


def profile_of(
    data: bytes, known: Mapping[str, LanguageProfile]
) -> tuple[str, LanguageProfile] | None:
    """The language of a file's text and the profile its structure shows, if both can be
    told; None for a language ``known`` holds."""
    try:
        return _read_unconfigured(_paragraphs(data, known, []), known)
    except ArticleProblem:
        return None


def _read_unconfigured(
    paras: Paragraphs, known: Mapping[str, LanguageProfile]
) -> tuple[str, LanguageProfile] | None:
    """The language ``paras`` read as and the profile they show, for a language ``known``
    does not hold; None if either cannot be told. A heading directly over the first
    audience line or reference is split from it first, as a known heading would be."""
    paras.split_headings(3, _over_a_list)
    run = _audience_run(paras)
    if run is None:
        return None
    for lang in _languages_of(paras[2 : run[0]]):
        if lang in known:
            return None
        profile = _inferred_profile(paras, lang, run, known)
        if profile is not None:
            return lang, profile
    return None


def _over_a_list(rows: tuple[str, ...]) -> bool:
    """Whether ``rows`` open with a heading (one short line, not labelled) directly over an
    audience line or a numbered one."""
    second = rows[1]
    if _heading(Paragraph(rows[0], 0, rows[:1])) is None:
        return False
    return _REF_HEAD.match(second) is not None or _is_audience_line(
        Paragraph(" ".join(rows[1:]), 0, rows[1:])
    )


def _languages_of(body: Sequence[Paragraph]) -> list[str]:
    """The languages the article's ``body`` may read as (its paragraphs before the takeaways:
    the references cite sources in theirs), the likeliest first: the fewest the model is sure
    enough of together, among those Babel has dates for. The first whose dates the date line
    is written in is the article's."""
    sample = " ".join(p.text for p in body)[:_INFER_SAMPLE]
    found = []
    for lang in likeliest(sample, EVERY, _INFER_MIN_PROB, _INFER_RIVALS):
        lang = written_language(lang, sample)
        try:
            Locale.parse(lang.replace("-", "_"))
        except (UnknownLocaleError, ValueError):
            continue
        found.append(lang)
    return found


def _inferred_profile(
    paras: Sequence[Paragraph],
    lang: str,
    run: tuple[int, int],
    known: Mapping[str, LanguageProfile],
) -> LanguageProfile | None:
    """The profile of ``lang`` that ``paras`` show, or None when they do not show a date
    line with words beside its date. ``run``: the takeaway lines (``_audience_run``);
    ``known``: the configured profiles, whose audiences (in their order) those lines are
    matched to."""
    date_words = _inferred_date_words(paras, lang)
    order = next((list(p.audiences) for p in known.values()), [])
    if date_words is None or not order:
        return None
    first, end = run
    labels, at = [], first
    while at < end:  # a label alone over its bullets is two paragraphs
        labels.append(_label(paras[at]))
        at += _audience_line_at(paras, at)
    audiences = _audiences(labels, order, known)
    heading = _heading(paras[first - 1]) if first > 3 else None
    references, numbered_end = _inferred_references(paras, end)
    seo, fields = _inferred_seo(paras, numbered_end)
    return LanguageProfile.model_construct(
        name=_name(lang),
        date_line=[date_words],
        takeaways=[heading] if heading else [],
        references=[references] if references else [],
        seo=[seo] if seo else [],
        seo_fields=fields,
        audiences={audience: [label] for audience, label in audiences.items()},
        audience_names={},
        title="",
        description="",
    )


def _name(lang: str) -> str:
    """The language's own name: of a bare code, without the region Babel fills in ("tl" is
    "Filipino", not "Filipino (Pilipinas)"); of a code with a region or script, with it."""
    locale = Locale.parse(lang.replace("-", "_"))
    bare = "_" not in lang and "-" not in lang
    name = (locale.get_language_name(locale) if bare else locale.get_display_name(locale)) or lang
    return name[:1].upper() + name[1:]


def _ambiguous(written: str, day: date) -> bool:
    """Whether a date written in figures alone, month first ("12/11/2025"), could be read the
    other way round, as day-first writers of the same language (British English) mean it."""
    return (
        not any(c.isalpha() for c in written)
        and day.day <= 12
        and day.day != day.month
        and not written.lstrip()[:4].isdigit()  # a year first is followed by the month
    )


_CASE_ENDING = re.compile(r"['’]\w+\s+")


def _inferred_date_words(paras: Sequence[Paragraph], lang: str) -> str | None:
    """The words before the date on the date line (the second paragraph, or the third after
    a subtitle), or on a line with none before it, after it ("2025年12月11日更新", the case
    ending on the year left out: "2026'da güncellendi")."""
    for para in paras[1:3]:
        text = _unmarked(para.text)
        found = find_date(text, lang)
        if found is not None:
            _, start, end = found
            words = text[:start].strip(_DATE_LINE_MARKS)
            if not words and len(text) < _DATE_LINE_MAX:
                words = text[end:].strip(_DATE_LINE_MARKS)
                # A case ending on the year is the date's, not the words': Turkish writes
                # "2026'da güncellendi" and "2025'te güncellendi".
                if (ending := _CASE_ENDING.match(words)) is not None:
                    words = words[ending.end() :]
            return words or None
    return None


def _label(para: Paragraph) -> str:
    row = para.rows[0]
    row = row[1:] if _bullet_marker(row) else row
    dash = _dash_after_label(row) if _colon(row, _LABEL_MAX + 1) < 0 else -1
    return (row[:dash] if dash > 0 else _split_label(row)[0]).strip(_LABEL_EDGES)


_LABEL_EDGES = " *_\t\u00a0\u202f"  # emphasis, and the (no-break) space French puts before ":"


def _audience_run(paras: Sequence[Paragraph]) -> tuple[int, int] | None:
    """The longest run of audience lines after the head (the last of equals), as (first, end)
    paragraph indexes; None without a run of two lines."""
    best: tuple[int, int] | None = None
    best_lines = 0
    index = 3
    while index < len(paras):
        if not _audience_line_at(paras, index):
            index += 1
            continue
        end, lines = index, 0
        while end < len(paras) and (size := _audience_line_at(paras, end)):
            end, lines = end + size, lines + 1
        if lines >= 2 and lines >= best_lines:
            best, best_lines = (index, end), lines
        index = end
    return best


def _audience_line_at(paras: Sequence[Paragraph], index: int) -> int:
    """How many paragraphs from ``index`` one audience line takes: 1 for a label with its
    bullets, 2 for a label alone (``**For procurement teams**``, ``For procurement teams:``)
    over a paragraph of bullets, 0 for no audience line."""
    para = paras[index]
    if _is_audience_line(para):
        return 1
    if len(para.rows) > 1 or index + 1 >= len(paras):
        return 0
    label = para.rows[0].strip(_LABEL_EDGES)
    label = label[:-1].rstrip(_LABEL_EDGES) if label.endswith(tuple(_COLONS)) else label
    alone = 1 < len(label) <= _LABEL_MAX and not label.endswith((".", "!", "?"))
    if (
        not alone
        or _bullet_marker(label)
        or _REF_HEAD.match(label)
        or _colon(label, len(label)) >= 0
    ):
        return 0
    below = paras[index + 1]  # bullets, not the next audience's line (a heading is over it)
    return 2 if _bullet_marker(below.rows[0]) and not _is_audience_line(below) else 0


def _audiences(
    labels: list[str], order: list[str], known: Mapping[str, LanguageProfile]
) -> dict[str, str]:
    """Each audience's label. The lines keep the audiences' order: with one line for each,
    position decides; with fewer, the audiences in order whose known labels (in any language)
    share most letter groups with them, the first ones where nothing tells."""
    if len(labels) >= len(order):
        return dict(zip(order, labels, strict=False))
    written = _labels_by_audience(known)
    likeness = [
        [max((_likeness(label, other) for other in written.get(a, ())), default=0.0) for a in order]
        for label in labels
    ]
    chosen = max(
        combinations(range(len(order)), len(labels)),
        key=lambda places: sum(likeness[n][at] for n, at in enumerate(places)),
    )
    return {order[at]: label for at, label in zip(chosen, labels, strict=True)}


def _labels_by_audience(known: Mapping[str, LanguageProfile]) -> dict[str, list[str]]:
    labels: dict[str, list[str]] = {}
    for profile in known.values():
        for audience, written in profile.audiences.items():
            labels.setdefault(audience, []).extend(written)
    return labels


def _likeness(one: str, other: str) -> float:
    """Dice's coefficient of the two texts' letter trigrams: cognates score high
    ("infraestructura", "infrastructure")."""
    a, b = _trigrams(one), _trigrams(other)
    return 2 * len(a & b) / (len(a) + len(b)) if a and b else 0.0


def _trigrams(text: str) -> set[str]:
    return {word[i : i + 3] for word in _fold(text).split() for i in range(len(word) - 2)}


def _heading(para: Paragraph) -> str | None:
    """``para`` as a section heading: one short line that is no labelled line."""
    text = _unmarked(para.text.strip())
    bare = text.rstrip(_COLONS)
    if len(para.rows) > 1 or not text or len(text) > _LABEL_MAX or _colon(bare, len(bare)) >= 0:
        return None
    return bare.strip() or None


def _inferred_references(paras: Sequence[Paragraph], start: int) -> tuple[str | None, int]:
    """The references' heading (the line before the first numbered paragraph from ``start``
    on) and the index after the numbered paragraphs."""
    first = next((i for i in range(start, len(paras)) if _REF_HEAD.match(paras[i].rows[0])), None)
    if first is None:
        return None, start
    end = first
    while end < len(paras) and _REF_HEAD.match(paras[end].rows[0]):
        end += 1
    return (_heading(paras[first - 1]) if first > start else None), end


def _inferred_seo(paras: Sequence[Paragraph], start: int) -> tuple[str | None, SeoFields]:
    """The SEO tail's heading and field labels, from the paragraphs from ``start`` on: the
    slugs are the labelled slugs (the first primary, the rest alternatives), the excerpt names
    Squarespace, and of the other SEO or meta fields the shortest that is no description is
    the title, the longest description the description."""
    heading = None
    texts: list[tuple[str, str]] = []  # label, value
    slugs: list[str] = []
    for index in range(start, len(paras)):
        para = paras[index]
        if index == start and _heading(para):
            heading = _heading(para)
            continue
        for row in _seo_rows(para.rows):
            found = _LABELLED.fullmatch(row.strip().lstrip(_BULLETS + " "))
            if found is None:
                continue
            value = _value(found["value"])
            if _bullet_marker(value):
                slugs += [label for item in _bullets(value, ()) if (label := _slug_label(item))]
            elif _HYPHENED_SLUG.fullmatch(value):
                slugs.append(found["label"].strip())
            else:
                texts.append((found["label"].strip(), value))
    excerpt = [label for label, _ in texts if "squarespace" in label.casefold()]
    seo = sorted((len(value), label, value) for label, value in texts if _names_seo(label))
    titles = [label for _, label, value in seo if not _a_description(value)]
    descriptions = [label for _, label, value in seo if _a_description(value)]
    alt = sorted({_NUMBERED.sub("", label).strip() or label for label in slugs[1:]})
    fields = SeoFields.model_construct(
        title=titles[:1],
        description=descriptions[-1:],
        excerpt=excerpt[:1],
        primary_slug=slugs[:1],
        alt_slugs=alt,
    )
    return heading, fields


def _a_description(value: str) -> bool:
    """An SEO field's value that is a description, not a title: a long one, or one that ends
    a sentence (Chinese writes a description in fewer characters than a Latin title)."""
    return len(value) > _SEO_TITLE_MAX or value.rstrip()[-1:] in ".。．"


# "SEO" and "meta" as labels write them, also in the scripts that spell them out: Persian
# "عنوان سئو", Arabic "وصف السيو", Urdu "ایس ای او عنوان", Hindi "एसईओ शीर्षक", Bengali
# "এসইও শিরোনাম", Russian "Метаописание".
# "SEO" and "meta" in the words of a label, also where a prefix is written on to them (Amharic
# "የኤስኢኦ", "of SEO"); Arabic script, whose vowels are mostly unwritten, spells them its way.
_SEO_WORDS = ("seo", "meta", "سئو", "سيو", "ایس ای او", "ኤስኢኦ")
# "SEO" spelt out in a script of its own, as its letters read in Latin ones (anyascii): "एसईओ",
# "এসইও", "ಎಸ್‌ಇಒ", "എസ്ഇഒ" are "esio", Punjabi "ਐਸਈਓ" "aisio", Georgian "ესეო" "eseo".
_SEO_SPELT = re.compile(r"(?<![a-z])(?:eseo|aisio|e?s+e?i+o+u?)(?![a-z])")


def _names_seo(label: str) -> bool:
    folded = label.casefold()
    if "squarespace" in folded:
        return False
    if any(word in folded for word in _SEO_WORDS):
        return True
    return _SEO_SPELT.search(anyascii(folded).lower().replace("'", "")) is not None


def _slug_label(item: str) -> str | None:
    label, sep, value = _split_label(item)
    return label.strip() if sep and _HYPHENED_SLUG.fullmatch(value.strip()) else None
