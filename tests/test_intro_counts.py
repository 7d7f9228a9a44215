"""A digest that lists only the newest of what is new says what it shows of how many, in each
language's words and plural forms."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from syndicate.config import parse_config
from syndicate.digest import select_digest
from syndicate.reader import read_articles
from syndicate.render import render_digest
from tests.conftest import write_articles


@pytest.mark.parametrize(
    ("lang", "since", "intro"),
    [
        ("nl", date(2025, 1, 1), "De 10 nieuwste van 260 nieuwe artikelen sinds 1 januari 2025."),
        ("de", None, "Die 10 neuesten von 260 neuen Artikeln."),
        ("en", date(2025, 1, 1), "The newest 10 of 260 new articles since January 1, 2025."),
    ],
)
def test_a_capped_digest_says_what_it_shows_of_how_many(
    tmp_path: Path, lang: str, since: date | None, intro: str
) -> None:
    config = parse_config({}, root=tmp_path, source="(t)", env={})
    folder = write_articles(tmp_path / "a", 260, newest=date(2025, 12, 11), langs=(lang,))
    found = read_articles(folder, config.profiles, bodies=False)
    digest = select_digest(found, lang, ["cost"], since=since, limit=10)
    assert digest is not None and (len(digest.items), digest.more) == (10, 250)
    rendered = render_digest(digest, config)
    assert intro in " ".join(rendered.text.split())
    assert intro in " ".join(rendered.html.split())
