"""A real SMTP server in the test process (aiosmtpd), with a script of faults to play.

aiosmtpd's Controller cannot take port 0, so a free port is picked first. The server keeps
every accepted message; ``script`` maps (stage, recipient) to the answers to give instead of
accepting, in order: an SMTP reply such as ``"451 4.3.0 later"``, ``"DROP"`` (cut the
connection) or ``"HOLD"`` (accept the message, then keep the 250 back until ``release`` is
set, like a server whose reply never reaches a sender that dies meanwhile).
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message

import pytest
from aiosmtpd.controller import Controller


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

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(rcpt for rcpt, _ in self.received)

    def messages(self) -> list[Message]:
        with self.lock:
            return [message_from_bytes(data) for _, data in self.received]

    def _next(self, stage: str, address: str) -> str | None:
        with self.lock:
            queue = self.script.get((stage, address))
            return queue.pop(0) if queue else None

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
        if action == "HOLD":  # queued, but the sender hears nothing yet
            self.holding.set()
            await _wait(self.release)
        return f"250 2.0.0 queued as {len(self.received)}"


async def _wait(event: threading.Event) -> None:
    import asyncio

    while not event.is_set():
        await asyncio.sleep(0.01)


@pytest.fixture
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    inbox.release.set()
    controller.stop()
