"""One exception family; the CLI turns each into a one-line message and an exit code."""

from __future__ import annotations

import os
from enum import IntEnum


class Exit(IntEnum):
    """The exit statuses of every command (docs/operations.md has the table)."""

    OK = 0
    FAILED = 1
    """Something failed, or part of the work did (the messages say what)."""
    USAGE = 2
    """A bad command line or configuration: nothing was done."""
    LOCKED = 3
    """Another scheduler acts on this state database."""
    IN_USE = 4
    """A port or another resource is taken."""


class SyndicateError(Exception):
    """Base of every error the user should see as a message rather than a traceback."""

    exit_code = Exit.FAILED


class ConfigError(SyndicateError):
    """The configuration is unusable; ``problems`` holds one ``key: message`` line per fault."""

    exit_code = Exit.USAGE

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid configuration in {source}:\n{lines}")


class UsageError(SyndicateError):
    """The command cannot run as asked (no article folder, an unknown value): nothing done."""

    exit_code = Exit.USAGE


class RenderError(SyndicateError):
    """A template or MJML document could not be rendered; the message names template and line."""


class CatalogError(RenderError):
    """A gettext catalog (.po) cannot be read; names the file and, where known, the line."""

    def __init__(self, file: str, line: int | None, problem: str) -> None:
        self.file, self.line, self.problem = file, line, problem
        super().__init__(f"{file}:{line}: {problem}" if line else f"{file}: {problem}")


class DeliveryError(SyndicateError):
    """Mail could not be handed to the transport at all (not a per-recipient failure)."""


class OutputError(SyndicateError):
    """Output could not be written; the message names the file and says what was kept."""


class DatabaseError(SyndicateError):
    """The state database could not be reached, or failed mid-command (connection lost, disk
    full, read-only file)."""


class SchedulerBusyError(SyndicateError):
    """Another scheduler already acts on this state database; only one may."""

    exit_code = Exit.LOCKED


class ResourceBusyError(SyndicateError):
    """A port (or another resource only one process may hold) is in use."""

    exit_code = Exit.IN_USE


def describe(exc: OSError, doing: str = "writing") -> str:
    """An operating-system error as a person reads it: "no space left on device writing
    feeds/en.atom.xml" (the file relative to the working folder when it is inside it); with
    ``doing=""``, "permission denied: state/syndicate.db"."""
    reason = exc.strerror or str(exc)
    reason = reason[:1].lower() + reason[1:]
    if not exc.filename:
        return reason
    path = os.fspath(exc.filename)
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        relative = path
    shown = path if relative.startswith("..") else relative
    return f"{reason} {doing} {shown}" if doing else f"{reason}: {shown}"
