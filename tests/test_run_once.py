"""`syndicate run --once` on a fresh folder: what the README's run command promises."""

from __future__ import annotations

import mailbox
import shutil
import subprocess
import sys
from email import message_from_bytes, policy
from pathlib import Path

from tests.conftest import ARTICLES


def run_once(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syndicate", "run", "--once"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder)},
    )


def test_a_first_run_with_no_server_shows_the_whole_path_and_a_second_adds_nothing(
    tmp_path: Path,
) -> None:
    shutil.copytree(ARTICLES, tmp_path / "articles")
    first = run_once(tmp_path)
    assert first.returncode == 0, first.stderr
    for lang in ("en", "nl", "de"):
        for suffix in ("atom.xml", "rss.xml", "json"):
            assert (tmp_path / "feeds" / f"{lang}.{suffix}").is_file()
    assert (tmp_path / "outbox" / "preview" / "nl-cost.eml").is_file()
    box = mailbox.Maildir(tmp_path / "outbox" / "maildir", create=False)
    received = [message_from_bytes(m.as_bytes(), policy=policy.default) for m in box]
    assert len(received) == 9  # three sample readers per language, one email each
    assert {m["To"] for m in received} == {
        f"sample-{lang}-{audiences}@example.com"
        for lang in ("en", "nl", "de")
        for audiences in ("architects", "cost-procurement", "strategy-ecosystem")
    }
    assert all(m["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click" for m in received)

    second = run_once(tmp_path)
    assert second.returncode == 0, second.stderr
    assert len(list(mailbox.Maildir(tmp_path / "outbox" / "maildir", create=False))) == 9
