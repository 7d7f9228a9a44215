"""A real SMTP server in the test process (aiosmtpd), with a script of faults to play.

aiosmtpd's Controller cannot take port 0, so a free port is picked first. The server keeps
every accepted message; ``script`` maps (stage, recipient) to the answers to give instead of
accepting, in order: an SMTP reply such as ``"451 4.3.0 later"``, ``"DROP"`` (cut the
connection) or ``"HOLD"`` (accept the message, then keep the 250 back until ``release`` is
set, like a server whose reply never reaches a sender that dies meanwhile). The stages:
``greeting`` (the address ``""``: the answer instead of the 220, then the connection closed);
``mail`` (the address ``""``: the answer to any sender); ``rcpt``; ``body`` (only ``DROP``:
close the connection right after the 354, inside DATA, before the end of data can arrive);
``data`` (the whole message has arrived); ``accepted`` (only ``DROP``: keep the message, then
close without a reply).
"""

from __future__ import annotations

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
        if self._next("accepted", rcpt) == "DROP":
            server.transport.abort()
        return f"250 2.0.0 queued as {len(self.received)}"


class ScriptedSMTP(SMTP):
    """aiosmtpd's server, counting its connections and able to close inside DATA."""

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
        if rcpts and not arg and inbox._next("body", rcpts[0]) == "DROP":
            # 354, then the connection is closed at once: corked, the reply and the close go
            # in one segment, so the sender sees the close as soon as it has read the 354
            sock = self.transport.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            self.transport.write(b"354 End data with <CR><LF>.<CR><LF>\r\n")
            sock.shutdown(socket.SHUT_RDWR)
            self.transport.abort()
            return
        await super().smtp_DATA(arg)


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
