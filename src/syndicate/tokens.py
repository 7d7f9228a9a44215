"""Signed reader tokens: the only credential a reader's links carry.

A token names one subscriber for one purpose (confirm, unsubscribe, preferences), or for the
editor's preview link one held issue, and records when it was issued. It is HMAC-SHA256 signed
with the site's secret key, so it cannot be forged, altered or reused for another purpose;
there is no token table to keep.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import struct
from datetime import UTC, datetime, timedelta

from .config import Config
from .files import write_once
from .routes import CONFIRM, PREFERENCES, PREVIEW, UNSUBSCRIBE, held_preview_url, reader_url

__all__ = [
    "CONFIRM",
    "PREFERENCES",
    "PREVIEW",
    "UNSUBSCRIBE",
    "make_token",
    "preview_link",
    "preview_max_age",
    "read_token",
    "reader_link",
    "secret_key",
]

_BODY = struct.Struct(">QQ")  # subscriber id, issued (seconds since the epoch)
_TOKEN = re.compile(r"[A-Za-z0-9_-]{64}")  # base64 of body + SHA-256 MAC, 48 bytes


def _mac(secret: bytes, purpose: str, body: bytes) -> bytes:
    return hmac.new(secret, purpose.encode() + b"\0" + body, hashlib.sha256).digest()


def make_token(secret: bytes, purpose: str, subscriber_id: int, *, issued: datetime) -> str:
    """A URL-safe token for ``subscriber_id`` that only ``read_token`` of ``purpose`` accepts."""
    body = _BODY.pack(subscriber_id, int(issued.timestamp()))
    return base64.urlsafe_b64encode(body + _mac(secret, purpose, body)).rstrip(b"=").decode()


def read_token(
    secret: bytes,
    purpose: str,
    token: str,
    max_age: timedelta | None = None,
    *,
    now: datetime | None = None,
) -> int | None:
    """The subscriber id of a genuine, unexpired token of this purpose; None for anything else.

    ``now`` is required with ``max_age``. The signature is compared in constant time.
    """
    # Only the exact text make_token writes: a body and a MAC of 48 bytes are 64 characters
    # of the URL-safe alphabet, no padding; anything added, removed or padded is refused.
    if not _TOKEN.fullmatch(token):
        return None
    raw = base64.urlsafe_b64decode(token)
    body, mac = raw[: _BODY.size], raw[_BODY.size :]
    if not hmac.compare_digest(mac, _mac(secret, purpose, body)):
        return None
    subscriber_id, issued = _BODY.unpack(body)
    if max_age is not None:
        if now is None:
            raise ValueError("read_token: max_age needs now")
        age = now - datetime.fromtimestamp(issued, UTC)
        if age > max_age or age < -timedelta(minutes=5):
            return None
    return subscriber_id


def reader_link(
    config: Config, secret: bytes, purpose: str, subscriber_id: int, *, issued: datetime
) -> str:
    """A reader's own link for ``purpose``: a fresh token of that purpose, at its route."""
    return reader_url(config, purpose, make_token(secret, purpose, subscriber_id, issued=issued))


def preview_max_age(config: Config) -> timedelta:
    """How long a preview link works: as long as an issue may be held
    (``email.approval_expires_days``); the issue's approval or rejection ends it sooner."""
    return timedelta(days=config.email.approval_expires_days)


def preview_link(config: Config, secret: bytes, issue_id: int, *, issued: datetime) -> str:
    """The editor's link to the preview of the held issue ``issue_id``: a token of PREVIEW."""
    return held_preview_url(config, make_token(secret, PREVIEW, issue_id, issued=issued))


def secret_key(config: Config) -> bytes:
    """web.secret_key (or SYNDICATE_SECRET_KEY); without one, a key generated once and kept in
    web.secret_key_file, so links in mails already sent keep working after a restart."""
    if config.web.secret_key is not None:
        return config.web.secret_key.get_secret_value().encode()
    path = config.path(config.web.secret_key_file)
    if not path.exists():
        write_once(path, (secrets.token_urlsafe(32) + "\n").encode())
    return path.read_text("ascii").strip().encode()
