"""The HTTP server: the listening socket and uvicorn serving the app on it. The one place a
connection comes in (``syndicate serve`` calls it; the app itself is ``app.py``'s)."""

from __future__ import annotations

import errno
import logging
import socket
from typing import Any

import uvicorn

from ..errors import ResourceBusyError, SyndicateError


def bind(host: str, port: int) -> socket.socket:
    """The listening socket on ``host``:``port``; a port that is taken is ResourceBusyError
    (exit 4), not the server's start-up failure."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            message = f"{host}:{port} is in use: another server listens there"
            raise ResourceBusyError(message) from None
        raise


def serve_app(app: Any, host: str, port: int, *, listener: socket.socket | None = None) -> None:
    """Listen on ``host``:``port`` (or on ``listener``, bound there already) and serve ``app``
    until stopped; a port that is taken is ResourceBusyError (exit 4)."""
    listener = listener if listener is not None else bind(host, port)
    # No access log: its lines would carry readers' tokens and addresses. No proxy headers
    # here: the app trusts them from web.trusted_proxies only (uvicorn would trust loopback).
    settings = uvicorn.Config(app, host=host, port=port, access_log=False, proxy_headers=False)
    server = uvicorn.Server(settings)
    shown = f"[{host}]" if ":" in host else host
    # What uvicorn says when it binds the socket itself, and not when it is handed one:
    logging.getLogger("uvicorn.error").info("Listening on http://%s:%d (Ctrl+C stops)", shown, port)
    server.run(sockets=[listener])
    if not server.started:  # its log says why
        raise SyndicateError(f"the web server on {host}:{port} did not start")
