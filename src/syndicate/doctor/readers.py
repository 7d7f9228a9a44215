"""The list check: active readers whose mail cannot arrive or should not be sent. A domain
with no MX and no address (or a null MX) bounces every digest; a role address (postmaster@,
info@) is a team's, not one reader's consent, and a spam trap's favourite; a reader who
bounced hard and is still sent to (bounces.hard_limit above 1) costs the sender reputation.
The readers come from the state Store; the domains' answers from ``Lookups``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..state import AtRisk, Subscriber
from .report import Check, failed, passed, warned
from .resolver import Lookups

ROLES = frozenset(
    {
        "abuse",
        "admin",
        "administrator",
        "billing",
        "contact",
        "help",
        "hostmaster",
        "info",
        "mail",
        "mailer-daemon",
        "marketing",
        "no-reply",
        "noc",
        "noreply",
        "office",
        "postmaster",
        "root",
        "sales",
        "security",
        "support",
        "webmaster",
    }
)
"""Local parts that name a role (RFC 2142's and the common ones), not a person."""
SHOWN = 5


def role_address(email: str) -> bool:
    local = email.rpartition("@")[0].split("+")[0].lower()
    return local in ROLES


def receives_mail(domain: str, lookups: Lookups) -> bool:
    """Whether mail to ``domain`` has somewhere to go: an MX that is not null (RFC 7505),
    or else an address of its own."""
    hosts = [host for _, host in lookups.mx(domain)]
    if hosts:
        return any(host not in ("", ".") for host in hosts)
    return bool(lookups.addresses(domain))


def _some(addresses: Sequence[str]) -> str:
    more = f" and {len(addresses) - SHOWN} more" if len(addresses) > SHOWN else ""
    return ", ".join(addresses[:SHOWN]) + more


def check_readers(
    readers: Iterable[Subscriber], at_risk: Iterable[AtRisk], lookups: Lookups
) -> Check:
    """``readers``: the active ones; ``at_risk``: the store's readers with bounces on record."""
    readers = list(readers)
    domains = sorted({r.email.rpartition("@")[2].lower() for r in readers})
    dead = {d for d in domains if not receives_mail(d, lookups)}
    undeliverable = [r.email for r in readers if r.email.rpartition("@")[2].lower() in dead]
    roles = [r.email for r in readers if role_address(r.email)]
    bounced = [r.email for r in at_risk if r.status == "active" and r.bounces > 0]
    found, fixes = [], []
    if undeliverable:
        found.append(f"{len(undeliverable)} whose domain takes no mail ({_some(undeliverable)})")
        fixes.append("remove them (syndicate subscribers remove ADDRESS): each digest bounces")
    if roles:
        found.append(f"{len(roles)} role address(es) ({_some(roles)})")
        fixes.append("ask for a person's address; role addresses are often spam traps")
    if bounced:
        found.append(f"{len(bounced)} still sent to after a hard bounce ({_some(bounced)})")
        fixes.append("bounces.hard_limit = 1 stops them at the first (see syndicate bounces list)")
    if undeliverable:
        return failed("list", "; ".join(found), "; ".join(fixes))
    if found:
        return warned("list", "; ".join(found), "; ".join(fixes))
    return passed("list", f"{len(readers)} active reader(s) in {len(domains)} domain(s)")
