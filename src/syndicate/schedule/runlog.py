"""The one structured log line per run of a job or a step: what ``run`` and ``run --once``
print, and what ``--log-json`` carries in ``record.fields``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import SyndicateError, describe

log = logging.getLogger("syndicate.scheduler")


@dataclass(frozen=True, slots=True)
class Report:
    """What one run did: counts for the log line, and why nothing was done when nothing was."""

    counts: Mapping[str, int] = field(default_factory=dict)
    reason: str | None = None
    complete: bool = True
    """False when part of the work failed (e.g. deliveries); the counts say which."""


Step = Callable[[datetime], "Report | None"]
"""One piece of work run at ``now``: a job, or a step of ``run --once`` of the caller's own
(None: there was nothing to do, not even worth a line)."""


def run_and_log(
    name: str, work: Step, now: datetime, *, debug: bool
) -> tuple[str | None, Report | None]:
    """Run ``work`` and log its one line; the outcome and the report (None, None: nothing
    worth a line). Never raises: a SyndicateError or an OSError is for the operator and needs
    no traceback (unless ``debug``); anything else gets one."""
    started = time.monotonic()
    failure: BaseException | None = None
    try:
        report = work(now)
    except (SyndicateError, OSError) as exc:  # a full disk, a lost database, ...
        reason = describe(exc) if isinstance(exc, OSError) else str(exc)
        outcome, report = "error", Report(reason=reason)
        failure = exc if debug else None
    except Exception as exc:
        outcome, report, failure = "error", Report(reason=f"{type(exc).__name__}: {exc}"), exc
    else:
        if report is None:
            return None, None
        outcome = "ok" if report.reason is None else "nothing"
        outcome = outcome if report.complete else "partial"
    duration = time.monotonic() - started
    log_run(name, now, duration, outcome, report.counts, report.reason, failure)
    return outcome, report


def log_run(
    job_id: str,
    start: datetime,
    duration: float,
    outcome: str,
    counts: Mapping[str, int] | None = None,
    reason: str | None = None,
    failure: BaseException | None = None,
) -> None:
    """The one structured line per run (with the traceback of a failure); ``record.fields``
    carries it for JSON output."""
    fields: dict[str, Any] = {
        "job": job_id,
        "start": start.isoformat(timespec="seconds"),
        "duration": round(duration, 3),
        "outcome": outcome,
        "counts": dict(counts or {}),
    }
    if reason:
        fields["reason"] = reason
    text = " ".join(
        [f"job={job_id} outcome={outcome} start={fields['start']} duration={duration:.3f}s"]
        + [f"{key}={value}" for key, value in fields["counts"].items()]
        + ([f"reason={reason!r}"] if reason else [])
    )
    level = logging.ERROR if outcome == "error" else logging.INFO
    log.log(level, "%s", text, exc_info=failure, extra={"fields": fields})
