"""Wiring: the only module that calls both the pure stages and I/O (files, state database).

Each pipeline function gathers everything first, then writes; a failure before the writes
leaves every previous output in place, and each write is atomic.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mailbox
import os
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import parseaddr
from pathlib import Path
from typing import BinaryIO
from zoneinfo import ZoneInfo

from . import __version__, feeds
from .bounces import (
    COMPLAINT,
    NOT_A_BOUNCE,
    PERMANENT,
    Finding,
    classify,
    verp_address,
    verp_deliveries,
)
from .compose import compose_message
from .config import Config
from .deliver import (
    DeliveryCounts,
    MaildirMailer,
    Mailer,
    Progress,
    SendOptions,
    SmtpMailer,
    deliver,
    envelope_sender,
)
from .digest import FIRST_ZONE, audience_order, local_send_time, select_digest, window_start
from .errors import ConfigError, OutputError, RenderError, UsageError, describe
from .model import Article, ArticleSet, Diagnostic, Digest, Severity
from .reader import (
    Reading,
    article_set,
    parse_article,
    read_articles,
    read_index,
    scan,
)
from .render import RenderedDigest, render_digest
from .routes import issue_name, issue_url, issues_url, reader_url, site_url
from .signing import DkimSigner
from .state import Bounced, Claim, Issue, Store, Subscriber, database_errors, open_store
from .subscribers import ReaderRow
from .tokens import PREFERENCES, UNSUBSCRIBE, reader_link, secret_key
from .websub import Notify

MANIFEST = ".manifest.json"
INDEX = ".index.json"  # the last build's reading of each article file, for the next build


# ---------------------------------------------------------------------------------------------
# Files.


def write_atomic(path: Path, data: bytes) -> bool:
    """Replace ``path`` with ``data`` unless it already holds exactly that; True if written.
    A document staged and put in place on its own: see ``Staging``."""
    staging = Staging(path.parent)
    staging.add(path.name, data)
    written, _ = staging.commit()
    return bool(written)


@contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A file to write ``path``'s new content into; it replaces ``path`` when the block ends
    without an error, and is removed when it does not."""
    fd, tmp = _temporary_beside(path)
    try:
        with _writing(path), os.fdopen(fd, "wb") as handle:
            yield handle
            handle.close()
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError while ``path`` is written names ``path``, not its temporary file (nor
    nothing, as a failed write does)."""
    try:
        yield
    except OSError as exc:
        temporary = os.path.join(path.parent, f".{path.name}.")
        if exc.filename is None or os.fspath(exc.filename).startswith(temporary):
            exc.filename, exc.filename2 = str(path), None
        raise


def _temporary_beside(path: Path) -> tuple[int, str]:
    """A new hidden file in ``path``'s folder, named after ``path`` and this process, whose
    id tells ``sweep_leftovers`` whether the file's writer is still at work."""
    with _writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        prefix = f".{path.name}.{os.getpid()}."
        return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)


def sweep_leftovers(folder: Path) -> None:
    """Remove the temporary files that writers killed part-way (``kill -9``, a power cut)
    left below ``folder``; a file whose process is still running is its writer's."""
    for tmp in folder.rglob(".*.tmp"):
        parts = tmp.name.split(".")  # "", name parts..., pid, random, "tmp"
        if len(parts) >= 5 and parts[-3].isdigit() and not _running(int(parts[-3])):
            tmp.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class Staging:
    """Documents on their way into a folder: each goes to a temporary file beside its name as
    soon as it is made, and ``commit`` puts them all in place once everything is made
    (``discard`` removes them). A reader of the folder sees old documents or new ones, never
    a half-written one, and a build that fails leaves the old ones. A document whose bytes
    did not change is left alone, so its mtime (and the Last-Modified a web server derives
    from it) stays."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: dict[str, str | None] = {}  # name -> its temporary file; None: unchanged

    def add(self, name: str, data: bytes) -> None:
        path = self.folder / name
        try:
            if path.stat().st_size == len(data) and path.read_bytes() == data:
                self.files[name] = None
                return
        except FileNotFoundError:
            pass
        fd, tmp = _temporary_beside(path)
        try:
            with _writing(path), os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.close()
                os.chmod(tmp, 0o644)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.files[name] = tmp

    def commit(self) -> tuple[list[str], list[str]]:
        """Put every new document in place; the names written and those left unchanged."""
        for name, tmp in self.files.items():
            if tmp is not None:
                with _writing(self.folder / name):
                    os.replace(tmp, self.folder / name)
        written = [name for name, tmp in self.files.items() if tmp is not None]
        return written, [name for name, tmp in self.files.items() if tmp is None]

    def discard(self) -> None:
        for tmp in self.files.values():
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)


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


def _digest(inputs: Mapping[str, list]) -> str:
    """The article files' paths, sizes and mtimes in one hash: a large set's manifest would
    otherwise take longer to load than the files take to stat."""
    return hashlib.sha256(json.dumps(inputs, separators=(",", ":")).encode()).hexdigest()


def _with_bodies(config: Config, found: ArticleSet) -> ArticleSet:
    """Re-read with their bodies the articles the subscription documents show in full (their
    diagnostics came with the first reading)."""
    size = config.feeds.max_entries
    full: dict[tuple[str, str], Article] = {}
    for lang in found.languages:
        for article in found.in_language(lang)[:size]:
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
) -> FeedReport:
    """Read the article set and write every feed document into ``out`` (default: feeds.out).

    With ``now``, an article whose date line is still ahead is held back (and not recorded as
    published) until a build after its time: no feed ever shows a date in the future.
    A manifest of the inputs (a hash of each file's path, size and mtime_ns), the config and
    the outputs is kept in the output folder; when none of them changed and no held-back
    article fell due, nothing is read or written. An index beside it keeps each file's summary
    reading, so a build reads only the files that changed since the last one. Publication
    times are recorded in the state database the first time an article is built.

    ``notify`` tells each ``feeds.hub`` which subscription feeds changed, after they are in
    place; what a hub could not be told is kept in the manifest and told at the next build,
    whether or not that one changes anything. A hub never fails the build.
    """
    report = _build_feeds(config, articles_dir, out, now)
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


def _build_feeds(
    config: Config, articles_dir: Path | None, out: Path | None, now: datetime | None
) -> FeedReport:
    folder = articles_dir if articles_dir is not None else config.path(config.site.articles)
    out = out if out is not None else config.path(config.feeds.out)
    if not folder.is_dir():
        # Not an empty article set: publishing nothing would empty every feed.
        raise UsageError(f"{folder}: article folder not found")
    manifest_path = out / MANIFEST
    scanned: list[Diagnostic] = []
    files = scan(folder, scanned, max_bytes=config.site.max_article_bytes)
    prefix = len(os.path.join(str(folder), ""))
    inputs = {path[prefix:].replace(os.sep, "/"): list(stat) for path, stat in files.items()}
    # What the walk left out counts as input too: a new dangling link is news.
    inputs_digest = _digest({**inputs, "": [[p.file, p.message] for p in scanned]})
    fingerprint = _fingerprint(config, folder, gated=now is not None)
    try:
        previous = json.loads(manifest_path.read_text("utf-8"))
    except (OSError, ValueError):
        previous = {}
    if (
        previous.get("fingerprint") == fingerprint
        and previous.get("inputs") == inputs_digest
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
            unannounced=_waiting(config, previous),
        )

    staging = Staging(out)
    try:
        if out.is_dir():
            sweep_leftovers(out)
        # The index file is written as the files are read, and takes the old one's place
        # only when every document is staged.
        with atomic_file(out / INDEX) as index_file:
            # The feeds show the newest articles whole and the rest by summary: read the
            # summaries (no body, no bullets), then the newest again, in full. A file the last
            # build read and that has not changed since is not read again.
            readings = _read_and_index(config, folder, out / INDEX, index_file, files, inputs)
            index = article_set(readings)
            if scanned:
                index = ArticleSet(index.articles, (*scanned, *index.problems))
            due, next_due = _due(config, index, now)
            found = _with_bodies(config, due)
            kept = "feeds unchanged: "
            with database_errors(config.database_url, kept):
                store = open_store(config.database_url)
                try:
                    published = store.first_published(feeds.publication_candidates(found, config))
                finally:
                    store.close()
            # Each document is staged as it comes. In this process only: forked renderers
            # were measured at 30,000 articles, and each copies much of the set's memory (it
            # touches every article's reference count): with one, rendering took 0.41-0.44 s
            # instead of 0.57-0.60, and the build's processes 230 MiB together instead of 177.
            for name, data in feeds.render_feeds(config, found, published):
                staging.add(name, data)
    except OSError as exc:
        staging.discard()
        raise OutputError(f"feeds unchanged: {describe(exc)}") from exc
    except BaseException:
        staging.discard()
        raise
    try:
        written, unchanged = staging.commit()
        docs = staging.files
        removed = sorted(set(previous.get("outputs", {})) - set(docs))
        for name in removed:
            (out / name).unlink(missing_ok=True)
        entries = {lang: len(found.in_language(lang)) for lang in found.languages}
        # Recorded before any hub is told: a build killed meanwhile leaves them to the next.
        unannounced = _waiting(config, previous, feeds.hub_topics(config, written))
        write_atomic(
            manifest_path,
            json.dumps(
                {
                    "fingerprint": fingerprint,
                    "inputs": inputs_digest,
                    "outputs": _stats(out, [out / n for n in docs]),
                    "entries": entries,
                    "next_due": next_due.isoformat() if next_due else None,
                    "unannounced": unannounced,
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
                separators=(",", ":"),  # indenting would take the pure-Python encoder
            ).encode(),
        )
    except OSError as exc:
        staging.discard()
        raise OutputError(
            f"feeds in {out} partly updated: {describe(exc)} (the next build writes them again)"
        ) from exc
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
    config: Config,
    folder: Path,
    path: Path,
    new_index: BinaryIO,
    files: dict[str, tuple[int, int]],
    inputs: dict[str, list[int]],
) -> list[Reading]:
    """Every file's index reading, taken from the index file at ``path`` where the file has
    not changed; ``new_index`` gets the new index as they come. ``files`` and ``inputs`` hold
    the same files in the same order, by path and by relative path."""
    key = _fingerprint(config, folder, gated=False)
    known = _known_readings(path, key, inputs, dict(zip(inputs, files, strict=True)))
    found = read_index(list(files), config.profiles, known=known)
    new_index.write(json.dumps(key).encode() + b"\n")
    readings = []
    for (relative, stat), (_, reading, encoded) in zip(inputs.items(), found, strict=True):
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


# ---------------------------------------------------------------------------------------------
# Digests.


PREVIEW_TOKEN = "PREVIEW-ONLY-NOT-A-READER-TOKEN"
"""Stands in for a reader's token in previews, so no preview link acts on a real reader."""


def preview_links(config: Config, lang: str) -> dict[str, str]:
    """Reader links for a preview: the real routes, with a token that is plainly not real
    (the web side answers it like any forged token), and the language's archive to view."""
    return {
        "unsubscribe_url": reader_url(config, UNSUBSCRIBE, PREVIEW_TOKEN),
        "preferences_url": reader_url(config, PREFERENCES, PREVIEW_TOKEN),
        "view_url": issues_url(config, lang),
    }


def preview_files(rendered: RenderedDigest, config: Config, *, now: datetime) -> dict[str, bytes]:
    """The .html, .txt and .eml of one variant, addressed to the configured preview reader."""
    links = preview_links(config, rendered.lang)
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
    store: Store | None = None,
) -> list[Path]:
    """One digest by hand: what the group's next issue would hold (its window, from ``store``),
    or from ``since`` on; no files (an empty list) when nothing in the window is new."""
    digest = next_digest(config, articles, lang, audiences, now=now, since=since, store=store)
    if digest is None:
        return []
    return write_preview(render_digest(digest, config), config, out_dir, now=now)


def next_digest(
    config: Config,
    articles: ArticleSet,
    lang: str,
    audiences: Sequence[str],
    *,
    now: datetime,
    since: date | None = None,
    store: Store | None = None,
) -> Digest | None:
    """The next digest of one group (language and audience set): from ``since`` when given,
    else what is new since the group's last issue, else its first window; never what it
    already had, and at most ``email.max_articles`` listed (the rest counted)."""
    chosen = audience_order(audiences)
    sent = store.sent_articles(lang, chosen) if store is not None else {}
    if since is None:
        zone = ZoneInfo(config.site.timezone)
        last = store.last_issue(lang, chosen) if store is not None else None
        since = window_start(
            last.astimezone(zone).date() if last is not None else None,
            now.astimezone(zone).date(),
            config.email.first_window_days,
        )
    return select_digest(
        articles, lang, chosen, since=since, sent=sent, limit=config.email.max_articles
    )


def digest_variants(config: Config) -> list[tuple[str, tuple[str, ...]]]:
    """Every (language, audience set) a reader can get: each audience alone, and all of them."""
    sets = [(a,) for a in config.audiences] + [config.audiences]
    return [(lang, audiences) for lang in config.site.languages for audiences in sets]


def write_previews(
    config: Config, articles: ArticleSet, out_dir: Path, *, now: datetime
) -> tuple[list[Path], list[tuple[str, str]]]:
    """Render every variant that has content into ``out_dir``: the files written, and the
    (variant, why) of each variant that could not be rendered or written. One that fails does
    not stop the others."""
    paths: list[Path] = []
    failures: list[tuple[str, str]] = []
    for lang, audiences in digest_variants(config):
        digest = next_digest(config, articles, lang, audiences, now=now)
        if digest is None:
            continue
        try:
            paths += write_preview(render_digest(digest, config), config, out_dir, now=now)
        except RenderError as exc:
            failures.append((digest.key, str(exc)))
        except OSError as exc:  # a file in the way, a full disk: this variant's preview only
            failures.append((digest.key, describe(exc)))
    return paths, failures


# ---------------------------------------------------------------------------------------------
# Sending.


@dataclass
class SendReport(DeliveryCounts):
    """What a send did: issues recorded (or, in a dry run, that would be) and delivery counts."""

    issues: list[tuple[str, int]] = field(default_factory=list)
    """(variant key, readers) per new issue."""
    pending: int = 0
    """Deliveries waiting (dry run only: nothing is sent)."""
    problems: tuple[Diagnostic, ...] = ()
    """Article files that could not be read (the others were still used)."""
    samples: int = 0
    """Sample readers left out because a real SMTP server is set."""
    refused: list[tuple[str, int, str]] = field(default_factory=list)
    """(variant key, readers, reason) per group whose digest could not be rendered; every
    other group was still issued (in a dry run: would fail)."""
    held: list[tuple[int, str, int, str]] = field(default_factory=list)
    """(issue id, variant key, readers, what became of its test copy) per new issue held for
    approval (``email.approval``)."""
    expired: list[tuple[int, str]] = field(default_factory=list)
    """(issue id, key) per held issue cancelled by ``email.approval_expires_days``."""
    waiting: int = 0
    """Deliveries whose local time has not come yet."""
    wake: datetime | None = None
    """When the first of them is due (the scheduler wakes then)."""

    @property
    def partial(self) -> bool:
        """Some reader did not get what was due: a group refused, or deliveries that failed,
        are uncertain or wait for the next run."""
        return bool(self.refused or self.failed or self.uncertain or self.deferred)


def open_mailer(config: Config) -> Mailer:
    """SMTP when a server is configured, else the Maildir in the outbox."""
    smtp = config.smtp
    if smtp.url:
        password = smtp.password.get_secret_value() if smtp.password else None
        return SmtpMailer.from_url(
            smtp.url, username=smtp.username, password=password, timeout=smtp.timeout
        )
    return MaildirMailer(config.path(config.email.outbox) / "maildir")


def message_sender(config: Config) -> Callable[[EmailMessage], None]:
    """Send single messages (the web side's confirmations) through the configured mailer,
    signed like the digests."""
    mailer, signer = open_mailer(config), dkim_signer(config)
    sender = envelope_sender(config.email.sender)

    def send(message: EmailMessage) -> None:
        data = message.as_bytes(policy=SMTP)
        if signer is not None:
            data = signer.sign(data)
        transport = mailer.open()
        try:
            transport.send(sender, message["To"], data)
        finally:
            transport.close()

    return send


def dkim_signer(config: Config) -> DkimSigner | None:
    """The configured DKIM signer, or None when signing is off."""
    email = config.email
    if not (email.dkim_selector and email.dkim_key_file):
        return None
    path = config.path(email.dkim_key_file)
    try:
        pem = path.read_bytes()
        domain = email.dkim_domain or _domain(email.sender)
        return DkimSigner(domain, email.dkim_selector, pem)
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), [f"email.dkim_key_file: {exc}"]) from None


def _domain(sender: str) -> str:
    return parseaddr(sender)[1].rpartition("@")[2] or "localhost"


def return_path(config: Config) -> str:
    """The address bounces go back to, before each delivery's own part is added."""
    return config.email.return_path or f"bounces@{_domain(config.email.sender)}"


def message_id(domain: str, issue_id: int, subscriber_id: int) -> str:
    """Stable per (issue, reader): a resent or retried message keeps its Message-ID."""
    return f"<digest.{issue_id}.{subscriber_id}@{domain}>"


def variants(
    readers: Iterable[Subscriber],
    langs: Iterable[str] | None = None,
    audiences: Iterable[str] | None = None,
) -> dict[tuple[str, tuple[str, ...]], list[Subscriber]]:
    """Readers grouped by (language, exact audience set): each reader gets one message.

    ``audiences`` keeps the sets that include at least one of them.
    """
    wanted_langs = set(langs) if langs else None
    wanted = set(audiences) if audiences else None
    groups: dict[tuple[str, tuple[str, ...]], list[Subscriber]] = defaultdict(list)
    for reader in readers:
        if not reader.audiences or (wanted_langs and reader.lang not in wanted_langs):
            continue
        if wanted and not wanted & set(reader.audiences):
            continue
        groups[(reader.lang, audience_order(reader.audiences))].append(reader)
    return dict(sorted(groups.items()))


def _serialise(rendered: RenderedDigest) -> str:
    return json.dumps(
        {f.name: getattr(rendered, f.name) for f in dataclasses.fields(rendered) if f.init},
        ensure_ascii=False,
    )


def _restore(issue: Issue) -> RenderedDigest:
    data = json.loads(issue.rendered)
    data["audiences"] = tuple(data["audiences"])
    return RenderedDigest(**data)


def archive_name(issue: Issue) -> str:
    return issue_name(issue.id, issue.key)


def view_url(config: Config, issue: Issue) -> str:
    return issue_url(config, issue.lang, archive_name(issue))


def write_archive(config: Config, issue: Issue, rendered: RenderedDigest) -> Path:
    """The issue as a public web page (no reader's links in it), written atomically."""
    base = site_url(config)
    page = rendered.personalise(
        unsubscribe_url=base, preferences_url=base, view_url=view_url(config, issue)
    ).html
    path = config.path(config.web.issues) / issue.lang / f"{archive_name(issue)}.html"
    write_atomic(path, page.encode())
    return path


def send_digests(
    config: Config,
    now: datetime,
    *,
    mailer: Mailer,
    store: Store,
    langs: Iterable[str] | None = None,
    audiences: Iterable[str] | None = None,
    since: date | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    issue: bool = True,
    local_time: tuple[int, int] | None = None,
) -> SendReport:
    """Issue every digest variant with new content and deliver what is pending.

    With ``email.approval`` a new issue is held, its test copy sent to ``email.preview_to``,
    until ``approve_issue``; a held issue past ``email.approval_expires_days`` is cancelled
    first. ``issue=False`` only delivers what is pending (after an approval).

    Each group's window is what is new since its last issue (its first: the newest
    ``email.max_articles``, within ``email.first_window_days`` when set); ``since`` sets the
    first day of every window instead. A group whose digest cannot be rendered is reported in
    ``SendReport.refused`` and the others go ahead. ``local_time`` (hour, minute): each
    reader's delivery waits for that time of the day in their own zone (``local_send_time``).

    An issue and its delivery rows are committed together before any message leaves; a rerun
    after a crash sends what is still pending, from the stored issue, and never re-issues the
    same content. Pending deliveries of earlier runs are sent too, whatever the filters.
    ``dry_run`` reports what would be issued and writes nothing. Once ``stop`` is set, no
    more deliveries start (see ``deliver``). The sample readers of a first run are never sent
    to through a real SMTP server.
    """
    # A digest shows titles, dates and takeaways: the summaries hold them.
    articles = read_articles(
        config.path(config.site.articles),
        config.profiles,
        bodies=False,
        max_bytes=config.site.max_article_bytes,
    )
    report = SendReport(problems=articles.problems)
    domain = _domain(config.email.sender)
    active = list(store.subscribers("active"))
    if config.smtp.url:
        real = [r for r in active if r.consent_source != SAMPLE_SOURCE]
        report.samples = len(active) - len(real)
        active = real
    readers = variants(active, langs, audiences) if issue else {}
    if not dry_run:
        report.expired = expire_held(config, store, now)
    for (lang, chosen), group in readers.items():
        digest = next_digest(config, articles, lang, chosen, now=now, since=since, store=store)
        if digest is None:
            continue
        # One group's digest failing to render (no catalog for its language, a template
        # error) is that group's: it is reported, and every other group is still issued.
        try:
            rendered = render_digest(digest, config)
        except Exception as exc:  # whatever it is, it is this variant's alone
            report.refused.append((digest.key, len(group), str(exc) or type(exc).__name__))
            continue
        if dry_run:
            report.issues.append((digest.key, len(group)))
            continue
        digest = digest.shortened(rendered.listed)
        made = store.create_issue(
            key=digest.key,
            lang=lang,
            audiences=digest.audiences,
            content_hash=digest.content_hash,
            subject=rendered.subject,
            rendered=_serialise(rendered),
            articles=[(*i.article.key, i.article.content_hash) for i in digest.items],
            readers=group,
            message_id=lambda issue_id, reader_id: message_id(domain, issue_id, reader_id),
            now=now,
            held=config.email.approval,
            not_before=local_times(config, now, *local_time) if local_time else None,
        )
        if made is None:
            continue
        report.issues.append((made.key, len(group)))
        if made.state == "held":
            report.held.append((made.id, made.key, len(group), test_copy(config, mailer, made)))
        else:
            write_archive(config, made, rendered)
    if dry_run:
        report.pending = store.pending_count()
        return report

    secret = secret_key(config)
    signer = dkim_signer(config)
    restored: dict[int, RenderedDigest] = {}

    def compose(issue: Issue, claim: Claim) -> bytes:
        if issue.id not in restored:
            restored[issue.id] = _restore(issue)
        message = compose_message(
            restored[issue.id],
            to=claim.email,
            sender=config.email.sender,
            message_id=claim.message_id,
            date=now,
            list_id=config.email.list_id,
            unsubscribe_url=reader_link(
                config, secret, UNSUBSCRIBE, claim.subscriber_id, issued=now
            ),
            unsubscribe_mailto=config.email.unsubscribe_mailto,
            preferences_url=reader_link(
                config, secret, PREFERENCES, claim.subscriber_id, issued=now
            ),
            view_url=view_url(config, issue),
            reply_to=config.email.reply_to,
        )
        return signer.sign(message, now=now) if signer else message

    bounce_to = return_path(config)

    def verp(claim: Claim) -> str:
        return verp_address(secret, bounce_to, claim.id)

    smtp = config.smtp
    options = SendOptions(
        sender=config.email.return_path or envelope_sender(config.email.sender),
        workers=smtp.pool_size,
        rate=smtp.rate,
        retries=smtp.retries,
        backoff=smtp.retry_backoff,
        max_bounces=smtp.max_bounces,
        return_path=verp if config.email.verp else None,
    )
    if config.smtp.url:
        report.skipped += store.skip_consent_source(
            SAMPLE_SOURCE, "sample reader: not sent through an SMTP server", now
        )
    deliver(store, mailer, compose, options, now, progress=progress, counts=report, stop=stop)
    waiting = store.waiting(now)
    report.waiting = sum(n for *_, n in waiting)
    report.wake = waiting[0][3] if waiting else None
    return report


def local_times(
    config: Config, now: datetime, hour: int, minute: int
) -> Callable[[Subscriber], datetime]:
    """Each reader's time for a local-time job fired at ``now``: that job's day (the date in
    ``FIRST_ZONE``) at hour:minute in the reader's zone, else the site's."""
    day = now.astimezone(FIRST_ZONE).date()
    zones: dict[str, ZoneInfo] = {}

    def when(reader: Subscriber) -> datetime:
        name = reader.timezone or config.site.timezone
        zone = zones.setdefault(name, ZoneInfo(name))
        return max(local_send_time(day, hour, minute, zone), now)

    return when


def test_copy(config: Config, mailer: Mailer, issue: Issue) -> str:
    """Send the editor (``email.preview_to``) one copy of a held issue, through the readers'
    mailer but outside the ledger, with the preview's links (no reader's); says how it went."""
    message = preview_files(_restore(issue), config, now=issue.created_at)[".eml"]
    sender = config.email.return_path or envelope_sender(config.email.sender)
    try:
        transport = mailer.open()
        try:
            transport.send(sender, config.email.preview_to, message)
        finally:
            transport.close()
    except Exception as exc:  # the copy is a courtesy: the issue stays held either way
        return f"test copy to {config.email.preview_to} not sent: {str(exc) or type(exc).__name__}"
    return f"test copy sent to {config.email.preview_to}"


def expire_held(config: Config, store: Store, now: datetime) -> list[tuple[int, str]]:
    """Cancel the held issues older than ``email.approval_expires_days``: never sent stale."""
    limit = now - timedelta(days=config.email.approval_expires_days)
    reply = f"held longer than {config.email.approval_expires_days} day(s) without approval"
    return [
        (held.id, held.key)
        for held in store.held_issues()
        if held.created_at < limit and store.withdraw_issue(held.id, "expired", reply, now)
    ]


def approve_issue(config: Config, store: Store, issue_id: int, now: datetime) -> Issue | None:
    """Release a held issue (its deliveries go out with the next send) and publish it in the
    web archive, which shows only what was sent; None when it is not held."""
    if not store.release_issue(issue_id, now):
        return None
    released = store.issue(issue_id)
    assert released is not None
    write_archive(config, released, _restore(released))
    return released


SAMPLE_AUDIENCES = (("architects",), ("cost", "procurement"), ("strategy", "ecosystem"))
SAMPLE_SOURCE = "sample"
"""The consent source of the sample readers: ``subscribers remove --samples`` removes them."""


def add_sample_readers(config: Config, store: Store, now: datetime) -> int:
    """A few readers at example.com for a first run with no mail server and nobody subscribed,
    so the whole path (issue, deliveries, Maildir) can be seen; returns how many were added."""
    if config.smtp.url or next(iter(store.subscribers()), None) is not None:
        return 0
    rows = [
        ReaderRow(f"sample-{lang}-{'-'.join(chosen)}@example.com", lang, chosen)
        for lang in config.site.languages
        for chosen in SAMPLE_AUDIENCES
    ]
    added, _ = store.import_subscribers(
        rows, status="active", consent_source=SAMPLE_SOURCE, now=now
    )
    return added


# ---------------------------------------------------------------------------------------------
# Bounces.


@dataclass(frozen=True, slots=True)
class BounceOutcome:
    """What became of one message of a bounce mailbox."""

    key: str
    """The message's name in its mailbox."""
    kind: str
    """permanent, temporary, complaint or none (see ``bounces.classify``)."""
    action: str
    """What was (in a dry run: would be) done: the store's answer, or why nothing was."""
    email: str = ""
    status: str = ""
    reason: str = ""
    matched_by: str = ""


class BounceBox:
    """A Maildir (a folder with cur/ and new/) or an mbox file of bounce mail; a message
    dealt with moves to ``processed/`` beside it (a Maildir inside the folder; for an mbox,
    an mbox of the same name in a processed/ folder next to it)."""

    def __init__(self, path: Path) -> None:
        self.box: mailbox.Mailbox
        if path.is_dir():
            if not ((path / "cur").is_dir() or (path / "new").is_dir()):
                raise UsageError(f"{path}: not a Maildir (no cur/ or new/ in it)")
            self.box = mailbox.Maildir(path, factory=None, create=False)
        elif path.is_file():
            self.box = mailbox.mbox(path, factory=None, create=False)
        else:
            raise UsageError(f"{path}: no such Maildir or mbox")
        self.path = path

    def messages(self) -> Iterator[tuple[str, bytes]]:
        for key in sorted(self.box.iterkeys(), key=str):
            yield str(key), self.box.get_bytes(key)

    def move(self, names: Sequence[str]) -> None:
        """Move messages into processed/: each is copied there first, then removed here (a
        message found in both after a crash is recognised by its digest)."""
        if not names:
            return
        done: mailbox.Mailbox
        if isinstance(self.box, mailbox.Maildir):
            done = mailbox.Maildir(self.path / "processed", factory=None)
        else:
            (self.path.parent / "processed").mkdir(exist_ok=True)
            done = mailbox.mbox(self.path.parent / "processed" / self.path.name, factory=None)
        self.box.lock()
        try:
            keys = {str(key): key for key in self.box.iterkeys()}
            for name in names:
                done.add(self.box.get_bytes(keys[name]))  # byte for byte: its digest stays
                done.flush()
                self.box.remove(keys[name])
            self.box.flush()
        finally:
            self.box.unlock()


def process_bounces(
    config: Config, store: Store, box: BounceBox, now: datetime, *, dry_run: bool = False
) -> list[BounceOutcome]:
    """Classify every message of ``box``, match it to a delivery and act on it; then move it
    to processed/, so that a second run finds nothing (a message put back is recognised by
    its digest and changes nothing either). ``dry_run`` writes and moves nothing.

    The delivery comes from a genuine VERP address in the message; a message with VERP
    addresses none of which is genuine is forged and ignored. Without one, the original's
    Message-ID and then the reported recipient are the fallbacks.
    """
    secret = secret_key(config)
    outcomes, done = [], []
    for key, data in box.messages():
        try:
            finding = classify(data)
        except Exception as exc:  # a message no detector can read stays for a person to see
            outcomes.append(BounceOutcome(key, NOT_A_BOUNCE, f"left in place: unreadable ({exc})"))
            continue
        outcome = BounceOutcome(key, finding.kind, "not a bounce", status=finding.status)
        if finding.kind != NOT_A_BOUNCE:
            outcome = _act(config, store, secret, key, data, finding, now, dry_run=dry_run)
        outcomes.append(outcome)
        done.append(key)
    if not dry_run:
        box.move(done)
    return outcomes


def _act(
    config: Config,
    store: Store,
    secret: bytes,
    key: str,
    data: bytes,
    finding: Finding,
    now: datetime,
    *,
    dry_run: bool,
) -> BounceOutcome:
    """Match one classified bounce to its delivery and record it (unless ``dry_run``)."""
    ids, shaped = verp_deliveries(secret, return_path(config), finding.text)
    base = {"key": key, "kind": finding.kind, "status": finding.status, "reason": finding.reason}
    if ids:
        targets, by = store.bounced_deliveries(ids=sorted(ids)), "verp"
    elif shaped:
        return BounceOutcome(**base, action="ignored: forged (no genuine return address)")
    else:
        targets, by = store.bounced_deliveries(message_ids=finding.message_ids), "message-id"
        if finding.recipients:  # the report's recipient must be the delivery's
            targets = [t for t in targets if t.email.lower() in finding.recipients]
        if not targets:
            targets, by = store.bounced_deliveries(emails=finding.recipients), "recipient"
    if not targets:
        return BounceOutcome(**base, action="ignored: no delivery or reader matches")
    target: Bounced = targets[0]
    digest = hashlib.sha256(data).hexdigest()
    if dry_run:
        action = _would(finding.kind, store.bounce_known(digest))
    else:
        action = store.record_bounce(
            message_hash=digest,
            target=target,
            kind=finding.kind,
            status=finding.status,
            reason=finding.reason,
            matched_by=by,
            max_bounces=config.smtp.max_bounces,
            now=now,
        )
    return BounceOutcome(**base, action=action, email=target.email, matched_by=by)


def _would(kind: str, known: bool) -> str:
    if known:
        return "would skip: recorded already"
    if kind == COMPLAINT:
        return "would unsubscribe"
    return "would count" if kind == PERMANENT else "would record"
