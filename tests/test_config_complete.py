"""The model is the one source of the options: config.toml names every key of it in its section,
each option has a docstring, and a key commented out there shows the model's own default."""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from syndicate import config as config_module
from syndicate.config import Config, load_config
from tests.conftest import ROOT

SHIPPED = ROOT / "config.toml"

NOT_KEYS = {("", "root")}
"""Fields of the model that no file sets: load_config fills in the file's folder."""

EXAMPLES = re.compile(r"languages\.")
"""Sections whose keys show examples, not defaults: a language block's values come from the
built-in profiles (or, for a new language, from its author), never from the model."""


@dataclass(frozen=True)
class Option:
    """One key of the model: its section as config.toml spells it, a ``*`` standing for any
    one name (``languages.*`` for ``[languages.de]``)."""

    section: str
    name: str
    owner: type[BaseModel]
    field: FieldInfo

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name

    def matches(self, section: str) -> bool:
        return _matches(self.section, section)

    def validate(self, value: Any) -> Any:
        """``value`` as the model reads it, by the field's type and constraints (its
        ``field_validator`` methods aside)."""
        annotation, metadata = self.field.annotation, self.field.metadata
        typed: Any = Annotated[annotation, *metadata] if metadata else annotation
        return TypeAdapter(typed).validate_python(value)


@dataclass(frozen=True)
class Named:
    """A key line of config.toml, commented out or not."""

    line: int
    section: str
    key: str
    value: Any
    commented: bool


def _matches(pattern: str, section: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace(r"\*", r"[^.]+"), section) is not None


def _tables(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a field's tables hold, and the part a section name adds for it: ``[site]``,
    ``[[schedule.digests]]`` (nothing), ``[languages.<code>]`` (``.*``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    args = typing.get_args(annotation)
    inner = args[-1] if args else None
    if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
        return None, ""
    origin = typing.get_origin(annotation)
    return (inner, ".*") if origin is dict else (inner, "") if origin is list else (None, "")


def _free_table(annotation: Any) -> bool:
    """A field that is a table of names of the publisher's choosing (``[site.description]``,
    ``[languages.de.audiences]``) rather than a section of the model."""
    return (
        any(typing.get_origin(a) is dict for a in (annotation, *typing.get_args(annotation)))
        and _tables(annotation)[0] is None
    )


def options(model: type[BaseModel] = Config, section: str = "") -> Iterator[Option]:
    for name, field in model.model_fields.items():
        if (section, name) in NOT_KEYS:
            continue
        option = Option(section, name, model, field)
        yield option
        inner, part = _tables(field.annotation)
        if inner is not None:
            yield from options(inner, option.key + part)


HEADER = re.compile(r"^(?:#\s*)?\[\[?\s*([\w.-]+)\s*\]\]?\s*$")
KEY = re.compile(r"^(#\s*)?([A-Za-z_][\w-]*)\s*=\s*(.+)$")


def named_keys(text: str) -> tuple[list[str], list[Named]]:
    """Every table header and every key line of a config file, commented out or not. A
    commented line that does not parse as a TOML value is prose."""
    section, headers, keys = "", [], []
    for number, line in enumerate(text.splitlines(), 1):
        if header := HEADER.match(line):
            section = header[1]
            headers.append(section)
        elif key := KEY.match(line):
            try:
                value = tomllib.loads(f"v = {key[3]}")["v"]
            except tomllib.TOMLDecodeError:
                if key[1]:
                    continue
                raise
            keys.append(Named(number, section, key[2], value, bool(key[1])))
    return headers, keys


def mentioned(option: Option, headers: list[str], keys: list[Named]) -> bool:
    """Whether the file names the option in its section: a key line, or a table of its own."""
    if any(n.key == option.name and option.matches(n.section) for n in keys):
        return True
    return any(_matches(option.key, h) or _matches(option.key + ".*", h) for h in headers)


def attribute_docstrings() -> dict[tuple[str, str], str]:
    """(class, attribute) → the string right under the attribute, as written in config.py."""
    tree = ast.parse(inspect.getsource(config_module))
    docs = {}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        for node, after in zip(cls.body, cls.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[cls.name, node.target.id] = after.value.value
    return docs


def test_the_walk_reaches_every_kind_of_table() -> None:
    keys = {option.key for option in options()}
    assert {"smtp.rate", "send.min_rate", "email.dkim_key_file", "site.author_email"} <= keys
    assert {"schedule.digests", "schedule.digests.local_time"} <= keys
    assert {"languages.*.title", "languages.*.seo_fields.alt_slugs"} <= keys
    assert "root" not in keys


def test_config_toml_names_every_key_of_the_model_in_its_section() -> None:
    headers, keys = named_keys(SHIPPED.read_text("utf-8"))
    every = list(options())
    missing = [option.key for option in every if not mentioned(option, headers, keys)]
    assert missing == [], f"config.toml does not name {', '.join(missing)}"

    # ...and names nothing else: no stale or misspelt key, even commented out.
    free = [o.key for o in every if _free_table(o.field.annotation)]
    unknown = [
        f"line {n.line}: {n.section}.{n.key}"
        for n in keys
        if not any(o.name == n.key and o.matches(n.section) for o in every)
        and not any(_matches(pattern, n.section) for pattern in free)
    ]
    assert unknown == []


def test_every_option_has_a_docstring() -> None:
    """A section is documented by its class (``Site``), every other key under its attribute."""
    docs = attribute_docstrings()
    undocumented = []
    for option in options():
        section = _tables(option.field.annotation)[0]
        own = section.__dict__.get("__doc__") if section is not None else None
        if not (own or docs.get((option.owner.__name__, option.name))):
            undocumented.append(option.key)
    assert undocumented == []


def test_a_key_commented_out_shows_the_models_default() -> None:
    """An optional key is commented out with its default, so that the file and the model
    cannot say two things; one that is unset by default (or a language block's) shows an
    example, which must at least be a value the key takes."""
    _, keys = named_keys(SHIPPED.read_text("utf-8"))
    every = list(options())
    wrong = []
    for named in (n for n in keys if n.commented):
        option = next((o for o in every if o.name == named.key and o.matches(named.section)), None)
        if option is None:  # a name of the publisher's own choosing: [languages.de.audiences]
            continue
        try:
            value = option.validate(named.value)
        except ValidationError as exc:
            wrong.append(f"line {named.line}: {option.key}: {exc.errors()[0]['msg']}")
            continue
        default = option.field.default
        if option.field.is_required() or default is None or EXAMPLES.match(option.section):
            continue
        if value != default:
            wrong.append(f"line {named.line}: {option.key} = {named.value!r}, default {default!r}")
    assert wrong == []


def test_every_key_line_has_its_comment_above_it() -> None:
    lines = SHIPPED.read_text("utf-8").splitlines()
    _, keys = named_keys("\n".join(lines))
    for named in keys:
        above = lines[named.line - 2]
        prose = above.startswith("#") and not KEY.match(above) and not HEADER.match(above)
        assert prose, f"config.toml:{named.line}: {lines[named.line - 1]}"


def test_the_shipped_file_loads_and_says_what_the_defaults_say() -> None:
    """Uncommented, its site keys keep the built-in values: the bundled articles run with it
    as they do with no file at all."""
    shipped = load_config(SHIPPED, env={})
    defaults = Config.model_validate({"languages": shipped.languages, "root": shipped.root})
    assert shipped.model_copy(update={"site": defaults.site}) == defaults
    assert shipped.site.model_copy(update={"description": ""}) == defaults.site
