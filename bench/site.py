"""Static site benchmark: ``build --site`` of N articles x 3 languages, beside a floor.

    .venv/bin/python bench/site.py [--n 1000]

Prints, in one run: the floor (copying the finished site's files into a new folder, reading
and writing each: the least any writer of those bytes must do); the site written from the
article set (read, render every page, write, swap into place), the faster of two, as a
multiple of the floor; and a rebuild over the site it wrote (each page compared with the old
one, whose mtime it keeps where the bytes are the same).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from syndicate.build import build_feeds
from syndicate.config import parse_config
from syndicate.state import open_store
from syndicate.web.static import build_site

sys.path.insert(0, str(Path(__file__).resolve().parent))
from feeds import generate  # bench/feeds.py: the same generated articles

ROUNDS = 2


def copy_floor(site: Path, into: Path) -> float:
    start = time.perf_counter()
    for path in sorted(site.rglob("*")):
        target = into / path.relative_to(site)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000, help="articles per language")
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory(prefix="syndicate-bench-site-") as scratch:
        root = Path(scratch)
        generate(root / "articles", n)
        config = parse_config({}, root=root, source="(bench)", env={})
        store = open_store(config.database_url)
        try:
            build_feeds(config, root / "articles", store=store)
        finally:
            store.close()
        feeds = config.path(config.feeds.out)
        builds = []
        for round_ in range(ROUNDS):
            out = root / f"site-{round_}"
            start = time.perf_counter()
            report = build_site(config, out, root / "articles", feeds)
            builds.append(time.perf_counter() - start)
        start = time.perf_counter()
        build_site(config, root / "site-0", root / "articles", feeds)
        rebuild = time.perf_counter() - start
        floors = [copy_floor(root / "site-0", root / f"copy-{r}") for r in range(ROUNDS)]
        for r in range(ROUNDS):
            shutil.rmtree(root / f"copy-{r}")
    floor, build = min(floors), min(builds)
    print(f"{n} articles x 3 languages: {report.pages} pages, {report.files} files")
    print(f"floor (copy the site's files): {floor:.2f} s")
    print(f"build --site: {build:.2f} s ({build / floor:.1f}x the floor), "
          f"{report.pages / build:.0f} pages/s")  # fmt: skip
    print(f"rebuild, nothing changed: {rebuild:.2f} s ({rebuild / build:.2f}x the build)")


if __name__ == "__main__":
    main()
