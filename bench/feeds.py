"""Feed build benchmark: N articles x 3 languages, the project's build beside raw feedgen.

    .venv/bin/python bench/feeds.py [--n 2000]     # --n 10000: the full-size run (about 2 min)

Prints, in one run: the floor (reading every file's bytes, decoding them and splitting them
into paragraphs, in one process: the least any build must do); the full build (read, model,
every feed format, archives, the audience feeds, writes) in a fresh process with its peak
memory, the faster of two, also as a multiple of the floor; the peak memory of the build's
processes together (summed PSS, sampled in a build of its own); a rebuild with nothing
changed and one with one article revised, each with what it read and wrote; the Atom writing
of the newest entries against raw feedgen writing the same entries. Targets at n=10000: full
build <= 0.5x Hugo's time and <= 300 MiB, a revision <= 0.1x the full build, a rebuild with
nothing changed <= 0.05x, Atom within 1.5x of raw feedgen. Each of these but the memory is
measured twice, in processes of its own: with the compiled modules (those the install
compiled) and with every module as Python (SYNDICATE_PURE_PYTHON=1), the figures that decide
which modules stay compiled (pyproject.toml). Where Hugo is installed, it builds the same
articles too (newest-50 RSS per language only, what the issue's reference figure covers),
and the full build is compared with it.

Where a full build's time goes (n=10000, 30,000 files, 2 shared cores; the phases timed in
the build's own process, a quiet moment):

    phase                                                          before     now
    start-up: imports (SQLAlchemy 0.15 s, feedgen+lxml 0.10,       0.35 s     0.32 s
      config 0.06), before build_feeds
    walk: scandir + stat of every file, the inputs' hash           0.25       0.13
    reading + parsing + the index, this process and one worker     2.50       1.14
      (a summary parse is ~105 us a file compiled; a worker's
      readings come back encoded and are decoded here)
    modelling: the set, held-back articles, the documents' plans   0.05       0.05
    the newest articles read again with their text                 0.07       0.04
    first publication times (30,000 rows into the state db)        0.20       0.17
    rendering                                                      0.81       0.46
      entries (dates, URLs, categories: once per entry)            0.27       0.22
      Atom, subscription feeds and 60 archive pages                0.30       0.15
      RSS                                                          0.05       0.01
      JSON Feed                                                    0.02       0.01
      the 15 audience feeds a language (feedgen per entry)         0.18       in the above
    writing (staged files, the manifest, the index as it is read)  0.17       0.06

What went: feedgen's per-entry work (each Atom entry and RSS item is written as text once,
held to feedgen's bytes by the tests); each reader worker making its own date patterns from
Babel's locale data (0.03-0.1 s a language: made before the workers fork); re-made dates
(once per day) and category lists (once per audience set). A revision that moves no article
reads the changed files and renders only the documents showing them, from the index lines
the manifest locates, instead of decoding all 30,000 index lines, rendering every document
and rewriting a 34 MB index; a rebuild with nothing changed is the walk (its stat calls are
0.05-0.075 s of its 0.10, a tenth less since each folder is listed through a descriptor) and
the manifest's first line (the next two, the plan and the index table a revision needs, are
not decoded; a revision writes the plan's line back as it was). The reading is what is left:
30,000 summary parses at ~105 us on two shared cores, against Hugo's multi-threaded Go.

Where the memory goes (summed PSS of the build and its reader worker, n=10000 against
n=30000, sampled every 20 ms in one run each, right after the other): 93 MiB and 129 MiB
(1.39x; before the memory work 174 and 385 MiB, 2.2x; before the text was left out of the
held readings, 131 and 254, 1.95x). The import-time baseline is about 65 MiB; what grows is
what the build holds for each file while it renders, about 0.6 KiB of PSS a file (0.48
traced, the rest the allocator's slack):

    per file, as tracemalloc saw it in the build's process        before    now
    the index reading: Article, slug, date, audiences (before:      ~1.5      ~0.25 KiB
      title, summary, every SEO field and the content hash: the
      text is read back from the index as each archive page is made)
    the set's lookups (by key and by slug: now by slug alone)       ~0.2      ~0.05
    the walk: path, size and mtime (an array: two numbers a file)   ~0.45     ~0.1
    first publication times (a dict slot a file, by language)       ~0.25     ~0.05
    where each file's line is in the index (two numbers a file;     -         ~0.02
      the index table's rows are made as the manifest is written)

The peak is the build alone while it renders. Its reader worker starts during the walk, at
its PARALLEL_FROM-th file, when the build has no index of its config (it reads every file):
one forked after the walk kept its own copy of each page of it the build then touched (22 MiB
of its own at n=10000, 49 at n=30000; now 8 at either size).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from babel.dates import format_date
from feedgen.feed import FeedGenerator

from syndicate import feeds
from syndicate.config import parse_config
from syndicate.reader import read_articles

ROOT = Path(__file__).resolve().parent.parent
SEED_SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"
DATE_LINES = {"en": "Updated", "nl": "Bijgewerkt op", "de": "Aktualisiert am"}

# As `syndicate build` runs it: the collector skips what the imports made (cli.main), and the
# command makes its choices for the process (cli.articles.owned_process).
CHILD = """
import gc, json, resource, sys, time
from pathlib import Path
from syndicate.cli.articles import owned_process
from syndicate.config import parse_config
from syndicate.build import build_feeds
# What a build that renders imports (build.py imports them only when a build gets that far):
# start-up, which the wall figure counts, as `syndicate build` imported them before.
from syndicate import feeds, i18n, state
gc.freeze()
root = Path(sys.argv[1])
config = parse_config({}, root=root, source="(bench)", env={})
start = time.perf_counter()
with owned_process():
    report = build_feeds(config, root / "articles")
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mib": peak, "worker_peak_mib": worker,
                  "skipped": report.skipped, "read": report.read, "written": len(report.written),
                  "files": len(report.written) + len(report.unchanged)}))
"""


def generate(folder: Path, n: int) -> None:
    """n articles per language from the seeds: own slug, one day apart, translations paired."""
    folder.mkdir(parents=True)
    for path in sorted((ROOT / "articles").iterdir()):
        text = path.read_text("utf-8")
        lang = next(lang for lang, words in DATE_LINES.items() if f"\n\n{words} " in text)
        paras = text.split("\n\n")
        for i in range(n):
            day = date.fromordinal(date(2000, 1, 1).toordinal() + i)
            paras[1] = f"{DATE_LINES[lang]} {format_date(day, 'long', locale=lang)}"
            body = "\n\n".join(paras).replace(SEED_SLUG, f"article-{i:05d}")
            (folder / f"{lang}-{i:05d}.txt").write_text(body, "utf-8")


HUGO_CONFIG = """baseURL = "https://example.org/"
disableKinds = ["taxonomy", "term", "section", "sitemap", "robotsTXT", "404"]
[outputs]
home = ["RSS"]
page = []
[services.rss]
limit = 50
"""


def hugo_site(folder: Path, site: Path) -> None:
    """The same articles as a Hugo site that writes the newest-50 RSS feed per language and
    nothing else: what the issue's Hugo figure covers. Each file's title, its day (as
    ``generate`` numbers them) and the rest as its Markdown body."""
    langs = []
    for path in sorted(folder.iterdir()):
        text = path.read_text("utf-8")
        lang = next(lang for lang, words in DATE_LINES.items() if f"\n\n{words} " in text)
        title, _, rest = text.partition("\n\n")
        day = date.fromordinal(date(2000, 1, 1).toordinal() + int(path.stem.split("-")[1]))
        stamp = f"{day.isoformat()}T09:00:00+01:00"
        if lang not in langs:
            langs.append(lang)
            (site / "content" / lang).mkdir(parents=True)
        front = f"---\ntitle: {json.dumps(title)}\ndate: {stamp}\n---\n\n"
        (site / "content" / lang / path.name.replace(".txt", ".md")).write_text(front + rest)
    sections = "".join(
        f'[languages.{lang}]\ncontentDir = "content/{lang}"\nweight = {n}\n'
        for n, lang in enumerate(langs, 1)
    )
    (site / "hugo.toml").write_text(HUGO_CONFIG + sections)


def run_timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and peak memory (MiB) of one run of ``command``."""
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    assert status == 0, f"{command[0]} failed"
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def floor(folder: Path) -> float:
    """Read every file's bytes, decode them and split them into paragraphs, in one process."""
    blank = re.compile(r"\n\s*\n")
    start = time.perf_counter()
    for path in sorted(folder.iterdir()):
        blank.split(path.read_bytes().decode("utf-8"))
    return time.perf_counter() - start


def python_env(pure: bool) -> dict[str, str] | None:
    """A child's environment: every module as Python with ``pure``, else as installed."""
    return {**os.environ, "SYNDICATE_PURE_PYTHON": "1"} if pure else None


def compiled_now() -> list[str]:
    """The modules that run compiled in the first run of each pair."""
    from syndicate import compiled

    record = compiled.PACKAGE / compiled.RECORD
    names = json.loads(record.read_text("utf-8")) if record.exists() else {}
    pure = compiled.as_python(compiled.PACKAGE, os.environ)
    return [name for name in names if name not in pure]


def build_in_child(root: Path, *, fresh: bool = False, pure: bool = False) -> dict:
    """One build in a fresh interpreter, so that its peak memory is its own; with ``fresh``,
    from scratch (no feeds, no state database); with ``pure``, every module as Python."""
    if fresh:
        for made in ("feeds", "state"):
            shutil.rmtree(root / made, ignore_errors=True)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)],
        check=True,
        capture_output=True,
        text=True,
        env=python_env(pure),
    )
    result = json.loads(done.stdout)
    result["wall"] = time.perf_counter() - start
    return result


def tree_pss_peak(root: Path) -> float:
    """A build from scratch whose processes' memory is sampled together every 20 ms: the peak
    of their summed PSS (a page shared by several processes counts once, split among them),
    in MiB. Its own run: the sampling costs time."""
    for made in ("feeds", "state"):
        shutil.rmtree(root / made, ignore_errors=True)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.DEVNULL)
    peak = 0
    while child.poll() is None:
        total, pids = 0, [child.pid]
        while pids:
            pid = pids.pop()
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                for task in Path(f"/proc/{pid}/task").iterdir():
                    pids += map(int, (task / "children").read_text().split())
            except (OSError, ValueError):  # the process ended meanwhile
                continue
        peak = max(peak, total)
        time.sleep(0.02)
    return peak / 1024


def raw_feedgen(config, lang: str, entries: list[feeds.Entry]) -> bytes:
    """The floor: plain feedgen 1.0.0 writing the same values, none of our fixes."""
    fg = FeedGenerator()
    fg.id(feeds.feed_id(config, lang))
    fg.title("t")
    fg.subtitle("s")
    fg.language(lang)
    fg.author({"name": config.site.author})
    fg.updated(entries[0].updated)
    fg.link(href=feeds.feed_url(config, f"{lang}.atom.xml"), rel="self")
    for e in entries:
        fe = fg.add_entry(order="append")
        fe.id(e.id)
        fe.title(e.title)
        fe.published(e.published)
        fe.updated(e.updated)
        fe.author({"name": config.site.author})
        for other, url in e.translations:
            fe.link(href=url, rel="alternate", type="text/html", hreflang=other)
        fe.link(href=e.url, rel="alternate", type="text/html", hreflang=lang)
        for term, label in e.categories:
            fe.category(term=term, label=label)
        fe.summary(e.summary)
        fe.content(e.content, type="html")
    return fg.atom_str(pretty=True)


def atom_ratio(root: Path, rounds: int = 10) -> dict[str, float]:
    """µs per entry for one 50-entry document: raw feedgen (the floor), our Atom writing of
    the same entries, and our whole path from articles (HTML content model included)."""
    config = parse_config({}, root=root, source="(bench)", env={})
    sample = root / "sample"
    sample.mkdir(exist_ok=True)
    for path in sorted((root / "articles").glob("en-*.txt"))[-50:]:
        (sample / path.name).write_bytes(path.read_bytes())
    articles = read_articles(sample, config.profiles)
    published = {a.key: feeds.updated_at(config, a.updated) for a in articles}
    chosen = articles.in_language("en")
    entries = [
        feeds.make_entry(config, a, published[a.key], articles.translations(a)) for a in chosen
    ]
    page = feeds.Page(feeds.feed_url(config, "en.atom.xml"))

    def whole() -> None:
        made = [
            feeds.make_entry(config, a, published[a.key], articles.translations(a)) for a in chosen
        ]
        feeds.atom_document(config, "en", made, page)

    work = {
        "raw": lambda: raw_feedgen(config, "en", entries),
        "ours": lambda: feeds.atom_document(config, "en", entries, page),
        "whole": whole,
    }
    timings: dict[str, float] = {}
    for _ in range(5):  # interleaved, the fastest of five: other load on the machine only adds
        for name, run in work.items():
            run()
            start = time.perf_counter()
            for _ in range(rounds):
                run()
            took = (time.perf_counter() - start) / rounds / len(chosen) * 1e6
            timings[name] = min(timings.get(name, took), took)
    return timings


def atom_in_child(root: Path, *, pure: bool) -> dict[str, float]:
    """``atom_ratio`` in a fresh interpreter; with ``pure``, every module as Python."""
    done = subprocess.run(
        [sys.executable, __file__, "--atom", str(root)],
        check=True,
        capture_output=True,
        text=True,
        env=python_env(pure),
    )
    return json.loads(done.stdout)


def done(run: dict) -> str:
    """What a build read and wrote."""
    return (
        f"read {run['read']} article file(s), wrote {run['written']} of its {run['files']} "
        "documents"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2_000, help="articles per language")
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory(prefix="syndicate-bench-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        generate(root / "articles", n)
        print(f"generated {3 * n} article files in {time.perf_counter() - start:.1f} s")

        floor_s = min(floor(root / "articles"), floor(root / "articles"))
        print(f"floor: {floor_s:.2f} s ({floor_s / (3 * n) * 1e6:.1f} µs per article file)")

        print(f"compiled: {', '.join(compiled_now()) or 'none (all Python)'}")
        runs = [build_in_child(root, fresh=True, pure=pure) for _ in range(2) for pure in (0, 1)]
        full = min(runs[::2], key=lambda r: r["seconds"])
        python = min(runs[1::2], key=lambda r: r["seconds"])
        per_file = full["seconds"] / (3 * n) * 1e3
        print(
            f"full build: {full['seconds']:.2f} s in build_feeds = "
            f"{full['seconds'] / floor_s:.1f} x floor ({full['wall']:.2f} s wall with "
            f"start-up), {per_file:.2f} ms per article file, peak {full['peak_mib']:.0f} MiB "
            f"(largest forked process: {full['worker_peak_mib']:.0f} MiB, much of it shared "
            f"with the build it forked from), {full['files']} files written "
            f"(target at n=10000: <= 0.5 x Hugo's time, below, and <= 300 MiB; "
            f"linear projection to n=10000: {per_file * 30:.1f} s)"
        )
        print(
            f"full build, every module as Python: {python['seconds']:.2f} s = "
            f"{python['seconds'] / floor_s:.1f} x floor: compiled "
            f"{python['seconds'] / full['seconds']:.2f} x faster"
        )
        if Path("/proc/self/smaps_rollup").exists():
            print(
                f"peak memory of the build's processes together (summed PSS, its own run): "
                f"{tree_pss_peak(root):.0f} MiB (target < 300 MiB)"
            )
        build_in_child(root)  # the PSS run built from scratch: this one sets the state again
        again = build_in_child(root)
        again_py = build_in_child(root, pure=True)
        for run in (again, again_py):
            assert run["skipped"], "a rebuild with no change should read and write nothing"
        print(
            f"rebuild, nothing changed: {again['seconds']:.3f} s = "
            f"{again['seconds'] / full['seconds']:.3f} x full build (target <= 0.05); "
            f"as Python {again_py['seconds']:.3f} s; {done(again)}"
        )
        newest = max((root / "articles").glob("en-*.txt"))
        newest.write_text(newest.read_text("utf-8").replace("Trainium3", "Trainium 3", 1))
        one = build_in_child(root)
        print(
            f"rebuild, one article revised: {one['seconds']:.3f} s = "
            f"{one['seconds'] / full['seconds']:.3f} x full build (target <= 0.1); {done(one)}"
        )
        t = atom_in_child(root, pure=False)
        p = atom_in_child(root, pure=True)
        print(
            f"Atom writing, same entries: {t['ours']:.0f} µs/entry vs raw feedgen "
            f"{t['raw']:.0f} µs/entry = {t['ours'] / t['raw']:.2f} x (target < 1.5); "
            f"with the HTML content model: {t['whole']:.0f} µs/entry"
        )
        print(
            f"Atom writing, every module as Python: {p['ours'] / p['raw']:.2f} x raw feedgen; "
            f"with the HTML content model: {p['whole']:.0f} µs/entry: compiled "
            f"{p['whole'] / t['whole']:.2f} x faster"
        )
        if shutil.which("hugo") is None:
            print("Hugo: not installed (Debian: apt-get install hugo), no comparison")
            return
        hugo_site(root / "articles", root / "hugo")
        hugo = min(run_timed(["hugo", "--quiet"], root / "hugo") for _ in range(2))
        print(
            f"Hugo, the same articles, newest-50 RSS per language only: {hugo[0]:.2f} s wall, "
            f"{hugo[1]:.0f} MiB; our full build with start-up = {full['wall'] / hugo[0]:.2f} x "
            f"Hugo's time (target <= 0.5), {full['peak_mib'] / hugo[1]:.2f} x its memory"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--atom"]:
        print(json.dumps(atom_ratio(Path(sys.argv[2]))))
    else:
        main()
