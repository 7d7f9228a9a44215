"""The interface's languages: gettext catalogs and templates, the package's and the publisher's.

One catalog per language (``messages.po``) holds every sentence a reader sees, in mail and on
the web. The package's catalog of a language is read first, then the publisher's
(``site.locales``), whose translations win; each is compiled when it is loaded and again only
when the file changes, so a new language or a reworded sentence needs no reinstall. Templates
are looked up in ``site.templates`` first, then in the package, file by file.

A language is complete for a part (mail or web) when its catalogs translate every message the
templates of that part use: the templates are the measure, so a stale .pot hides nothing.
An incomplete language is never shown half translated: its whole interface is in the fallback.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from functools import cache, lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Literal

from babel import Locale, UnknownLocaleError
from babel.dates import format_date
from babel.messages.catalog import Catalog
from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_file
from babel.messages.mofile import write_mo
from babel.messages.pofile import PoFileError, read_po, write_po
from babel.numbers import format_decimal
from babel.support import NullTranslations, Translations
from jinja2 import (
    BaseLoader,
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    StrictUndefined,
    select_autoescape,
)
from markupsafe import Markup

from .config import Config
from .errors import CatalogError, RenderError, SyndicateError
from .files import atomic_file
from .model import Diagnostic, Severity
from .prose import prose_html

SOURCE_LANGUAGE = "en"
"""The language of the templates' msgids: always complete, its catalog is optional."""
DOMAIN = "messages"
LOCALES = Path(__file__).with_name("locales")
PARTS = {"mail": "email", "web": "web"}
"""Each part of the interface and the template folder that holds it."""
TEMPLATE_SUFFIXES = (".mjml", ".txt", ".html")
_JINJA = {"extensions": "jinja2.ext.i18n", "trim_blocks": "true", "lstrip_blocks": "true"}

Msgid = str | tuple[str, str]
"""A message as the templates use it: a string, or (singular, plural)."""


@cache
def templates_dir() -> Path:
    """Installed wheels carry the templates inside the package; a checkout has them at its top."""
    packaged = Path(__file__).resolve().with_name("templates")
    return packaged if packaged.is_dir() else packaged.parents[2] / "templates"


def locale_name(lang: str) -> str:
    """A language code as Babel and gettext folders write it: ``pt-BR`` → ``pt_BR``."""
    return lang.replace("-", "_")


def babel_locale(lang: str) -> Locale | None:
    try:
        return Locale.parse(locale_name(lang))
    except (UnknownLocaleError, ValueError):
        return None


Direction = Literal["ltr", "rtl"]


@cache
def text_direction(lang: str) -> Direction:
    """``rtl`` for a language written right to left (Arabic, Hebrew, Persian, ...), from CLDR's
    character order; ``ltr`` otherwise, and where Babel does not know the language. The one
    place mails and pages learn their ``dir``: a browser or mail client shown Arabic without
    it lays the page out mirrored wrongly and reorders the punctuation."""
    locale = babel_locale(lang)
    return "rtl" if locale is not None and locale.character_order == "right-to-left" else "ltr"


# -- templates ---------------------------------------------------------------------------------


def template_roots(config: Config, templates: Path | None = None) -> tuple[Path, ...]:
    """The publisher's template folder (if any), then the built-in one (or ``templates``)."""
    builtin = templates.resolve() if templates else templates_dir()
    if config.site.templates is None:
        return (builtin,)
    return (config.path(config.site.templates).resolve(), builtin)


def template_loader(roots: tuple[Path, ...]) -> BaseLoader:
    """``email/digest.mjml`` from the first folder that has it: overrides go file by file."""
    return ChoiceLoader([FileSystemLoader(root) for root in roots])


def template_files(roots: tuple[Path, ...], part: str) -> dict[str, Path]:
    """Each template name of ``part`` (``email/base.mjml``) and the file that serves it."""
    found: dict[str, Path] = {}
    for root in reversed(roots):
        folder = root / PARTS[part]
        if folder.is_dir():
            for path in folder.rglob("*"):
                if path.is_file() and path.suffix in TEMPLATE_SUFFIXES:
                    found[path.relative_to(root).as_posix()] = path
    return dict(sorted(found.items()))


def shown(path: Path, roots: tuple[Path, ...]) -> str:
    """A template file as messages name it: ``templates/email/digest.mjml`` for a built-in one."""
    if path.is_relative_to(roots[-1]):
        return f"templates/{path.relative_to(roots[-1]).as_posix()}"
    return str(path)


@dataclass(frozen=True)
class Message:
    msgid: Msgid
    places: tuple[tuple[str, int], ...]
    """Where the templates use it: (``templates/web/index.html``, 5), ..."""
    comments: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.msgid[0] if isinstance(self.msgid, tuple) else self.msgid

    @property
    def where(self) -> str:
        """The first place it is used, as ``file:line``."""
        return "{}:{}".format(*self.places[0])


def _extract(path: Path, name: str) -> Iterator[tuple[str, int, Msgid, tuple[str, ...]]]:
    try:
        found = list(
            extract_from_file("jinja2", str(path), DEFAULT_KEYWORDS, ("Translators:",), _JINJA)
        )
    except Exception as exc:  # a template that does not parse cannot be measured
        raise RenderError(f"{name}: {exc}") from None
    for line, message, comments, _context in found:
        msgid = tuple(message[:2]) if isinstance(message, tuple) else message
        yield name, line, msgid, tuple(comments)  # type: ignore[misc]


def _stamp(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_mtime_ns, info.st_size


def template_messages(roots: tuple[Path, ...], part: str) -> tuple[Message, ...]:
    """Every message the templates of ``part`` use, in a stable order, with where; read
    again only when a template file is added, removed or changed."""
    files = tuple((path, _stamp(path)) for path in template_files(roots, part).values())
    return _messages(roots, files)


@lru_cache(maxsize=64)
def _messages(
    roots: tuple[Path, ...], files: tuple[tuple[Path, tuple[int, int]], ...]
) -> tuple[Message, ...]:
    places: dict[Msgid, list[tuple[str, int]]] = {}
    comments: dict[Msgid, tuple[str, ...]] = {}
    for path, _ in files:
        for name, line, msgid, notes in _extract(path, shown(path, roots)):
            places.setdefault(msgid, []).append((name, line))
            comments[msgid] = comments.get(msgid) or notes
    return tuple(Message(m, tuple(p), comments[m]) for m, p in places.items())


@lru_cache(maxsize=64)
def environment(roots: tuple[Path, ...], lang: str, translations: NullTranslations) -> Environment:
    """One Environment per template folders and interface language: gettext is installed per
    environment, and so is ``number``, which writes a number as CLDR does in ``lang``
    (``prose`` writes a text's links and Markdown emphasis as HTML);
    ``text_direction(code)`` gives templates the ``dir`` of any language they mark.
    Autoescape for HTML and MJML, none for text; an undefined variable fails the render."""
    env = Environment(
        loader=template_loader(roots),
        autoescape=select_autoescape(enabled_extensions=("mjml", "html", "xml"), default=False),
        undefined=StrictUndefined,
        extensions=["jinja2.ext.i18n"],
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.install_gettext_translations(translations, newstyle=True)  # type: ignore[attr-defined]
    env.filters["number"] = functools.partial(format_number, lang=lang)
    env.filters["prose"] = lambda text: Markup(prose_html(text))
    env.globals["text_direction"] = text_direction
    return env


def format_number(value: float, lang: str) -> str:
    """``1 234`` in French, ``1.234`` in German: digits grouped as CLDR writes them."""
    try:
        return format_decimal(value, locale=locale_name(lang))
    except (UnknownLocaleError, ValueError):
        return str(value)


_LAYOUT = re.compile(r"[ \t\r\n]+")


def one_line(text: object) -> str:
    """A macro's output as one line: the template's line breaks and indents collapse, the
    no-break spaces of the translation stay (French puts one before a colon)."""
    return _LAYOUT.sub(" ", str(text)).strip(" ")


def audience_phrase(label: str) -> str:
    """'For cost optimization teams' → 'for cost optimization teams' (labels begin with
    the preposition, so only its first letter changes, whatever the language)."""
    return label[:1].lower() + label[1:]


def long_date(value: date, lang: str) -> str:
    """``11 décembre 2025``: the date as CLDR writes it in ``lang`` (ISO where Babel cannot)."""
    try:
        return format_date(value, "long", locale=locale_name(lang))
    except (UnknownLocaleError, ValueError):
        return value.isoformat()


def language_name(config: Config, lang: str, ui_lang: str) -> str:
    """``lang``'s name as a sentence in ``ui_lang`` writes it, from CLDR (``français``,
    ``French``); the profile's name where Babel does not know the language."""
    locale = babel_locale(lang)
    name = locale.get_display_name(locale_name(ui_lang)) if locale is not None else None
    return name or config.languages[lang].name


# -- catalogs ----------------------------------------------------------------------------------


def catalog_files(config: Config, lang: str) -> tuple[Path, Path]:
    """The built-in and the publisher's catalog of ``lang``, whether they exist or not."""
    tail = Path(locale_name(lang), "LC_MESSAGES", f"{DOMAIN}.po")
    return LOCALES / tail, config.path(config.site.locales) / tail


@dataclass(frozen=True)
class CatalogFile:
    """One .po file, compiled: its usable translations and what it leaves to do."""

    translations: Translations
    translated: frozenset[str]
    fuzzy: frozenset[str]


@lru_cache(maxsize=64)
def _compile(path: Path, stamp: tuple[int, int]) -> CatalogFile:
    try:
        with path.open("rb") as source:
            catalog = read_po(source, abort_invalid=True)
    except PoFileError as exc:
        problem = str(exc).removesuffix(f" on {exc.lineno}")
        raise CatalogError(str(path), exc.lineno + 1, problem) from None  # Babel counts from 0
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CatalogError(str(path), None, f"cannot read the catalog: {exc}") from None
    translated, fuzzy = set(), set()
    for message in list(catalog):
        if not message.id:
            continue
        key = message.id[0] if isinstance(message.id, (tuple, list)) else message.id
        strings = message.string if isinstance(message.string, (tuple, list)) else [message.string]
        complete = len(strings) >= catalog.num_plurals if message.pluralizable else True
        if message.fuzzy and any(strings):
            fuzzy.add(key)
        if message.fuzzy or not complete or not all(strings):
            del catalog[message.id]  # gettext must not answer with an empty or doubtful string
        else:
            translated.add(key)
    compiled = io.BytesIO()
    write_mo(compiled, catalog)
    compiled.seek(0)
    return CatalogFile(
        Translations(compiled, domain=DOMAIN), frozenset(translated), frozenset(fuzzy)
    )


@dataclass(frozen=True)
class Language:
    """A language's catalogs merged: the publisher's translations over the package's."""

    lang: str
    files: tuple[Path, ...]
    """The catalog files that exist, built-in first."""
    translations: NullTranslations
    translated: frozenset[str]
    fuzzy: frozenset[str]


def language(config: Config, lang: str) -> Language:
    """``lang``'s catalogs as they are on disk now (compiled again only after a change)."""
    files = tuple(p for p in catalog_files(config, lang) if p.is_file())
    return _merge(lang, tuple((p, _stamp(p)) for p in files))


@lru_cache(maxsize=64)
def _merge(lang: str, files: tuple[tuple[Path, tuple[int, int]], ...]) -> Language:
    compiled = [_compile(path, stamp) for path, stamp in files]
    translations: NullTranslations = NullTranslations()
    if compiled:
        # A fresh object for the merge: the compiled files stay as they were, for other merges.
        translations = Translations(domain=DOMAIN)
        translations._catalog = dict(compiled[0].translations._catalog)
        translations.plural = compiled[0].translations.plural
        for extra in compiled[1:]:
            translations.merge(extra.translations)
    translated = frozenset().union(*(c.translated for c in compiled))
    fuzzy = frozenset().union(*(c.fuzzy for c in compiled)) - translated
    return Language(lang, tuple(p for p, _ in files), translations, translated, fuzzy)


def missing_messages(
    config: Config, lang: str, part: str, roots: tuple[Path, ...] | None = None
) -> list[Message]:
    """The messages of ``part`` that ``lang``'s catalogs leave untranslated (none for English)."""
    if lang == SOURCE_LANGUAGE:
        return []
    done = language(config, lang).translated
    return [
        m for m in template_messages(roots or template_roots(config), part) if m.key not in done
    ]


def interface_language(
    config: Config, lang: str, part: str, roots: tuple[Path, ...] | None = None
) -> str | None:
    """The language ``part`` speaks to a reader of ``lang``: ``lang`` when its catalogs are
    complete, else the fallback language (English where that is incomplete too); None when no
    fallback is configured."""
    if not missing_messages(config, lang, part, roots):
        return lang
    fallback = config.fallback_language
    if fallback is None:
        return None
    return fallback if not missing_messages(config, fallback, part, roots) else SOURCE_LANGUAGE


def web_language(config: Config, lang: str) -> str:
    """The web never refuses a page: without a fallback language it speaks English."""
    return interface_language(config, lang, "web") or SOURCE_LANGUAGE


# -- reports for `check` and `locale` ------------------------------------------------------------


@dataclass(frozen=True)
class Gap:
    """What one language lacks in one part of the interface."""

    lang: str
    part: str
    catalog: Path
    """The file to translate in: the publisher's catalog, if it has one, else the built-in."""
    exists: bool
    total: int
    missing: tuple[Message, ...]
    fuzzy: frozenset[str]


def gaps(config: Config, skip: frozenset[str] = frozenset()) -> Iterator[Gap]:
    """For each published language and part, what its catalogs leave untranslated."""
    roots = template_roots(config)
    for lang in config.site.languages:
        if lang == SOURCE_LANGUAGE or lang in skip:
            continue
        found = language(config, lang)
        builtin, own = catalog_files(config, lang)
        catalog = own if own.is_file() or not builtin.is_file() else builtin
        for part in PARTS:
            missing = tuple(missing_messages(config, lang, part, roots))
            total = len(template_messages(roots, part))
            yield Gap(lang, part, catalog, bool(found.files), total, missing, found.fuzzy)


def catalog_problems(config: Config) -> list[Diagnostic]:
    """One diagnostic per published language and part its catalogs leave incomplete."""
    problems = []
    if config.email.english_fallback and config.site.fallback_language is None:
        problems.append(
            Diagnostic(
                str(config.root / "config.toml"),
                None,
                Severity.WARNING,
                'email.english_fallback is deprecated: write site.fallback_language = "en"',
            )
        )
    broken = set()
    for lang in config.site.languages:
        try:
            language(config, lang)
        except CatalogError as exc:
            problems.append(Diagnostic(exc.file, exc.line, Severity.ERROR, exc.problem))
            broken.add(lang)
    fallback = config.fallback_language
    for gap in gaps(config, frozenset(broken)):
        if not gap.missing:
            continue
        if gap.part == "mail":
            severity = Severity.ERROR if fallback is None else Severity.WARNING
            consequence = (
                f"its digests are in {fallback} throughout"
                if fallback
                else "its digests are refused (site.fallback_language allows another language)"
            )
        else:
            severity = Severity.WARNING
            consequence = f"its pages are in {fallback or SOURCE_LANGUAGE} throughout"
        fuzzy = sum(m.key in gap.fuzzy for m in gap.missing)
        what = (
            f"catalog for '{gap.lang}' is incomplete"
            if gap.exists
            else f"no catalog for '{gap.lang}' (syndicate locale init {gap.lang} writes one)"
        )
        problems.append(
            Diagnostic(
                str(gap.catalog),
                None,
                severity,
                f"{what}: {len(gap.missing)} of {gap.total} {gap.part} messages untranslated"
                + (f" ({fuzzy} fuzzy)" if fuzzy else "")
                + f", first {gap.missing[0].key!r} ({gap.missing[0].where}); {consequence}"
                + "; syndicate locale check lists them",
            )
        )
    return problems


def template_catalog(config: Config, locale: Locale) -> Catalog:
    """Every message of the templates in use (mail and web), untranslated, with ``locale``'s
    plural rule from CLDR: what ``pybabel extract`` and ``pybabel init`` would write."""
    catalog = Catalog(
        locale=locale,
        header_comment=(
            f"# {locale.english_name} translations of {config.site.title}."
            "\n# Register: name here the one form of address used throughout (tu or vous, du or"
            " Sie, ...)."
        ),
        project="syndicate",
        version=version("syndicate"),
        copyright_holder=config.site.author,
        charset="utf-8",
        fuzzy=False,
    )
    roots = template_roots(config)
    for part in PARTS:
        for message in template_messages(roots, part):
            places = list(message.places)
            if message.msgid in catalog:
                catalog[message.msgid].locations.extend(places)
                continue
            catalog.add(
                message.msgid,
                ("",) * catalog.num_plurals if isinstance(message.msgid, tuple) else "",
                locations=places,
                auto_comments=message.comments,
                flags=("python-format",) if "%(" in "".join(message.msgid) else (),
            )
    return catalog


def write_catalog(catalog: Catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as target:
        write_po(target, catalog, width=100, sort_output=True)


def init_catalog(config: Config, lang: str) -> tuple[Path, Catalog]:
    """Write ``lang``'s catalog into the publisher's folder, every message untranslated, with
    the language's plural rule from CLDR. An existing file is never overwritten."""
    path = catalog_files(config, lang)[1]
    if path.exists():
        raise SyndicateError(f"{path} exists already; translate the entries it lacks there")
    locale = babel_locale(lang)
    if locale is None:
        raise SyndicateError(f"Babel knows no language {lang!r}: no plural rule to write")
    catalog = template_catalog(config, locale)
    write_catalog(catalog, path)
    return path, catalog
