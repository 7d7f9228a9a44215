"""feedgen 1.0.0, with its traps handled in one place: subclasses and extensions that
``feeds.py`` builds its documents with.

A module of its own, and kept pure Python: these classes extend feedgen's, which a compiled
module cannot do (``feeds.py`` is compiled at install, see ``hatch_build.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from feedgen.entry import FeedEntry
from feedgen.ext.base import BaseExtension
from feedgen.util import xml_elem

ATOM_NS = "http://www.w3.org/2005/Atom"
HISTORY_NS = "http://purl.org/syndication/history/1.0"
DC_NS = "http://purl.org/dc/elements/1.1/"


class FeedgenEntry(FeedEntry):
    """feedgen 1.0.0 drops every entry link attribute but href (python-feedgen#135), and
    writes no RSS author without an e-mail address: re-emit the links (the article's own
    first), add dc:creator."""

    def atom_entry(self, extensions: bool = True):
        entry = super().atom_entry(extensions)
        for old in entry.findall("link"):
            entry.remove(old)
        links = self.link() or []
        # The article's own URL was added last (for RSS); readers take Atom's first alternate.
        for link in links[-1:] + links[:-1]:
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
