"""One place per outside system: each rule names what may be used only under some modules.

A use is an import (``import x``, ``from x import y``, relative ones resolved) or a dotted
name reached through one (``x.y.z``), so a rule may name a package (``sqlalchemy``) or one of
its functions. Add a rule as a row of ``RULES``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "src" / "syndicate"


@dataclass(frozen=True)
class Rule:
    system: str
    """What the names reach, for the message."""
    names: tuple[str, ...]
    """Dotted names (a module, or anything in one) used only under ``allowed``."""
    allowed: tuple[str, ...]
    """Module prefixes where they may be used: the module itself and those below it."""


RULES = (
    Rule(
        "SQL",
        ("sqlalchemy", "psycopg", "alembic", "apscheduler.jobstores.sqlalchemy"),
        ("syndicate.state", "syndicate.migrations"),
    ),
    Rule("SMTP", ("smtplib",), ("syndicate.deliver",)),
    Rule("HTTP in", ("uvicorn", "starlette"), ("syndicate.web",)),
    Rule("HTTP out", ("urllib.request", "http.client", "httpx"), ("syndicate.websub",)),
    Rule(
        "the clock",
        (
            "datetime.datetime.now",
            "datetime.datetime.utcnow",
            "datetime.datetime.today",
            "datetime.date.today",
            "time.time",
            "time.time_ns",
        ),
        ("syndicate.clock",),
    ),
    Rule(
        "files put in place",
        ("os.replace", "os.rename", "os.link", "shutil.move"),
        ("syndicate.files",),
    ),
)


def module_name(path: Path) -> str:
    parts = ("syndicate", *path.relative_to(SOURCE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def uses(tree: ast.AST, module: str, package: bool) -> Iterator[tuple[int, str]]:
    """Each (line, dotted name) ``tree`` imports or reaches through an import, in
    ``module`` (a package's ``__init__`` when ``package``)."""
    base = module.split(".") if package else module.split(".")[:-1]
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom):
            parent = base[: len(base) - node.level + 1] if node.level else []
            source = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                yield node.lineno, f"{source}.{alias.name}"
                bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    attributes = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute)]
    inner = {id(node.value) for node in attributes}
    for node in attributes:
        if id(node) not in inner:  # the whole of ``a.b.c``, not ``a.b`` again
            dotted = _dotted(node, bound)
            if dotted is not None:
                yield node.lineno, dotted


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """``a.b.c`` with ``a`` bound by an import, as the full name it reaches; else None."""
    attributes = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in bound:
        return None
    return ".".join([bound[node.id], *reversed(attributes)])


def broken(source: str, module: str, package: bool = False) -> list[str]:
    """Each use in ``source`` (the text of ``module``) that a rule keeps elsewhere."""
    found = []
    for line, name in uses(ast.parse(source), module, package):
        for rule in RULES:
            if any(_within(module, allowed) for allowed in rule.allowed):
                continue
            if any(_within(name, held) for held in rule.names):
                where = ", ".join(rule.allowed)
                found.append(f"{module}:{line}: {name} ({rule.system}: only in {where})")
    return sorted(set(found), key=lambda said: int(said.split(":")[1]))


def test_the_rules_see_an_import_and_what_it_reaches() -> None:
    source = (
        "import sqlalchemy as sa\n"
        "from psycopg import conninfo\n"
        "from ..state import database\n"
        "x = sa.engine.make_url\n"
    )
    assert broken(source, "syndicate.web.app") == [
        "syndicate.web.app:1: sqlalchemy (SQL: only in syndicate.state, syndicate.migrations)",
        "syndicate.web.app:2: psycopg.conninfo (SQL: only in syndicate.state, "
        "syndicate.migrations)",
        "syndicate.web.app:4: sqlalchemy.engine.make_url (SQL: only in syndicate.state, "
        "syndicate.migrations)",
    ]
    assert broken(source, "syndicate.state.workers") == []
    assert broken("from . import sqlalchemy", "syndicate.web", package=True) == []


@pytest.mark.parametrize(
    "path", sorted(SOURCE.rglob("*.py")), ids=lambda p: str(p.relative_to(SOURCE))
)
def test_each_outside_system_is_used_in_its_one_place(path: Path) -> None:
    module = module_name(path)
    assert broken(path.read_text("utf-8"), module, path.name == "__init__.py") == []
