"""What the web tests share: a client of the whole app over a real SQLite file or PostgreSQL
schema, with a real SMTP server (tests/mailserver.py) behind its mail sender."""

from __future__ import annotations

import smtplib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

import lxml.html
import pytest
import uvicorn
from starlette.testclient import TestClient

from syndicate.config import Config, parse_config
from syndicate.reader import read_articles
from syndicate.state import Store, open_store
from syndicate.web import create_app
from tests.conftest import ARTICLES
from tests.mailserver import free_port

__all__ = ["free_port"]

SECRET = b"test secret key"
SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"


def smtp_mailer(port: int):
    def send(message: EmailMessage) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as server:
            server.send_message(message)

    return send


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def web_config(root: Path, base_url: str = "http://testserver", **web: object) -> Config:
    data = {"site": {"base_url": base_url}, "web": web}
    return parse_config(data, root=root, source="(test)", env={})


def write_feeds(folder: Path) -> dict[str, bytes]:
    """A few files as `syndicate build` writes them."""
    files = {
        "nl.atom.xml": b'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom">'
        + b"<title>nl</title>" * 100
        + b"</feed>",
        "nl.rss.xml": b'<?xml version="1.0"?><rss version="2.0"><channel/></rss>',
        "nl.json": b'{"version": "https://jsonfeed.org/version/1.1", "items": []}',
        "nl/cost.atom.xml": b'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"/>',
        "nl/cost.rss.xml": b'<?xml version="1.0"?><rss version="2.0"><channel/></rss>',
        "nl/cost.json": b'{"version": "https://jsonfeed.org/version/1.1", "items": []}',
        "index.opml": b'<?xml version="1.0"?><opml version="2.0"/>',
        "archive/nl-1.atom.xml": b'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"/>',
    }
    for name, body in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(body)
    return files


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    opened = open_store(database_url)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def article_set():
    config = parse_config({}, root=ARTICLES, source="(test)", env={})
    return read_articles(ARTICLES, config.profiles)


def make_client(config, store, mailer, article_set, clock, **options) -> TestClient:
    """The site's app on ``store`` with ``options`` for ``create_app`` (an SNS client, ...)."""
    app = create_app(
        config,
        store=store,
        send_message=mailer,
        articles=lambda: article_set,
        secret=SECRET,
        now=clock,
        **options,
    )
    return TestClient(app, follow_redirects=False)


@pytest.fixture
def site(tmp_path, store, smtp_server, article_set, clock):
    """A client of the whole app plus what it writes to: store, inbox, clock, feed files."""
    config = web_config(tmp_path, subscribe_per_minute=3)
    (tmp_path / "feeds").mkdir()
    files = write_feeds(tmp_path / "feeds")
    inbox, port = smtp_server
    client = make_client(config, store, smtp_mailer(port), article_set, clock)
    return client, store, inbox, clock, files


def html(response) -> lxml.html.HtmlElement:
    return lxml.html.fromstring(response.text)


SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}
"""What a browser says of a form posted from a page of the same site (the subscribe form
needs it: the index page is the same for every visitor, with no token of theirs)."""


def subscribe(
    client: TestClient, email: str, lang: str = "nl", audiences=("cost",), headers=None, **extra
):
    data = {"email": email, "lang": lang, "audiences": list(audiences)}
    return client.post(
        "/subscribe", data={**data, **extra}, headers={**SAME_ORIGIN, **(headers or {})}
    )


def listening_socket() -> socket.socket:
    """A loopback socket that already listens: its port is known before the server runs,
    and a client that connects early waits in the backlog instead of being refused."""
    return socket.create_server(("127.0.0.1", 0))


def base_url_of(listener: socket.socket) -> str:
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


@contextmanager
def running(app, listener: socket.socket) -> Iterator[uvicorn.Server]:
    """``app`` under uvicorn on ``listener``, as `syndicate serve` runs it, until the block
    ends. No readiness wait is needed: the socket listens before the server starts."""
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()
