"""Amazon SNS, reached from the SES webhook: its signing certificates and its subscription
confirmations, two GETs to its own hosts. The one place of the web side that makes outbound
HTTP requests (tests/test_boundaries.py), and only to URLs that match ``allowed``: SNS's
hosts over HTTPS, unless a test serves them itself.
"""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
from collections import OrderedDict

from ..bounces.sns import SNS_URL, sns_url_ok


class SnsUnreachable(Exception):
    """SNS did not answer (or not with a certificate): the request may be tried again."""


class SnsClient:
    """Fetches SNS's signing certificates (each URL once, then from memory) and confirms
    subscriptions, at URLs that match ``allowed`` only."""

    KEPT = 16
    """Certificates kept: SNS signs with one per region at a time."""

    def __init__(self, allowed: re.Pattern[str] = SNS_URL, *, timeout: float = 10.0) -> None:
        self.allowed = allowed
        self.timeout = timeout
        self._certificates: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def certificate(self, url: str) -> bytes | None:
        """The PEM certificate at ``url``; None when ``url`` is not SNS's. Raises
        ``SnsUnreachable`` when it cannot be fetched."""
        if not (sns_url_ok(url, self.allowed) and url.endswith(".pem")):
            return None
        with self._lock:
            if url in self._certificates:
                self._certificates.move_to_end(url)
                return self._certificates[url]
        pem = self._get(url)
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise SnsUnreachable(f"{url}: not a PEM certificate")
        with self._lock:
            self._certificates[url] = pem
            while len(self._certificates) > self.KEPT:
                self._certificates.popitem(last=False)
        return pem

    def confirm(self, url: str) -> bool:
        """Confirm a subscription by visiting its SubscribeURL; False when ``url`` is not
        SNS's. Raises ``SnsUnreachable`` when SNS does not take it."""
        if not sns_url_ok(url, self.allowed):
            return False
        self._get(url)
        return True

    def _get(self, url: str) -> bytes:
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:
                body: bytes = response.read(1 << 16)
        except (urllib.error.URLError, OSError) as exc:
            raise SnsUnreachable(f"{url}: {exc}") from None
        return body
