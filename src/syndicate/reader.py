"""Read stage: article files → ``Article`` values plus diagnostics.

``parse_article`` is pure (bytes in, values out); ``read_articles`` is the only function that
touches the file system. A broken file yields diagnostics and is skipped; it never stops the rest.

The format: paragraphs separated by blank lines. Title; date line; update summary; body
(single-line headings and paragraphs with superscript footnote marks); the key-takeaways
section ("<audience label>: - bullet - bullet"); numbered references; an optional SEO tail.
Which words mark each part is per-language data (``LanguageProfile``), never code.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path

from babel import Locale, UnknownLocaleError
from babel.dates import get_date_format, get_month_names

from .config import LanguageProfile
from .model import (
    Article,
    ArticleSet,
    Block,
    Diagnostic,
    Reference,
    Seo,
    Severity,
    Takeaways,
)

SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SUPER_DIGIT = str.maketrans(SUPERSCRIPTS, "0123456789")
_MARKS = re.compile(f"[{SUPERSCRIPTS}]+")
# C0/C1 controls except tab and newline, plus lone surrogates and non-characters.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")
_BULLET_SPLIT = re.compile(r"\s+-\s+")
_REFERENCE = re.compile(r"(\d{1,4})\.\s+(.*)", re.S)
_URL = re.compile(r"https?://\S+")
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SENTENCE_END = tuple(".!?:;…\"'”’»)")
_HEADING_MAX = 140
_LANGID_MIN_PROB = 0.9


class ArticleProblem(Exception):
    """Stops parsing one file; becomes an error diagnostic."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True, slots=True)
class Paragraph:
    text: str
    line: int


def _fold(text: str) -> str:
    """Case- and space-insensitive form for comparing labels and headings."""
    return " ".join(text.casefold().split())


def decode(data: bytes) -> str:
    """Bytes → text: UTF-8 only, BOM dropped. Raises ArticleProblem naming the bad byte."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ArticleProblem(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} cannot be decoded",
            line,
        ) from None


def clean(text: str, warn: list[tuple[int, str]]) -> str:
    """Normalise newlines and Unicode; drop control characters, noting where they were."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if _CONTROL.search(text):
        for number, line in enumerate(text.split("\n"), 1):
            found = _CONTROL.findall(line)
            if found:
                codes = ", ".join(sorted({f"U+{ord(c):04X}" for c in found}))
                warn.append((number, f"dropped {len(found)} control character(s) ({codes})"))
        text = _CONTROL.sub("", text)
    return unicodedata.normalize("NFC", text)


def paragraphs(text: str) -> list[Paragraph]:
    """Split on blank lines; lines of one paragraph are joined with a space."""
    found: list[Paragraph] = []
    lines: list[str] = []
    start = 0
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            if not lines:
                start = number
            lines.append(line.strip())
        elif lines:
            found.append(Paragraph(" ".join(lines), start))
            lines = []
    if lines:
        found.append(Paragraph(" ".join(lines), start))
    return found


def split_marks(text: str) -> tuple[str | int, ...]:
    """'memory.¹ Scale' → ('memory.', 1, ' Scale')."""
    parts: list[str | int] = []
    pos = 0
    for mark in _MARKS.finditer(text):
        if mark.start() > pos:
            parts.append(text[pos : mark.start()])
        parts.append(int(mark.group().translate(_SUPER_DIGIT)))
        pos = mark.end()
    if pos < len(text):
        parts.append(text[pos:])
    return tuple(parts)


def strip_marks(text: str) -> str:
    return _MARKS.sub("", text)


# ---------------------------------------------------------------------------------------------
# Dates: the long date format and month names of the language, from Babel's CLDR data.


@cache
def _date_pattern(lang: str) -> tuple[re.Pattern[str], dict[str, int]] | None:
    """A regex for the language's long date (``d MMMM y`` and the like), months from CLDR."""
    try:
        locale = Locale.parse(lang.replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        return None
    months: dict[str, int] = {}
    for width in ("wide", "abbreviated"):
        for context in ("format", "stand-alone"):
            for number, name in get_month_names(width, context, locale).items():
                months.setdefault(_fold(name).rstrip("."), number)
    month_re = "|".join(sorted((re.escape(m) for m in months), key=len, reverse=True))
    pattern = get_date_format("long", locale).pattern
    out: list[str] = []
    for token in re.finditer(r"'([^']*)'|(d+|M+|L+|y+)|([^'dMLy]+)", pattern):
        literal, field, other = token.groups()
        if literal is not None:
            out.append(r"\s*" + re.escape(literal) + r"\s*")
        elif field and field[0] == "d":
            out.append(r"(?P<day>\d{1,2})\.?")
        elif field and field[0] in "ML":
            out.append(rf"(?P<month>{month_re})\.?")
        elif field:
            out.append(r"(?P<year>\d{4})")
        else:
            out.append(r"[\s,.]*" if other.strip(" ,.") == "" else re.escape(other.strip()))
    return re.compile("".join(out), re.I), months


def parse_date(text: str, lang: str) -> date | None:
    """The first long-format date in ``text`` for ``lang``, or None."""
    compiled = _date_pattern(lang)
    if compiled is None:
        return None
    regex, months = compiled
    found = regex.search(text)
    if not found:
        return None
    month = months[_fold(found["month"]).rstrip(".")]
    try:
        return date(int(found["year"]), month, int(found["day"]))
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Language: the profiles decide; an offline language-identification model cross-checks.


def _starts_with(text: str, phrases: list[str]) -> str | None:
    """The longest phrase ``text`` starts with (as whole words, ignoring case), or None."""
    folded = _fold(text)
    matches = [
        p
        for p in map(_fold, phrases)
        if folded.startswith(p) and (len(folded) == len(p) or not folded[len(p)].isalnum())
    ]
    return max(matches, key=len, default=None)


def _profile_score(paras: list[Paragraph], profile: LanguageProfile) -> int:
    score = 0
    if len(paras) > 1 and _starts_with(paras[1].text, profile.date_line):
        score += 4
    headings = {_fold(h) for h in (*profile.takeaways, *profile.references, *profile.seo)}
    labels = [label for labels in profile.audiences.values() for label in labels]
    for para in paras[3:]:
        if _fold(para.text) in headings:
            score += 2
        elif ":" in para.text[:80] and _starts_with(para.text.split(":", 1)[0], labels):
            score += 1
    return score


@cache
def _identifier(langs: tuple[str, ...]):
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    known = [lang for lang in langs if lang in identifier.nb_classes]
    if len(known) < 2:
        return None
    identifier.set_languages(known)
    return identifier


def identify(text: str, langs: tuple[str, ...]) -> tuple[str, float] | None:
    """The language model's guess among ``langs`` (those it knows), or None if it can't tell."""
    identifier = _identifier(langs)
    if identifier is None:
        return None
    lang, prob = identifier.classify(text)
    return str(lang), float(prob)


def detect_language(
    paras: list[Paragraph], profiles: Mapping[str, LanguageProfile], warn: list[tuple[int, str]]
) -> str:
    scores = {lang: _profile_score(paras, p) for lang, p in profiles.items()}
    best = max(scores.values(), default=0)
    candidates = [lang for lang, s in scores.items() if s == best and s > 0]
    sample = " ".join(p.text for p in paras[:3])
    guess = identify(sample, tuple(profiles))
    if not candidates:
        hint = (
            f"; the text looks like '{guess[0]}'" if guess and guess[1] >= _LANGID_MIN_PROB else ""
        )
        raise ArticleProblem(
            f"unknown language: no configured language profile ({', '.join(profiles)}) "
            f"matches its date line or headings{hint}",
            paras[1].line if len(paras) > 1 else 1,
        )
    if len(candidates) > 1:
        if guess and guess[0] in candidates:
            return guess[0]
        return candidates[0]
    lang = candidates[0]
    if guess and guess[0] != lang and guess[1] >= _LANGID_MIN_PROB and scores.get(guess[0], 0) == 0:
        warn.append((1, f"the '{lang}' profile matches, but the text reads like '{guess[0]}'"))
    return lang


# ---------------------------------------------------------------------------------------------
# Sections.


def _is_heading(text: str) -> bool:
    bare = strip_marks(text).rstrip()
    return 0 < len(bare) <= _HEADING_MAX and not bare.endswith(_SENTENCE_END)


def _find(paras: list[Paragraph], start: int, phrases: list[str]) -> int | None:
    wanted = {_fold(p) for p in phrases}
    for index in range(start, len(paras)):
        if _fold(paras[index].text).rstrip(":") in wanted:
            return index
    return None


def _takeaways(
    paras: list[Paragraph], profile: LanguageProfile, warn: list[tuple[int, str]]
) -> tuple[Takeaways, ...]:
    by_label = {
        _fold(label): audience for audience, labels in profile.audiences.items() for label in labels
    }
    found: dict[str, Takeaways] = {}
    for para in paras:
        label, sep, rest = para.text.partition(":")
        if not sep:
            warn.append(
                (para.line, f"takeaways line without '<audience>:' label: {para.text[:60]!r}")
            )
            continue
        audience = by_label.get(_fold(label))
        if audience is None:
            known = "; ".join(labels[0] for labels in profile.audiences.values())
            warn.append((para.line, f"unknown audience label {label.strip()!r} (known: {known})"))
            continue
        rest = rest.strip()
        if rest.startswith("-"):
            rest = rest[1:]
        bullets = tuple(b.strip() for b in _BULLET_SPLIT.split(" " + rest) if b.strip())
        if not bullets:
            warn.append((para.line, f"no bullets after {label.strip()!r}"))
            continue
        if audience in found:
            warn.append((para.line, f"second takeaways line for {label.strip()!r} ignored"))
            continue
        found[audience] = Takeaways(audience, label.strip(), bullets)
    return tuple(found.values())


def _references(paras: list[Paragraph]) -> tuple[tuple[Reference, ...], int]:
    """Numbered references from the start of ``paras``; returns them and how many paragraphs."""
    refs: list[Reference] = []
    for index, para in enumerate(paras):
        found = _REFERENCE.fullmatch(para.text)
        if not found:
            return tuple(refs), index
        body = found[2]
        urls = _URL.findall(body)
        url = urls[-1].rstrip(".,;)") if urls else None
        text = body[: body.rfind(urls[-1])].strip() if urls else body.strip()
        refs.append(Reference(int(found[1]), text or body.strip(), url))
    return tuple(refs), len(paras)


def _seo_items(paras: list[Paragraph]) -> Iterator[tuple[str, str]]:
    """(label, value) pairs of the SEO tail, whether written as lines, bullets or inline lists."""
    for para in paras:
        for item in re.split(r"(?:^|\s)[•·▪]\s*", para.text):
            label, sep, value = item.partition(":")
            if not sep:
                continue
            value = value.strip()
            if value.startswith("- "):
                for sub in _BULLET_SPLIT.split(" " + value):
                    sub_label, sub_sep, sub_value = sub.partition(":")
                    if sub_sep:
                        yield sub_label.strip(), sub_value.strip()
                continue
            yield label.strip(), value


def _seo(paras: list[Paragraph], profile: LanguageProfile) -> Seo:
    fields = profile.seo_fields
    values: dict[str, str] = {}
    alts: list[str] = []
    for label, value in _seo_items(paras):
        bare = _fold(re.sub(r"\s*\([^)]*\)", "", label))
        if not bare or not value:
            continue
        for name in ("title", "description", "excerpt", "primary_slug"):
            if bare in {_fold(x) for x in getattr(fields, name)}:
                values.setdefault(name, value)
                break
        else:
            if any(bare == _fold(a) or bare.startswith(_fold(a) + " ") for a in fields.alt_slugs):
                alts.append(value)
    return Seo(
        title=values.get("title"),
        description=values.get("description"),
        excerpt=values.get("excerpt"),
        primary_slug=values.get("primary_slug"),
        alt_slugs=tuple(alts),
    )


def slugify(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return "-".join(re.findall(r"[a-z0-9]+", ascii_text.lower()))[:80].strip("-")


def content_digest(lang: str, paras: list[Paragraph]) -> str:
    """A hash of the text that ignores how it was spaced or wrapped."""
    h = hashlib.sha256(lang.encode())
    for para in paras:
        h.update(b"\n\n")
        h.update(" ".join(para.text.split()).encode())
    return h.hexdigest()[:32]


# ---------------------------------------------------------------------------------------------


def parse_article(
    data: bytes, source: str, profiles: Mapping[str, LanguageProfile], *, body: bool = True
) -> tuple[Article | None, list[Diagnostic]]:
    """Parse one file's bytes. Returns the article (None if unusable) and its diagnostics.

    With ``body=False`` the body blocks are not kept (everything else is), which is what
    summaries and indexes need, at a fraction of the memory.
    """
    warnings: list[tuple[int, str]] = []

    def report(error: ArticleProblem | None = None) -> list[Diagnostic]:
        found = [Diagnostic(source, line, Severity.WARNING, msg) for line, msg in warnings]
        if error is not None:
            found.append(Diagnostic(source, error.line, Severity.ERROR, str(error)))
        return found

    try:
        article = _parse(data, source, profiles, body, warnings)
    except ArticleProblem as problem:
        return None, report(problem)
    return article, report()


def _parse(
    data: bytes,
    source: str,
    profiles: Mapping[str, LanguageProfile],
    body: bool,
    warn: list[tuple[int, str]],
) -> Article:
    paras = paragraphs(clean(decode(data), warn))
    if not paras:
        raise ArticleProblem("empty file: no text to read")
    if len(paras) < 3:
        raise ArticleProblem(
            "too short: expected a title, a date line and a summary paragraph", paras[-1].line
        )
    lang = detect_language(paras, profiles, warn)
    profile = profiles[lang]

    date_para = paras[1]
    prefix = _starts_with(date_para.text, profile.date_line)
    if prefix is None:
        raise ArticleProblem(
            f"missing date line: expected {profile.date_line[0]!r} and a date, "
            f"found {date_para.text[:60]!r}",
            date_para.line,
        )
    updated = parse_date(date_para.text, lang)
    if updated is None:
        raise ArticleProblem(f"cannot read the date in {date_para.text[:80]!r}", date_para.line)

    takeaways_at = _find(paras, 3, profile.takeaways)
    references_at = _find(
        paras, 3 if takeaways_at is None else takeaways_at + 1, profile.references
    )
    body_end = next(i for i in (takeaways_at, references_at, len(paras)) if i is not None)

    takeaways: tuple[Takeaways, ...] = ()
    if takeaways_at is None:
        warn.append(
            (paras[body_end - 1].line, "no key-takeaways section: the article goes to feeds only")
        )
    else:
        end = references_at if references_at is not None else len(paras)
        section = paras[takeaways_at + 1 : end]
        # An SEO tail right after the takeaways (no references) is not takeaways.
        seo_start = _find(section, 0, profile.seo)
        takeaways = _takeaways(section[:seo_start], profile, warn)

    references: tuple[Reference, ...] = ()
    tail_start = len(paras)
    if references_at is not None:
        references, count = _references(paras[references_at + 1 :])
        tail_start = references_at + 1 + count
    elif takeaways_at is not None:
        tail_start = takeaways_at + 1 + len(takeaways)
    tail = paras[tail_start:]
    if tail and _find(tail[:1], 0, profile.seo) is not None:
        tail = tail[1:]
    seo = _seo(tail, profile)

    numbers = {r.number for r in references}
    blocks: list[Block] = []
    for para in paras[3:body_end]:
        parts = split_marks(para.text)
        for note in (p for p in parts if isinstance(p, int)):
            if note not in numbers:
                warn.append((para.line, f"footnote mark {note} has no reference"))
        if body:
            kind = "heading" if _is_heading(para.text) else "paragraph"
            blocks.append(Block(kind, parts, para.line))

    slug = seo.primary_slug
    if slug is not None and not _SLUG.fullmatch(slug):
        warn.append((1, f"primary slug {slug!r} is not a URL slug; using {slugify(slug)!r}"))
        slug = slugify(slug)
    if not slug:
        slug = slugify(seo.title or paras[0].text)
        warn.append((1, f"no primary slug in the SEO tail; using {slug!r} from the title"))
    if not slug:
        raise ArticleProblem("no slug: the title has no letters or digits to make one from", 1)

    return Article(
        source=source,
        lang=lang,
        slug=slug,
        title=strip_marks(paras[0].text),
        updated=updated,
        summary=strip_marks(paras[2].text),
        blocks=tuple(blocks),
        takeaways=takeaways,
        references=references,
        seo=seo,
        digest=content_digest(lang, paras),
    )


def article_files(folder: Path) -> list[Path]:
    """Every visible regular file below ``folder``, in a stable order. Names carry no meaning."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def read_articles(
    folder: Path, profiles: Mapping[str, LanguageProfile], *, bodies: bool = True
) -> ArticleSet:
    """Read every file of the article set; bad files become diagnostics, the rest articles.

    Two files with the same language and slug: the first (by path) wins, the second is an error.
    """
    if not folder.is_dir():
        problem = Diagnostic(str(folder), None, Severity.ERROR, "article folder not found")
        return ArticleSet((), (problem,))
    articles: dict[tuple[str, str], Article] = {}
    problems: list[Diagnostic] = []
    for path in article_files(folder):
        source = str(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            problems.append(
                Diagnostic(source, None, Severity.ERROR, f"cannot read: {exc.strerror}")
            )
            continue
        article, found = parse_article(data, source, profiles, body=bodies)
        problems.extend(found)
        if article is None:
            continue
        first = articles.get(article.key)
        if first is not None:
            problems.append(
                Diagnostic(
                    source,
                    1,
                    Severity.ERROR,
                    f"duplicate article: {first.source} already has language "
                    f"'{article.lang}' and slug '{article.slug}'",
                )
            )
            continue
        articles[article.key] = article
    return ArticleSet(tuple(articles.values()), tuple(problems))
