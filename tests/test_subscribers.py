"""`syndicate subscribers ...` on SQLite and PostgreSQL: validated, idempotent, all or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.store import open_store
from syndicate.subscribers import mask_email


@pytest.fixture
def cli(tmp_path: Path, database_url: str):
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndatabase = "{database_url}"\n', "utf-8")
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, [*args[:2], "--config", str(config), *args[2:]])

    return invoke


def listed(cli) -> list[dict]:
    result = cli("subscribers", "list", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_add_normalises_the_address_and_lists_it(cli) -> None:
    result = cli(
        "subscribers",
        "add",
        "Reader@EXAMPLE.com",
        "--lang",
        "de",
        "--audience",
        "procurement",
        "--audience",
        "cost",
    )
    assert result.exit_code == 0, result.output
    [reader] = listed(cli)
    assert (reader["email"], reader["lang"], reader["audiences"], reader["status"]) == (
        "Reader@example.com",
        "de",
        ["cost", "procurement"],
        "active",
    )
    assert reader["source"] == "cli"


@pytest.mark.parametrize(
    ("email", "lang", "audience", "message"),
    [
        ("not-an-address", "en", "cost", "invalid email address"),
        ("a@example.com\r\nBcc: victim@example.net", "en", "cost", "invalid email address"),
        ("a@example.com", "fr", "cost", "unknown language 'fr'"),
        ("a@example.com", "en", "marketing", "unknown audience(s) 'marketing'"),
    ],
)
def test_add_refuses_bad_input_with_a_clear_message(cli, email, lang, audience, message) -> None:
    result = cli("subscribers", "add", email, "--lang", lang, "--audience", audience)
    assert result.exit_code == 2 and message in result.output
    assert listed(cli) == []


GOOD = "email,lang,audiences\none@example.com,en,cost\ntwo@example.com,nl,cost;strategy\n"


def test_import_is_idempotent(cli, tmp_path: Path) -> None:
    file = tmp_path / "readers.csv"
    file.write_text(GOOD, "utf-8")
    first = cli("subscribers", "import", str(file))
    assert first.exit_code == 0 and "2 added, 0 updated, 0 unchanged" in first.output
    again = cli("subscribers", "import", str(file))
    assert again.exit_code == 0 and "0 added, 0 updated, 2 unchanged" in again.output
    assert [(r["email"], r["audiences"]) for r in listed(cli)] == [
        ("one@example.com", ["cost"]),
        ("two@example.com", ["cost", "strategy"]),
    ]


def test_a_bad_row_imports_nothing_and_every_bad_row_is_named(cli, tmp_path: Path) -> None:
    file = tmp_path / "readers.csv"
    file.write_text(
        GOOD
        + "broken-address,en,cost\n"
        + "three@example.com,en,cost;unknown\n"
        + "one@EXAMPLE.com,de,cost\n"
        + 'four@example.com,en,"cost\nBcc: x@example.net"\n',
        "utf-8",
    )
    result = cli("subscribers", "import", str(file))
    assert result.exit_code == 1
    assert f"{file}:4: error: invalid email address 'broken-address'" in result.output
    assert f"{file}:5: error: unknown audience(s) 'unknown'" in result.output
    assert f"{file}:6: error: one@example.com is already on line 2" in result.output
    assert f"{file}:8: error: unknown audience(s) 'cost\\nBcc: x@example.net'" in result.output
    assert "nothing imported" in result.output
    assert listed(cli) == []


def test_an_import_never_resubscribes_a_reader_who_left(cli, tmp_path: Path, database_url) -> None:
    file = tmp_path / "readers.csv"
    file.write_text(GOOD, "utf-8")
    cli("subscribers", "import", str(file))
    store = open_store(database_url)
    reader = store.subscriber("one@example.com")
    store.set_status(reader.id, "unsubscribed", reader.created_at)
    store.close()
    cli("subscribers", "import", str(file))
    assert {r["email"]: r["status"] for r in listed(cli)}["one@example.com"] == "unsubscribed"


def test_export_reads_back_with_import_and_remove_deletes(cli, tmp_path: Path) -> None:
    file = tmp_path / "readers.csv"
    file.write_text(GOOD, "utf-8")
    cli("subscribers", "import", str(file))
    exported = tmp_path / "export.csv"
    assert cli("subscribers", "export", str(exported)).exit_code == 0
    assert exported.read_text("utf-8").splitlines()[0] == (
        "email,lang,audiences,status,created,consent_source"
    )
    assert cli("subscribers", "remove", "ONE@example.com").exit_code == 1  # local part kept
    assert cli("subscribers", "remove", "one@example.com").exit_code == 0
    assert [r["email"] for r in listed(cli)] == ["two@example.com"]
    back = cli("subscribers", "import", str(exported))
    assert back.exit_code == 0 and "1 added, 0 updated, 1 unchanged" in back.output


@pytest.mark.parametrize(
    ("address", "masked"),
    [
        ("reader@example.org", "r•••@example.org"),
        ("a@example.org", "a•••@example.org"),
        ('"odd@local"@example.org', '"•••@example.org'),
        ("Jörg@bücher.example", "J•••@bücher.example"),
    ],
)
def test_a_masked_address_keeps_its_first_letter_and_domain(address, masked):
    assert mask_email(address) == masked
