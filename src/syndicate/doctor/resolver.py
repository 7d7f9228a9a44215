"""DNS answers for the checks, through dnspython: the system's resolver, or the one server
``--nameserver HOST[:PORT]`` (or ``SYNDICATE_NAMESERVER``) names. Every question waits at most
``timeout`` seconds; a server that does not answer is ``DnsUnreachable``."""

from __future__ import annotations

import ipaddress
import socket

import dns.exception
import dns.name
import dns.resolver

from ..errors import SyndicateError, UsageError


class DnsUnreachable(SyndicateError):
    """No DNS server answered in time: an offline machine, or a firewall."""


def nameserver_address(value: str) -> tuple[str, int]:
    """``HOST[:PORT]`` (``[v6]:PORT`` for IPv6) as an address and port (53 by default)."""
    host, port = value, 53
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest:
            port = _port(value, rest.removeprefix(":"))
    elif value.count(":") == 1:
        host, _, text = value.partition(":")
        port = _port(value, text)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            host = str(socket.getaddrinfo(host, port, proto=socket.IPPROTO_UDP)[0][4][0])
        except OSError as exc:
            raise UsageError(f"--nameserver {value}: cannot find {host} ({exc})") from None
    return host, port


def _port(value: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise UsageError(f"--nameserver {value}: not HOST[:PORT]")
    return int(text)


class Lookups:
    """The questions the checks ask, each answer as plain values; no answer is an empty list."""

    def __init__(self, nameserver: str | None = None, timeout: float = 5.0) -> None:
        if nameserver:
            host, port = nameserver_address(nameserver)
            self.resolver = dns.resolver.Resolver(configure=False)
            self.resolver.nameservers = [host]
            self.resolver.port = port
        else:
            try:
                self.resolver = dns.resolver.Resolver()
            except dns.resolver.NoResolverConfiguration as exc:
                raise DnsUnreachable(f"DNS: this machine names no DNS server ({exc})") from None
        self.resolver.lifetime = self.timeout = timeout
        self.resolver.cache = dns.resolver.Cache()
        self.where = nameserver or "the system's DNS servers"

    def answer(self, name: str, kind: str) -> list[dns.rdata.Rdata]:
        try:
            return list(self.resolver.resolve(name, kind, search=False))
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.name.EmptyLabel):
            return []
        except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
            raise DnsUnreachable(f"DNS: no answer from {self.where} ({exc})") from None

    def txt(self, name: str) -> list[str]:
        """Each TXT record of ``name``, its strings joined."""
        return [
            b"".join(rdata.strings).decode("utf-8", "replace")  # type: ignore[attr-defined]
            for rdata in self.answer(name, "TXT")
        ]

    def addresses(self, name: str) -> list[str]:
        """The IPv4 and IPv6 addresses of ``name``."""
        found = self.answer(name, "A") + self.answer(name, "AAAA")
        return [rdata.address for rdata in found]  # type: ignore[attr-defined]

    def mx(self, name: str) -> list[tuple[int, str]]:
        """(preference, host) of each MX record of ``name``."""
        return sorted(
            (rdata.preference, rdata.exchange.to_text(omit_final_dot=True))  # type: ignore[attr-defined]
            for rdata in self.answer(name, "MX")
        )
