"""Feed stage: articles + config + publication dates → the bytes of every feed document.

Atom (with RFC 5005 archives), RSS 2.0 and JSON Feed per language, the same three per language
and audience (each entry that audience's takeaways of one article), plus an OPML index. Pure:
no clock, no files, no database; ``build.build_feeds`` gathers the inputs and writes the
output. feedgen 1.0.0 is used only here, with its traps worked around in one place (see
``FeedgenEntry``, ``AtomExtras``, ``RssExtras``).

Ids: ``tag:<authority>,<date>:<lang>/<slug>`` (RFC 4151). The authority and date come from
``feeds.tag`` (default: the host of ``site.base_url`` and 2025-01-01), so an id depends only on
the article's language and slug: not on its file name, URL template, text or dates, and not on
the state database either (losing it would otherwise re-announce every article). Keep
``feeds.tag`` when the site moves, and ids stay. An audience feed's entries have ids of their
own (``<lang>/<audience>/<slug>``): a reader subscribed to both sees two different entries.
"""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, time
from email.utils import format_datetime
from functools import cache, lru_cache
from itertools import groupby
from typing import TypeVar
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from feedgen.entry import FeedEntry
from feedgen.ext.base import BaseExtension
from feedgen.feed import FeedGenerator
from feedgen.util import xml_elem
from lxml import etree

from .config import Config
from .i18n import audience_phrase, text_direction
from .model import Article, ArticleSet, Block, Takeaways
from .prose import prose_html
from .routes import article_url, feed_archive_name, feed_url, home_url

_T = TypeVar("_T")
GENERATOR = "syndicate"
ATOM_MIME = "application/atom+xml"
RSS_MIME = "application/rss+xml"
JSON_MIME = "application/feed+json"
ATOM_NS = "http://www.w3.org/2005/Atom"
HISTORY_NS = "http://purl.org/syndication/history/1.0"
DC_NS = "http://purl.org/dc/elements/1.1/"

# XML 1.0 forbids these code points outright; lxml refuses to serialise them.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_SPACES = re.compile(r"[ \t\n\r\f\v]+")  # ASCII white space; a no-break space stays
# feedgen formats RSS dates under setlocale(LC_ALL, "C"), which is process-global.
_RSS_LOCK = threading.Lock()


def _safe(text: str) -> str:
    """Text that any XML or JSON document can carry: forbidden characters dropped, and runs of
    white space made one space, so that re-spacing an article changes no byte of its feeds."""
    # The common case, at two C-speed scans (it runs on every text of every entry): all that
    # the subs change is unprintable; a no-break space is too, and comes out unchanged.
    if "  " not in text and text.isprintable():
        return text
    return _SPACES.sub(" ", _NOT_XML.sub("", text))


@dataclass(slots=True)
class Entry:
    """One article as every format shows it: computed once, serialised three times; never
    changed (not frozen: a frozen dataclass's ``__init__`` costs a call per field, and a large
    site makes one per article)."""

    id: str
    title: str
    url: str
    published: datetime
    updated: datetime
    summary: str
    content: str | None  # HTML; None in archive documents
    categories: tuple[tuple[str, str], ...]  # (term, label)
    translations: tuple[tuple[str, str], ...]  # (lang, url)


@dataclass(frozen=True, slots=True)
class Channel:
    """A feed as its documents name it: one per language, and one per language and audience."""

    lang: str
    id: str
    title: str
    subtitle: str
    names: Mapping[str, str]
    """The file of each format (``atom``, ``rss``, ``json``), below the feeds folder."""


@dataclass(frozen=True, slots=True)
class AudienceWords:
    """What an audience feed says in its language's words (the catalogs' and the config's)."""

    name: str
    """The audience's name, e.g. "Architects"."""
    heading: str
    """Over each entry's takeaways, e.g. "Key takeaways for architects"."""
    read: str
    """The link to the article, e.g. "Read the full article"."""


Gettext = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Page:
    """Where an Atom document sits in its RFC 5005 chain (URLs, or None at either end)."""

    self_url: str
    current: str | None = None  # set on archive documents only
    prev_archive: str | None = None
    next_archive: str | None = None
    translations: tuple[tuple[str, str], ...] = ()
    """(language, URL) of the same feed in the other languages."""


# ---------------------------------------------------------------------------------------------
# Names, ids and dates.


def tagging_entity(config: Config) -> str:
    """``authority,date`` of every tag URI this site mints."""
    return config.feeds.tag or _default_tagging_entity(config.site.base_url)


@cache
def _default_tagging_entity(base_url: str) -> str:
    return f"{urlsplit(base_url).hostname},2025-01-01"


def feed_id(config: Config, lang: str) -> str:
    return f"tag:{tagging_entity(config)}:feeds/{lang}"


def entry_id(config: Config, lang: str, slug: str) -> str:
    return f"tag:{tagging_entity(config)}:{lang}/{slug}"


def feed_names(lang: str, audience: str | None = None) -> dict[str, str]:
    """The files of a language's feed, or of its audience's: ``<lang>/<audience>.atom.xml``."""
    stem = f"{lang}/{audience}" if audience else lang
    return {"atom": f"{stem}.atom.xml", "rss": f"{stem}.rss.xml", "json": f"{stem}.json"}


def audience_entry_id(config: Config, lang: str, audience: str, slug: str) -> str:
    return f"tag:{tagging_entity(config)}:{lang}/{audience}/{slug}"


def language_channel(config: Config, lang: str) -> Channel:
    return Channel(
        lang,
        feed_id(config, lang),
        _safe(config.title(lang)),
        _safe(config.description(lang)),
        feed_names(lang),
    )


def audience_words(config: Config, lang: str, audience: str, gettext: Gettext) -> AudienceWords:
    """``audience``'s words in ``lang``: its name and label from the language's profile, the
    sentences from ``gettext`` (the language's catalogs), as the digests word them."""
    profile = config.languages[lang]
    labels = profile.audiences.get(audience)
    phrase = audience_phrase(labels[0]) if labels else audience
    return AudienceWords(
        name=profile.audience_names.get(audience) or (labels[0] if labels else audience),
        heading=gettext("Key takeaways %(audiences)s") % {"audiences": phrase},
        read=gettext("Read the full article"),
    )


def audience_channel(config: Config, lang: str, audience: str, words: AudienceWords) -> Channel:
    return Channel(
        lang,
        f"{feed_id(config, lang)}/{audience}",
        _safe(f"{config.title(lang)}: {words.heading}"),
        _safe(config.description(lang)),
        feed_names(lang, audience),
    )


def updated_at(config: Config, day: date) -> datetime:
    """An article's date line as an instant: the configured time of day in the site's zone."""
    return _instant(day, config.site.publish_time, config.site.timezone)


def due_articles(
    config: Config, found: ArticleSet, now: datetime | None
) -> tuple[ArticleSet, datetime | None]:
    """The articles whose date line has come (all without ``now``), and when the next one
    held back falls due: what every public path (feeds, pages, sitemap) shows. Each day is
    made an instant once: a set has far fewer days than articles."""
    if now is None:
        return found, None
    held = {day for day in {a.updated for a in found} if updated_at(config, day) > now}
    if not held:
        return found, None
    due = tuple(a for a in found if a.updated not in held)
    return ArticleSet(due, found.problems), updated_at(config, min(held))


@lru_cache(maxsize=8192)
def _instant(day: date, at: time, zone: str) -> datetime:
    """Made once per day: a set has far fewer days than articles (translations share one)."""
    return datetime.combine(day, at, tzinfo=ZoneInfo(zone))


def publication_candidates(articles: Iterable[Article], config: Config):
    """(lang, slug, instant) for the state database: an entry's first date, if it is new.
    Each day's instant made once, here: a large set has more days than ``_instant`` keeps."""
    days: dict[date, datetime] = {}
    return [
        (
            a.lang,
            a.slug,
            days.get(a.updated) or days.setdefault(a.updated, updated_at(config, a.updated)),
        )
        for a in articles
    ]


def paginate(
    newest_first: Sequence[_T], size: int, archive_size: int
) -> tuple[list[_T], list[list[_T]]]:
    """The subscription document's ``size`` articles, then archive pages of ``archive_size``,
    oldest page first.

    Pages are cut from the oldest end so that a new article changes only the newest archive
    page: every older archive document keeps its bytes (RFC 5005 wants them stable).
    """
    current, rest = newest_first[:size], list(reversed(newest_first[size:]))
    pages = [list(reversed(rest[i : i + archive_size])) for i in range(0, len(rest), archive_size)]
    return list(current), pages


# ---------------------------------------------------------------------------------------------
# Entries.


@lru_cache(maxsize=1024)
def _label(text: str) -> str:
    """``_safe`` for the few labels that every entry of a language repeats."""
    return _safe(text)


def _text(text: str) -> str:
    return html.escape(_safe(text), quote=False)


def _inline(parts: Sequence[str | int], article: Article, anchor: str, base: str) -> str:
    out = []
    for part in parts:
        if isinstance(part, int):
            mark = f"<sup>{part}</sup>"
            if article.reference(part) is not None:
                mark = f'<sup><a href="{base}#{anchor}-{part}">{part}</a></sup>'
            out.append(mark)
        else:
            out.append(_prose(part))
    return "".join(out)


def _prose(text: str) -> str:
    return prose_html(_safe(text))


_LISTS = {"item": "ul", "numbered": "ol"}  # a body list's items, by their kind
_TABLE_ROWS = {"head": "table", "row": "table"}  # a table's rows: one table together
_CELL_EDGE = re.compile(r"(?<!\\)\|")  # a pipe between cells, not a cell's own "\|"


def _cells(parts: Sequence[str | int]) -> list[list[str | int]]:
    """A table row's parts, cell by cell."""
    cells: list[list[str | int]] = [[]]
    for part in parts:
        if isinstance(part, int):
            cells[-1].append(part)
            continue
        for at, piece in enumerate(_CELL_EDGE.split(part)):
            if at:
                cells.append([])
            cells[-1].append(piece.replace("\\|", "|"))
    return cells


def _table(rows: Sequence[Block], inline: Callable[[Sequence[str | int]], str]) -> str:
    """A table's head and body rows as HTML, each cell's text and marks as a paragraph's."""
    out: dict[str, list[str]] = {"head": [], "row": []}
    for row in rows:
        tag = "th" if row.kind == "head" else "td"
        cells = "".join(f"<{tag}>{inline(cell).strip()}</{tag}>" for cell in _cells(row.parts))
        out[row.kind].append(f"<tr>{cells}</tr>")
    head = f"<thead>{''.join(out['head'])}</thead>" if out["head"] else ""
    body = f"<tbody>{''.join(out['row'])}</tbody>" if out["row"] else ""
    return f"<table>{head}{body}</table>"


def _body_html(blocks: Sequence[Block], inline: Callable[[Sequence[str | int]], str]) -> list[str]:
    """The body's blocks as HTML elements: the items of a kind next to each other one list,
    the quoted paragraphs one quotation, a table's rows one table."""
    out = []
    for kind, group in groupby(blocks, key=lambda block: _TABLE_ROWS.get(block.kind, block.kind)):
        if kind == "table":
            out.append(_table(list(group), inline))
            continue
        texts = [inline(block.parts) for block in group]
        if kind in _LISTS:
            items = "".join(f"<li>{text}</li>" for text in texts)
            out.append(f"<{_LISTS[kind]}>{items}</{_LISTS[kind]}>")
        elif kind == "quote":
            out.append("<blockquote>{}</blockquote>".format("".join(f"<p>{t}</p>" for t in texts)))
        elif kind == "standfirst":  # emphasis, as every feed reader shows it
            out += (f'<p class="standfirst"><em>{text}</em></p>' for text in texts)
        else:
            tag = "h2" if kind == "heading" else "p"
            out += (f"<{tag}>{text}</{tag}>" for text in texts)
    return out


def article_html(config: Config, article: Article, url: str = "") -> str:
    """The whole article as HTML: body, takeaways per audience, references; text escaped.

    Footnote marks link to the reference list at ``url`` (the article's page): a feed has no
    base URL its content is read against (RSS has no xml:base), so its links are absolute.
    Without ``url`` they are fragments, for the article's own page.
    """
    profile = config.languages[article.lang]
    anchor = _reference_anchor(article)
    base = html.escape(url)
    out = _body_html(article.blocks, lambda parts: _inline(parts, article, anchor, base))
    if article.takeaways:
        out.append(f"<h2>{_text(profile.takeaways[0])}</h2>")
        for t in article.takeaways:
            name = profile.audience_names.get(t.audience, t.label)
            items = "".join(f"<li>{_prose(b)}</li>" for b in t.bullets)
            out.append(f"<h3>{_text(name)}</h3><ul>{items}</ul>")
    if article.references:
        out.append(f"<h2>{_text(profile.references[0])}</h2><ol>")
        for ref in article.references:
            text = _text(ref.text)
            if ref.url:
                url = html.escape(_safe(ref.url))
                text += f' <a href="{url}">{url}</a>'
            out.append(f'<li id="{anchor}-{ref.number}" value="{ref.number}">{text}</li>')
        out.append("</ol>")
    body = "\n".join(out)
    if text_direction(article.lang) == "rtl":  # a feed reader lays an entry out by its own
        return f'<div dir="rtl">\n{body}\n</div>'
    return body


def standfirst_html(article: Article) -> str | None:
    """The subtitle's text as HTML, for a page that shows it under the title: its footnote
    marks link to the references below it, as in the body."""
    first = article.blocks[0] if article.blocks else None
    if first is None or first.kind != "standfirst":
        return None
    return _inline(first.parts, article, _reference_anchor(article), "")


def _reference_anchor(article: Article) -> str:
    """The stem of the ids of an article's references on its page (``<stem>-<number>``)."""
    return f"{article.lang}-{article.slug}-ref"


def make_entry(
    config: Config,
    article: Article,
    published: datetime,
    translations: Iterable[Article] = (),
    *,
    content: bool = True,
) -> Entry:
    """The feed values of one article; ``published`` comes from the state database."""
    site = config.site
    url = article_url(config, article.lang, article.slug)
    return Entry(
        id=entry_id(config, article.lang, article.slug),
        title=_safe(article.title),
        url=url,
        published=published.astimezone(ZoneInfo(site.timezone)),
        updated=_instant(article.updated, site.publish_time, site.timezone),
        summary=_safe(article.summary or article.seo.description or article.title),
        content=article_html(config, article, url) if content else None,
        categories=_categories(config.languages[article.lang].audience_names, article.takeaways),
        translations=tuple((t.lang, article_url(config, t.lang, t.slug)) for t in translations),
    )


_CATEGORIES: dict[tuple[int, tuple[tuple[str, str], ...]], tuple[tuple[str, str], ...]] = {}


def _categories(
    names: Mapping[str, str], takeaways: Sequence[Takeaways]
) -> tuple[tuple[str, str], ...]:
    """(term, label) of each audience an article has takeaways for: the articles of a
    language repeat the same few, so each set is made once (per names, by identity: a
    language's are one dict for the life of its config)."""
    labels = tuple((t.audience, t.label) for t in takeaways)
    key = (id(names), labels)
    found = _CATEGORIES.get(key)
    if found is None:
        if len(_CATEGORIES) > 4096:
            _CATEGORIES.clear()
        found = _CATEGORIES[key] = tuple((a, _label(names.get(a, label))) for a, label in labels)
    return found


def audience_entry(
    config: Config,
    article: Article,
    audience: str,
    words: AudienceWords,
    published: datetime,
    translations: Iterable[Article] = (),
) -> Entry:
    """One article in an audience feed: that audience's takeaways under its heading, and a
    link to the article; its own id, the article's title, dates and links."""
    entry = make_entry(config, article, published, translations, content=False)
    url = html.escape(entry.url)
    items = "".join(
        f"<li>{_text(b)}</li>"
        for t in article.takeaways
        if t.audience == audience
        for b in t.bullets
    )
    body = (
        f"<h2>{_text(words.heading)}</h2>\n<ul>{items}</ul>\n"
        f'<p><a href="{url}">{_text(words.read)}</a></p>'
    )
    if text_direction(article.lang) == "rtl":
        body = f'<div dir="rtl">\n{body}\n</div>'
    return replace(
        entry,
        id=audience_entry_id(config, article.lang, audience, article.slug),
        content=body,
        categories=((audience, _label(words.name)),),
    )


# ---------------------------------------------------------------------------------------------
# feedgen 1.0.0's traps, handled here.


class FeedgenEntry(FeedEntry):
    """feedgen 1.0.0 drops every entry link attribute but href (python-feedgen#135), and
    writes no RSS author without an e-mail address: re-emit the links, add dc:creator."""

    def atom_entry(self, extensions: bool = True):
        entry = super().atom_entry(extensions)
        for old in entry.findall("link"):
            entry.remove(old)
        for link in self.link() or []:
            xml_elem("link", entry, **{k: str(v) for k, v in link.items() if v})
        return entry

    def rss_entry(self, extensions: bool = True):
        item = super().rss_entry(extensions)
        if item.find("author") is None:
            for author in self.author() or []:
                xml_elem(f"{{{DC_NS}}}creator", item).text = author["name"]
        return item


class AtomExtras(BaseExtension):
    """RFC 5005: an archive document says so with ``<fh:archive/>``."""

    archive = False

    def extend_ns(self) -> dict[str, str]:
        return {"fh": HISTORY_NS} if self.archive else {}

    def extend_atom(self, feed):
        if self.archive:
            xml_elem(f"{{{HISTORY_NS}}}archive", feed)
        return feed


class RssExtras(BaseExtension):
    """RSS has no hub element: WebSub names it with an atom:link, as Atom does."""

    hubs: Sequence[str] = ()

    def extend_ns(self) -> dict[str, str]:
        return {"dc": DC_NS}

    def extend_rss(self, feed):
        for hub in self.hubs:
            xml_elem(f"{{{ATOM_NS}}}link", feed.find("channel"), rel="hub", href=hub)
        return feed


# ---------------------------------------------------------------------------------------------
# Documents.


def _generator(
    config: Config, channel: Channel, entries: Sequence[Entry], *, add_entries: bool = True
) -> FeedGenerator:
    lang = channel.lang
    fg = FeedGenerator()
    fg.register_extension("syndicate_atom", AtomExtras, atom=True, rss=False)
    fg.register_extension("syndicate_rss", RssExtras, atom=False, rss=True)
    fg.id(channel.id)
    fg.title(channel.title)
    fg.subtitle(channel.subtitle)
    fg.language(lang)
    fg.author(_author(config))
    fg.generator(GENERATOR)  # no version: an upgrade alone must not change the bytes
    # Never the build time (feedgen's default): the newest entry's date.
    fg.updated(max(e.updated for e in entries))
    seen: dict[str, str] = {}
    for entry in entries:
        seen.update(entry.categories)
    for term, label in sorted(seen.items(), key=lambda c: config.audiences.index(c[0])):
        fg.category(term=term, label=label)
    for e in entries if add_entries else ():
        fe = fg.add_entry(FeedgenEntry(), order="append")
        fe.id(e.id)
        fe.title(e.title)
        fe.published(e.published)
        fe.updated(e.updated)
        fe.author(_author(config))
        # The article's own page is its one alternate; translations are related links.
        # Readers pick an entry's link among its alternates, some the first (Miniflux,
        # SimplePie), some the last (feedparser, newsboat): with one, every reader opens the
        # entry's own language. feedgen makes that alternate the RSS <link> too.
        fe.link(href=e.url, rel="alternate", type="text/html", hreflang=lang)
        for lang_, url in e.translations:
            fe.link(href=url, rel="related", type="text/html", hreflang=lang_)
        for term, label in e.categories:
            fe.category(term=term, label=label)
        fe.summary(e.summary)
        if e.content is not None:
            fe.content(e.content, type="html")
    return fg


def _author(config: Config) -> dict[str, str]:
    author = {"name": _safe(config.site.author)}
    if config.site.author_email:
        author["email"] = config.site.author_email
    return author


def _feed_links(fg: FeedGenerator, config: Config, page: Page, mime: str) -> None:
    """Feed links in a deliberate order: the last one becomes the RSS channel <link>."""
    fg.link(href=page.self_url, rel="self", type=mime, replace=True)
    for hub in config.feeds.hub:
        fg.link(href=hub, rel="hub")
    for rel, href in (
        ("current", page.current),
        ("prev-archive", page.prev_archive),
        ("next-archive", page.next_archive),
    ):
        if href:
            fg.link(href=href, rel=rel, type=ATOM_MIME)
    for other, href in page.translations:
        fg.link(href=href, rel="alternate", type=mime, hreflang=other)
    lang = fg.language()
    fg.link(href=home_url(config, lang), rel="alternate", type="text/html", hreflang=lang)


def atom_document(
    config: Config,
    lang: str,
    entries: Sequence[Entry],
    page: Page,
    *,
    archive: bool = False,
    channel: Channel | None = None,
) -> bytes:
    """An Atom document of ``lang``'s feed, or of ``channel``: the bytes feedgen writes
    (``feedgen_document``). feedgen writes the feed's head; each entry is written here as the
    text lxml would serialise for the elements ``FeedgenEntry.atom_entry`` makes: building
    elements costs several times that, for every entry of a large site. Every value is
    escaped; the tests hold the bytes to feedgen's."""
    fg = _generator(config, channel or language_channel(config, lang), entries, add_entries=False)
    fg.syndicate_atom.archive = archive
    _feed_links(fg, config, page, ATOM_MIME)
    head = etree.tostring(
        etree.fromstring(fg.atom_str(), _PARSER),
        pretty_print=True,
        xml_declaration=True,
        encoding="UTF-8",
    )
    author = _author(config)
    who = f"      <name>{_xml_text(author['name'])}</name>\n"
    if author.get("email"):
        who += f"      <email>{_xml_text(author['email'])}</email>\n"
    closing = b"</feed>\n"
    assert head.endswith(closing)
    body = "".join([_atom_entry(e, lang, who) for e in entries]).encode()
    return head[: -len(closing)] + body + closing


def archive_document(config: Config, lang: str, entries: Sequence[Entry], page: Page) -> bytes:
    """An RFC 5005 archive document (entries with summary and links, no content)."""
    return atom_document(config, lang, entries, page, archive=True)


def _atom_entry(e: Entry, lang: str, who: str) -> str:
    """One entry as ``atom_document`` writes it; ``who`` is the author's elements."""
    summary = f"<summary>{_xml_text(e.summary)}</summary>" if e.summary else "<summary/>"
    updated = e.updated.isoformat()
    published = updated if _same_text(e.published, e.updated) else e.published.isoformat()
    content = ""
    if e.content:
        content = f'    <content type="html">{_xml_text(e.content)}</content>\n'
    elif e.content is not None:
        content = '    <content type="html"/>\n'
    return (
        f"  <entry>\n    <id>{_xml_text(e.id)}</id>\n"
        f"    <title>{_xml_text(e.title)}</title>\n"
        f"    <updated>{updated}</updated>\n"
        f"    <author>\n{who}    </author>\n"
        f"{content}"
        f"    {summary}\n"
        f"{''.join(map(_category_element, e.categories))}"
        f"    <published>{published}</published>\n"
        f"{_link_element('alternate', lang, e.url)}"
        f"{''.join(_link_element('related', *t) for t in e.translations)}"
        "  </entry>\n"
    )


def _same_text(a: datetime, b: datetime) -> bool:
    """Whether ``a`` and ``b`` print alike: an article first published as it is dated (most
    are) needs one of its two dates formatted, which costs more than the rest of its entry.
    Within one zone, == compares the fields and ignores ``fold``, which picks the offset."""
    return a.tzinfo is b.tzinfo and a.fold == b.fold and a == b


@lru_cache(maxsize=1024)
def _category_element(category: tuple[str, str]) -> str:
    """An archive entry's category; every entry of a language repeats the same few."""
    term, label = category
    named = f' label="{_xml_attr(label)}"' if label else ""
    return f'    <category term="{_xml_attr(term)}"{named}/>\n'


def _link_element(rel: str, lang: str, url: str) -> str:
    """An archive entry's link to its own page (``alternate``) or a translation (``related``),
    as ``_generator`` adds them."""
    return (
        f'    <link href="{_xml_attr(url)}" rel="{rel}" type="text/html"'
        f' hreflang="{_xml_attr(lang)}"/>\n'
    )


def _xml_text(text: str) -> str:
    """Escaped as lxml escapes element text."""
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")
    )


_ATTR_SPECIAL = re.compile('[&<>"\t\n\r]')
_ATTR_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&quot;",
        "\t": "&#9;",
        "\n": "&#10;",
        "\r": "&#13;",
    }
)


def _xml_attr(text: str) -> str:
    """Escaped as lxml escapes an attribute value in double quotes."""
    return text.translate(_ATTR_ESCAPES) if _ATTR_SPECIAL.search(text) else text


_PARSER = etree.XMLParser(remove_blank_text=True)


def rss_document(
    config: Config, lang: str, entries: Sequence[Entry], *, channel: Channel | None = None
) -> bytes:
    """The RSS 2.0 document of ``lang``'s feed, or of ``channel``: the bytes feedgen writes,
    the items written here as ``atom_document`` writes its entries."""
    channel = channel or language_channel(config, lang)
    fg = _generator(config, channel, entries, add_entries=False)
    fg.syndicate_rss.hubs = config.feeds.hub
    _feed_links(fg, config, Page(feed_url(config, channel.names["rss"])), RSS_MIME)
    with _RSS_LOCK:
        head = fg.rss_str(pretty=True)
    author = _author(config)
    if author.get("email"):  # RSS's author is an address; without one, dc:creator names them
        address = f"{author['email']} ({author['name']})"
        who = f"      <author>{_xml_text(address)}</author>\n"
        creator = ""
    else:
        who, creator = "", f"      <dc:creator>{_xml_text(author['name'])}</dc:creator>\n"
    closing = b"  </channel>\n</rss>\n"
    assert head.endswith(closing)
    body = "".join([_rss_item(e, who, creator) for e in entries]).encode()
    return head[: -len(closing)] + body + closing


def _rss_item(e: Entry, who: str, creator: str) -> str:
    """One item as ``rss_document`` writes it: feedgen's RSS for the entry's values."""
    if e.summary:
        text = f"      <description>{_xml_text(e.summary)}</description>\n"
        if e.content is not None:
            text += f"      <content:encoded>{_xml_text(e.content)}</content:encoded>\n"
    elif e.content is not None:
        text = f"      <description>{_xml_text(e.content)}</description>\n"
    else:
        text = ""
    categories = "".join(
        f"      <category>{_xml_text(label)}</category>\n"
        if label
        else "      <category></category>\n"
        for _, label in e.categories
    )
    return (
        f"    <item>\n      <title>{_xml_text(e.title)}</title>\n"
        f"      <link>{_xml_text(e.url)}</link>\n"
        f"{text}{who}"
        f'      <guid isPermaLink="false">{_xml_text(e.id)}</guid>\n'
        f"{categories}"
        f"      <pubDate>{format_datetime(e.published)}</pubDate>\n"
        f"{creator}"
        "    </item>\n"
    )


def feedgen_document(
    config: Config,
    lang: str,
    entries: Sequence[Entry],
    page: Page,
    *,
    kind: str = "atom",
    archive: bool = False,
    channel: Channel | None = None,
) -> bytes:
    """The document ``atom_document`` (``kind="atom"``) or ``rss_document`` (``"rss"``)
    writes, entry by entry through feedgen: what their bytes are held to."""
    channel = channel or language_channel(config, lang)
    fg = _generator(config, channel, entries)
    if kind == "atom":
        fg.syndicate_atom.archive = archive
        _feed_links(fg, config, page, ATOM_MIME)
        return fg.atom_str(pretty=True)
    fg.syndicate_rss.hubs = config.feeds.hub
    _feed_links(fg, config, Page(feed_url(config, channel.names["rss"])), RSS_MIME)
    with _RSS_LOCK:
        return fg.rss_str(pretty=True)


def json_document(
    config: Config, lang: str, entries: Sequence[Entry], *, channel: Channel | None = None
) -> bytes:
    """JSON Feed 1.1 of ``lang``'s feed, or of ``channel``; json.dumps escapes whatever the
    text holds."""
    channel = channel or language_channel(config, lang)
    author = {"name": _safe(config.site.author)}
    feed: dict = {
        "version": "https://jsonfeed.org/version/1.1",
        "title": channel.title,
        "home_page_url": home_url(config, lang),
        "feed_url": feed_url(config, channel.names["json"]),
        "description": channel.subtitle,
        "language": lang,
        "authors": [author],
    }
    if config.feeds.hub:
        feed["hubs"] = [{"type": "WebSub", "url": hub} for hub in config.feeds.hub]
    feed["items"] = [
        {
            "id": e.id,
            "url": e.url,
            "title": e.title,
            "summary": e.summary,
            "content_html": e.content or f"<p>{_text(e.summary)}</p>",
            "date_published": e.published.isoformat(),
            "date_modified": e.updated.isoformat(),
            "authors": [author],
            "tags": [label for _, label in e.categories],
            "language": lang,
        }
        for e in entries
    ]
    return json.dumps(feed, ensure_ascii=False, indent=2).encode() + b"\n"


def opml_document(
    config: Config,
    langs: Sequence[str],
    audiences: Mapping[str, Sequence[tuple[str, AudienceWords]]] | None = None,
) -> bytes:
    """OPML 2.0 subscription list: every feed of every language, each language's followed by
    its audiences' (``audiences``: per language, each audience with its words)."""
    root = etree.Element("opml", version="2.0")
    head = etree.SubElement(root, "head")
    etree.SubElement(head, "title").text = _safe(config.site.title)
    body = etree.SubElement(root, "body")
    kinds = {"atom": "Atom", "rss": "RSS", "json": "JSON Feed"}
    for lang in langs:
        channels = [(config.title(lang), feed_names(lang))]
        for audience, words in (audiences or {}).get(lang, ()):
            channels.append((f"{config.title(lang)}: {words.name}", feed_names(lang, audience)))
        for title, names in channels:
            for kind, name in names.items():
                text = _safe(f"{title} ({kinds[kind]}, {lang})")
                etree.SubElement(
                    body,
                    "outline",
                    type="rss",
                    text=text,
                    title=text,
                    xmlUrl=feed_url(config, name),
                    htmlUrl=home_url(config, lang),  # the page of the feed's language
                    language=lang,
                )
    return etree.tostring(root, pretty_print=True, xml_declaration=True, encoding="UTF-8")


def feed_languages(config: Config, articles: ArticleSet) -> list[str]:
    """The configured languages that have articles, in the configured order."""
    present = {a.lang for a in articles}
    return [lang for lang in config.site.languages if lang in present]


def feed_audiences(config: Config, articles: Iterable[Article]) -> list[str]:
    """The configured audiences that ``articles`` (one language's) have takeaways for, in the
    configured order: each has a feed."""
    present = {t.audience for a in articles for t in a.takeaways}
    return [audience for audience in config.audiences if audience in present]


def _with_audience(newest_first: Sequence[Article], audience: str, size: int) -> list[Article]:
    """The newest ``size`` articles with takeaways for ``audience``."""
    found: list[Article] = []
    for article in newest_first:
        if len(found) == size:
            break
        if any(t.audience == audience for t in article.takeaways):
            found.append(article)
    return found


def hub_topics(config: Config, names: Iterable[str]) -> list[str]:
    """The self URLs of the subscription documents among the file ``names`` (archives and the
    OPML list aside): what a WebSub hub is told changed."""
    subscribed = {"atom.xml", "rss.xml", "json"}
    return [
        feed_url(config, name)
        for name in names
        if not name.startswith("archive/") and name.partition(".")[2] in subscribed
    ]


@dataclass(frozen=True, slots=True)
class Plan:
    """Which articles each of one language's documents shows, newest first: the subscription
    feed's, each archive page's (oldest page first) and each audience feed's. A rebuild that
    moves no article renders only the documents of the articles it changed: from a plan with
    the other documents left out (``None``)."""

    lang: str
    current: Sequence[Article] | None
    pages: Sequence[Sequence[Article] | None]
    audiences: Sequence[tuple[str, Sequence[Article] | None]]

    def with_text(self, articles: ArticleSet) -> Plan:
        """The same plan with the subscription documents' articles as ``articles`` has them
        (read again with their text)."""

        def swap(chosen: Sequence[Article] | None) -> Sequence[Article] | None:
            return None if chosen is None else [articles.get(*a.key) or a for a in chosen]

        return replace(
            self, current=swap(self.current), audiences=[(a, swap(c)) for a, c in self.audiences]
        )


def language_plan(config: Config, articles: ArticleSet, lang: str) -> Plan:
    """The documents of ``lang`` and the articles each shows."""
    chosen = articles.in_language(lang)
    size = config.feeds.max_entries
    current, pages = paginate(chosen, size, config.feeds.archive_entries)
    audiences = [(a, _with_audience(chosen, a, size)) for a in feed_audiences(config, chosen)]
    return Plan(lang, current, pages, audiences)


def render_feeds(
    config: Config,
    articles: ArticleSet,
    published: Mapping[tuple[str, str], datetime],
    gettext: Mapping[str, Gettext] | None = None,
    plans: Sequence[Plan] | None = None,
    *,
    opml: bool = True,
) -> Iterator[tuple[str, bytes]]:
    """Every output document: file name (relative to the feeds folder) and bytes, made one
    language at a time, so that a caller writing each as it comes never holds more than one
    language's documents.

    ``published`` holds each article's first publication time (from the state database);
    ``gettext`` each language's catalog lookup, for the audience feeds' words (default: the
    English source text). With ``plans`` (one per language that has articles, in the
    configured order), only the documents they name are made, from ``articles``, which holds
    their articles and those articles' translations. ``opml``: the OPML list too.
    """
    if plans is None:
        plans = [language_plan(config, articles, lang) for lang in feed_languages(config, articles)]
    langs = [plan.lang for plan in plans]
    audiences = {}
    for plan in plans:
        words = (gettext or {}).get(plan.lang, str)
        audiences[plan.lang] = [
            (a, audience_words(config, plan.lang, a, words)) for a, _ in plan.audiences
        ]
        yield from plan_documents(config, articles, published, plan, langs)
        for (audience, chosen), (_, said) in zip(plan.audiences, audiences[plan.lang], strict=True):
            if chosen is not None:
                yield from audience_documents(config, articles, published, chosen, audience, said)
    if opml and langs:
        yield "index.opml", opml_document(config, langs, audiences)


def audience_documents(
    config: Config,
    articles: ArticleSet,
    published: Mapping[tuple[str, str], datetime],
    chosen: Sequence[Article],
    audience: str,
    words: AudienceWords,
) -> Iterator[tuple[str, bytes]]:
    """The feed of ``audience`` in one language: the ``chosen`` articles (the newest
    ``feeds.max_entries`` with takeaways for it), each entry those takeaways and a link to
    the article (no archives: the article's entry in the language's feed and archives keeps
    the rest)."""
    lang = chosen[0].lang
    entries = [
        audience_entry(config, a, audience, words, published[a.key], articles.translations(a))
        for a in chosen
    ]
    channel = audience_channel(config, lang, audience, words)
    page = Page(feed_url(config, channel.names["atom"]))
    yield channel.names["atom"], atom_document(config, lang, entries, page, channel=channel)
    yield channel.names["rss"], rss_document(config, lang, entries, channel=channel)
    yield channel.names["json"], json_document(config, lang, entries, channel=channel)


def plan_documents(
    config: Config,
    articles: ArticleSet,
    published: Mapping[tuple[str, str], datetime],
    plan: Plan,
    langs: Sequence[str],
) -> Iterator[tuple[str, bytes]]:
    """One language's subscription and archive documents, those ``plan`` names; ``langs``
    are ``feed_languages``, whose feeds link to each other. Subscription documents carry the
    newest ``feeds.max_entries`` articles with full content; older ones go to Atom archive
    documents with their summary and link, so only the newest articles need their bodies
    read."""
    lang, pages = plan.lang, plan.pages
    names = feed_names(lang)
    archive_urls = [feed_url(config, feed_archive_name(lang, n)) for n in range(1, len(pages) + 1)]
    atom_url = feed_url(config, names["atom"])
    if plan.current is not None:
        entries = [
            make_entry(config, a, published[a.key], articles.translations(a)) for a in plan.current
        ]
        translations = tuple(
            (o, feed_url(config, feed_names(o)["atom"])) for o in langs if o != lang
        )
        page = Page(
            atom_url,
            prev_archive=archive_urls[-1] if archive_urls else None,
            translations=translations,
        )
        yield names["atom"], atom_document(config, lang, entries, page)
        yield names["rss"], rss_document(config, lang, entries)
        yield names["json"], json_document(config, lang, entries)
    for number, members in enumerate(pages, 1):
        if members is None:
            continue
        older = [
            make_entry(config, a, published[a.key], articles.translations(a), content=False)
            for a in members
        ]
        where = Page(
            archive_urls[number - 1],
            current=atom_url,
            prev_archive=archive_urls[number - 2] if number > 1 else None,
            next_archive=archive_urls[number] if number < len(pages) else None,
        )
        yield feed_archive_name(lang, number), archive_document(config, lang, older, where)
