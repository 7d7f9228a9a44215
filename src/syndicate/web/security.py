"""What guards the web side: CSRF tokens tied to a cookie, per-key rate limits, the headers
pages carry, and which proxies may name the client. No I/O; the clock is passed in."""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections import defaultdict, deque
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

CSRF_COOKIE = "syndicate_csrf"
PAGE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
}
TOKEN_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex",
}
"""Token pages: no caching, no indexing, and no Referer carrying the token to another site."""
ISSUE_HEADERS = {
    **PAGE_HEADERS,
    "Content-Security-Policy": "default-src 'none'; "
    "style-src 'unsafe-inline'; img-src 'self' https: data:; base-uri 'none'",
}
"""A sent issue's page: the newsletter's own HTML, whose images may live elsewhere."""


def csrf_field(secret: bytes, nonce: str) -> str:
    """The form field that goes with the cookie ``nonce``: only this site can compute it."""
    return hmac.new(secret, b"csrf\0" + nonce.encode(), hashlib.sha256).hexdigest()


def csrf_ok(secret: bytes, request: Request, form: FormData) -> bool:
    """Whether ``form`` carries the field of the request's own cookie (compared in constant
    time): a page of another site can make the browser post, not read the field."""
    nonce = request.cookies.get(CSRF_COOKIE, "")
    sent = form.get("csrf")
    if not nonce or not isinstance(sent, str):
        return False
    return hmac.compare_digest(sent, csrf_field(secret, nonce))


def same_origin(base_url: str, request: Request) -> bool:
    """Whether the browser says the request comes from a page of this site: ``Origin`` is
    ``base_url``'s, or ``Sec-Fetch-Site`` is ``same-origin``. A page of another site cannot
    make a browser send either, so a form on a public page (the same for every visitor, as a
    static host serves it) needs no token tied to a cookie."""
    if request.headers.get("sec-fetch-site") == "same-origin":
        return True
    parts = urlsplit(base_url)
    origin = request.headers.get("origin", "").rstrip("/")
    return bool(origin) and origin == f"{parts.scheme}://{parts.netloc}"


class RateLimit:
    """At most ``limit`` hits per key in any ``window``, kept in memory. Handlers run in
    Starlette's thread pool, so one lock guards the table."""

    def __init__(self, limit: int, window: timedelta = timedelta(minutes=1)) -> None:
        self.limit = limit
        self.window = window
        self._hits: dict[str, deque[datetime]] = defaultdict(deque)
        self._lock = threading.Lock()

    def allow(self, key: str, now: datetime) -> bool:
        with self._lock:
            return self._allow(key, now)

    def _allow(self, key: str, now: datetime) -> bool:
        window = now - self.window
        if len(self._hits) > 10_000:  # forget idle clients so the table cannot grow unbounded
            for idle in [k for k, q in self._hits.items() if not q or q[-1] <= window]:
                del self._hits[idle]
        hits = self._hits[key]
        while hits and hits[0] <= window:
            hits.popleft()
        if len(hits) >= self.limit:
            return False
        hits.append(now)
        return True


def proxy_middleware(trusted_proxies: list[str]) -> list[Middleware]:
    """The client address (the subscribe limit's key) comes from X-Forwarded-For only when the
    connection comes from a trusted proxy; the header of anyone else is ignored."""
    if not trusted_proxies:
        return []
    return [Middleware(ProxyHeadersMiddleware, trusted_hosts=trusted_proxies)]
