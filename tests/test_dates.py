"""Dates (reader/dates.py): each language's own date formats, from CLDR."""

from __future__ import annotations

from datetime import date

import pytest
from babel import localedata
from babel.dates import format_date

from syndicate.config import parse_config
from syndicate.reader import dates, folder
from syndicate.reader.dates import find_date, month_first, parse_date
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("text", "lang", "expected"),
    [
        ("Updated December 11, 2025", "en", "2025-12-11"),
        ("Updated Dec. 11, 2025", "en", "2025-12-11"),
        ("Updated 11 December 2025", "en", "2025-12-11"),
        ("Bijgewerkt op 1 mrt. 2026", "nl", "2026-03-01"),
        ("Bijgewerkt op 11 december 2025", "nl", "2025-12-11"),
        ("Aktualisiert am 3. März 2026", "de", "2026-03-03"),
        ("Aktualisiert am 3. Mär. 2026", "de", "2026-03-03"),
        ("Mis à jour le 1er mars 2026", "fr", "2026-03-01"),
        ("Actualizado el 3 de marzo de 2026", "es", "2026-03-03"),
        ("Updated 2026-03-04", "en", "2026-03-04"),
        ("Updated February 30, 2026", "en", None),
        ("Updated sometime", "en", None),
        # CLDR's numeric months, and the words between the parts, spaced or not.
        ("更新日 2025年12月11日", "ja", "2025-12-11"),
        ("更新于 2025年3月4日", "zh", "2025-03-04"),
        ("업데이트 2025년 12월 11일", "ko", "2025-12-11"),
        ("Cập nhật 11 tháng 12, 2025", "vi", "2025-12-11"),
        ("Aktualisiert am 03.04.2026", "de", "2026-04-03"),
        ("Frissítve: 2025. december 11.", "hu", "2025-12-11"),
        ("Обновлено 11 декабря 2025 г.", "ru", "2025-12-11"),
        ("Zaktualizowano 11 grudnia 2025", "pl", "2025-12-11"),
        ("更新日 2025年13月11日", "ja", None),
        # Wide letters run into the date with no space; other letters or digits may not.
        ("更新日期：2025年12月11日", "zh", "2025-12-11"),
        ("2025年12月11日更新", "ja", "2025-12-11"),
        ("Updated December 11, 20251", "en", None),
        ("Aktualisiert am 11. Dezember 2025x", "de", None),
        # A short word before the year; Thai years of the Buddhist era; the scripts' digits.
        ("Cập nhật ngày 11 tháng 12 năm 2025", "vi", "2025-12-11"),
        ("อัปเดตเมื่อ 11 ธันวาคม 2568", "th", "2025-12-11"),
        ("อัปเดตเมื่อ 11 ธันวาคม 2025", "th", "2025-12-11"),
        ("آخر تحديث: ١١ ديسمبر ٢٠٢٥", "ar", "2025-12-11"),
        ("به‌روزرسانی: ۱۱ دسامبر ۲۰۲۵", "fa", "2025-12-11"),
        # Persian's Solar Hijri calendar, in words and figures; Esfand 1404 has 29 days.
        ("به‌روزرسانی: ۲۰ آذر ۱۴۰۴", "fa", "2025-12-11"),
        ("به‌روزرسانی: ۱ فروردین ۱۴۰۵", "fa", "2026-03-21"),
        ("به‌روزرسانی: ۱۴۰۴/۹/۲۰", "fa", "2025-12-11"),
        ("به‌روزرسانی: ۳۰ اسفند ۱۴۰۴", "fa", None),
        ("হালনাগাদ: ১১ ডিসেম্বর, ২০২৫", "bn", "2025-12-11"),
        ("更新日：２０２５年１２月１１日", "ja", "2025-12-11"),
        # Japanese years of the emperor's era; an era's first year is 元年.
        ("更新日：令和7年12月11日", "ja", "2025-12-11"),
        ("更新日 令和元年5月1日", "ja", "2019-05-01"),
        ("更新日：平成３１年４月３０日", "ja", "2019-04-30"),
        ("更新日：令和7年2月30日", "ja", None),
        ("Updated December 11 of 2025", "en", "2025-12-11"),
        ("Updated December 11 12 2025", "en", None),
        # CLDR's short form, in the language's order, with the year in full.
        ("Bijgewerkt: 11-12-2025", "nl", "2025-12-11"),
        ("Updated 12/11/2025", "en", "2025-12-11"),
        ("Mis à jour le 11/12/2025", "fr", "2025-12-11"),
        ("更新日：2025/12/11", "ja", "2025-12-11"),
        ("Aktualisiert: 11.12.25", "de", None),
        # A month elided with the apostrophe typed or the typographic one CLDR writes.
        ("Actualitzat el 23 d'agost de 2026", "ca", "2026-08-23"),
        ("Actualitzat el 23 d’agost de 2026", "ca", "2026-08-23"),
        ("Actualitzat el 2 d'octubre de 2026", "ca", "2026-10-02"),
        # The year first and a short word after it, the month declined: Georgian and Kazakh.
        ("განახლებულია 2026 წლის 27 ოქტომბერს", "ka", "2026-10-27"),
        ("2026 жылғы 27 қазанда жаңартылды", "kk", "2026-10-27"),
        ("2026 жылғы 31 ақпанда жаңартылды", "kk", None),
        # CLDR's optional letters, as written and as Babel prints them.
        ("Eguneratua: 2026ko apirilaren 14a, asteartea", "eu", "2026-04-14"),
        ("2020eko apirilaren 1a", "eu", "2020-04-01"),
        ("Yangilangan: 2026-yil 14-aprel, seshanba", "uz", "2026-04-14"),
        # Particles written on to a number or a name; the year first, then the month.
        ("ធ្វើបច្ចុប្បន្នភាព៖ ថ្ងៃទី១៩ ខែវិច្ឆិកា ឆ្នាំ២០២៦", "km", "2026-11-19"),
        ("နောက်ဆုံးပြင်ဆင်သည့်ရက်: ၂၀၂၆ ခုနှစ် နိုဝင်ဘာလ ၁၉ ရက်", "my", "2026-11-19"),
        ("Updated A12 December 2025", "en", None),  # a Latin letter on to it is a word
    ],
)
def test_parse_date_uses_cldr_names(text: str, lang: str, expected: str | None) -> None:
    found = parse_date(text, lang)
    assert (found.isoformat() if found else None) == expected


def test_find_date_says_where_the_date_starts_and_ends() -> None:
    """What comes before the date (or after it) is the date line's words (an unconfigured
    language's)."""
    written = {
        "it": "Aggiornato in data 11 dicembre 2025",
        "ja": "更新日 2025年12月11日",
        "zh": "2025年12月11日更新",
        "ko": "2025년 12월 11일 업데이트",
    }
    words = {}
    for lang, text in written.items():
        found = find_date(text, lang)
        assert found is not None
        _, start, end = found
        words[lang] = (text[:start].strip(), text[end:].strip())
    assert words == {
        "it": ("Aggiornato in data", ""),
        "ja": ("更新日", ""),
        "zh": ("", "更新"),
        "ko": ("", "업데이트"),
    }


def test_every_cldr_language_reads_its_own_dates() -> None:
    """Each language Babel's CLDR data has writes a date line its own way (long, medium and
    short, with the year in full): each reads back as that date, eras (Thai "ค.ศ.") and
    scripts' digits included."""
    day = date(2025, 12, 11)
    langs = sorted({name.split("_")[0] for name in localedata.locale_identifiers()})
    assert len(langs) > 300
    unread = []
    for lang in langs:
        for width in ("long", "medium", "short"):
            written = format_date(day, width, locale=lang)
            if width == "short" and "2025" not in written:
                continue  # a two-digit year is not read
            if parse_date(f"x {written}", lang) != day:
                unread.append((lang, width, written))
    assert unread == []
    assert parse_date("อัปเดตเมื่อ 11 ธันวาคม พ.ศ. 2568", "th") == day


def test_every_regional_locale_reads_with_its_languages_code() -> None:
    """A writer in Austria, Peru, Chile, the Levant or Afghanistan gives the date line in the
    language's code ("de", "es", "ar", "fa") and writes it with the region's month names and
    order ("11. Jänner 2025", "11 de setiembre de 2025", "11-12-2025", "11 كانون الأول
    2025", "۱۱ دسمبر ۲۰۲۵"): each CLDR locale's long and medium dates read back so. (A
    date all in figures reads in the language's own order where the two differ: Puerto
    Rico's "12/11/2025" is 12 November to "es".)"""
    day = date(2025, 12, 11)
    names = [name for name in localedata.locale_identifiers() if "_" in name]
    assert len(names) > 700
    unread = []
    for name in names:
        lang = name.split("_")[0]
        for width in ("long", "medium"):
            written = format_date(day, width, locale=name)
            in_figures = not any(c.isalpha() for c in written)
            if in_figures and month_first(name) != month_first(lang):
                continue
            if parse_date(f"x {written}", lang) != day:
                unread.append((name, width, written))
    assert unread == []
    assert parse_date("Aktualisiert am 3. Jänner 2026", "de") == date(2026, 1, 3)
    assert parse_date("آخر تحديث: ١١ كانون الأول ٢٠٢٥", "ar") == day


DECLINED = {
    # Serbian and Bosnian write a date's month in the genitive, Slovenian too, Latvian in the
    # locative ("2025. gada 11. decembrī"); CLDR names each as it is named ("децембар").
    "sr": "јануара фебруара марта априла маја јуна јула августа септембра октобра новембра "
    "децембра",
    "bs": "januara februara marta aprila maja juna jula augusta septembra oktobra novembra "
    "decembra",
    "sl": "januarja februarja marca aprila maja junija julija avgusta septembra oktobra "
    "novembra decembra",
    "lv": "janvārī februārī martā aprīlī maijā jūnijā jūlijā augustā septembrī oktobrī "
    "novembrī decembrī",
}


@pytest.mark.parametrize("lang", DECLINED)
def test_a_month_declined_as_the_language_writes_it_in_a_date_reads(lang: str) -> None:
    written = "{day}. {month} 2025." if lang != "lv" else "2025. gada {day}. {month}"
    for number, month in enumerate(DECLINED[lang].split(), 1):
        day = date(2025, number, 11)
        assert parse_date(f"x {written.format(day=11, month=month)}", lang) == day, month


@pytest.mark.parametrize(
    "text",
    [
        "Updated 11 people 2025",  # no month's name
        "Updated 11 Decemberness 2025",  # more than three letters added
        "Updated 11 Dec 2025x",  # runs into a word
        "Ажурирано 31. фебруара 2025.",  # no such day
    ],
)
def test_a_word_that_is_no_declined_month_is_no_date(text: str) -> None:
    assert parse_date(text, "sr" if text[0] == "А" else "en") is None


def test_preparing_a_language_makes_no_regional_patterns() -> None:
    """A large read makes each language's date patterns before its workers fork; the
    regional ones (0.3 s for English) are made only where a date needs them."""
    dates._regional_patterns.cache_clear()
    folder._warm(parse_config({}, root=ROOT, source="(test)", env={}).profiles)
    assert dates._regional_patterns.cache_info().currsize == 0
    assert parse_date("Updated 11 Sept 2025", "en") == date(2025, 9, 11)  # en_GB's "Sept"
    assert dates._regional_patterns.cache_info().currsize == 1
