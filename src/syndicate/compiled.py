"""Which of the package's modules run as their compiled extension, and which as Python.

The install compiles the modules that ``pyproject.toml`` lists (``[tool.syndicate] compiled``,
see ``hatch_build.py``) and records each one's source hash beside them, in ``.compiled.json``.
A module whose source no longer matches its record runs from its source, with one warning:
an edit takes effect at once, without a reinstall. ``SYNDICATE_PURE_PYTHON=1`` runs every
compiled module as Python; a comma-separated list of module names (``reader.parse``) runs
those only as Python, which is how ``bench/`` compares the two in one run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parent
RECORD = ".compiled.json"  # module name (below the package) -> sha256 of its source
_SAID = ".compiled-stale.json"  # the stale sources a warning was given for


def source_of(package: Path, name: str) -> Path:
    """The source file of the module ``name`` (``reader.parse``) below ``package``."""
    return package.joinpath(*name.split(".")).with_suffix(".py")


def as_python(package: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """Each compiled module that is to run as Python, with the reason: its source changed
    since it was compiled, or ``SYNDICATE_PURE_PYTHON`` names it. Empty when nothing was
    compiled (no record)."""
    try:
        record = json.loads((package / RECORD).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    chosen = environ.get("SYNDICATE_PURE_PYTHON", "")
    named = {n.strip() for n in chosen.split(",") if n.strip()}
    found: dict[str, str] = {}
    for key, digest in record.items():
        name = key.removesuffix(".py")  # an install before packages were compiled: "feeds.py"
        if chosen == "1" or name in named:
            found[name] = "SYNDICATE_PURE_PYTHON"
            continue
        try:
            source = source_of(package, name).read_bytes()
        except OSError:
            continue
        if hashlib.sha256(source).hexdigest() != digest:
            found[name] = "changed since it was compiled"
    return found


class _FromSource:
    """A meta path finder: the listed modules' sources, ahead of their extensions, which the
    import system would otherwise prefer."""

    def __init__(self, sources: Mapping[str, Path]) -> None:
        self.sources = dict(sources)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        source = self.sources.get(fullname)
        return spec_from_file_location(fullname, source) if source is not None else None


def install(package: Path = PACKAGE, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Run ``as_python``'s modules from their sources in this process, and warn for those
    whose extension is older than their source. Returns ``as_python``."""
    found = as_python(package, environ)
    if found:
        prefix = package.name
        sources = {f"{prefix}.{name}": source_of(package, name) for name in found}
        sys.meta_path.insert(0, _FromSource(sources))
    stale = sorted(name for name, why in found.items() if why != "SYNDICATE_PURE_PYTHON")
    if stale and _first_to_see(package, stale):
        warnings.warn(
            f"{', '.join(f'{package.name}.{n}' for n in stale)}: changed since compiled, "
            "running as Python (slower, same results) until the next install (make test)",
            RuntimeWarning,
            stacklevel=2,
        )
    return found


def _first_to_see(package: Path, stale: list[str]) -> bool:
    """Whether no process has said yet that these sources, as they are now, run as Python:
    said once per edit, not by every command and worker started after it. Kept in a file
    beside the record; where that cannot be written, every process says so."""
    sources = {
        name: hashlib.sha256(source_of(package, name).read_bytes()).hexdigest() for name in stale
    }
    said = package / _SAID
    try:
        if json.loads(said.read_text("utf-8")) == sources:
            return False
    except (OSError, ValueError):
        pass
    from .files import write_atomic  # only when a source changed: tempfile is not free

    with contextlib.suppress(OSError):
        write_atomic(said, json.dumps(sources).encode())
    return True
