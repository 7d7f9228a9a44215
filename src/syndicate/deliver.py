"""Delivery stage: hand finished messages to a mail server (or a local Maildir), exactly once.

``deliver`` works through the delivery rows the store holds: each worker takes one row, sends
it over its own persistent connection and records the server's reply straight away. It never
builds a message itself; a ``compose`` callable turns (issue, claim) into bytes.
"""

from __future__ import annotations

import errno
import fcntl
import heapq
import logging
import mailbox
import re
import select
import smtplib
import socket
import ssl
import struct
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.utils import parseaddr
from functools import cache
from pathlib import Path
from typing import NoReturn, Protocol
from urllib.parse import unquote, urlsplit

from .errors import DatabaseError, DeliveryError
from .files import make_private
from .state import Batch, Claim, Issue, Ledger, Store
from .state.subscribers import BOUNCE_WINDOW
from .subscribers import smtp_address

logger = logging.getLogger(__name__)


class TemporaryFailure(Exception):
    """4xx, a dropped connection before the end of data, or one the server closed without
    having read it (``SmtpTransport``): safe to send again."""

    def __init__(self, reply: str, *, reconnect: bool = False) -> None:
        super().__init__(reply)
        self.reply = reply
        self.reconnect = reconnect


class PermanentFailure(Exception):
    """5xx for this recipient or this message, or an address this server cannot take: the
    reader does not get it. ``bounce`` counts it against the reader's mailbox."""

    def __init__(self, reply: str, *, bounce: bool = True) -> None:
        super().__init__(reply)
        self.reply = reply
        self.bounce = bounce


class LostInFlight(Exception):
    """The end of data was written, the server may have read it, and no reply came back: it
    may have been accepted."""


def _nothing() -> None:
    pass


class Transport(Protocol):
    """One open connection; used by one worker at a time."""

    def send(
        self, sender: str, recipient: str, message: bytes, ending: Callable[[], None] = _nothing
    ) -> str:
        """Deliver ``message``; return the server's reply or raise one of the failures above.

        ``ending`` is called once everything but the end of data is written, right before
        the point from which the server may accept the message; if it raises, nothing more
        is written.
        """
        ...

    def close(self) -> None: ...

    def usable(self) -> bool:
        """Whether an idle connection can take another message (kept from one batch to the
        next, the server may have closed it meanwhile)."""
        ...


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
        try:
            smtp: smtplib.SMTP
            if self.security == "tls":
                context = self.tls_context or default_tls_context()
                smtp = smtplib.SMTP_SSL(
                    self.host, self.port, ehlo_name(), timeout=self.timeout, context=context
                )
            else:
                smtp = smtplib.SMTP(self.host, self.port, ehlo_name(), timeout=self.timeout)
            smtp.ehlo()
            if self.security == "starttls":
                smtp.starttls(context=self.tls_context or default_tls_context())
                smtp.ehlo()
            if self.username:
                smtp.login(self.username, self.password or "")
            # The end of data goes out on its own, at once: not held back (Nagle) behind a
            # body the server acknowledges only later.
            assert smtp.sock is not None  # connected above
            smtp.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except smtplib.SMTPAuthenticationError as exc:
            reply = _reply(exc.smtp_code, exc.smtp_error)
            raise DeliveryError(f"SMTP login to {self.host}:{self.port} refused: {reply}") from None
        except smtplib.SMTPConnectError as exc:  # a greeting other than 220
            reply = _reply(exc.smtp_code, exc.smtp_error)
            # the reply first, so that a 421 at the greeting reads as one (``throttling``)
            raise TemporaryFailure(f"{reply} (the greeting of {self.host}:{self.port})") from None
        except (smtplib.SMTPException, OSError) as exc:
            reply = f"cannot reach the SMTP server {self.host}:{self.port} ({exc})"
            raise TemporaryFailure(reply) from None
        return SmtpTransport(smtp, f"{self.host}:{self.port}")


@cache
def ehlo_name() -> str:
    """This host's name as EHLO gives it (smtplib's own choice), looked up once per process:
    the lookup took longer than a message, for every connection."""
    return socket.getfqdn()


@cache
def default_tls_context() -> ssl.SSLContext:
    """The system's trust store, loaded once per process: loading it takes longer than sending
    a message, and a send opens connections all the time (a worker for each batch)."""
    return ssl.create_default_context()


def _reply(code: int, text: bytes | str) -> str:
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return f"{code} {' '.join(text.split())}"


def _dot_stuffed(message: bytes) -> bytes:
    """Each line that begins with a dot, with one more (RFC 5321 4.5.2), so that none reads as
    the end of data. A digest has such lines in every message (a quoted-printable line break
    before a full stop): a plain replace, not a regex, which was a fifth of a worker's time."""
    stuffed = message.replace(b"\n.", b"\n..")
    return b"." + stuffed if stuffed.startswith(b".") else stuffed


class SmtpTransport:
    """One persistent SMTP connection.

    The DATA step is spelled out (not ``sendmail``) to tell the two kinds of dropped connection
    apart. The message is written in two steps: the body, then, once ``ending`` has recorded
    that the end is near and the connection is seen to be still open, the final dot on its own.
    A connection lost before the dot was written is retried: the server cannot have accepted
    a message whose end it never saw.

    The look before the dot often comes too soon: a body that fits the socket's buffers is
    written at once, and a server that hangs up after its first lines does so later. So a
    connection that ends after the dot, before a byte of the reply, is judged by what TCP
    shows of it (``_await_reply``), and only the server's own reading of the dot counts:

    - a reset: the server's kernel closed its socket with bytes of ours unread (it resets
      instead of sending a FIN then), or they reached it closed. We write nothing after the
      dot, so the dot was among them: the server never read it. Retried.
    - its end of stream (FIN), with bytes of ours not acknowledged: a FIN acknowledges all
      its sender had received, so the server had closed before the dot reached it, and a
      closed socket takes no more. Retried.
    - its end of stream with everything acknowledged: the server read the dot, then closed.
      Uncertain, as is any other loss after the dot (a timeout, a TLS error, a reply cut off).

    What is left, all reported uncertain though not accepted (the error can only ever keep a
    message back): a server that read the dot and dropped it; a TLS server that says
    close_notify before it hangs up (the look is at the TCP stream, and its first bytes are
    then that alert); outside Linux, where our unacknowledged bytes cannot be counted, an end
    of stream not followed by a reset yet. The one case that could send a message twice is a
    reset that is not the server's kernel's: a proxy or load balancer between that resets the
    connection after passing the dot on (an abortive close; an idle timeout shorter than
    ``timeout``).
    """

    def __init__(self, smtp: smtplib.SMTP, server: str = "the server") -> None:
        self.smtp = smtp
        self.server = server
        self._in_data = False
        """Between the 354 and the reply to the end of data: a QUIT now would be data."""

    def send(
        self, sender: str, recipient: str, message: bytes, ending: Callable[[], None] = _nothing
    ) -> str:
        mail_from, rcpt_to, utf8 = self._envelope(sender, recipient)
        try:
            self._begin_data(mail_from, rcpt_to, utf8)
            body = _dot_stuffed(message)
            if not body.endswith(b"\r\n"):
                body += b"\r\n"
            self._write(body)
        except (smtplib.SMTPServerDisconnected, OSError) as exc:
            raise TemporaryFailure(f"connection lost: {exc}", reconnect=True) from None
        ending()
        try:
            self._check_open()
            self._write(b".\r\n")
        except (smtplib.SMTPServerDisconnected, OSError) as exc:
            reply = f"connection lost before the end of data: {exc}"
            raise TemporaryFailure(reply, reconnect=True) from None
        self._await_reply()
        try:
            code, text = self.smtp.getreply()
        except Exception as exc:  # the end of data is out: whatever happens, it may have arrived
            raise LostInFlight(f"connection lost after the end of data: {exc}") from None
        self._in_data = False
        if code != 250:
            self._refused(code, text)
        return _reply(code, text)

    def _envelope(self, sender: str, recipient: str) -> tuple[str, str, bool]:
        """MAIL FROM and RCPT TO as they travel, and whether they need SMTPUTF8; a
        PermanentFailure (not a bounce) when this server cannot take them."""
        if "\r" in recipient or "\n" in recipient or "\r" in sender or "\n" in sender:
            raise PermanentFailure(f"refused: line break in address {recipient!r}", bounce=False)
        try:
            mail_from, utf8_sender = smtp_address(sender)
            rcpt_to, utf8_recipient = smtp_address(recipient)
        except ValueError as exc:
            raise PermanentFailure(f"not sent: {exc}", bounce=False) from None
        utf8 = utf8_sender or utf8_recipient
        if utf8 and not self.smtp.has_extn("smtputf8"):
            raise PermanentFailure(
                f"not sent: {self.server} does not offer SMTPUTF8, which an address with a "
                "non-ASCII part before @ needs",
                bounce=False,
            )
        return mail_from, rcpt_to, utf8

    def _begin_data(self, mail_from: str, rcpt_to: str, utf8: bool) -> None:
        """MAIL, RCPT and DATA, up to the 354; a refusal raises (see ``_refused``).

        To a server that offers PIPELINING (RFC 2920: Postfix, Exim, every large relay) the
        three go out together and their replies are read together: one round trip a message
        instead of three, which is most of a connection's time where the relay is across a
        network."""
        smtp = self.smtp
        if utf8:
            smtp.command_encoding = "utf-8"  # as smtplib's mail() does; rset() resets it
        # bare addresses already (``_envelope``): smtplib's quoteaddr would parse each again
        mail = f"FROM:<{mail_from}>{' SMTPUTF8' if utf8 else ''}"
        rcpt = f"TO:<{rcpt_to}>"
        replies: list[tuple[int, bytes]] = []
        if smtp.has_extn("pipelining"):
            smtp.send(f"MAIL {mail}\r\nRCPT {rcpt}\r\nDATA\r\n")
            while len(replies) < 3 and (not replies or replies[-1][0] != 421):
                replies.append(smtp.getreply())  # after a 421 the server hangs up
        else:
            for command, args, accepted in (("mail", mail, (250,)), ("rcpt", rcpt, (250, 251))):
                replies.append(smtp.docmd(command, args))
                if replies[-1][0] not in accepted:
                    break
            else:
                replies.append(smtp.docmd("DATA"))
        (mail_code, mail_text), *rest = replies
        in_data = len(replies) == 3 and replies[2][0] == 354
        if mail_code != 250:
            self._refused(mail_code, mail_text, sender_step=True, in_data=in_data)
        rcpt_code, rcpt_text = rest[0]
        if rcpt_code not in (250, 251):
            self._refused(rcpt_code, rcpt_text, in_data=in_data)
        data_code, data_text = rest[1]
        if data_code != 354:
            self._refused(data_code, data_text)
        self._in_data = True

    def _write(self, data: bytes) -> None:
        if self.smtp.sock is None:
            raise smtplib.SMTPServerDisconnected("not connected")
        self.smtp.sock.sendall(data)

    def _check_open(self) -> None:
        """Raise OSError if the server has already closed the connection (nothing is to be read
        during DATA but its end or a reset). Under TLS, bytes waiting may be a TLS record, so
        only the end of the stream counts."""
        sock = self.smtp.sock
        if sock is None:
            raise smtplib.SMTPServerDisconnected("not connected")
        waiting = select.select([sock], [], [], 0)[0]
        if waiting and not socket.socket.recv(sock, 1, socket.MSG_PEEK):
            raise OSError("closed by the server during the data")

    def _await_reply(self) -> None:
        """Wait for the reply to the end of data to begin; a TemporaryFailure if the
        connection ends first in a way that shows the server never read the dot, LostInFlight
        if it ends otherwise (see the class docstring).

        The look is a peek at the TCP stream, under TLS too, before anything reads from it:
        OpenSSL answers an end of stream without close_notify with an alert of its own, which
        would be a byte of ours unacknowledged after the dot."""
        sock = self.smtp.sock
        if sock is None:
            raise LostInFlight("connection lost after the end of data: not connected")
        try:
            begun = socket.socket.recv(sock, 1, socket.MSG_PEEK)  # waits up to ``timeout``
        except ConnectionResetError:
            reply = "connection reset by the server, which never read the end of data"
            raise TemporaryFailure(reply, reconnect=True) from None
        except OSError as exc:
            raise LostInFlight(f"connection lost after the end of data: {exc}") from None
        if begun:
            return
        if self._closed_before_the_end(sock):
            reply = "connection closed by the server before the end of data reached it"
            raise TemporaryFailure(reply, reconnect=True)
        raise LostInFlight("connection lost after the end of data: closed by the server")

    @staticmethod
    def _closed_before_the_end(sock: socket.socket) -> bool:
        """After the server's end of stream: whether the dot reached it only after its close.
        Bytes of ours it had not acknowledged (Linux: SIOCOUTQ) were not in what its FIN
        acknowledged; a reset behind the FIN (EPIPE, once the FIN is in) is its kernel
        answering them on the closed socket. Else False: uncertain."""
        try:
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error in (errno.EPIPE, errno.ECONNRESET):
                return True
            if sys.platform == "linux":
                unacknowledged = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, bytes(4))
                return struct.unpack("i", unacknowledged)[0] > 0
        except OSError:
            pass
        return False

    def _refused(
        self, code: int, text: bytes, *, sender_step: bool = False, in_data: bool = False
    ) -> NoReturn:
        """Raise what a refusal means; ``in_data``: a server that took DATA (354) after
        refusing the sender or the recipient, which only dropping the connection ends without
        a message."""
        reply = _reply(code, text)
        if code == 421 or in_data:
            if in_data:
                self.smtp.close()
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

    def usable(self) -> bool:
        """Connected, between messages, and nothing from the server since its last reply: an
        idle connection it timed out has its 421 or its close waiting to be read."""
        sock = self.smtp.sock
        return sock is not None and not self._in_data and not select.select([sock], [], [], 0)[0]

    def close(self) -> None:
        """QUIT, or, in the middle of the data, drop the connection: the server then discards
        the message whose end it never saw."""
        if self._in_data:
            self.smtp.close()
            return
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

    def send(
        self, sender: str, recipient: str, message: bytes, ending: Callable[[], None] = _nothing
    ) -> str:
        if "\r" in recipient or "\n" in recipient:
            raise PermanentFailure(f"refused: line break in address {recipient!r}", bounce=False)
        ending()
        with self._lock:
            if self._box is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._box = mailbox.Maildir(self.path, create=True)
            key = self._box.add(message)
            make_private(self.path / "new" / key)  # its reader's address and links
        return f"250 stored in {self.path} as {key}"

    def usable(self) -> bool:
        return True

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
    stopped: bool = False
    """The run was asked to stop: what was not taken yet stays pending."""
    left: int = 0
    """Deliveries still pending when the run ended (for the next run)."""

    def add(self, status: str, email: str = "", reply: str = "") -> None:
        setattr(self, status, getattr(self, status) + 1)
        if status in ("failed", "uncertain"):
            self.failures.append((email, reply))


SLOW_DOWN = 0.7
"""A slow-down reply cuts the rate to this share of what it was."""
CUT_INTERVAL = 1.0
"""Seconds after a cut in which slow-down replies cut nothing more: they answer messages sent
before it took effect (every connection hears the relay at once)."""

_TEMPORARY_REPLY = re.compile(r"4\d\d(?:[ -]|$)")
_SLOW_DOWN_STATUS = re.compile(r"4\d\d[ -]4\.7\.\d{1,3}\b")
"""An enhanced status 4.7.x (RFC 3463: security or policy), where relays put their rate and
connection limits: Gmail's 421 4.7.28, Microsoft's 451 4.7.500, Postfix's 450 4.7.1 "too much
mail from"."""
_SLOW_DOWN_WORDS = re.compile(
    r"\brate[- ]?limit|\b(?:sending|send|message|connection|maximum) rate\b"
    r"|\btoo many (?:[\w-]+ ){0,3}?(?:connections|messages|sessions)\b|\btoo much mail\b"
    r"|\bthrottl|\bslow(?:ing)? down\b",
    re.IGNORECASE,
)
"""Replies without a 4.7.x that speak of the sender's rate or connections: "Rate limit
exceeded", Exim's "Too many concurrent SMTP connections", Amazon SES's "454 Throttling
failure: Maximum sending rate exceeded", "try again later, slow down"."""
_GREYLISTING = re.compile(r"gr[ae]y[- ]?list", re.IGNORECASE)
"""Greylisting is about one (sender, recipient, client) triplet, whatever its status says
(often 4.7.1): waiting between messages never shortens it."""


def throttling(reply: str) -> bool:
    """Whether a temporary failure is the relay asking its senders to slow down, which cuts
    the rate of every connection: a 421 (the relay closes the connection: too many
    connections or messages), an enhanced status 4.7.x, or a 4xx that speaks of rate, too
    many connections or messages, throttling or slowing down. Any other 4xx (a plain 451,
    greylisting, a full mailbox) is one reader's: that reader alone is retried, later, and
    the rate is left as it is; cutting it for each of them took a send with 5 % greylisted
    readers from 7 s to 193 s. A lost connection says nothing of the kind either."""
    if _TEMPORARY_REPLY.match(reply) is None:
        return False
    if reply.startswith("421"):
        return True
    if _GREYLISTING.search(reply):
        return False
    status = _SLOW_DOWN_STATUS.match(reply) is not None
    return status or _SLOW_DOWN_WORDS.search(reply) is not None


@dataclass(frozen=True)
class SlowDown:
    """How a rate falls on slow-down replies and climbs back (AIMD): each cut to
    ``SLOW_DOWN`` of what it is, never below ``min_rate``; then back up linearly, by the full
    rate every ``recover_seconds`` (so a cut to 70 % is undone in 30 % of it)."""

    min_rate: float = 1.0
    recover_seconds: float = 600.0

    def cut(self, rate: float, current: float) -> float:
        """The rate after a cut from ``current`` (``rate`` is the configured one)."""
        return max(min(self.min_rate, rate), current * SLOW_DOWN)

    def climbed(self, rate: float, cut_rate: float, since: float) -> float:
        """The rate ``since`` seconds after a cut to ``cut_rate``."""
        return min(rate, cut_rate + rate * max(since, 0.0) / self.recover_seconds)


@dataclass(frozen=True)
class SendOptions:
    sender: str
    """Envelope sender (MAIL FROM), a bare address."""
    workers: int = 4
    micro_batch: int = 1
    """Deliveries each worker claims (marks in flight) at once: one commit for so many, and
    so many uncertain at most if the run dies."""
    rate: float = 50.0
    """Messages per second at most, across all workers."""
    retries: int = 3
    backoff: float = 1.0
    """Seconds before the first retry of a temporary failure; doubles each time."""
    max_bounces: int = 3
    bounce_window: timedelta = BOUNCE_WINDOW
    """A reader's counted bounces older than this are forgotten at the next one."""
    return_path: Callable[[Claim], str] | None = None
    """The envelope sender of each delivery (VERP, for bounces); ``sender`` when None."""
    slow_down: SlowDown = SlowDown()
    """How the ``Pacer`` backs off on slow-down replies (a shared pace has its own)."""
    pace: Pace | None = None
    """What spaces the sends; None: a ``Pacer`` at ``rate`` for this run alone."""


Pause = Callable[[float], bool]
"""Wait so many seconds; False (at once) when the run is stopping."""

DATABASE_PATIENCE = 60.0
"""Seconds a worker whose database failed waits for it to answer again, to commit what it
holds (``_Run.settle``); what it could not is left in flight, uncertain at the next run."""


class Pace(Protocol):
    """Waits for a sender's turn: ``Pacer`` within one run, or a rate shared by runs."""

    def wait(self, pause: Pause) -> bool: ...

    def slowed(self, reply: str) -> None:
        """The relay answered ``reply``, a slow-down reply (``throttling``): lower the rate."""
        ...


class Pacer:
    """Spaces sends ``1/rate`` seconds apart across threads; slower for a while after the
    relay asks to slow down (``slow_down``)."""

    def __init__(
        self,
        rate: float,
        slow_down: SlowDown = SlowDown(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.slow_down = slow_down
        self.clock = clock
        self.cut: tuple[float, float] | None = None
        """The rate the last cut left, and when (``clock``)."""
        self.next = clock()
        self.lock = threading.Lock()

    def wait(self, pause: Pause) -> bool:
        """Wait for this sender's slot; False when the run stops meanwhile."""
        with self.lock:
            now = self.clock()
            slot = max(self.next, now)
            self.next = slot + 1.0 / self._current(now)
        return pause(slot - now) if slot > now else True

    def current(self) -> float:
        """The rate now: ``rate``, or less after a cut."""
        with self.lock:
            return self._current(self.clock())

    def slowed(self, reply: str) -> None:
        """Cut the rate, unless it was cut less than ``CUT_INTERVAL`` ago."""
        with self.lock:
            now = self.clock()
            if self.cut is None or now - self.cut[1] >= CUT_INTERVAL:
                self.cut = (self.slow_down.cut(self.rate, self._current(now)), now)

    def _current(self, now: float) -> float:
        if self.cut is None:
            return self.rate
        cut_rate, at = self.cut
        return self.slow_down.climbed(self.rate, cut_rate, now - at)


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
    stop: threading.Event | None = None,
    batch: Batch | None = None,
    standing: Senders | None = None,
) -> DeliveryCounts:
    """Send every pending delivery (with ``batch``: that batch's), each recorded right after
    the server's answer; with ``standing``, on those senders (a worker process's), not on
    threads of this call's own.

    Deliveries left in flight by a run that died (their end of data was written) are marked
    uncertain first, never resent. ``progress`` hears the outcome of each delivery; ``counts``
    (a new one by default) adds them up. Once ``stop`` is set, no delivery is taken any
    more; the messages on the wire finish (bounded by the transport's timeout)
    and their replies are recorded. Raises DeliveryError when the server cannot be used at all
    (unreachable, login or sender refused) and DatabaseError when the database fails; both say
    how many were sent and how many are left for the next run, which are kept pending (after
    a database failure, once it answers again: see ``_Run.settle``).
    """
    counts = DeliveryCounts() if counts is None else counts
    run = _Run(store, mailer, compose, options, now, progress, counts, stop, batch)
    return run.go(standing)


class _Run:
    """One call of ``deliver``: what its workers share (the pace, the issues, the counts, the
    stop), and how it ends."""

    def __init__(
        self,
        store: Store,
        mailer: Mailer,
        compose: Compose,
        options: SendOptions,
        now: datetime,
        progress: Progress | None,
        counts: DeliveryCounts,
        stop: threading.Event | None,
        batch: Batch | None = None,
    ) -> None:
        self.store = store
        self.batch = batch
        self.mailer = mailer
        self.compose = compose
        self.options = options
        self.now = now
        self.progress = progress
        self.counts = counts
        self.stop = stop
        self.pacer: Pace = options.pace or Pacer(options.rate, options.slow_down)
        self.lock = threading.Lock()
        self.halt = threading.Event()
        """Set when a worker met a failure that stops them all."""
        self.fatal: list[BaseException] = []
        self.settled = 0
        """Deliveries that ended this run (sent, failed, uncertain, skipped: not deferred)."""
        self.workers = 0
        """The run's workers (connections), once it knows what is pending."""
        self.unclaimed = 0
        """Deliveries pending at the start that no worker has claimed yet (about)."""
        self.issues: dict[int, Issue] = {}
        self.senders: list[_Sender] = []

    def go(self, standing: Senders | None = None) -> DeliveryCounts:
        """Send the run's deliveries on threads of its own, or (``standing``) on a worker
        process's standing senders, as part of their run."""
        store, now, counts = self.store, self.now, self.counts
        pending = 0
        left: int | None = None
        try:
            with ExitStack() as stack:
                if standing is not None:
                    run_id = standing.run_id(now)
                else:
                    run_id = stack.enter_context(store.send_run(now))
                counts.uncertain += store.mark_lost(run_id, now, self.batch)
                counts.skipped += store.skip_inactive(now, self.batch)
                pending = store.pending_count(now, self.batch)
                if self.progress is not None:
                    self.progress.start(pending)
                self.workers = min(self.options.workers, pending)
                self.unclaimed = pending
                if standing is not None:
                    if pending:
                        standing.send(self)
                else:
                    threads = [
                        threading.Thread(target=self.work, args=(run_id,))
                        for _ in range(self.workers)
                    ]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                if pending and not self.fatal:
                    # read, not worked out: what another run at once sent or holds is not left
                    left = store.pending_count(now, self.batch)
        except DatabaseError as exc:  # before the workers started, or after they ended
            self.fatal.append(exc)
        return self._ended(pending, left)

    def _ended(self, pending: int, left: int | None = None) -> DeliveryCounts:
        """The counts, or the failure that stopped the run, saying what it kept (``left``:
        the deliveries still pending, when the run could read them)."""
        counts = self.counts
        counts.stopped = self.stop is not None and self.stop.is_set()
        counts.left = pending - self.settled if left is None else left
        kept = f"{counts.sent:,} sent, {counts.left:,} left for the next run"
        if not pending and self.fatal:
            kept = f"{counts.sent:,} sent; what is pending is kept for the next run"
        if self.fatal:
            first = self.fatal[0]
            if isinstance(first, DatabaseError | DeliveryError):
                raise type(first)(f"{first}; {kept}") from first
            raise first
        unreachable = [sender.unreachable for sender in self.senders if sender.unreachable]
        if self.senders and len(unreachable) == len(self.senders):  # none could connect
            raise DeliveryError(f"{unreachable[0]}; {kept}")
        return counts

    def work(self, run_id: int) -> None:
        """One worker: its own connection to the server and to the database, for the run."""
        try:
            with self.store.ledger(run_id, self.batch) as ledger:
                self.work_with(ledger)
        except BaseException as exc:  # the ledger's session could not be had or given back
            self.failed(exc)

    def work_with(self, ledger: Ledger) -> bool:
        """Send through ``ledger`` until nothing is left to claim or the run stops (True), or
        this worker cannot reach the server (False: the others may still)."""
        sender = _Sender(self)
        with self.lock:
            self.senders.append(sender)
        work = _Work(self, ledger)
        try:
            # Wait for the slot and the connection first, then claim: nothing is in flight
            # while the worker waits for either before a micro-batch.
            while not self.stopping() and self.pacer.wait(self.pause):
                if sender.transport is None and not sender.reconnect():
                    break
                if (turn := work.next()) is None:
                    break
                claim, attempt = turn
                if (reply := sender.send(ledger, claim)) is not None:
                    work.retry(claim, attempt + 1, reply)
        except BaseException as exc:
            self.failed(exc)
        finally:
            sender.close()  # a message cut off before its end of data is dropped with it
            self.settle(ledger, [claim.id for claim in (*sender.unwritten(), *work.claimed)])
            work.leave()
        return not sender.unreachable

    def settle(self, ledger: Ledger, unwritten: list[int]) -> None:
        """Commit what this worker holds: the outcomes it noted and, pending again, the rows
        it never wrote the end of data of (claimed and not tried, or stopped before the end).

        If the database fails it, the worker stops the run and makes the same commit on a new
        session as soon as the database answers again (for ``DATABASE_PATIENCE`` seconds at
        most, not past a stop), fenced by the run: a row another run has settled meanwhile is
        left as it is. Only what it could not commit stays in flight, to be marked uncertain.
        """
        try:
            ledger.flush(self.now, unwritten)
            return
        except DatabaseError as exc:
            if not self.halt.is_set():
                self.failed(exc)
            held = ledger.holding(unwritten)
            logger.warning("%s; %d delivery(ies) wait for the database to answer again", exc, held)
        end = time.monotonic() + DATABASE_PATIENCE
        wait = 0.0
        while True:
            try:
                ledger.reopen()
                ledger.flush(self.now, unwritten)
                logger.info("the database answers again: %d delivery(ies) settled", held)
                return
            except DatabaseError as exc:
                wait = min(max(2 * wait, 0.1), 5.0)
                if time.monotonic() + wait > end or not self.wait_for_database(wait):
                    logger.warning("%s; %d delivery(ies) left in flight", exc, held)
                    return

    def wait_for_database(self, seconds: float) -> bool:
        """Wait so many seconds; False (at once) when the run is asked to stop."""
        if self.stop is None:
            time.sleep(seconds)
            return True
        return not self.stop.wait(seconds)

    def failed(self, exc: BaseException) -> None:
        """The database gone, the server refusing us, a bug: every worker stops. What each
        was sure it never wrote is pending again (``settle``); what it could not commit is
        settled at the next run, never resent blindly."""
        self.fatal.append(exc)
        self.halt.set()

    def claim_size(self) -> int:
        """``micro_batch``, but no more than a worker's share of what is left, so that the
        workers run out together: the last micro-batch of a batch is not sent by one
        connection while the others are done."""
        with self.lock:
            share = -(-self.unclaimed // self.workers)  # rounded up
        return max(1, min(self.options.micro_batch, share))

    def claimed(self, count: int) -> None:
        with self.lock:
            self.unclaimed -= count

    def stopping(self) -> bool:
        return self.halt.is_set() or (self.stop is not None and self.stop.is_set())

    def pause(self, seconds: float) -> bool:
        """A ``Pause``: wait so many seconds; False (at once) when the run is stopping."""
        end = time.monotonic() + seconds
        while not self.stopping():
            left = end - time.monotonic()
            if left <= 0:
                return True
            self.halt.wait(min(left, 0.1))
        return False

    def outcome(self, status: str, email: str = "", reply: str = "") -> None:
        with self.lock:
            self.counts.add(status, email, reply)
            if status != "deferred":
                self.settled += 1
        if self.progress is not None:
            self.progress.advance(status)

    def issue_of(self, issue_id: int) -> Issue:
        with self.lock:
            if issue_id not in self.issues:
                found = self.store.issue(issue_id)
                assert found is not None, f"delivery of unknown issue {issue_id}"
                self.issues[issue_id] = found
            return self.issues[issue_id]

    def connect(self) -> Transport | str | None:
        """A new connection, retried with backoff; else why the server cannot be reached, or
        None when the run stops meanwhile."""
        last = ""
        for attempt in range(self.options.retries + 1):
            if attempt and not self.pause(self.options.backoff * 2 ** (attempt - 1)):
                return None
            try:
                return self.mailer.open()
            except TemporaryFailure as exc:
                last = exc.reply
                if throttling(exc.reply):  # a 421 at the greeting: too many connections
                    self.pacer.slowed(exc.reply)
        return last


@dataclass(eq=False)
class _Turn:
    """A run queued on standing senders, and which of their threads are at it."""

    run: _Run
    batch: Batch
    active: int = 0
    """Threads sending its deliveries now."""
    left: set[int] = field(default_factory=set)
    """Threads done with it (they take it up no more)."""
    over: bool = False
    """Nothing of it is left to claim, or it stops."""
    done: bool = False


class Senders:
    """Sender threads, each with its ledger session, that outlive a batch: a worker process's
    ``smtp.pool_size``, all in one send run.

    With threads of each batch's own, a batch's connections sat idle from the moment each ran
    out of rows until the slowest had finished, the run had ended, the job was done, the next
    one fetched and its run begun: a quarter of a worker's time at batches of 500. Here a
    thread that finds nothing left to claim in one batch takes up the next batch queued
    (``send``, from the jobs in progress at once). Their rows given back after retries wait
    for a later run of their batch, which has a later ``now`` (``_NEXT``).

    A failure that stops a batch (the database, the server refusing us, a bug) retires them:
    they take up no further batch, and once the last thread is done the run ends, so what the
    failed batch left in flight can be settled by the next run of it; the batches queued and
    not begun are left pending, to be tried again. The caller makes new ones for new batches.
    """

    def __init__(self, store: Store, workers: int) -> None:
        self.store = store
        self.workers = workers
        self.changed = threading.Condition()
        self.queue: list[_Turn] = []
        self.threads: list[threading.Thread] = []
        self.alive = 0
        self.retired = False
        self._run = ExitStack()
        self._run_id: int | None = None

    def run_id(self, now: datetime) -> int:
        """The senders' run (begun with the first batch)."""
        with self.changed:
            if self._run_id is None:
                self._run_id = self._run.enter_context(self.store.send_run(now))
            return self._run_id

    def send(self, run: _Run) -> None:
        """Have the threads send ``run``'s deliveries; returns once they are done with it."""
        assert run.batch is not None, "standing senders send batches"
        turn = _Turn(run, run.batch)
        with self.changed:
            if not self.threads:
                for _ in range(self.workers):
                    self.threads.append(threading.Thread(target=self._serve, daemon=True))
                    self.threads[-1].start()
                self.alive = self.workers
            self.queue.append(turn)
            self._settle()
            while not turn.done:
                self.changed.wait()

    def _serve(self) -> None:
        me = threading.get_ident()
        turn = self._next(me)
        try:
            if turn is not None:
                assert self._run_id is not None  # begun by the run's go
                with self.store.ledger(self._run_id, turn.batch) as ledger:
                    while turn is not None:
                        ledger.for_batch(turn.batch)
                        over = turn.run.work_with(ledger)
                        self._left(turn, me, over)
                        turn = self._next(me)
        except BaseException as exc:  # its session could not be had, or given back
            if turn is not None:
                turn.run.failed(exc)
                self._left(turn, me, True)
            else:
                logger.warning("a sender's database session failed: %s", exc)
            with self.changed:
                self.retired = True
        finally:
            with self.changed:
                self.alive -= 1
                self._settle()

    def _next(self, me: int) -> _Turn | None:
        """The first queued run this thread may take up; None once they retire or close."""
        with self.changed:
            while not self.retired:
                for turn in self.queue:
                    if not turn.over and me not in turn.left:
                        turn.active += 1
                        return turn
                self.changed.wait()
            return None

    def _left(self, turn: _Turn, me: int, over: bool) -> None:
        with self.changed:
            turn.active -= 1
            turn.left.add(me)
            turn.over = turn.over or over
            if turn.run.fatal:
                self.retired = True
            self._settle()

    def _settle(self) -> None:
        """Under ``changed``: the runs no thread will take up any more are done; once the
        senders retired and their last thread is done, their run ends."""
        for turn in list(self.queue):
            if turn.active == 0 and (turn.over or self.retired or len(turn.left) >= self.alive):
                turn.done = True
                self.queue.remove(turn)
        self.changed.notify_all()
        if self.retired and not self.alive:
            self._end_run()

    def _end_run(self) -> None:
        try:
            self._run.close()  # once: the stack is empty after
        except DatabaseError as exc:  # its sessions end with the process all the same
            logger.warning("the senders' run did not end cleanly: %s", exc)

    def close(self) -> None:
        """Once no batch is in progress any more: the threads end, and the run."""
        with self.changed:
            self.retired = True
            self._settle()
        for thread in self.threads:
            thread.join()
        with self.changed:
            self._end_run()


class _Work:
    """What one worker sends next: its claimed micro-batch and the deliveries it gave back
    after a temporary failure, each tried again once its backoff is over (doubling each
    time), meanwhile the connection sends the others: a reader refused for a while
    (greylisting, a full mailbox) never holds it. Past ``retries``, left for the next run."""

    def __init__(self, run: _Run, ledger: Ledger) -> None:
        self.run = run
        self.ledger = ledger
        self.claimed: deque[Claim] = deque()
        self.later: list[_Retry] = []

    def next(self) -> tuple[Claim, int] | None:
        """The delivery to try now, and its attempt: a retry whose backoff is over, else a
        claimed one (claiming more when none is left), else the first retry once its backoff
        is over; None when nothing is left or the run stops."""
        run = self.run
        while True:
            if self.later and self.later[0].at <= time.monotonic():
                retry = heapq.heappop(self.later)
                if self.ledger.take_back(retry.claim.id, run.now):
                    return retry.claim, retry.attempt
                run.outcome("deferred", retry.claim.email, retry.reply)  # another run's now
                continue
            if not self.claimed:
                self.claimed.extend(self.ledger.claim(run.now, run.claim_size()))
                run.claimed(len(self.claimed))
            if self.claimed:
                return self.claimed.popleft(), 0
            if not self.later or not run.pause(self.later[0].at - time.monotonic()):
                return None

    def retry(self, claim: Claim, attempt: int, reply: str) -> None:
        """``claim`` was given back after a temporary failure: try it again after its
        backoff, or, past ``retries``, leave it for the next run."""
        options = self.run.options
        if attempt > options.retries:
            self.run.outcome("deferred", claim.email, reply)
            return
        at = time.monotonic() + options.backoff * 2 ** (attempt - 1)
        heapq.heappush(self.later, _Retry(at, claim.id, attempt, claim, reply))

    def leave(self) -> None:
        """The run ends: the retries still waiting are pending (given back), for the next."""
        for retry in self.later:
            self.run.outcome("deferred", retry.claim.email, retry.reply)


@dataclass(order=True, frozen=True, slots=True)
class _Retry:
    """A delivery given back after a temporary failure, to be tried again at ``at``
    (``time.monotonic``)."""

    at: float
    delivery_id: int
    attempt: int = field(compare=False)
    claim: Claim = field(compare=False)
    reply: str = field(compare=False)
    """The temporary failure's reply, said if it is left for the next run."""


class _Sender:
    """One worker's connection and the sending of the deliveries it takes, with retries."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.transport: Transport | None = None
        self.unreachable = ""
        """Why the server could not be reached, once this worker gave up on it."""
        self.in_hand: Claim | None = None
        """The delivery ``send`` is at, until it returns."""
        self.ended = False
        """The current try's end of data is out, or about to be, and its outcome not noted."""

    def reconnect(self) -> bool:
        """A new connection; False when the server is out of reach or the run stops."""
        self.close()
        if self.unreachable:
            return False
        got = self.run.connect()
        if isinstance(got, str):
            self.unreachable = got
        elif got is not None:
            self.transport = got
        return self.transport is not None

    def close(self) -> None:
        if self.transport is not None:
            transport, self.transport = self.transport, None
            transport.close()

    def unwritten(self) -> list[Claim]:
        """The delivery in hand if ``send`` stopped before its end of data (the database
        failed, or the run is asked to stop): never written, so pending again."""
        return [self.in_hand] if self.in_hand is not None and not self.ended else []

    def send(self, ledger: Ledger, claim: Claim) -> str | None:
        """Try one reserved delivery and note how it ended (a 250 with the next commit);
        after a temporary failure, the reply (the row is given back, pending, to be tried
        again later: nothing is held meanwhile), else None.

        Whatever goes wrong with this one message fails this one delivery only (the database
        failing is not about the message: it stops the run).
        """
        self.in_hand = claim
        reply = self._send(ledger, claim)
        self.in_hand = None
        return reply

    def _send(self, ledger: Ledger, claim: Claim) -> str | None:
        run = self.run
        issue = run.issue_of(claim.issue_id)
        try:
            message = run.compose(issue, claim)
        except Exception as exc:  # a message that cannot be built must not stop the others
            failure = f"cannot build the message: {exc}"
            ledger.finish(claim.id, "failed", failure, run.now)
            run.outcome("failed", claim.email, failure)
            return None
        options = run.options
        sender = options.return_path(claim) if options.return_path else options.sender
        reply = self._attempt(ledger, claim, sender, message)
        self.ended = False  # its outcome is noted, or it was given back
        return reply

    def _attempt(self, ledger: Ledger, claim: Claim, sender: str, message: bytes) -> str | None:
        """One try: None when the delivery is settled, else the temporary failure's reply (the
        row is given back)."""
        run, now = self.run, self.run.now
        self.ended = False
        assert self.transport is not None
        try:
            reply = self.transport.send(
                sender, claim.email, message, lambda: self._end_of_data(ledger)
            )
        except TemporaryFailure as exc:
            if exc.reconnect:
                self.close()
            ledger.give_back(claim.id, exc.reply, now)
            if throttling(exc.reply):
                run.pacer.slowed(exc.reply)
            return exc.reply
        except PermanentFailure as exc:
            if exc.bounce:
                limit, window = run.options.max_bounces, run.options.bounce_window
                ledger.bounce(claim.id, claim.subscriber_id, exc.reply, limit, now, window)
            else:
                ledger.finish(claim.id, "failed", exc.reply, now)
            run.outcome("failed", claim.email, exc.reply)
            return None
        except DatabaseError:
            raise
        except DeliveryError as exc:  # the server refuses us: give the row back, stop
            ledger.give_back(claim.id, str(exc), now)
            raise
        except Exception as exc:
            self._broken(ledger, claim, exc)
            return None
        ledger.sent(claim.id, reply, now)
        run.outcome("sent", claim.email, reply)
        return None

    def _end_of_data(self, ledger: Ledger) -> None:
        """The transport's ``ending``: from now on the message may be accepted; unless this
        worker's database session has ended, which raises (nothing more is written: the
        run's rows may be being settled by another, and this one is pending again)."""
        ledger.check_session()
        self.ended = True

    def _broken(self, ledger: Ledger, claim: Claim, exc: Exception) -> None:
        """Anything else went wrong: uncertain if the end of data may be out, else failed."""
        self.close()  # the connection is in an unknown state
        if isinstance(exc, LostInFlight):
            status, reply = "uncertain", str(exc)
        elif self.ended:  # the end of data may be out
            status, reply = "uncertain", f"after the end of data: {exc!r}"
        else:
            status, reply = "failed", f"not sent: {exc!r}"
        ledger.finish(claim.id, status, reply, self.run.now)
        self.run.outcome(status, claim.email, reply)


def envelope_sender(sender: str) -> str:
    """The bare address of a From header value, for MAIL FROM."""
    address = parseaddr(sender)[1]
    if not address or "\r" in address or "\n" in address:
        raise DeliveryError(f"email.sender has no usable address: {sender!r}")
    return address
