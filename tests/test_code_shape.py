"""The size rules the code keeps: a long function is a set of named phases waiting to be named.

Ruff holds complexity (C901, PLR0912, PLR0915); these hold length, which it does not measure.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "src" / "syndicate"
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 250
MAX_PUBLIC_METHODS = 16
"""What a caller of one class sees: its own public methods and properties and those of the
project's classes it inherits (a façade of mixins is as wide as all of them)."""


def too_long(tree: ast.AST, path: Path) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            limit = MAX_FUNCTION_LINES
        elif isinstance(node, ast.ClassDef):
            limit = MAX_CLASS_LINES
        else:
            continue
        # From ``def``/``class`` on: decorators (a command's click options) are declarations.
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > limit:
            found.append(f"{path.relative_to(SOURCE)}:{node.lineno}: {node.name} has {lines} lines")
    return found


def test_the_rule_sees_a_long_function() -> None:
    body = "".join(f"    x = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert too_long(ast.parse(f"def f():\n{body}"), SOURCE / "x.py") == ["x.py:1: f has 61 lines"]


@pytest.mark.parametrize(
    "path", sorted(SOURCE.rglob("*.py")), ids=lambda p: str(p.relative_to(SOURCE))
)
def test_no_function_over_60_lines_nor_class_over_250(path: Path) -> None:
    assert too_long(ast.parse(path.read_text("utf-8")), path) == []


def seen_by_a_caller(cls: type) -> set[str]:
    """The public methods and properties of ``cls`` and of the project's classes it inherits."""
    seen: set[str] = set()
    for base in cls.__mro__:
        if base.__module__.split(".")[0] not in ("syndicate", cls.__module__.split(".")[0]):
            continue
        for name, value in vars(base).items():
            kinds = (property, classmethod, staticmethod)
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, kinds)):
                seen.add(name)
    return seen


def project_classes() -> list[type]:
    import syndicate

    found = []
    for info in pkgutil.walk_packages(syndicate.__path__, "syndicate."):
        if info.name.startswith("syndicate.migrations") or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found += [
            value
            for value in vars(module).values()
            if inspect.isclass(value) and value.__module__ == module.__name__
        ]
    return found


def test_the_rule_sees_a_facade_of_mixins() -> None:
    parts = [
        type(f"Part{n}", (), {f"method{n}_{m}": lambda self: None for m in range(6)})
        for n in range(3)
    ]
    facade = type("Facade", tuple(parts), {})
    assert len(seen_by_a_caller(facade)) == 18 > MAX_PUBLIC_METHODS


def test_no_class_shows_a_caller_over_16_methods() -> None:
    wide = {
        f"{cls.__module__}.{cls.__qualname__}": len(seen)
        for cls in project_classes()
        if len(seen := seen_by_a_caller(cls)) > MAX_PUBLIC_METHODS
    }
    assert wide == {}
