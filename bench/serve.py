"""Feed serving throughput: `syndicate serve` beside bare static file servers, in one run.

Each server runs in its own process on loopback and serves the same ~100 kB Atom file; a
keep-alive asyncio load generator sends full GETs, gzip GETs and conditional GETs (304), a
bounded number per case. Prints requests per second and the ratio to each baseline:
a bare Starlette StaticFiles app under the same uvicorn, and the standard library's http.server.

    .venv/bin/python bench/serve.py
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REQUESTS = 2000  # per round
SECONDS = 3.0  # per round at most
ROUNDS = 3  # best of, against noise from other work on the machine
CONNECTIONS = 8
FEED = "nl.atom.xml"


def write_feed(folder: Path) -> bytes:
    entries = "".join(
        f"<entry><id>tag:example.org,2025:nl/article-{n}</id><title>Artikel {n}</title>"
        f"<updated>2025-12-{n % 28 + 1:02d}T09:00:00+01:00</updated>"
        f'<link href="https://example.org/nl/article-{n}/"/>'
        f"<summary>{'Analyse van AI-infrastructuur, kosten en strategie. ' * 30}</summary></entry>"
        for n in range(50)
    )
    body = (
        '<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom" '
        f'xml:lang="nl"><title>Syndicate</title>{entries}</feed>\n'
    ).encode()
    (folder / "feeds").mkdir()
    (folder / "feeds" / FEED).write_bytes(body)
    return body


def serve(kind: str, port: int, root: Path) -> None:
    """Child process: run one server until killed."""
    if kind == "stdlib":
        from functools import partial
        from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

        class Handler(SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like the others

            def log_message(self, *args: object) -> None:
                pass

        handler = partial(Handler, directory=str(root))
        ThreadingHTTPServer(("127.0.0.1", port), handler).serve_forever()
        return
    import uvicorn

    if kind == "static":
        from starlette.applications import Starlette
        from starlette.routing import Mount
        from starlette.staticfiles import StaticFiles

        app = Starlette(routes=[Mount("/feeds", StaticFiles(directory=root / "feeds"))])
    else:
        from datetime import UTC, datetime

        from syndicate.config import parse_config
        from syndicate.model import ArticleSet
        from syndicate.state import open_store
        from syndicate.web import create_app

        config = parse_config({}, root=root, source="(bench)", env={})

        def no_mail(message: object) -> None:
            raise RuntimeError("the benchmark sends no mail")

        app = create_app(
            config,
            store=open_store(config.database_url),
            send_message=no_mail,
            articles=ArticleSet,
            secret=b"bench",
            now=lambda: datetime.now(UTC),
        )
    # As `syndicate serve` runs it: no access log, no proxy headers (the app reads them itself
    # from web.trusted_proxies only).
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
    )


async def load(port: int, headers: dict[str, str]) -> tuple[float, dict[int, int]]:
    """REQUESTS GETs over CONNECTIONS keep-alive connections; (requests/s, status counts)."""
    request = (
        f"GET /feeds/{FEED} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        + "\r\n"
    ).encode()
    statuses: dict[int, int] = {}
    left = REQUESTS
    deadline = time.perf_counter() + SECONDS

    async def worker() -> None:
        nonlocal left
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while left > 0 and time.perf_counter() < deadline:
            left -= 1
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            length = next(
                (
                    int(line.split(":")[1])
                    for line in lines
                    if line.lower().startswith("content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            statuses[status] = statuses.get(status, 0) + 1
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    return sum(statuses.values()) / (time.perf_counter() - start), statuses


def probe(port: int, headers: dict[str, str] | None = None) -> dict[str, str]:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", f"/feeds/{FEED}", headers=headers or {})
    response = connection.getresponse()
    response.read()
    connection.close()
    return {k.lower(): v for k, v in response.getheaders()}


def start(kind: str, root: Path) -> tuple[subprocess.Popen, int]:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    child = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port), str(root)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return child, port
        except OSError:
            time.sleep(0.1)
    child.kill()
    raise SystemExit(f"{kind} server did not start")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        size = len(write_feed(root))
        print(
            f"feed: {size / 1024:.0f} kB; best of {ROUNDS} rounds of at most {REQUESTS} requests "
            f"or {SECONDS:.0f} s, over {CONNECTIONS} keep-alive connections"
        )
        servers = {kind: start(kind, root) for kind in ("app", "static", "stdlib")}
        try:
            cases: dict[tuple[str, str], dict[str, str]] = {}
            for kind, (_, port) in servers.items():
                served = probe(port)
                cases[(kind, "full")] = {}
                if kind == "stdlib":  # http.server knows Last-Modified, not ETag
                    cases[(kind, "conditional")] = {"If-Modified-Since": served["last-modified"]}
                else:
                    cases[(kind, "conditional")] = {"If-None-Match": served["etag"]}
                asyncio.run(load(port, {}))  # warm up
            cases[("app", "gzip")] = {"Accept-Encoding": "gzip"}
            # Rounds interleave the servers, so load from elsewhere on the machine hits all alike.
            results: dict[tuple[str, str], float] = dict.fromkeys(cases, 0.0)
            for _ in range(ROUNDS):
                for (kind, case), headers in cases.items():
                    rate, statuses = asyncio.run(load(servers[kind][1], headers))
                    expected = 304 if case == "conditional" else 200
                    if set(statuses) != {expected}:
                        raise SystemExit(f"{kind} {case}: unexpected statuses {statuses}")
                    results[(kind, case)] = max(results[(kind, case)], rate)
        finally:
            for child, _ in servers.values():
                child.terminate()
                child.wait(timeout=10)
        for (kind, case), rate in results.items():
            print(f"  {kind:7} {case:12} {rate:8.0f} req/s")
        print("ratios (syndicate serve / baseline):")
        for case in ("full", "conditional"):
            for base in ("static", "stdlib"):
                ratio = results[("app", case)] / results[(base, case)]
                print(f"  {case:12} vs {base:7} {ratio:5.2f}x")
        gzipped = results[("app", "gzip")] / results[("app", "full")]
        print(f"  gzip         vs full    {gzipped:5.2f}x")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    else:
        main()
