"""Render stage: a Digest → subject, HTML and plain text, once per variant.

Jinja2 renders the MJML and text templates (autoescape on for .mjml, StrictUndefined, gettext
from Babel catalogs); mjml-python turns the MJML into HTML. Per-reader links are left as
placeholders that ``RenderedDigest.personalise`` fills in without rendering again.
Reads templates and catalogs; writes nothing.
"""

from __future__ import annotations

import html
import re
import traceback
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from pathlib import Path
from typing import NamedTuple

from babel import UnknownLocaleError
from babel.dates import format_date
from babel.lists import format_list
from babel.messages.plurals import get_plural
from babel.support import NullTranslations, Translations
from jinja2 import (
    Environment,
    FileSystemLoader,
    StrictUndefined,
    TemplateError,
    TemplateSyntaxError,
    select_autoescape,
)
from mjml import mjml2html

from .config import Config
from .errors import RenderError
from .feeds import home_url
from .model import Diagnostic, Digest, Severity

SOURCE_LANGUAGE = "en"
"""The language of the templates' msgids: always complete, its catalog is optional."""
PLACEHOLDERS = ("unsubscribe_url", "preferences_url", "view_url")
"""Per-reader values, filled in after rendering."""
HTML_LIMIT = 90 * 1024
"""Gmail clips HTML bodies over about 102 KB, hiding the footer with the unsubscribe link."""
LOCALES = Path(__file__).with_name("locales")
DOMAIN = "messages"


def templates_dir() -> Path:
    """Installed wheels carry the templates inside the package; a checkout has them at its top."""
    packaged = Path(__file__).with_name("templates")
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "templates"


# ---------------------------------------------------------------------------------------------
# Catalogs: compiled .mo files beside the package; completeness is judged against the msgids
# the templates actually use, so a stale .pot cannot hide a missing translation.


@cache
def translations(lang: str) -> NullTranslations:
    return Translations.load(str(LOCALES), [lang], domain=DOMAIN)


@cache
def template_messages(templates: Path) -> tuple[str | tuple[str, str], ...]:
    """Every msgid (a pair for plurals) the email templates use, in a stable order."""
    from babel.messages.extract import extract_from_dir

    options = {"extensions": "jinja2.ext.i18n", "trim_blocks": "true", "lstrip_blocks": "true"}
    found: dict[str | tuple[str, str], None] = {}
    for _file, _line, message, _comments, _context in extract_from_dir(
        str(templates),
        method_map=[("email/**.mjml", "jinja2"), ("email/**.txt", "jinja2")],
        options_map={"email/**.mjml": options, "email/**.txt": options},
    ):
        found[tuple(message[:2]) if isinstance(message, tuple) else message] = None
    return tuple(found)


def missing_messages(lang: str, templates: Path | None = None) -> list[str]:
    """The template msgids ``lang``'s compiled catalog does not translate (all, if none)."""
    if lang == SOURCE_LANGUAGE:
        return []
    catalog: dict = getattr(translations(lang), "_catalog", {})
    try:
        plurals = get_plural(lang.replace("-", "_")).num_plurals
    except (UnknownLocaleError, ValueError):
        plurals = 2
    missing = []
    for message in template_messages(templates or templates_dir()):
        if isinstance(message, tuple):
            if not all(catalog.get((message[0], n)) for n in range(plurals)):
                missing.append(message[0])
        elif not catalog.get(message):
            missing.append(message)
    return missing


def catalog_problems(config: Config) -> list[Diagnostic]:
    """One diagnostic per published language whose catalog is incomplete (for ``check``)."""
    problems = []
    for lang in config.site.languages:
        missing = missing_messages(lang)
        if missing:
            severity = Severity.WARNING if config.email.english_fallback else Severity.ERROR
            consequence = (
                "digests in it use English for these"
                if config.email.english_fallback
                else "digests in it are refused (email.english_fallback = true allows English)"
            )
            problems.append(
                Diagnostic(
                    str(LOCALES / lang / "LC_MESSAGES" / f"{DOMAIN}.po"),
                    None,
                    severity,
                    f"catalog for '{lang}' is incomplete: {len(missing)} of "
                    f"{len(template_messages(templates_dir()))} email messages untranslated "
                    f"(first: {missing[0]!r}); {consequence}",
                )
            )
    return problems


# ---------------------------------------------------------------------------------------------


def _format_date(value: date, lang: str) -> str:
    try:
        return format_date(value, "long", locale=lang.replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        return value.isoformat()


@cache
def environment(templates: Path, ui_lang: str) -> Environment:
    """One Environment per template folder and interface language (translations are per env)."""
    env = Environment(
        loader=FileSystemLoader(templates),
        autoescape=select_autoescape(enabled_extensions=("mjml", "html", "xml"), default=False),
        undefined=StrictUndefined,
        extensions=["jinja2.ext.i18n"],
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.install_gettext_translations(translations(ui_lang), newstyle=True)  # type: ignore[attr-defined]
    return env


class Personalised(NamedTuple):
    html: str
    text: str


def _split(body: str, pattern: re.Pattern[str]) -> tuple[str, ...]:
    """Static text at even indexes, placeholder names at odd ones."""
    return tuple(pattern.split(body))


def _fill(parts: tuple[str, ...], values: dict[str, str]) -> str:
    return "".join(values[p] if i % 2 else p for i, p in enumerate(parts))


def check_url(name: str, url: str) -> str:
    if not url.startswith(("https://", "http://")) or not url.isprintable() or " " in url:
        raise ValueError(f"{name}: not an absolute http(s) URL without spaces: {url!r}")
    return url


@dataclass(frozen=True)
class RenderedDigest:
    """A digest variant ready to send: subject, HTML and text with per-reader placeholders."""

    key: str
    lang: str
    audiences: tuple[str, ...]
    subject: str
    html: str
    """HTML with placeholders; see ``personalise``."""
    text: str
    content_hash: str
    ui_lang: str
    """The language of the interface strings: ``lang``, or English as the allowed fallback."""
    marker: str = field(repr=False)
    """The placeholder pattern (unique per content, so article text cannot forge one)."""
    listed: int = 0
    """How many of the digest's items it lists: fewer than the digest's when the HTML would
    have passed ``HTML_LIMIT`` (``Digest.shortened(listed)`` is the digest it shows)."""
    html_parts: tuple[str, ...] = field(init=False, repr=False, compare=False)
    text_parts: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = re.compile(self.marker)
        object.__setattr__(self, "html_parts", _split(self.html, pattern))
        object.__setattr__(self, "text_parts", _split(self.text, pattern))

    def personalise(
        self, *, unsubscribe_url: str, preferences_url: str, view_url: str
    ) -> Personalised:
        """The reader's HTML and text: placeholders replaced, no template or MJML work."""
        urls = {
            "unsubscribe_url": check_url("unsubscribe_url", unsubscribe_url),
            "preferences_url": check_url("preferences_url", preferences_url),
            "view_url": check_url("view_url", view_url),
        }
        escaped = {k: html.escape(v) for k, v in urls.items()}
        return Personalised(_fill(self.html_parts, escaped), _fill(self.text_parts, urls))


def _phrase(label: str) -> str:
    """'For cost optimization teams' → 'for cost optimization teams' (labels begin with
    the preposition, so only its first letter changes, whatever the language)."""
    return label[:1].lower() + label[1:]


def digest_context(digest: Digest, config: Config, ui_lang: str) -> dict[str, object]:
    """The values both templates see: data only, no markup."""
    profile = config.languages[digest.lang]
    labels = [
        _phrase(profile.audiences.get(a, [a])[0]) if profile.audiences.get(a) else a
        for a in digest.audiences
    ]
    names = {
        a: profile.audience_names.get(a) or profile.audiences.get(a, [a])[0]
        for a in digest.audiences
    }
    try:
        for_audiences = format_list(labels, locale=ui_lang.replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        for_audiences = ", ".join(labels)
    return {
        "lang": digest.lang,
        "site_title": config.title(digest.lang),
        "site_url": config.site.base_url + "/",
        "language_name": profile.name,
        "every_audience": set(digest.audiences) >= set(config.audiences),
        "for_audiences": for_audiences,
        "count": len(digest.items),
        "since": _format_date(digest.since, digest.lang) if digest.since else None,
        "more": digest.more,
        "more_url": home_url(config, digest.lang),
        "items": [
            {
                "title": item.article.title,
                "url": config.article_url(digest.lang, item.article.slug),
                "date": _format_date(item.article.updated, digest.lang),
                "revised": item.revised,
                "sections": [
                    {"name": names[t.audience], "bullets": list(t.bullets)} for t in item.takeaways
                ],
            }
            for item in digest.items
        ],
    }


def _template_error(exc: Exception, templates: Path) -> RenderError:
    """Name the template file and line, from the exception or from Jinja's rewritten traceback."""
    if isinstance(exc, TemplateSyntaxError):
        return RenderError(f"templates/{exc.name or exc.filename}:{exc.lineno}: {exc.message}")
    root = str(templates.resolve())
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(root)]
    if frames:
        where = Path(frames[-1].filename).relative_to(root).as_posix()
        return RenderError(f"templates/{where}:{frames[-1].lineno}: {exc}")
    return RenderError(f"templates: {exc}")


_TAG = re.compile(r"<(/?)(mjml|mj-[a-z-]+)\b[^>]*?(/?)>")


def _unclosed(source: str) -> int | None:
    """Offset of the first MJML element that is never closed, if any."""
    stack: list[tuple[str, int]] = []
    for tag in _TAG.finditer(source):
        closing, name, empty = tag.groups()
        if empty:
            continue
        if not closing:
            stack.append((name, tag.start()))
        elif stack and stack[-1][0] == name:
            stack.pop()
        else:
            return stack[-1][1] if stack else tag.start()
    return stack[-1][1] if stack else None


def _error_line(source: str, message: str) -> int | None:
    """The line of the rendered MJML an error is on.

    mjml-python gives a byte offset for some errors, none for others: an unclosed element is
    found by balancing the tags, anything else by the shortest prefix that fails the same way.
    """
    found = re.search(r"position (\d+):(\d+)", message)
    if found:
        return source.encode().count(b"\n", 0, int(found[1])) + 1
    if "end of stream" in message:
        start = _unclosed(source)
        return None if start is None else source.count("\n", 0, start) + 1
    lines = source.split("\n")
    low, high = 1, len(lines)
    while low < high:
        middle = (low + high) // 2
        try:
            render_mjml("\n".join(lines[:middle]))
            failed = False
        except ValueError as exc:
            failed = str(exc) == message
        low, high = (low, middle) if failed else (middle + 1, high)
    return low


def _mjml_error(exc: ValueError, source: str, template: str, templates: Path) -> RenderError:
    """Name the template line that produced the failing MJML line, when it is unambiguous."""
    line_no = _error_line(source, str(exc))
    if line_no is None:
        return RenderError(f"templates/{template}: MJML: {exc}")
    line = source.split("\n")[line_no - 1].strip()
    places = [
        f"{path.relative_to(templates).as_posix()}:{number}"
        for path in sorted((templates / "email").glob("*.mjml"))
        for number, text in enumerate(path.read_text("utf-8").splitlines(), 1)
        if line and text.strip() == line
    ]
    if len(places) == 1:
        return RenderError(f"templates/{places[0]}: MJML: {exc}: {line[:80]!r}")
    return RenderError(
        f"templates/{template}: MJML: {exc}: line {line_no} of the rendered MJML: {line[:80]!r}"
    )


def _lines(body: str) -> str:
    """LF line ends and one final newline: what a MIME text part holds canonically."""
    return body.replace("\r\n", "\n").replace("\r", "\n").rstrip() + "\n"


def render_mjml(source: str) -> str:
    """The one call into mjml-python: no remote fonts, no comments."""
    return mjml2html(source, disable_comments=True, fonts={})


def render_digest(
    digest: Digest,
    config: Config,
    *,
    articles: object = None,
    templates: Path | None = None,
) -> RenderedDigest:
    """Render one variant. Raises RenderError naming template and line, or when the
    language's catalog is incomplete and English is not allowed instead.

    A digest whose HTML would pass ``HTML_LIMIT`` lists its newest items that fit and counts
    the others in its closing line ("and 14 more articles"): it is never refused for its size.
    ``articles`` is accepted for callers that pass the whole set; the digest holds what it needs.
    """
    templates = (templates or templates_dir()).resolve()
    missing = missing_messages(digest.lang, templates)
    ui_lang = digest.lang
    if missing:
        if not config.email.english_fallback:
            raise RenderError(
                f"cannot render '{digest.lang}' digests: its catalog lacks {len(missing)} "
                f"message(s), e.g. {missing[0]!r}; translate them in "
                f"locales/{digest.lang}/LC_MESSAGES/{DOMAIN}.po, or set "
                "email.english_fallback = true to use English"
            )
        ui_lang = SOURCE_LANGUAGE
    rendered = _render(digest, config, templates, ui_lang)
    if _fits(rendered):
        return rendered
    # The largest number of items that fits, by bisection: the size grows with each item.
    fits, over = 0, len(digest.items)
    while over - fits > 1:
        middle = (fits + over) // 2
        attempt = _render(digest.shortened(middle), config, templates, ui_lang)
        if _fits(attempt):
            fits, rendered = middle, attempt
        else:
            over = middle
    if fits == 0:
        rendered = _render(digest.shortened(0), config, templates, ui_lang)
        if not _fits(rendered):
            raise RenderError(
                f"digest {digest.key}: HTML is {len(rendered.html.encode()) // 1024} KB with no "
                f"article in it, over the {HTML_LIMIT // 1024} KB limit; shorten the templates"
            )
    return rendered


def _fits(rendered: RenderedDigest) -> bool:
    return len(rendered.html.encode()) <= HTML_LIMIT


def _render(digest: Digest, config: Config, templates: Path, ui_lang: str) -> RenderedDigest:
    env = environment(templates, ui_lang)
    nonce = digest.content_hash[:16]
    context = digest_context(digest, config, ui_lang)
    context.update({name: f"@@{name}.{nonce}@@" for name in PLACEHOLDERS})
    template = "email/digest.mjml"
    try:
        strings = env.get_template("email/strings.txt").make_module(context)
        for name in ("subject", "heading", "intro", "preheader", "why", "more_line"):
            context[name] = " ".join(str(getattr(strings, name)()).split())
        template = "email/digest.mjml"
        source = env.get_template(template).render(context)
        template = "email/digest.txt"
        text = env.get_template(template).render(context)
    except TemplateError as exc:
        raise _template_error(exc, templates) from None
    try:
        page = render_mjml(source)
    except ValueError as exc:
        raise _mjml_error(exc, source, "email/digest.mjml", templates) from None
    return RenderedDigest(
        key=digest.key,
        lang=digest.lang,
        audiences=digest.audiences,
        subject=str(context["subject"]),
        html=_lines(page),
        text=_lines(text),
        content_hash=digest.content_hash,
        ui_lang=ui_lang,
        marker=rf"@@({'|'.join(PLACEHOLDERS)})\.{nonce}@@",
        listed=len(digest.items),
    )
