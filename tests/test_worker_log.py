"""What ``syndicate worker`` logs, as ``run`` does: its start, each batch (issue, sent, failed,
uncertain, rate), the relay's slow-downs and its stop; every line a JSON object with
``--log-json``. A real worker process, PostgreSQL and a real SMTP server."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from syndicate.config import load_config
from syndicate.sending import issuing
from syndicate.sending.engine import dispatcher
from syndicate.state import Store, open_store
from syndicate.subscribers import ReaderRow
from tests.conftest import ARTICLES, ROOT
from tests.sending import NOW

READERS = 30
SLOW_DOWN = "451 4.7.1 too fast, slow down"


def _config(root: Path, url: str, port: int) -> Path:
    path = root / "config.toml"
    path.write_text(
        f"""
[site]
base_url = "https://news.example.org"
articles = "{ARTICLES}"
[state]
database = "{url}"
[email]
sender = "News <digest@news.example.org>"
[smtp]
url = "smtp://127.0.0.1:{port}"
pool_size = 2
rate = 10000
retry_backoff = 0
[send]
engine = "procrastinate"
batch_size = 10
micro_batch = 5
poll_seconds = 0.5
heartbeat_seconds = 0.5
"""
    )
    return path


def _done(store: Store) -> bool:
    """Every delivery sent and no send job waiting or running (each batch logged)."""
    statuses = {status for (_, _, status), n in store.ledger.delivery_counts().items() if n}
    with store.engine.connect() as db:
        query = (
            "SELECT count(*) FROM procrastinate_jobs"
            " WHERE task_name = :task AND status IN ('todo', 'doing')"
        )
        busy = db.execute(sa.text(query), {"task": "syndicate.send_batch"}).scalar_one()
    return statuses == {"sent"} and not busy


def _work(tmp_path: Path, url: str, port: int, inbox, *flags: str) -> list[str]:
    """Plan an issue of READERS deliveries, let one worker send it (the relay asking to slow
    down once), stop it; its stderr lines."""
    path = _config(tmp_path, url, port)
    config = load_config(path)
    store = open_store(url)
    rows = [ReaderRow(f"reader{n}@example.com", "en", ("cost",)) for n in range(READERS)]
    store.subscribers.import_subscribers(rows, status="active", consent_source="test", now=NOW)
    assert (
        issuing.send_due(config, NOW, dispatch=dispatcher(config)).left == READERS
    )  # planned: the worker sends
    inbox.script[("data", "reader3@example.com")] = [SLOW_DOWN]
    command = [sys.executable, "-m", "syndicate", "--config", str(path), "worker", *flags]
    worker = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 60
        while not _done(store) and worker.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
        store.close()
    assert worker.returncode == 0, err.decode()
    assert out == b""
    assert inbox.counts() == {f"reader{n}@example.com": 1 for n in range(READERS)}
    return err.decode().splitlines()


@pytest.mark.usefixtures("scale_extra")
def test_a_worker_logs_its_start_batches_slow_downs_and_stop_as_json(
    tmp_path: Path, postgres_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    lines = _work(tmp_path, postgres_url, port, inbox, "--log-json")
    records = [json.loads(line) for line in lines]  # every line, one object
    started, *middle, stopped = records
    assert started["level"] == "info" and started["worker"] == "started"
    assert started["concurrency"] == 2 and started["pool_size"] == 2
    assert (started["relay"], started["rate"]) == (f"127.0.0.1:{port}", 10_000)

    batches = [r for r in middle if r.get("worker") == "batch"]
    assert {(r["issue"], r["outcome"]) for r in batches} == {(1, "ok")}
    assert sorted(r["batch"] for r in batches) == [0, 1, 2]
    assert sum(r["counts"]["sent"] for r in batches) == READERS
    for r in batches:
        assert r["counts"] == {**r["counts"], "failed": 0, "uncertain": 0, "left": 0}
        assert r["rate"] > 0 and r["duration"] >= 0 and r["start"]
    [slowed] = [r for r in middle if r.get("worker") == "slow-down"]
    assert slowed["level"] == "warning" and slowed["reply"].startswith(SLOW_DOWN)
    assert (slowed["relay"], slowed["rate"]) == (f"127.0.0.1:{port}", 7_000)

    assert stopped["worker"] == "stopped" and stopped["batches"] == 3
    assert stopped["counts"] == {"sent": READERS, "failed": 0, "uncertain": 0, "skipped": 0}


@pytest.mark.usefixtures("scale_extra")
def test_a_worker_logs_lines_as_run_does(tmp_path: Path, postgres_url: str, smtp_server) -> None:
    inbox, port = smtp_server
    lines = _work(tmp_path, postgres_url, port, inbox)
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert re.fullmatch(
        rf"{stamp} INFO worker=started pid=\d+ concurrency=2 pool_size=2 "
        rf"relay=127\.0\.0\.1:{port} rate=10000/s",
        lines[0],
    ), lines[0]
    batch = (
        rf"{stamp} INFO worker=batch issue=1 batch=\d outcome=ok start=\S+ duration=[\d.]+s "
        r"sent=\d+ failed=0 uncertain=0 skipped=0 left=0 rate=[\d.]+/s"
    )
    assert len([line for line in lines if re.fullmatch(batch, line)]) == 3, lines
    slow = rf"{stamp} WARNING worker=slow-down relay=127\.0\.0\.1:{port} rate=7000/s reply='451 "
    assert len([line for line in lines if re.match(slow, line)]) == 1, lines
    assert re.fullmatch(
        rf"{stamp} INFO worker=stopped pid=\d+ batches=3 duration=[\d.]+s "
        rf"sent={READERS} failed=0 uncertain=0 skipped=0",
        lines[-1],
    ), lines[-1]
