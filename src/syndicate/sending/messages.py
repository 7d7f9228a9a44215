"""Messages: one reader's message of an issue, as bytes, built by a ``MessageFactory`` made once
per send (the config, the token secret, the DKIM signer, each issue's stored rendering); the
addresses a message goes out with; the preview's and the reader notes' messages. Nothing here
is sent: a transport does that.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import parseaddr

from ..compose import compose_message, note_bytes
from ..config import Config
from ..errors import ConfigError, DeliveryError
from ..render import RenderedDigest
from ..routes import PREFERENCES, UNSUBSCRIBE, issue_name, issue_url, issues_url, reader_url
from ..signing import DkimSigner
from ..state import BouncePolicy, Claim, Issue
from ..tokens import reader_link, secret_key
from .transports import open_mailer

# -- addresses -----------------------------------------------------------------------------------


def sender_domain(sender: str) -> str:
    """The domain of the sender's address: Message-IDs and the bounce address are in it."""
    return parseaddr(sender)[1].rpartition("@")[2] or "localhost"


def bounce_policy(config: Config) -> BouncePolicy:
    """When bounces stop a reader's mail: ``[bounces]``, for the send and the bounce mailbox."""
    b = config.bounces
    return BouncePolicy(
        hard_limit=b.hard_limit,
        soft_limit=b.soft_limit,
        soft_days=timedelta(days=b.soft_days),
        hard_window=timedelta(days=b.hard_window_days),
    )


def return_path(config: Config) -> str:
    """The address bounces go back to, before each delivery's own part is added."""
    return config.email.return_path or f"bounces@{sender_domain(config.email.sender)}"


def message_ids(domain: str) -> str:
    """A digest's Message-IDs, with ``{issue}`` and ``{reader}`` for planning to fill in
    (``state.Planning``): stable per (issue, reader), so a resent or retried message keeps
    its Message-ID."""
    return f"<digest.{{issue}}.{{reader}}@{domain}>"


def envelope_sender(sender: str) -> str:
    """The bare address of a From header value, for MAIL FROM."""
    address = parseaddr(sender)[1]
    if not address or "\r" in address or "\n" in address:
        raise DeliveryError(f"email.sender has no usable address: {sender!r}")
    return address


def dkim_signer(config: Config) -> DkimSigner | None:
    """The configured DKIM signer, or None when signing is off."""
    email = config.email
    if not (email.dkim_selector and email.dkim_key_file):
        return None
    path = config.path(email.dkim_key_file)
    try:
        pem = path.read_bytes()
        domain = email.dkim_domain or sender_domain(email.sender)
        return DkimSigner(domain, email.dkim_selector, pem)
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), [f"email.dkim_key_file: {exc}"]) from None


# -- an issue's stored rendering and its page ----------------------------------------------------


def serialise_rendered(rendered: RenderedDigest) -> str:
    """The rendering as the issue stores it (JSON), so that every run sends the same."""
    return json.dumps(
        {f.name: getattr(rendered, f.name) for f in dataclasses.fields(rendered) if f.init},
        ensure_ascii=False,
    )


def restore_rendered(issue: Issue) -> RenderedDigest:
    """The rendering an issue stored (``serialise_rendered``)."""
    data = json.loads(issue.rendered)
    data["audiences"] = tuple(data["audiences"])
    return RenderedDigest(**data)


def issue_page_name(issue: Issue) -> str:
    return issue_name(issue.id, issue.key)


def view_url(config: Config, issue: Issue) -> str:
    return issue_url(config, issue.lang, issue_page_name(issue))


# -- the readers' messages -----------------------------------------------------------------------


class MessageFactory:
    """Each reader's message of an issue, as bytes: their personal links, signed when DKIM is
    set. Made once per send (``for_send``); each issue's rendering is restored from the store
    once, on first use."""

    def __init__(
        self, config: Config, now: datetime, secret: bytes, signer: DkimSigner | None
    ) -> None:
        self.config = config
        self.now = now
        self.secret = secret
        self.signer = signer
        self.restored: dict[int, RenderedDigest] = {}

    @classmethod
    def for_send(cls, config: Config, now: datetime) -> MessageFactory:
        """The factory of one send at ``now``: the config's token secret and DKIM signer."""
        return cls(config, now, secret_key(config), dkim_signer(config))

    def rendered(self, issue: Issue) -> RenderedDigest:
        if issue.id not in self.restored:
            self.restored[issue.id] = restore_rendered(issue)
        return self.restored[issue.id]

    def message(self, issue: Issue, claim: Claim) -> bytes:
        """The message of ``issue`` for the reader ``claim`` holds."""
        config, now, reader = self.config, self.now, claim.subscriber_id
        links = {
            "unsubscribe_url": reader_link(config, self.secret, UNSUBSCRIBE, reader, issued=now),
            "preferences_url": reader_link(config, self.secret, PREFERENCES, reader, issued=now),
        }
        message = compose_message(
            self.rendered(issue),
            to=claim.email,
            sender=config.email.sender,
            message_id=claim.message_id,
            date=now,
            list_id=config.email.list_id,
            unsubscribe_mailto=config.email.unsubscribe_mailto,
            view_url=view_url(config, issue),
            reply_to=config.email.reply_to,
            **links,
        )
        return self.signer.sign(message, now=now) if self.signer else message


# -- previews and reader notes -------------------------------------------------------------------

PREVIEW_TOKEN = "PREVIEW-ONLY-NOT-A-READER-TOKEN"
"""Stands in for a reader's token in previews, so no preview link acts on a real reader."""


def preview_links(config: Config, lang: str) -> dict[str, str]:
    """Reader links for a preview: the real routes, with a token that is plainly not real
    (the web side answers it like any forged token), and the language's archive to view."""
    return {
        "unsubscribe_url": reader_url(config, UNSUBSCRIBE, PREVIEW_TOKEN),
        "preferences_url": reader_url(config, PREFERENCES, PREVIEW_TOKEN),
        "view_url": issues_url(config, lang),
    }


def preview_page(rendered: RenderedDigest, config: Config) -> str:
    """The HTML of one variant as a reader would see it, with the preview's links."""
    return rendered.personalise(**preview_links(config, rendered.lang)).html


def preview_files(rendered: RenderedDigest, config: Config, *, now: datetime) -> dict[str, bytes]:
    """The .html, .txt and .eml of one variant, addressed to the configured preview reader."""
    links = preview_links(config, rendered.lang)
    personal = rendered.personalise(**links)
    domain = sender_domain(config.email.sender)
    message = compose_message(
        rendered,
        to=config.email.preview_to,
        sender=config.email.sender,
        message_id=f"<preview.{rendered.key}.{rendered.content_hash[:12]}@{domain}>",
        date=now,
        list_id=config.email.list_id,
        unsubscribe_mailto=config.email.unsubscribe_mailto,
        reply_to=config.email.reply_to,
        **links,
    )
    return {".html": personal.html.encode(), ".txt": personal.text.encode(), ".eml": message}


def message_sender(config: Config) -> Callable[[EmailMessage], None]:
    """Send single messages (the web side's confirmations) through the configured mailer,
    signed like the digests."""
    mailer, signer = open_mailer(config), dkim_signer(config)
    sender = envelope_sender(config.email.sender)

    def send(message: EmailMessage) -> None:
        data = note_bytes(message)
        if signer is not None:
            data = signer.sign(data)
        transport = mailer.open()
        try:
            transport.send(sender, message["To"], data)
        finally:
            transport.close()

    return send
