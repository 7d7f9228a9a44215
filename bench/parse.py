"""Reading speed and memory of the article reader against a floor measured in the same run.

Generates 10,000 article files per language from the bundled seeds (unique slugs and dates) in a
temporary folder, then times:
  floor        read every file's bytes, decode them and split them into paragraphs (one process);
  summaries    read_articles(bodies=False), what digests need, as the reader runs by default:
               one process per core for a set this large (worker processes and this one);
  summaries/1  the same in this one process, no workers;
  full         read_articles(bodies=True, blocks=False), what `syndicate check` does (as it
               does: without cycle collection, workers forked: cli.articles.owned_process):
               every body read for its problems, none kept.
Each read runs in a fresh child process, which reports its peak memory (ru_maxrss) and that of
its largest worker; a worker's peak counts the pages it shares with the process it forked from.
Each runs twice, interleaved: with the compiled modules (those the install compiled) and with
every module as Python (SYNDICATE_PURE_PYTHON=1); "compiled" is how many times faster the
first is, the figure that decides whether the reader stays compiled (pyproject.toml).
Run: .venv/bin/python bench/parse.py [files-per-language]
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

from babel.dates import format_date

ROOT = Path(__file__).resolve().parent.parent
SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"
DATE_LINES = {
    "en": ("Updated December 11, 2025", "Updated {}"),
    "nl": ("Bijgewerkt op 11 december 2025", "Bijgewerkt op {}"),
    "de": ("Aktualisiert am 11. Dezember 2025", "Aktualisiert am {}"),
}
BLANK = re.compile(r"\n\s*\n")


def generate(folder: Path, per_language: int) -> int:
    """Copies of each seed with a unique slug, title and date; returns the bytes written."""
    from syndicate.config import load_config
    from syndicate.reader import read_articles

    seeds = read_articles(ROOT / "articles", load_config(ROOT / "config.toml", env={}).profiles)
    total = 0
    for article in seeds:
        text = Path(article.source).read_text("utf-8")
        old_line, new_line = DATE_LINES[article.lang]
        for number in range(per_language):
            day = date(2025, 12, 11) - timedelta(days=number % 3000)
            made = (
                text.replace(SLUG, f"{SLUG}-{number}")
                .replace(old_line, new_line.format(format_date(day, "long", locale=article.lang)))
                .replace(article.title, f"{article.title} ({number})", 1)
            )
            data = made.encode()
            (folder / f"{article.lang}-{number:05d}.txt").write_bytes(data)
            total += len(data)
    return total


def floor(folder: Path) -> tuple[float, int]:
    """Read the same bytes and split them into paragraphs: the least any reader must do."""
    start = time.perf_counter()
    paragraphs = 0
    for path in sorted(folder.iterdir()):
        paragraphs += len(BLANK.split(path.read_bytes().decode("utf-8")))
    return time.perf_counter() - start, paragraphs


def child(folder: str, mode: str) -> None:
    """One timed read in this (fresh) process; prints seconds, articles, problems, peak RSS."""
    kind, _, workers = mode.partition("/")
    from syndicate.cli.articles import owned_process
    from syndicate.config import load_config
    from syndicate.reader import read_articles

    config = load_config(ROOT / "config.toml", env={})
    read_articles(ROOT / "articles", config.profiles)  # load the language model outside the clock
    start = time.perf_counter()
    with owned_process() if kind == "full" else contextlib.nullcontext():
        found = read_articles(
            Path(folder),
            config.profiles,
            bodies=kind == "full",
            blocks=False,
            processes=int(workers or 0) or None,
        )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "seconds": seconds,
                "articles": len(found),
                "problems": len(found.problems),
                "peak_mib": peak,
                "worker_peak_mib": worker_peak,
            }
        )
    )


def measure(folder: Path, mode: str, *, pure: bool = False) -> dict[str, float]:
    env = {**os.environ, "SYNDICATE_PURE_PYTHON": "1"} if pure else None
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(folder), mode],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout)


def compiled_now() -> list[str]:
    """The modules that run compiled in the first run of each pair."""
    from syndicate import compiled

    record = compiled.PACKAGE / compiled.RECORD
    names = json.loads(record.read_text("utf-8")) if record.exists() else {}
    pure = compiled.as_python(compiled.PACKAGE, os.environ)
    return [name for name in names if name not in pure]


def main() -> None:
    per_language = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        size = generate(folder, per_language)
        files = per_language * 3
        print(f"{files} files, {size / 2**20:.0f} MiB")
        # Best of two: the first pass also warms the page cache for the reads that follow.
        floor_s, paragraphs = min(floor(folder), floor(folder))
        print(
            f"floor        {files / floor_s:9.0f} files/s  {floor_s / files * 1e6:6.1f} µs/file"
            f"  ({paragraphs} paragraphs)"
        )
        print(f"compiled: {', '.join(compiled_now()) or 'none (all Python)'}")
        for mode in ("summaries", "summaries/1", "full"):
            got = measure(folder, mode)
            python = measure(folder, mode, pure=True)
            for run in (got, python):
                assert run["articles"] == files and run["problems"] == 0, run
            per_file = got["seconds"] / files
            workers = (
                f" (+ largest worker {got['worker_peak_mib']:.0f} MiB)"
                if got["worker_peak_mib"]
                else ""
            )
            print(
                f"{mode:12} {files / got['seconds']:9.0f} articles/s"
                f"  {per_file * 1e6:6.1f} µs/file  {got['seconds'] / floor_s:5.1f}x floor"
                f"  peak {got['peak_mib']:.0f} MiB{workers}"
                f"  | Python {python['seconds'] / floor_s:5.1f}x floor:"
                f" compiled {python['seconds'] / got['seconds']:.2f}x faster"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3])
    else:
        main()
