"""The bounce mailbox: read each message of a Maildir, an mbox or an IMAP folder, classify it
(``bounces``), match it to its delivery and record it in the state database, then move it to
processed (a message that is no bounce to replies, for a person to read; one that is no mail at
all stays); and the readers at risk, each with whether their bounce count has aged out."""

from __future__ import annotations

import contextlib
import hashlib
import imaplib
import mailbox
import re
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from .bounces import (
    COMPLAINT,
    NOT_A_BOUNCE,
    PERMANENT,
    TEMPORARY,
    Finding,
    UnreadableError,
    classify,
    verp_deliveries,
)
from .bounces.relays import RelayEvent
from .config import Config
from .errors import SyndicateError, UsageError
from .files import create_private
from .sending.messages import bounce_policy, return_path
from .state import AtRisk, Bounced, Store
from .tokens import secret_key

UNREADABLE = "unreadable"
PROCESSED = "processed"
REPLIES = "replies"


@dataclass(frozen=True, slots=True)
class BounceOutcome:
    """What became of one message of a bounce mailbox."""

    key: str
    """The message's name in its mailbox."""
    kind: str
    """permanent, temporary, complaint or none (see ``bounces.classify``); or unreadable
    (no mail message at all)."""
    action: str
    """What was (in a dry run: would be) done: the store's answer, or why nothing was."""
    folder: str = ""
    """Where the message went (in a dry run: would go): processed or replies; empty when
    it stays in the mailbox."""
    email: str = ""
    status: str = ""
    reason: str = ""
    matched_by: str = ""


class BounceBox:
    """A Maildir (a folder with cur/ and new/) or an mbox file of bounce mail; a message
    dealt with moves to ``processed/`` beside it, one that is no bounce to ``replies/`` (each
    a Maildir inside the folder; for an mbox, an mbox of the same name in a folder of that
    name next to it)."""

    def __init__(self, path: Path) -> None:
        self.box: mailbox.Mailbox
        if path.is_dir():
            if not ((path / "cur").is_dir() or (path / "new").is_dir()):
                raise UsageError(f"{path}: not a Maildir (no cur/ or new/ in it)")
            self.box = mailbox.Maildir(path, factory=None, create=False)
        elif path.is_file():
            self.box = mailbox.mbox(path, factory=None, create=False)
        else:
            raise UsageError(f"{path}: no such Maildir or mbox")
        self.path = path

    def folder(self, name: str) -> Path:
        """Where the messages moved to ``name`` (processed, replies) go."""
        if isinstance(self.box, mailbox.Maildir):
            return self.path / name
        return self.path.parent / name / self.path.name

    @property
    def processed(self) -> Path:
        """Where the messages dealt with go."""
        return self.folder(PROCESSED)

    @property
    def replies(self) -> Path:
        """Where the messages that are no bounce go: human replies, auto-replies, notices."""
        return self.folder(REPLIES)

    def messages(self) -> Iterator[tuple[str, bytes]]:
        for key in sorted(self.box.iterkeys(), key=str):
            yield str(key), self.box.get_bytes(key)

    def move(self, folders: Mapping[str, str]) -> None:
        """Move each message (by its key) into its folder (processed, replies): each is copied
        there first, then removed here (a bounce found in both after a crash is recognised
        by its hash)."""
        if not folders:
            return
        boxes = {name: self._opened(name) for name in sorted(set(folders.values()))}
        self.box.lock()
        try:
            keys = {str(key): key for key in self.box.iterkeys()}
            for key, name in folders.items():
                boxes[name].add(self.box.get_bytes(keys[key]))  # byte for byte: its hash stays
                boxes[name].flush()
                self.box.remove(keys[key])
            self.box.flush()
        finally:
            self.box.unlock()

    def close(self) -> None:
        self.box.close()

    def _opened(self, name: str) -> mailbox.Mailbox:
        path = self.folder(name)
        if isinstance(self.box, mailbox.Maildir):  # its folders are made owner-only
            return mailbox.Maildir(path, factory=None)
        create_private(path)  # a bounce or a reply names its reader: its owner's alone
        return mailbox.mbox(path, factory=None)


class MailboxError(SyndicateError):
    """The IMAP mailbox cannot be reached, refuses the login, or fails mid-run: the messages
    not yet moved stay where they are, and the next run reads them again."""


class BounceSource(Protocol):
    """Where bounce mail is read: a ``BounceBox`` (Maildir, mbox) or an ``ImapBox``."""

    @property
    def processed(self) -> Path | str: ...

    @property
    def replies(self) -> Path | str: ...

    def messages(self) -> Iterator[tuple[str, bytes]]: ...

    def move(self, folders: Mapping[str, str]) -> None: ...

    def close(self) -> None: ...


_IMAPS_PORT = 993
_LISTED = re.compile(rb'\((?P<flags>[^)]*)\) (?:"(?P<delimiter>[^"]*)"|NIL) ')


class ImapBox:
    """A folder of an IMAP mailbox (IMAP over TLS, with a login) of bounce mail: a message
    dealt with moves to the folder ``processed`` under it, one that is no bounce to
    ``replies`` (each made when first needed); none is deleted. Messages are read without
    marking them seen, so one left in place looks to a person as it did."""

    def __init__(
        self, url: str, password: str, *, timeout: float = 60.0, tls: ssl.SSLContext | None = None
    ) -> None:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or _IMAPS_PORT
        self.folder = unquote(parts.path.strip("/")) or "INBOX"
        self.label = f"imaps://{parts.username}@{host}:{port}/{self.folder}"
        """The mailbox as messages name it (never the password)."""
        try:
            self.imap = imaplib.IMAP4_SSL(
                host, port, ssl_context=tls or ssl.create_default_context(), timeout=timeout
            )
        except (OSError, imaplib.IMAP4.error) as exc:
            raise MailboxError(f"{self.label}: cannot connect ({exc})") from None
        try:
            self.imap.login(unquote(parts.username or ""), password)
            # what the server offers once logged in (more than it said to a stranger)
            offered = self._ok(self.imap.capability(), "CAPABILITY")[0]
            self.offers = set(offered.decode("ascii", "replace").upper().split())
            listed = self._ok(self.imap.list('""', _quoted(self.folder)), "LIST")
            found = _LISTED.match(listed[0] or b"") if listed and listed[0] else None
            if found is None:
                raise MailboxError(f"{self.label}: no such folder")
            self.delimiter = (found["delimiter"] or b".").decode()
            self._ok(self.imap.select(_quoted(self.folder)), "SELECT")
        except (OSError, imaplib.IMAP4.error) as exc:
            self.close()
            raise MailboxError(f"{self.label}: {exc}") from None
        except MailboxError:
            self.close()
            raise

    @property
    def processed(self) -> str:
        return self.folder + self.delimiter + PROCESSED

    @property
    def replies(self) -> str:
        return self.folder + self.delimiter + REPLIES

    def messages(self) -> Iterator[tuple[str, bytes]]:
        """Each message by its UID, as the server holds it, byte for byte."""
        with self._talking():
            uids = self._ok(self.imap.uid("SEARCH", "UNDELETED"), "SEARCH")[0].split()
        for uid in uids:
            with self._talking():
                fetched = self._ok(self.imap.uid("FETCH", uid, "(BODY.PEEK[])"), "FETCH")
            data = next((part[1] for part in fetched if isinstance(part, tuple)), None)
            if data is not None:  # gone meanwhile: another reader moved it
                yield uid.decode(), data

    def move(self, folders: Mapping[str, str]) -> None:
        """Move each message (by its UID) into its folder (processed, replies): by MOVE where
        the server offers it (RFC 6851), else copied there, then marked deleted and expunged
        here by UID (RFC 4315), or only marked where the server cannot expunge one alone."""
        for name in sorted(set(folders.values())):
            uids = ",".join(key for key, folder in folders.items() if folder == name)
            with self._talking():
                self._move(uids, _quoted(self.folder + self.delimiter + name))

    def _move(self, uids: str, target: str) -> None:
        if not self._ok(self.imap.list('""', target), "LIST")[0]:
            self._ok(self.imap.create(target), "CREATE")
        if "MOVE" in self.offers:
            self._ok(self.imap.uid("MOVE", uids, target), "MOVE")
            return
        self._ok(self.imap.uid("COPY", uids, target), "COPY")
        self._ok(self.imap.uid("STORE", uids, "+FLAGS.SILENT", r"(\Deleted)"), "STORE")
        if "UIDPLUS" in self.offers:
            self._ok(self.imap.uid("EXPUNGE", uids), "EXPUNGE")

    @contextlib.contextmanager
    def _talking(self) -> Iterator[None]:
        """A lost connection or a server's protocol error, as a ``MailboxError``."""
        try:
            yield
        except (OSError, imaplib.IMAP4.error) as exc:
            raise MailboxError(f"{self.label}: {exc}") from None

    def close(self) -> None:
        with contextlib.suppress(OSError, imaplib.IMAP4.error):  # gone already
            self.imap.logout()

    def _ok(self, answer: tuple[str, list[Any]], command: str) -> list[Any]:
        """The data of an OK answer; a NO or BAD one is a ``MailboxError`` naming it."""
        kind, data = answer
        if kind != "OK":
            said = b" ".join(d for d in data if isinstance(d, bytes)).decode("utf-8", "replace")
            raise MailboxError(f"{self.label}: {command} refused: {said}")
        return data


def _quoted(name: str) -> str:
    """A mailbox name as an IMAP quoted string."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def bounce_source(config: Config, path: Path | None) -> BounceSource:
    """The mailbox to read: ``path`` (a Maildir or mbox), else ``bounces.imap_url``."""
    if path is not None:
        return BounceBox(path)
    url = config.bounces.imap_url
    if url is None:
        raise UsageError("no mailbox: give a Maildir or mbox, or set bounces.imap_url")
    secret = config.bounces.imap_password
    password = secret.get_secret_value() if secret else unquote(urlsplit(url).password or "")
    if not password:
        raise UsageError("bounces.imap_url needs a password: set SYNDICATE_IMAP_PASSWORD")
    return ImapBox(url, password)


def process_bounces(
    config: Config, store: Store, box: BounceSource, now: datetime, *, dry_run: bool = False
) -> list[BounceOutcome]:
    """Classify every message of ``box``, match it to a delivery and act on it; then move it
    to processed/, so that a second run finds nothing (a message put back is recognised by
    its hash and changes nothing either). A message that is no bounce moves to replies/, for
    a person to read; one that is no mail message at all (empty, binary, or one a reader
    breaks on) stays where it is. ``dry_run`` writes and moves nothing.

    The delivery comes from a genuine VERP address in the message; a message with VERP
    addresses none of which is genuine is forged and ignored. Without one, the original's
    Message-ID and then the reported recipient are the fallbacks.
    """
    secret = secret_key(config)
    outcomes = []
    for key, data in box.messages():
        try:
            finding = classify(data)
        except UnreadableError as exc:
            outcomes.append(BounceOutcome(key, UNREADABLE, "left in place", reason=str(exc)))
            continue
        except Exception as exc:  # a reader's bug on one message: it stays, the rest go on
            why = f"{type(exc).__name__}: {exc}"
            outcomes.append(BounceOutcome(key, UNREADABLE, "left in place", reason=why))
            continue
        if finding.kind == NOT_A_BOUNCE:
            moved = f"{'would move' if dry_run else 'moved'} to {REPLIES}/"
            outcomes.append(BounceOutcome(key, NOT_A_BOUNCE, moved, REPLIES, reason=finding.reason))
        else:
            outcomes.append(_act(config, store, secret, key, data, finding, now, dry_run=dry_run))
    if not dry_run:
        box.move({o.key: o.folder for o in outcomes if o.folder})
    return outcomes


def _act(
    config: Config,
    store: Store,
    secret: bytes,
    key: str,
    data: bytes,
    finding: Finding,
    now: datetime,
    *,
    dry_run: bool,
) -> BounceOutcome:
    """Match one classified bounce to its delivery and record it (unless ``dry_run``)."""
    ids, shaped = verp_deliveries(secret, return_path(config), finding.text)
    base = {
        "key": key,
        "kind": finding.kind,
        "folder": PROCESSED,
        "status": finding.status,
        "reason": finding.reason,
    }
    if ids:
        targets, by = store.bounces.bounced_deliveries(ids=sorted(ids)), "verp"
    elif shaped:
        return BounceOutcome(**base, action="ignored: forged (no genuine return address)")
    else:
        targets, by = (
            store.bounces.bounced_deliveries(message_ids=finding.message_ids),
            "message-id",
        )
        if finding.recipients:  # the report's recipient must be the delivery's
            targets = [t for t in targets if t.email.lower() in finding.recipients]
        if not targets:
            targets, by = store.bounces.bounced_deliveries(emails=finding.recipients), "recipient"
    if not targets:
        return BounceOutcome(**base, action="ignored: no delivery or reader matches")
    target: Bounced = targets[0]
    message_hash = hashlib.sha256(data).hexdigest()
    if dry_run:
        action = _would(finding.kind, store.bounces.bounce_known(message_hash))
    else:
        action = store.bounces.record_bounce(
            message_hash=message_hash,
            target=target,
            kind=finding.kind,
            status=finding.status,
            reason=finding.reason,
            matched_by=by,
            policy=bounce_policy(config),
            now=now,
            cause=_cause(finding, target.email),
        )
    return BounceOutcome(**base, action=action, email=target.email, matched_by=by)


def _cause(finding: Finding, email: str) -> str:
    """The reason, in the taxonomy of ``bounces.reasons``, of the failure that counts for
    ``email``: its own, else the one the finding's kind comes from (a hard one first)."""
    wanted = {PERMANENT: "hard", TEMPORARY: "soft"}.get(finding.kind, finding.kind)
    failures = [f for f in finding.failures if f.kind == wanted] or list(finding.failures)
    own = [f for f in failures if f.recipient == email.lower()]
    return (own or failures)[0].reason if failures else ""


def _would(kind: str, known: bool) -> str:
    if known:
        return "would skip: recorded already"
    if kind == COMPLAINT:
        return "would unsubscribe"
    return "would count" if kind in (PERMANENT, TEMPORARY) else "would record"


@dataclass(frozen=True, slots=True)
class ReaderAtRisk:
    """A reader with bounces or complaints on record (``syndicate bounces list``)."""

    reader: AtRisk
    max_bounces: int
    """``bounces.hard_limit``: the hard bounces at which the reader is no longer sent to."""
    aged_out: bool
    """Their last hard bounce was counted longer than ``bounces.hard_window_days`` ago: the
    next one counts as the first (as ``record_bounce`` counts it)."""
    soft_limit: int = 5
    """``bounces.soft_limit``: the soft bounces at which, spanning ``soft_days``, the reader
    is no longer sent to."""
    soft_days: float = 14.0

    def to_json(self) -> dict[str, Any]:
        """The ``bounces list --json`` contract: one object per reader (``bounces`` and
        ``max_bounces`` are the hard count and limit, as ``hard_bounces`` and ``hard_limit``)."""
        r = self.reader
        return {
            "email": r.email,
            "status": r.status,
            "bounces": r.bounces,
            "max_bounces": self.max_bounces,
            "bounces_counted_at": r.counted_at.isoformat() if r.counted_at else None,
            "bounces_aged_out": self.aged_out,
            "hard_bounces": r.bounces,
            "hard_limit": self.max_bounces,
            "soft_bounces": r.soft_bounces,
            "soft_limit": self.soft_limit,
            "soft_days": self.soft_days,
            "soft_since": r.soft_since.isoformat() if r.soft_since else None,
            "reason": r.reason,
            "temporary": r.temporary,
            "complaints": r.complaints,
            "last": None
            if r.last_kind is None
            else {
                "kind": r.last_kind,
                "status": r.last_status,
                "reason": r.last_reason,
                "at": r.last_at.isoformat() if r.last_at else None,
            },
        }


def readers_at_risk(config: Config, store: Store, now: datetime) -> list[ReaderAtRisk]:
    """The readers with bounces or complaints on record, worst first, as of ``now``."""
    policy = config.bounces
    stale_before = now - timedelta(days=policy.hard_window_days)
    return [
        ReaderAtRisk(
            reader,
            policy.hard_limit,
            aged_out=reader.counted_at is not None and reader.counted_at < stale_before,
            soft_limit=policy.soft_limit,
            soft_days=policy.soft_days,
        )
        for reader in store.bounces.readers_at_risk()
    ]


def record_relay_event(
    config: Config, store: Store, secret: bytes, event: RelayEvent, now: datetime
) -> BounceOutcome:
    """Match one relay's webhook event to its delivery and record it, as a bounce message is
    (the same dedupe by hash, here of the event's identity, and the same policy)."""
    key = event.identity.decode("utf-8", "replace")
    if event.finding.kind == NOT_A_BOUNCE:
        return BounceOutcome(key, NOT_A_BOUNCE, "ignored: no bounce", reason=event.finding.reason)
    return _act(config, store, secret, key, event.identity, event.finding, now, dry_run=False)
