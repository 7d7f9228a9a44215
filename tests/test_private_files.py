"""Files that hold readers (the state database, exports, messages) are their owner's alone
under a umask that makes everything else world-readable, and ``check`` names one that is not.
A fresh site, run through the real commands."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.state import open_store


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A new site made by ``init``, as the current folder, under umask 022 (the usual one,
    which leaves a file made the default way readable by every user)."""
    for name in [name for name in os.environ if name.startswith("SYNDICATE_")]:
        monkeypatch.delenv(name)
    old = os.umask(0o022)
    try:
        assert CliRunner().invoke(main, ["init", str(tmp_path / "site")]).exit_code == 0
        monkeypatch.chdir(tmp_path / "site")
        yield tmp_path / "site"
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_a_fresh_sites_readers_are_its_owners_alone(site: Path) -> None:
    runner = CliRunner()
    ran = runner.invoke(main, ["run", "--once"])
    assert ran.exit_code == 0, ran.output
    exported = runner.invoke(main, ["subscribers", "export", "readers.csv"])
    assert exported.exit_code == 0, exported.output

    assert mode(site / "state") == 0o700
    assert mode(site / "state" / "syndicate.db") == 0o600
    assert mode(site / "state" / "secret_key") == 0o600
    assert mode(site / "readers.csv") == 0o600
    messages = list((site / "outbox" / "maildir" / "new").iterdir())
    assert messages and {mode(m) for m in messages} == {0o600}
    previews = site / "outbox" / "preview"
    assert {mode(p) for p in previews.glob("*.eml")} == {0o600}
    # what the site publishes stays readable by all
    assert {mode(p) for p in previews.glob("*.html")} == {0o644}
    assert mode(site / "feeds" / "en.atom.xml") == 0o644

    # SQLite's own files beside the database, while a connection has them open
    store = open_store(f"sqlite:///{site}/state/syndicate.db")
    try:
        with store.engine.begin() as db:
            db.execute(sa.text("CREATE TABLE scratch (n INTEGER)"))
        sidecars = [site / "state" / f"syndicate.db{end}" for end in ("-wal", "-shm")]
        assert {mode(p) for p in sidecars} == {0o600}
    finally:
        store.close()


def test_an_export_written_before_is_made_private_even_when_unchanged(site: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["subscribers", "export", "readers.csv"]).exit_code == 0
    os.chmod("readers.csv", 0o644)  # as an older version left it
    assert runner.invoke(main, ["subscribers", "export", "readers.csv"]).exit_code == 0
    assert mode(site / "readers.csv") == 0o600


def test_check_names_a_database_others_can_read_and_the_fix(site: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["subscribers", "list"]).exit_code == 0  # makes the database
    database = site / "state" / "syndicate.db"
    os.chmod(database, 0o644)  # as an older version left it

    checked = runner.invoke(main, ["check", "--summary"])
    assert checked.exit_code == 0, checked.output  # a warning
    [line] = [line for line in checked.stderr.splitlines() if "syndicate.db" in line]
    assert line.startswith("state/syndicate.db: warning: ")
    assert line.endswith("chmod 600 state/syndicate.db")

    os.chmod(database, 0o600)
    checked = runner.invoke(main, ["check", "--summary"])
    assert "syndicate.db" not in checked.stderr
