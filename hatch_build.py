"""Build hook, for wheels and editable installs alike.

Compiles the modules ``pyproject.toml`` lists (``[tool.syndicate] compiled``) with mypyc into
C extensions beside their sources, where both a wheel and an editable install import them,
and records each one's source hash (``syndicate/compiled.py`` runs a module whose source
changed since as Python). Where mypyc or a C compiler is missing, or with
SYNDICATE_PURE_PYTHON=1, they stay pure Python: slower, same results. (The gettext catalogs
need no build step: they are compiled from their .po files when they are loaded.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

RECORD = ".compiled.json"  # the source hash of each compiled module, for a staleness check


def compiled_modules(root: Path) -> tuple[str, ...]:
    """The modules to compile, below the package (``reader.parse``): pyproject.toml's list."""
    with (root / "pyproject.toml").open("rb") as file:
        return tuple(tomllib.load(file)["tool"]["syndicate"]["compiled"])


class BuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        package = Path(self.root, "src/syndicate")
        built = self._compile(package, compiled_modules(Path(self.root)))
        if built:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["artifacts"].extend(f"src/syndicate/{path}" for path in built)

    def _compile(self, package: Path, names: tuple[str, ...]) -> list[str]:
        """The extension files built into ``package``, relative to it; none when the modules
        stay Python. Extensions of modules no longer listed are removed too."""
        for old in [*_extensions(package), package / RECORD, package / ".compiled-stale.json"]:
            old.unlink(missing_ok=True)  # never leave an extension older than its source
        if os.environ.get("SYNDICATE_PURE_PYTHON") == "1":
            return []
        built: list[str] = []
        record: dict[str, str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp, "syndicate")
            shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
            env = {**os.environ, "MYPY_CACHE_DIR": str(Path(tmp, ".mypy_cache"))}
            for name in names:
                # Other modules are not analysed: what the build environment happens to have
                # installed must not decide whether the hot ones compile.
                command = ["-m", "mypyc", "--ignore-missing-imports", "--follow-imports=skip"]
                source = Path("syndicate", *name.split(".")).with_suffix(".py")
                command.append(str(source))
                done = subprocess.run(
                    [sys.executable, *command],
                    cwd=tmp,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                made = _extensions(copy)
                if done.returncode != 0 or not made:
                    self.app.display_warning(
                        f"{source} stays pure Python (mypyc: "
                        f"{(done.stdout + done.stderr).strip()[-600:]})"
                    )
                    continue
                for path in made:
                    place = package / path.relative_to(copy)
                    shutil.move(path, place)  # moved: the next module's build finds only its own
                    built.append(str(place.relative_to(package)))
                text = (package.parent / source).read_bytes()
                record[name] = hashlib.sha256(text).hexdigest()
        (package / RECORD).write_text(json.dumps(record, indent=1), "utf-8")
        return built


def _extensions(folder: Path) -> list[Path]:
    """The compiled files in ``folder`` and below: each module and its mypyc library."""
    return [path for suffix in ("so", "pyd") for path in folder.rglob(f"*.{suffix}")]
