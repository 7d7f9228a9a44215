"""A writer's plain text as HTML: escaped, with its links and Markdown emphasis made so. One
reading of a body's text and a takeaway's bullet, for the feeds, the site and the emails."""

from __future__ import annotations

import html
import re

# What a writer's plain text links with: a Markdown link, "[the survey](https://…)", or an
# address as it is (its closing punctuation left to the sentence).
_LINK = re.compile(
    r"\[([^\]\n]+)\]\((https?://[^\s()<>]+(?:\([^\s()<>]*\)[^\s()<>]*)*)\)"
    r"|(https?://[^\s<>\"]*[^\s<>\".,;:!?)\]'’”])"
)
# Markdown's emphasis, within a line of prose: "**strong**", "__strong__", "*em*", "_em_" (not
# the underscores inside a word, nor a star standing between spaces, as in "5 * 3").
_EMPHASIS = (
    (re.compile(r"\*\*(?=\S)([^*\n]+?)(?<=\S)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"__(?=\S)([^_\n]+?)(?<=\S)__"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*(?![\w*])"), r"<em>\1</em>"),
    (re.compile(r"(?<![\w_])_(?=[^\s_])([^_\n]+?)(?<=[^\s_])_(?![\w_])"), r"<em>\1</em>"),
)


def prose_html(text: str) -> str:
    """``text`` as HTML: escaped, its links and Markdown emphasis made so."""
    if "http" not in text and "*" not in text and "_" not in text:  # the common case
        return html.escape(text, quote=False)
    out, at = [], 0
    for link in _LINK.finditer(text) if "http" in text else ():
        url = html.escape(link[2] or link[3])
        words = _emphasised(link[1]) if link[1] else url
        out += [_emphasised(text[at : link.start()]), f'<a href="{url}">{words}</a>']
        at = link.end()
    out.append(_emphasised(text[at:]))
    return "".join(out)


def _emphasised(text: str) -> str:
    written = html.escape(text, quote=False)
    if "*" in written or "_" in written:
        for pattern, made in _EMPHASIS:
            written = pattern.sub(made, written)
    return written
