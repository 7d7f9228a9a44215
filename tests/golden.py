"""Golden files (tests/golden/): output a test pins byte for byte.

``UPDATE_GOLDEN=1 pytest`` writes them from the output instead; review the diff like code.
Without it, a missing golden file fails the test.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"


def updating() -> bool:
    return bool(os.environ.get("UPDATE_GOLDEN"))


def assert_golden(name: str, data: bytes) -> None:
    """``data`` is the golden file ``name`` (a path below tests/golden/), byte for byte."""
    path = GOLDEN / name
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert path.exists(), f"missing golden file {path}; create it with UPDATE_GOLDEN=1 pytest"
    assert data == path.read_bytes(), f"{name} differs from its golden file"


def assert_golden_folder(name: str, files: dict[str, bytes]) -> None:
    """``files`` (path within the folder → bytes) are the golden folder ``name``: each one
    byte for byte, and no file more or fewer."""
    folder = GOLDEN / name
    if updating():
        shutil.rmtree(folder, ignore_errors=True)  # a file no longer made goes too
    for path, data in sorted(files.items()):
        assert_golden(f"{name}/{path}", data)
    kept = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert sorted(files) == kept, f"golden folder {name} holds other files than were made"
