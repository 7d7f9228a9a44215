"""send_digests end to end: articles → issues → one signed message per reader at a real server."""

from __future__ import annotations

import base64
import re
import shutil
from datetime import date, timedelta
from email import message_from_bytes
from email.policy import default
from pathlib import Path

import dkim
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from syndicate import pipeline
from syndicate.cli import default_jobs, main
from syndicate.config import DigestJob, load_config, parse_config
from syndicate.deliver import SmtpMailer
from syndicate.store import open_store
from syndicate.tokens import UNSUBSCRIBE, read_token, secret_key
from tests.conftest import ARTICLES, write_archive
from tests.sending import NOW


def test_each_reader_gets_one_signed_message_and_a_rerun_sends_nothing(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "dkim.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    config = parse_config(
        {
            "site": {"articles": str(ARTICLES), "base_url": "https://news.example.org"},
            "state": {"database": database_url},
            "email": {
                "sender": "News <digest@news.example.org>",
                "dkim_selector": "s1",
                "dkim_key_file": "dkim.pem",
            },
            "smtp": {"url": f"smtp://127.0.0.1:{port}", "retry_backoff": 0},
        },
        root=tmp_path,
        source="(test)",
        env={},
    )
    store = open_store(config.database_url)
    for email, lang, audiences in [
        ("a@example.com", "en", ["cost"]),
        ("b@example.com", "en", ["cost"]),
        ("c@example.com", "nl", ["cost", "strategy", "architects"]),
    ]:
        store.add_subscriber(email, lang, audiences, status="active", consent_source="t", now=NOW)
    mailer = SmtpMailer.from_url(config.smtp.url)

    report = pipeline.send_digests(config, NOW, mailer=mailer, store=store)
    assert sorted(report.issues) == [("en-cost", 2), ("nl-architects+cost+strategy", 1)]
    assert (report.sent, report.failed, report.uncertain) == (3, 0, 0)
    assert inbox.counts() == {"a@example.com": 1, "b@example.com": 1, "c@example.com": 1}

    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)
    secret = secret_key(config)
    for rcpt, data in inbox.received:
        assert dkim.verify(data, dnsfunc=lambda name, timeout=5: record)
        head = data.split(b"\r\n\r\n")[0].decode().replace("\r\n", "\n")
        assert re.search(r"^Message-ID: <digest\.\d+\.\d+@news\.example\.org>$", head, re.M)
        assert "List-Unsubscribe-Post: List-Unsubscribe=One-Click" in head
        token = re.search(r"List-Unsubscribe: <https://news\.example\.org/u/([\w-]+)>", head)[1]
        assert store.subscriber_by_id(read_token(secret, UNSUBSCRIBE, token)).email == rcpt

    again = pipeline.send_digests(config, NOW, mailer=mailer, store=store)
    assert again.issues == [] and again.sent == 0 and len(inbox.received) == 3
    store.close()


# --- windows, the cap, and one group failing -------------------------------------------------


def write_config(tmp_path: Path, database_url: str, port: int, articles: Path, **extra) -> Path:
    lines = [
        "[site]",
        f'articles = "{articles}"',
        'base_url = "https://news.example.org"',
        *extra.pop("site", []),
        "[state]",
        f'database = "{database_url}"',
        "[email]",
        'sender = "News <digest@news.example.org>"',
        *extra.pop("email", []),
        "[smtp]",
        f'url = "smtp://127.0.0.1:{port}"',
        "retry_backoff = 0",
        *extra.pop("rest", []),
    ]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def bodies(inbox) -> dict[str, str]:
    """Each recipient's plain-text part (the last message each got)."""
    return {
        m["To"]: next(p for p in m.walk() if p.get_content_type() == "text/plain")
        .get_content()
        .replace("\r\n", "\n")
        for m in (message_from_bytes(data, policy=default) for _, data in inbox.received)
    }


def listed_pieces(text: str, slug: str = "piece") -> list[int]:
    return [int(n) for n in re.findall(rf"\({slug}\s+(\d+)\)", text)]


def test_each_group_gets_what_is_new_since_its_last_issue(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    archive = write_archive(tmp_path / "articles", 300, newest=date(2025, 12, 11))
    config = load_config(write_config(tmp_path, database_url, port, archive))
    store = open_store(config.database_url)
    for email in ("a@example.com", "b@example.com"):
        store.add_subscriber(email, "en", ["cost"], status="active", consent_source="t", now=NOW)
    mailer = SmtpMailer.from_url(config.smtp.url)

    # A new group's first issue: the newest ten of three hundred, however old, and the rest.
    first = pipeline.send_digests(config, NOW, mailer=mailer, store=store)
    assert first.issues == [("en-cost", 2)] and first.sent == 2 and not first.partial
    text = bodies(inbox)["a@example.com"]
    assert listed_pieces(text) == list(range(10))
    assert "10 new articles in this issue." in text
    assert "And 290 more articles:\nhttps://news.example.org/en/\n" in text
    assert len(store.sent_articles("en", ["cost"])) == 10  # what it listed, nothing else

    # A week later: only what is dated on or after that issue's day and was not in it.
    write_archive(archive, 2, newest=date(2025, 12, 16), slug="fresh")
    later = NOW + timedelta(days=7)
    second = pipeline.send_digests(config, later, mailer=mailer, store=store)
    assert second.issues == [("en-cost", 2)] and len(inbox.received) == 4
    text = bodies(inbox)["b@example.com"]
    assert listed_pieces(text, "fresh") == [0, 1] and listed_pieces(text) == []
    assert "2 new articles since December 15, 2025." in text and "more article" not in text
    assert pipeline.send_digests(config, later, mailer=mailer, store=store).issues == []

    # --since reaches back, still capped, and never repeats what the group had.
    result = CliRunner().invoke(
        main, ["send", "--config", str(tmp_path / "config.toml"), "--since", "2025-11-01"]
    )
    assert result.exit_code == 0, result.output
    text = bodies(inbox)["a@example.com"]
    assert listed_pieces(text) == list(range(10, 20))
    assert "10 new articles since November 1, 2025." in text
    assert "And 21 more articles:" in text  # November 1 to December 1: 31 days, 10 listed
    assert inbox.counts() == {"a@example.com": 3, "b@example.com": 3}
    store.close()


def test_a_first_window_can_be_limited_to_recent_days(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    archive = write_archive(tmp_path / "articles", 300, newest=date(2025, 12, 11), langs=("nl",))
    path = write_config(tmp_path, database_url, port, archive, email=["first_window_days = 7"])
    store = open_store(database_url)
    store.add_subscriber(
        "a@example.com", "nl", ["cost"], status="active", consent_source="t", now=NOW
    )
    config = load_config(path)
    report = pipeline.send_digests(
        config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store
    )
    assert report.sent == 1
    text = bodies(inbox)["a@example.com"]
    assert listed_pieces(text) == [0, 1, 2, 3]  # December 8 to 11
    assert "4 nieuwe artikelen sinds 8 december 2025." in text and "En nog" not in text
    store.close()


FRENCH = [
    "[languages.fr]",
    'name = "Français"',
    'date_line = ["Mis à jour le"]',
    'takeaways = ["Points clés"]',
    'references = ["Références"]',
    'audiences = { cost = ["Pour les équipes d\'optimisation des coûts"] }',
]


def french_article(folder: Path) -> None:
    """The English seed with French headings, date line and cost label (and no other
    audience): read as French; no mail catalog exists for it."""
    text = (ARTICLES / "003_f25c1f93821d1bd3.txt").read_text("utf-8").split("\nSEO Elements")[0]
    lines = [
        line
        for line in text.split("\n")
        if not (line.startswith("For ") and ": - " in line)
        or line.startswith("For cost optimization teams:")
    ]
    text = "\n".join(lines)
    for english, french in [
        ("Updated December 11, 2025", "Mis à jour le 11 décembre 2025"),
        ("\nKey takeaways\n", "\nPoints clés\n"),
        ("\nReferences\n", "\nRéférences\n"),
        ("For cost optimization teams:", "Pour les équipes d'optimisation des coûts:"),
    ]:
        text = text.replace(english, french)
    (folder / "fr.txt").write_text(text, "utf-8")


def test_a_group_that_cannot_be_rendered_never_stops_the_others(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    folder = tmp_path / "articles"
    shutil.copytree(ARTICLES, folder)
    french_article(folder)
    path = write_config(
        tmp_path, database_url, port, folder,
        site=['languages = ["en", "nl", "fr"]'], rest=FRENCH,
    )  # fmt: skip
    store = open_store(database_url)
    for email, lang, audiences in [
        ("en@example.com", "en", ["cost"]),
        ("fr@example.com", "fr", ["cost"]),
        ("nl@example.com", "nl", ["cost", "strategy"]),
    ]:
        store.add_subscriber(email, lang, audiences, status="active", consent_source="t", now=NOW)

    dry = CliRunner().invoke(main, ["send", "--config", str(path), "--dry-run"])
    assert dry.exit_code == 1
    assert "would issue en-cost to 1 reader(s)" in dry.stderr
    assert "would issue nl-cost+strategy to 1 reader(s)" in dry.stderr
    assert "would not issue fr-cost to 1 reader(s): cannot render 'fr' digests" in dry.stderr
    assert inbox.received == [] and store.last_issue("en", ["cost"]) is None

    run = CliRunner().invoke(main, ["send", "--config", str(path)])
    assert run.exit_code == 1  # partial
    assert "not issued fr-cost to 1 reader(s): cannot render 'fr' digests" in run.stderr
    assert "fr/LC_MESSAGES/messages.po" in run.stderr
    assert "partial run: 1 group(s) not issued" in run.stderr
    assert inbox.counts() == {"en@example.com": 1, "nl@example.com": 1}
    assert store.last_issue("fr", ["cost"]) is None
    # A scheduled send says so too: its run is partial, and the log line names the group.
    config = load_config(path)
    report = default_jobs(config).send_digest(DigestJob(name="weekly"), NOW)
    assert not report.complete and report.counts["refused"] == 1
    assert report.reason.startswith("fr-cost: cannot render 'fr' digests")
    assert inbox.counts() == {"en@example.com": 1, "nl@example.com": 1}
    store.close()


def test_the_digest_command_previews_the_next_issue_of_a_group(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    archive = write_archive(tmp_path / "articles", 30, newest=date(2025, 12, 11))
    path = write_config(tmp_path, database_url, port, archive)
    store = open_store(database_url)
    store.add_subscriber("a@example.com", "en", ["cost"], status="active", consent_source="t",
                         now=NOW)  # fmt: skip
    out = tmp_path / "preview"

    def digest(*args: str):
        return CliRunner().invoke(
            main, ["digest", "--config", str(path), "--lang", "en", "--audience", "cost",
                   "--out", str(out), *args],
        )  # fmt: skip

    first = digest()
    assert first.exit_code == 0, first.output
    preview = (out / "en-cost.txt").read_text("utf-8")
    assert listed_pieces(preview) == list(range(10)) and "And 20 more articles:" in preview
    config = load_config(path)
    pipeline.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store)
    assert bodies(inbox)["a@example.com"].split("\n-- \n")[0] == preview.split("\n-- \n")[0]
    # Once it went out, nothing is new for that group; --since shows a window by hand.
    (out / "en-cost.txt").unlink()
    after = digest()
    assert after.exit_code == 0
    assert "nothing new for en / cost in its window (see --since)" in after.stdout
    assert not (out / "en-cost.txt").exists()
    by_hand = digest("--since", "2025-11-20")
    assert by_hand.exit_code == 0
    assert listed_pieces((out / "en-cost.txt").read_text("utf-8")) == list(range(10, 20))
    store.close()


def test_a_window_over_the_size_limit_is_sent_never_refused(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    archive = write_archive(tmp_path / "articles", 300, newest=date(2025, 12, 11))
    path = write_config(tmp_path, database_url, port, archive, email=["max_articles = 1000"])
    config = load_config(path)
    store = open_store(database_url)
    store.add_subscriber("all@example.com", "en", list(config.audiences), status="active",
                         consent_source="t", now=NOW)  # fmt: skip
    report = pipeline.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url),
                                   store=store)  # fmt: skip
    assert (report.sent, report.refused) == (1, [])
    [message] = [message_from_bytes(data, policy=default) for _, data in inbox.received]
    page = next(p for p in message.walk() if p.get_content_type() == "text/html").get_content()
    assert len(page.encode()) < 102_000 - 10_000  # under Gmail's clipping, with a margin
    listed = store.sent_articles("en", config.audiences)
    assert 5 < len(listed) < 300  # the issue records what it listed, the newest
    assert set(listed) == {("en", f"piece-{n}") for n in range(len(listed))}
    assert f"And {300 - len(listed)} more articles" in page
    store.close()
