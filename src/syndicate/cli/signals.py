"""SIGTERM and SIGINT during a send: no new delivery is taken, what is on the wire finishes."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import click


@contextlib.contextmanager
def stopping_on_signals(
    stop: threading.Event, timeout: float, also: Callable[[], None] | None = None
) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` (and call ``also``): a send takes no new delivery and
    lets the messages on the wire finish. A second signal acts as it did before. Outside the
    main thread (where no handler can be set) nothing changes."""
    signals = (signal.SIGTERM, signal.SIGINT)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {signum: signal.getsignal(signum) for signum in signals}

    def handler(signum: int, _frame: Any) -> None:
        stop.set()
        if also is not None:
            also()
        for each in signals:
            signal.signal(each, saved[each])
        click.echo(
            f"stopping: no new deliveries; the messages on the wire finish (at most {timeout:g} s)",
            err=True,
        )

    for signum in signals:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum in signals:
            signal.signal(signum, saved[signum])
