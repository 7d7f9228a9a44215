"""Render stage: a Digest → subject, HTML and plain text, once per variant.

Jinja2 renders the MJML and text templates (the publisher's before the built-in ones, gettext
from the catalogs, in the language ``i18n.interface_language`` picks); mjml-python turns the
MJML into HTML. Per-reader links are left as
placeholders that ``RenderedDigest.personalise`` fills in without rendering again.
``render_note`` renders the short plain-text mails the web side sends one reader.
Reads templates and catalogs; writes nothing.
"""

from __future__ import annotations

import html
import re
import traceback
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal, NamedTuple

from babel import UnknownLocaleError
from babel.lists import format_list
from jinja2 import TemplateError, TemplateSyntaxError
from mjml import mjml2html

from .config import Config
from .errors import RenderError
from .i18n import (
    SOURCE_LANGUAGE,
    audience_phrase,
    catalog_files,
    environment,
    interface_language,
    language,
    language_name,
    locale_name,
    long_date,
    missing_messages,
    one_line,
    shown,
    template_files,
    template_roots,
    text_direction,
)
from .model import Digest
from .routes import article_url, home_url, site_url

PLACEHOLDERS = ("unsubscribe_url", "preferences_url", "view_url")
"""Per-reader values, filled in after rendering."""
HTML_LIMIT = 90 * 1024
"""Gmail clips HTML bodies over about 102 KB, hiding the footer with the unsubscribe link."""


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
    """The language of the whole interface: ``lang``, or the fallback language when ``lang``'s
    catalog is incomplete (the articles' own words stay in ``lang``)."""
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


def digest_context(digest: Digest, config: Config, ui_lang: str) -> dict[str, object]:
    """The values both templates see: data only, no markup.

    Everything that is not the articles' own text is in ``ui_lang``: audience labels and
    names, dates, the language's name. A fallback interface is whole, never mixed. ``dir``
    and ``article_dir`` are each one's writing direction (``rtl`` for Arabic, Hebrew, ...).
    """
    profile = config.languages[ui_lang]
    labels = [
        audience_phrase(profile.audiences[a][0]) if profile.audiences.get(a) else a
        for a in digest.audiences
    ]
    names = {
        a: profile.audience_names.get(a) or profile.audiences.get(a, [a])[0]
        for a in digest.audiences
    }
    try:
        for_audiences = format_list(labels, locale=locale_name(ui_lang))
    except (UnknownLocaleError, ValueError):
        for_audiences = ", ".join(labels)
    return {
        "lang": ui_lang,
        "dir": text_direction(ui_lang),
        "article_lang": digest.lang,
        "article_dir": text_direction(digest.lang),
        "site_title": config.title(ui_lang),
        "site_url": site_url(config),
        "language_name": language_name(config, digest.lang, ui_lang),
        "every_audience": set(digest.audiences) >= set(config.audiences),
        "for_audiences": for_audiences,
        "count": len(digest.items),
        "total": len(digest.items) + digest.more,
        "broadcast": digest.broadcast,
        "since": long_date(digest.since, ui_lang) if digest.since else None,
        "more": digest.more,
        "more_url": home_url(config, digest.lang),
        "items": [
            {
                "title": item.article.title,
                "url": article_url(config, digest.lang, item.article.slug),
                "date": long_date(item.article.updated, ui_lang),
                "revised": item.revised,
                "sections": [
                    {"name": names[t.audience], "bullets": list(t.bullets)} for t in item.takeaways
                ],
            }
            for item in digest.items
        ],
    }


def template_error(exc: Exception, roots: tuple[Path, ...]) -> RenderError:
    """Name the template file and line, from the exception or from Jinja's rewritten traceback."""
    if isinstance(exc, TemplateSyntaxError):
        where = Path(exc.filename) if exc.filename else Path(roots[-1], exc.name or "?")
        return RenderError(f"{shown(where, roots)}:{exc.lineno}: {exc.message}")
    folders = tuple(str(root) for root in roots)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(folders)]
    if frames:
        return RenderError(f"{shown(Path(frames[-1].filename), roots)}:{frames[-1].lineno}: {exc}")
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


def _mjml_error(
    exc: ValueError, source: str, template: str, roots: tuple[Path, ...]
) -> RenderError:
    """Name the template line that produced the failing MJML line, when it is unambiguous."""
    line_no = _error_line(source, str(exc))
    if line_no is None:
        return RenderError(f"templates/{template}: MJML: {exc}")
    line = source.split("\n")[line_no - 1].strip()
    places = [
        f"{shown(path, roots)}:{number}"
        for name, path in template_files(roots, "mail").items()
        if name.endswith(".mjml")
        for number, text in enumerate(path.read_text("utf-8").splitlines(), 1)
        if line and text.strip() == line
    ]
    if len(places) == 1:
        return RenderError(f"{places[0]}: MJML: {exc}: {line[:80]!r}")
    return RenderError(
        f"templates/{template}: MJML: {exc}: line {line_no} of the rendered MJML: {line[:80]!r}"
    )


def _lines(body: str) -> str:
    """LF line ends and one final newline: what a MIME text part holds canonically."""
    return body.replace("\r\n", "\n").replace("\r", "\n").rstrip() + "\n"


def render_mjml(source: str) -> str:
    """The one call into mjml-python: no remote fonts, no comments."""
    return mjml2html(source, disable_comments=True, fonts={})


WELCOME = ("email/welcome.mjml", "email/welcome.txt")
"""A reader's welcome mail: the digest's templates with a greeting of its own."""


def render_welcome(digest: Digest, config: Config, issued: date | None) -> RenderedDigest:
    """The welcome mail of a reader who just confirmed, listing ``digest`` (their group's
    latest issue, made on ``issued``, or with None the newest takeaways), in their language
    or the fallback one. Raises RenderError as ``render_digest`` does."""
    roots = template_roots(config)
    ui_lang = interface_language(config, digest.lang, "mail", roots) or SOURCE_LANGUAGE
    extra = {"issued": long_date(issued, ui_lang) if issued else None}
    return _render(digest, config, roots, ui_lang, WELCOME, extra)


def render_digest(
    digest: Digest,
    config: Config,
    *,
    templates: Path | None = None,
) -> RenderedDigest:
    """Render one variant. Raises RenderError naming template and line, or when the
    language's catalog is incomplete and no fallback language is configured.

    ``templates`` replaces the built-in template folder (site.templates still comes first).
    A digest whose HTML would pass ``HTML_LIMIT`` lists its newest items that fit and counts
    the others in its closing line ("and 14 more articles"): it is never refused for its size.
    """
    roots = template_roots(config, templates)
    ui_lang = interface_language(config, digest.lang, "mail", roots)
    if ui_lang is None:
        missing = missing_messages(config, digest.lang, "mail", roots)
        raise RenderError(
            f"cannot render '{digest.lang}' digests: its catalog lacks {len(missing)} mail "
            f"message(s), e.g. {missing[0].key!r} ({missing[0].where}); translate them in "
            f"{catalog_files(config, digest.lang)[1]} (syndicate locale check lists them), "
            "or set site.fallback_language"
        )
    rendered = _render(digest, config, roots, ui_lang)
    if _fits(rendered):
        return rendered
    # The largest number of items that fits, by bisection: the size grows with each item.
    fits, over = 0, len(digest.items)
    while over - fits > 1:
        middle = (fits + over) // 2
        attempt = _render(digest.shortened(middle), config, roots, ui_lang)
        if _fits(attempt):
            fits, rendered = middle, attempt
        else:
            over = middle
    if fits == 0:
        rendered = _render(digest.shortened(0), config, roots, ui_lang)
        if not _fits(rendered):
            raise RenderError(
                f"digest {digest.key}: HTML is {len(rendered.html.encode()) // 1024} KB with no "
                f"article in it, over the {HTML_LIMIT // 1024} KB limit; shorten the templates"
            )
    return rendered


URL_ROOM = 256
"""Bytes counted for each reader link in the HTML: the size that must fit is the reader's,
whose links are longer than their placeholders."""


def _fits(rendered: RenderedDigest) -> bool:
    filled = _fill(rendered.html_parts, dict.fromkeys(PLACEHOLDERS, "x" * URL_ROOM))
    return len(filled.encode()) <= HTML_LIMIT


DIGEST = ("email/digest.mjml", "email/digest.txt")
STRINGS = ("subject", "heading", "intro", "preheader", "why", "more_line")
"""The sentences of ``email/strings.txt`` every digest uses; a welcome mail has its own
``welcome_subject``, ``welcome_heading`` and ``welcome_intro`` in their place, and
``welcome_what``."""


def _render(
    digest: Digest,
    config: Config,
    roots: tuple[Path, ...],
    ui_lang: str,
    templates: tuple[str, str] = DIGEST,
    extra: dict[str, Any] | None = None,
) -> RenderedDigest:
    env = environment(roots, ui_lang, language(config, ui_lang).translations)
    nonce = digest.content_hash[:16]
    context = digest_context(digest, config, ui_lang) | (extra or {})
    context.update({name: f"@@{name}.{nonce}@@" for name in PLACEHOLDERS})
    macros = {name: name for name in STRINGS}
    if templates == WELCOME:
        macros |= {name: f"welcome_{name}" for name in ("subject", "heading", "intro", "what")}
    template = "email/strings.txt"
    try:
        strings = env.get_template(template).make_module(context)
        for name, macro in macros.items():
            context[name] = one_line(getattr(strings, macro)())
        template = templates[0]
        source = env.get_template(template).render(context)
        template = templates[1]
        text = env.get_template(template).render(context)
    except TemplateError as exc:
        raise template_error(exc, roots) from None
    try:
        page = render_mjml(source)
    except ValueError as exc:
        raise _mjml_error(exc, source, templates[0], roots) from None
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


@dataclass(frozen=True)
class RenderedNote:
    """A short plain-text mail to one reader: its subject and text, in ``ui_lang``."""

    subject: str
    text: str
    ui_lang: str


NOTES = {"confirm": "email/confirm.txt", "subscribed": "email/subscribed.txt"}
"""The double opt-in mail, and the note to an address that is already subscribed."""


def render_note(
    config: Config, lang: str, kind: Literal["confirm", "subscribed"], *, link: str, days: int
) -> RenderedNote:
    """One of ``NOTES`` in the reader's language when its mail catalog is complete, else in
    the fallback language (English without one: a reader is never left without the mail)."""
    ui_lang = interface_language(config, lang, "mail") or SOURCE_LANGUAGE
    env = environment(template_roots(config), ui_lang, language(config, ui_lang).translations)
    template = env.get_template(NOTES[kind])
    values = {"site_title": config.title(ui_lang), "link": link, "days": days}
    module: Any = template.make_module(values)  # its macros are the template's own
    subject = one_line(module.subject())
    return RenderedNote(subject, template.render(values).rstrip() + "\n", ui_lang)
