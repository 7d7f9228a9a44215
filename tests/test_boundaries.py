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
    Rule("SMTP", ("smtplib",), ("syndicate.sending.transports",)),
    Rule("HTTP in", ("uvicorn", "starlette"), ("syndicate.web",)),
    # web.sns too: the SES webhook must fetch SNS's signing certificate to verify a message,
    # and confirm a subscription by visiting its URL (both only at SNS's own hosts);
    # doctor --online asks whether site.base_url answers: one GET, only when asked for.
    Rule(
        "HTTP out",
        ("urllib.request", "http.client", "httpx"),
        ("syndicate.websub", "syndicate.web.sns", "syndicate.doctor.online"),
    ),
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


# -- no import circle ----------------------------------------------------------------------------


def imported_modules(tree: ast.AST, module: str, package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``tree`` imports anywhere (in a function too), relative
    imports resolved; ``from p import m`` counts as ``p.m`` when that is a module, else ``p``.
    Imports under ``if TYPE_CHECKING:`` are left out: they never run."""
    base = module.split(".") if package else module.split(".")[:-1]
    found: set[str] = set()

    def add(name: str) -> None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):  # the longest prefix that is a module
            if ".".join(parts[:end]) in known:
                found.add(".".join(parts[:end]))
                return

    for node in _run_time(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            parent = base[: len(base) - node.level + 1] if node.level else []
            source = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                add(f"{source}.{alias.name}")
    found.discard(module)
    return found


TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _run_time(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_CHECKING:
            for other in node.orelse:
                yield other
                yield from _run_time(other)
            continue
        yield node
        yield from _run_time(node)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package with the modules of the package it imports."""
    paths = {module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}
    known = set(paths)
    return {
        module: imported_modules(
            ast.parse(path.read_text("utf-8")), module, path.name == "__init__.py", known
        )
        for module, path in paths.items()
    }


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (its modules in import order, the first again at the end) per group of
    modules that import each other, directly or through others (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set(stack[stack.index(module) :])
            del stack[stack.index(module) :]
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_circle(graph, group) for group in groups]


def _circle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest way round from the group's first module back to it, within the group."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        module = queue.pop(0)
        for target in sorted(graph[module] & group):
            if target == start:
                return [*paths[module], start]
            if target not in paths:
                paths[target] = [*paths[module], target]
                queue.append(target)
    raise AssertionError(f"no way round {sorted(group)}")


def test_an_import_circle_is_found_and_named() -> None:
    known = {"syndicate.a", "syndicate.b", "syndicate.c", "syndicate.p", "syndicate.p.m"}
    late = ast.parse("def f():\n    from .c import x\n")
    assert imported_modules(late, "syndicate.b", False, known) == {"syndicate.c"}
    typing_only = ast.parse(
        "if TYPE_CHECKING:\n    from .c import x\nelse:\n    import syndicate.a\n"
    )
    assert imported_modules(typing_only, "syndicate.b", False, known) == {"syndicate.a"}
    assert imported_modules(ast.parse("from . import m"), "syndicate.p", True, known) == {
        "syndicate.p.m"
    }
    graph = {
        "syndicate.a": {"syndicate.b"},
        "syndicate.b": {"syndicate.c"},
        "syndicate.c": {"syndicate.a"},
        "syndicate.p": {"syndicate.p.m"},
        "syndicate.p.m": set(),
    }
    assert import_circles(graph) == [["syndicate.a", "syndicate.b", "syndicate.c", "syndicate.a"]]


def test_no_module_imports_itself_through_others() -> None:
    circles = [" -> ".join(circle) for circle in import_circles(import_graph())]
    assert circles == []
