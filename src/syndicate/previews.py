"""Digests by hand and previews: what a group's next issue would hold, as .html, .txt and .eml
files addressed to the preview reader (``sending.messages.preview_files``), with links that
act on no real reader."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path

from .config import Config
from .errors import RenderError, describe
from .files import write_atomic
from .model import ArticleSet
from .render import RenderedDigest, render_digest
from .sending.issuing import next_digest
from .sending.messages import preview_files
from .state import Store


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
