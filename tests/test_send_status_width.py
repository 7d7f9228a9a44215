"""`send status` at 80 columns: every issue key whole on its line, the counts beside it; the
full table of a column per status where the terminal is wide enough."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from syndicate.cli import main
from syndicate.state import open_store
from tests.sending import NOW, add_readers, create_issue

LONG = "en-architects+cost+ecosystem+procurement+strategy"


def _site(tmp_path: Path, database_url: str) -> Path:
    store = open_store(database_url)
    readers = add_readers(store, 3)
    for n, key in enumerate((LONG, "nl-cost")):
        create_issue(
            store,
            key=key,
            lang=key[:2],
            audiences=key[3:].split("+"),
            content_hash=f"hash-{n}",
            subject=f"Digest {n}",
            rendered="{}",
            articles=[],
            readers=readers,
            message_id=lambda i, r: f"<{i}.{r}@example.org>",
            now=NOW,
        )
    store.close()
    path = tmp_path / "config.toml"
    path.write_text(f'[state]\ndatabase = "{database_url}"\n', "utf-8")
    return path


def _status(path: Path, width: int) -> list[str]:
    shown = CliRunner().invoke(
        main, ["send", "status", "--config", str(path)], env={"COLUMNS": str(width)}
    )
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert max(map(len, lines)) <= width
    return lines


def test_issue_keys_stay_whole_at_80_columns(tmp_path: Path, database_url: str) -> None:
    path = _site(tmp_path, database_url)
    lines = _status(path, 80)
    for key in (LONG, "nl-cost"):
        [row] = [line for line in lines if key in line]
        assert "3 pending" in row
    wide = _status(path, 200)
    header = next(line for line in wide if "issue" in line and "uncertain" in line)
    assert header.index("held") < header.index("pending") < header.index("skipped")
    assert any(LONG in line and "3" in line.split(LONG)[1] for line in wide)
