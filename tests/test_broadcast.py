"""syndicate broadcast: one article now, as an issue of its own, to every reader of its language,
once each however often it runs, through approval and the ledger; delivered to a real SMTP
server and parsed back."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import date
from email.message import EmailMessage
from pathlib import Path

from click.testing import CliRunner, Result

from syndicate.cli import main
from syndicate.config import load_config
from syndicate.state import open_store
from tests.conftest import ROOT, write_articles
from tests.sending import NOW

EDITOR = "editor@news.example.org"


def _site(tmp_path: Path, database_url: str, port: int, **email: object) -> Path:
    write_articles(tmp_path / "articles", 3, newest=date(2025, 12, 14), langs=("en", "nl"))
    extra = "".join(f"{key} = {str(value).lower()}\n" for key, value in email.items())
    toml = tmp_path / "config.toml"
    toml.write_text(
        '[site]\narticles = "articles"\nbase_url = "https://news.example.org"\n'
        f'[state]\ndatabase = "{database_url}"\n'
        f'[email]\nsender = "News <digest@news.example.org>"\npreview_to = "{EDITOR}"\n{extra}'
        f'[smtp]\nurl = "smtp://127.0.0.1:{port}"\nretry_backoff = 0\n'
    )
    store = open_store(load_config(toml, env={}).database_url)
    for address, lang, audiences in [
        ("a@example.com", "en", ["cost"]),
        ("b@example.com", "en", ["architects"]),
        ("c@example.com", "nl", ["cost"]),
        ("d@example.com", "en", ["cost", "strategy"]),
    ]:
        store.subscribers.add_subscriber(
            address, lang, audiences, status="active", consent_source="t", now=NOW
        )
    store.close()
    return toml


def _run(toml: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--config", str(toml)])


def _received(inbox, since: int) -> dict[str, EmailMessage]:
    return {str(m["To"]): m for m in inbox.messages[since:]}


def test_each_reader_of_the_language_gets_the_article_once(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    toml = _site(tmp_path, database_url, port)
    assert _run(toml, "send").exit_code == 0
    assert len(inbox.received) == 4  # each reader's first digest

    dry = _run(toml, "broadcast", "en/piece-1", "--dry-run")
    assert dry.exit_code == 0 and "would issue en-cost.piece-1 to 1 reader(s)" in dry.stderr
    assert len(inbox.received) == 4

    done = _run(toml, "broadcast", "en/piece-1")
    assert done.exit_code == 0, done.stderr
    got = _received(inbox, 4)
    assert sorted(got) == ["a@example.com", "b@example.com", "d@example.com"]
    for message in got.values():
        assert str(message["Subject"]).endswith("(piece 1)")
        body = message.get_body(("plain",))
        assert body is not None and "https://news.example.org/en/piece-1/" in body.get_content()

    again = _run(toml, "broadcast", "en/piece-1")
    assert again.exit_code == 0
    assert "en-cost.piece-1: already broadcast to 1 reader(s), not again" in again.stderr
    assert len(inbox.received) == 7

    # By slug, both languages; --audience keeps the groups with that audience
    both = _run(toml, "broadcast", "piece-2", "--audience", "cost")
    assert both.exit_code == 0, both.stderr
    assert sorted(_received(inbox, 7)) == ["a@example.com", "c@example.com", "d@example.com"]
    assert Counter(rcpt for rcpt, _ in inbox.received) == {
        "a@example.com": 3,
        "b@example.com": 2,
        "c@example.com": 2,
        "d@example.com": 3,
    }

    # A broadcast is no digest's last issue, and no digest repeats its article
    write_articles(tmp_path / "articles", 1, newest=date(2025, 12, 15), slug="news")
    assert _run(toml, "broadcast", "en/news-0", "--audience", "cost").exit_code == 0
    assert sorted(_received(inbox, 10)) == ["a@example.com", "d@example.com"]
    write_articles(tmp_path / "articles", 1, newest=date(2025, 12, 1), slug="late")
    assert _run(toml, "send").exit_code == 0
    digest = _received(inbox, 12)["a@example.com"]
    text = digest.get_body(("plain",))
    assert text is not None and "/en/late-0/" in text.get_content()
    assert "/en/news-0/" not in text.get_content()
    # the architects' group never had it: its digest carries both
    text = _received(inbox, 12)["b@example.com"].get_body(("plain",))
    assert text is not None and "/en/news-0/" in text.get_content()

    unknown = _run(toml, "broadcast", "en/no-such-piece")
    assert unknown.exit_code == 2 and "no article 'en/no-such-piece'" in unknown.stderr

    # A reader who came since gets it at the next run; the others never again
    store = open_store(load_config(toml, env={}).database_url)
    store.subscribers.add_subscriber(
        "e@example.com", "en", ["cost"], status="active", consent_source="t", now=NOW
    )
    store.close()
    sent = len(inbox.received)
    late = _run(toml, "broadcast", "en/piece-1")
    assert late.exit_code == 0, late.stderr
    assert (
        "en-cost.piece-1: already broadcast to 1 reader(s), not again; "
        "1 reader(s) of the group without it get it now" in late.stderr
    )
    [(rcpt, data)] = inbox.received[sent:]
    assert rcpt == "e@example.com" and b"(piece 1)" in data
    assert _run(toml, "broadcast", "en/piece-1").exit_code == 0
    assert len(inbox.received) == sent + 1


def test_a_broadcast_waits_for_approval_like_any_issue(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    toml = _site(tmp_path, database_url, port, approval=True)
    held = _run(toml, "broadcast", str(tmp_path / "articles" / "nl-piece-0000.txt"))
    assert held.exit_code == 0, held.stderr
    assert "issue 1 (nl-cost.piece-0) held for approval, 1 reader(s)" in held.stderr
    assert [rcpt for rcpt, _ in inbox.received] == [EDITOR]  # its test copy only
    assert _run(toml, "send", "approve", "1").exit_code == 0
    assert [rcpt for rcpt, _ in inbox.received] == [EDITOR, "c@example.com"]
    assert _run(toml, "broadcast", "nl/piece-0").exit_code == 0
    assert len(inbox.received) == 2


def _move(toml: Path, audiences: list[str], *emails: str) -> None:
    """Readers change their audiences on the preferences page: the same rows, the same ids."""
    store = open_store(load_config(toml, env={}).database_url)
    for email in emails:
        reader = store.subscribers.subscriber(email)
        assert reader is not None
        moved = store.subscribers.add_subscriber(
            email, reader.lang, audiences, status="active", consent_source="t", now=NOW
        )
        assert moved.id == reader.id
    store.close()


def _piece_1(inbox) -> Counter[str]:
    return Counter(str(m["To"]) for m in inbox.messages if str(m["Subject"]).endswith("(piece 1)"))


def test_a_rerun_reaches_a_reader_who_moved_into_the_group_and_nobody_twice(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    toml = _site(tmp_path, database_url, port)  # a: en cost, b: en architects, d: en cost+strategy
    first = _run(toml, "broadcast", "en/piece-1", "--audience", "strategy")
    assert first.exit_code == 0, first.stderr
    assert _piece_1(inbox) == {"d@example.com": 1}

    # b (an older reader than d) moves into d's group: a re-run reaches them, once
    _move(toml, ["cost", "strategy"], "b@example.com")
    dry = _run(toml, "broadcast", "en/piece-1", "--audience", "strategy", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert (
        "en-cost+strategy.piece-1: already broadcast to 1 reader(s), not again; "
        "1 reader(s) of the group without it would get it" in dry.stderr
    )
    assert _piece_1(inbox) == {"d@example.com": 1}
    again = _run(toml, "broadcast", "en/piece-1", "--audience", "strategy")
    assert again.exit_code == 0, again.stderr
    assert "1 reader(s) of the group without it get it now" in again.stderr
    assert _piece_1(inbox) == {"d@example.com": 1, "b@example.com": 1}
    assert _run(toml, "broadcast", "en/piece-1", "--audience", "strategy").exit_code == 0
    assert _piece_1(inbox) == {"d@example.com": 1, "b@example.com": 1}

    # a gets it in their own group, then moves into d's: they have had the article
    assert _run(toml, "broadcast", "en/piece-1").exit_code == 0
    assert _piece_1(inbox) == {"d@example.com": 1, "b@example.com": 1, "a@example.com": 1}
    _move(toml, ["cost", "strategy"], "a@example.com")
    last = _run(toml, "broadcast", "en/piece-1")
    assert last.exit_code == 0, last.stderr
    assert "en-cost+strategy.piece-1: already broadcast to 3 reader(s), not again\n" in last.stderr
    assert _piece_1(inbox) == {"d@example.com": 1, "b@example.com": 1, "a@example.com": 1}


def _broadcast(toml: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "syndicate", "broadcast", "en/piece-1", "--audience", "cost"]
    command += ["--config", str(toml)]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_two_reruns_at_once_reach_each_reader_who_moved_in_exactly_once(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    toml = _site(tmp_path, database_url, port)
    with toml.open("a") as config:  # planned a few readers per transaction: many chunks
        config.write("[send]\nbatch_size = 2\nplan_chunk = 4\n")
    movers = [f"m{n}@example.com" for n in range(40)]
    store = open_store(load_config(toml, env={}).database_url)
    for email in movers:
        store.subscribers.add_subscriber(
            email, "nl", ["architects"], status="active", consent_source="t", now=NOW
        )
    store.subscribers.add_subscriber(
        "z@example.com", "en", ["cost"], status="active", consent_source="t", now=NOW
    )
    store.close()
    assert _run(toml, "broadcast", "en/piece-1", "--audience", "cost").exit_code == 0
    assert _piece_1(inbox) == {"a@example.com": 1, "d@example.com": 1, "z@example.com": 1}

    # 40 readers older than z, the group's last, switch to English and into a's and z's group
    store = open_store(load_config(toml, env={}).database_url)
    for email in movers:
        store.subscribers.add_subscriber(
            email, "en", ["cost"], status="active", consent_source="t", now=NOW
        )
    store.close()
    runs = [_broadcast(toml), _broadcast(toml)]
    done = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in done]
    assert _piece_1(inbox) == Counter(
        {"a@example.com": 1, "d@example.com": 1, "z@example.com": 1, **dict.fromkeys(movers, 1)}
    )
    said = [line for _, err in done for line in err.splitlines() if "en-cost.piece-1" in line]
    added = sum(int(line.split("; ")[1].split()[0]) for line in said if "; " in line)
    assert added == len(movers), said
