"""Sends spread over worker processes (``send.engine = "procrastinate"``): messages a second
with 1, 2, 3 and 4 ``syndicate worker`` processes, against a sink that answers each message
after a delay (a relay's latency), then one CPU-bound run with no delay.

Not part of ``make bench``: it needs PostgreSQL (``SYNDICATE_BENCH_POSTGRES_URL``, default
the local test database) and takes minutes at full size.

    .venv/bin/python bench/scale.py [MESSAGES] [--workers 1,2,3,4] [--delay-ms 5]

Targets on a 2-core machine: 4 workers at least 3x one worker when relay-bound.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from syndicate import send
from syndicate.config import load_config
from syndicate.state import open_store
from syndicate.subscribers import ReaderRow

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get(
    "SYNDICATE_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)


def sink(port: int, delay: float, ready, count) -> None:
    """An SMTP server that takes every message, answering after ``delay`` seconds."""
    from aiosmtpd.controller import Controller

    class Slow:
        async def handle_DATA(self, server, session, envelope) -> str:
            if delay:
                await asyncio.sleep(delay)
            with count.get_lock():
                count.value += 1
            return "250 OK"

    controller = Controller(Slow(), hostname="127.0.0.1", port=port)
    controller.start()
    ready.set()
    signal.sigwait([signal.SIGTERM])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_file(folder: Path, url: str, port: int) -> Path:
    path = folder / "config.toml"
    path.write_text(
        f"""
[site]
base_url = "https://news.example.org"
articles = "{ROOT / "articles"}"
[state]
database = "{url}"
[email]
sender = "News <digest@news.example.org>"
[smtp]
url = "smtp://127.0.0.1:{port}"
pool_size = 4
rate = 100000
[web]
secret_key = "a bench key that is long enough to sign tokens"
[send]
engine = "procrastinate"
poll_seconds = 0.5
"""
    )
    return path


def one_run(messages: int, workers: int, delay: float) -> float:
    """Plan ``messages`` deliveries in a fresh schema and time ``workers`` processes sending
    them all; messages a second."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(POSTGRES)
    with admin.begin() as db:
        db.execute(sa.text(f"CREATE SCHEMA {schema}"))
    url = f"{POSTGRES}?options=-csearch_path%3D{schema}"
    port, ready, count = free_port(), multiprocessing.Event(), multiprocessing.Value("i", 0)
    server = multiprocessing.Process(target=sink, args=(port, delay, ready, count))
    server.start()
    ready.wait()
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = config_file(Path(folder), url, port)
            config = load_config(path)
            store = open_store(url)
            rows = [ReaderRow(f"r{n}@example.com", "en", ("cost",)) for n in range(messages)]
            store.import_subscribers(rows, status="active", consent_source="bench", now=NOW)
            send.send_due(config, NOW)
            command = [sys.executable, "-m", "syndicate", "--config", str(path), "worker"]
            start = time.perf_counter()
            procs = [subprocess.Popen(command, stderr=subprocess.DEVNULL) for _ in range(workers)]
            while count.value < messages:
                time.sleep(0.05)
            elapsed = time.perf_counter() - start
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait()
            store.close()
    finally:
        server.terminate()
        server.join()
        with admin.begin() as db:
            db.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
    return messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("messages", type=int, nargs="?", default=100_000)
    parser.add_argument("--workers", default="1,2,3,4")
    parser.add_argument("--delay-ms", type=float, default=5.0)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    base = None
    for workers in counts:
        rate = one_run(args.messages, workers, args.delay_ms / 1000)
        base = base or rate
        print(
            f"relay-bound ({args.delay_ms:g} ms): {workers} worker(s) {rate:,.0f} msg/s "
            f"({rate / base:.2f}x one worker)"
        )
    rate = one_run(args.messages, 1, 0.0)
    print(f"CPU-bound (no delay): 1 worker {rate:,.0f} msg/s")


if __name__ == "__main__":
    main()
