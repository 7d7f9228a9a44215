"""Log lines on stderr while a long-running command runs: plain lines for people, one JSON
object per line (``--log-json``) for machines."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any


class JsonLines(logging.Formatter):
    """One JSON object per record; a run's structured fields become top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        data.update(getattr(record, "fields", None) or {"message": record.getMessage()})
        if record.exc_info:
            data["traceback"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


@contextlib.contextmanager
def logging_to_stderr(json_lines: bool) -> Iterator[None]:
    """Log to stderr while the block runs: plain lines for people, ``--log-json`` for
    machines; Python's warnings go the same way, so that every line is one record. The
    previous logging setup comes back afterwards."""
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handler.setFormatter(JsonLines() if json_lines else text)
    levels = {
        "": logging.INFO,
        "alembic": logging.WARNING,
        "apscheduler": logging.WARNING,
        "apscheduler.executors": logging.ERROR,  # its "missed" warnings repeat our run lines
        "procrastinate": logging.WARNING,  # a line per job and poll: a worker logs its batches
    }
    loggers = {logging.getLogger(name): level for name, level in levels.items()}
    root = logging.getLogger()
    saved_handlers, saved_levels = root.handlers[:], {lg: lg.level for lg in loggers}
    root.handlers[:] = [handler]
    for logger, level in loggers.items():
        logger.setLevel(level)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.handlers[:] = saved_handlers
        for logger, level in saved_levels.items():
            logger.setLevel(level)
