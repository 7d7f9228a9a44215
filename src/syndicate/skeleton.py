"""`syndicate init`: a new site's folder, made of the files this project ships: its commented
config.toml and one of its seed articles, so that the first run has something to publish.

Wheels carry those files in ``syndicate/skeleton/``; a checkout has them at its top, where the
same relative paths lead to them.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from .errors import SyndicateError
from .files import file_mode, write_once

FILES = {
    "config.toml": "config.toml",
    "articles/003_f25c1f93821d1bd3.txt": "articles/example.txt",
}
"""Shipped file → where a new site gets it."""


def _shipped() -> Path:
    packaged = Path(__file__).with_name("skeleton")
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2]


def in_the_way(folder: Path) -> list[str]:
    """What keeps ``create_site`` from starting a site in ``folder`` (nothing: it can)."""
    articles = folder / "articles"
    paths = [folder / target for target in FILES.values()]
    taken = [str(path) for path in paths if path.exists() and path.parent != articles]
    if articles.is_dir() and any(articles.iterdir()):
        taken.append(f"{articles}/ (not empty)")
    return taken


def create_site(folder: Path) -> list[Path]:
    """Write a new site's files into ``folder`` (created if need be); the paths written.

    Raises SyndicateError, with nothing written, when one of them exists already or the
    folder has articles of its own: init starts a site, it never changes one.
    """
    shipped = _shipped()
    files = {folder / target: (shipped / source).read_bytes() for source, target in FILES.items()}
    if taken := in_the_way(folder):
        raise SyndicateError(
            f"{', '.join(taken)}: already there; init only starts a new site (nothing written)"
        )
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_once(path, data, mode=file_mode(path))  # never over a file that appeared meanwhile
    return list(files)


def schedule_lines(site: Path, command: str) -> str:
    """How to run the site at ``site`` (absolute) on a schedule with ``command`` (the
    syndicate it was made with, quoted for a shell): the crontab line, or the lines of the
    systemd units (deploy/ in the source) that name the folder and the program."""
    folder = shlex.quote(str(site))
    return (
        "  cron (crontab -e), every 15 minutes:\n"
        f"    */15 * * * * cd {folder} && mkdir -p state && {command} run --once --log-json"
        " 2>>state/syndicate.log\n"
        "  or systemd (deploy/syndicate.service, deploy/syndicate-worker@.service):\n"
        f"    WorkingDirectory={site}\n"
        f"    ExecStart={command} run --log-json\n"
        f"    ExecStart={command} worker --concurrency 2    (the worker unit)"
    )
