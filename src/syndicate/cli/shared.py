"""What the commands share: ``--config`` and ``--debug`` (before or after the command), the
loaded config, ``--articles``, and every error an operator can act on as one line and an
exit status."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import Exit, SyndicateError, UsageError, describe
from .logs import JsonLines

if TYPE_CHECKING:
    from ..config import Config


@dataclass
class Options:
    """What the options every command shares say; set before the command (``syndicate
    --config x.toml build``) or after it (``syndicate build --config x.toml``)."""

    config: Path | None = None
    debug: bool = False
    log_json: bool = False
    """Errors, too, are written as JSON lines (``run --log-json``)."""


def options() -> Options:
    return click.get_current_context().ensure_object(Options)


config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Config file (default: $SYNDICATE_CONFIG, else ./config.toml, else built-ins).",
)
debug_option = click.option(
    "--debug", is_flag=True, help="Show tracebacks instead of one-line errors."
)


def share(config_path: Path | None, debug: bool) -> None:
    """Take ``--config`` and ``--debug`` given after a command as if given before it."""
    shared = options()
    shared.config = config_path if config_path is not None else shared.config
    shared.debug = shared.debug or debug


def report_error(message: str) -> None:
    """One error line on stderr: ``syndicate: ...``, or a JSON object under ``--log-json``."""
    if options().log_json:
        record = logging.makeLogRecord(
            {"name": "syndicate", "levelname": "ERROR", "levelno": logging.ERROR, "msg": message}
        )
        click.echo(JsonLines().format(record), err=True)
    else:
        click.echo(f"syndicate: {message}", err=True)


@contextlib.contextmanager
def operator_errors() -> Iterator[None]:
    """Turn what an operator can act on into one line and its exit status: a SyndicateError
    (its own status), an OSError (a full disk, a read-only folder: 1). With ``--debug``, or
    for anything else, the traceback."""
    try:
        yield
    except (SyndicateError, OSError) as exc:
        if options().debug:
            raise
        if isinstance(exc, SyndicateError):
            message, status = str(exc), exc.exit_code
        else:
            message, status = describe(exc, ""), Exit.FAILED
        report_error(message)
        sys.exit(status)


@contextlib.contextmanager
def loaded_config() -> Iterator[Config]:
    """The config ``--config`` names (or the default one) while the block runs; what goes
    wrong in it, a lost state database too, is one line and an exit status."""
    with operator_errors():
        from ..config import load_config
        from ..state import database_errors

        gc.freeze()  # what these imports made, as in main()
        config = load_config(options().config)
        with database_errors(config.database_url):
            yield config


def with_config(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config`` (and ``--debug``) to a command and hand it a loaded Config."""

    @config_option
    @debug_option
    @functools.wraps(command)
    def wrapper(config_path: Path | None, debug: bool, **kwargs: Any) -> Any:
        share(config_path, debug)
        with loaded_config() as config:
            return command(config, **kwargs)

    return wrapper


articles_option = click.option(
    "--articles",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of article files (default: site.articles from the config).",
)


def with_articles(config: Config, articles: Path | None) -> Config:
    """The config with ``--articles`` in place of ``site.articles``, for the functions
    that read the configured folder."""
    if articles is None:
        return config
    return config.model_copy(update={"site": config.site.model_copy(update={"articles": articles})})


def article_folder(config: Config, articles: Path | None = None) -> Path:
    """The article folder named on the command line, else the configured one; a folder that
    does not exist is an error, not an empty set (that would publish nothing)."""
    folder = articles if articles is not None else config.path(config.site.articles)
    if not folder.is_dir():
        raise UsageError(f"{folder}: article folder not found")
    return folder


def check_known(
    config: Config, *, langs: Iterable[str] = (), audiences: Iterable[str] = ()
) -> None:
    """Refuse a language that is not published or an audience nobody defines, naming the
    known ones (a typo would otherwise select nothing, and say nothing)."""
    for lang in langs:
        if lang not in config.site.languages:
            raise click.BadParameter(
                f"{lang!r} is not published (site.languages: {', '.join(config.site.languages)})",
                param_hint="--lang",
            )
    for audience in audiences:
        if audience not in config.audiences:
            raise click.BadParameter(
                f"unknown audience {audience!r} (known: {', '.join(config.audiences)})",
                param_hint="--audience",
            )
