"""The relay check: connect, EHLO, STARTTLS offered with a certificate valid for the host (or
implicit TLS), the login accepted; nothing is sent. The SMTP itself is
``sending.transports.probe_relay``'s."""

from __future__ import annotations

import ssl

from ..config import Config
from ..errors import DeliveryError
from ..sending.transports import MaildirMailer, SmtpMailer, open_mailer, probe_relay
from .report import Check, failed, passed, warned

FIXES = {
    "connect": "check smtp.url's host and port, and that this machine may reach it (a firewall "
    "may hold port 25)",
    "starttls": "use the relay's submission port with STARTTLS (smtp+starttls://HOST:587) or "
    "implicit TLS (smtps://HOST:465): without it the login and every message cross in clear",
    "certificate": "the relay's certificate must be current, issued for the host in smtp.url and "
    "by an authority this machine trusts: renew it, or name the host it was issued for",
    "login": "check smtp.username and the password (SYNDICATE_SMTP_PASSWORD)",
}


def check_relay(config: Config, context: ssl.SSLContext | None = None) -> Check:
    """``context`` checks the certificate (unset: the system's trust store)."""
    try:
        mailer = open_mailer(config)
    except DeliveryError as exc:
        return failed("relay", str(exc), "set smtp.url to smtp+starttls://HOST:587")
    if isinstance(mailer, MaildirMailer):
        return warned(
            "relay",
            f"no relay is set: mail goes to the Maildir {mailer.path}",
            "set smtp.url (smtp+starttls://HOST:587) to send to readers",
        )
    assert isinstance(mailer, SmtpMailer)
    where = f"{mailer.host}:{mailer.port}"
    probe = probe_relay(mailer, context)
    if probe.failed_at is not None:
        return failed(
            "relay", f"{where}: {probe.failed_at}: {probe.problem}", FIXES[probe.failed_at]
        )
    said = {"implicit": "implicit TLS", "starttls": "STARTTLS", "none": "no TLS"}[probe.tls]
    login = "login accepted" if probe.logged_in else "no login set"
    detail = f"{where}: {said}, certificate valid for {mailer.host}, {login}; nothing sent"
    if mailer.security == "plain":
        return warned(
            "relay",
            f"{where} offers STARTTLS but smtp.url is smtp://, so the send would not use it",
            f"write smtp+starttls://{where}",
        )
    return passed("relay", detail)
