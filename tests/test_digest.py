"""Digest selection: who gets which takeaways, window edges, revisions, the variant key."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from syndicate.config import Config
from syndicate.digest import audience_order, select_digest, window_start
from syndicate.model import ArticleSet
from syndicate.reader import read_articles
from tests.conftest import ARTICLES, write_articles

SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"
UPDATED = date(2025, 12, 11)


@pytest.fixture
def seeds(config: Config) -> ArticleSet:
    found = read_articles(ARTICLES, config.profiles)
    assert len(found) == 3
    return found


def with_second_article(seeds: ArticleSet, lang: str = "en") -> ArticleSet:
    """The seed set plus an older article in ``lang`` that has only cost takeaways."""
    first = seeds.get(lang, SLUG)
    assert first is not None
    older = replace(
        first,
        slug="older-piece",
        title="An older piece",
        updated=date(2025, 11, 2),
        takeaways=tuple(t for t in first.takeaways if t.audience == "cost"),
        content_hash="0" * 32,
    )
    return ArticleSet((*seeds.articles, older))


@pytest.mark.parametrize("lang", ["en", "nl", "de"])
def test_one_audience_gets_only_its_takeaways(seeds: ArticleSet, lang: str) -> None:
    digest = select_digest(seeds, lang, ["cost"])
    assert digest is not None
    assert digest.lang == lang and digest.audiences == ("cost",)
    [item] = digest.items
    assert item.article.slug == SLUG and item.article.lang == lang
    assert [t.audience for t in item.takeaways] == ["cost"]
    assert item.takeaways[0].bullets == seeds.get(lang, SLUG).takeaways_for("cost").bullets
    assert not item.revised


def test_several_audiences_in_display_order_whatever_the_input_order(seeds: ArticleSet) -> None:
    digest = select_digest(seeds, "nl", ["strategy", "cost", "strategy"])
    assert digest is not None
    assert digest.audiences == ("cost", "strategy")
    assert [t.audience for t in digest.items[0].takeaways] == ["cost", "strategy"]
    assert digest.key == "nl-cost+strategy"
    assert select_digest(seeds, "nl", ["cost", "strategy"]).key == digest.key


def test_articles_without_the_audience_are_left_out(seeds: ArticleSet) -> None:
    both = with_second_article(seeds)
    assert [i.article.slug for i in select_digest(both, "en", ["cost"]).items] == [
        SLUG,
        "older-piece",
    ]
    assert [i.article.slug for i in select_digest(both, "en", ["strategy"]).items] == [SLUG]
    assert select_digest(both, "en", ["no-such-audience"]) is None


def test_no_articles_in_the_language_means_no_digest(seeds: ArticleSet) -> None:
    assert select_digest(seeds, "fr", ["cost"]) is None


@pytest.mark.parametrize(
    ("since", "slugs"),
    [
        (None, [SLUG, "older-piece"]),
        (date(2025, 11, 2), [SLUG, "older-piece"]),  # the window includes its first day
        (date(2025, 11, 3), [SLUG]),
        (UPDATED, [SLUG]),
        (date(2025, 12, 12), None),  # nothing new: no digest at all, never an empty one
    ],
)
def test_since_window(seeds: ArticleSet, since: date | None, slugs: list[str] | None) -> None:
    digest = select_digest(with_second_article(seeds), "en", ["cost"], since=since)
    assert (digest and [i.article.slug for i in digest.items]) == slugs
    if digest:
        assert digest.since == since


def test_sent_articles_are_skipped_and_revisions_marked(seeds: ArticleSet) -> None:
    article = seeds.get("de", SLUG)
    assert select_digest(seeds, "de", ["cost"], sent={("de", SLUG): article.content_hash}) is None
    revised = select_digest(seeds, "de", ["cost"], sent={("de", SLUG): "an-older-hash"})
    assert revised is not None and revised.items[0].revised
    # What was sent in another language does not count.
    other = select_digest(seeds, "de", ["cost"], sent={("nl", SLUG): article.content_hash})
    assert other is not None and not other.items[0].revised


def test_content_hash_follows_what_the_digest_shows(seeds: ArticleSet) -> None:
    plain = select_digest(seeds, "en", ["cost"])
    assert plain.content_hash == select_digest(seeds, "en", ["cost"]).content_hash
    revised = select_digest(seeds, "en", ["cost"], sent={("en", SLUG): "old"})
    assert revised.content_hash != plain.content_hash
    assert select_digest(seeds, "en", ["strategy"]).content_hash != plain.content_hash
    edited = ArticleSet(
        tuple(replace(a, content_hash="f" * 32) if a.lang == "en" else a for a in seeds.articles)
    )
    assert select_digest(edited, "en", ["cost"]).content_hash != plain.content_hash


def test_a_digest_needs_an_audience(seeds: ArticleSet) -> None:
    with pytest.raises(ValueError, match="at least one audience"):
        select_digest(seeds, "en", [])


def test_audience_order_puts_configured_extras_last() -> None:
    assert audience_order(["zeta", "strategy", "alpha", "architects"]) == (
        "architects",
        "strategy",
        "alpha",
        "zeta",
    )


@pytest.mark.parametrize(
    ("last_issue", "days", "start"),
    [
        (date(2025, 12, 8), None, date(2025, 12, 8)),  # what came on or after the last issue
        (date(2025, 12, 8), 30, date(2025, 12, 8)),  # the first window's limit is for the first
        (None, None, None),  # a new group: however old (the cap keeps the newest)
        (None, 7, date(2025, 12, 8)),
    ],
)
def test_window_start(last_issue: date | None, days: int | None, start: date | None) -> None:
    assert window_start(last_issue, date(2025, 12, 15), days) == start


def test_the_cap_lists_the_newest_and_counts_the_rest(tmp_path, config: Config) -> None:
    archive = read_articles(
        write_articles(tmp_path / "a", 300, newest=UPDATED), config.profiles, bodies=False
    )
    digest = select_digest(archive, "en", ["cost"], limit=10)
    assert [i.article.slug for i in digest.items] == [f"piece-{n}" for n in range(10)]
    assert digest.more == 290
    assert select_digest(archive, "en", ["cost"]).more == 0
    # Within a window, and without what the group already had (nor its revision mark).
    sent = {("en", "piece-0"): archive.get("en", "piece-0").content_hash}
    windowed = select_digest(archive, "en", ["cost"], since=date(2025, 12, 1), sent=sent, limit=4)
    assert [i.article.slug for i in windowed.items] == ["piece-1", "piece-2", "piece-3", "piece-4"]
    assert windowed.more == 6  # December 1 to 10: ten articles, four listed
    assert windowed.content_hash != windowed.shortened(3).content_hash
    assert windowed.shortened(3).more == 7 and windowed.shortened(99) is windowed
