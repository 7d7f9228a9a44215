"""The modules the install compiles with mypyc run compiled: a compile error leaves one pure
Python, which works but reads a large set several times slower, so it must not go unseen."""

from __future__ import annotations

import importlib

import pytest

from tests.conftest import missing_real_part

COMPILED = ("reader", "language", "feeds")  # hatch_build.COMPILED


@pytest.mark.parametrize("name", COMPILED)
def test_the_hot_modules_run_compiled(name: str) -> None:
    module = importlib.import_module(f"syndicate.{name}")
    if not module.__file__ or module.__file__.endswith(".py"):
        missing_real_part(
            f"syndicate/{name}.py runs as pure Python: the install did not compile it "
            "(no C compiler, SYNDICATE_PURE_PYTHON=1, or a mypyc error in the install log)"
        )
