"""Dates (reader/dates.py): each language's own date formats, from CLDR."""

from __future__ import annotations

import pytest

from syndicate.reader.dates import parse_date


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
    ],
)
def test_parse_date_uses_cldr_names(text: str, lang: str, expected: str | None) -> None:
    found = parse_date(text, lang)
    assert (found.isoformat() if found else None) == expected
