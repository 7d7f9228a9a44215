"""Wiring: pure stages in, files out. The only module that both calls the stages and writes.

Every file is written whole to a temporary name in its folder and then renamed, so a reader
never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from datetime import date, datetime
from email.utils import parseaddr
from pathlib import Path

from .compose import compose_message
from .config import Config
from .digest import select_digest
from .errors import RenderError
from .model import ArticleSet
from .render import RenderedDigest, render_digest

PREVIEW_TOKEN = "PREVIEW-ONLY-NOT-A-READER-TOKEN"
"""Stands in for a reader's token in previews, so no preview link acts on a real reader."""


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
