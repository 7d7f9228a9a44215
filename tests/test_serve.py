"""`syndicate serve` as a process: what it warns about, --dev, and whose client address counts."""

from __future__ import annotations

import http.cookiejar
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import feedparser
import pytest

from syndicate.web import base_url_elsewhere, listening_url
from tests.conftest import ARTICLES
from tests.mailserver import free_port


@pytest.mark.parametrize(
    ("base_url", "host", "port", "elsewhere"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1", 8080, False),
        ("http://127.0.0.1:8080", "127.0.0.1", 9000, True),
        ("http://localhost:8080", "0.0.0.0", 8080, False),
        ("http://localhost", "127.0.0.1", 80, False),
        ("http://localhost", "127.0.0.1", 8080, True),
        ("http://127.0.0.1:8080", "192.0.2.4", 8080, True),  # loopback is not that interface
        ("http://192.0.2.4:8080", "192.0.2.4", 8081, True),
        ("http://[::1]:8080", "::1", 8080, False),
        ("https://example.org", "127.0.0.1", 8080, False),  # a reverse proxy's public name
    ],
)
def test_a_base_url_pointing_elsewhere_is_recognised(base_url, host, port, elsewhere):
    assert (base_url_elsewhere(base_url, host, port) is not None) is elsewhere


def test_the_dev_base_url_is_one_a_browser_here_reaches():
    assert listening_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert listening_url("::", 8000) == "http://[::1]:8000"
    assert listening_url("192.0.2.4", 80) == "http://192.0.2.4:80"


@contextmanager
def serving(folder: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`syndicate serve` in ``folder`` on a free port, until the block ends."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "syndicate", "serve", "--port", str(port), *options],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder)},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:  # readiness wait, not a timing assertion
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"serve did not start: {server.communicate()[1]}")
                time.sleep(0.1)
        yield url, server
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def site(tmp_path: Path, config: str = "") -> Path:
    shutil.copytree(ARTICLES, tmp_path / "articles")
    (tmp_path / "config.toml").write_text(config, "utf-8")
    return tmp_path


def test_serve_on_another_port_warns_that_links_lead_elsewhere(tmp_path: Path) -> None:
    with serving(site(tmp_path)) as (_, server):
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=30)
    assert re.search(
        r"warning: site\.base_url is http://127\.0\.0\.1:8080 but this server listens on "
        r"http://127\.0\.0\.1:\d+: links in pages, feeds and mails lead elsewhere",
        stderr,
    ), stderr


def test_serve_dev_links_to_itself(tmp_path: Path) -> None:
    folder = site(tmp_path)
    with serving(folder, "--dev") as (url, server):
        page = urllib.request.urlopen(f"{url}/en/").read().decode()
        feed = feedparser.parse(urllib.request.urlopen(f"{url}/feeds/en.atom.xml").read())
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=30)
    assert f'href="{url}/feeds/en.atom.xml"' in page
    links = [link.href for entry in feed.entries for link in entry.links]
    assert links and all(link.startswith(f"{url}/") for link in links), links
    assert "warning" not in stderr
    assert not (folder / "feeds").exists()  # the configured feeds folder is left alone


def post_subscribe(url: str, opener: urllib.request.OpenerDirector, forwarded: str) -> int:
    data = {"email": f"r{forwarded}@example.org", "lang": "nl", "audiences": "cost"}
    request = urllib.request.Request(
        f"{url}/subscribe",
        data=urllib.parse.urlencode(data).encode(),
        headers={"X-Forwarded-For": forwarded, "Sec-Fetch-Site": "same-origin"},
    )
    try:
        with opener.open(request) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_client_cannot_pick_its_rate_limit_bucket(tmp_path: Path) -> None:
    """The server itself, not only the app: uvicorn trusts X-Forwarded-For from loopback by
    default, and this client connects from loopback."""
    folder = site(tmp_path, "[web]\nsubscribe_per_minute = 2\n")
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    with serving(folder) as (url, _):
        statuses = [post_subscribe(url, opener, f"198.51.100.{n}") for n in range(3)]
    assert statuses == [200, 200, 429]
