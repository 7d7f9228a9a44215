"""``init``: a new site's folder."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from .shared import operator_errors


@click.command()
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), default=".")
def init(folder: Path) -> None:
    """Start a site in FOLDER (default: here): a commented config.toml and an example article."""
    from ..skeleton import create_site, schedule_lines

    with operator_errors():
        written = create_site(folder)
    for path in written:
        click.echo(f"wrote {path}")
    enter = f"  cd {folder}\n" if folder != Path(".") else ""
    click.echo(
        f"\nNext:\n{enter}"
        "  edit config.toml: site.title, site.description, site.base_url, site.languages\n"
        "  put your articles in articles/ (example.txt shows the format); syndicate check\n"
        "  syndicate run --once     build the feeds and render the digests once\n"
        "  syndicate serve --dev    see the site and its feeds in a browser\n"
        "\nOn a schedule, with this syndicate:\n"
        + schedule_lines(folder.absolute(), this_syndicate())
    )


def this_syndicate() -> str:
    """The command that runs the syndicate running now, for a shell: the program named on its
    command line made absolute (found on PATH when it was named bare), or this Python with
    ``-m syndicate``; so a cron line works without the PATH or the folder it was made in."""
    program = sys.argv[0]
    if Path(program).name == "syndicate":
        found = program if os.sep in program else shutil.which(program)
        if found:
            return shlex.quote(str(Path(found).absolute()))
    return f"{shlex.quote(sys.executable)} -m syndicate"
