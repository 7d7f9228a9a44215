"""``init``: a new site's folder."""

from __future__ import annotations

from pathlib import Path

import click

from .shared import operator_errors


@click.command()
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), default=".")
def init(folder: Path) -> None:
    """Start a site in FOLDER (default: here): a commented config.toml and an example article."""
    from ..skeleton import create_site

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
        "  syndicate serve --dev    see the site and its feeds in a browser"
    )
