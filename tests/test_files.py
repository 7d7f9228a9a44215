"""Writing output files: whole or not at all, unchanged bytes left alone, a first writer's
file kept, leftovers of a killed writer swept. Real files in a temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from syndicate.files import Staging, staged_folder, sweep_leftovers, write_atomic, write_once


def test_write_atomic_writes_and_leaves_unchanged_bytes_alone(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "doc.xml"
    assert write_atomic(path, b"one")
    os.utime(path, ns=(1, 1))
    assert not write_atomic(path, b"one")
    assert path.stat().st_mtime_ns == 1  # a web server's Last-Modified stays
    assert write_atomic(path, b"two") and path.read_bytes() == b"two"
    assert [p.name for p in path.parent.iterdir()] == ["doc.xml"]


def test_a_failed_write_names_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "doc.xml").mkdir()  # a folder in the way
    with pytest.raises(OSError) as caught:
        write_atomic(tmp_path / "doc.xml", b"data")
    assert caught.value.filename == str(tmp_path / "doc.xml")
    assert [p.name for p in tmp_path.iterdir()] == ["doc.xml"]


def test_staged_documents_appear_together_at_commit_or_not_at_all(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_bytes(b"old a")
    staging = Staging(tmp_path)
    staging.add("a.xml", b"new a")
    staging.add("b.xml", b"new b")
    assert (tmp_path / "a.xml").read_bytes() == b"old a" and not (tmp_path / "b.xml").exists()
    staging.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.xml"]

    staging = Staging(tmp_path)
    staging.add("a.xml", b"old a")
    staging.add("b.xml", b"new b")
    assert staging.commit() == (["b.xml"], ["a.xml"])
    assert (tmp_path / "b.xml").read_bytes() == b"new b"


def test_write_once_keeps_the_first_writers_file(tmp_path: Path) -> None:
    path = tmp_path / "state" / "key"
    write_once(path, b"first\n")
    write_once(path, b"second\n")
    assert path.read_bytes() == b"first\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["key"]


def test_a_staged_folder_replaces_the_old_one_only_when_filled(tmp_path: Path) -> None:
    where = tmp_path / "model"
    where.mkdir()
    (where / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), staged_folder(where) as tmp:
        (tmp / "new.txt").write_text("new")
        raise RuntimeError("half-way")
    assert [p.name for p in where.iterdir()] == ["old.txt"]
    with staged_folder(where) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in where.iterdir()] == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_sweeping_removes_a_dead_writers_leftover_only(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = tmp_path / f".doc.xml.{gone.stdout.strip()}.abc.tmp"
    alive = tmp_path / f".doc.xml.{os.getpid()}.abc.tmp"
    dead.write_bytes(b"")
    alive.write_bytes(b"")
    sweep_leftovers(tmp_path)
    assert not dead.exists() and alive.exists()
