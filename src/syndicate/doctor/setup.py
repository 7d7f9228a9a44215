"""What the checks check, read once from the config: the domains of the From header and the
return path, the DKIM selector, domain and key, and the relay's host or outbound addresses."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

from ..config import Config
from ..sending.messages import return_path, sender_domain


@dataclass(frozen=True)
class Setup:
    from_domain: str
    return_address: str
    dkim_selector: str | None
    dkim_domain: str | None
    dkim_key: bytes | None
    """The private key's PEM, or None when it is unset or unreadable (``dkim_problem``)."""
    dkim_problem: str | None
    relay_host: str | None
    sending_ips: tuple[str, ...]
    bounce_readers: tuple[str, ...]
    """What reads the bounces that come back: the IMAP bounce mailbox and the relays'
    webhooks that are configured (empty: none is, and bounces pile up unread)."""

    @property
    def return_domain(self) -> str:
        return self.return_address.rpartition("@")[2].lower()


def read_setup(config: Config) -> Setup:
    """The config's sending setup; the DKIM key file is read here (its problem kept, not
    raised, so that the other checks still run)."""
    email, bounces = config.email, config.bounces
    key, problem = None, None
    if email.dkim_key_file is not None:
        path = config.path(email.dkim_key_file)
        try:
            key = path.read_bytes()
        except OSError as exc:
            problem = f"email.dkim_key_file {path}: {exc.strerror or exc}"
    readers = [
        name
        for name, on in (
            (
                f"the bounce mailbox at {urlsplit(bounces.imap_url or '').hostname}",
                bounces.imap_url,
            ),
            ("the Postmark webhook", bounces.postmark_user),
            ("the Mailgun webhook", bounces.mailgun_signing_key),
            ("the SendGrid webhook", bounces.sendgrid_public_key),
            ("the Amazon SES webhook (through SNS)", bounces.sns_topics),
        )
        if on
    ]
    domain = sender_domain(email.sender).lower()
    return Setup(
        from_domain=domain,
        return_address=return_path(config),
        dkim_selector=email.dkim_selector,
        dkim_domain=(email.dkim_domain or domain).lower() if email.dkim_selector else None,
        dkim_key=key,
        dkim_problem=problem,
        relay_host=urlsplit(config.smtp.url).hostname if config.smtp.url else None,
        sending_ips=tuple(email.sending_ips),
        bounce_readers=tuple(readers),
    )


@cache
def _suffixes() -> object:
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def organisational_domain(domain: str) -> str:
    """The registered domain of ``domain`` (example.co.uk of news.example.co.uk), from the
    public suffix list, as DMARC's relaxed alignment compares them."""
    found = _suffixes().privatesuffix(domain.lower())  # type: ignore[attr-defined]
    return str(found) if found else domain.lower()
