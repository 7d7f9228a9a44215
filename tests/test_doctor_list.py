"""The list check over a real state database (SQLite and PostgreSQL) and a real DNS server:
readers whose domain takes no mail, role addresses, readers still sent to after a hard
bounce; a clean list passes."""

from __future__ import annotations

from syndicate.doctor.readers import check_readers, role_address
from syndicate.doctor.resolver import Lookups
from syndicate.state import open_store

from .sending import NOW
from .test_bounces import _deliveries, _report

ZONE = """
example.org. MX 10 mail.example.org.
mail.example.org. A 192.0.2.20
plain.example. A 192.0.2.30
nomail.example. MX 0 .
"""


def add(store, *emails: str):
    return [
        store.subscribers.add_subscriber(
            email, "en", ["cost"], status="active", consent_source="test", now=NOW
        )
        for email in emails
    ]


def verdict(store, address: str):
    readers = store.subscribers.all(status="active")
    return check_readers(readers, store.bounces.readers_at_risk(), Lookups(address))


def test_a_clean_list_passes(database_url, dns_server) -> None:
    zone, address = dns_server
    zone.publish(ZONE)
    store = open_store(database_url)
    add(store, "ann@example.org", "bob@plain.example")  # an MX; an address of its own
    check = verdict(store, address)
    assert check.severity == "ok" and "2 active reader(s) in 2 domain(s)" in check.detail
    store.close()


def test_readers_whose_domain_takes_no_mail_fail(database_url, dns_server) -> None:
    zone, address = dns_server
    zone.publish(ZONE)
    store = open_store(database_url)
    add(store, "ann@example.org", "cy@gone.example", "di@nomail.example")
    check = verdict(store, address)
    assert not check.ok
    assert "2 whose domain takes no mail (cy@gone.example, di@nomail.example)" in check.detail
    assert "syndicate subscribers remove" in check.fix
    store.subscribers.remove_subscriber("cy@gone.example")
    store.subscribers.remove_subscriber("di@nomail.example")
    assert verdict(store, address).ok
    store.close()


def test_role_addresses_and_readers_still_sent_to_after_a_hard_bounce_are_warned_of(
    database_url, dns_server
) -> None:
    zone, address = dns_server
    zone.publish(ZONE)
    store = open_store(database_url)
    [reader, _] = add(store, "ann@example.org", "Info+news@example.org")
    [delivery] = _deliveries(store, reader, 1)
    assert _report(store, delivery, "a" * 64, "permanent") == "counted"  # hard limit 2
    check = verdict(store, address)
    assert check.ok and check.severity == "warning"
    assert "1 role address(es) (Info+news@example.org)" in check.detail
    assert "1 still sent to after a hard bounce (ann@example.org)" in check.detail
    assert "bounces.hard_limit = 1" in check.fix
    store.close()


def test_role_addresses() -> None:
    assert role_address("postmaster@example.org") and role_address("NoReply@example.org")
    assert not role_address("information.desk.person@example.org")
