"""Bounce reading speed: messages per second through ``bounces.classify`` over the vendored
corpus of real bounce mail (tests/bounces/sisimai/, 590 messages), against a floor measured in
the same run.

    .venv/bin/python bench/bounces.py [--rounds 5]

Prints, in one run: the floor (parsing the same bytes with ``email.message_from_bytes``, the
least any reading must do) and ``classify`` (parse, find the recipients, read each one's reason),
each the best of ``--rounds`` passes over the corpus, and how many times slower than the floor
``classify`` is. Target: at least 1,000 messages per second; the run fails below it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from email import message_from_bytes
from pathlib import Path

from syndicate.bounces import classify

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "bounces" / "sisimai"
TARGET = 1000


def best_rate(read: Callable[[bytes], object], messages: list[bytes], rounds: int) -> float:
    """Messages per second of the fastest of ``rounds`` passes."""
    fastest = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for data in messages:
            read(data)
        fastest = min(fastest, time.perf_counter() - start)
    return len(messages) / fastest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    messages = [path.read_bytes() for path in sorted(CORPUS.glob("*.eml"))]
    classify(messages[0])  # the patterns compiled, outside the timing
    floor = best_rate(message_from_bytes, messages, args.rounds)
    rate = best_rate(classify, messages, args.rounds)
    print(f"{len(messages)} messages, {sum(map(len, messages)) / 1e6:.1f} MB")
    print(f"floor     {floor:8,.0f} msg/s  (email.message_from_bytes)")
    slower = floor / rate
    print(f"classify  {rate:8,.0f} msg/s  {slower:.1f}x the floor's time (target >= {TARGET:,})")
    return 0 if rate >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
