"""`syndicate run --once` on a fresh folder: what the README's run command promises."""

from __future__ import annotations

import json
import mailbox
import shutil
import subprocess
import sys
from email import message_from_bytes, policy
from pathlib import Path

from syndicate.state import FileLock
from tests.conftest import ARTICLES, ROOT

ENV = {"PATH": "/usr/bin:/bin"}


def run_once(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syndicate", "run", "--once"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**ENV, "HOME": str(folder)},
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


def dutch_articles(folder: Path, count: int) -> None:
    """``count`` Dutch articles: more than a digest lists (the rest is counted, never refused)."""
    seed = (ARTICLES / "000_155b2b46303fac14.txt").read_text("utf-8")
    slug = next(line for line in seed.splitlines() if "Primair" in line).rpartition(" ")[2]
    for number in range(count):
        (folder / f"nl-{number:02d}.txt").write_text(seed.replace(slug, f"{slug}-{number}"))


def test_a_failing_step_leaves_the_others_done_and_exits_1_naming_it(tmp_path: Path) -> None:
    shutil.copytree(ARTICLES, tmp_path / "articles")
    dutch_articles(tmp_path / "articles", 20)
    # A Dutch digest of 21 new articles is capped, never refused for its size: what fails here
    # is one preview that cannot be written (a folder where its file goes).
    variant = "nl-architects+cost+ecosystem+procurement+strategy"
    (tmp_path / "outbox" / "preview" / f"{variant}.html").mkdir(parents=True)
    result = run_once(tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    # the feeds are built, every language's
    assert any("job=feeds outcome=ok" in line for line in lines), result.stderr
    assert (tmp_path / "feeds" / "nl.atom.xml").read_bytes().count(b"<entry>") == 21
    # the Dutch preview with every audience fails: a warning names it, and the other variants
    # are still written
    [warned] = [line for line in lines if " WARNING " in line]
    assert f"WARNING preview {variant} not rendered: " in warned and "is a directory" in warned
    assert (tmp_path / "outbox" / "preview" / "nl-cost.eml").is_file()
    assert not (tmp_path / "outbox" / "preview" / f"{variant}.eml").exists()
    # the sample readers still get theirs
    assert len(mailbox.Maildir(tmp_path / "outbox" / "maildir", create=False)) == 9
    assert "run --once partial; failed: previews (feeds in " in lines[-1]
    assert "Traceback" not in result.stderr


def test_run_once_checks_the_lock_before_any_work(tmp_path: Path) -> None:
    shutil.copytree(ARTICLES, tmp_path / "articles")
    lock = FileLock(tmp_path / "state" / "syndicate.db.scheduler.lock")
    assert lock.acquire()
    try:
        result = run_once(tmp_path)
    finally:
        lock.release()
    assert result.returncode == 3
    assert result.stderr.startswith("syndicate: another scheduler is active: pid ")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "feeds").exists() and not (tmp_path / "outbox").exists()


def test_a_folder_without_articles_is_one_line_with_the_hint_and_no_database(
    tmp_path: Path,
) -> None:
    result = run_once(tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        f"syndicate: no article folder {tmp_path / 'articles'}: nothing to publish "
        "(to start a site here: syndicate init)\n"
    )
    (tmp_path / "articles").mkdir()
    (tmp_path / "articles" / ".draft.txt").write_text("hidden")
    result = run_once(tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"syndicate: no articles in {tmp_path / 'articles'}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["articles"]
    # init would refuse this folder (its articles/ is not empty): the hint does not name it
    assert result.stderr.endswith(": nothing to publish (put article files in it)\n")
    (tmp_path / "articles" / ".draft.txt").unlink()
    (tmp_path / "config.toml").write_text("", "utf-8")
    result = run_once(tmp_path)
    assert result.returncode == 2 and "syndicate init" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["articles", "config.toml"]


def test_without_log_json_a_short_summary_not_the_table(tmp_path: Path) -> None:
    shutil.copytree(ARTICLES, tmp_path / "articles")
    result = run_once(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "│" not in result.stderr and "Trainium3" not in result.stderr
    lines = result.stderr.splitlines()
    closed = [line for line in lines if ") finished: 1 sent, 0 failed" in line]
    assert len(closed) == 9  # one line per issue closed, one issue per sample reader
    assert len(lines) - len(closed) <= 8
    assert "run --once ok (feeds in " in result.stderr.splitlines()[-1]


def test_the_documented_cron_line_runs_as_written(tmp_path: Path) -> None:
    """The line from deploy/syndicate.cron, in a fresh site folder: stdout stays empty
    (cron would mail it) and the log holds one JSON object per line."""
    line = next(
        line
        for line in (ROOT / "deploy" / "syndicate.cron").read_text("utf-8").splitlines()
        if line.startswith("*/15")
    )
    assert line in (ROOT / "docs" / "operations.md").read_text("utf-8")
    command = line.split(None, 5)[5].replace("/srv/syndicate", str(tmp_path))
    shutil.copytree(ARTICLES, tmp_path / "articles")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "syndicate").symlink_to(Path(sys.executable).parent / "syndicate")
    for _ in range(2):
        result = subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, timeout=300, env=ENV
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == "" and result.stderr == ""
    lines = (tmp_path / "state" / "syndicate.log").read_text("utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["job"] for r in records if "job" in r] == [
        "feeds", "previews", "samples", "feeds", "previews"
    ]  # fmt: skip
    assert [r["outcome"] for r in records if r.get("run") == "once"] == ["ok", "ok"]


def test_log_json_writes_errors_as_json_too(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "syndicate", "run", "--once", "--log-json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=ENV,
    )  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    [record] = [json.loads(line) for line in result.stderr.splitlines()]
    assert record["level"] == "error" and "syndicate init" in record["message"]


ITALIAN = """
[site]
languages = ["en", "nl", "de", "it"]

[languages.it]
name = "Italiano"
date_line = ["Aggiornato il"]
takeaways = ["Punti chiave"]
references = ["Riferimenti"]
audiences = { cost = ["Per i team di ottimizzazione dei costi"] }
"""


def test_a_language_without_a_mail_catalog_still_gets_its_feeds(tmp_path: Path) -> None:
    shutil.copytree(ARTICLES, tmp_path / "articles")
    english = (ARTICLES / "003_f25c1f93821d1bd3.txt").read_text("utf-8")
    italian = (
        english.replace("Updated December 11, 2025", "Aggiornato il 11 dicembre 2025")
        .replace("\nKey takeaways\n", "\nPunti chiave\n")
        .replace("For cost optimization teams:", "Per i team di ottimizzazione dei costi:")
        .replace("\nReferences\n", "\nRiferimenti\n")
    )
    (tmp_path / "articles" / "it.txt").write_text(italian, "utf-8")
    (tmp_path / "config.toml").write_text(ITALIAN, "utf-8")
    result = run_once(tmp_path)
    assert result.returncode == 1
    assert b"<entry>" in (tmp_path / "feeds" / "it.atom.xml").read_bytes()
    lines = result.stderr.splitlines()
    warned = [line for line in lines if " WARNING " in line]
    assert any("WARNING preview it-cost not rendered: cannot render 'it'" in w for w in warned)
    assert any("WARNING digest it-cost+procurement not rendered: " in w for w in warned)
    # every other language's sample reader got theirs
    assert len(mailbox.Maildir(tmp_path / "outbox" / "maildir", create=False)) == 9
    assert "run --once partial; failed: previews, samples (" in lines[-1]
