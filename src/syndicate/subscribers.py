"""Reader lists in, checked: addresses normalised with email-validator, languages and audiences
known. Pure: text in, rows and diagnostics out; the CLI reads the file and the store writes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Collection, Sequence

from email_validator import EmailNotValidError, validate_email

from .model import Diagnostic, Severity

CSV_COLUMNS = ("email", "lang", "audiences")
"""Columns an import needs (others, as in an export, are ignored); audiences split by ';'."""

Row = tuple[str, str, tuple[str, ...]]


def normalise_email(value: str) -> str:
    """The canonical form of an address; ValueError says what is wrong with it."""
    try:
        return validate_email(value, check_deliverability=False).normalized
    except EmailNotValidError as exc:
        raise ValueError(f"invalid email address {value!r}: {exc}") from None


def check_reader(
    email: str,
    lang: str,
    audiences: Sequence[str],
    *,
    langs: Collection[str],
    known: Collection[str],
) -> Row:
    """(email, lang, audiences) made canonical; ValueError names the first problem."""
    address = normalise_email(email.strip())
    lang = lang.strip()
    if lang not in langs:
        raise ValueError(f"unknown language {lang!r} (known: {', '.join(langs)})")
    chosen = tuple(dict.fromkeys(a.strip() for a in audiences if a.strip()))
    if not chosen:
        raise ValueError("needs at least one audience")
    unknown = [a for a in chosen if a not in known]
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise ValueError(f"unknown audience(s) {names} (known: {', '.join(known)})")
    return address, lang, chosen


def read_subscriber_csv(
    text: str, source: str, *, langs: Collection[str], known: Collection[str]
) -> tuple[list[Row], list[Diagnostic]]:
    """Rows of a CSV file with a header ``email,lang,audiences``; every bad row is reported
    with its line number, and an address listed twice is an error (which line would win?)."""
    problems: list[Diagnostic] = []

    def problem(line: int | None, message: str) -> None:
        problems.append(Diagnostic(source, line, Severity.ERROR, message))

    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in reader.fieldnames or []]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        columns, absent = ", ".join(CSV_COLUMNS), ", ".join(missing)
        problem(1, f"header must name the columns {columns} (missing: {absent})")
        return [], problems
    reader.fieldnames = header
    rows: list[Row] = []
    seen: dict[str, int] = {}
    for record in reader:
        start = reader.line_num
        if None in record or any(record[c] is None for c in CSV_COLUMNS):
            problem(start, f"expected {len(header)} columns")
            continue
        try:
            row = check_reader(
                record["email"],
                record["lang"],
                record["audiences"].split(";"),
                langs=langs,
                known=known,
            )
        except ValueError as exc:
            problem(start, str(exc))
            continue
        if row[0] in seen:
            problem(start, f"{row[0]} is already on line {seen[row[0]]}")
            continue
        seen[row[0]] = start
        rows.append(row)
    return rows, problems
