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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from . import __version__, feeds
from .config import Config
from .errors import OutputError, UsageError, describe
from .files import Staging, atomic_file, file_stats, sweep_leftovers, write_atomic
from .i18n import language
from .model import Article, ArticleSet, Diagnostic, Severity
from .reader import (
    Reading,
    article_set,
    parse_article,
    read_index,
    scan,
)
from .state import Store, database_errors, open_store
from .websub import Notify

MANIFEST = ".manifest.json"
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

    @property
    def has_errors(self) -> bool:
        return any(p.severity is Severity.ERROR for p in self.problems)


def _fingerprint(config: Config, folder: Path, *, gated: bool) -> str:
    """Everything besides the article files that decides the output bytes."""
    text = f"{__version__}\n{gated}\n{folder.resolve()}\n{config.model_dump_json()}"
    return hashlib.sha256(text.encode()).hexdigest()


def _inputs_hash(inputs: Mapping[str, list]) -> str:
    """The article files' paths, sizes and mtimes in one hash: a large set's manifest would
    otherwise take longer to load than the files take to stat."""
    return hashlib.sha256(json.dumps(inputs, separators=(",", ":")).encode()).hexdigest()


def _with_bodies(config: Config, found: ArticleSet) -> ArticleSet:
    """Re-read with their bodies the articles the subscription documents show in full (their
    diagnostics came with the first reading)."""
    full: dict[tuple[str, str], Article] = {}
    for lang in found.languages:
        for article in feeds.shown_in_full(config, found, lang):
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


def _due(
    config: Config, found: ArticleSet, now: datetime | None
) -> tuple[ArticleSet, datetime | None]:
    """The articles whose date line has come (all without ``now``), and the next one's time.
    Each day is made an instant once: a set has far fewer days than articles."""
    if now is None:
        return found, None
    held = {day for day in {a.updated for a in found} if feeds.updated_at(config, day) > now}
    if not held:
        return found, None
    due = tuple(a for a in found if a.updated not in held)
    return ArticleSet(due, found.problems), feeds.updated_at(config, min(held))


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
        manifest_path = report.out / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text("utf-8"))
        except (OSError, ValueError):  # gone meanwhile: the next build rebuilds and tells again
            manifest = None
        if isinstance(manifest, dict):
            manifest["unannounced"] = left
            write_atomic(manifest_path, json.dumps(manifest, separators=(",", ":")).encode())
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
    files: dict[str, tuple[int, int]]
    """Each file's path and (size, mtime_ns)."""
    relative: dict[str, list[int]]
    """The same, by path relative to the folder (what the manifest and the index record)."""
    scanned: list[Diagnostic]
    """What the walk left out, and why."""
    digest: str
    """All of it in one hash: the manifest's ``inputs``."""


def _walk(config: Config, folder: Path) -> _Inputs:
    if not folder.is_dir():
        # Not an empty article set: publishing nothing would empty every feed.
        raise UsageError(f"{folder}: article folder not found")
    scanned: list[Diagnostic] = []
    files = scan(folder, scanned, max_bytes=config.site.max_article_bytes)
    prefix = len(os.path.join(str(folder), ""))
    relative = {path[prefix:].replace(os.sep, "/"): list(stat) for path, stat in files.items()}
    # What the walk left out counts as input too: a new dangling link is news.
    digest = _inputs_hash({**relative, "": [[p.file, p.message] for p in scanned]})
    return _Inputs(folder, files, relative, scanned, digest)


def _build_feeds(
    config: Config,
    articles_dir: Path | None,
    out: Path | None,
    now: datetime | None,
    store: Store | None,
) -> FeedReport:
    folder = articles_dir if articles_dir is not None else config.path(config.site.articles)
    out = out if out is not None else config.path(config.feeds.out)
    inputs = _walk(config, folder)
    fingerprint = _fingerprint(config, folder, gated=now is not None)
    try:
        previous = json.loads((out / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        previous = {}
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
        found, next_due = _stage(config, inputs, staging, now, store)
    except OSError as exc:
        staging.discard()
        raise OutputError(f"feeds unchanged: {describe(exc)}") from exc
    except BaseException:
        staging.discard()
        raise
    try:
        return _commit(config, staging, previous, found, next_due, fingerprint, inputs.digest)
    except OSError as exc:
        staging.discard()
        raise OutputError(
            f"feeds in {out} partly updated: {describe(exc)} (the next build writes them again)"
        ) from exc


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


def _stage(
    config: Config,
    inputs: _Inputs,
    staging: Staging,
    now: datetime | None,
    store: Store | None,
) -> tuple[ArticleSet, datetime | None]:
    """Read the set and stage every feed document; the articles shown, and when the next
    held-back one falls due."""
    out = staging.folder
    if out.is_dir():
        sweep_leftovers(out)
    # The index file is written as the files are read, and takes the old one's place
    # only when every document is staged.
    with atomic_file(out / INDEX) as index_file:
        # The feeds show the newest articles whole and the rest by summary: read the
        # summaries (no body, no bullets), then the newest again, in full. A file the last
        # build read and that has not changed since is not read again.
        readings = _read_and_index(config, inputs, out / INDEX, index_file)
        index = article_set(readings)
        if inputs.scanned:
            index = ArticleSet(index.articles, (*inputs.scanned, *index.problems))
        due, next_due = _due(config, index, now)
        found = _with_bodies(config, due)
        published = _first_published(config, store, feeds.publication_candidates(found, config))
        # Each document is staged as it comes. In this process only: forked renderers
        # were measured at 30,000 articles, and each copies much of the set's memory (it
        # touches every article's reference count): with one, rendering took 0.41-0.44 s
        # instead of 0.57-0.60, and the build's processes 230 MiB together instead of 177.
        gettext = {lang: language(config, lang).translations.gettext for lang in found.languages}
        for name, data in feeds.render_feeds(config, found, published, gettext):
            staging.add(name, data)
    return found, next_due


def _first_published(
    config: Config, store: Store | None, candidates: Sequence[tuple[str, str, datetime]]
) -> dict:
    """When each article was first published, recording the new ones: in ``store``, else in
    the configured state database, opened only now that the build needs it."""
    if store is not None:
        return store.first_published(candidates)
    with database_errors(config.database_url, "feeds unchanged: "):
        opened = open_store(config.database_url)
        try:
            return opened.first_published(candidates)
        finally:
            opened.close()


def _commit(
    config: Config,
    staging: Staging,
    previous: dict,
    found: ArticleSet,
    next_due: datetime | None,
    fingerprint: str,
    inputs: str,
) -> FeedReport:
    """Put the staged documents in place, remove the ones no longer made, and record the
    build in the manifest."""
    out = staging.folder
    written, unchanged = staging.commit()
    docs = staging.files
    removed = sorted(set(previous.get("outputs", {})) - set(docs))
    for name in removed:
        (out / name).unlink(missing_ok=True)
    entries = {lang: len(found.in_language(lang)) for lang in found.languages}
    # Recorded before any hub is told: a build killed meanwhile leaves them to the next.
    unannounced = _waiting(config, previous, feeds.hub_topics(config, written))
    manifest = {
        "fingerprint": fingerprint,
        "inputs": inputs,
        "outputs": file_stats(out, list(docs)),
        "entries": entries,
        "next_due": next_due.isoformat() if next_due else None,
        "unannounced": unannounced,
        "problems": [
            {"file": p.file, "line": p.line, "severity": str(p.severity), "message": p.message}
            for p in found.problems
        ],
    }
    # not indented: indenting would take the pure-Python encoder
    write_atomic(out / MANIFEST, json.dumps(manifest, separators=(",", ":")).encode())
    return FeedReport(
        out,
        entries,
        tuple(written),
        tuple(unchanged),
        tuple(removed),
        found.problems,
        next_due=next_due,
        unannounced=unannounced,
    )


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


# The index file: for each article file, its (size, mtime_ns) and the index reading the build
# made of it (no body, no references, no bullets), one line each after a first line with the
# key: the path, size and mtime as a JSON array, a tab, and the reading as the reader encodes
# it (JSON has no raw tabs). A file whose size and mtime still match is not read again; any
# change to the config or the version (the key) makes every file be read again. Written line
# by line as the files are read, so that no reading is held twice.


def _read_and_index(
    config: Config, inputs: _Inputs, path: Path, new_index: BinaryIO
) -> list[Reading]:
    """Every file's index reading, taken from the index file at ``path`` where the file has
    not changed; ``new_index`` gets the new index as they come."""
    key = _fingerprint(config, inputs.folder, gated=False)
    paths = dict(zip(inputs.relative, inputs.files, strict=True))
    known = _known_readings(path, key, inputs.relative, paths)
    found = read_index(list(inputs.files), config.profiles, known=known)
    new_index.write(json.dumps(key).encode() + b"\n")
    readings = []
    for (relative, stat), (_, reading, encoded) in zip(inputs.relative.items(), found, strict=True):
        new_index.write(f"{json.dumps([relative, *stat])}\t{encoded}\n".encode())
        readings.append(reading)
    return readings


def _known_readings(
    path: Path, key: str, inputs: dict[str, list[int]], paths: dict[str, str]
) -> dict[str, str]:
    """The encoded readings of the index file whose files are unchanged, by path (``paths``
    maps relative paths to those); none if the index is missing or unreadable, or was made
    under another config. A damaged entry is left out: ``read_index`` reads its file."""
    known: dict[str, str] = {}
    try:
        with path.open("rb") as handle:
            if json.loads(handle.readline()) != key:
                return {}
            for line in handle:
                head, tab, encoded = line.decode("utf-8", "replace").rstrip("\n").partition("\t")
                try:
                    relative, *stat = json.loads(head)
                    unchanged = bool(tab) and inputs.get(relative) == stat
                except (ValueError, TypeError):  # a damaged line: that file is read again
                    continue
                if unchanged:
                    known[paths[relative]] = encoded
    except (OSError, ValueError):
        return {}
    return known
