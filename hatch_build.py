"""Build hook, for wheels and editable installs alike.

Compiles the reader's hot modules with mypyc into C extensions beside their sources, where
both a wheel and an editable install import them: the reader runs about twice as fast. Where
mypyc or a C compiler is missing, or with SYNDICATE_PURE_PYTHON=1, they stay pure Python:
slower, same results. (The gettext catalogs need no build step: they are compiled from their
.po files when they are loaded.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

COMPILED = ("reader", "language", "feeds")
RECORD = ".compiled.json"  # the source hash of each compiled module, for a staleness check


class BuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        package = Path(self.root, "src/syndicate")
        built = self._compile(package)
        if built:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["artifacts"].extend(f"src/syndicate/{name}" for name in built)

    def _compile(self, package: Path) -> list[str]:
        """The extension files built into ``package``; none when the modules stay Python."""
        for old in [*_extensions(package, COMPILED), package / RECORD]:
            old.unlink(missing_ok=True)  # never leave an extension older than its source
        if os.environ.get("SYNDICATE_PURE_PYTHON") == "1":
            return []
        built: list[str] = []
        record: dict[str, str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp, "syndicate")
            shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
            env = {**os.environ, "MYPY_CACHE_DIR": str(Path(tmp, ".mypy_cache"))}
            for name in COMPILED:
                # Other modules are not analysed: what the build environment happens to have
                # installed must not decide whether the hot ones compile.
                command = ["-m", "mypyc", "--ignore-missing-imports", "--follow-imports=skip"]
                command.append(f"syndicate/{name}.py")
                done = subprocess.run(
                    [sys.executable, *command],
                    cwd=tmp,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                made = _extensions(copy, (name,))
                if done.returncode != 0 or not made:
                    self.app.display_warning(
                        f"syndicate/{name}.py stays pure Python (mypyc: "
                        f"{(done.stdout + done.stderr).strip()[-600:]})"
                    )
                    continue
                for path in made:
                    shutil.copy2(path, package / path.name)
                    built.append(path.name)
                source = (package / f"{name}.py").read_bytes()
                record[f"{name}.py"] = hashlib.sha256(source).hexdigest()
        (package / RECORD).write_text(json.dumps(record, indent=1), "utf-8")
        return built


def _extensions(folder: Path, names: tuple[str, ...]) -> list[Path]:
    """The compiled files of ``names`` in ``folder``: the module and its mypyc library."""
    prefixes = tuple(p for name in names for p in (f"{name}.", f"{name}__mypyc."))
    return [
        path
        for path in folder.iterdir()
        if path.name.startswith(prefixes) and path.suffix in (".so", ".pyd")
    ]
