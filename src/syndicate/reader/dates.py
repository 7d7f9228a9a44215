"""Dates: the language's own date formats and month names, from Babel's CLDR data."""

from __future__ import annotations

import re
from datetime import date
from functools import cache
from typing import Literal

from babel import Locale, UnknownLocaleError, localedata
from babel.dates import get_date_format, get_month_names

APOSTROPHES = str.maketrans("’ʼ", "''")  # one apostrophe for the typographic and the typed


def _fold(text: str) -> str:
    """Case-, space- and apostrophe-insensitive form, for comparing month names ("d’agost")."""
    return " ".join(text.casefold().translate(APOSTROPHES).split())


# A letter or digit that would run into a date: not a Chinese, Japanese or Korean one, which
# sit next to it with no space between ("2025年12月11日更新").
_WORD = r"[^\W\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]"


# An era's name (CLDR's "G": "AD", "n. Chr.", Thai "ค.ศ." or, of the Buddhist era, "พ.ศ."),
# where a language's date format writes one: one or two words, or none.
_ERA = r"\s*(?:[^\d\s]+(?:\s[^\d\s]+)?\s+)?"


def _month_names(locale: Locale, months: dict[str, int] | None = None) -> dict[str, int]:
    """Each name of each month (wide and abbreviated, in a date and alone), folded: CLDR's,
    and those of the Solar Hijri calendar where the language writes its dates in it; added
    to ``months`` where given."""
    months = {} if months is None else months
    for width in ("wide", "abbreviated"):
        for context in ("format", "stand-alone"):
            for number, name in get_month_names(width, context, locale).items():
                months.setdefault(_fold(name).rstrip("."), number)
    if locale.language in _SOLAR_HIJRI:
        for number, name in enumerate(_solar_hijri_months(), start=1):
            months.setdefault(_fold(name), number)
    return months


_Patterns = tuple[tuple[re.Pattern[str], ...], dict[str, int]]


def _base(lang: str) -> str:
    """The language of a code with a region or script: "ja" of "ja-JP" or "ja_JP"."""
    return lang.replace("_", "-").split("-")[0]


def _locale(lang: str) -> Locale | None:
    try:
        return Locale.parse(lang.replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        return None


@cache
def _date_patterns(lang: str) -> _Patterns | None:
    """Regexes for the language's long, medium and short dates, then common orders; months
    from CLDR."""
    locale = _locale(lang)
    return None if locale is None else _patterns([locale], _month_names(locale))


@cache
def _regional_patterns(lang: str) -> _Patterns | None:
    """``_date_patterns`` with the month names and date formats of every locale of the
    language in CLDR, its regions' and its scripts': Austria's "Jänner", Peru's "setiembre",
    the Levant's "كانون الأول", Afghanistan's "دسمبر", Serbian in Latin letters, Chile's
    "11-12-2025". Made (about 0.3 s for English's 130 locales) only when a date does not
    read as the language itself writes it."""
    locale = _locale(lang)
    if locale is None:
        return None
    months = _month_names(locale)
    locales = [locale]
    for name in localedata.locale_identifiers():
        if name.split("_")[0] == locale.language and name != str(locale):
            locales.append(Locale.parse(name))
            _month_names(locales[-1], months)
    return _patterns(locales, months) if len(locales) > 1 else None


_A_WORD = r"[^\W\d_]{3,}"


@cache
def _inflected_patterns(lang: str) -> _Patterns | None:
    """``_date_patterns`` with any word where the month's name stands, for the languages
    that decline a month's name where CLDR gives it as it is named ("11. децембра 2025."
    in Serbian, "11. decembra 2025" in Slovenian, "2025. gada 11. decembrī" in Latvian):
    ``_inflected_month`` tells which month a word is, if any."""
    locale = _locale(lang)
    return None if locale is None else _patterns([locale], _month_names(locale), inflected=True)


def _inflected_month(written: str, months: dict[str, int]) -> int | None:
    """The one month whose name ``written`` is, declined: it keeps all of a name but its last
    two letters at most (three at least), and adds three at most."""
    word = _fold(written).rstrip(".")
    found = set()
    for name, number in months.items():
        common = next(
            (at for at, (a, b) in enumerate(zip(word, name, strict=False)) if a != b),
            min(len(word), len(name)),
        )
        if common >= max(3, len(name) - 2) and len(word) - common <= 3:
            found.add(number)
    return found.pop() if len(found) == 1 else None


def _patterns(
    locales: list[Locale], months: dict[str, int], *, inflected: bool = False
) -> _Patterns:
    names = "|".join(sorted((re.escape(m) for m in months), key=len, reverse=True))
    month = f"(?P<month>{names if not inflected else _A_WORD})\\.?"
    day = r"(?P<day>\d{1,2})(?:\.|st|nd|rd|th|er|º|ª)?"
    year = r"(?P<year>\d{4})"
    patterns = []
    # The short form last: all digits ("11-12-2025", "12/11/2025"), in the language's order,
    # with the year in full (a two-digit one is not read).
    widths: tuple[Literal["long", "medium", "short"], ...] = ("long", "medium", "short")
    formats = dict.fromkeys(
        get_date_format(width, locale).pattern for width in widths for locale in locales
    )
    for pattern in formats:
        out: list[str] = []
        # In a date all in figures, a dot stands between them ("11.12.2025", not "11 12 2025").
        loose = " ," if re.search("M{3,}|L{3,}", pattern) is None else " ,."
        tokens = r"\('([^']*)'\)|'([^']*)'|(d+|M+|L+|y+)|(G+)|([^'dMLyG]+)"
        for token in re.finditer(tokens, pattern):
            optional, literal, part, era, other = token.groups()
            if optional is not None:  # Basque "y('e')'ko'": "2026ko", "2020eko", "2020(e)ko"
                out.append(f"(?:\\(?{re.escape(optional)}\\)?)?")
            elif era:  # "11 ธันวาคม ค.ศ. 2025": the era's name, if written
                out.append(_ERA)
            elif literal is not None or (other and other.strip(loose)):
                written = (literal or other).strip().translate(APOSTROPHES)  # "ta’" (Maltese)
                out.append(r"\s*" + re.escape(written) + r"\s*")
            elif part:
                numeric = part[0] in "ML" and len(part) <= 2  # "2025年12月11日"
                out.append(
                    {"d": day, "M": month, "L": month, "y": year}[part[0]]
                    if not numeric
                    else r"(?P<month>\d{1,2})"
                )
            else:
                out.append(r"[\s,.]*")
        patterns.append("".join(out))
    patterns += _common_orders(day, month, year)
    compiled = tuple(
        re.compile(rf"(?<!{_WORD}){p}(?!{_WORD})", re.I) for p in dict.fromkeys(patterns)
    )
    return compiled, months


def _common_orders(day: str, month: str, year: str) -> list[str]:
    """The orders a date is written in whatever the language's own formats say: "11 December
    2025", "December 11, 2025", and the ones below."""
    # "11 December 2025", "December 11, 2025", and a short word before the year, as in
    # Vietnamese "11 tháng 12 năm 2025" (CLDR's formats have none); or the year first, with
    # a short word after it, as Georgian, Kazakh and Uzbek write a date ("2026 წლის 27
    # ოქტომბერს", "2026 жылғы 27 қазанда", "2026-yil 14-aprel", where CLDR has "d MMMM, y",
    # "y 'ж'. d MMMM" and "d-MMMM, y").
    before_year = r"(?:,?\s+[^\W\d]{1,4})?,?\s+"
    after_year = r"(?:(?:\s+|-)[^\W\d]{1,6}\.?)?\s+"
    # Scripts that write a particle on to a number or a name, their vowel signs no letters
    # to a regex: Khmer "ថ្ងៃទី១៩ ខែវិច្ឆិកា ឆ្នាំ២០២៦" (day 19, month November, year 2026),
    # Burmese "၂၀၂၆ ခုနှစ် နိုဝင်ဘာလ ၁၉ ရက်" (the year, then the month, then the day).
    glued = r"(?:[^\s\d\x00-\u024f]{1,8})?"
    word = r"(?:\s+[^\s\d\x00-\u024f]{1,8})?"
    return [
        rf"{day}\s+{month}{before_year}{year}",
        rf"{month}\s+{day}{before_year}{year}",
        rf"{year}{after_year}{day}(?:\s+|-){month}",
        rf"{glued}{day}\s+{glued}{month}\s+{glued}{year}",
        rf"{year}{word}\s+{month}{glued}\s+{day}",
    ]


# Thai (and Lao) dates count years from the Buddha's death by custom (CLDR's calendar
# preference for Thailand: buddhist, then gregorian): 2568 BE is 2025.
_BUDDHIST_ERA = frozenset({"th", "lo"})
_BUDDHIST_OFFSET = 543
# Persian dates are written in the Solar Hijri calendar by custom (CLDR's preference for Iran:
# persian, then gregorian): "۱۲ آذر ۱۴۰۴" is 3 December 2025. Its month names are read beside
# the Gregorian ones, and a year before 1700 is of that calendar (no date line is three
# centuries behind); the conversion is jdatetime's.
_SOLAR_HIJRI = frozenset({"fa"})
_SOLAR_HIJRI_BEFORE = 1700


def _solar_hijri_months() -> list[str]:
    import jdatetime  # only for a language that writes such dates

    return list(jdatetime.date.j_months_fa)


# Japanese dates may count years in the reigning emperor's era (CLDR's japanese calendar, which
# Babel does not carry): "令和7年12月11日" is 11 December 2025; an era's first year is "元年".
_JAPANESE_ERAS = {"明治": 1868, "大正": 1912, "昭和": 1926, "平成": 1989, "令和": 2019}
_JAPANESE_ERA_DATE = re.compile(
    rf"({'|'.join(_JAPANESE_ERAS)})\s*(元|\d{{1,2}})\s*年\s*(\d{{1,2}})\s*月\s*(\d{{1,2}})\s*日"
)


def _japanese_era_date(text: str) -> tuple[date, int, int] | None:
    found = _JAPANESE_ERA_DATE.search(text)
    if found is None:
        return None
    era, year, month, day = found.groups()
    start = _JAPANESE_ERAS[era] - 1
    try:
        return date(start + (1 if year == "元" else int(year)), int(month), int(day)), *found.span()
    except ValueError:
        return None


def _gregorian(year: int, month: int, day: int, lang: str) -> date:
    """The date as the Gregorian calendar counts it, written in the calendar ``lang`` writes
    its year in: a Buddhist-era year (no date line is five centuries ahead) is 543 less, a
    Solar Hijri date converted. Raises ValueError for a day its calendar does not have."""
    base = _base(lang)
    if year > 2400 and base in _BUDDHIST_ERA:
        return date(year - _BUDDHIST_OFFSET, month, day)
    if year < _SOLAR_HIJRI_BEFORE and base in _SOLAR_HIJRI:
        import jdatetime

        converted: date = jdatetime.date(year, month, day).togregorian()
        return converted
    return date(year, month, day)


@cache
def month_first(lang: str) -> bool:
    """Whether ``lang`` writes a date in figures month first ("12/11/2025", as CLDR's English
    does): such a date with a day of 12 or less reads the other way round elsewhere."""
    locale = _locale(lang)
    if locale is None:
        return False
    order = [c for c in get_date_format("short", locale).pattern if c in "dMLy"]
    return order[:1] in (["M"], ["L"])


def _dated(found: re.Match[str], month: int, lang: str) -> tuple[date, int, int] | None:
    """``find_date``'s answer for a date ``found`` whose month is ``month``; None for a day
    its calendar does not have."""
    try:
        return _gregorian(int(found["year"]), month, int(found["day"]), lang), *found.span()
    except ValueError:
        return None


_ISO_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")


def names_a_month(text: str, lang: str) -> bool:
    """Whether a word of ``text`` is one of the language's month names."""
    months = (_date_patterns(lang) or ((), {}))[1]
    return any(word in months for word in _fold(text).split())


def prepare(lang: str) -> None:
    """Make the language's date patterns now (before worker processes fork, which then
    share them): not the regional ones, made only when a date needs them."""
    _date_patterns(lang)


def parse_date(text: str, lang: str) -> date | None:
    """The first date in ``text`` written the way ``lang`` writes dates (or ISO 8601), or None."""
    found = find_date(text, lang)
    return found[0] if found else None


def find_date(text: str, lang: str) -> tuple[date, int, int] | None:
    """``parse_date``'s date and where in ``text`` it starts and ends: the words before it (or,
    as Chinese, Japanese and Korean may write them, after it) are the date line's."""
    if _base(lang) == "ja" and any(era in text for era in _JAPANESE_ERAS):
        return _japanese_era_date(text)
    text = text.translate(APOSTROPHES)  # as the month names are folded; the places stay
    for made in (_date_patterns, _regional_patterns):
        regexes, months = made(lang) or ((), {})
        for regex in regexes:
            found = regex.search(text)
            if found:
                written = found["month"]
                month = int(written) if written.isdigit() else months[_fold(written).rstrip(".")]
                return _dated(found, month, lang)
    regexes, months = _inflected_patterns(lang) or ((), {})
    for regex in regexes:
        for found in regex.finditer(text):
            written = found["month"]
            number = int(written) if written.isdigit() else _inflected_month(written, months)
            if number is not None:
                return _dated(found, number, lang)
    iso = _ISO_DATE.search(text)
    if iso:
        try:
            return date(int(iso[1]), int(iso[2]), int(iso[3])), iso.start(), iso.end()
        except ValueError:
            return None
    return None
