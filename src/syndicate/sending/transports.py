"""Transports: where a finished message goes, an SMTP server (a pool of persistent connections)
or a local Maildir. The one module that speaks SMTP (``smtplib``); it builds no message and
keeps no ledger.
"""

from __future__ import annotations

import errno
import fcntl
import mailbox
import select
import smtplib
import socket
import ssl
import struct
import sys
import termios
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import NoReturn, Protocol
from urllib.parse import unquote, urlsplit

from ..config import Config
from ..errors import DeliveryError
from ..files import make_private
from ..subscribers import smtp_address


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


@dataclass(frozen=True)
class RelayProbe:
    """How far a connection got that sent nothing (``probe_relay``): ``failed_at`` is the
    step that went wrong ("connect", "starttls", "certificate", "login"), None when all did."""

    tls: str
    """"implicit", "starttls" or "none": how the connection was protected."""
    starttls_offered: bool
    logged_in: bool
    failed_at: str | None = None
    problem: str = ""


def _certificate_problem(exc: ssl.SSLError) -> str:
    return getattr(exc, "verify_message", None) or exc.reason or str(exc)


def _tls_steps(smtp: smtplib.SMTP, mailer: SmtpMailer, context: ssl.SSLContext) -> RelayProbe:
    """After the greeting: EHLO, STARTTLS when offered, the login when one is set, QUIT."""
    smtp.ehlo()
    implicit = mailer.security == "tls"
    offered = not implicit and smtp.has_extn("starttls")
    tls = "implicit" if implicit else "none"
    if offered:
        try:
            smtp.starttls(context=context)
        except ssl.SSLError as exc:
            return RelayProbe("none", True, False, "certificate", _certificate_problem(exc))
        smtp.ehlo()
        tls = "starttls"
    if not implicit and not offered:
        return RelayProbe(tls, False, False, "starttls", "STARTTLS is not offered")
    if mailer.username:
        try:
            smtp.login(mailer.username, mailer.password or "")
        except smtplib.SMTPException as exc:
            reply = _reply(getattr(exc, "smtp_code", 0), getattr(exc, "smtp_error", str(exc)))
            return RelayProbe(tls, offered, False, "login", reply)
    smtp.quit()
    return RelayProbe(tls, offered, bool(mailer.username))


def probe_relay(mailer: SmtpMailer, context: ssl.SSLContext | None = None) -> RelayProbe:
    """Connect, EHLO, STARTTLS (when offered) with the certificate checked against the host,
    log in when a login is set, and QUIT: no message is sent."""
    context = context or mailer.tls_context or default_tls_context()
    try:
        smtp: smtplib.SMTP
        if mailer.security == "tls":
            smtp = smtplib.SMTP_SSL(
                mailer.host, mailer.port, ehlo_name(), timeout=mailer.timeout, context=context
            )
        else:
            smtp = smtplib.SMTP(mailer.host, mailer.port, ehlo_name(), timeout=mailer.timeout)
    except ssl.SSLError as exc:
        return RelayProbe("implicit", False, False, "certificate", _certificate_problem(exc))
    except (smtplib.SMTPException, OSError) as exc:
        return RelayProbe("none", False, False, "connect", str(exc))
    try:
        return _tls_steps(smtp, mailer, context)
    except (smtplib.SMTPException, OSError) as exc:
        return RelayProbe("none", False, False, "connect", str(exc))
    finally:
        smtp.close()


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


def open_mailer(config: Config) -> Mailer:
    """SMTP when a server is configured, else the Maildir in the outbox."""
    smtp = config.smtp
    if smtp.url:
        password = smtp.password.get_secret_value() if smtp.password else None
        return SmtpMailer.from_url(
            smtp.url, username=smtp.username, password=password, timeout=smtp.timeout
        )
    return MaildirMailer(config.path(config.email.outbox) / "maildir")
