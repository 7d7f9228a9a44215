"""Reader lists in, checked: addresses normalised with email-validator, languages and audiences
known. Pure: text in, rows and diagnostics out; the CLI reads the file and the store writes.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import idna
from email_validator import EmailNotValidError, validate_email

from .model import Diagnostic, Severity

CSV_COLUMNS = ("email", "lang", "audiences")
"""Columns an import needs; audiences split by ';'."""
EXPORT_COLUMNS = (
    *CSV_COLUMNS,
    "status",
    "consent_source",
    "created",
    "updated",
    "bounces",
    "timezone",
    "last_bounce",
    "soft_bounces",
    "soft_since",
    "last_reason",
)
"""Columns an export writes and an import reads back (those after ``audiences`` may be left
out or empty: the import's options and the time of the import stand in for them; an empty
``timezone`` is the site's). ``bounces`` counts hard bounces, the last at ``last_bounce``;
``soft_bounces`` those soft ones with no success in between, the first at ``soft_since``;
``last_reason`` is the last bounce's reason: every count the bounce policy reads."""
STATUSES = ("pending", "active", "unsubscribed", "bounced")
"""A reader's statuses: ``unsubscribed`` and ``bounced`` are readers who left."""

Row = tuple[str, str, tuple[str, ...]]
_REASON = re.compile(r"[a-z]{1,40}")  # a name of bounces.reasons' taxonomy, or ``feedback``


@dataclass(frozen=True, slots=True)
class ReaderRow:
    """One reader as a file gives them; what the file leaves out is None."""

    email: str
    lang: str
    audiences: tuple[str, ...]
    status: str | None = None
    consent_source: str | None = None
    created: datetime | None = None
    """When the reader gave their consent."""
    updated: datetime | None = None
    bounces: int | None = None
    """Hard bounces counted, the last of them at ``last_bounce``."""
    timezone: str | None = None
    """The reader's IANA time zone; None: the site's (``site.timezone``)."""
    last_bounce: datetime | None = None
    soft_bounces: int | None = None
    """Soft bounces with no successful delivery in between, the first at ``soft_since``."""
    soft_since: datetime | None = None
    last_reason: str | None = None
    """The last bounce's reason (``userunknown``, ``mailboxfull``, ``feedback``, ...)."""


def check_timezone(value: str) -> str:
    """An IANA time zone name as zoneinfo knows it; ValueError says what is wrong."""
    name = value.strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r} (an IANA name: Asia/Tokyo)") from None
    return name


def normalise_email(value: str) -> str:
    """The canonical form of an address; ValueError says what is wrong with it."""
    try:
        return validate_email(value, check_deliverability=False).normalized
    except EmailNotValidError as exc:
        raise ValueError(f"invalid email address {value!r}: {exc}") from None


def smtp_address(address: str) -> tuple[str, bool]:
    """The address as it travels over SMTP and in the To header: an international domain in
    its IDNA (punycode) form, which every server takes; and whether the local part is not
    ASCII, which only a server that offers SMTPUTF8 can deliver. ValueError when the domain
    has no IDNA form."""
    if address.isascii():
        return address, False
    local, _, domain = address.rpartition("@")
    if not domain.isascii():
        try:
            domain = idna.encode(domain, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise ValueError(f"{address!r}: the domain has no IDNA form ({exc})") from None
    return f"{local}@{domain}", not local.isascii()


SMTPUTF8_WARNING = (
    "the part before @ is not ASCII: only mail servers that offer SMTPUTF8 can deliver to it"
)


def mask_email(address: str) -> str:
    """An address as a page shows it to whoever holds the link: enough for its owner to
    recognise (``r•••@example.org``), too little to harvest."""
    local, _, domain = address.rpartition("@")
    return f"{local[:1]}•••@{domain}"


def address_key(address: str) -> str:
    """What makes two spellings of an address one reader: ``Reader@Example.ORG`` and
    ``reader@example.org`` are one mailbox as far as the list is concerned. Addresses are
    normalised first (``normalise_email``: domain in its Unicode form, NFC), so lower case is
    all that is left to fold."""
    return address.lower()


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
) -> tuple[list[ReaderRow], list[Diagnostic]]:
    """Rows of a CSV file with a header naming at least ``email,lang,audiences`` (an export's
    other columns are read too; unknown ones are ignored); every bad row is reported with its
    line number, and an address listed twice, in any letter case, is an error (which line
    would win?). An address that needs SMTPUTF8 is kept, with a warning."""
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
    rows: list[ReaderRow] = []
    seen: dict[str, int] = {}
    for record in reader:
        start = reader.line_num
        if None in record or any(record[c] is None for c in header):
            problem(start, f"expected {len(header)} columns")
            continue
        try:
            email, lang, chosen = check_reader(
                record["email"],
                record["lang"],
                record["audiences"].split(";"),
                langs=langs,
                known=known,
            )
            row = ReaderRow(email, lang, chosen, **_exported(record))
        except ValueError as exc:
            problem(start, str(exc))
            continue
        key = address_key(row.email)
        if key in seen:
            problem(start, f"{row.email} is already on line {seen[key]}")
            continue
        seen[key] = start
        rows.append(row)
        if not row.email.rpartition("@")[0].isascii():
            warning = f"{row.email}: {SMTPUTF8_WARNING}"
            problems.append(Diagnostic(source, start, Severity.WARNING, warning))
    return rows, problems


def _exported(record: dict[str, str]) -> dict[str, Any]:
    """The columns beyond the three an import needs, checked; empty cells are None."""
    found: dict[str, Any] = {}
    for column, read in _READ.items():
        value = record.get(column, "").strip()
        if value:
            found[column] = read(column, value)
    return found


def _status(column: str, value: str) -> str:
    if value not in STATUSES:
        raise ValueError(f"unknown status {value!r} (known: {', '.join(STATUSES)})")
    return value


def _time(column: str, value: str) -> datetime:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{column}: not an ISO 8601 date and time: {value!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _count(column: str, value: str) -> int:
    if not value.isdigit():
        raise ValueError(f"{column}: not a whole number of 0 or more: {value!r}")
    return int(value)


def _reason(column: str, value: str) -> str:
    if not _REASON.fullmatch(value):
        raise ValueError(f"{column}: not a bounce reason's name: {value!r}")
    return value


_READ: dict[str, Callable[[str, str], Any]] = {
    "status": _status,
    "consent_source": lambda column, value: value,
    "created": _time,
    "updated": _time,
    "bounces": _count,
    "timezone": lambda column, value: check_timezone(value),
    "last_bounce": _time,
    "soft_bounces": _count,
    "soft_since": _time,
    "last_reason": _reason,
}
"""How each exported column is read back (a ValueError names what is wrong)."""
