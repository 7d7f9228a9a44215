"""What a check found: a verdict, what it saw and the fix in a line or two; and the report
of a doctor run as text or JSON (no I/O)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Severity = Literal["ok", "warning", "failure"]


@dataclass(frozen=True)
class Check:
    """One check's verdict. ``records`` are the DNS records the fix publishes, in zone-file
    form (``name. TXT "..."``), each replacing the records of its name and kind."""

    name: str
    severity: Severity
    detail: str
    fix: str = ""
    records: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the check passed: a warning passes, with advice."""
        return self.severity != "failure"

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "ok": self.ok,
            "severity": self.severity,
            "detail": self.detail,
            "fix": self.fix,
        }


def passed(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def warned(name: str, detail: str, fix: str, records: Sequence[str] = ()) -> Check:
    return Check(name, "warning", detail, fix, tuple(records))


def failed(name: str, detail: str, fix: str, records: Sequence[str] = ()) -> Check:
    return Check(name, "failure", detail, fix, tuple(records))


def all_passed(checks: Sequence[Check]) -> bool:
    return all(check.ok for check in checks)


def as_json(checks: Sequence[Check]) -> str:
    """``{"checks": [{"name", "ok", "severity", "detail", "fix"}, ...]}``."""
    return json.dumps({"checks": [check.as_json() for check in checks]}, indent=2)


MARKS = {"ok": "ok  ", "warning": "warn", "failure": "FAIL"}


def as_text(checks: Sequence[Check]) -> str:
    """One line per check, then its fix indented under it."""
    lines = []
    for check in checks:
        lines.append(f"{MARKS[check.severity]}  {check.name:<9} {check.detail}")
        lines += [f"{'':15}fix: {line}" for line in check.fix.splitlines() if line]
    return "\n".join(lines)
