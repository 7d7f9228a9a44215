"""The feed files over HTTP: each read once per change, served with validators and gzip."""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path, PurePosixPath

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..config import Config
from ..feeds import hub_topics
from .context import context_of


def feed_content_type(name: str) -> str:
    """The media type a feed reader expects for a file ``syndicate build`` writes."""
    if name.endswith(".json"):
        return "application/feed+json"
    if name.endswith(".opml"):
        return "text/x-opml; charset=utf-8"
    if name.endswith(".xml"):
        if ".atom" in name:
            return "application/atom+xml; charset=utf-8"
        if ".rss" in name:
            return "application/rss+xml; charset=utf-8"
        return "application/xml; charset=utf-8"
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


@dataclass(frozen=True, slots=True)
class FeedFile:
    """One file's bytes, read once per change, with both encodings and their validators."""

    stamp: tuple[int, int]
    body: bytes
    gzipped: bytes
    etag: str
    modified: datetime
    content_type: str


class FeedFolder:
    """The files below the feeds folder; re-read only when a file's mtime or size changes,
    and looked at (one stat) at most once per ``every`` seconds of ``clock``: in between, a
    request is answered from memory, without a system call or a trip to the thread pool.

    The ETag is a hash of the bytes, so a rebuild that writes the same feed keeps it.
    """

    def __init__(
        self, folder: Path, *, every: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.folder, self.every, self.clock = folder, every, clock
        self._cache: dict[Path, FeedFile] = {}
        self._recent: dict[tuple[str, ...], tuple[float, FeedFile]] = {}

    def recent(self, relative: str) -> FeedFile | None:
        """The file as it was looked at less than ``every`` ago; None when it is time to look."""
        parts = _parts(relative)
        seen = self._recent.get(parts) if parts else None
        if seen is None or self.clock() - seen[0] >= self.every:
            return None
        return seen[1]

    def get(self, relative: str) -> FeedFile | None:
        """The file as it is now (a stat, and a read when it changed); None for anything that
        is not a file below the folder."""
        moment = self.clock()
        parts = _parts(relative)
        if parts is None:
            return None
        path = self.folder.joinpath(*parts)
        try:
            info = path.stat()
        except (OSError, ValueError):  # ValueError: a NUL or lone surrogate, no file's name
            return None
        if not path.is_file() or not path.resolve().is_relative_to(self.folder.resolve()):
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        found = self._cache.get(path)
        if found is None or found.stamp != stamp:
            found = self._cache[path] = _read(path, stamp, info.st_mtime)
        self._recent[parts] = (moment, found)  # by parts: "a//b" is "a/b", not another entry
        return found


def _parts(relative: str) -> tuple[str, ...] | None:
    """The path's parts below the folder; None for a hidden file or anything but a name."""
    parts = PurePosixPath(relative).parts
    if not parts or any(p.startswith(".") or "\\" in p for p in parts):
        return None
    return parts


def _read(path: Path, stamp: tuple[int, int], mtime: float) -> FeedFile:
    body = path.read_bytes()
    return FeedFile(
        stamp=stamp,
        body=body,
        gzipped=gzip.compress(body, 9, mtime=0),
        etag=hashlib.sha256(body).hexdigest()[:32],
        modified=datetime.fromtimestamp(int(mtime), UTC),
        content_type=feed_content_type(path.name),
    )


def accepts_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return not re.fullmatch(r"\s*q\s*=\s*0(\.0*)?\s*", params)
    return False


def not_modified(request: Request, etag: str, modified: datetime) -> bool:
    """RFC 9110 §13.1: If-None-Match (weak comparison) wins over If-Modified-Since."""
    none_match = request.headers.get("if-none-match")
    if none_match is not None:
        tags = {t.strip().removeprefix("W/") for t in none_match.split(",")}
        return "*" in tags or etag in tags
    since = request.headers.get("if-modified-since")
    if since:
        try:
            return modified <= parsedate_to_datetime(since)
        except (TypeError, ValueError):
            return False
    return False


def websub_link(config: Config, relative: str) -> str | None:
    """The Link header of a subscription feed when hubs are set: WebSub subscribers find the
    hubs and the topic URL there, whatever the feed's format says (WebSub section 4)."""
    topics = hub_topics(config, [relative]) if config.feeds.hub else []
    if not topics:
        return None
    return ", ".join(
        [*(f'<{hub}>; rel="hub"' for hub in config.feeds.hub), f'<{topics[0]}>; rel="self"']
    )


async def feed(request: Request) -> Response:
    """GET /feeds/<path>: from memory when the file was looked at just now, else its stat
    (and read) in the thread pool, so the event loop never waits on the disk."""
    folder, relative = context_of(request).feeds, request.path_params["path"]
    found = folder.recent(relative) or await run_in_threadpool(folder.get, relative)
    if found is None:
        raise HTTPException(404)
    zipped = accepts_gzip(request)
    etag = f'"{found.etag}-gz"' if zipped else f'"{found.etag}"'
    headers = {
        "ETag": etag,
        "Last-Modified": formatdate(found.modified.timestamp(), usegmt=True),
        "Cache-Control": "public, max-age=300",
        "Vary": "Accept-Encoding",
        "X-Content-Type-Options": "nosniff",
    }
    if link := websub_link(context_of(request).config, relative):
        headers["Link"] = link
    if not_modified(request, etag, found.modified):
        return Response(status_code=304, headers=headers)
    if zipped:
        headers["Content-Encoding"] = "gzip"
    body = found.gzipped if zipped else found.body
    return Response(body, media_type=found.content_type, headers=headers)
