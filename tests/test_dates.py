"""Dates (reader/dates.py): each language's own date formats, from CLDR."""

from __future__ import annotations

import pytest

from syndicate.reader.dates import find_date, parse_date


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
    ],
)
def test_parse_date_uses_cldr_names(text: str, lang: str, expected: str | None) -> None:
    found = parse_date(text, lang)
    assert (found.isoformat() if found else None) == expected


def test_find_date_says_where_the_date_starts() -> None:
    """What comes before the date is the date line's words (an unconfigured language's)."""
    written = {"it": "Aggiornato in data 11 dicembre 2025", "ja": "更新日 2025年12月11日"}
    words = {}
    for lang, text in written.items():
        found = find_date(text, lang)
        assert found is not None
        words[lang] = text[: found[1]].strip()
    assert words == {"it": "Aggiornato in data", "ja": "更新日"}
