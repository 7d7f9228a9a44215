"""Delivery stage: hand finished messages to a mail server (or a local Maildir), exactly once.

``deliver`` works through the delivery rows the store holds: each worker claims one row, sends
it over its own persistent connection and records the server's reply straight away. It never
builds a message itself; a ``compose`` callable turns (issue, claim) into bytes.
"""

from __future__ import annotations

import mailbox
import re
import smtplib
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parseaddr
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from .errors import DeliveryError
from .store import Claim, Issue, Ledger, Store


class TemporaryFailure(Exception):
    """4xx or a dropped connection before the message was complete: safe to send again."""

    def __init__(self, reply: str, *, reconnect: bool = False) -> None:
        super().__init__(reply)
        self.reply = reply
        self.reconnect = reconnect


class PermanentFailure(Exception):
    """5xx for this recipient or this message: the reader does not get it."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


class LostInFlight(Exception):
    """The whole message went out but no reply came back: it may have been accepted."""


class Transport(Protocol):
    """One open connection; used by one worker at a time."""

    def send(self, sender: str, recipient: str, message: bytes) -> str:
        """Deliver ``message``; return the server's reply or raise one of the failures above."""
        ...

    def close(self) -> None: ...


class Mailer(Protocol):
    """Where messages go: opens one transport per worker."""

    def open(self) -> Transport: ...


# -- SMTP ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmtpMailer:
    """An SMTP server: plain, STARTTLS (``smtp+starttls://``) or implicit TLS (``smtps://``)."""

    host: str
    port: int
    security: str = "plain"  # "plain" | "starttls" | "tls"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 30.0
    tls_context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
    ) -> SmtpMailer:
        """``smtp://host:25``, ``smtp+starttls://user:pass@host:587``, ``smtps://host:465``;
        credentials in the URL win over the ones given."""
        parts = urlsplit(url)
        security, default_port = {
            "smtp": ("plain", 25),
            "smtp+starttls": ("starttls", 587),
            "smtps": ("tls", 465),
        }.get(parts.scheme, (None, 0))
        if security is None or not parts.hostname:
            raise DeliveryError(f"not an SMTP URL (smtp://, smtp+starttls://, smtps://): {url!r}")
        return cls(
            host=parts.hostname,
            port=parts.port or default_port,
            security=security,
            username=unquote(parts.username) if parts.username else username,
            password=unquote(parts.password) if parts.password else password,
            timeout=timeout,
        )

    def open(self) -> SmtpTransport:
        context = self.tls_context or ssl.create_default_context()
        try:
            if self.security == "tls":
                smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
            smtp.ehlo()
            if self.security == "starttls":
                smtp.starttls(context=context)
                smtp.ehlo()
            if self.username:
                smtp.login(self.username, self.password or "")
        except smtplib.SMTPAuthenticationError as exc:
            reply = _reply(exc.smtp_code, exc.smtp_error)
            raise DeliveryError(f"SMTP login to {self.host}:{self.port} refused: {reply}") from None
        except (smtplib.SMTPException, OSError) as exc:
            raise TemporaryFailure(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        return SmtpTransport(smtp)


def _reply(code: int, text: bytes | str) -> str:
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return f"{code} {' '.join(text.split())}"


_LEADING_DOT = re.compile(rb"(?m)^\.")


class SmtpTransport:
    """One persistent SMTP connection.

    The DATA step is spelled out (not ``sendmail``) to tell the two kinds of dropped connection
    apart: before the final dot nothing can have been accepted, so the message is retried;
    after it, the server may have queued it, so it is reported as lost in flight instead.
    """

    def __init__(self, smtp: smtplib.SMTP) -> None:
        self.smtp = smtp

    def send(self, sender: str, recipient: str, message: bytes) -> str:
        if "\r" in recipient or "\n" in recipient or "\r" in sender or "\n" in sender:
            raise PermanentFailure(f"refused: line break in address {recipient!r}")
        smtp = self.smtp
        try:
            code, text = smtp.mail(sender)
            if code != 250:
                self._refused(code, text, sender_step=True)
            code, text = smtp.rcpt(recipient)
            if code not in (250, 251):
                self._refused(code, text)
            code, text = smtp.docmd("DATA")
            if code != 354:
                self._refused(code, text)
            body = _LEADING_DOT.sub(b"..", message)
            if not body.endswith(b"\r\n"):
                body += b"\r\n"
            smtp.send(body + b".\r\n")
        except (smtplib.SMTPServerDisconnected, OSError) as exc:
            raise TemporaryFailure(f"connection lost: {exc}", reconnect=True) from None
        try:
            code, text = smtp.getreply()
        except (smtplib.SMTPServerDisconnected, OSError) as exc:
            raise LostInFlight(f"connection lost after the message was sent: {exc}") from None
        if code != 250:
            self._refused(code, text)
        return _reply(code, text)

    def _refused(self, code: int, text: bytes, *, sender_step: bool = False) -> None:
        reply = _reply(code, text)
        if code == 421:
            raise TemporaryFailure(reply, reconnect=True)
        try:
            self.smtp.rset()
        except (smtplib.SMTPException, OSError):
            raise TemporaryFailure(reply, reconnect=True) from None
        if 400 <= code < 500:
            raise TemporaryFailure(reply)
        if sender_step:
            # The sender address is refused: every reader would fail the same way.
            raise DeliveryError(f"the server refuses the sender address: {reply}")
        raise PermanentFailure(reply)

    def close(self) -> None:
        try:
            self.smtp.quit()
        except (smtplib.SMTPException, OSError):
            self.smtp.close()


# -- Maildir -------------------------------------------------------------------------------------


class MaildirMailer:
    """A local Maildir (``new/``, ``cur/``, ``tmp/``): delivery with no mail server at all.

    Each message is written to ``tmp/`` and moved into ``new/``, so a mail reader never sees a
    half-written file. Any Maildir-aware client (mutt -f, Thunderbird, ...) can open it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._box: mailbox.Maildir | None = None

    def open(self) -> MaildirMailer:
        return self

    def send(self, sender: str, recipient: str, message: bytes) -> str:
        if "\r" in recipient or "\n" in recipient:
            raise PermanentFailure(f"refused: line break in address {recipient!r}")
        with self._lock:
            if self._box is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._box = mailbox.Maildir(self.path, create=True)
            key = self._box.add(message)
        return f"250 stored in {self.path} as {key}"

    def close(self) -> None:
        pass


# -- the send loop -------------------------------------------------------------------------------


@dataclass
class DeliveryCounts:
    """What one run did with the delivery rows it found."""

    sent: int = 0
    failed: int = 0
    uncertain: int = 0
    skipped: int = 0
    deferred: int = 0
    """Temporary failures left pending for the next run."""
    failures: list[tuple[str, str]] = field(default_factory=list)
    """(email, reply) of every failed or uncertain delivery of this run."""

    def add(self, status: str, email: str = "", reply: str = "") -> None:
        setattr(self, status, getattr(self, status) + 1)
        if status in ("failed", "uncertain"):
            self.failures.append((email, reply))


@dataclass(frozen=True)
class SendOptions:
    sender: str
    """Envelope sender (MAIL FROM), a bare address."""
    workers: int = 4
    rate: float = 50.0
    """Messages per second at most, across all workers."""
    retries: int = 3
    backoff: float = 1.0
    """Seconds before the first retry of a temporary failure; doubles each time."""
    max_bounces: int = 3
    return_path: Callable[[Claim], str] | None = None
    """The envelope sender of each delivery (VERP, for bounces); ``sender`` when None."""


class Pacer:
    """Spaces sends ``1/rate`` seconds apart across threads."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def wait(self) -> None:
        with self.lock:
            now = time.monotonic()
            slot = max(self.next, now)
            self.next = slot + self.interval
        if slot > now:
            time.sleep(slot - now)


Compose = Callable[[Issue, Claim], bytes]


class Progress(Protocol):
    """Told how many deliveries a run has to do, then the outcome of each."""

    def start(self, total: int) -> None: ...

    def advance(self, status: str) -> None: ...


def deliver(
    store: Store,
    mailer: Mailer,
    compose: Compose,
    options: SendOptions,
    now: datetime,
    *,
    progress: Progress | None = None,
    counts: DeliveryCounts | None = None,
) -> DeliveryCounts:
    """Send every pending delivery, each recorded right after the server's answer.

    Deliveries left in flight by a run that died are marked uncertain first, never resent.
    ``progress`` hears the outcome of each delivery; ``counts`` (a new one by default)
    adds them up. Raises DeliveryError when the server cannot be used at all (login
    refused, sender refused); rows not yet sent stay pending.
    """
    counts = DeliveryCounts() if counts is None else counts
    lock = threading.Lock()
    stop = threading.Event()
    fatal: list[BaseException] = []
    pacer = Pacer(options.rate)
    issues: dict[int, Issue] = {}

    def outcome(status: str, email: str = "", reply: str = "") -> None:
        with lock:
            counts.add(status, email, reply)
        if progress is not None:
            progress.advance(status)

    def issue_of(issue_id: int) -> Issue:
        with lock:
            if issue_id not in issues:
                found = store.issue(issue_id)
                assert found is not None, f"delivery of unknown issue {issue_id}"
                issues[issue_id] = found
            return issues[issue_id]

    def work(run_id: int) -> None:
        transport: Transport | None = None
        done: tuple[int, str, str] | None = None  # recorded together with the next claim
        try:
            with store.ledger() as ledger:
                while not stop.is_set():
                    claim = ledger.claim(run_id, now, finished=done)
                    done = None
                    if claim is None:
                        return
                    try:
                        transport, done = _send_one(
                            ledger,
                            mailer,
                            transport,
                            compose,
                            issue_of,
                            claim,
                            options,
                            pacer,
                            now,
                            outcome,
                        )
                    except DeliveryError as exc:
                        ledger.finish(claim.id, "pending", str(exc), now)
                        raise
                if done is not None:
                    ledger.finish(*done, now)
        except BaseException as exc:
            # Anything else (the database gone, a bug) stops every worker; a row it left in
            # flight is found at the next run and marked uncertain, never resent blindly.
            fatal.append(exc)
            stop.set()
        finally:
            if transport is not None:
                transport.close()

    with store.send_run(now) as run_id:
        counts.uncertain += store.mark_lost(run_id, now)
        counts.skipped += store.skip_inactive(now)
        pending = store.pending_count()
        if progress is not None:
            progress.start(pending)
        workers = max(1, min(options.workers, pending))
        threads = [threading.Thread(target=work, args=(run_id,)) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if fatal:
        raise fatal[0]
    return counts


def _send_one(
    store: Ledger,
    mailer: Mailer,
    transport: Transport | None,
    compose: Compose,
    issue_of: Callable[[int], Issue],
    claim: Claim,
    options: SendOptions,
    pacer: Pacer,
    now: datetime,
    outcome: Callable[[str, str, str], None],
) -> tuple[Transport | None, tuple[int, str, str] | None]:
    """Send one claimed delivery with retries and record how it ended.

    Returns the transport to keep using (None when it had to be dropped) and, after a 250,
    the outcome still to record (with the worker's next claim, or on its own).
    """
    try:
        message = compose(issue_of(claim.issue_id), claim)
    except Exception as exc:  # a message that cannot be built must not stop the others
        reply = f"cannot build the message: {exc}"
        store.finish(claim.id, "failed", reply, now)
        outcome("failed", claim.email, reply)
        return transport, None
    sender = options.return_path(claim) if options.return_path else options.sender
    last = ""
    for attempt in range(options.retries + 1):
        if attempt:
            time.sleep(options.backoff * 2 ** (attempt - 1))
        try:
            if transport is None:
                transport = mailer.open()
            pacer.wait()
            reply = transport.send(sender, claim.email, message)
        except TemporaryFailure as exc:
            last = exc.reply
            if exc.reconnect and transport is not None:
                transport.close()
                transport = None
            continue
        except PermanentFailure as exc:
            store.bounce(claim.id, claim.subscriber_id, exc.reply, options.max_bounces, now)
            outcome("failed", claim.email, exc.reply)
            return transport, None
        except LostInFlight as exc:
            store.finish(claim.id, "uncertain", str(exc), now)
            outcome("uncertain", claim.email, str(exc))
            if transport is not None:
                transport.close()
            return None, None
        outcome("sent", claim.email, reply)
        return transport, (claim.id, "sent", reply)
    store.finish(claim.id, "pending", last, now)
    outcome("deferred", claim.email, last)
    return transport, None


def envelope_sender(sender: str) -> str:
    """The bare address of a From header value, for MAIL FROM."""
    address = parseaddr(sender)[1]
    if not address or "\r" in address or "\n" in address:
        raise DeliveryError(f"email.sender has no usable address: {sender!r}")
    return address
