"""One exception family; the CLI turns each into a one-line message and an exit code."""

from __future__ import annotations


class SyndicateError(Exception):
    """Base of every error the user should see as a message rather than a traceback."""

    exit_code = 1


class ConfigError(SyndicateError):
    """The configuration is unusable; ``problems`` holds one ``key: message`` line per fault."""

    exit_code = 2

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid configuration in {source}:\n{lines}")


class RenderError(SyndicateError):
    """A template or MJML document could not be rendered; the message names template and line."""


class CatalogError(RenderError):
    """A gettext catalog (.po) cannot be read; names the file and, where known, the line."""

    def __init__(self, file: str, line: int | None, problem: str) -> None:
        self.file, self.line, self.problem = file, line, problem
        super().__init__(f"{file}:{line}: {problem}" if line else f"{file}: {problem}")


class DeliveryError(SyndicateError):
    """Mail could not be handed to the transport at all (not a per-recipient failure)."""


class SchedulerBusyError(SyndicateError):
    """Another scheduler already acts on this state database; only one may."""

    exit_code = 3
