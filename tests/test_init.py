"""`syndicate init`: a new site's folder that the next command publishes as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import feedparser

from syndicate.config import load_config
from tests.conftest import ARTICLES, ROOT


def syndicate(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syndicate", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder)},
    )


def test_init_then_run_once_publishes_the_example(tmp_path: Path) -> None:
    made = syndicate(tmp_path, "init", "site")
    assert made.returncode == 0, made.stderr
    site = tmp_path / "site"
    # The shipped files themselves: the commented config and a seed article.
    assert (site / "config.toml").read_bytes() == (ROOT / "config.toml").read_bytes()
    [example] = (site / "articles").iterdir()
    assert example.read_bytes() in {p.read_bytes() for p in ARTICLES.iterdir()}
    assert "cd site" in made.stdout and "syndicate run --once" in made.stdout

    ran = syndicate(site, "run", "--once")
    assert ran.returncode == 0, ran.stderr
    config = load_config(site / "config.toml", env={})
    feed = feedparser.parse((site / "feeds" / "en.atom.xml").read_bytes())
    assert feed.feed.title == config.site.title
    assert feed.feed.subtitle == config.description("en")
    assert [e.title for e in feed.entries] == [example.read_text("utf-8").split("\n", 1)[0]]
    assert (site / "state" / "syndicate.db").is_file()  # inside the new site, nowhere else
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_init_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("# mine\n", "utf-8")
    refused = syndicate(tmp_path, "init")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"syndicate: {Path('config.toml')}: already there; init only starts a new site "
        "(nothing written)"
    )
    assert (tmp_path / "config.toml").read_text("utf-8") == "# mine\n"
    assert not (tmp_path / "articles").exists()

    other = tmp_path / "other"
    (other / "articles").mkdir(parents=True)
    (other / "articles" / "mine.txt").write_text("my article", "utf-8")
    refused = syndicate(other, "init")
    assert refused.returncode == 1 and "articles/ (not empty)" in refused.stderr
    assert not (other / "config.toml").exists()
    assert [p.name for p in (other / "articles").iterdir()] == ["mine.txt"]
