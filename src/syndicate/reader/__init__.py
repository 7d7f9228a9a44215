"""Read stage: article files → ``Article`` values plus diagnostics.

``parse`` turns one file's bytes into an article (pure; the one compiled module), with
``dates`` for the date line; ``folder`` walks the article folder and reads its files, on every
core for a large set; ``index`` is the codec of the feed index's summary readings. A broken
file yields diagnostics and is skipped; it never stops the rest.
"""

from .folder import (
    PARALLEL_FROM,
    article_files,
    article_set,
    index_readers,
    read_articles,
    read_index,
    scan,
)
from .index import decode_reading, encode_reading, reader_revision, with_text
from .parse import ArticleProblem, Reading, parse_article

__all__ = [
    "PARALLEL_FROM",
    "ArticleProblem",
    "Reading",
    "article_files",
    "article_set",
    "decode_reading",
    "encode_reading",
    "index_readers",
    "parse_article",
    "read_articles",
    "read_index",
    "reader_revision",
    "scan",
    "with_text",
]
