"""The size rules the code keeps: a long function is a set of named phases waiting to be named.

Ruff holds complexity (C901, PLR0912, PLR0915); these hold length, which it does not measure.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "src" / "syndicate"
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 250


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
