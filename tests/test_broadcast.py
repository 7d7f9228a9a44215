"""syndicate broadcast: one article now, as an issue of its own, to every reader of its language,
once each however often it runs, through approval and the ledger; delivered to a real SMTP
server and parsed back."""

from __future__ import annotations

from collections import Counter
from datetime import date
from email.message import EmailMessage
from pathlib import Path

from click.testing import CliRunner, Result

from syndicate.cli import main
from syndicate.config import load_config
from syndicate.state import open_store
from tests.conftest import write_articles
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
        "1 reader(s) who came since get it now" in late.stderr
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
