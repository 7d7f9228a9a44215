"""Two ``syndicate send`` processes at once on PostgreSQL, at a real SMTP server: each says
what is really left when it ends, not what it found pending at its start less what it sent."""

from __future__ import annotations

import subprocess
import sys
from datetime import date
from pathlib import Path

from syndicate.state import open_store
from tests.conftest import ROOT, write_articles
from tests.sending import NOW
from tests.test_send import write_config


def _send(path: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "syndicate", "send", "--config", str(path)]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_two_sends_that_finish_everything_together_each_leave_nothing(
    tmp_path: Path, postgres_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    articles = write_articles(tmp_path / "articles", 2, newest=date(2025, 12, 14))
    # one connection, no retry: the first run's order is the readers' order
    smtp = ["pool_size = 1", "retries = 0"]
    path = write_config(tmp_path, postgres_url, port, articles, rest=smtp)
    store = open_store(postgres_url)
    readers = [f"reader{n}@example.com" for n in range(20)]
    for email in readers:
        store.subscribers.add_subscriber(
            email, "en", ["cost"], status="active", consent_source="t", now=NOW
        )
    store.close()
    # The first run's reader0 is refused for now (given back to whoever comes next); its
    # reader1 is taken, and the reply kept back while the second run sends everyone else.
    inbox.script[("data", "reader0@example.com")] = ["451 4.3.0 try again later"]
    inbox.script[("data", "reader1@example.com")] = ["HOLD"]
    first = _send(path)
    try:
        assert inbox.holding.wait(30), first.stderr
        second = _send(path)
        _, second_err = second.communicate(timeout=60)
    finally:
        inbox.release.set()
    _, first_err = first.communicate(timeout=60)

    assert second.returncode == 0, second_err
    assert "sent 19, failed 0, uncertain 0, skipped 0, left for the next run 0" in second_err
    # the first run deferred reader0, and the second sent it: nothing is left
    assert first.returncode == 0, first_err
    assert "sent 1, failed 0, uncertain 0, skipped 0, left for the next run 0" in first_err
    assert "issue 1 (en-cost) finished: 20 sent" in first_err
    assert inbox.counts() == dict.fromkeys(readers, 1)
