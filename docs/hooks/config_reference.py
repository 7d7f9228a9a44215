"""The configuration reference, rendered from the model at build time.

``src/syndicate/config.py`` documents every option where it is declared: a docstring under each
attribute, one under each section's class. This MkDocs hook walks ``Config`` as
``tests/test_config_complete.py`` does and puts one table per section (key, type, default,
docstring) where ``docs/configuration.md`` has the marker, so the reference cannot drift from
the model. Docstrings are read from the source (the interpreter keeps none for attributes);
defaults and constraints from the model itself.
"""

from __future__ import annotations

import ast
import html
import inspect
import re
import typing
from collections.abc import Iterator
from datetime import time
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from syndicate import config as config_module

MARKER = "<!-- configuration reference -->"
PAGE = "configuration.md"

NOT_KEYS = {("Config", "root")}
"""Fields no file sets: load_config fills in the file's folder."""

NAMES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "true or false",
    "Path": "path",
    "time": "time of day",
    "HttpUrl": "http(s) URL",
    "TimeZone": "IANA time zone",
    "LangCode": "language code",
    "SecretStr": "secret string",
}
"""How the annotations of config.py read in the reference."""


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """MkDocs event: the reference goes where the configuration page has its marker."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{PAGE} has no {MARKER} for the configuration reference")
    return markdown.replace(MARKER, render())


def render() -> str:
    """Every section of the model, in the order of its declaration, as Markdown."""
    source = Source()
    return "\n".join(_sections(config_module.Config, "", [], source)).strip() + "\n"


class Source:
    """What only config.py's text says: each attribute's docstring and annotation as written."""

    def __init__(self) -> None:
        tree = ast.parse(inspect.getsource(config_module))
        self.docs: dict[tuple[str, str], str] = {}
        self.annotations: dict[tuple[str, str], ast.expr] = {}
        for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
            for node, after in zip(cls.body, [*cls.body[1:], None], strict=True):
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                self.annotations[cls.name, node.target.id] = node.annotation
                if (
                    isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                ):
                    self.docs[cls.name, node.target.id] = after.value.value


def _sections(
    model: type[BaseModel], header: str, intro: list[str], source: Source
) -> Iterator[str]:
    """One section (``header`` as config.toml writes it, ``[site]``): its heading, what it is,
    a table of its keys; then the sections of its own."""
    if header:
        yield f"### `{header}`\n"
        for text in dict.fromkeys(t for t in (_text(model.__doc__ or ""), *intro) if t):
            yield f"{text}\n"
    rows, nested = [], []
    for name, field in model.model_fields.items():
        if (model.__name__, name) in NOT_KEYS:
            continue
        doc = _text(source.docs.get((model.__name__, name), ""))
        inner, table = _tables(field.annotation)
        if inner is not None:
            path = f"{header.strip('[]')}.{name}" if header else name
            # A table of tables has a default worth saying when it is not empty.
            listed = isinstance(field.default, list | dict) and field.default
            default = f"Default: {_default(field)}." if listed else ""
            nested.append((inner, table.format(path), [doc, default]))
            continue
        kind = _type(source.annotations[model.__name__, name]) + _limits(field)
        rows.append(f"| `{name}` | {kind} | {_default(field)} | {doc} |")
    if rows:
        yield "| key | type | default | what it does |\n| --- | --- | --- | --- |"
        yield "\n".join(rows) + "\n"
    for inner, table, about in nested:
        yield from _sections(inner, table, about, source)


def _tables(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a field's tables hold, and their header for the field's path: ``[site]``,
    ``[[schedule.digests]]``, ``[languages.<code>]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "[{}]"
    args = typing.get_args(annotation)
    inner = args[-1] if args else None
    if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
        return None, ""
    origin = typing.get_origin(annotation)
    header = "[{}.<code>]" if origin is dict else "[[{}]]" if origin is list else ""
    return (inner, header) if header else (None, "")


def _type(node: ast.expr) -> str:
    """An annotation as a publisher reads it: ``list[LangCode]`` → list of language codes."""
    if isinstance(node, ast.Name):
        return NAMES.get(node.id, node.id)
    if isinstance(node, ast.Constant):
        return "unset" if node.value is None else f"`{node.value!r}`"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [_type(side) for side in (node.left, node.right)]
        return " or ".join(part for part in parts if part != "unset")
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        match node.value.id:
            case "list":
                return f"list of {_type(args[0])}s"
            case "dict":
                return f"table: {_type(args[0])} → {_type(args[1])}"
            case "Literal":
                return " or ".join(
                    f'`"{arg.value}"`' for arg in args if isinstance(arg, ast.Constant)
                )
    return f"`{ast.unparse(node)}`"


def _limits(field: FieldInfo) -> str:
    """The field's bounds (``Field(500, ge=1, le=100_000)``), as ``, 1 to 100,000``."""
    bound = {}
    for metadata in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if getattr(metadata, name, None) is not None:
                bound[name] = f"{getattr(metadata, name):,}"
    if "ge" in bound and "le" in bound:
        return f", {bound['ge']} to {bound['le']}"
    words = {"ge": "at least", "gt": "above", "le": "at most", "lt": "below"}
    return "".join(f", {words[name]} {value}" for name, value in bound.items())


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default is None:
        return "unset"
    return f"`{_toml(field.default)}`"


def _toml(value: Any) -> str:
    """A default as config.toml writes it."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return str(value)
    if isinstance(value, str | PurePath | time):
        return f'"{value}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, BaseModel):
        return _toml(value.model_dump(exclude_defaults=True))
    return repr(value)


CODE = re.compile(r"``?([^`]+)``?")


def _text(doc: str) -> str:
    """A docstring as one Markdown line: RST's ``code`` as `code`, the rest escaped, so that
    ``<issues>/<lang>`` shows as written and a ``|`` never ends a table cell."""
    flat = " ".join(inspect.cleandoc(doc).split())
    out, at = [], 0
    for code in CODE.finditer(flat):
        out.append(_escape(flat[at : code.start()]))
        out.append(f"`{code[1]}`")
        at = code.end()
    out.append(_escape(flat[at:]))
    return "".join(out)


def _escape(text: str) -> str:
    return html.escape(text, quote=False).replace("|", "\\|").replace("*", "\\*")
