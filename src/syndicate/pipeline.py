"""Wiring: the only module that calls both the pure stages and I/O (files, state database).

Each pipeline function gathers everything first, then writes; a failure before the writes
leaves every previous output in place, and each write is atomic.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from email.utils import parseaddr
from pathlib import Path

from . import __version__, feeds
from .compose import compose_message
from .config import Config
from .digest import select_digest
from .errors import RenderError, SyndicateError
from .model import Article, ArticleSet, Diagnostic, Severity
from .reader import parse_article, read_articles
from .render import RenderedDigest, render_digest
from .store import open_store

MANIFEST = ".manifest.json"


# ---------------------------------------------------------------------------------------------
# Files.


def write_atomic(path: Path, data: bytes) -> bool:
    """Replace ``path`` with ``data`` unless it already holds exactly that; True if written.

    A temporary file in the same folder, then ``os.replace``: a reader sees the old file or the
    new one, never a half-written one. Unchanged files are left alone, so their mtime (and the
    Last-Modified a web server derives from it) stays.
    """
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def _scan(folder: Path, prefix: str = "") -> dict[str, list[int]]:
    """(size, mtime_ns) of every visible file below ``folder``: the files
    ``reader.article_files`` reads, found with scandir, which costs a tenth of pathlib."""
    found: dict[str, list[int]] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                found.update(_scan(Path(entry.path), f"{prefix}{entry.name}/"))
            elif entry.is_file():
                st = entry.stat()
                found[prefix + entry.name] = [st.st_size, st.st_mtime_ns]
    return found


def _stats(root: Path, paths: list[Path]) -> dict[str, list[int]]:
    found = {}
    for path in paths:
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        found[str(path.relative_to(root))] = [st.st_size, st.st_mtime_ns]
    return found


# ---------------------------------------------------------------------------------------------
# Feeds.


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

    @property
    def has_errors(self) -> bool:
        return any(p.severity is Severity.ERROR for p in self.problems)


def _fingerprint(config: Config, folder: Path, *, gated: bool) -> str:
    """Everything besides the article files that decides the output bytes."""
    text = f"{__version__}\n{gated}\n{folder.resolve()}\n{config.model_dump_json()}"
    return hashlib.sha256(text.encode()).hexdigest()


def _with_bodies(config: Config, found: ArticleSet) -> ArticleSet:
    """Re-read with their bodies the articles the subscription documents show in full."""
    size = config.feeds.max_entries
    full: dict[tuple[str, str], Article] = {}
    for lang in found.languages:
        for article in found.in_language(lang)[:size]:
            try:
                data = Path(article.source).read_bytes()
            except OSError:
                continue
            again, _ = parse_article(data, article.source, config.profiles)
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
    """The articles whose date line has come (all without ``now``), and the next one's time."""
    if now is None:
        return found, None
    when = {a.key: feeds.updated_at(config, a.updated) for a in found}
    due = tuple(a for a in found if when[a.key] <= now)
    later = [t for t in when.values() if t > now]
    return ArticleSet(due, found.problems), min(later, default=None)


def build_feeds(
    config: Config,
    articles_dir: Path | None = None,
    out: Path | None = None,
    *,
    now: datetime | None = None,
) -> FeedReport:
    """Read the article set and write every feed document into ``out`` (default: feeds.out).

    With ``now``, an article whose date line is still ahead is held back (and not recorded as
    published) until a build after its time: no feed ever shows a date in the future.
    A manifest of the inputs (path, size, mtime_ns), the config and the outputs is kept in the
    output folder; when none of them changed and no held-back article fell due, nothing is read
    or written. Publication times are recorded in the state database the first time an article
    is built.
    """
    folder = articles_dir if articles_dir is not None else config.path(config.site.articles)
    out = out if out is not None else config.path(config.feeds.out)
    if not folder.is_dir():
        # Not an empty article set: publishing nothing would empty every feed.
        raise SyndicateError(f"{folder}: article folder not found")
    manifest_path = out / MANIFEST
    inputs = _scan(folder)
    fingerprint = _fingerprint(config, folder, gated=now is not None)
    try:
        previous = json.loads(manifest_path.read_text("utf-8"))
    except (OSError, ValueError):
        previous = {}
    if (
        previous.get("fingerprint") == fingerprint
        and previous.get("inputs") == inputs
        and previous.get("outputs") == _stats(out, [out / n for n in previous.get("outputs", {})])
        and (not previous.get("next_due") or now < datetime.fromisoformat(previous["next_due"]))
    ):
        return FeedReport(
            out,
            previous.get("entries", {}),
            unchanged=tuple(previous["outputs"]),
            problems=_problems(previous.get("problems", [])),
            skipped=True,
            next_due=_when(previous.get("next_due")),
        )

    due, next_due = _due(config, read_articles(folder, config.profiles, bodies=False), now)
    found = _with_bodies(config, due)
    store = open_store(config.database_url)
    try:
        published = store.first_published(feeds.publication_candidates(found, config))
    finally:
        store.close()
    docs = feeds.render_feeds(config, found, published)

    written, unchanged = [], []
    for name, data in docs.items():
        (written if write_atomic(out / name, data) else unchanged).append(name)
    removed = sorted(set(previous.get("outputs", {})) - set(docs))
    for name in removed:
        (out / name).unlink(missing_ok=True)
    entries = {lang: len(found.in_language(lang)) for lang in found.languages}
    write_atomic(
        manifest_path,
        json.dumps(
            {
                "fingerprint": fingerprint,
                "inputs": inputs,
                "outputs": _stats(out, [out / n for n in docs]),
                "entries": entries,
                "next_due": next_due.isoformat() if next_due else None,
                "problems": [
                    {
                        "file": p.file,
                        "line": p.line,
                        "severity": str(p.severity),
                        "message": p.message,
                    }
                    for p in found.problems
                ],
            },
            indent=1,
        ).encode(),
    )
    return FeedReport(
        out,
        entries,
        tuple(written),
        tuple(unchanged),
        tuple(removed),
        found.problems,
        next_due=next_due,
    )


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


# ---------------------------------------------------------------------------------------------
# Digests.


PREVIEW_TOKEN = "PREVIEW-ONLY-NOT-A-READER-TOKEN"
"""Stands in for a reader's token in previews, so no preview link acts on a real reader."""


def preview_links(config: Config, key: str) -> dict[str, str]:
    """Reader links for a preview: the real routes, with a token that is plainly not real."""
    base = config.site.base_url
    return {
        "unsubscribe_url": f"{base}/unsubscribe?token={PREVIEW_TOKEN}",
        "preferences_url": f"{base}/preferences?token={PREVIEW_TOKEN}",
        "view_url": f"{base}/digest/{key}?token={PREVIEW_TOKEN}",
    }


def preview_files(rendered: RenderedDigest, config: Config, *, now: datetime) -> dict[str, bytes]:
    """The .html, .txt and .eml of one variant, addressed to the configured preview reader."""
    links = preview_links(config, rendered.key)
    personal = rendered.personalise(**links)
    domain = parseaddr(config.email.sender)[1].rpartition("@")[2] or "localhost"
    message = compose_message(
        rendered,
        to=config.email.preview_to,
        sender=config.email.sender,
        message_id=f"<preview.{rendered.key}.{rendered.content_hash[:12]}@{domain}>",
        date=now,
        list_id=config.email.list_id,
        unsubscribe_mailto=config.email.unsubscribe_mailto,
        reply_to=config.email.reply_to,
        **links,
    )
    return {".html": personal.html.encode(), ".txt": personal.text.encode(), ".eml": message}


def write_preview(
    rendered: RenderedDigest, config: Config, out_dir: Path, *, now: datetime
) -> list[Path]:
    paths = []
    for suffix, data in preview_files(rendered, config, now=now).items():
        path = out_dir / f"{rendered.key}{suffix}"
        write_atomic(path, data)
        paths.append(path)
    return paths


def write_digest(
    config: Config,
    articles: ArticleSet,
    lang: str,
    audiences: Sequence[str],
    out_dir: Path,
    *,
    now: datetime,
    since: date | None = None,
) -> list[Path]:
    """One digest by hand; no files (an empty list) when nothing in the window is new."""
    digest = select_digest(articles, lang, audiences, since=since)
    if digest is None:
        return []
    return write_preview(render_digest(digest, config), config, out_dir, now=now)


def digest_variants(config: Config) -> list[tuple[str, tuple[str, ...]]]:
    """Every (language, audience set) a reader can get: each audience alone, and all of them."""
    sets = [(a,) for a in config.audiences] + [config.audiences]
    return [(lang, audiences) for lang in config.site.languages for audiences in sets]


def write_previews(
    config: Config, articles: ArticleSet, out_dir: Path, *, now: datetime
) -> list[Path]:
    """Render every variant that has content into ``out_dir``.

    A variant that fails does not stop the others; the failures are raised together at the end.
    """
    paths: list[Path] = []
    failures: list[str] = []
    for lang, audiences in digest_variants(config):
        digest = select_digest(articles, lang, audiences)
        if digest is None:
            continue
        try:
            paths += write_preview(render_digest(digest, config), config, out_dir, now=now)
        except RenderError as exc:
            failures.append(f"{digest.key}: {exc}")
    if failures:
        raise RenderError(
            f"{len(failures)} digest variant(s) not rendered ({len(paths)} file(s) written "
            f"to {out_dir}):\n" + "\n".join(f"  {f}" for f in failures)
        )
    return paths
