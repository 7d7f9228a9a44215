"""A real WebSub hub endpoint in the test process (Starlette under uvicorn, on loopback).

It records every publish request (its form fields, in order) and answers from a script:
``script`` holds the status codes to give next, in order (a 5xx, a 400); when it is empty,
the hub answers 204. ``refuse_batches`` answers 400 to a request naming several feeds, as
hubs that read one ``hub.topic`` per request do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Hub:
    url: str = ""
    requests: list[list[tuple[str, str]]] = field(default_factory=list)
    script: list[int] = field(default_factory=list)
    refuse_batches: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def urls(self) -> list[list[str]]:
        """The ``hub.url`` values of each request."""
        with self.lock:
            return [[v for k, v in fields if k == "hub.url"] for fields in self.requests]

    async def endpoint(self, request: Request) -> Response:
        form = await request.form()
        fields = [(k, str(v)) for k, v in form.multi_items()]
        with self.lock:
            self.requests.append(fields)
            status = self.script.pop(0) if self.script else 204
        if self.refuse_batches and sum(k == "hub.url" for k, _ in fields) > 1:
            status = 400
        return Response(status_code=status)


@contextmanager
def running_hub() -> Iterator[Hub]:
    hub = Hub()
    app = Starlette(routes=[Route("/", hub.endpoint, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            pytest.fail("the hub server did not start")
        threading.Event().wait(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    hub.url = f"http://127.0.0.1:{port}"  # as config.toml keeps a URL
    try:
        yield hub
    finally:
        server.should_exit = True
        thread.join()


@pytest.fixture
def hubs() -> Iterator[Callable[[], Hub]]:
    """Start as many hubs as a test needs; each stops when the test ends."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(running_hub())
