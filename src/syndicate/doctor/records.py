"""The DNS checks: spf, dkim, dmarc, alignment and mx, each a Check with the record to publish
as its fix. SPF is evaluated by pyspf (its lookup limits and errors), asked through ``Lookups``;
the DMARC and DKIM records are short tag lists, read here."""

from __future__ import annotations

import base64
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

import spf
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .report import Check, failed, passed, warned
from .resolver import Lookups
from .setup import Setup, organisational_domain

DNS_CHECKS = ("spf", "dkim", "dmarc", "alignment", "mx")
MIN_DKIM_BITS = 2048
NOBODY = "255.255.255.255"
"""An address no record means to authorise: evaluated for it, a record's every lookup is made."""


def txt_record(name: str, text: str) -> str:
    """A TXT record in zone-file form, cut into the 255-byte strings DNS holds."""
    parts = " ".join(f'"{text[i : i + 255]}"' for i in range(0, len(text), 255))
    return f"{name}. TXT {parts}"


def tags(record: str) -> dict[str, str]:
    """``k=v; k=v`` (DKIM and DMARC records) as a dict, keys lower-case."""
    found = {}
    for part in record.split(";"):
        key, eq, value = part.partition("=")
        if eq:
            found[key.strip().lower()] = "".join(value.split())
    return found


# -- SPF -----------------------------------------------------------------------------------------


class _SpfQuery(spf.query):
    """pyspf's evaluation, its DNS questions asked through ``Lookups`` (its own go to the
    system's resolver)."""

    def __init__(self, lookups: Lookups, ip: str, domain: str) -> None:
        super().__init__(i=ip, s=f"postmaster@{domain}", h=domain, timeout=lookups.timeout)
        self.asker = lookups

    def dns(
        self, name: str, qtype: str, cnames: Any = None, ignore_void: bool = False
    ) -> list[Any]:
        name = str(name).rstrip(".").lower()
        if (name, qtype) not in self.cache:
            answers = self.asker.answer(name, qtype)
            self.cache[(name, qtype)] = [_pyspf_value(qtype, rdata) for rdata in answers]
        result: list[Any] = self.cache[(name, qtype)]
        if not result and not ignore_void:
            self.void_lookups += 1
            if self.void_lookups > spf.MAX_VOID_LOOKUPS:
                raise spf.PermError(f"Void lookup limit of {spf.MAX_VOID_LOOKUPS} exceeded")
        return result


def _pyspf_value(qtype: str, rdata: Any) -> Any:
    """An answer as pyspf's dnspython lookup gives it."""
    if qtype in ("A", "AAAA"):
        return rdata.address
    if qtype == "MX":
        return (rdata.preference, rdata.exchange)
    if qtype == "PTR":
        return rdata.target.to_text(True)
    return rdata.strings


def spf_records(lookups: Lookups, domain: str) -> list[str]:
    return [t for t in lookups.txt(domain) if t.lower() == "v=spf1" or t.lower()[:7] == "v=spf1 "]


def relay_addresses(setup: Setup, lookups: Lookups) -> list[str]:
    """The addresses mail leaves from: email.sending_ips, else the relay host's."""
    if setup.sending_ips or not setup.relay_host:
        return list(setup.sending_ips)
    try:
        return [str(ipaddress.ip_address(setup.relay_host))]
    except ValueError:
        return lookups.addresses(setup.relay_host)


def _mechanism(network: str) -> str:
    net = ipaddress.ip_network(network, strict=False)
    kind = "ip4" if net.version == 4 else "ip6"
    whole = net.prefixlen == net.max_prefixlen
    return f"{kind}:{net.network_address if whole else net}"


INTERNAL = tuple(
    ipaddress.ip_network(net)
    for net in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "::1/128",
        "fc00::/7",
    )
)
"""Loopback and private networks (RFC 1918, RFC 4193): a relay there is not what receivers see."""


def _internal(ip: str) -> bool:
    """Whether ``ip`` (an address or a network) lies in a loopback or private network."""
    given = ipaddress.ip_network(ip, strict=False)
    return any(given.subnet_of(net) for net in INTERNAL if net.version == given.version)  # type: ignore[arg-type]


def _first(network: str) -> str:
    """An address of ``network``: SPF is evaluated for one address, not a range."""
    return str(ipaddress.ip_network(network, strict=False).network_address)


def _with(record: str, mechanisms: list[str]) -> str:
    """``record`` with ``mechanisms`` added after its version, those it has left out."""
    terms = record.split()
    missing = [m for m in mechanisms if m not in terms]
    return " ".join([terms[0], *missing, *terms[1:]])


def _flattened(lookups: Lookups, record: str, domain: str, depth: int = 0) -> list[str]:
    """The record's terms with every include, redirect, a and mx replaced by the addresses
    they name today (no lookup left but exists and ptr)."""
    out: list[str] = []
    for term in record.split()[1:]:
        qualifier = term[0] if term[0] in "+-~?" else ""
        body = term[len(qualifier) :]
        kind, _, target = body.lower().replace("=", ":", 1).partition(":")
        kind = kind.split("/")[0]
        if kind in ("include", "redirect"):
            inner = spf_records(lookups, target)
            flat = _flattened(lookups, inner[0], target, depth + 1) if inner and depth < 10 else []
            # an include's own "all" ends only its own evaluation; a redirect's ends this one
            out += [t for t in flat if kind == "redirect" or t.lstrip("+-~?") != "all"]
        elif kind in ("a", "mx"):
            host = target.split("/")[0] or domain
            hosts = [h for _, h in lookups.mx(host)] if kind == "mx" else [host]
            out += [qualifier + _mechanism(ip) for h in hosts for ip in lookups.addresses(h)]
        else:
            out.append(term)
    return list(dict.fromkeys(out))


def _record_problem(lookups: Lookups, domain: str, record: str, wanted: list[str]) -> Check | None:
    """The one record evaluated for an address nobody authorises, so that every lookup it
    makes is made: a pass authorises the whole internet; a permerror is an invalid record
    (over the 10-lookup limit, a syntax error)."""
    result, _, explanation = _SpfQuery(lookups, NOBODY, domain).check()
    if result == "pass":
        record = re.sub(r"(^|\s)\+?all(\s|$)", r"\1-all\2", record)
        return failed(
            "spf",
            f"{domain}'s SPF record authorises every address on the internet",
            f"end it with -all: {txt_record(domain, record)}",
            [txt_record(domain, record)],
        )
    if result == "permerror":
        record = _with(" ".join(["v=spf1", *_flattened(lookups, record, domain)]), wanted)
        return failed(
            "spf",
            f"{domain}'s SPF record is invalid: {explanation}",
            f"flatten it (the addresses its includes name today): {txt_record(domain, record)}",
            [txt_record(domain, record)],
        )
    return None


def check_spf(setup: Setup, lookups: Lookups) -> Check:
    domain = setup.return_domain
    ips = relay_addresses(setup, lookups)
    wanted = [_mechanism(ip) for ip in ips]
    records = spf_records(lookups, domain)
    if not records:
        public = [_mechanism(ip) for ip in ips if not _internal(ip)]
        record = " ".join(["v=spf1", *(public or ["ip4:ADDRESS"]), "-all"])
        return failed(
            "spf",
            f"{domain} (the return path's domain) has no SPF record",
            f"publish {txt_record(domain, record)}"
            + ("" if public else ", ADDRESS the one mail leaves from (email.sending_ips)"),
            [txt_record(domain, record)] if public else [],
        )
    if len(records) > 1:
        terms = [t for r in records for t in r.split()[1:] if "all" not in t]
        record = " ".join(["v=spf1", *dict.fromkeys(terms), "-all"])
        return failed(
            "spf",
            f"{domain} has {len(records)} SPF records; receivers take that as an error",
            f"merge them into one: {txt_record(domain, record)}",
            [txt_record(domain, record)],
        )
    problem = _record_problem(lookups, domain, records[0], wanted)
    if problem is not None:
        return problem
    if ips and all(_internal(ip) for ip in ips):
        return warned(
            "spf",
            f"{domain} has a valid SPF record; the relay is at {', '.join(ips)}, on this "
            "machine or its network, and receivers see the address mail leaves from",
            "set email.sending_ips to the relay's public address(es), and doctor checks those",
        )
    refused = [ip for ip in ips if _SpfQuery(lookups, _first(ip), domain).check()[0] != "pass"]
    if refused:
        record = _with(records[0], [_mechanism(ip) for ip in refused])
        return failed(
            "spf",
            f"{domain}'s SPF record does not authorise the relay's {', '.join(refused)}",
            f"add them: {txt_record(domain, record)}",
            [txt_record(domain, record)],
        )
    if not ips:
        return warned(
            "spf",
            f"{domain} has a valid SPF record; no relay is set (smtp.url), so which addresses "
            "send is unknown",
            "set smtp.url, or email.sending_ips for a relay service",
        )
    return passed("spf", f"{domain}: one valid SPF record, authorising {', '.join(ips)}")


# -- DKIM ----------------------------------------------------------------------------------------

KEYGEN = "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out dkim.pem"


def _public_key(pem: bytes) -> rsa.RSAPublicKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("not an RSA private key")
    return key.public_key()


def dkim_record(public: rsa.RSAPublicKey) -> str:
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode()}"


def check_dkim(setup: Setup, lookups: Lookups) -> Check:
    if not setup.dkim_selector or setup.dkim_domain is None:
        return failed(
            "dkim",
            "DKIM signing is off: email.dkim_selector and email.dkim_key_file are unset",
            f"make a key ({KEYGEN}), set email.dkim_selector and email.dkim_key_file, "
            "then run doctor again for the record to publish",
        )
    try:
        if setup.dkim_key is None:
            raise ValueError(setup.dkim_problem or "email.dkim_key_file is unset")
        public = _public_key(setup.dkim_key)
    except ValueError as exc:
        return failed("dkim", f"the DKIM key cannot be used: {exc}", f"make one: {KEYGEN}")
    if public.key_size < MIN_DKIM_BITS:
        return failed(
            "dkim",
            f"the DKIM key has {public.key_size} bits; receivers want {MIN_DKIM_BITS} or more",
            f"make a new key ({KEYGEN}) under a new selector; doctor then prints its record",
        )
    name = f"{setup.dkim_selector}._domainkey.{setup.dkim_domain}"
    expected = dkim_record(public)
    published = [tags(t).get("p") for t in lookups.txt(name) if "p=" in t]
    fix = [txt_record(name, expected)]
    if not published:
        return failed("dkim", f"{name} holds no DKIM key", f"publish {fix[0]}", fix)
    if tags(expected)["p"] not in published:
        return failed(
            "dkim",
            f"{name} holds the public key of another private key than email.dkim_key_file",
            f"publish {fix[0]}",
            fix,
        )
    return passed("dkim", f"{name} holds the key ({public.key_size} bits)")


# -- DMARC and alignment -------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    domain: str
    """The domain whose _dmarc record applies: the From domain's, else its organisation's."""
    tags: dict[str, str]

    @property
    def p(self) -> str:
        return self.tags.get("p", "")

    def mode(self, key: str) -> str:
        return "strict" if self.tags.get(key) == "s" else "relaxed"


def dmarc_records(lookups: Lookups, domain: str) -> list[str]:
    return [t for t in lookups.txt(f"_dmarc.{domain}") if t.replace(" ", "").startswith("v=DMARC1")]


def find_policy(setup: Setup, lookups: Lookups) -> tuple[str, list[str]]:
    """The domain whose _dmarc records apply (RFC 7489 6.6.3), and those records."""
    for domain in dict.fromkeys([setup.from_domain, organisational_domain(setup.from_domain)]):
        found = dmarc_records(lookups, domain)
        if found:
            return domain, found
    return organisational_domain(setup.from_domain), []


def policy(setup: Setup, lookups: Lookups) -> Policy | None:
    """The DMARC policy receivers apply to the From domain, when it has one valid record."""
    domain, records = find_policy(setup, lookups)
    if len(records) != 1 or tags(records[0]).get("p") not in ("none", "quarantine", "reject"):
        return None
    return Policy(domain, tags(records[0]))


def check_dmarc(setup: Setup, lookups: Lookups) -> Check:
    domain, records = find_policy(setup, lookups)
    name = f"_dmarc.{domain}"
    start = [txt_record(name, "v=DMARC1; p=none")]
    if not records:
        return failed(
            "dmarc",
            f"{setup.from_domain} has no DMARC record ({name})",
            f"publish {start[0]} (add rua=mailto:<address> to be sent reports)",
            start,
        )
    if len(records) > 1:
        return failed("dmarc", f"{name} has {len(records)} DMARC records", "keep one", start[:0])
    found = policy(setup, lookups)
    if found is None:
        return failed(
            "dmarc",
            f"{name} is not a valid DMARC record (p= must be none, quarantine or reject)",
            f"publish {start[0]}",
            start,
        )
    if found.p == "none":
        stricter = records[0].replace("p=none", "p=quarantine", 1)
        return warned(
            "dmarc",
            f"{name}: p=none; receivers report, but nothing stops a forger",
            "once the reports show only your own mail passing, publish "
            + txt_record(name, stricter),
        )
    return passed("dmarc", f"{name}: p={found.p}")


def aligned(from_domain: str, other: str | None, mode: str) -> bool:
    if other is None:
        return False
    if mode == "strict":
        return from_domain == other
    return organisational_domain(from_domain) == organisational_domain(other)


def check_alignment(setup: Setup, lookups: Lookups, *, spf_ok: bool, dkim_ok: bool) -> Check:
    """DMARC passes when SPF passes for an aligned return path, or DKIM for an aligned d=."""
    found = policy(setup, lookups)
    adkim = found.mode("adkim") if found else "relaxed"
    aspf = found.mode("aspf") if found else "relaxed"
    by_dkim = dkim_ok and aligned(setup.from_domain, setup.dkim_domain, adkim)
    by_spf = spf_ok and aligned(setup.from_domain, setup.return_domain, aspf)
    if by_dkim or by_spf:
        means = [f"DKIM d={setup.dkim_domain} ({adkim})"] * by_dkim + [
            f"the return path {setup.return_domain} ({aspf})"
        ] * by_spf
        return passed("alignment", f"From {setup.from_domain} aligns with {' and '.join(means)}")
    what = f"p={found.p}" if found else "no policy"
    return failed(
        "alignment",
        f"From {setup.from_domain} aligns with neither a passing DKIM d= ({setup.dkim_domain}, "
        f"{adkim}) nor return path ({setup.return_domain}, {aspf}): DMARC fails ({what})",
        f'set email.dkim_domain = "{setup.from_domain}" (with its key published), or '
        f'email.return_path = "bounces@{setup.from_domain}" (with SPF there)',
    )


def rejected(setup: Setup, lookups: Lookups, alignment: Check) -> bool:
    """Whether receivers would reject the digests: DMARC fails under p=reject."""
    found = policy(setup, lookups)
    return not alignment.ok and found is not None and found.p == "reject"


# -- MX ------------------------------------------------------------------------------------------


BOUNCE_READERS_FIX = (
    'set bounces.imap_url = "imaps://USER@HOST/INBOX" (the mailbox of {address}; the password '
    "as SYNDICATE_IMAP_PASSWORD), or the webhook of your relay service: "
    "bounces.postmark_user, mailgun_signing_key, sendgrid_public_key or sns_topics"
)


def check_mx(setup: Setup, lookups: Lookups) -> Check:
    """The return path's domain takes mail (MX, else A), so bounces come back; and something
    reads them (a warning when nothing does: sending works, but bounced readers stay on)."""
    domain = setup.return_domain
    hosts = [host for _, host in lookups.mx(domain)]
    reachable = [h for h in hosts if lookups.addresses(h)] if hosts else []
    if reachable or (not hosts and lookups.addresses(domain)):
        via = f"MX {reachable[0]}" if reachable else "its A record"
        found = f"bounces to {setup.return_address} reach {domain} ({via})"
        if setup.bounce_readers:
            return passed("mx", f"{found}; read by {', '.join(setup.bounce_readers)}")
        return warned(
            "mx",
            f"{found}, but neither a bounce mailbox nor a relay's webhook is configured: "
            "bounced readers stay on the list unless `syndicate bounces PATH` is run by hand",
            BOUNCE_READERS_FIX.format(address=setup.return_address),
        )
    theirs = [h for _, h in lookups.mx(setup.from_domain)] if domain != setup.from_domain else []
    host = theirs[0] if theirs else f"mail.{domain}"
    record = f"{domain}. MX 10 {host}."
    detail = f"{domain} (the return path's domain) receives no mail: bounces would be lost"
    if hosts:
        detail = f"{domain}'s MX hosts ({', '.join(hosts)}) have no address: bounces would be lost"
    return failed("mx", detail, f"publish {record} (a host that takes mail for it)", [record])


def dns_checks(setup: Setup, lookups: Lookups) -> list[Check]:
    """spf, dkim, dmarc, alignment and mx, in that order."""
    spf_check, dkim_check = check_spf(setup, lookups), check_dkim(setup, lookups)
    alignment = check_alignment(setup, lookups, spf_ok=spf_check.ok, dkim_ok=dkim_check.ok)
    return [spf_check, dkim_check, check_dmarc(setup, lookups), alignment, check_mx(setup, lookups)]


def dns_verdicts(setup: Setup, lookups: Lookups) -> tuple[list[Check], str | None]:
    """The DNS checks, and why receivers would reject the digests (None: they would not)."""
    checks = dns_checks(setup, lookups)
    alignment = next(c for c in checks if c.name == "alignment")
    return checks, (alignment.detail if rejected(setup, lookups, alignment) else None)
