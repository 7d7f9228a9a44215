"""The article folder: walking it, reading its files, and the worker processes that parse a
large set on every core: where the reader meets the article folder (parse.py is given bytes).
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import signal
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing, contextmanager, nullcontext
from dataclasses import fields
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import cast

from ..config import LanguageProfile
from ..model import Article, ArticleSet, Block, Diagnostic, Reference, Seo, Severity, Takeaways
from .dates import prepare as prepare_dates
from .index import decode_reading, encode_reading, index_reading
from .parse import Reading, parse_article

_log = logging.getLogger(__name__)


def article_files(folder: Path) -> list[Path]:
    """Every visible regular file below ``folder``, in a stable order. Names carry no meaning.

    Visible: no part of the path below ``folder`` starts with a dot. Symbolic links to files
    inside ``folder`` count; links to folders are not followed, nor links that lead outside.
    """
    return [Path(path) for path in scan(folder)]


def scan(
    folder: Path,
    problems: list[Diagnostic] | None = None,
    *,
    max_bytes: int | None = None,
    listed: Callable[[str], object] | None = None,
) -> dict[str, tuple[int, int]]:
    """``article_files`` as strings, each with its (size, mtime_ns), in the same order: what
    tells a build whether a file changed. Walked with scandir, which costs a fraction of
    pathlib's rglob, and ordered as paths order (part by part): by the path below ``folder``
    with NUL, which sorts before any character a name can hold, between its parts.

    The folder is one a person edits while it is read: a file removed meanwhile, a link that
    leads nowhere or in a loop, a file or folder that cannot be read, a file over
    ``max_bytes``: each is left out with one diagnostic in ``problems``, and the walk goes on.
    ``listed`` is called with each entry's path before it is looked at (for tests).
    """
    found: list[tuple[str, str, tuple[int, int]]] = []
    first_problem = len(problems) if problems is not None else 0
    inside = os.path.join(os.path.realpath(folder), "")
    # A loop, not a recursive closure: that would be a reference cycle holding every entry
    # until the next cycle collection.
    folders = [(str(folder), "")]
    while folders:
        directory, prefix = folders.pop()
        try:
            with _listing(directory) as entries:
                where = (os.path.join(directory, ""), prefix)
                _scan_entries(entries, where, inside, found, folders, problems, max_bytes, listed)
        except OSError as exc:
            _note(problems, directory, _unreadable(exc, "cannot list the folder"))
    found.sort(key=itemgetter(0))  # the keys are unique: comparing them alone is enough
    if problems is not None:  # in a stable order too, not the folder's
        problems[first_problem:] = sorted(problems[first_problem:], key=lambda p: p.file)
    return dict(zip(map(itemgetter(1), found), map(itemgetter(2), found), strict=True))


@contextmanager
def _listing(directory: str) -> Iterator[Iterator[os.DirEntry[str]]]:
    """The folder's entries, listed through an open descriptor where the system allows: each
    file's status is then looked up by its name in the folder (fstatat), not by its whole
    path: about a sixth less time for a rebuild's stat calls. Their ``path`` is then only the
    name."""
    if os.scandir not in os.supports_fd:
        with os.scandir(directory) as entries:
            yield entries
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        with os.scandir(fd) as entries:
            yield entries
    finally:
        os.close(fd)


def _scan_entries(
    entries: Iterator[os.DirEntry[str]],
    where: tuple[str, str],
    inside: str,
    found: list[tuple[str, str, tuple[int, int]]],
    folders: list[tuple[str, str]],
    problems: list[Diagnostic] | None,
    max_bytes: int | None,
    listed: Callable[[str], object] | None,
) -> None:
    """One folder's entries for ``scan``: its files into ``found`` (sort key, path, stamp),
    its folders into ``folders``. ``where``: the folder's path ending in a separator, and its
    files' sort-key prefix. A rebuild stats every file here: a regular file, as the folder's
    listing says (no system call), takes the short way."""
    base, prefix = where
    limit = max_bytes if max_bytes is not None else sys.maxsize
    add = found.append
    for entry in entries:
        name = entry.name
        if name[0] == ".":
            continue
        path = base + name
        if listed is not None:
            listed(path)
        try:
            if entry.is_file(follow_symlinks=False):
                st: os.stat_result | None = entry.stat(follow_symlinks=False)
            elif not entry.is_symlink() and entry.is_dir(follow_symlinks=False):
                folders.append((path, f"{prefix}{name}\0"))
                continue
            else:
                st = _regular_file(entry, path, inside, problems)
        except OSError as exc:
            _note(problems, path, _unreadable(exc))
            continue
        if st is None:
            continue
        size = st.st_size
        if size <= limit:
            add((prefix + name, path, (size, st.st_mtime_ns)))
        else:  # over max_bytes (no file is larger than sys.maxsize)
            message = f"{size:,} bytes, over site.max_article_bytes ({limit:,}): not read"
            _note(problems, path, (Severity.ERROR, message))


def _regular_file(
    entry: os.DirEntry[str], path: str, inside: str, problems: list[Diagnostic] | None
) -> os.stat_result | None:
    """The status of the regular file ``entry`` (at ``path``) is, or links to inside the
    article folder (``inside``); None for anything else, with a diagnostic (but for a link to
    a folder: links to folders are not followed). Raises OSError when the entry cannot be
    looked at."""
    if entry.is_symlink():
        target = _link_target(path, inside, problems)
        if target is None:
            return None
        st = os.stat(target)
        if stat.S_ISDIR(st.st_mode):
            return None
    else:
        st = entry.stat(follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        message = "not a regular file (a pipe, socket or device): left out"
        _note(problems, path, (Severity.WARNING, message))
        return None
    return st


def _note(problems: list[Diagnostic] | None, path: str, problem: tuple[Severity, str]) -> None:
    if problems is not None:
        problems.append(Diagnostic(path, None, problem[0], problem[1]))


def _unreadable(exc: OSError, doing: str = "cannot read") -> tuple[Severity, str]:
    """The diagnostic of a file or folder that could not be read: one removed or renamed
    meanwhile is only left out (the next build sees the change), anything else is an error."""
    if isinstance(exc, FileNotFoundError):
        return Severity.WARNING, "removed or renamed while the articles were read: left out"
    if isinstance(exc, IsADirectoryError):
        return Severity.ERROR, "a folder where an article file was expected: not read"
    return Severity.ERROR, f"{doing}: {exc.strerror or exc}"


def _link_target(path: str, inside: str, problems: list[Diagnostic] | None) -> str | None:
    """Where the symbolic link ``path`` leads, if that is a place inside the article folder
    (``inside`` ends with a separator); None, with a diagnostic, when it leads nowhere, in a
    loop or outside: an article folder publishes only what it holds."""
    try:
        target = os.path.realpath(path, strict=True)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _note(problems, path, (Severity.ERROR, "symbolic link loop: not read"))
        elif not os.path.lexists(path):
            _note(problems, path, _unreadable(exc))
        else:
            message = f"symbolic link to {os.readlink(path)!r}, which does not exist: not read"
            _note(problems, path, (Severity.ERROR, message))
        return None
    if not target.startswith(inside):
        message = f"symbolic link leads outside the article folder (to {target}): not followed"
        _note(problems, path, (Severity.WARNING, message))
        return None
    return target


def _read_bytes(path: str) -> bytes:
    """The file's bytes, through the system calls alone: pathlib and buffered files add
    more than the read itself costs for a file this size."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def _read_file(source: str, profiles: Mapping[str, LanguageProfile], keep: _Keep) -> Reading:
    try:
        data = _read_bytes(source)
    except OSError as exc:
        severity, message = _unreadable(exc)
        return None, [Diagnostic(source, None, severity, message)]
    return parse_article(
        data,
        source,
        profiles,
        body=keep["body"],
        bullets=keep["bullets"],
        blocks=keep.get("blocks", True),
    )


# Parsing holds the interpreter, so one process reads on one core. A large set is read by one
# process per core: worker processes take batches, and this one reads the next batch itself
# whenever the batch due next is not back yet; results come out in path order. Below
# PARALLEL_FROM files, starting a worker costs more than it saves. Batches are small and several
# are handed out ahead: a worker waits whenever its queue runs dry, and a result reaches this
# process only when its busy thread lets the pool's threads run. Measured at 30,000 files on two
# cores: batches of 50, four ahead, left the worker idle 0.05 s instead of 0.2 (100, two), and
# the reading took 1.61 s instead of 1.70 (median of four).
PARALLEL_FROM = 2000
_BATCH = 50
_AHEAD = 4
# What to keep of each file: parse_article's body, bullets and blocks; an index reading's text.
_Keep = dict[str, bool]
_worker: tuple[Mapping[str, LanguageProfile], _Keep, bool] = ({}, {}, False)  # set in each worker
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _start_worker(
    profiles: Mapping[str, LanguageProfile], keep: _Keep, encoded: bool, parent: int
) -> None:
    global _worker
    _worker = (profiles, keep, encoded)
    _end_with_parent(parent or os.getppid())


def _end_with_parent(parent: int) -> None:
    """End this worker when ``parent``, the process it reads for, ends, even by SIGKILL:
    otherwise it blocks forever writing a result nobody reads (its siblings keep the pipe
    open). Linux sends the parent's death as a signal; elsewhere a thread watches."""
    if sys.platform == "linux":
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent:  # it ended before the signal was asked for
                os._exit(1)
            return
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _read_batch(paths: list[str]) -> list[Reading] | list[str]:
    """A worker's readings of ``paths``; only their encoded forms when those are asked for:
    the process that gets them decodes them, which costs less than pickling the objects."""
    profiles, keep, encoded = _worker
    readings = [_read_file(path, profiles, keep) for path in paths]
    return [encode_reading(r) for r in readings] if encoded else readings


_Read = tuple[Reading, str | None]  # a reading, and its encoded form when one is asked for


def _read_here(
    paths: list[str], profiles: Mapping[str, LanguageProfile], keep: _Keep, encoded: bool
) -> list[_Read]:
    readings = [_read_file(path, profiles, keep) for path in paths]
    if encoded:  # index readings: kept as the worker's come back (decoded)
        text = keep.get("text", True)
        return [(index_reading(r, text=text), encode_reading(r)) for r in readings]
    return [(r, None) for r in readings]


def _read_files(
    paths: list[str],
    profiles: Mapping[str, LanguageProfile],
    keep: _Keep,
    processes: int | None,
    *,
    encoded: bool = False,
    pool: ProcessPoolExecutor | None = None,
) -> Generator[_Read, None, None]:
    """Each file's reading (and its encoded form if ``encoded``), in path order; with
    ``pool``'s workers (``index_readers``) when there are enough files."""
    if processes is None:
        processes = (os.cpu_count() or 1) if len(paths) >= PARALLEL_FROM else 1
    done = 0
    if processes > 1:
        try:
            with closing(_read_in_pool(paths, profiles, keep, processes, encoded, pool)) as batches:
                for batch in batches:
                    yield from batch
                    done += len(batch)
            return
        except (OSError, BrokenProcessPool) as exc:
            _log.warning("reader workers failed (%s): reading the rest in this process", exc)
    for path in paths[done:]:
        yield from _read_here([path], profiles, keep, encoded)


def _context() -> BaseContext:
    """How worker processes start: as the process's owner chose (``set_start_method``:
    ``syndicate build`` and ``check`` fork, which starts a worker at once with everything
    loaded), else from a fork server, which is safe in a process with threads (the scheduler,
    the web server), where a fork is not."""
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen is None and "forkserver" in multiprocessing.get_all_start_methods():
        chosen = "forkserver"
    context = multiprocessing.get_context(chosen)
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload([__name__])
    return context


def _warm(profiles: Mapping[str, LanguageProfile]) -> None:
    """Make each language's date patterns (Babel's locale data: 0.03-0.1 s a language) here,
    before the workers fork: each inherits them instead of making its own."""
    for lang in profiles:
        prepare_dates(lang)


_Out = tuple[list[str], "Future[list[Reading] | list[str]]"]  # a batch out with a worker


def _workers(
    profiles: Mapping[str, LanguageProfile], keep: _Keep, count: int, encoded: bool
) -> ProcessPoolExecutor:
    """``count`` worker processes that read with ``profiles`` and ``keep`` (their encoded
    readings if ``encoded``); forked at the first batch handed to them."""
    context = _context()
    forkserver = context.get_start_method() == "forkserver"
    if not forkserver:
        _warm(profiles)
    return ProcessPoolExecutor(
        count,
        context,
        initializer=_start_worker,
        # A fork server's workers are its children, and it ends with this process.
        initargs=(profiles, keep, encoded, 0 if forkserver else os.getpid()),
    )


def index_readers(profiles: Mapping[str, LanguageProfile]) -> ProcessPoolExecutor | None:
    """``read_index``'s worker processes (one per core but this one's), started now, before
    the caller has the paths to read: a worker forked later holds its own copy of each page
    this process then touches. For a caller that will read every file of a large set (a feed
    build with no index of its config); None on one core. ``read_index`` ends them."""
    count = (os.cpu_count() or 1) - 1
    if count < 1:
        return None
    pool = _workers(profiles, _index_keep(True), count, encoded=True)
    pool.submit(int)  # forks them now
    return pool


def _read_in_pool(
    paths: list[str],
    profiles: Mapping[str, LanguageProfile],
    keep: _Keep,
    processes: int,
    encoded: bool,
    pool: ProcessPoolExecutor | None = None,
) -> Generator[list[_Read], None, None]:
    """The readings of ``paths`` by ``processes`` (this one and workers: ``pool``'s, else
    started here), batch by batch in path order."""
    batches = deque(paths[i : i + _BATCH] for i in range(0, len(paths), _BATCH))
    queue: deque[_Out | list[_Read]] = deque()  # in path order: out, or read here
    ahead = _AHEAD * (processes - 1)  # batches handed to the workers and not yet back
    with pool or _workers(profiles, keep, processes - 1, encoded) as workers:
        while queue or batches:
            while batches and sum(isinstance(q, tuple) for q in queue) < ahead:
                batch = batches.popleft()
                queue.append((batch, workers.submit(_read_batch, batch)))
            head = queue[0]
            if isinstance(head, tuple) and not head[1].done() and batches:
                # The workers are busy: read the next batch here meanwhile.
                queue.append(_read_here(batches.popleft(), profiles, keep, encoded))
                continue
            item = queue.popleft()
            yield _received(*item, keep, encoded) if isinstance(item, tuple) else item


def _received(
    batch: list[str], future: Future[list[Reading] | list[str]], keep: _Keep, encoded: bool
) -> list[_Read]:
    """A worker's readings of ``batch``, once they are back."""
    back = future.result()
    if encoded:
        lines = cast(list[str], back)
        text = keep.get("text", True)
        return [
            (decode_reading(path, line, text=text), line)
            for path, line in zip(batch, lines, strict=True)
        ]
    return [(r, None) for r in cast(list[Reading], back)]


def _pickled_compactly(cls: type) -> None:
    """Workers send their readings back pickled: as (class, field values), since the default
    for a slotted dataclass costs a Python-level call per object each way, and a large set
    sends thousands. For the pool's pickles only (multiprocessing's own pickler)."""
    values = attrgetter(*(f.name for f in fields(cls)))
    ForkingPickler.register(cls, lambda obj: (cls, values(obj)))


for _model_class in (Article, Block, Diagnostic, Reference, Seo, Takeaways):
    _pickled_compactly(_model_class)


def read_articles(
    folder: Path,
    profiles: Mapping[str, LanguageProfile],
    *,
    bodies: bool = True,
    bullets: bool = True,
    blocks: bool = True,
    processes: int | None = None,
    max_bytes: int | None = None,
) -> ArticleSet:
    """Read every file of the article set; bad files become diagnostics, the rest articles.

    ``bodies`` and ``bullets`` are ``parse_article``'s ``body`` and ``bullets``; without
    ``blocks``, the bodies are read for their problems but not kept (each reader process drops
    them before it sends an article back): what a caller needs that keeps the references and
    bullets of a large set but shows no body. ``processes``
    read, this one included (default: one per core from PARALLEL_FROM files on). A file over
    ``max_bytes`` is not read (a diagnostic says so).
    """
    if not folder.is_dir():
        problem = Diagnostic(str(folder), None, Severity.ERROR, "article folder not found")
        return ArticleSet((), (problem,))
    keep: _Keep = {"body": bodies, "bullets": bullets, "blocks": blocks}
    scanned: list[Diagnostic] = []
    paths = list(scan(folder, scanned, max_bytes=max_bytes))
    found = article_set(reading for reading, _ in _read_files(paths, profiles, keep, processes))
    return ArticleSet(found.articles, (*scanned, *found.problems)) if scanned else found


def _index_keep(text: bool) -> _Keep:
    return {"body": False, "bullets": False, "text": text}


def read_index(
    paths: Sequence[str],
    profiles: Mapping[str, LanguageProfile],
    *,
    known: Mapping[str, str],
    processes: int | None = None,
    text: bool = True,
    readers: ProcessPoolExecutor | None = None,
) -> Iterator[tuple[str, Reading, str]]:
    """Each file's index reading (``index.py``: what the feeds show of an article outside the
    newest; without its text unless ``text``) and its encoded form, in the order of
    ``paths``, as they come. A path in ``known``, which holds its encoded reading from an
    earlier build, is decoded instead of read (the caller knows the file has not changed
    since), unless that reading cannot be decoded. ``readers``: ``index_readers`` to read
    with (ended when the last reading is out)."""
    keep = _index_keep(text)
    fresh = _read_files(
        [p for p in paths if p not in known],
        profiles,
        keep,
        processes,
        encoded=True,
        pool=readers,
    )
    # Closed as soon as the last reading is out, not when collected: its worker processes
    # and their threads end then (a process with threads may not fork).
    with readers or nullcontext(), closing(fresh):
        for path in paths:
            if path in known:
                line = known[path]
                try:
                    reading = decode_reading(path, line, text=text)
                except ValueError:  # a damaged entry: the file is read again
                    whole = _read_file(path, profiles, keep)
                    reading, line = index_reading(whole, text=text), encode_reading(whole)
            else:
                reading, encoded = next(fresh)
                line = encoded or encode_reading(reading)
            yield path, reading, line


def article_set(readings: Iterable[Reading]) -> ArticleSet:
    """The articles and diagnostics of readings in path order. Two files with the same
    language and slug: the first wins, the second is an error."""
    articles: dict[tuple[str, str], Article] = {}
    problems: list[Diagnostic] = []
    for article, found in readings:
        problems.extend(found)
        if article is None:
            continue
        first = articles.get(article.key)
        if first is not None:
            problems.append(
                Diagnostic(
                    article.source,
                    1,
                    Severity.ERROR,
                    f"duplicate article: {first.source} already has language "
                    f"'{article.lang}' and slug '{article.slug}'",
                )
            )
            continue
        articles[article.key] = article
    return ArticleSet(tuple(articles.values()), tuple(problems))
