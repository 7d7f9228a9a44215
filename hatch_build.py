"""Build hook: compile the committed gettext catalogs (.po) into the .mo files the package loads.

Runs for wheels and editable installs alike, so every install renders translated emails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CatalogBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        for po in sorted(Path(self.root, "src/syndicate/locales").glob("*/LC_MESSAGES/*.po")):
            with po.open("rb") as source:
                catalog = read_po(source, locale=po.parent.parent.name)
            mo = po.with_suffix(".mo")
            tmp = mo.with_suffix(".mo.tmp")
            with tmp.open("wb") as target:
                write_mo(target, catalog)
            tmp.replace(mo)
