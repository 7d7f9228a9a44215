"""Shared fixtures: the seed articles, a fixed clock, and the rule for missing real parts."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from syndicate.config import Config, parse_config

ROOT = Path(__file__).resolve().parent.parent
ARTICLES = ROOT / "articles"
DATA = Path(__file__).resolve().parent / "data"
SCHEMAS = Path(__file__).resolve().parent / "schemas"

# Real parts as fixtures: `smtp_server` (aiosmtpd), `database_url` (SQLite file | PostgreSQL),
# `hubs` (WebSub hub endpoints, Starlette under uvicorn), `dns_server` (dnslib).
pytest_plugins = [
    "tests.mailserver",
    "tests.databases",
    "tests.hubserver",
    "tests.websites",
    "tests.dnszone",
]


ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
"""Screenshots and other files a person may want to look at after a run (git-ignored)."""
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def missing_real_part(reason: str) -> None:
    """Skip on a developer machine; fail under CI, where every real part must be present."""
    if os.environ.get("SYNDICATE_REQUIRE_REAL"):
        pytest.fail(f"required real part missing: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's Chromium, driven by Playwright (never a browser Playwright downloads)."""
    if not CHROMIUM.exists():
        missing_real_part(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_real_part("the playwright package is not installed")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def now() -> datetime:
    return datetime(2025, 12, 15, 8, 0, tzinfo=UTC)


@pytest.fixture
def articles_dir(tmp_path: Path) -> Path:
    """A private copy of the bundled article set."""
    target = tmp_path / "articles"
    shutil.copytree(ARTICLES, target)
    return target


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """Built-in defaults rooted in a temporary folder, so state and output stay there."""
    return parse_config({}, root=tmp_path, source="(test)", env={})


DATE_LINES = {
    "en": ("Updated", "MMMM d, y"),
    "nl": ("Bijgewerkt op", "d MMMM y"),
    "de": ("Aktualisiert am", "d. MMMM y"),
    # Translations in tests/data/unconfigured, for languages without a built-in profile.
    "ja": ("更新日：", "y年M月d日"),
    "ar": ("آخر تحديث:", "d MMMM y"),
}
TRANSLATED = DATA / "unconfigured"
"""The sample article in languages without a built-in profile (``<lang>-trainium3.txt``)."""
SEED_SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"


def with_invisible_marks(text: str) -> str:
    """``text`` as a word processor may leave it: a right-to-left mark opening each line and a
    left-to-right one closing it, zero-width spaces after bullets and a soft hyphen in each
    long word (slugs included). None of it shows; the reading must be the same."""
    text = "\n".join(f"\u200f{line}\u200e" if line else line for line in text.split("\n"))
    text = text.replace(" - ", " -\u200b ")
    return re.sub(r"(\w{5})(\w{5})", "\\1\u00ad\\2", text)


def write_articles(
    folder: Path,
    count: int,
    *,
    newest: date,
    langs: tuple[str, ...] = ("en",),
    slug: str = "piece",
) -> Path:
    """``count`` articles per language made from the bundled seeds (and, for a language
    without a built-in profile, its translation in ``TRANSLATED``), one a day back from
    ``newest``: the n-th (0 = newest) has its own title, date line and slug ``<slug>-<n>``,
    so the language versions of one piece share a slug. Returns the folder."""
    from babel.dates import format_date

    from syndicate.config import parse_config
    from syndicate.reader import read_articles

    seeds = read_articles(ARTICLES, parse_config({}, root=ROOT, source="(test)", env={}).profiles)
    sources = {article.lang: Path(article.source) for article in seeds}
    sources |= {lang: TRANSLATED / f"{lang}-trainium3.txt" for lang in langs if lang not in sources}
    folder.mkdir(parents=True, exist_ok=True)
    for lang in langs:
        lines = sources[lang].read_text("utf-8").split("\n")
        title = lines[0]
        words, pattern = DATE_LINES[lang]
        for n in range(count):
            day = newest - timedelta(days=n)
            lines[0] = f"{title} ({slug} {n})"
            lines[2] = f"{words} {format_date(day, pattern, locale=lang)}"
            text = "\n".join(lines).replace(SEED_SLUG, f"{slug}-{n}")
            (folder / f"{lang}-{slug}-{n:04}.txt").write_text(text, "utf-8")
    return folder


@pytest.fixture(scope="module")
def newsboat() -> str:
    """Debian's newsboat: a reader with an Atom parser of its own (C++ over libxml2)."""
    found = shutil.which("newsboat")
    if found is None:
        missing_real_part("no newsboat on PATH (apt-get install newsboat)")
    assert found is not None  # missing_real_part skipped or failed the test
    return found


def newsboat_reading(
    program: str, paths: list[Path], work: Path
) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """What newsboat makes of the documents, from its cache after a headless reload: each
    document's site link and each of its items' link, by document."""
    work.mkdir()
    urls, cache, settings = work / "urls", work / "cache.db", work / "config"
    urls.write_text("".join(f"{path.as_uri()}\n" for path in paths), "utf-8")
    settings.write_text("", "utf-8")
    done = subprocess.run(
        [program, "-u", urls, "-c", cache, "-C", settings, "-x", "reload"],
        # Its own home: newsboat reads and writes nothing of the user's.
        env={"HOME": str(work), "PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    by_uri = {path.as_uri(): path for path in paths}
    feeds: dict[str, str] = {}
    items: dict[str, dict[str, str]] = {}
    with closing(sqlite3.connect(cache)) as db:
        for uri, link in db.execute("SELECT rssurl, url FROM rss_feed"):
            feeds[str(by_uri[uri])] = link
        for uri, guid, link in db.execute("SELECT feedurl, guid, url FROM rss_item"):
            items.setdefault(str(by_uri[uri]), {})[guid] = link
    return feeds, items
