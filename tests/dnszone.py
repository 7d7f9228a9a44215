"""A small authoritative DNS server in the test process (dnslib), on loopback, UDP and TCP on
one ephemeral port, answering from a zone the test can change while it runs."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from dnslib import QTYPE, RCODE, RR
from dnslib.server import BaseResolver, DNSServer


def _kind(rr: RR) -> tuple[str, int, str]:
    """What a record replaces: its name and type, and for TXT its version tag (v=spf1, ...)."""
    tag = ""
    if rr.rtype == QTYPE.TXT:
        text = b"".join(rr.rdata.data).decode()
        tag = text.split(";")[0].split()[0].lower() if text.startswith("v=") else text
    return (str(rr.rname).lower(), rr.rtype, tag)


class Zone(BaseResolver):  # type: ignore[misc]
    """Records in zone-file form; ``publish`` replaces those of the same name and kind."""

    def __init__(self, text: str) -> None:
        self.lock = threading.Lock()
        self.records: list[RR] = RR.fromZone(text)

    def publish(self, *lines: str) -> None:
        new = [rr for line in lines for rr in RR.fromZone(line)]
        kinds = {_kind(rr) for rr in new}
        with self.lock:
            self.records = [rr for rr in self.records if _kind(rr) not in kinds] + new

    def add(self, *lines: str) -> None:
        """Records beside those of the same kind (a second SPF record, say)."""
        with self.lock:
            self.records += [rr for line in lines for rr in RR.fromZone(line)]

    def remove(self, name: str, rtype: str) -> None:
        with self.lock:
            self.records = [
                rr
                for rr in self.records
                if not (str(rr.rname).lower() == name.lower() and QTYPE[rr.rtype] == rtype)
            ]

    def resolve(self, request, handler):  # dnslib's interface
        reply = request.reply()
        reply.header.aa = 1
        qname, qtype = str(request.q.qname).lower(), request.q.qtype
        with self.lock:
            named = [rr for rr in self.records if str(rr.rname).lower() == qname]
        reply.add_answer(*[rr for rr in named if rr.rtype == qtype])
        if not named:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


class _Quiet:
    def log_recv(self, *args: object) -> None: ...
    def log_send(self, *args: object) -> None: ...
    def log_request(self, *args: object) -> None: ...
    def log_reply(self, *args: object) -> None: ...
    def log_truncated(self, *args: object) -> None: ...
    def log_error(self, *args: object) -> None: ...
    def log_data(self, *args: object) -> None: ...


def _servers(zone: Zone) -> tuple[DNSServer, DNSServer]:
    """UDP on an ephemeral port, TCP on the same number (tried again if that one is taken)."""
    for _ in range(20):
        udp = DNSServer(zone, port=0, address="127.0.0.1", logger=_Quiet())
        port = udp.server.server_address[1]
        try:
            tcp = DNSServer(zone, port=port, address="127.0.0.1", tcp=True, logger=_Quiet())
        except OSError:
            udp.server.server_close()
            continue
        return udp, tcp
    raise OSError("no free port for UDP and TCP at once")


@pytest.fixture(scope="session")
def _running_dns() -> Iterator[tuple[Zone, str]]:
    zone = Zone("")
    servers = _servers(zone)
    for server in servers:
        server.start_thread()
    try:
        yield zone, f"127.0.0.1:{servers[0].server.server_address[1]}"
    finally:
        for server in servers:
            server.stop()
            server.server.server_close()


@pytest.fixture
def dns_server(_running_dns: tuple[Zone, str]) -> Iterator[tuple[Zone, str]]:
    """A running server with an empty zone: the zone, and HOST:PORT to ask it at. One
    server for the session (stopping one takes a second), its zone emptied for each test."""
    zone, address = _running_dns
    with zone.lock:
        zone.records = []
    yield zone, address


def unused_port_socket() -> socket.socket:
    """A bound UDP socket nobody answers on: a DNS server that is down."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock
