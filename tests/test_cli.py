"""The command line as a whole: exit statuses, one-line operator messages, shared options."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from syndicate.cli import main
from syndicate.errors import Exit
from tests.conftest import ARTICLES, ROOT, missing_real_part

UNREACHABLE = "postgresql+psycopg://postgres:secret@127.0.0.1:1/none"


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """Runs in an empty folder, so only what a test passes counts."""
    monkeypatch.chdir(tmp_path)
    for name in ("SYNDICATE_CONFIG", "SYNDICATE_DATABASE_URL", "SYNDICATE_SMTP_URL"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def invoke(runner: CliRunner, *args: str, **kwargs: object) -> Result:
    return runner.invoke(main, list(args), **kwargs)  # type: ignore[arg-type]


# -- exit statuses ------------------------------------------------------------------------------


def test_the_docs_document_every_exit_status_in_one_table() -> None:
    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    rows = re.findall(r"^\| `(\d)` \| ([^|]+) \|$", text, re.MULTILINE)
    assert [int(code) for code, _ in rows] == [int(status) for status in Exit]


def test_a_port_in_use_exits_4_not_the_lock_status(runner: CliRunner) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = invoke(runner, "serve", "--articles", str(ARTICLES), "--port", str(port))
    assert result.exit_code == Exit.IN_USE == 4
    assert result.stderr == (
        f"syndicate: 127.0.0.1:{port} is in use: another server listens there\n"
    )


# -- one command line ---------------------------------------------------------------------------


def test_config_and_debug_work_before_the_command(runner: CliRunner, tmp_path: Path) -> None:
    shutil.copytree(ARTICLES, tmp_path / "site" / "texts")
    (tmp_path / "site" / "config.toml").write_text('[site]\narticles = "texts"\n')
    before = invoke(runner, "--config", "site/config.toml", "check", "--summary")
    assert before.exit_code == 0, before.output
    assert before.stdout.startswith("3 article(s) ")
    after = invoke(runner, "check", "--summary", "--config", "site/config.toml")
    assert after.stdout == before.stdout
    # --debug before the command shows the traceback of what is otherwise one line
    assert invoke(runner, "build", "--articles", "nope").exit_code == Exit.USAGE
    debugged = invoke(runner, "--debug", "build", "--articles", "nope")
    assert debugged.exit_code == 1 and "article folder not found" in str(debugged.exception)


def test_h_is_help(runner: CliRunner) -> None:
    for args in (["-h"], ["build", "-h"], ["subscribers", "add", "-h"]):
        short, long = invoke(runner, *args), invoke(runner, *args[:-1], "--help")
        assert short.exit_code == 0 and short.stdout == long.stdout and "Usage:" in short.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["check"],
        ["build"],
        ["digest", "--lang", "en", "--audience", "cost"],
        ["serve"],
        ["send", "--dry-run"],
        ["run", "--once"],
    ],
)
def test_every_command_that_reads_articles_refuses_a_missing_folder(
    runner: CliRunner, tmp_path: Path, args: list[str]
) -> None:
    result = invoke(runner, *args, "--articles", str(tmp_path / "nope"))
    assert result.exit_code == Exit.USAGE, result.output
    assert len(result.stderr.splitlines()) == 1 and "nope" in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("command", [["send", "--dry-run"], ["digest", "--audience", "cost"]])
def test_an_unknown_language_is_refused_naming_the_known_ones(
    runner: CliRunner, command: list[str]
) -> None:
    result = invoke(runner, *command, "--lang", "fr", "--articles", str(ARTICLES))
    assert result.exit_code == Exit.USAGE
    assert "'fr' is not published (site.languages: en, nl, de)" in result.stderr


@pytest.mark.parametrize("command", [["send", "--dry-run"], ["digest", "--lang", "en"]])
def test_an_unknown_audience_is_refused_naming_the_known_ones(
    runner: CliRunner, command: list[str]
) -> None:
    result = invoke(runner, *command, "--audience", "bogus", "--articles", str(ARTICLES))
    assert result.exit_code == Exit.USAGE
    assert (
        "unknown audience 'bogus' (known: architects, cost, procurement, strategy, ecosystem)"
        in result.stderr
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["approve"], "give the ids of held issues, or --all"),
        (["approve", "1", "--all"], "give the ids of held issues, or --all"),
        (["resend"], "give the ids of uncertain deliveries, or --uncertain"),
        (["resend", "7", "--issue", "1"], "--issue goes with --uncertain"),
    ],
    ids=" ".join,
)
def test_a_send_command_that_names_nothing_or_too_much_is_refused(
    runner: CliRunner, args: list[str], message: str
) -> None:
    result = invoke(runner, "send", *args)
    assert result.exit_code == Exit.USAGE and result.stderr == f"syndicate: {message}\n"


def test_only_the_shared_options_go_between_send_and_its_command(runner: CliRunner) -> None:
    result = invoke(runner, "send", "--dry-run", "status")
    assert result.exit_code == Exit.USAGE
    assert "only --config and --debug go between send and status" in result.stderr
    result = invoke(runner, "send", "--config", "elsewhere.toml", "status")
    assert result.exit_code == Exit.USAGE and "elsewhere.toml" in result.stderr


def test_send_reads_the_articles_named_on_the_command_line(
    runner: CliRunner, tmp_path: Path
) -> None:
    assert invoke(runner, "subscribers", "add", "r@example.org", "--lang", "en",
                  "--audience", "cost").exit_code == 0  # fmt: skip
    nothing = invoke(runner, "send", "--dry-run", "--articles", str(tmp_path))
    assert "would issue" not in nothing.stderr
    found = invoke(runner, "send", "--dry-run", "--articles", str(ARTICLES))
    assert found.exit_code == 0, found.output
    assert "would issue en-cost to 1 reader(s)" in found.stderr


def test_messages_name_values_as_text(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "readers.csv").write_text("address,language\nr@example.org,en\n")
    result = invoke(runner, "subscribers", "import", "readers.csv")
    assert result.exit_code == 1
    assert "(missing: email, lang, audiences)" in result.stderr
    (tmp_path / "config.toml").write_text('[site]\nlanguages = ["en", "it", "xx"]\n')
    result = invoke(runner, "check")
    assert result.exit_code == Exit.USAGE
    assert "site.languages names it, xx but no [languages.<code>] profile" in result.stderr


# -- operator messages ---------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB file system of its own, to fill up or make read-only."""
    if os.geteuid() != 0:
        missing_real_part("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def feeds_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def revise(articles: Path) -> None:
    path = articles / "003_f25c1f93821d1bd3.txt"
    path.write_text(path.read_text("utf-8").replace("gauntlet", "glove", 1), "utf-8")


def test_a_full_disk_keeps_the_previous_feeds_byte_for_byte(
    runner: CliRunner, articles_dir: Path, small_disk: Path
) -> None:
    out = small_disk / "feeds"
    assert (
        invoke(runner, "build", "--articles", str(articles_dir), "--out", str(out)).exit_code == 0
    )
    before = feeds_of(out)
    filler = (small_disk / "filler").open("wb", buffering=0)
    with filler, pytest.raises(OSError, match="No space"):
        while True:
            filler.write(b"\0" * 4096)
            filler.flush()
    revise(articles_dir)
    result = invoke(runner, "build", "--articles", str(articles_dir), "--out", str(out))
    assert result.exit_code == 1
    assert re.fullmatch(
        r"syndicate: feeds unchanged: no space left on device writing disk/feeds/\S+\n",
        result.stderr,
    ), result.stderr
    assert feeds_of(out) == before  # and no temporary file is left either


def test_a_read_only_output_folder_is_one_line_and_changes_nothing(
    runner: CliRunner, articles_dir: Path, small_disk: Path
) -> None:
    out = small_disk / "feeds"
    assert (
        invoke(runner, "build", "--articles", str(articles_dir), "--out", str(out)).exit_code == 0
    )
    before = feeds_of(out)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    revise(articles_dir)
    result = invoke(runner, "build", "--articles", str(articles_dir), "--out", str(out))
    assert result.exit_code == 1
    assert re.fullmatch(
        r"syndicate: feeds unchanged: read-only file system writing disk/feeds/\S+\n",
        result.stderr,
    ), result.stderr
    assert feeds_of(out) == before
    debugged = invoke(
        runner, "--debug", "build", "--articles", str(articles_dir), "--out", str(out)
    )
    assert isinstance(debugged.exception.__cause__, OSError)  # the traceback, when asked for


def test_a_lost_database_is_one_line_and_the_feeds_stay(
    runner: CliRunner, articles_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "feeds"
    assert (
        invoke(runner, "build", "--articles", str(articles_dir), "--out", str(out)).exit_code == 0
    )
    before = feeds_of(out)
    revise(articles_dir)
    env = {"SYNDICATE_DATABASE_URL": UNREACHABLE}
    result = invoke(runner, "build", "--articles", str(articles_dir), "--out", str(out), env=env)
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "syndicate: feeds unchanged: state database postgresql+psycopg://postgres:***@127.0.0.1:1/"
    )
    assert len(result.stderr.splitlines()) == 1 and "secret" not in result.stderr
    assert feeds_of(out) == before
    # the scheduler's run, too: one line, before any work
    result = invoke(runner, "run", "--once", "--articles", str(articles_dir), env=env)
    assert result.exit_code == 1
    assert result.stderr.startswith("syndicate: state database postgresql+psycopg://postgres:***@")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "postgresql+psycopg://postgres@127.0.0.1:1/none",
            "PostgreSQL needs the postgres extra: pip install 'syndicate[postgres]'",
        ),
        ("postgresql+psycopg2://postgres@127.0.0.1:1/none", "the psycopg2 driver is not installed"),
    ],
)
def test_postgresql_without_its_driver_is_one_line_naming_the_extra(
    runner: CliRunner,
    articles_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    said: str,
) -> None:
    """A plain install has SQLite only: psycopg comes with syndicate[postgres]."""
    for driver in ("psycopg", "psycopg2"):
        monkeypatch.setitem(sys.modules, driver, None)  # an import of it fails, as uninstalled
    env = {"SYNDICATE_DATABASE_URL": url}
    out = str(tmp_path / "feeds")
    for command in (["build", "--articles", str(articles_dir), "--out", out], ["send"]):
        result = invoke(runner, *command, env=env)
        assert result.exit_code == Exit.USAGE, command
        assert result.stderr.startswith(f"syndicate: state.database: {said}"), result.stderr
        assert len(result.stderr.splitlines()) == 1


def test_build_publishes_every_other_article_past_broken_links(
    runner: CliRunner, articles_dir: Path, tmp_path: Path
) -> None:
    (articles_dir / "loop.txt").symlink_to(articles_dir / "loop.txt")
    (articles_dir / "dangling.txt").symlink_to(articles_dir / "gone.txt")
    out = tmp_path / "feeds"
    result = invoke(runner, "build", "--articles", str(articles_dir), "--out", str(out))
    assert result.exit_code == 1  # errors in the set: the files named below
    assert result.stderr.splitlines() == [
        f"{articles_dir / 'dangling.txt'}: error: symbolic link to "
        f"{str(articles_dir / 'gone.txt')!r}, which does not exist: not read",
        f"{articles_dir / 'loop.txt'}: error: symbolic link loop: not read",
    ]
    assert "(de: 1, en: 1, nl: 1)" in result.stdout
    assert all((out / f"{lang}.atom.xml").is_file() for lang in ("en", "nl", "de"))
    # a new broken link is news to the next build, which would otherwise skip as unchanged
    (articles_dir / "also-gone.txt").symlink_to(articles_dir / "gone.txt")
    again = invoke(runner, "build", "--articles", str(articles_dir), "--out", str(out))
    assert "also-gone.txt" in again.stderr
