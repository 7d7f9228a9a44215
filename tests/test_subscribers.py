"""`syndicate subscribers ...` on SQLite and PostgreSQL: validated, idempotent, all or nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.state import open_store
from syndicate.state.schema import subscribers
from syndicate.subscribers import EXPORT_COLUMNS, mask_email
from tests.conftest import ARTICLES


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
    reader = store.subscribers.subscriber("one@example.com")
    store.subscribers.set_status(reader.id, "unsubscribed", reader.created_at)
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
        "email,lang,audiences,status,consent_source,created,updated,bounces,timezone,"
        "last_bounce,soft_bounces,soft_since,last_reason"
    )
    assert cli("subscribers", "remove", "nobody@example.com").exit_code == 1
    removed = cli("subscribers", "remove", "ONE@Example.com")  # any letter case
    assert removed.exit_code == 0 and removed.stdout == "removed one@example.com\n"
    assert [r["email"] for r in listed(cli)] == ["two@example.com"]
    back = cli("subscribers", "import", str(exported))
    assert back.exit_code == 0 and "1 added, 0 updated, 1 unchanged" in back.output


def test_a_readers_time_zone_is_checked_and_survives_export_and_import(
    cli, tmp_path: Path, database_url: str
) -> None:
    added = cli("subscribers", "add", "tokyo@example.com", "--lang", "en", "--audience", "cost",
                "--timezone", "Asia/Tokyo")  # fmt: skip
    assert added.exit_code == 0, added.output
    wrong = cli("subscribers", "add", "x@example.com", "--lang", "en", "--audience", "cost",
                "--timezone", "Asia/Atlantis")  # fmt: skip
    assert wrong.exit_code == 2 and "unknown time zone 'Asia/Atlantis'" in wrong.output
    file = tmp_path / "readers.csv"
    file.write_text(
        "email,lang,audiences,timezone\n"
        "ams@example.com,en,cost,\n"
        "ny@example.com,en,cost,America/New_York\n"
        "bad@example.com,en,cost,Europe/Atlantis\n",
        "utf-8",
    )
    result = cli("subscribers", "import", str(file))
    assert result.exit_code == 1
    assert f"{file}:4: error: unknown time zone 'Europe/Atlantis'" in result.output
    file.write_text("\n".join(file.read_text("utf-8").splitlines()[:3]) + "\n", "utf-8")
    assert cli("subscribers", "import", str(file)).exit_code == 0
    zones = {r["email"]: r["timezone"] for r in listed(cli)}
    assert zones == {
        "tokyo@example.com": "Asia/Tokyo",
        "ams@example.com": "",  # the site's
        "ny@example.com": "America/New_York",
    }

    exported = tmp_path / "export.csv"
    assert cli("subscribers", "export", str(exported)).exit_code == 0
    for email in list(zones):
        cli("subscribers", "remove", email)
    assert cli("subscribers", "import", str(exported)).exit_code == 0
    assert {r["email"]: r["timezone"] for r in listed(cli)} == zones


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


def test_letter_case_never_makes_a_second_reader(cli, tmp_path: Path, smtp_server) -> None:
    inbox, port = smtp_server
    config = tmp_path / "config.toml"
    config.write_text(
        config.read_text("utf-8")
        + f'[site]\narticles = "{ARTICLES}"\n[smtp]\nurl = "smtp://127.0.0.1:{port}"\n',
        "utf-8",
    )
    assert cli("subscribers", "add", "Reader@Example.ORG", "--lang", "en",
               "--audience", "cost").exit_code == 0  # fmt: skip
    again = cli("subscribers", "add", "reader@example.org", "--lang", "en", "--audience", "cost",
                "--audience", "strategy")  # fmt: skip
    assert again.stdout == "Reader@example.org (en: cost, strategy) active\n"
    file = tmp_path / "readers.csv"
    file.write_text("email,lang,audiences\nREADER@EXAMPLE.ORG,en,cost\n", "utf-8")
    assert "0 added, 1 updated, 0 unchanged" in cli("subscribers", "import", str(file)).output
    [reader] = listed(cli)
    assert (reader["email"], reader["audiences"]) == ("Reader@example.org", ["cost"])
    # One reader, one message.
    sent = cli("send")
    assert sent.exit_code == 0, sent.output
    assert inbox.counts() == {"Reader@example.org": 1}
    # In one file, two spellings are one address listed twice.
    file.write_text("email,lang,audiences\na@example.org,en,cost\nA@example.org,nl,cost\n")
    result = cli("subscribers", "import", str(file))
    assert result.exit_code == 1 and f"{file}:3: error: A@example.org is already on line 2" in (
        result.output
    )


def test_export_then_import_is_a_faithful_round_trip(cli, tmp_path: Path, database_url) -> None:
    store = open_store(database_url)
    day = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    for n, (email, lang, audiences, status, source) in enumerate([
        ("Ada@example.org", "de", ["cost", "procurement"], "active", "web form (de)"),
        ("ben@example.org", "nl", ["strategy"], "pending", "web form (nl)"),
        ("cy@example.org", "en", ["cost"], "unsubscribed", "import:old.csv"),
        ("dee@example.org", "en", ["architects"], "bounced", "cli"),
    ]):  # fmt: skip
        reader = store.subscribers.add_subscriber(
            email, lang, audiences, status="active", consent_source=source,
            now=day + timedelta(days=n),
        )  # fmt: skip
        store.subscribers.set_status(reader.id, status, day + timedelta(days=10 + n))
    with store.engine.begin() as db:
        db.execute(sa.update(subscribers).where(subscribers.c.email == "dee@example.org")
                   .values(hard_bounces=3, last_bounce_at=day + timedelta(days=20),
                           last_reason="userunknown"))  # fmt: skip
        # every count the bounce policy reads goes out and comes back: soft ones too
        db.execute(sa.update(subscribers).where(subscribers.c.email == "Ada@example.org")
                   .values(soft_bounces=4, first_soft_at=day + timedelta(days=30),
                           last_reason="mailboxfull"))  # fmt: skip
    store.close()
    before = listed(cli)
    exported = tmp_path / "export.csv"
    assert cli("subscribers", "export", str(exported)).exit_code == 0

    # The same file into the same list changes nothing.
    same = cli("subscribers", "import", str(exported))
    assert same.exit_code == 0 and "0 added, 0 updated, 4 unchanged" in same.output
    # Into an empty list: everyone as they were, status, consent and dates included.
    for reader in before:
        assert cli("subscribers", "remove", reader["email"]).exit_code == 0
    back = cli("subscribers", "import", str(exported))
    assert back.exit_code == 0 and "4 added, 0 updated, 0 unchanged" in back.output
    assert listed(cli) == before
    assert [(r["status"], r["source"], r["bounces"]) for r in before] == [
        ("active", "web form (de)", 0),
        ("pending", "web form (nl)", 0),
        ("unsubscribed", "import:old.csv", 0),
        ("bounced", "cli", 3),
    ]
    bounces = ("bounces", "last_bounce", "soft_bounces", "soft_since", "last_reason")
    assert [tuple(before[n][k] for k in bounces) for n in (0, 3)] == [
        (0, None, 4, (day + timedelta(days=30)).isoformat(), "mailboxfull"),
        (3, (day + timedelta(days=20)).isoformat(), 0, None, "userunknown"),
    ]
    assert before[0]["created"] == day.isoformat()


def test_a_reader_who_left_stays_so_whatever_the_file_says_unless_resubscribe(
    cli, tmp_path: Path
) -> None:
    assert cli("subscribers", "add", "cy@example.org", "--lang", "en",
               "--audience", "cost").exit_code == 0  # fmt: skip
    file = tmp_path / "left.csv"
    file.write_text("email,lang,audiences,status\ncy@example.org,en,cost,unsubscribed\n")
    assert "0 added, 1 updated" in cli("subscribers", "import", str(file)).output
    file.write_text(
        "email,lang,audiences,status,consent_source,created\n"
        "CY@example.org,nl,cost,active,newsletter signup 2026-02,2026-02-01T10:00:00+00:00\n"
    )
    kept = cli("subscribers", "import", str(file))
    assert kept.exit_code == 0 and "0 added, 1 updated" in kept.output  # the language only
    [reader] = listed(cli)
    assert (reader["status"], reader["lang"], reader["source"]) == ("unsubscribed", "nl", "cli")
    added = cli("subscribers", "add", "cy@example.org", "--lang", "en", "--audience", "cost")
    assert "unsubscribed" in added.stdout and "--resubscribe" in added.stderr
    assert listed(cli)[0]["status"] == "unsubscribed"

    back = cli("subscribers", "import", str(file), "--resubscribe")
    assert back.exit_code == 0 and "0 added, 1 updated" in back.output
    [reader] = listed(cli)
    assert (reader["status"], reader["source"], reader["created"]) == (
        "active", "newsletter signup 2026-02", "2026-02-01T10:00:00+00:00"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("a@example.org,en,cost,gone,,,,", "unknown status 'gone'"),
        ("a@example.org,en,cost,active,,yesterday,,", "created: not an ISO 8601 date"),
        ("a@example.org,en,cost,active,,,,-1", "bounces: not a whole number"),
        ("a@example.org,en,cost,active,,,,,,,x,,", "soft_bounces: not a whole number"),
        ("a@example.org,en,cost,active,,,,,,,,then,", "soft_since: not an ISO 8601 date"),
        ("a@example.org,en,cost,active,,,,,,,,,Full!", "last_reason: not a bounce reason"),
    ],
)
def test_an_exported_column_that_is_wrong_names_its_line(cli, tmp_path, row, message) -> None:
    file = tmp_path / "readers.csv"
    file.write_text(",".join(EXPORT_COLUMNS[: row.count(",") + 1]) + "\n" + row + "\n")
    result = cli("subscribers", "import", str(file))
    assert result.exit_code == 1 and f"{file}:2: error: {message}" in result.output
    assert listed(cli) == []
