"""The README maps the project and points on; docs/ explains it. Both stay reachable: every
relative link leads to a file, every page is in the site's nav, and the configuration reference
covers every option of the model. (`make test` also builds docs/ with `mkdocs build --strict`,
which checks each link's anchor.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT
from tests.test_config_complete import _tables, options

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))

SETUP = """\
# syndicate

```sh
make run    # run the publishing job once on the bundled article set, with built-in defaults
make test   # run the whole test suite (ruff, mypy, the docs build, then pytest)
```
"""

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def links(path: Path) -> list[str]:
    """The targets of a Markdown file's inline links, code blocks and code spans aside."""
    text = CODE.sub("", FENCE.sub("", path.read_text("utf-8")))
    return LINK.findall(text)


def nav_pages() -> list[str]:
    """The files mkdocs.yml's nav names (``- Title: page.md``), in order."""
    text = (ROOT / "mkdocs.yml").read_text("utf-8")
    block = re.search(r"^nav:\n((?:[ \t]+.*\n)+)", text, re.M)
    assert block, "mkdocs.yml has no nav"
    return re.findall(r"^\s+-\s+(?:[^:\n]+:\s+)?(\S+\.md)\s*$", block[1], re.M)


def test_the_readme_starts_with_the_two_commands_and_stays_short() -> None:
    text = README.read_text("utf-8")
    assert text.startswith(SETUP)
    assert len(text.splitlines()) <= 250


def test_the_readmes_map_names_every_module_and_package() -> None:
    """The README's pipeline map lists src/syndicate/ one entry a line: a module or package
    added or moved at the top shows up there too."""
    text = README.read_text("utf-8")
    listing = re.search(r"^`src/syndicate/`.*?\n```\n(.*?)^```", text, re.M | re.S)
    assert listing, "README.md has no map of src/syndicate/"
    named = set(re.findall(r"^(\S+)", listing[1], re.M))
    package = ROOT / "src" / "syndicate"
    entries = {
        f"{p.name}/" if p.is_dir() else p.name
        for p in package.iterdir()
        if (p.is_dir() and p.name != "__pycache__") or p.suffix in (".py", ".toml")
    }
    assert sorted(entries - named - {"__init__.py", "__main__.py"}) == []
    assert sorted(named - entries) == []


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file(path: Path) -> None:
    targets = [t for t in links(path) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]
    missing = [t for t in targets if not (path.parent / t.split("#")[0]).is_file()]
    assert missing == []


def test_the_readme_links_every_page() -> None:
    linked = {(ROOT / t.split("#")[0]).resolve() for t in links(README)}
    assert [p.name for p in PAGES if p.resolve() not in linked] == []


def test_every_page_is_in_the_nav_and_the_nav_names_only_pages() -> None:
    nav = nav_pages()
    assert sorted(nav) == [p.name for p in PAGES]
    assert len(set(nav)) == len(nav)


def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "config_reference", DOCS / "hooks" / "config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_has_every_option_in_its_section() -> None:
    reference = hook()
    assert reference.MARKER in (DOCS / reference.PAGE).read_text("utf-8")
    sections: dict[str, str] = {"": ""}
    for part in re.split(r"^### ", reference.render(), flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        sections[heading.strip("`[]").replace("<code>", "*")] = body
    for option in options():
        inner, part = _tables(option.field.annotation)
        if inner is not None:
            assert option.key + part in sections, option.key
        else:
            assert f"| `{option.name}` |" in sections[option.section], option.key
