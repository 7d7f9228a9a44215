"""CLI start-up: `syndicate --help` against a bare `import click, rich`, in one run.

Every command, and every cron run, first pays for starting the CLI. The floor, measured in the
same run, is a fresh interpreter that imports only the two libraries the command line is made
of. Each case runs in a fresh process, once to warm up (and write the bytecode caches, as an
installed package has them), then ROUNDS times interleaved with the others; the best time counts.
Prints each case's time and its ratio to the floor (the target: within 5x).

    .venv/bin/python bench/startup.py [ROUNDS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = 20
TARGET = 5.0
SYNDICATE = str(Path(sys.executable).parent / "syndicate")
CASES = {
    "import click, rich": [sys.executable, "-c", "import click, rich"],
    "import syndicate.cli": [sys.executable, "-c", "import syndicate.cli"],
    "syndicate --help": [SYNDICATE, "--help"],
    "syndicate schedule --help": [SYNDICATE, "schedule", "--help"],
}
FLOOR = "import click, rich"


def seconds(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for command in CASES.values():
        seconds(command, env)  # warm up
    best = dict.fromkeys(CASES, float("inf"))
    # Rounds interleave the cases, so load from elsewhere on the machine hits all alike.
    for _ in range(rounds):
        for name, command in CASES.items():
            best[name] = min(best[name], seconds(command, env))
    floor = best[FLOOR]
    print(f"best of {rounds} fresh processes each")
    for name, took in best.items():
        against = "" if name == FLOOR else f"  {took / floor:5.2f}x floor"
        print(f"  {name:26} {took * 1000:6.1f} ms{against}")
    ratio = best["syndicate --help"] / floor
    verdict = "meets" if ratio <= TARGET else "MISSES"
    print(f"syndicate --help: {ratio:.1f}x the floor ({verdict} the {TARGET:.0f}x target)")


if __name__ == "__main__":
    main()
