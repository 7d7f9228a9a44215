"""The command line: the only package that prints, picks exit codes and reads the real clock.

Each command parses its options, calls one function (``build``, ``send``, ``previews``,
``schedule``, ...) and reports what it did: one module per command or group of them, and
``shared`` for what they share. Every error an operator can act on (a SyndicateError, an
OSError, a lost state database) is one line and an exit status from ``errors.Exit``; the
traceback only with ``--debug``. Each command imports what it needs when it runs:
``syndicate --help``, and every command, would otherwise wait for the database, template,
feed and language libraries of all of them.
"""

from __future__ import annotations

import gc
from pathlib import Path

import click

from . import articles, bounces, broadcast, doctor, init, locale, run, send, serve, subscribers
from .shared import Options, config_option, debug_option


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit status: 0 done, 1 failed or partly done, 2 bad command line or configuration, "
    "3 another scheduler holds the lock, 4 a port or resource in use.",
)
@click.version_option(package_name="syndicate")
@config_option
@debug_option
@click.pass_context
def main(ctx: click.Context, config_path: Path | None, debug: bool) -> None:
    """Multilingual Atom/RSS feeds and audience newsletters from plain-text articles."""
    ctx.obj = Options(config_path, debug)
    # What the imports made lives as long as the process: the cycle collector need not walk
    # it again, and at exit, walking it cost a build of 30,000 files about 0.2 s. The commands
    # import their libraries when they run, and freeze again (with_config, owned_process).
    gc.freeze()


for command in (
    articles.check,
    articles.build,
    articles.digest,
    run.run,
    run.schedule,
    run.worker,
    send.send,
    broadcast.broadcast,
    doctor.doctor,
    serve.serve,
    init.init,
    bounces.bounces,
    subscribers.subscribers,
    locale.locale,
):
    main.add_command(command)


if __name__ == "__main__":
    main()
