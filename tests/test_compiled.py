"""The compiled modules: the ones pyproject.toml lists run compiled after an install, and one
edited since runs from its source, saying so once, so that an edit needs no reinstall."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import syndicate
from syndicate import compiled
from tests.conftest import ROOT, missing_real_part

with (ROOT / "pyproject.toml").open("rb") as _file:
    COMPILED: list[str] = tomllib.load(_file)["tool"]["syndicate"]["compiled"]
PACKAGE = Path(syndicate.__file__).parent


def _runs_compiled(name: str) -> bool:
    module = importlib.import_module(f"syndicate.{name}")
    return module.__file__ is not None and not module.__file__.endswith(".py")


@pytest.mark.parametrize("name", COMPILED)
def test_the_listed_modules_run_compiled(name: str) -> None:
    """A compile error leaves a module Python, which works but slower: it must not go unseen."""
    why = compiled.as_python(PACKAGE, os.environ).get(name)
    if why is not None:
        missing_real_part(f"syndicate.{name} runs as Python: {why} (make test compiles it)")
    if not _runs_compiled(name):
        missing_real_part(
            f"syndicate/{name}.py runs as pure Python: the install did not compile it "
            "(no C compiler, SYNDICATE_PURE_PYTHON=1, or a mypyc error in the install log)"
        )


def test_only_the_listed_modules_are_compiled() -> None:
    """A module taken off the list loses its extension at the next install."""
    extensions = {
        (*path.relative_to(PACKAGE).parts[:-1], path.name.split(".")[0])
        for suffix in ("so", "pyd")
        for path in PACKAGE.rglob(f"*.{suffix}")
    }
    names = {".".join(parts).removesuffix("__mypyc") for parts in extensions}
    assert names <= set(COMPILED)


def _import_in(copy: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=copy,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy), **env},
        capture_output=True,
        text=True,
        check=True,
    )


@pytest.fixture
def installed_copy(tmp_path: Path) -> Path:
    """A copy of the installed package, extensions and record included, to edit."""
    if not (PACKAGE / compiled.RECORD).exists():
        missing_real_part("nothing is compiled in this install (no C compiler?)")
    shutil.copytree(PACKAGE, tmp_path / "syndicate", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_an_edited_module_runs_from_its_source_and_says_so_once(installed_copy: Path) -> None:
    name = COMPILED[0]
    source = compiled.source_of(installed_copy / "syndicate", name)
    source.write_text(source.read_text("utf-8") + "\nEDITED = True\n", "utf-8")
    code = (
        f"import syndicate.{name} as m, importlib; importlib.import_module('syndicate.{name}');"
        f" print(m.__file__, m.EDITED)"
    )
    done = _import_in(installed_copy, code)
    assert done.stdout.split() == [str(source), "True"]
    assert done.stderr.count("changed since compiled, running as Python") == 1
    assert f"syndicate.{name}" in done.stderr
    again = _import_in(installed_copy, code)  # the next command, a test's subprocess
    assert again.stdout == done.stdout and again.stderr == ""
    source.write_text(source.read_text("utf-8") + "\nEDITED = 2\n", "utf-8")
    assert "changed since compiled" in _import_in(installed_copy, code).stderr  # a new edit


def test_an_unchanged_module_runs_compiled_and_quietly(installed_copy: Path) -> None:
    name = COMPILED[0]
    if compiled.as_python(PACKAGE, {}).get(name):
        pytest.skip(f"syndicate.{name} changed since the install: none is unchanged here")
    done = _import_in(installed_copy, f"import syndicate.{name} as m; print(m.__file__)")
    assert not done.stdout.strip().endswith(".py")
    assert done.stderr == ""


def test_pure_python_on_request_is_quiet(installed_copy: Path) -> None:
    """SYNDICATE_PURE_PYTHON=1 (what the benchmarks compare with) runs every listed module
    from its source, without a warning: it is no mistake."""
    code = "; ".join(
        f"import syndicate.{n} as m{i}; print(m{i}.__file__)" for i, n in enumerate(COMPILED)
    )
    done = _import_in(installed_copy, code, SYNDICATE_PURE_PYTHON="1")
    assert all(line.endswith(".py") for line in done.stdout.split())
    assert done.stderr == ""


def test_a_record_from_before_packages_were_compiled_still_counts(tmp_path: Path) -> None:
    """An install made before the reader was a package recorded "feeds.py": its extension,
    still beside the source until the next install, must not run an edited feeds.py."""
    (tmp_path / "feeds.py").write_text("EDITED = True\n")
    (tmp_path / "language.py").write_text("SAME = True\n")
    same = hashlib.sha256(b"SAME = True\n").hexdigest()
    record = {"feeds.py": "0" * 64, "language.py": same}
    (tmp_path / compiled.RECORD).write_text(json.dumps(record))
    assert compiled.as_python(tmp_path, {}) == {"feeds": "changed since it was compiled"}
