"""``check``, ``build`` and ``digest``: the commands that read the whole article set."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..clock import wall_clock
from ..errors import Exit
from ..model import Article, ArticleSet, Diagnostic, Severity
from .shared import article_folder, articles_option, check_known, options, with_config

if TYPE_CHECKING:
    from ..build import FeedReport
    from ..config import Config, LanguageProfile


def load_articles(
    config: Config, articles: Path | None, *, bodies: bool = True, blocks: bool = True
) -> ArticleSet:
    """Read the article set named on the command line, else the configured one (``bodies``
    and ``blocks``: as ``read_articles`` reads them)."""
    from ..reader import read_articles

    folder = article_folder(config, articles)
    limit = config.site.max_article_bytes
    return read_articles(folder, config.profiles, bodies=bodies, blocks=blocks, max_bytes=limit)


def print_problems(articles: ArticleSet) -> None:
    for problem in articles.problems:
        click.echo(str(problem), err=True)


def summary_line(found: ArticleSet) -> str:
    """The article set in one line: "3 article(s) (de 1, en 1, nl 1), 0 error(s), 1 warning(s)"."""
    languages = ", ".join(f"{lang} {len(found.in_language(lang))}" for lang in found.languages)
    errors = sum(p.severity is Severity.ERROR for p in found.problems)
    warnings = len(found.problems) - errors
    counts = f" ({languages})" if languages else ""
    return f"{len(found)} article(s){counts}, {errors} error(s), {warnings} warning(s)"


@contextlib.contextmanager
def owned_process() -> Iterator[None]:
    """What the commands that own their process and read a whole article set at once
    (``build``, ``check``, ``digest``) choose for it while they read. No cycle collection:
    articles hold no reference cycles, yet the collector would walk every object made so far,
    again and again (a fifth of the time). Reader workers forked: a fork starts one at once,
    with everything this process has loaded; only a process with no other threads may fork
    (under a test runner it has some). What the command imported before it is frozen, as in
    main()."""
    import multiprocessing

    collecting = gc.isenabled()
    method = multiprocessing.get_start_method(allow_none=True)
    gc.freeze()
    gc.disable()
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        multiprocessing.set_start_method("fork", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(method, force=True)
        if collecting:
            gc.enable()


@click.command()
@with_config
@articles_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("--summary", is_flag=True, help="One line of counts instead of the table.")
def check(config: Config, articles: Path | None, as_json: bool, summary: bool) -> None:
    """Read the article set and report what was found and every problem."""
    from ..i18n import catalog_problems

    with owned_process():  # every problem, and the references and bullets --json lists
        found = load_articles(config, articles, blocks=False)
    source = str(options().config or "config.toml")
    settings = [Diagnostic(source, None, Severity.WARNING, line) for line in config.doubtful()]
    more = (*settings, *catalog_problems(config), *private_file_problems(config))
    found = ArticleSet(found.articles, found.problems + more)
    waiting = digest_backlog(config, found)
    unpublished = unpublished_readings(config, found)
    languages = unpublished_languages(unpublished)
    if as_json:
        report = check_report(found)
        report["unpublished"] = [article_report(a) for *_, a in unpublished if a is not None]
        report["unpublished_languages"] = {
            lang: {
                "file": files[0],  # the first, as the report named one file before "files"
                "files": files,
                "profile": profile.model_dump(exclude_defaults=True),
            }
            for lang, (files, profile) in languages.items()
        }
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    elif summary:
        print_problems(found)
        click.echo(summary_line(found))
    else:
        print_summary(found, config)
    if not as_json:
        for lang, (files, profile) in languages.items():
            click.echo(f"\n{publishing_advice(config, lang, files, profile)}", err=True)
    for key, n, readers in waiting:
        line = f"{key}: {n} article(s) wait for the next digest ({readers} reader(s))"
        click.echo(line, err=True)
    sys.exit(Exit.FAILED if found.has_errors else Exit.OK)


def digest_backlog(config: Config, found: ArticleSet) -> list[tuple[str, int, int]]:
    """What waits for each group's next digest, late articles included (``waiting_digests``);
    nothing when there is no state database yet. One that cannot be reached is a warning."""
    from ..errors import SyndicateError
    from ..sending.issuing import waiting_digests
    from ..state import database_errors, open_store
    from ..state.database import database_files

    files = database_files(config.database_url)
    if files and not files[0].exists():
        return []
    try:
        with database_errors(config.database_url, every=True):
            store = open_store(config.database_url)
            try:
                return waiting_digests(config, found, store, wall_clock())
            finally:
                store.close()
    except SyndicateError as exc:
        click.echo(f"warning: no count of what waits for a digest: {exc}", err=True)
        return []


def private_file_problems(config: Config) -> list[Diagnostic]:
    """A warning for each file holding readers, or the key of their links, that users other
    than its owner can read (a site started before these were made owner-only, or a copy),
    with the command that fixes it."""
    from ..files import readable_by_others
    from ..state.database import database_files

    held = {
        path: "every reader's address, consent record and the ledger"
        for path in database_files(config.database_url)
    }
    held[config.path(config.web.secret_key_file)] = "the key that signs readers' links"
    problems = []
    for path, what in held.items():
        if readable_by_others(path):
            shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
            message = f"other users can read it ({what}): chmod 600 {shown}"
            problems.append(Diagnostic(shown, None, Severity.WARNING, message))
    return problems


_Unpublished = tuple[str, str, "LanguageProfile", "Article | None"]  # file, lang, …


def unpublished_readings(config: Config, found: ArticleSet) -> list[_Unpublished]:
    """Each file read but not published (``parse.UNPUBLISHED``): its path, its language, the
    profile its structure shows (its labels given to the audiences of the same article in a
    published language, where there is one), and its reading with that profile, as it would
    be published."""
    from ..reader import parse_article
    from ..reader.parse import UNPUBLISHED, profile_of

    readings: list[_Unpublished] = []
    for problem in found.problems:
        if not problem.message.startswith(UNPUBLISHED):
            continue
        try:
            data = Path(problem.file).read_bytes()
        except OSError:  # gone since: the next check tells
            continue
        read = profile_of(data, config.profiles)
        if read is None:
            continue
        lang, profile = read
        article, _ = parse_article(
            data, problem.file, {**config.profiles, lang: profile}, blocks=False
        )
        translation = next(iter(found.translations(article)), None) if article else None
        if translation is not None:  # it says which audiences the article has
            aligned = profile.aligned([t.audience for t in translation.takeaways])
            if aligned is not profile:
                profile = aligned
                profiles = {**config.profiles, lang: profile}
                article, _ = parse_article(data, problem.file, profiles, blocks=False)
        readings.append((problem.file, lang, profile, article))
    return readings


def unpublished_languages(
    readings: list[_Unpublished],
) -> dict[str, tuple[list[str], LanguageProfile]]:
    """Each language of the ``unpublished_readings``, with its files and the profile their
    structures show together: each writer's words for the date line, headings and labels."""
    languages: dict[str, tuple[list[str], LanguageProfile]] = {}
    for file, lang, profile, _ in readings:
        if lang in languages:
            files, seen = languages[lang]
            languages[lang] = ([*files, file], seen.widened(profile))
        else:
            languages[lang] = ([file], profile)
    return languages


def publishing_advice(config: Config, lang: str, files: list[str], profile: LanguageProfile) -> str:
    """How to publish ``lang``: the config lines, with the profile read from ``files`` unless
    the language has one (built in, or a block of its own)."""
    file = files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more"
    if lang in config.languages:
        return f'To publish {profile.name} ({file}), add "{lang}" to site.languages.'
    return (
        f'To publish {profile.name} ({file}), add "{lang}" to site.languages, this block to '
        f"config.toml and a catalog for its mails and pages (syndicate locale init {lang}). "
        f"The block's words were read from where the article puts them: check each, and add "
        f'audience_names and a description (docs/digests.md, "Adding a language").\n\n'
        f"{profile_block(lang, profile)}"
    )


def profile_block(lang: str, profile: LanguageProfile) -> str:
    """``profile`` as the ``[languages.<lang>]`` block of config.toml (TOML strings are JSON
    strings), leaving out what it has no words for."""

    def line(key: str, value: str | list[str]) -> str:
        return f"{key} = {json.dumps(value, ensure_ascii=False)}"

    lines = [f"[languages.{lang}]", line("name", profile.name)]
    for key in ("date_line", "takeaways", "references", "seo"):
        if getattr(profile, key):
            lines.append(line(key, getattr(profile, key)))
        elif key != "seo":  # needed: the article had no such heading to read it from
            lines.append(f"# {key} = [...]  the article has no heading here: write yours")
    fields = profile.seo_fields.model_dump(exclude_defaults=True)
    if fields:
        lines += ["", f"[languages.{lang}.seo_fields]"]
        lines += [line(key, value) for key, value in fields.items()]
    lines += ["", f"[languages.{lang}.audiences]"]
    lines += [line(audience, labels) for audience, labels in profile.audiences.items()]
    return "\n".join(lines)


def check_report(found: ArticleSet) -> dict[str, Any]:
    """The ``check --json`` contract: one document, articles then problems."""
    return {
        "articles": [article_report(a) for a in sorted(found, key=lambda a: (a.slug, a.lang))],
        "problems": [
            {"file": p.file, "line": p.line, "severity": str(p.severity), "message": p.message}
            for p in found.problems
        ],
    }


def article_report(a: Article) -> dict[str, Any]:
    """One article as ``check --json`` gives it."""
    return {
        "file": a.source,
        "lang": a.lang,
        "slug": a.slug,
        "title": a.title,
        "updated": a.updated.isoformat(),
        "summary": a.summary,
        "audiences": {t.audience: list(t.bullets) for t in a.takeaways},
        "references": [{"n": r.number, "text": r.text, "url": r.url} for r in a.references],
        "alt_slugs": list(a.seo.alt_slugs),
    }


def print_summary(found: ArticleSet, config: Config) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(found)} article(s)")
    for column in ("lang", "slug", "title", "updated", "bullets per audience", "refs"):
        table.add_column(column)
    for a in sorted(found, key=lambda a: (a.slug, a.lang)):
        bullets = " ".join(f"{t.audience}:{len(t.bullets)}" for t in a.takeaways) or "-"
        table.add_row(
            a.lang, a.slug, a.title, a.updated.isoformat(), bullets, str(len(a.references))
        )
    console = Console(soft_wrap=True)
    console.print(table, markup=False)
    errors = sum(p.severity is Severity.ERROR for p in found.problems)
    warnings = len(found.problems) - errors
    print_problems(found)
    click.echo(f"{errors} error(s), {warnings} warning(s)", err=True)


@click.command()
@with_config
@articles_option
@click.option("--lang", required=True, help="Language of the digest, e.g. nl.")
@click.option(
    "--audience", "audiences", multiple=True, required=True, help="Audience id; repeatable."
)
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    help="Articles updated on or after this date (YYYY-MM-DD) instead of what is new since "
    "the group's last issue; still capped by email.max_articles.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Output folder (default: <email.outbox>/preview).",
)
def digest(
    config: Config,
    articles: Path | None,
    lang: str,
    audiences: tuple[str, ...],
    since: datetime | None,
    out: Path | None,
) -> None:
    """Render one digest by hand: <lang>-<audiences>.html, .txt and .eml (to email.preview_to).

    Without --since it holds what the group's next issue would: what is new since its last one.
    """
    from ..previews import write_digest
    from ..state import open_store

    check_known(config, langs=[lang], audiences=audiences)
    with owned_process():
        found = load_articles(config, articles, bodies=False)  # a digest shows no body
    print_problems(found)
    out = out if out is not None else config.path(config.email.outbox) / "preview"

    day = since.date() if since else None
    store = open_store(config.database_url)
    try:
        paths = write_digest(
            config, found, lang, audiences, out, now=wall_clock(), since=day, store=store
        )
    finally:
        store.close()
    if not paths:
        window = f"since {day.isoformat()}" if day else "in its window (see --since)"
        click.echo(f"nothing new for {lang} / {'+'.join(audiences)} {window}: no digest written")
    for path in paths:
        click.echo(str(path))


@click.command()
@with_config
@articles_option
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder the feeds are written to (default: feeds.out from the config).",
)
@click.option(
    "--site",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Also write the whole public site into this folder, for any static host.",
)
def build(config: Config, articles: Path | None, out: Path | None, site: Path | None) -> None:
    """Build the Atom, RSS and JSON feeds of every language (files that would not change are
    left alone); with --site, the site's pages, sitemap and feeds too."""
    from ..build import build_feeds
    from ..websub import HubNotifier

    if site is not None:
        from ..web.static import build_site, check_replaceable

        check_replaceable(config, site)  # before any work: a mistyped folder is refused
    now = wall_clock()
    with owned_process():
        report = build_feeds(config, articles, out, now=now, notify=HubNotifier())
    print_feed_report(report)
    if site is not None:
        written = build_site(config, site, article_folder(config, articles), report.out, now)
        click.echo(f"site in {written.out}: {written.pages} pages, {written.files} files")
    sys.exit(1 if report.has_errors else 0)


def print_feed_report(report: FeedReport, *, problems: bool = True) -> None:
    if problems:
        for problem in report.problems:
            click.echo(str(problem), err=True)
    counts = ", ".join(f"{lang}: {n}" for lang, n in report.entries.items()) or "no articles"
    if report.skipped:
        click.echo(f"feeds in {report.out} are up to date ({counts})")
    else:
        click.echo(
            f"feeds in {report.out} ({counts}): {len(report.written)} written, "
            f"{len(report.unchanged)} unchanged, {len(report.removed)} removed; "
            f"{report.read} article file(s) read"
        )
    if report.next_due:
        click.echo(f"articles dated later are held back; the next is due {report.next_due}")
    for hub, told in report.announced.items():
        if told:
            click.echo(f"WebSub hub {hub} told of {told} changed feed(s)")
    for hub, topics in report.unannounced.items():
        click.echo(f"WebSub hub {hub}: {len(topics)} feed(s) not announced, tried again next build")
