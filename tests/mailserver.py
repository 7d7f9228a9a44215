"""A real SMTP server in the test process (aiosmtpd), with a script of faults to play.

aiosmtpd's Controller cannot take port 0, so a free port is picked first. The server keeps
every accepted message; ``script`` maps (stage, recipient) to the answers to give instead of
accepting, in order: an SMTP reply such as ``"451 4.3.0 later"``, ``"DROP"`` (cut the
connection) or ``"HOLD"`` (accept the message, then keep the 250 back until ``release`` is
set, like a server whose reply never reaches a sender that dies meanwhile). The stages:
``greeting`` (the address ``""``: the answer instead of the 220, then the connection closed);
``mail`` (the address ``""``: the answer to any sender); ``rcpt``; ``body`` (what to do with
the data, after the 354: see below); ``data`` (the whole message has arrived); ``accepted``
(only ``DROP``: keep the message, then close without a reply).

The ``body`` actions, each of which closes the connection:

- ``DROP``: at once, before the end of data can arrive;
- ``CUT n``: once the first ``n`` lines of the data are read, none of the rest: a relay that
  hangs up after the first lines. The final dot is never read: closed with bytes unread, or
  reached by them once closed, the server's kernel resets the connection;
- ``CUT AT END``: once the whole message and its final dot have reached the server's kernel,
  none of it read (a reset that comes only after the dot is written);
- ``FIN n``: once the first ``n`` bytes are read (all of the message but its end), with a
  FIN and nothing unread, then ``closed`` is set (the sender may wait for it to write the dot);
- ``AFTER END``: once the whole message and its end are read; the message is kept, no reply
  (as ``("accepted", rcpt)`` ``DROP``).

``cut_every`` gives every so many messages (counted over all connections) ``cut_with``
instead: a fixed share of them, whichever reader they are for.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Inbox:
    """What the server received, and the faults it still has to play."""

    received: list[tuple[str, bytes]] = field(default_factory=list)
    mail_from: dict[str, str] = field(default_factory=dict)
    """The envelope sender (MAIL FROM) of the last message each recipient got."""
    script: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sessions: int = 0
    """Connections open now."""
    most_sessions: int = 0
    """The most connections open at once."""
    opened: int = 0
    """Connections opened, in all."""
    servers: list[SMTP] = field(default_factory=list)
    """The server's side of each open connection."""
    times: list[float] = field(default_factory=list)
    """When each message was taken (``time.monotonic``)."""
    idle: threading.Condition = field(default_factory=threading.Condition)
    pipelining: bool = True
    """Offer PIPELINING, as the relays a site sends through do."""
    pipelined: int = 0
    """MAIL commands that came with their RCPT and DATA already behind them."""
    cut_every: int = 0
    """Give every so many messages the ``body`` action ``cut_with`` (0: none)."""
    cut_with: str = "CUT 3"
    data_taken: int = 0
    """DATA commands taken (a 354, or a ``body`` action), over all connections."""
    cut_off: list[str] = field(default_factory=list)
    """The recipient of each message a ``CUT``, ``FIN`` or ``AFTER END`` action played on."""
    closed: threading.Event = field(default_factory=threading.Event)
    """Set once a ``FIN`` action has closed its connection."""
    _parsed: list[EmailMessage] = field(default_factory=list)

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(rcpt for rcpt, _ in self.received)

    @property
    def messages(self) -> list[EmailMessage]:
        """What arrived, parsed (headers decoded, as ``email.policy.default`` reads them).

        Each message is parsed once: aiosmtpd reads every attribute of its handler (this
        property too) for each new connection, which parsing them all made slower with each
        message received.
        """
        with self.lock:
            new = self.received[len(self._parsed) :]
            self._parsed.extend(message_from_bytes(d, policy=policy.default) for _, d in new)
            return list(self._parsed)

    def link(self, index: int = -1) -> str:
        """The first link in the text of a message (by default the last one that arrived)."""
        body = self.messages[index].get_content()
        found = re.search(r"https?://\S+", body)
        assert found, f"no link in {body!r}"
        return found[0]

    def wait_idle(self, timeout: float = 60) -> bool:
        """Wait until every connection is closed (a killed sender's too)."""
        with self.idle:
            return self.idle.wait_for(lambda: self.sessions == 0, timeout)

    def hang_up(self) -> bool:
        """Say 421 on every open connection and close it, as a relay does to an idle one;
        whether every one is closed within 10 s."""
        with self.idle:
            servers = list(self.servers)
        for server in servers:
            server.loop.call_soon_threadsafe(self._hang_up, server)
        return self.wait_idle(10)

    @staticmethod
    def _hang_up(server: SMTP) -> None:
        server.transport.write(b"421 4.4.2 idle too long, closing\r\n")
        server.transport.close()

    def _next(self, stage: str, address: str) -> str | None:
        with self.lock:
            queue = self.script.get((stage, address))
            return queue.pop(0) if queue else None

    def _body_action(self, rcpt: str) -> str | None:
        """What to do with the data of a message whose DATA is taken: every ``cut_every``-th
        message ``cut_with``, else what the script says."""
        with self.lock:
            self.data_taken += 1
            ruled = self.cut_every > 0 and self.data_taken % self.cut_every == 0
        action = self.cut_with if ruled else self._next("body", rcpt)
        if action and action != "DROP":
            with self.lock:
                self.cut_off.append(rcpt)
        return action

    async def handle_EHLO(self, server, session, envelope, hostname, responses) -> list[str]:
        session.host_name = hostname
        if not self.pipelining:
            return responses
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_MAIL(self, server, session, envelope, address, options) -> str:
        if b"\r\nDATA\r\n" in bytes(server._reader._buffer):  # what is read but not handled
            with self.lock:
                self.pipelined += 1
        refusal = self._next("mail", "")
        if refusal:
            return refusal
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, options) -> str:
        action = self._next("rcpt", address)
        if action == "DROP":
            server.transport.abort()
            return "421 4.4.2 dropped"
        if action:
            return action
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope) -> str:
        rcpt = envelope.rcpt_tos[0]
        action = self._next("data", rcpt)
        if action == "DROP":
            server.transport.abort()
            return "421 4.4.2 dropped"
        if action and action != "HOLD":
            return action
        with self.lock:
            self.received.append((rcpt, envelope.original_content))
            self.mail_from[rcpt] = envelope.mail_from
            self.times.append(time.monotonic())
        if action == "HOLD":  # queued, but the sender hears nothing yet
            self.holding.set()
            await _wait(self.release)
        if self._next("accepted", rcpt) == "DROP" or server.drop_after_end:
            server.transport.abort()
        return f"250 2.0.0 queued as {len(self.received)}"


class ScriptedSMTP(SMTP):
    """aiosmtpd's server, counting its connections and able to close inside DATA."""

    drop_after_end = False
    """The message being read gets ``AFTER END``."""

    def connection_made(self, transport) -> None:
        inbox: Inbox = self.event_handler
        with inbox.idle:
            inbox.sessions += 1
            inbox.opened += 1
            inbox.most_sessions = max(inbox.most_sessions, inbox.sessions)
            inbox.servers.append(self)
        super().connection_made(transport)

    def connection_lost(self, error) -> None:
        super().connection_lost(error)
        inbox: Inbox = self.event_handler
        with inbox.idle:
            inbox.sessions -= 1
            inbox.servers.remove(self)
            inbox.idle.notify_all()

    async def _handle_client(self) -> None:
        """A scripted ``("greeting", "")`` answer instead of the 220, then the connection
        closed (a relay refusing more connections says 421 and hangs up)."""
        greeting = self.event_handler._next("greeting", "")
        if greeting:
            await self.push(greeting)
            self.transport.close()
            return
        await super()._handle_client()

    async def smtp_DATA(self, arg: str) -> None:
        inbox: Inbox = self.event_handler
        rcpts = self.envelope.rcpt_tos if self.envelope else []
        action = inbox._body_action(rcpts[0]) if rcpts and not arg else None
        if action and action.startswith(("CUT ", "FIN ")):
            await self._cut(action)
            return
        self.drop_after_end = action == "AFTER END"
        if action == "DROP":
            # 354, then the connection is closed at once: corked, the reply and the close go
            # in one segment, so the sender sees the close as soon as it has read the 354
            sock = self.transport.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            self.transport.write(b"354 End data with <CR><LF>.<CR><LF>\r\n")
            sock.shutdown(socket.SHUT_RDWR)
            self.transport.abort()
            return
        await super().smtp_DATA(arg)

    async def _cut(self, action: str) -> None:
        """The 354, then a ``CUT`` or ``FIN`` action played on the data, and the connection
        closed. asyncio reads ahead (what it has read, the server has read, for TCP), so
        the data is taken straight from the socket, in a thread, as much as the action says."""
        assert not self._reader._buffer, "data before the 354"  # the sender waits for it
        self.transport.write(b"354 End data with <CR><LF>.<CR><LF>\r\n")
        self.transport.pause_reading()  # in the same step: nothing of the data read yet
        fd = self.transport.get_extra_info("socket").fileno()
        inbox: Inbox = self.event_handler
        try:
            await self.loop.run_in_executor(None, _take_data, fd, action, inbox.closed)
        finally:
            self.transport.abort()  # the socket closed: a reset if bytes are left unread


def _take_data(fd: int, action: str, closed: threading.Event) -> None:
    """Read what ``action`` says of the data, not a byte more, from a second descriptor of
    the connection's socket."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        sock.settimeout(30)
        kind, _, count = action.partition(" ")
        if count == "AT END":
            _wait_for_the_end(sock)
        elif kind == "CUT":
            _take_lines(sock, int(count))
        else:
            _take_bytes(sock, int(count))
            sock.shutdown(socket.SHUT_RDWR)  # the FIN, with nothing unread
            closed.set()


def _peek(sock: socket.socket, size: int) -> bytes:
    """What the kernel holds, once it holds ``size`` bytes or the sender is gone: the timeout
    polls the socket first, and SO_RCVLOWAT makes that poll wait for so many (MSG_WAITALL
    does not wait on the non-blocking socket a timeout makes)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)
    return sock.recv(max(size, 1 << 16), socket.MSG_PEEK)


def _take_lines(sock: socket.socket, count: int) -> None:
    """The first ``count`` lines, a byte at a time; never the final dot's line."""
    for _ in range(count):
        if _peek(sock, 3)[:3] in (b"", b".\r\n"):
            return
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
        while sock.recv(1) not in (b"\n", b""):
            pass


def _take_bytes(sock: socket.socket, count: int) -> None:
    while count > 0:
        taken = sock.recv(min(count, 1 << 16))
        if not taken:
            return
        count -= len(taken)


def _wait_for_the_end(sock: socket.socket) -> None:
    """Until the whole message and its final dot are in the kernel, none of it read (it must
    fit the socket's receive buffer)."""
    seen = b""
    while not seen.endswith(b"\r\n.\r\n"):
        more = _peek(sock, len(seen) + 1)  # a byte more than last time
        if len(more) <= len(seen):
            return  # the sender is gone
        seen = more


class ScriptedController(Controller):
    def factory(self) -> SMTP:
        return ScriptedSMTP(self.handler, **self.SMTP_kwargs)


async def _wait(event: threading.Event) -> None:
    import asyncio

    while not event.is_set():
        await asyncio.sleep(0.01)


def start_server(
    *, smtputf8: bool = True, pipelining: bool = True
) -> tuple[Inbox, int, Controller]:
    inbox = Inbox(pipelining=pipelining)
    port = free_port()
    controller = ScriptedController(
        inbox, hostname="127.0.0.1", port=port, enable_SMTPUTF8=smtputf8
    )
    controller.start()
    return inbox, port, controller


@pytest.fixture
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    """A server that offers SMTPUTF8 (as aiosmtpd does by default)."""
    inbox, port, controller = start_server()
    yield inbox, port
    inbox.release.set()
    controller.stop()


@pytest.fixture(params=[True, False], ids=["pipelining", "one-by-one"])
def any_smtp_server(request) -> Iterator[tuple[Inbox, int]]:
    """A server with PIPELINING, then one without: the faults play the same in both."""
    inbox, port, controller = start_server(pipelining=request.param)
    yield inbox, port
    inbox.release.set()
    controller.stop()


@pytest.fixture
def ascii_smtp_server() -> Iterator[tuple[Inbox, int]]:
    """A server that does not offer SMTPUTF8 (nor PIPELINING: an older relay)."""
    inbox, port, controller = start_server(smtputf8=False, pipelining=False)
    yield inbox, port
    inbox.release.set()
    controller.stop()
