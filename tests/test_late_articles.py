"""Nothing written is left unsent: a late article, a revision marked for sending again, an
article ``site.publish_time`` holds back and a real reader who comes after the sample readers,
each sent through a real SMTP server and counted in the ledger."""

from __future__ import annotations

import mailbox
import re
import shutil
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path

from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import Config, parse_config
from syndicate.sending import issuing
from syndicate.sending.transports import SmtpMailer, open_mailer
from syndicate.state import Store, open_store
from tests.conftest import ARTICLES, write_articles

DAY1 = datetime(2025, 12, 15, 8, 30, tzinfo=UTC)  # 09:30 in Amsterdam, after publish_time


def _config(root: Path, database_url: str, port: int | None) -> Config:
    data: dict = {
        "site": {"articles": str(root / "articles"), "base_url": "https://news.example.org"},
        "state": {"database": database_url},
        "email": {"sender": "News <digest@news.example.org>"},
        "smtp": {"retry_backoff": 0},
    }
    if port is not None:
        data["smtp"]["url"] = f"smtp://127.0.0.1:{port}"
    return parse_config(data, root=root, source="(test)", env={})


def _text(message: EmailMessage) -> str:
    body = message.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


def _titles(message: EmailMessage) -> list[str]:
    text = _text(message)
    return [f"{name} {n}" for name, n in re.findall(r"/en/(\w+)-(\d+)/", text)]


def _send(config: Config, store: Store, now: datetime) -> issuing.SendReport:
    mailer = SmtpMailer.from_url(config.smtp.url) if config.smtp.url else open_mailer(config)
    return issuing.send_digests(config, now, mailer=mailer, store=store)


def test_a_late_article_goes_out_once_in_the_next_issue(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    folder = write_articles(tmp_path / "articles", 3, newest=date(2025, 12, 14))
    config = _config(tmp_path, database_url, port)
    store = open_store(config.database_url)
    store.subscribers.add_subscriber(
        "a@example.com", "en", ["cost"], status="active", consent_source="t", now=DAY1
    )

    first = _send(config, store, DAY1)
    assert first.sent == 1 and _titles(inbox.messages[0]) == ["piece 0", "piece 1", "piece 2"]

    # dated two weeks before the first issue, written after it: a backdated piece
    write_articles(folder, 1, newest=date(2025, 12, 1), slug="late")
    toml = tmp_path / "config.toml"
    toml.write_text(f'[site]\narticles = "articles"\n[state]\ndatabase = "{database_url}"\n')
    checked = CliRunner().invoke(main, ["check", "--summary", "--config", str(toml)])
    assert "en-cost: 1 article(s) wait for the next digest (1 reader(s))" in checked.stderr
    second = _send(config, store, DAY1 + timedelta(days=1))
    assert second.issues == [("en-cost", 1)] and second.sent == 1
    assert _titles(inbox.messages[1]) == ["late 0"]

    third = _send(config, store, DAY1 + timedelta(days=2))
    assert third.issues == [] and inbox.counts() == {"a@example.com": 2}
    carried = store.issues.carried("en", ["cost"])
    assert carried[("en", "late-0")][1] == date(2025, 12, 1)
    store.close()


def test_a_revision_goes_out_again_only_when_its_date_line_moves(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    folder = write_articles(tmp_path / "articles", 2, newest=date(2025, 12, 14))
    config = _config(tmp_path, database_url, port)
    store = open_store(config.database_url)
    store.subscribers.add_subscriber(
        "a@example.com", "en", ["cost"], status="active", consent_source="t", now=DAY1
    )
    assert _send(config, store, DAY1).sent == 1

    older = folder / "en-piece-0001.txt"  # dated December 13
    lines = older.read_text("utf-8").split("\n")
    takeaway = next(i for i, line in enumerate(lines) if line.startswith("For cost"))
    lines[takeaway] = lines[takeaway] + " - a corrected figure"
    older.write_text("\n".join(lines), "utf-8")
    # a correction that keeps its date line is not sent again
    assert _send(config, store, DAY1 + timedelta(days=3)).issues == []

    # dated December 14: later than the version sent, before the last issue's day
    lines[2] = "Updated December 14, 2025"
    older.write_text("\n".join(lines), "utf-8")
    again = _send(config, store, DAY1 + timedelta(days=5))
    assert again.issues == [("en-cost", 1)]
    body = _text(inbox.messages[1])
    assert _titles(inbox.messages[1]) == ["piece 1"] and "corrected" in body
    assert _send(config, store, DAY1 + timedelta(days=6)).issues == []
    assert inbox.counts() == {"a@example.com": 2}
    store.close()


def test_mails_wait_for_publish_time_like_the_feeds(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    write_articles(tmp_path / "articles", 2, newest=date(2025, 12, 15))
    config = _config(tmp_path, database_url, port)
    store = open_store(config.database_url)
    store.subscribers.add_subscriber(
        "a@example.com", "en", ["cost"], status="active", consent_source="t", now=DAY1
    )

    early = datetime(2025, 12, 15, 7, 0, tzinfo=UTC)  # 08:00 in Amsterdam: 09:00 not yet come
    assert _send(config, store, early).sent == 1
    assert _titles(inbox.messages[0]) == ["piece 1"]
    assert _send(config, store, DAY1).sent == 1
    assert _titles(inbox.messages[1]) == ["piece 0"]
    assert inbox.counts() == {"a@example.com": 2}
    store.close()


def test_a_real_reader_after_the_sample_readers_gets_the_first_digest(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    write_articles(tmp_path / "articles", 3, newest=date(2025, 12, 14))
    sampled = _config(tmp_path, database_url, None)
    store = open_store(sampled.database_url)
    assert issuing.add_sample_readers(sampled, store, DAY1) == 9
    first = _send(sampled, store, DAY1)
    assert first.sent == 3  # the English sample readers; the set has no other language
    maildir = tmp_path / "outbox" / "maildir" / "new"
    assert len(list(maildir.iterdir())) == 3

    # the publisher sets a server and imports the real list
    real = _config(tmp_path, database_url, port)
    for address, audiences in [
        ("r1@example.org", ["cost", "procurement"]),
        ("r2@example.org", ["architects"]),
    ]:
        store.subscribers.add_subscriber(
            address, "en", audiences, status="active", consent_source="csv", now=DAY1
        )
    later = _send(real, store, DAY1 + timedelta(hours=2))
    assert sorted(later.issues) == [("en-architects", 1), ("en-cost+procurement", 1)]
    assert inbox.counts() == {"r1@example.org": 1, "r2@example.org": 1}
    for message in inbox.messages:
        assert _titles(message) == ["piece 0", "piece 1", "piece 2"]

    assert _send(real, store, DAY1 + timedelta(days=1)).issues == []
    assert inbox.counts() == {"r1@example.org": 1, "r2@example.org": 1}
    assert len(list(maildir.iterdir())) == 3  # no sample reader got anything through the server
    store.close()


def test_run_once_then_an_imported_list_each_real_reader_once_in_the_maildir(
    tmp_path: Path,
) -> None:
    """The path of the issue as a publisher takes it: `run --once` on a machine with no mail
    server (sample readers, their digests in the Maildir), then the real list imported."""

    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def syndicate(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "syndicate", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert done.returncode == 0, done.stderr

    def recipients() -> list[str]:
        box = mailbox.Maildir(tmp_path / "outbox" / "maildir", create=False)
        return sorted(str(m["To"]) for m in box)

    shutil.copytree(ARTICLES, tmp_path / "articles")
    syndicate("run", "--once")
    assert len(recipients()) == 9  # the sample readers'
    (tmp_path / "readers.csv").write_text(
        "email,lang,audiences\nr1@example.org,en,cost;procurement\nr2@example.org,nl,architects\n"
    )
    syndicate("subscribers", "import", "readers.csv")
    syndicate("send")
    syndicate("send")
    real = [r for r in recipients() if not r.startswith("sample-")]
    assert real == ["r1@example.org", "r2@example.org"]  # each once, the group's first digest
