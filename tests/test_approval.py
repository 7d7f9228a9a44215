"""email.approval: issues are held until an editor approves them, at a real server."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import load_config
from syndicate.sending import issuing
from syndicate.sending.transports import SmtpMailer
from syndicate.state import open_store
from tests.conftest import write_articles
from tests.sending import NOW
from tests.test_send import write_config

EDITOR = "editor@news.example.org"


def _site(tmp_path: Path, database_url: str, port: int, *extra: str) -> Path:
    articles = write_articles(tmp_path / "articles", 2, newest=date(2025, 12, 14))
    email = ["approval = true", f'preview_to = "{EDITOR}"', *extra]
    path = write_config(tmp_path, database_url, port, articles, email=email)
    store = open_store(database_url)
    for email_address in ("a@example.com", "b@example.com"):
        store.subscribers.add_subscriber(
            email_address, "en", ["cost"], status="active", consent_source="t", now=NOW
        )
    store.close()
    return path


def _send(path: Path, *args: str):
    return CliRunner().invoke(main, ["send", "--config", str(path), *args])


def _status(path: Path) -> dict:
    result = _send(path, "--status", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_held_issue_goes_out_only_once_approved(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    path = _site(tmp_path, database_url, port)
    archive = tmp_path / "archive" / "en"

    result = _send(path)
    assert result.exit_code == 0, result.output
    assert inbox.counts() == {EDITOR: 1}  # the test copy, and no reader's message
    assert "issue 1 (en-cost) held for approval, 2 reader(s)" in result.stderr
    assert f"test copy sent to {EDITOR}" in result.stderr
    assert not archive.exists() or not list(archive.glob("*.html"))

    (held,) = _status(path)["held"]
    assert (held["id"], held["key"], held["readers"]) == (1, "en-cost", 2)
    assert held["lang"] == "en" and held["audiences"] == ["cost"]
    assert inbox.messages[0]["Subject"] == f"Held for approval (en): {held['subject']}"
    assert held["changes"] == {"added": ["en/piece-0", "en/piece-1"], "revised": [], "removed": []}
    (issue,) = _status(path)["issues"]
    assert issue["deliveries"]["held"] == 2 and issue["deliveries"]["pending"] == 0
    table = _send(path, "--status")
    assert "held for approval" in table.stdout and "en/piece-0" in table.stdout

    # Another send neither sends nor issues it again.
    assert _send(path).exit_code == 0 and inbox.counts() == {EDITOR: 1}

    result = _send(path, "--approve", "1")
    assert result.exit_code == 0, result.output
    assert inbox.counts() == {EDITOR: 1, "a@example.com": 1, "b@example.com": 1}
    assert [p.name for p in archive.glob("*.html")] == ["1-en-cost.html"]
    assert _status(path)["held"] == []
    assert _send(path, "--approve", "1").exit_code == 1  # no longer held
    assert _send(path).exit_code == 0 and len(inbox.received) == 3


def test_a_rejected_issue_is_never_sent_and_its_content_may_be_issued_again(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    path = _site(tmp_path, database_url, port)
    assert _send(path).exit_code == 0

    result = _send(path, "--reject", "1")
    assert result.exit_code == 0, result.output
    assert "issue 1 rejected" in result.stderr
    assert _status(path)["issues"][0]["deliveries"]["skipped"] == 2

    # The same articles, the same content hash: a new held issue, with a new test copy.
    result = _send(path)
    assert "issue 2 (en-cost) held for approval" in result.stderr
    (held,) = _status(path)["held"]
    assert held["changes"]["added"] == ["en/piece-0", "en/piece-1"]  # against nothing sent
    assert inbox.counts() == {EDITOR: 2}

    assert _send(path, "--approve-all").exit_code == 0
    assert inbox.counts() == {EDITOR: 2, "a@example.com": 1, "b@example.com": 1}
    assert _send(path, "--reject", "2").exit_code == 1  # sent, so no longer held


def test_the_send_commands_act_as_the_flags_did_with_no_note(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    """``send status``, ``send reject`` and ``send approve`` (``--all`` too) do what
    ``--status``, ``--reject``, ``--approve`` and ``--approve-all`` did; the flags still do
    it too, after one line naming the command."""
    inbox, port = smtp_server
    path = _site(tmp_path, database_url, port)
    assert _send(path).exit_code == 0  # issue 1, held

    command, flag = _send(path, "status", "--json"), _send(path, "--status", "--json")
    assert command.exit_code == flag.exit_code == 0
    assert command.stdout == flag.stdout and json.loads(command.stdout)["held"]
    assert command.stderr == ""
    assert flag.stderr == "syndicate: send --status is deprecated: use `send status --json`\n"
    table = _send(path, "status")
    assert table.stdout == _send(path, "--status").stdout and "held for approval" in table.stdout

    result = _send(path, "reject", "1")
    assert result.exit_code == 0, result.output
    assert result.stderr == "issue 1 rejected: its content may be issued again\n"
    assert _send(path, "reject", "1").exit_code == 1  # no longer held
    assert _send(path).exit_code == 0  # the same content: issue 2, held
    result = _send(path, "approve", "--all")
    assert result.exit_code == 0, result.output
    assert "issue 2 (en-cost) approved" in result.stderr and "deprecated" not in result.stderr
    assert inbox.counts() == {EDITOR: 2, "a@example.com": 1, "b@example.com": 1}
    assert _send(path, "approve", "2").exit_code == 1  # sent, so no longer held


def test_a_held_issue_expires_unsent_and_the_next_shows_what_changed(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    path = _site(tmp_path, database_url, port, "approval_expires_days = 3")
    config = load_config(path)
    store = open_store(database_url)
    mailer = SmtpMailer.from_url(config.smtp.url)
    first = issuing.send_digests(config, NOW, mailer=mailer, store=store)
    assert [h[:3] for h in first.held] == [(1, "en-cost", 2)]
    assert issuing.approve_issue(config, store, 1, NOW) is not None
    issuing.send_digests(config, NOW, mailer=mailer, store=store, issue=False)
    assert inbox.counts() == {EDITOR: 1, "a@example.com": 1, "b@example.com": 1}

    # A revised piece-1 and a new piece: held, then left past approval_expires_days.
    articles = tmp_path / "articles"
    write_articles(articles, 1, newest=date(2025, 12, 16), slug="fresh")
    revised = articles / "en-piece-0001.txt"
    lines = revised.read_text("utf-8").split("\n")
    lines[2] = "Updated December 16, 2025"
    revised.write_text("\n".join(lines) + "\nA paragraph added in revision.\n", "utf-8")
    later = NOW + timedelta(days=1)
    second = issuing.send_digests(config, later, mailer=mailer, store=store)
    assert [h[:3] for h in second.held] == [(2, "en-cost", 2)]
    held = store.issues.held_issues()[0]
    assert store.issues.issue_changes(held) == {
        "added": ["en/fresh-0"],
        "revised": ["en/piece-1"],
        "removed": ["en/piece-0"],
    }

    stale = later + timedelta(days=3, minutes=1)
    third = issuing.send_digests(config, stale, mailer=mailer, store=store)
    assert third.expired == [(2, "en-cost")]
    assert store.issues.issue(2).state == "expired"
    assert {d.status for d in store.ledger.deliveries(issue_id=2)} == {"skipped"}
    # its content was never sent: it comes again, held for a fresh look
    assert [h[:2] for h in third.held] == [(3, "en-cost")]
    assert inbox.counts() == {EDITOR: 3, "a@example.com": 1, "b@example.com": 1}
    store.close()


def test_an_approval_after_the_expiry_is_refused_and_the_issue_expires(
    tmp_path: Path, database_url: str, smtp_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, port = smtp_server
    path = _site(tmp_path, database_url, port, "approval_expires_days = 3")
    config = load_config(path)
    store = open_store(database_url)
    issuing.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store)
    assert [i.id for i in store.issues.held_issues()] == [1]

    later = NOW + timedelta(days=3, minutes=1)
    monkeypatch.setattr("syndicate.cli.send.wall_clock", lambda: later)
    result = _send(path, "approve", "1")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "issue 1 (en-cost) not approved: held since 2025-12-15 08:00 UTC, longer than "
        "email.approval_expires_days (3), so it expired unsent"
    ]
    assert inbox.counts() == {EDITOR: 1}  # the test copy alone: nobody got it stale
    assert store.issues.issue(1).state == "expired"
    assert {d.status for d in store.ledger.deliveries(issue_id=1)} == {"skipped"}
    assert _send(path, "approve", "1").exit_code == 1  # no longer held
    assert _status(path)["bounces"] == {"permanent": 0, "temporary": 0, "complaint": 0}
    store.close()


def test_several_issues_are_approved_and_rejected_at_once_each_with_its_line(
    tmp_path: Path, database_url: str, smtp_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, port = smtp_server
    path = _site(tmp_path, database_url, port)
    config = load_config(path)
    store = open_store(database_url)
    for address, audience in [("c@example.com", "strategy"), ("d@example.com", "ecosystem")]:
        store.subscribers.add_subscriber(
            address, "en", [audience], status="active", consent_source="t", now=NOW
        )
    # issue 1 is held first, issues 2 and 3 six days later
    mailer = SmtpMailer.from_url(config.smtp.url)
    issuing.send_digests(config, NOW, mailer=mailer, store=store, audiences=["cost"])
    issuing.send_digests(config, NOW + timedelta(days=6), mailer=mailer, store=store)
    held = {i.id: i.key for i in store.issues.held_issues()}
    assert held == {1: "en-cost", 2: "en-ecosystem", 3: "en-strategy"}
    later = NOW + timedelta(days=7, minutes=1)
    monkeypatch.setattr("syndicate.cli.send.wall_clock", lambda: later)

    # the deprecated flags, which act at once: a note for each names its command
    result = _send(path, "--reject", "3", "4", "--approve", "1", "2", "9")
    assert result.exit_code == 2, result.output  # the worst of the refusals: issue 1's expiry
    lines = result.stderr.splitlines()
    assert lines[:7] == [
        "syndicate: send --reject is deprecated: use `send reject 3 4`",
        "syndicate: send --approve is deprecated: use `send approve 1 2 9`",
        "issue 3 rejected: its content may be issued again",
        "issue 4 is not held: not rejected",
        "issue 1 (en-cost) not approved: held since 2025-12-15 08:00 UTC, longer than "
        "email.approval_expires_days (7), so it expired unsent",
        "issue 2 (en-ecosystem) approved",
        "issue 9 is not held: not approved",
    ]
    # one test copy per send and language: issues 2 and 3 were held by the same send
    assert inbox.counts() == {EDITOR: 2, "d@example.com": 1}
    assert {i: store.issues.issue(i).state for i in held} == {
        1: "expired",
        2: "issued",
        3: "rejected",
    }

    # one id still works, and one line each
    issuing.send_digests(config, NOW + timedelta(days=7), mailer=mailer, store=store)
    again = {i.id for i in store.issues.held_issues()}
    assert len(again) == 2
    first, second = sorted(again)
    result = _send(path, f"--approve={first}", str(second))
    assert result.exit_code == 0, result.output
    assert [line for line in result.stderr.splitlines() if "approved" in line] == [
        f"issue {first} (en-cost) approved",
        f"issue {second} (en-strategy) approved",
    ]
    everyone = {"a@example.com": 1, "b@example.com": 1, "c@example.com": 1, "d@example.com": 1}
    assert inbox.counts() == {EDITOR: 3, **everyone}  # the two held again: one copy
    store.close()
