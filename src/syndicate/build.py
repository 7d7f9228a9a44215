"""The feed build: read the article set, render every feed document, put them in place.

Everything is gathered first, then written; a failure before the writes leaves every previous
output in place, and the documents go in together (``files.Staging``). A manifest beside the
feeds records what the build read and wrote, so a build with nothing new reads and writes
nothing; an index records each article file's reading, so the next build reads only the files
that changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain, islice, pairwise
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from . import __version__
from .config import Config
from .errors import OutputError, UsageError, describe
from .files import Staging, atomic_file, file_stats, sweep_leftovers
from .model import Article, ArticleSet, Diagnostic, Severity
from .reader import (
    PARALLEL_FROM,
    Reading,
    article_set,
    decode_reading,
    index_readers,
    parse_article,
    read_index,
    scan,
    with_text,
)
from .websub import Notify

if TYPE_CHECKING:
    from . import feeds
    from .state import Store

# The feed stage (feedgen, lxml), the catalogs and the state database (SQLAlchemy) are
# imported where a build gets that far: a rebuild with nothing changed needs none of them.

MANIFEST = ".manifest.json"
TABLE_PIECE = 4096
"""The index table is written to the manifest this many rows at a time."""
LAYOUT = 3
"""The form of the manifest's plan and index table: a revision in place trusts only its own."""
INDEX = ".index.json"  # the last build's reading of each article file, for the next build


@dataclass(frozen=True, slots=True)
class FeedReport:
    """What a feed build did: the output folder, entries per language, files touched."""

    out: Path
    entries: dict[str, int] = field(default_factory=dict)
    written: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    problems: tuple[Diagnostic, ...] = ()
    skipped: bool = False  # nothing changed since the last build: nothing was read or written
    next_due: datetime | None = None  # when the next held-back article falls due
    announced: dict[str, int] = field(default_factory=dict)
    """WebSub hub → how many changed feeds it was told of in this build."""
    unannounced: dict[str, list[str]] = field(default_factory=dict)
    """WebSub hub → the feeds it could not be told of yet (the next build tries again)."""
    read: int = 0
    """How many article files the build read (the others came from the last build's index)."""

    @property
    def has_errors(self) -> bool:
        return any(p.severity is Severity.ERROR for p in self.problems)


def _fingerprint(config: Config, folder: Path, *, gated: bool) -> str:
    """Everything besides the article files that decides the output bytes, the reader's own
    code included: a reader that reads differently reads every file again."""
    from .reader import reader_revision

    text = (
        f"{__version__}\n{reader_revision()}\n{gated}\n{folder.resolve()}\n"
        f"{config.model_dump_json()}"
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _stamp(name: str, stat: Sequence[int]) -> str:
    """An article file's relative path, size and mtime as one string, each field ended by a
    NUL (which no path holds): what starts a file's row in the index table (``_Table``)."""
    return f"{name}\0{stat[0]}\0{stat[1]}\0"


def _inputs_hash(paths: Sequence[str], stats: array[int], left_out: list[list[str]]) -> str:
    """The article files' paths, sizes and mtimes in one hash, and what the walk left out: a
    large set's manifest would otherwise take longer to load than the files take to stat.
    The numbers go in as the array's bytes, not written out a file at a time: a rebuild with
    nothing changed hashes every file."""
    digest = hashlib.sha256(json.dumps(left_out).encode())
    for start in range(0, len(paths), 4096):  # the walk's garbage stays small
        digest.update("\0".join(paths[start : start + 4096]).encode() + b"\0")
    digest.update(stats.tobytes())
    return digest.hexdigest()


def _with_bodies(config: Config, found: ArticleSet, shown: Sequence[Article]) -> ArticleSet:
    """``found`` with the ``shown`` articles (those the subscription documents show in full)
    read again with their bodies (their diagnostics came with the first reading)."""
    full: dict[tuple[str, str], Article] = {}
    for article in shown:
        try:
            data = Path(article.source).read_bytes()
        except OSError:
            continue
        again, _ = parse_article(data, article.source, config.profiles, second_opinion=False)
        if again is not None and again.key == article.key:
            full[article.key] = again
    return ArticleSet(tuple(full.get(a.key, a) for a in found), found.problems)


def _problems(found: list[dict]) -> tuple[Diagnostic, ...]:
    return tuple(
        Diagnostic(p["file"], p["line"], Severity(p["severity"]), p["message"]) for p in found
    )


def build_feeds(
    config: Config,
    articles_dir: Path | None = None,
    out: Path | None = None,
    *,
    now: datetime | None = None,
    notify: Notify | None = None,
    store: Store | None = None,
) -> FeedReport:
    """Read the article set and write every feed document into ``out`` (default: feeds.out).

    With ``now``, an article whose date line is still ahead is held back (and not recorded as
    published) until a build after its time: no feed ever shows a date in the future.
    A manifest of the inputs (a hash of each file's path, size and mtime_ns), the config and
    the outputs is kept in the output folder; when none of them changed and no held-back
    article fell due, nothing is read or written. An index beside it keeps each file's summary
    reading, so a build reads only the files that changed since the last one. Publication
    times are recorded in ``store`` (default: the configured state database, opened only when
    the build gets that far) the first time an article is built.

    ``notify`` tells each ``feeds.hub`` which subscription feeds changed, after they are in
    place; what a hub could not be told is kept in the manifest and told at the next build,
    whether or not that one changes anything. A hub never fails the build.
    """
    report = _build_feeds(config, articles_dir, out, now, store)
    if notify is None or not report.unannounced:
        return report
    left = {
        hub: remaining
        for hub, topics in report.unannounced.items()
        if (remaining := notify(hub, topics))
    }
    told = {hub: len(topics) - len(left.get(hub, ())) for hub, topics in report.unannounced.items()}
    if left != report.unannounced:
        manifest, revision = _manifest(report.out / MANIFEST)
        if manifest:  # else gone meanwhile: the next build rebuilds and tells again
            manifest["unannounced"] = left
            _write_manifest(report.out / MANIFEST, manifest, [revision])
    return dataclasses.replace(report, announced=told, unannounced=left)


def _waiting(config: Config, previous: dict, topics: Sequence[str] = ()) -> dict[str, list[str]]:
    """Per configured hub, the feeds it is still to be told of: what the last build could
    not announce (its manifest's ``unannounced``) and ``topics``, each once."""
    kept = previous.get("unannounced")
    kept = kept if isinstance(kept, dict) else {}
    waiting = {}
    for hub in config.feeds.hub:
        old = kept.get(hub)
        both = [*(old if isinstance(old, list) else []), *topics]
        if both:
            waiting[hub] = list(dict.fromkeys(map(str, both)))
    return waiting


@dataclass(frozen=True, slots=True)
class _Inputs:
    """The article files a build reads, as the folder walk found them."""

    folder: Path
    paths: list[str]
    """Each file's path."""
    stats: array[int]
    """Each file's size and mtime_ns, two numbers a file, in the same order: a build holds
    them while it renders, where a tuple a file would take 0.15 KiB."""
    scanned: list[Diagnostic]
    """What the walk left out, and why."""
    digest: str
    """All of it in one hash: the manifest's ``inputs``."""

    def stat(self, n: int) -> tuple[int, int]:
        """The size and mtime_ns of the ``n``th file."""
        return self.stats[2 * n], self.stats[2 * n + 1]

    def named(self) -> Iterator[tuple[str, tuple[int, int]]]:
        """Each file's path relative to the folder (what the manifest and the index record)
        and (size, mtime_ns): made when a build reads, not for a rebuild with nothing
        changed."""
        pairs = zip(islice(self.stats, 0, None, 2), islice(self.stats, 1, None, 2), strict=True)
        return zip(_names(self.folder, self.paths), pairs, strict=True)


def _names(folder: Path, files: Iterable[str]) -> Iterator[str]:
    """The paths of ``files`` relative to ``folder``, with "/" between their parts."""
    prefix = len(os.path.join(str(folder), ""))
    if os.sep == "/":
        return (path[prefix:] for path in files)
    return (path[prefix:].replace(os.sep, "/") for path in files)


def _walk(config: Config, folder: Path, listed: Callable[[str], object] | None) -> _Inputs:
    """The article files in ``folder``; ``listed`` is told of each as the walk finds it."""
    if not folder.is_dir():
        # Not an empty article set: publishing nothing would empty every feed.
        raise UsageError(f"{folder}: article folder not found")
    scanned: list[Diagnostic] = []
    files = scan(folder, scanned, max_bytes=config.site.max_article_bytes, listed=listed)
    paths, stats = list(files), array("q", chain.from_iterable(files.values()))
    # What the walk left out counts as input too: a new dangling link is news.
    digest = _inputs_hash(paths, stats, [[p.file, p.message] for p in scanned])
    return _Inputs(folder, paths, stats, scanned, digest)


def _build_feeds(
    config: Config,
    articles_dir: Path | None,
    out: Path | None,
    now: datetime | None,
    store: Store | None,
) -> FeedReport:
    folder = articles_dir if articles_dir is not None else config.path(config.site.articles)
    out = out if out is not None else config.path(config.feeds.out)
    with _Readers(config, folder, out) as readers:
        inputs = _walk(config, folder, readers.listed)
        fingerprint = _fingerprint(config, folder, gated=now is not None)
        previous, revision = _manifest(out / MANIFEST)
        if _up_to_date(previous, fingerprint, inputs.digest, out, now):
            return FeedReport(
                out,
                previous.get("entries", {}),
                unchanged=tuple(previous["outputs"]),
                problems=_problems(previous.get("problems", [])),
                skipped=True,
                next_due=_when(previous.get("next_due")),
                unannounced=_waiting(config, previous),
            )
        staging = Staging(out)
        try:
            if out.is_dir():
                sweep_leftovers(out)
            fresh: dict[str, str] = {}  # the files a revision read: not read again
            if previous.get("fingerprint") == fingerprint:  # else no revision: built as a whole
                previous |= _decoded(revision)
            staged = _revise(config, inputs, previous, fingerprint, staging, now, store, fresh)
            if staged is None:
                staged = _stage(config, inputs, staging, now, store, fresh, readers.pool)
        except OSError as exc:
            staging.discard()
            raise OutputError(f"feeds unchanged: {describe(exc)}") from exc
        except BaseException:
            staging.discard()
            raise
    try:
        return _commit(config, staging, previous, staged, fingerprint, inputs)
    except OSError as exc:
        staging.discard()
        raise OutputError(
            f"feeds in {out} partly updated: {describe(exc)} (the next build writes them again)"
        ) from exc


class _Readers:
    """The reader workers of a build with no index of its config (the first, or the first
    after a change to the config or the version), which reads every file: started as the walk
    lists its PARALLEL_FROM-th file, when this process holds little of the walk yet. A worker
    forked after the walk keeps its own copy of each of its pages the build then touches
    (at 30,000 files, 22 MiB; at 90,000, 49). None (``pool``) for a smaller set, or where
    an index may spare most reading; ended when the block ends, if ``read_index`` did not
    end it."""

    def __init__(self, config: Config, folder: Path, out: Path) -> None:
        self._profiles = config.profiles
        self._seen = 0
        self.pool: ProcessPoolExecutor | None = None
        self.listed = None if _index_of(out / INDEX, config, folder) else self._count

    def _count(self, path: str) -> None:
        self._seen += 1
        if self._seen == PARALLEL_FROM:
            self.pool = index_readers(self._profiles)

    def __enter__(self) -> _Readers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def _index_of(path: Path, config: Config, folder: Path) -> bool:
    """Whether the index file at ``path`` is one of this config (its first line)."""
    try:
        with path.open("rb") as handle:
            return json.loads(handle.readline()) == _index_key(config, folder)
    except (OSError, ValueError):
        return False


def _up_to_date(
    previous: dict, fingerprint: str, inputs: str, out: Path, now: datetime | None
) -> bool:
    """Nothing changed since the build that wrote ``previous`` (its manifest): not the config,
    nor an article file, nor an output, and no held-back article fell due."""
    due = previous.get("next_due")
    return (
        previous.get("fingerprint") == fingerprint
        and previous.get("inputs") == inputs
        and previous.get("outputs") == file_stats(out, list(previous.get("outputs", {})))
        and (not due or (now is not None and now < datetime.fromisoformat(due)))
    )


@dataclass(frozen=True, slots=True)
class _Staged:
    """What a build staged: the entries per language, the problems, when the next held-back
    article falls due, and the plan (``_plan_record``, encoded) the next build can revise."""

    entries: dict[str, int]
    problems: tuple[Diagnostic, ...]
    next_due: datetime | None
    plan: bytes
    read: int
    """How many article files were read (the rest came from the index)."""
    table: str | _Lines
    """Where each file's line is in the index file (``_Table``'s rows, or a full build's
    ``_Lines``, made into them only when the manifest is written)."""


def _stage(
    config: Config,
    inputs: _Inputs,
    staging: Staging,
    now: datetime | None,
    store: Store | None,
    fresh: Mapping[str, str],
    readers: ProcessPoolExecutor | None = None,
) -> _Staged:
    """Read the set and stage every feed document; ``fresh`` holds readings (encoded, by
    path) of files read since they last changed; ``readers``: ``_Readers``' pool."""
    from . import feeds

    out = staging.folder
    # The index file is written as the files are read, and takes the old one's place
    # only when every document is staged.
    with atomic_file(out / INDEX) as index_file:
        # The feeds show the newest articles whole and the rest by summary: read the
        # summaries (no body, no bullets), then the newest again, in full. A file the last
        # build read and that has not changed since is not read again.
        # One name for the set as it goes: each step's set replaces the one before, which
        # is let go (its lookups are held per article).
        found, read, lines = _read_and_index(
            config, inputs, out / INDEX, index_file, fresh, readers
        )
        if inputs.scanned:
            found = ArticleSet(found.articles, (*inputs.scanned, *found.problems))
        found, next_due = feeds.due_articles(config, found, now)
        plans = [
            feeds.language_plan(config, found, lang) for lang in feeds.feed_languages(config, found)
        ]
        found = _with_bodies(config, found, _shown_whole(plans))
        index_file.flush()  # the articles' text is read back from it
        texts = _Texts(index_file.fileno(), lines)
        # Each document is staged as it comes. In this process only: forked renderers
        # were measured at 30,000 articles, and each copies much of the set's memory (it
        # touches every article's reference count): with one, rendering took 0.41-0.44 s
        # instead of 0.57-0.60, and the build's processes 230 MiB together instead of 177.
        _render(config, found, store, plans, staging, now, opml=True, texts=texts)
    entries = {lang: len(found.in_language(lang)) for lang in found.languages}
    record = _plan_record(plans, {path: n for n, path in enumerate(inputs.paths)})
    return _Staged(entries, found.problems, next_due, _encoded(record), read, lines)


def _render(
    config: Config,
    found: ArticleSet,
    store: Store | None,
    plans: Sequence[feeds.Plan],
    staging: Staging,
    now: datetime | None,
    *,
    opml: bool,
    texts: Callable[[Article], Article] | None = None,
) -> None:
    """Stage the documents ``plans`` name, recording the articles' first publication (and
    that the new ones appeared ``now``); ``texts`` gives back the text of the articles
    ``found`` holds without it, as each document that shows them is made."""
    from . import feeds
    from .i18n import language

    published = _first_published(config, store, feeds.publication_candidates(found, config), now)
    gettext = {  # the catalogs of the languages whose audience feeds are made
        plan.lang: language(config, plan.lang).translations.gettext
        for plan in plans
        if opml or any(chosen is not None for _, chosen in plan.audiences)
    }
    plans = [plan.with_text(found) for plan in plans]
    if texts is not None:
        plans = [_with_texts(plan, texts) for plan in plans]
    for name, data in feeds.render_feeds(config, found, published, gettext, plans, opml=opml):
        staging.add(name, data)


def _with_texts(plan: feeds.Plan, texts: Callable[[Article], Article]) -> feeds.Plan:
    """``plan`` with its articles' text: the subscription documents' at once (those read
    again whole have it already), each archive page's when the page is made."""

    def given(chosen: Sequence[Article] | None) -> list[Article] | None:
        return None if chosen is None else [texts(a) for a in chosen]

    return dataclasses.replace(
        plan,
        current=given(plan.current),
        pages=_Pages(plan.pages, given),
        audiences=[(a, given(chosen)) for a, chosen in plan.audiences],
    )


class _Pages(Sequence["Sequence[Article] | None"]):
    """Archive pages whose articles are made ready (``given``) as each page is taken: a
    build never holds every archive entry's text at once."""

    def __init__(
        self,
        pages: Sequence[Sequence[Article] | None],
        given: Callable[[Sequence[Article] | None], list[Article] | None],
    ) -> None:
        self._pages, self._given = pages, given

    def __len__(self) -> int:
        return len(self._pages)

    def __getitem__(self, n: int) -> Sequence[Article] | None:  # type: ignore[override]
        return self._given(self._pages[n])  # a page by number: no slices


class _Texts:
    """The text of the articles a full build holds without it (``read_index``'s ``text``),
    read back from the index file it is writing (``fd``), whose lines are where ``lines``
    says."""

    def __init__(self, fd: int, lines: _Lines) -> None:
        self._fd, self._lines = fd, lines

    def __call__(self, article: Article) -> Article:
        at = self._lines.start(article.source)
        if article.title or at is None:  # read whole, or with its text already
            return article
        chunks = []
        while chunk := os.pread(self._fd, 4096, at):
            line, newline, _ = chunk.partition(b"\n")
            chunks.append(line)
            if newline:
                break
            at += len(chunk)
        return with_text(article, b"".join(chunks).decode("utf-8").partition("\t")[2])


def _shown_whole(plans: Sequence[feeds.Plan]) -> list[Article]:
    """The articles of the subscription documents ``plans`` name: shown with their text."""
    shown: dict[Article, None] = {}
    for plan in plans:
        shown.update(dict.fromkeys(plan.current or ()))
        for _, chosen in plan.audiences:
            shown.update(dict.fromkeys(chosen or ()))
    return list(shown)


def _plan_record(plans: Sequence[feeds.Plan], place: Mapping[str, int]) -> dict[str, dict]:
    """``plans`` as the manifest keeps them: per language, its articles' files (by their
    ``place`` in the walk, their row in the index table) and slugs, newest first, and each
    audience feed's, as places in that order. The archive pages follow from the order
    (``feeds.paginate``)."""
    record = {}
    for plan in plans:
        order = [*(plan.current or ()), *(a for page in reversed(plan.pages) for a in page or ())]
        at = {a.key: n for n, a in enumerate(order)}
        record[plan.lang] = {
            "order": [[place[a.source], a.slug] for a in order],
            "audiences": {
                audience: [at[a.key] for a in chosen or ()] for audience, chosen in plan.audiences
            },
        }
    return record


def _first_published(
    config: Config,
    store: Store | None,
    candidates: Sequence[tuple[str, str, datetime]],
    now: datetime | None,
) -> Mapping[tuple[str, str], datetime]:
    """When each article was first published, recording the new ones (and that they appeared
    ``now``): in ``store``, else in the configured state database, opened only now that the
    build needs it."""
    from .state import database_errors, open_store

    if store is not None:
        return store.published.first_published(candidates, seen=now)
    with database_errors(config.database_url, "feeds unchanged: "):
        opened = open_store(config.database_url)
        try:
            return opened.published.first_published(candidates, seen=now)
        finally:
            opened.close()


def _commit(
    config: Config,
    staging: Staging,
    previous: dict,
    staged: _Staged,
    fingerprint: str,
    inputs: _Inputs,
) -> FeedReport:
    """Put the staged documents in place, remove the ones no longer made, and record the
    build in the manifest."""
    from . import feeds

    out = staging.folder
    written, unchanged = staging.commit()
    docs = staging.files
    removed = sorted(set(previous.get("outputs", {})) - set(docs))
    for name in removed:
        (out / name).unlink(missing_ok=True)
    # Recorded before any hub is told: a build killed meanwhile leaves them to the next.
    unannounced = _waiting(config, previous, feeds.hub_topics(config, written))
    head = {
        "fingerprint": fingerprint,
        "inputs": inputs.digest,
        "scanned": _scanned(inputs),
        "outputs": file_stats(out, list(docs)),
        "entries": staged.entries,
        "next_due": staged.next_due.isoformat() if staged.next_due else None,
        "unannounced": unannounced,
        "problems": [
            {"file": p.file, "line": p.line, "severity": str(p.severity), "message": p.message}
            for p in staged.problems
        ],
        "layout": LAYOUT,
    }
    table = (
        [json.dumps(staged.table).encode()]
        if isinstance(staged.table, str)
        else staged.table.table()
    )
    _write_manifest(out / MANIFEST, head, chain([staged.plan, b"\n"], table))
    return FeedReport(
        out,
        staged.entries,
        tuple(written),
        tuple(unchanged),
        tuple(removed),
        staged.problems,
        next_due=staged.next_due,
        unannounced=unannounced,
        read=staged.read,
    )


# The manifest is three lines of JSON: what tells whether anything changed and what the build
# made, then what a revision needs, the plan and the index table (megabytes for a large set),
# which a build that finds nothing changed does not decode. A revision that moves no article
# writes the plan's line back as it was.


def _manifest(path: Path) -> tuple[dict, bytes]:
    """The last build's manifest (empty when there is none or it cannot be read) and its
    other lines, undecoded (``_decoded``)."""
    try:
        head, _, revision = path.read_bytes().partition(b"\n")
        found = json.loads(head)
    except (OSError, ValueError):
        return {}, b""
    return (found, revision) if isinstance(found, dict) else ({}, b"")


def _decoded(revision: bytes) -> dict:
    """The manifest's plan and index table (and the plan's line as written: ``plan_line``);
    empty if they cannot be read."""
    plan_line, _, table_line = revision.partition(b"\n")
    try:
        plan, table = json.loads(plan_line), json.loads(table_line)
    except ValueError:
        return {}
    if not isinstance(plan, dict) or not isinstance(table, str):
        return {}
    return {"plan": plan, "index": table, "plan_line": plan_line}


def _encoded(value: dict) -> bytes:
    # not indented (no newline in a line; indenting would take the pure-Python encoder)
    return json.dumps(value, separators=(",", ":")).encode()


def _write_manifest(path: Path, head: dict, revision: Iterable[bytes]) -> None:
    """The manifest: its first line from ``head``, the rest as ``revision``'s pieces come (a
    large set's index table is written as it is made, not held whole)."""
    with atomic_file(path) as handle:
        handle.write(_encoded(head) + b"\n")
        handle.writelines(revision)


def _scanned(inputs: _Inputs) -> list[list[str]]:
    """What the walk left out, as the manifest keeps it."""
    return [[p.file, p.message] for p in inputs.scanned]


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


# The index file: for each article file, its (size, mtime_ns) and the index reading the build
# made of it (no body, no references, no bullets), one line each after a first line with the
# key: the path, size and mtime as a JSON array, a tab, and the reading as the reader encodes
# it (JSON has no raw tabs). A file whose size and mtime still match is not read again; any
# change to the config or the version (the key) makes every file be read again. Written line
# by line as the files are read, so that no reading is held twice. The manifest keeps where
# each file's line is (``_Table``), so that a revision reads only the lines it needs and
# appends the lines of the files it read (a line later in the file stands for its file).


def _read_and_index(
    config: Config,
    inputs: _Inputs,
    path: Path,
    new_index: BinaryIO,
    fresh: Mapping[str, str] = {},
    readers: ProcessPoolExecutor | None = None,
) -> tuple[ArticleSet, int, _Lines]:
    """The set of every file's index reading without its text, taken from the index file at
    ``path`` where the file has not changed (and how many files were read, and where each
    file's line is in the new index); ``new_index`` gets the new index as they come, each
    line let go once written."""
    key = _index_key(config, inputs.folder)
    known = {**_known_readings(path, key, inputs), **fresh}
    found = read_index(inputs.paths, config.profiles, known=known, text=False, readers=readers)
    head = json.dumps(key).encode() + b"\n"
    new_index.write(head)
    lines = _Lines(inputs)
    at = len(head)

    def readings() -> Iterator[Reading]:
        nonlocal at
        for (name, stat), (_, reading, encoded) in zip(inputs.named(), found, strict=True):
            line = f"{_index_head(name, stat)}\t{encoded}\n".encode()
            new_index.write(line)
            lines.spans.extend((at, len(line) - 1))
            at += len(line)
            yield reading

    index = article_set(readings())
    return index, len(inputs.paths) - len(known) + len(fresh), lines


class _Lines:
    """Where each article file's line is in the index file a full build writes: its offset
    and length, two numbers a file in the walk's order, where the table's rows and a lookup
    by path held while the build renders took 0.1 KiB a file more. A file is found by its
    path with a binary search."""

    def __init__(self, inputs: _Inputs) -> None:
        self.inputs = inputs
        self.spans = array("q")
        paths = inputs.paths
        in_order = all(a < b for a, b in pairwise(paths))
        # The walk orders paths part by part, which plain string order may not follow.
        self._order: Sequence[int] = (
            range(len(paths))
            if in_order
            else array("q", sorted(range(len(paths)), key=paths.__getitem__))
        )

    def start(self, path: str) -> int | None:
        """Where the line of the file at ``path`` starts; None for a file not walked."""
        paths, order = self.inputs.paths, self._order
        at = bisect_left(order, path, key=paths.__getitem__)
        if at == len(order) or paths[order[at]] != path:
            return None
        return self.spans[2 * order[at]]

    def table(self) -> Iterator[bytes]:
        """The index table (``_Table``'s rows) as the manifest keeps it, a JSON string, in
        pieces of ``TABLE_PIECE`` rows: what ``json.dumps`` makes of the rows joined, without
        holding them (that was the peak of a large build's memory)."""
        spans = self.spans
        rows = (
            _Table.row(_stamp(name, stat), spans[2 * n], spans[2 * n + 1])
            for n, (name, stat) in enumerate(self.inputs.named())
        )
        yield b'"'
        between = b""
        while chunk := "\n".join(islice(rows, TABLE_PIECE)):
            yield between + json.dumps(chunk)[1:-1].encode()
            between = b"\\n"  # the rows' separator, escaped as JSON escapes it
        yield b'"'


def _known_readings(path: Path, key: str, inputs: _Inputs) -> dict[str, str]:
    """The encoded readings of the index file whose files are unchanged, by path; none if
    the index is missing or unreadable, or was made under another config. A damaged entry
    is left out: ``read_index`` reads its file."""
    known: dict[str, str] = {}
    try:
        with path.open("rb") as handle:
            if json.loads(handle.readline()) != key:
                return {}
            place = {name: n for n, (name, _) in enumerate(inputs.named())}
            for line in handle:
                head, tab, encoded = line.decode("utf-8", "replace").rstrip("\n").partition("\t")
                try:
                    relative, *stat = json.loads(head)
                    n = place.get(relative, -1)
                    unchanged = bool(tab) and n >= 0 and inputs.stat(n) == tuple(stat)
                except (ValueError, TypeError):  # a damaged line: that file is read again
                    continue
                if unchanged:
                    known[inputs.paths[n]] = encoded
    except (OSError, ValueError):
        return {}
    return known


def _index_head(relative: str, stat: Sequence[int]) -> str:
    """An index line's key: the file's path, size and mtime as a JSON array. Written by hand
    for a plain path (what json.dumps would write): a rebuild makes one per article file."""
    if (
        relative.isascii()
        and relative.isprintable()
        and '"' not in relative
        and "\\" not in relative
    ):
        return f'["{relative}", {stat[0]}, {stat[1]}]'
    return json.dumps([relative, *stat])


# A rebuild whose changed files move no article (a revised text, but not a new, removed or
# re-dated article, nor one whose audiences or problems changed) is revised in place: only
# the changed files are read, and only the documents that show them are made again, from
# the articles the index holds for them; the manifest's plan says which documents show which
# article files, in what order. Anything else is built as a whole.


def _revise(
    config: Config,
    inputs: _Inputs,
    previous: dict,
    fingerprint: str,
    staging: Staging,
    now: datetime | None,
    store: Store | None,
    fresh: dict[str, str],
) -> _Staged | None:
    """Stage a revision in place, or None when the build must be made as a whole; the
    readings of the files it read go into ``fresh`` (encoded, by path)."""
    plan, due, outputs = previous.get("plan"), previous.get("next_due"), previous.get("outputs")
    if (
        not isinstance(plan, dict)
        or previous.get("layout") != LAYOUT
        or previous.get("fingerprint") != fingerprint
        or previous.get("scanned") != _scanned(inputs)
        or (due and (now is None or now >= datetime.fromisoformat(due)))
        or not isinstance(outputs, dict)
        or file_stats(staging.folder, list(outputs)) != outputs  # one removed or changed
    ):
        return None
    table = _Table.of(config, inputs, staging.folder / INDEX, previous.get("index"))
    if table is None or not table.changed or len(table.changed) > max(1, len(inputs.paths) // 20):
        return None
    try:
        return _revise_with(config, inputs, previous, table, staging, store, fresh, now)
    finally:
        table.close()


def _revise_with(
    config: Config,
    inputs: _Inputs,
    previous: dict,
    table: _Table,
    staging: Staging,
    store: Store | None,
    fresh: dict[str, str],
    now: datetime | None,
) -> _Staged | None:
    """``_revise`` once the manifest and the index vouch for the last build: read the changed
    files, check that none moves, make the documents that show them."""
    sources = inputs.paths
    changed = table.changed
    found = read_index([sources[n] for n in changed], config.profiles, known={}, processes=1)
    new: dict[int, str] = {}
    for n, (path, reading, encoded) in zip(changed, found, strict=True):
        fresh[path] = new[n] = encoded
        old = table.line(n)
        try:
            if old is None or _shape(reading) != _shape(decode_reading(path, old)):
                return None  # it moves: a new place, other audiences or other problems
        except ValueError:  # a damaged index
            return None
    partial = _partial_plans(config, inputs, previous["plan"], table, new)
    if partial is None:
        return None
    plans, shown = partial
    whole = _with_bodies(config, shown, _shown_whole(plans))
    _render(config, whole, store, plans, staging, now, opml=False)
    for name in previous["outputs"]:
        staging.keep(name)
    problems = _problems(previous.get("problems", []))
    due = _when(previous.get("next_due"))
    rows = table.append(inputs, new)
    plan = previous["plan_line"]  # no article moved: the plan is the one the manifest has
    return _Staged(previous.get("entries", {}), problems, due, plan, len(new), rows)


class _Table:
    """Where each article file's line is in the index file, as the manifest keeps it: one
    row per file, in the walk's order, of its relative path, size, mtime, and its line's
    offset and length, NUL-separated (no path holds a NUL), the rows one string (a manifest
    loads a string at once)."""

    def __init__(self, path: Path, rows: list[str], changed: list[int], handle: BinaryIO) -> None:
        self.path, self.rows, self.changed, self.handle = path, rows, changed, handle

    @staticmethod
    def row(stamp: str, offset: int, length: int) -> str:
        """A file's row: its ``_stamp``, then where its line is."""
        return f"{stamp}{offset}\0{length}"

    @classmethod
    def of(cls, config: Config, inputs: _Inputs, path: Path, kept: object) -> _Table | None:
        """The table the manifest ``kept``, with where the files changed since; None when it
        is not of the same files, or the index file is not of this config."""
        rows = kept.split("\n") if isinstance(kept, str) and kept else []
        if len(rows) != len(inputs.paths):
            return None
        changed = []
        stamps = (_stamp(name, stat) for name, stat in inputs.named())
        for n, (row, stamp) in enumerate(zip(rows, stamps, strict=True)):
            if not row.startswith(stamp):
                if row.partition("\0")[0] != stamp.partition("\0")[0]:
                    return None  # one file added and another removed
                changed.append(n)
        try:
            handle = path.open("rb")
        except OSError:
            return None
        try:
            key = json.loads(handle.readline())
        except ValueError:
            key = None
        if key != _index_key(config, inputs.folder):
            handle.close()
            return None
        return cls(path, rows, changed, handle)

    def line(self, n: int) -> str | None:
        """The encoded reading of the ``n``th file as the index has it; None if its line is
        not where the table says (a damaged index)."""
        relative, size, mtime, offset, length = self.rows[n].split("\0")
        self.handle.seek(int(offset))
        line = self.handle.read(int(length))
        head = f"{_index_head(relative, (int(size), int(mtime)))}\t".encode()
        return line[len(head) :].decode("utf-8") if line.startswith(head) else None

    def append(self, inputs: _Inputs, encoded: Mapping[int, str]) -> str:
        """Append the lines of the files read again (``encoded`` by place) to the index
        file; the table with them. A file read again keeps its row's path (``of``)."""
        with self.path.open("ab") as handle:
            at = handle.tell()
            for n, reading in sorted(encoded.items()):
                relative = self.rows[n].partition("\0")[0]
                line = f"{_index_head(relative, inputs.stat(n))}\t{reading}\n".encode()
                handle.write(line)
                self.rows[n] = self.row(_stamp(relative, inputs.stat(n)), at, len(line) - 1)
                at += len(line)
        return "\n".join(self.rows)

    def close(self) -> None:
        self.handle.close()


def _shape(reading: Reading) -> tuple:
    """What decides an article's place in the documents: its key, date and audiences, and
    the file's problems."""
    article, problems = reading
    found = [(p.line, p.severity, p.message) for p in problems]
    if article is None:
        return None, found
    audiences = tuple(t.audience for t in article.takeaways)
    return (article.lang, article.slug, article.updated, audiences), found


def _index_key(config: Config, folder: Path) -> str:
    """The index file's first line: a change to it makes every file be read again."""
    return _fingerprint(config, folder, gated=False)


def _partial_plans(
    config: Config, inputs: _Inputs, record: dict, table: _Table, new: Mapping[int, str]
) -> tuple[list[feeds.Plan], ArticleSet] | None:
    """The plans of the documents that show a file read again (``new``: its encoded reading,
    by place), and the articles they need (theirs and their translations), from the index;
    None when the index does not hold one of them."""
    from . import feeds

    sources = inputs.paths
    size = config.feeds.max_entries
    picked: list[tuple[str, list[int] | None, list[list[int] | None], list]] = []
    needed: dict[int, str] = {}  # a file's place in the walk -> its slug
    for lang, kept in record.items():
        order = kept["order"]
        moved = {p for p, (n, _) in enumerate(order) if n in new}  # where the files read are

        def pick(
            places: Sequence[int], order: list = order, moved: set = moved
        ) -> list[int] | None:
            if moved.isdisjoint(places):
                return None
            needed.update(order[p] for p in places)
            return list(places)

        current, pages = feeds.paginate(range(len(order)), size, config.feeds.archive_entries)
        audiences = [(a, pick(places)) for a, places in kept["audiences"].items()]
        picked.append((lang, pick(current), [pick(page) for page in pages], audiences))
    wanted = set(needed.values())  # and their translations, in every language
    for kept in record.values():
        needed.update((n, slug) for n, slug in kept["order"] if slug in wanted)
    articles: dict[int, Article] = {}
    for n in needed:
        line = new.get(n) or table.line(n)
        try:
            article = decode_reading(sources[n], line or "")[0]
        except ValueError:
            return None  # a damaged index: the build is made as a whole
        if article is None:
            return None
        articles[n] = article

    def members(lang: str, places: list[int] | None) -> list[Article] | None:
        order = record[lang]["order"]
        return None if places is None else [articles[order[p][0]] for p in places]

    plans = [
        feeds.Plan(
            lang,
            members(lang, current),
            [members(lang, page) for page in pages],
            [(a, members(lang, places)) for a, places in audiences],
        )
        for lang, current, pages, audiences in picked
    ]
    return plans, ArticleSet(tuple(articles.values()))
