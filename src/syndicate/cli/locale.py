"""``locale init`` and ``locale check``: the interface's catalogs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .shared import with_config

if TYPE_CHECKING:
    from ..config import Config


@click.group()
def locale() -> None:
    """The interface's catalogs: start one for a language, list what they lack."""


@locale.command("init")
@with_config
@click.argument("lang")
def locale_init(config: Config, lang: str) -> None:
    """Write LANG's catalog into site.locales, ready to translate."""
    from ..i18n import catalog_files, init_catalog

    path, catalog = init_catalog(config, lang)
    count = sum(1 for message in catalog if message.id)
    click.echo(str(path))
    click.echo(f"{count} message(s) to translate; plural rule: {catalog.plural_forms}", err=True)
    if catalog_files(config, lang)[0].is_file():
        click.echo(
            f"'{lang}' has a built-in catalog: fill in only the sentences to reword, "
            "the others keep their built-in wording",
            err=True,
        )


@locale.command("check")
@with_config
def locale_check(config: Config) -> None:
    """List, for each published language, the untranslated and fuzzy messages of mail and web."""
    from ..i18n import gaps

    incomplete = 0
    for gap in gaps(config):
        state = "" if gap.exists else " (no catalog yet)"
        done = gap.total - len(gap.missing)
        click.echo(f"{gap.lang} {gap.part}: {done} of {gap.total} translated, {gap.catalog}{state}")
        for message in gap.missing:
            status = "fuzzy" if message.key in gap.fuzzy else "untranslated"
            click.echo(f"  {message.where}: {status}: {message.key!r}")
        incomplete += bool(gap.missing)
    sys.exit(1 if incomplete else 0)
