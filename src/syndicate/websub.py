"""Telling WebSub hubs that feeds changed (the build's notifier, passed in from the edge).

A hub is told with a form POST, ``hub.mode=publish`` and the changed feeds' URLs as
``hub.url`` (the field hubs in the PubSubHubbub lineage read; several in one request). A hub
that refuses a request naming several feeds (a 4xx) is told of each on its own, with
``hub.topic`` too, the name some hubs read instead. Network errors, timeouts and 5xx replies
are retried with backoff; what still fails is handed back, for the next build to announce.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlencode

from . import __version__

log = logging.getLogger(__name__)


class Notify(Protocol):
    """Tell ``hub`` that ``topics`` changed; return the topics it could not be told of."""

    def __call__(self, hub: str, topics: Sequence[str]) -> list[str]: ...


class _Refused(Exception):
    """The hub answered 4xx: asking again the same way will not help."""


@dataclass(frozen=True)
class HubNotifier:
    """Publish pings over HTTP: ``timeout`` seconds per request, ``retries`` more attempts
    after a failure, ``backoff`` seconds before the first retry (doubling each time)."""

    timeout: float = 10.0
    retries: int = 2
    backoff: float = 1.0

    def __call__(self, hub: str, topics: Sequence[str]) -> list[str]:
        if not topics:
            return []
        try:
            self._post(hub, [("hub.url", t) for t in topics] + _topic_field(topics))
            left: list[str] = []
        except _Refused as exc:
            if len(topics) == 1:
                left = list(topics)
                log.warning("websub hub=%s refused %s: %s", hub, topics[0], exc)
            else:
                left = self._one_by_one(hub, topics)
        except OSError as exc:
            left = list(topics)
            log.warning(
                "websub hub=%s not reached: %s; %d feed(s) wait for the next build",
                hub,
                exc,
                len(left),
            )
        if not left:
            log.info("websub hub=%s told of %d changed feed(s)", hub, len(topics))
        return left

    def _one_by_one(self, hub: str, topics: Sequence[str]) -> list[str]:
        left = []
        for topic in topics:
            try:
                self._post(hub, [("hub.url", topic), ("hub.topic", topic)])
            except (_Refused, OSError) as exc:
                log.warning("websub hub=%s refused %s: %s", hub, topic, exc)
                left.append(topic)
        return left

    def _post(self, hub: str, fields: list[tuple[str, str]]) -> None:
        """One publish request, with retries; raises _Refused on 4xx, OSError when every
        attempt failed."""
        body = urlencode([("hub.mode", "publish"), *fields]).encode()
        request = urllib.request.Request(
            hub,
            data=body,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "User-Agent": f"syndicate/{__version__}",
            },
            method="POST",
        )
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read()
                return
            except urllib.error.HTTPError as exc:
                exc.close()
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    raise _Refused(f"{exc.code} {exc.reason}") from None
                failure: OSError = exc
            except OSError as exc:  # refused, reset, timed out, unknown host
                failure = exc
            log.info("websub hub=%s attempt %d failed: %s", hub, attempt + 1, failure)
        raise failure


def _topic_field(topics: Sequence[str]) -> list[tuple[str, str]]:
    """A request for one feed names it as ``hub.topic`` too."""
    return [("hub.topic", topics[0])] if len(topics) == 1 else []
