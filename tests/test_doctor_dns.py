"""The DNS checks against a real authoritative server (dnslib, on loopback): a good zone passes
every check; each broken zone fails exactly its own check, and publishing the fix it prints
(or setting the key it names) makes that check pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from syndicate.config import parse_config
from syndicate.doctor.records import dkim_record, dns_checks, rejected, txt_record
from syndicate.doctor.resolver import DnsUnreachable, Lookups, nameserver_address
from syndicate.doctor.setup import read_setup
from syndicate.errors import UsageError

from .dnszone import Zone, unused_port_socket
from .test_bounce_hooks import SENDGRID_PUBLIC

RELAY = "192.0.2.10"


def key_pem(bits: int) -> tuple[bytes, rsa.RSAPublicKey]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem, key.public_key()


@pytest.fixture(scope="module")
def keys() -> dict[str, tuple[bytes, rsa.RSAPublicKey]]:
    return {"good": key_pem(2048), "other": key_pem(2048), "short": key_pem(1024)}


MAILBOX = {"imap_url": "imaps://bounces@mail.example.org/INBOX"}
"""The bounce mailbox the sites here read their bounces from."""


def site(root: Path, pem: bytes, bounces: dict[str, object] = MAILBOX, **email: object) -> object:
    (root / "dkim.pem").write_bytes(pem)
    settings = {
        "sender": "News <digest@example.org>",
        "dkim_selector": "news",
        "dkim_key_file": "dkim.pem",
        **email,
    }
    data = {"email": settings, "smtp": {"url": "smtp://relay.example.org:25"}, "bounces": bounces}
    return parse_config(data, root=root, source="(test)", env={})


def good_zone(public: rsa.RSAPublicKey) -> str:
    return "\n".join(
        [
            'example.org. TXT "v=spf1 a:relay.example.org -all"',
            f"relay.example.org. A {RELAY}",
            "example.org. MX 10 mail.example.org.",
            "mail.example.org. A 192.0.2.20",
            txt_record("news._domainkey.example.org", dkim_record(public)),
            '_dmarc.example.org. TXT "v=DMARC1; p=quarantine; adkim=r; aspf=r"',
        ]
    )


def verdicts(config: object, nameserver: str) -> dict[str, object]:
    checks = dns_checks(read_setup(config), Lookups(nameserver, timeout=5))  # type: ignore[arg-type]
    return {check.name: check for check in checks}


def failing(found: dict[str, object]) -> list[str]:
    return [name for name, check in found.items() if not check.ok]  # type: ignore[attr-defined]


def test_a_good_zone_passes_every_check(tmp_path, dns_server, keys) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    found = verdicts(site(tmp_path, keys["good"][0]), address)
    assert failing(found) == []
    assert all(check.severity == "ok" for check in found.values())  # type: ignore[attr-defined]
    assert RELAY in found["spf"].detail  # type: ignore[attr-defined]


def break_spf_relay(zone: Zone) -> None:
    zone.publish('example.org. TXT "v=spf1 ip4:198.51.100.7 -all"')


def break_spf_lookups(zone: Zone) -> None:
    includes = " ".join(f"include:s{n}.example.net" for n in range(11))
    zone.publish(txt_record("example.org", f"v=spf1 {includes} a:relay.example.org -all"))
    for n in range(11):
        zone.publish(f's{n}.example.net. TXT "v=spf1 ip4:203.0.113.{n} ~all"')


def break_spf_everyone(zone: Zone) -> None:
    zone.publish('example.org. TXT "v=spf1 a:relay.example.org +all"')


def break_spf_twice(zone: Zone) -> None:
    zone.add('example.org. TXT "v=spf1 ip4:198.51.100.7 -all"')


def break_dkim_other_key(zone: Zone, keys) -> None:
    zone.publish(txt_record("news._domainkey.example.org", dkim_record(keys["other"][1])))


def break_dmarc(zone: Zone) -> None:
    zone.remove("_dmarc.example.org.", "TXT")


def break_mx(zone: Zone) -> None:
    zone.remove("example.org.", "MX")


BROKEN = {
    "spf without the relay": ("spf", break_spf_relay),
    "spf over ten lookups": ("spf", break_spf_lookups),
    "two spf records": ("spf", break_spf_twice),
    "spf passing everyone": ("spf", break_spf_everyone),
    "no dmarc": ("dmarc", break_dmarc),
    "no mx for the bounce domain": ("mx", break_mx),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_zone_fails_its_check_and_its_fix_mends_it(
    case, tmp_path, dns_server, keys
) -> None:
    name, breaking = BROKEN[case]
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    breaking(zone)
    config = site(tmp_path, keys["good"][0])
    found = verdicts(config, address)
    assert failing(found) == [name]
    check = found[name]
    assert check.fix and check.records  # type: ignore[attr-defined]
    for record in check.records:  # type: ignore[attr-defined]
        assert record in check.fix  # type: ignore[attr-defined]
    zone.publish(*check.records)  # type: ignore[attr-defined]
    assert failing(verdicts(config, address)) == []


def test_a_record_of_another_key_fails_dkim_until_ours_is_published(
    tmp_path, dns_server, keys
) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    break_dkim_other_key(zone, keys)
    config = site(tmp_path, keys["good"][0])
    found = verdicts(config, address)
    assert failing(found) == ["dkim"]
    assert "another private key" in found["dkim"].detail  # type: ignore[attr-defined]
    zone.publish(*found["dkim"].records)  # type: ignore[attr-defined]
    assert failing(verdicts(config, address)) == []


def test_a_1024_bit_key_fails_dkim_and_a_new_key_with_its_record_passes(
    tmp_path, dns_server, keys
) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["short"][1]))
    found = verdicts(site(tmp_path, keys["short"][0]), address)
    assert failing(found) == ["dkim"]
    assert "1024 bits" in found["dkim"].detail  # type: ignore[attr-defined]
    assert "rsa_keygen_bits:2048" in found["dkim"].fix  # type: ignore[attr-defined]
    # the fix: a new 2048-bit key, then the record doctor prints for it
    config = site(tmp_path, keys["good"][0])
    found = verdicts(config, address)
    assert failing(found) == ["dkim"]
    zone.publish(*found["dkim"].records)  # type: ignore[attr-defined]
    assert failing(verdicts(config, address)) == []


def test_p_reject_with_a_misaligned_return_path_fails_alignment_and_would_reject(
    tmp_path, dns_server, keys
) -> None:
    zone, address = dns_server
    public = keys["good"][1]
    zone.publish(good_zone(public))
    zone.publish(
        '_dmarc.example.org. TXT "v=DMARC1; p=reject"',
        'returns.example.net. TXT "v=spf1 a:relay.example.org -all"',
        "returns.example.net. MX 10 mail.example.org.",
        txt_record("news._domainkey.returns.example.net", dkim_record(public)),
    )
    # a relay service's setup: its return path, its signing domain
    misaligned = {
        "return_path": "bounces@returns.example.net",
        "dkim_domain": "returns.example.net",
    }
    config = site(tmp_path, keys["good"][0], **misaligned)
    found = verdicts(config, address)
    assert failing(found) == ["alignment"]
    alignment = found["alignment"]
    assert "p=reject" in alignment.detail  # type: ignore[attr-defined]
    assert 'email.dkim_domain = "example.org"' in alignment.fix  # type: ignore[attr-defined]
    setup = read_setup(config)  # type: ignore[arg-type]
    assert rejected(setup, Lookups(address), alignment)  # type: ignore[arg-type]
    mended = site(tmp_path, keys["good"][0], return_path=misaligned["return_path"])
    assert failing(verdicts(mended, address)) == []


def test_sending_ips_stand_for_the_relay_host(tmp_path, dns_server, keys) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    config = site(tmp_path, keys["good"][0], sending_ips=["198.51.100.0/24"])
    found = verdicts(config, address)
    assert failing(found) == ["spf"]
    assert "ip4:198.51.100.0/24" in found["spf"].fix  # type: ignore[attr-defined]
    zone.publish(*found["spf"].records)  # type: ignore[attr-defined]
    assert failing(verdicts(config, address)) == []


def test_p_none_is_a_warning_naming_the_next_step(tmp_path, dns_server, keys) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    zone.publish('_dmarc.example.org. TXT "v=DMARC1; p=none"')
    dmarc = verdicts(site(tmp_path, keys["good"][0]), address)["dmarc"]
    assert dmarc.ok and dmarc.severity == "warning"  # type: ignore[attr-defined]
    assert "p=quarantine" in dmarc.fix  # type: ignore[attr-defined]


def test_a_server_that_does_not_answer_is_dns_unreachable(tmp_path, keys) -> None:
    with unused_port_socket() as silent:
        host, port = silent.getsockname()
        lookups = Lookups(f"{host}:{port}", timeout=0.3)
        with pytest.raises(DnsUnreachable, match=f"{host}:{port}"):
            dns_checks(read_setup(site(tmp_path, keys["good"][0])), lookups)  # type: ignore[arg-type]


def test_the_nameserver_option_takes_a_host_and_a_port() -> None:
    assert nameserver_address("127.0.0.1:5300") == ("127.0.0.1", 5300)
    assert nameserver_address("[::1]:53") == ("::1", 53)
    assert nameserver_address("::1") == ("::1", 53)
    assert nameserver_address("localhost")[1] == 53
    with pytest.raises(UsageError, match="HOST"):
        nameserver_address("127.0.0.1:port")


def test_a_relay_on_loopback_leaves_spf_to_email_sending_ips(tmp_path, dns_server, keys) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    config = site(tmp_path, keys["good"][0]).model_copy(
        update={
            "smtp": parse_config(
                {"smtp": {"url": "smtp://127.0.0.1:25"}}, root=tmp_path, source="(test)", env={}
            ).smtp
        }
    )
    spf = verdicts(config, address)["spf"]
    assert spf.severity == "warning" and "127.0.0.1" in spf.detail  # type: ignore[attr-defined]
    assert "email.sending_ips" in spf.fix  # type: ignore[attr-defined]
    zone.remove("example.org.", "TXT")
    spf = verdicts(config, address)["spf"]
    assert not spf.ok and spf.records == ()  # type: ignore[attr-defined]
    assert "ip4:ADDRESS" in spf.fix and "127.0.0.1" not in spf.fix  # type: ignore[attr-defined]


def test_signing_off_fails_dkim_naming_the_keys_to_set(tmp_path, dns_server, keys) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    data = {
        "email": {"sender": "News <digest@example.org>"},
        "smtp": {"url": "smtp://relay.example.org"},
    }
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    found = verdicts(config, address)
    assert failing(found) == ["dkim"]  # the return path still aligns: SPF carries DMARC
    assert "email.dkim_selector" in found["dkim"].fix  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "records",
    [['"v=DMARC1; p=sometimes"'], ['"v=DMARC1; p=none"', '"v=DMARC1; p=reject"']],
    ids=["invalid", "two"],
)
def test_an_invalid_dmarc_record_or_two_of_them_fail(tmp_path, dns_server, keys, records) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    zone.remove("_dmarc.example.org.", "TXT")
    zone.add(*[f"_dmarc.example.org. TXT {text}" for text in records])
    found = verdicts(site(tmp_path, keys["good"][0]), address)
    assert failing(found) == ["dmarc"]


BOUNCE_READERS = {
    "the bounce mailbox at mail.example.org": MAILBOX,
    "the Postmark webhook": {"postmark_user": "postmark", "postmark_password": "hook password"},
    "the Mailgun webhook": {"mailgun_signing_key": "key-0123456789abcdef"},
    "the SendGrid webhook": {"sendgrid_public_key": SENDGRID_PUBLIC},
    "the Amazon SES webhook (through SNS)": {
        "sns_topics": ["arn:aws:sns:eu-west-1:123456789012:bounces"]
    },
}


@pytest.mark.parametrize("reader", list(BOUNCE_READERS))
def test_mx_is_ok_when_the_bounce_mailbox_or_a_webhook_reads_the_bounces(
    reader, tmp_path, dns_server, keys
) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    mx = verdicts(site(tmp_path, keys["good"][0], BOUNCE_READERS[reader]), address)["mx"]
    assert mx.severity == "ok"  # type: ignore[attr-defined]
    assert mx.detail.endswith(f"; read by {reader}")  # type: ignore[attr-defined]


def test_mx_warns_when_nothing_reads_the_bounces_and_names_the_key_that_mends_it(
    tmp_path, dns_server, keys
) -> None:
    zone, address = dns_server
    zone.publish(good_zone(keys["good"][1]))
    found = verdicts(site(tmp_path, keys["good"][0], bounces={}), address)
    assert failing(found) == []  # a warning: the mail still goes out, and bounces come back
    mx = found["mx"]
    assert mx.severity == "warning"  # type: ignore[attr-defined]
    assert "neither a bounce mailbox nor a relay's webhook" in mx.detail  # type: ignore[attr-defined]
    assert mx.fix.startswith('set bounces.imap_url = "imaps://')  # type: ignore[attr-defined]
    assert "bounces@example.org" in mx.fix  # type: ignore[attr-defined]
    for key in ("postmark_user", "mailgun_signing_key", "sendgrid_public_key", "sns_topics"):
        assert key in mx.fix  # type: ignore[attr-defined]
    assert [c.severity for c in found.values()] == ["ok"] * 4 + ["warning"]  # type: ignore[attr-defined]
    mended = site(tmp_path, keys["good"][0], {"imap_url": "imaps://bounces@mail.example.org"})
    assert verdicts(mended, address)["mx"].severity == "ok"  # type: ignore[attr-defined]
