"""What starting the command line loads: click and the package's light modules, no library a
command needs only once it runs. The time it takes is bench/startup.py's to measure."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from syndicate.cli import main

# Every runtime dependency but click and rich (what the CLI is made of), and the extras'.
HEAVY = {
    "alembic",
    "apscheduler",
    "babel",
    "cryptography",
    "dkim",
    "dns",
    "dnslib",
    "email_validator",
    "feedgen",
    "flufl",
    "jinja2",
    "lxml",
    "mjml",
    "multipart",
    "numpy",
    "procrastinate",
    "publicsuffixlist",
    "psycopg",
    "py3langid",
    "pydantic",
    "python_multipart",
    "spf",
    "sqlalchemy",
    "starlette",
    "uvicorn",
}
COMMANDS = {
    "build",
    "check",
    "digest",
    "doctor",
    "init",
    "run",
    "schedule",
    "send",
    "serve",
    "worker",
}
GROUPS = {"bounces", "locale", "subscribers"}

# Runs the command line as its entry point does, then names the top-level packages loaded.
PROBE = """
import json, sys
from syndicate.cli import main
if sys.argv[1:] != ["--import-only"]:
    try:
        main(sys.argv[1:], prog_name="syndicate")
    except SystemExit:
        pass
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})), file=sys.stderr)
"""


def probe(*args: str) -> tuple[str, set[str]]:
    """Help text on stdout, and the top-level packages a fresh process loaded for ``args``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    return done.stdout, set(json.loads(done.stderr.splitlines()[-1]))


@pytest.mark.parametrize(
    "args",
    [("--import-only",), ("--help",), ("schedule", "--help"), ("subscribers", "add", "--help")],
    ids=" ".join,
)
def test_starting_the_cli_loads_no_heavy_library(args: tuple[str, ...]) -> None:
    _, loaded = probe(*args)
    assert "click" in loaded  # the probe saw the imports
    assert sorted(loaded & HEAVY) == []


def test_help_lists_every_command() -> None:
    text, _ = probe("--help")
    listed = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0]  # the epilog follows
    names = {line.split()[0] for line in listed.splitlines()}
    assert names == set(main.commands)
    assert names >= COMMANDS | GROUPS


def test_loading_the_config_loads_no_library_only_a_webhook_needs() -> None:
    """Every command loads the config: the bounce webhooks' crypto and the bounce reader are
    loaded by what uses them, and by a SendGrid key's check only where one is set."""
    code = (
        "import json, sys; from syndicate.config import load_config; load_config(None, env={}); "
        "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})), file=sys.stderr); "
        "print(json.dumps(sorted(n for n in sys.modules if n.startswith('syndicate.bounces'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stderr.splitlines()[-1]))
    assert "pydantic" in loaded  # the probe saw the config load
    assert sorted(loaded & {"cryptography", "flufl"}) == []
    assert json.loads(done.stdout) == []
