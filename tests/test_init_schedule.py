"""`syndicate init` prints the cron line and the systemd lines for the syndicate it was run
as; the cron line, run as cron runs it (another folder, a bare PATH), publishes the site."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
BARE = {"PATH": "/usr/bin:/bin"}


def _init(folder: Path, program: list[str], path: str) -> str:
    made = subprocess.run(
        [*program, "init", "site"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": path, "HOME": str(folder)},
    )
    assert made.returncode == 0, made.stderr
    return made.stdout


def _cron_command(stdout: str) -> str:
    line = re.search(r"^    \*/15 \* \* \* \* (.+)$", stdout, re.M)
    assert line, stdout
    return line[1]


def test_the_printed_cron_line_runs_the_site_from_anywhere(tmp_path: Path) -> None:
    stdout = _init(tmp_path, [str(BIN / "syndicate")], BARE["PATH"])
    command = _cron_command(stdout)
    site = tmp_path / "site"
    assert command.startswith(f"cd {site} && mkdir -p state && {BIN / 'syndicate'} run --once")
    assert f"WorkingDirectory={site}" in stdout
    assert f"ExecStart={BIN / 'syndicate'} run --log-json" in stdout
    ran = subprocess.run(
        ["/bin/sh", "-c", command], cwd="/", env={**BARE, "HOME": str(tmp_path)}, timeout=300
    )
    assert ran.returncode == 0, (site / "state" / "syndicate.log").read_text()
    assert (site / "feeds" / "en.atom.xml").is_file()
    assert (site / "state" / "syndicate.log").is_file()  # where the cron line logs


def test_a_bare_name_is_made_absolute_and_python_m_names_its_python(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    by_name = _init(tmp_path / "a", ["syndicate"], f"{BIN}:/usr/bin:/bin")
    assert f"&& {BIN / 'syndicate'} run --once" in _cron_command(by_name)
    as_module = _init(tmp_path / "b", [sys.executable, "-m", "syndicate"], BARE["PATH"])
    assert f"&& {sys.executable} -m syndicate run --once" in _cron_command(as_module)
