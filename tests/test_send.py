"""send_digests end to end: articles → issues → one signed message per reader at a real server."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from datetime import date, timedelta
from email import message_from_bytes
from email.policy import default
from pathlib import Path

import dkim
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from syndicate.cli import main
from syndicate.config import Config, DigestJob, load_config, parse_config
from syndicate.errors import DeliveryError
from syndicate.schedule.jobs import default_jobs, refused_reason
from syndicate.sending import issuing, transports
from syndicate.sending.loop import deliver
from syndicate.sending.transports import SmtpMailer
from syndicate.state import open_store
from syndicate.state.locks import run_lock
from syndicate.subscribers import read_subscriber_csv
from syndicate.tokens import UNSUBSCRIBE, read_token, secret_key
from tests.conftest import ARTICLES, write_articles
from tests.databases import POSTGRES_URL
from tests.sending import NOW, add_readers, compose, mailer, make_issue, options


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
        store.subscribers.add_subscriber(
            email, lang, audiences, status="active", consent_source="t", now=NOW
        )
    mailer = SmtpMailer.from_url(config.smtp.url)

    report = issuing.send_digests(config, NOW, mailer=mailer, store=store)
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
        assert (
            store.subscribers.subscriber_by_id(read_token(secret, UNSUBSCRIBE, token)).email == rcpt
        )

    again = issuing.send_digests(config, NOW, mailer=mailer, store=store)
    assert again.issues == [] and again.sent == 0 and len(inbox.received) == 3
    store.close()


# -- international addresses ---------------------------------------------------------------


def _config(
    tmp_path: Path, database_url: str, port: int | None, articles: Path = ARTICLES, **smtp
) -> Config:
    data: dict = {
        "site": {"articles": str(articles), "base_url": "https://news.example.org"},
        "state": {"database": database_url},
        "email": {"sender": "News <digest@news.example.org>"},
        "smtp": {"retry_backoff": 0, **smtp},
    }
    if port is not None:
        data["smtp"]["url"] = f"smtp://127.0.0.1:{port}"
    return parse_config(data, root=tmp_path, source="(test)", env={})


def _subscribe(store, *emails: str) -> None:
    for email in emails:
        store.subscribers.add_subscriber(
            email, "en", ["cost"], status="active", consent_source="t", now=NOW
        )


INTERNATIONAL = ("idn@bücher.example", "josé@bücher.example", "plain@example.com")


def test_international_addresses_go_out_in_their_smtp_form(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    config = _config(tmp_path, database_url, port)
    store = open_store(config.database_url)
    _subscribe(store, *INTERNATIONAL)
    report = issuing.send_digests(config, NOW, mailer=transports.open_mailer(config), store=store)
    store.close()
    assert (report.sent, report.failed, report.uncertain) == (3, 0, 0)
    assert inbox.counts() == {
        "idn@xn--bcher-kva.example": 1,
        "josé@xn--bcher-kva.example": 1,
        "plain@example.com": 1,
    }
    heads = {rcpt: data.split(b"\r\n\r\n")[0].split(b"\r\n") for rcpt, data in inbox.received}
    assert b"To: idn@xn--bcher-kva.example" in heads["idn@xn--bcher-kva.example"]
    # RFC 6532: the address itself in UTF-8, as the SMTPUTF8 envelope carries it
    assert "To: josé@xn--bcher-kva.example".encode() in heads["josé@xn--bcher-kva.example"]
    assert all(line.isascii() for line in heads["idn@xn--bcher-kva.example"])


def test_without_smtputf8_only_the_reader_who_needs_it_fails(
    tmp_path: Path, database_url: str, ascii_smtp_server
) -> None:
    inbox, port = ascii_smtp_server
    config = _config(tmp_path, database_url, port)
    store = open_store(config.database_url)
    _subscribe(store, *INTERNATIONAL)
    report = issuing.send_digests(config, NOW, mailer=transports.open_mailer(config), store=store)
    assert (report.sent, report.failed, report.uncertain) == (2, 1, 0)
    [(email, reason)] = report.failures
    assert email == "josé@bücher.example"
    assert reason == (
        f"not sent: 127.0.0.1:{port} does not offer SMTPUTF8, which an address with a "
        "non-ASCII part before @ needs"
    )
    assert (
        store.subscribers.subscriber("josé@bücher.example").bounces == 0
    )  # not the mailbox's fault
    store.close()
    assert set(inbox.counts()) == {"idn@xn--bcher-kva.example", "plain@example.com"}


def test_an_import_warns_about_addresses_that_need_smtputf8(
    tmp_path: Path, database_url: str
) -> None:
    text = "email,lang,audiences\njosé@bücher.example,en,cost\nidn@bücher.example,en,cost\n"
    rows, problems = read_subscriber_csv(text, "readers.csv", langs=["en"], known=["cost"])
    assert [r.email for r in rows] == ["josé@bücher.example", "idn@bücher.example"]
    warning = (
        "warning: josé@bücher.example: the part before @ is not ASCII: only mail servers that "
        "offer SMTPUTF8 can deliver to it"
    )
    assert [str(p) for p in problems] == [f"readers.csv:2: {warning}"]

    (tmp_path / "readers.csv").write_text(text, "utf-8")
    path = _config_file(tmp_path, database_url, 25)
    command = ["subscribers", "import", str(tmp_path / "readers.csv"), "--config", str(path)]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0 and result.stdout == "2 added, 0 updated, 0 unchanged\n"
    assert result.stderr == f"{tmp_path / 'readers.csv'}:2: {warning}\n"


# -- sample readers ------------------------------------------------------------------------


def test_sample_readers_are_never_sent_through_a_real_server(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    first = _config(tmp_path, database_url, None)
    store = open_store(first.database_url)
    added = issuing.add_sample_readers(first, store, NOW)
    samples = list(store.subscribers.all())
    make_issue(store, samples[:2], content="left pending by an earlier run")
    # a group with no issue yet (en-cost had one just now: its window is empty)
    store.subscribers.add_subscriber(
        "real@example.org", "en", ["strategy"], status="active", consent_source="t", now=NOW
    )

    config = _config(tmp_path, database_url, port)
    report = issuing.send_digests(config, NOW, mailer=transports.open_mailer(config), store=store)
    assert report.samples == added and report.sent == 1
    assert inbox.counts() == {"real@example.org": 1}
    skipped = store.ledger.deliveries("skipped")
    assert [d.email for d in skipped] == [s.email for s in samples[:2]]
    assert {d.reply for d in skipped} == {"sample reader: not sent through an SMTP server"}
    store.close()

    path = _config_file(tmp_path, database_url, port)
    result = CliRunner().invoke(main, ["send", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{added} sample reader(s) (added by the first `syndicate run --once`) are not" in (
        result.stderr
    )
    result = CliRunner().invoke(main, ["subscribers", "remove", "--samples", "--config", str(path)])
    assert result.output == f"removed {added} sample reader(s)\n"
    store = open_store(config.database_url)
    assert [s.email for s in store.subscribers.all()] == ["real@example.org"]
    store.close()


# -- the send command ----------------------------------------------------------------------


def _config_file(tmp_path: Path, database_url: str, port: int, *, pool_size: int = 1) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[site]\narticles = "{ARTICLES}"\nbase_url = "https://news.example.org"\n'
        f'[state]\ndatabase = "{database_url}"\n'
        f'[email]\nsender = "News <digest@news.example.org>"\n'
        f'[smtp]\nurl = "smtp://127.0.0.1:{port}"\npool_size = {pool_size}\nretry_backoff = 0\n',
        encoding="utf-8",
    )
    return path


def _with_uncertain(tmp_path: Path, database_url: str, smtp_server) -> tuple[Path, list[int]]:
    """Five readers, two of whose messages were cut off after their end of data."""
    inbox, port = smtp_server
    store = open_store(database_url)
    make_issue(store, add_readers(store, 5))
    for n in (1, 3):
        inbox.script[("accepted", f"reader{n}@example.com")] = ["DROP"]
    deliver(store, mailer(port), compose, options(workers=1), NOW)
    ids = [d.id for d in store.ledger.deliveries("uncertain")]
    store.close()
    assert len(ids) == 2
    return _config_file(tmp_path, database_url, port), ids


def test_send_status_fits_the_terminal_and_has_json(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    path, ids = _with_uncertain(tmp_path, database_url, smtp_server)
    for width in (60, 100):
        result = CliRunner().invoke(
            main, ["send", "--status", "--config", str(path)], env={"COLUMNS": str(width)}
        )
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert max(map(len, lines)) <= width and "reader1@" in result.output
    result = CliRunner().invoke(main, ["send", "--status", "--json", "--config", str(path)])
    status = json.loads(result.stdout)
    [issue] = status["issues"]
    assert issue["key"] == "en-cost"
    assert issue["deliveries"] == {
        "held": 0,
        "pending": 0,
        "sending": 0,
        "sent": 3,
        "failed": 0,
        "uncertain": 2,
        "skipped": 0,
    }
    assert [(u["id"], u["email"], u["issue"]) for u in status["uncertain"]] == [
        (ids[0], "reader1@example.com", issue["id"]),
        (ids[1], "reader3@example.com", issue["id"]),
    ]


def test_resend_refuses_unknown_ids_and_ids_that_are_not_uncertain(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    path, ids = _with_uncertain(tmp_path, database_url, smtp_server)
    store = open_store(database_url)
    [sent, *_] = store.ledger.deliveries("sent")
    store.close()
    command = ["send", "--config", str(path), "resend", str(ids[0])]
    result = CliRunner().invoke(main, [*command, "999", str(sent.id)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "no such delivery: 999",
        f"not uncertain, so not resent: {sent.id} (sent)",
        "nothing queued",
    ]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0 and "1 uncertain delivery(ies) queued again" in result.stderr
    store = open_store(database_url)
    assert [d.id for d in store.ledger.deliveries("pending")] == [ids[0]]
    assert [d.id for d in store.ledger.deliveries("uncertain")] == [ids[1]]
    store.close()


def test_resend_uncertain_requeues_them_all(tmp_path: Path, database_url: str, smtp_server) -> None:
    inbox, _ = smtp_server
    path, ids = _with_uncertain(tmp_path, database_url, smtp_server)
    store = open_store(database_url)
    [issue_id] = {d.issue_id for d in store.ledger.deliveries()}
    store.close()
    other = ["send", "--config", str(path), "--resend-uncertain", "--issue", str(issue_id + 1)]
    assert "0 uncertain delivery(ies) of issue" in CliRunner().invoke(main, other).stderr
    result = CliRunner().invoke(main, ["send", "--config", str(path), "--resend-uncertain"])
    assert result.exit_code == 0 and "2 uncertain delivery(ies) queued again" in result.stderr
    store = open_store(database_url)
    assert sorted(d.id for d in store.ledger.deliveries("pending")) == ids
    deliver(store, mailer(smtp_server[1]), compose, options(), NOW)
    store.close()
    # the operator decided they had not arrived: the server now has them twice, as asked
    assert inbox.counts()["reader1@example.com"] == 2


def test_send_resend_uncertain_acts_as_the_flag_did_with_no_note(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    path, ids = _with_uncertain(tmp_path, database_url, smtp_server)
    send = ["send", "--config", str(path)]
    flag = CliRunner().invoke(main, [*send, "--resend-uncertain", "--issue", "999"])
    command = CliRunner().invoke(main, [*send, "resend", "--uncertain", "--issue", "999"])
    assert flag.exit_code == command.exit_code == 0
    assert command.stderr == "0 uncertain delivery(ies) of issue 999 queued again\n"
    assert flag.stderr == (
        "syndicate: send --resend-uncertain is deprecated: use `send resend --uncertain "
        "--issue 999`\n" + command.stderr
    )
    result = CliRunner().invoke(main, [*send, "resend", "--uncertain"])
    assert (result.exit_code, result.stderr) == (0, "2 uncertain delivery(ies) queued again\n")
    store = open_store(database_url)
    assert sorted(d.id for d in store.ledger.deliveries("pending")) == ids
    store.close()


def _run_sessions(url: str) -> list[int]:
    """Server pids of every session holding a send run's liveness lock in this schema."""
    engine = sa.create_engine(url)
    with engine.connect() as db:
        key = run_lock(db)
        pids = db.execute(
            sa.text("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::int = :key"),
            {"key": key},
        ).scalars()
        pids = list(pids)
    engine.dispose()
    return pids


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # sessions: PostgreSQL's
def test_a_lost_database_connection_ends_send_with_one_line(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    path = _config_file(tmp_path, database_url, port)
    store = open_store(database_url)
    _subscribe(store, *(f"reader{n}@example.com" for n in range(6)))
    store.close()
    inbox.script[("data", "reader2@example.com")] = ["HOLD"]

    def cut_off() -> None:
        if inbox.holding.wait(60):
            pids = _run_sessions(database_url)
            engine = sa.create_engine(POSTGRES_URL)
            with engine.connect() as db:
                for pid in pids:
                    db.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            engine.dispose()
        inbox.release.set()

    killer = threading.Thread(target=cut_off)
    killer.start()
    result = CliRunner().invoke(main, ["send", "--config", str(path)])
    killer.join()
    assert result.exit_code == 1
    assert len(result.stderr.splitlines()) == 1, result.stderr
    line = result.stderr.strip()
    assert line.startswith("syndicate: database connection lost (")
    assert line.endswith("; 3 sent, 3 left for the next run")
    assert inbox.counts() == {f"reader{n}@example.com": 1 for n in range(3)}


def test_sigterm_mid_send_drains_and_exits_0_then_a_rerun_sends_the_rest(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    path = _config_file(tmp_path, database_url, port, pool_size=3)
    store = open_store(database_url)
    readers = [f"reader{n}@example.com" for n in range(20)]
    _subscribe(store, *readers)
    store.close()
    inbox.script[("data", "reader4@example.com")] = ["HOLD"]  # slow: its 250 is kept back
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNDICATE_")}
    command = [sys.executable, "-m", "syndicate", "send", "--config", str(path)]
    sender = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    stopping = threading.Event()

    def read() -> None:
        for line in sender.stderr:
            lines.append(line)
            if line.startswith("stopping:"):
                stopping.set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert inbox.holding.wait(60), "".join(lines)
        sender.send_signal(signal.SIGTERM)
        assert stopping.wait(60), "".join(lines)
        inbox.release.set()  # the message on the wire finishes after the stop
        assert sender.wait(60) == 0, "".join(lines)
    finally:
        inbox.release.set()
        if sender.poll() is None:
            sender.kill()
        reader.join()
    summary = lines[-1]
    assert summary.startswith("stopped: sent "), "".join(lines)
    arrived = inbox.counts()
    store = open_store(database_url)
    assert {d.email for d in store.ledger.deliveries("sent")} == set(
        arrived
    )  # every reply recorded
    assert "reader4@example.com" in arrived and max(arrived.values()) == 1
    assert store.ledger.deliveries("uncertain") == [] and len(arrived) < len(readers)
    assert {d.status for d in store.ledger.deliveries()} == {"sent", "pending"}
    store.close()

    rerun = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert inbox.counts() == dict.fromkeys(readers, 1)  # nobody twice, nobody skipped


def test_an_unreachable_server_ends_send_with_one_line(tmp_path: Path, database_url: str) -> None:
    from tests.mailserver import free_port

    port = free_port()  # nobody listens there
    path = _config_file(tmp_path, database_url, port)
    path.write_text(path.read_text("utf-8") + "retries = 1\n", "utf-8")
    store = open_store(database_url)
    _subscribe(store, "a@example.com", "b@example.com")
    store.close()
    result = CliRunner().invoke(main, ["send", "--config", str(path)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"syndicate: cannot reach the SMTP server 127.0.0.1:{port} ([Errno 111] Connection "
        "refused); 0 sent, 2 left for the next run\n"
    )
    result = CliRunner().invoke(main, ["send", "--config", str(path), "--debug"])
    assert isinstance(result.exception, DeliveryError)  # --debug: the traceback, not one line


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
    archive = write_articles(tmp_path / "articles", 300, newest=date(2025, 12, 11))
    config = load_config(write_config(tmp_path, database_url, port, archive))
    store = open_store(config.database_url)
    for email in ("a@example.com", "b@example.com"):
        store.subscribers.add_subscriber(
            email, "en", ["cost"], status="active", consent_source="t", now=NOW
        )
    mailer = SmtpMailer.from_url(config.smtp.url)

    # A new group's first issue: the newest ten of three hundred, however old, and the rest.
    first = issuing.send_digests(config, NOW, mailer=mailer, store=store)
    assert first.issues == [("en-cost", 2)] and first.sent == 2 and not first.partial
    text = bodies(inbox)["a@example.com"]
    assert listed_pieces(text) == list(range(10))
    assert "The newest 10 of 300 new articles." in text
    assert "And 290 more articles:\nhttps://news.example.org/en/\n" in text
    assert len(store.issues.sent_articles("en", ["cost"])) == 10  # what it listed, nothing else

    # A week later: only what is dated on or after that issue's day and was not in it.
    write_articles(archive, 2, newest=date(2025, 12, 16), slug="fresh")
    later = NOW + timedelta(days=7)
    second = issuing.send_digests(config, later, mailer=mailer, store=store)
    assert second.issues == [("en-cost", 2)] and len(inbox.received) == 4
    text = bodies(inbox)["b@example.com"]
    assert listed_pieces(text, "fresh") == [0, 1] and listed_pieces(text) == []
    assert "2 new articles since December 15, 2025." in text and "more article" not in text
    assert issuing.send_digests(config, later, mailer=mailer, store=store).issues == []

    # --since reaches back, still capped, and never repeats what the group had.
    result = CliRunner().invoke(
        main, ["send", "--config", str(tmp_path / "config.toml"), "--since", "2025-11-01"]
    )
    assert result.exit_code == 0, result.output
    text = bodies(inbox)["a@example.com"]
    assert listed_pieces(text) == list(range(10, 20))
    # what it shows of how many (the intro once said "10 new articles since")
    assert "The newest 10 of 31 new articles since November 1, 2025." in " ".join(text.split())
    assert "And 21 more articles:" in text  # November 1 to December 1: 31 days, 10 listed
    assert inbox.counts() == {"a@example.com": 3, "b@example.com": 3}
    store.close()


def test_a_first_window_can_be_limited_to_recent_days(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    archive = write_articles(tmp_path / "articles", 300, newest=date(2025, 12, 11), langs=("nl",))
    path = write_config(tmp_path, database_url, port, archive, email=["first_window_days = 7"])
    store = open_store(database_url)
    store.subscribers.add_subscriber(
        "a@example.com", "nl", ["cost"], status="active", consent_source="t", now=NOW
    )
    config = load_config(path)
    report = issuing.send_digests(
        config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store
    )
    assert report.sent == 1
    text = bodies(inbox)["a@example.com"]
    assert listed_pieces(text) == [0, 1, 2, 3]  # December 8 to 11
    assert "4 nieuwe artikelen sinds 8 december 2025." in text and "En nog" not in text
    store.close()


ITALIAN = [
    "[languages.it]",
    'name = "Italiano"',
    'date_line = ["Aggiornato il"]',
    'takeaways = ["Punti chiave"]',
    'references = ["Riferimenti"]',
    'audiences = { cost = ["Per i team di ottimizzazione dei costi"] }',
]


def italian_article(folder: Path) -> None:
    """The English seed with Italian headings, date line and cost label (and no other
    audience): read as Italian, a language with no mail catalog."""
    text = (ARTICLES / "003_f25c1f93821d1bd3.txt").read_text("utf-8").split("\nSEO Elements")[0]
    lines = [
        line
        for line in text.split("\n")
        if not (line.startswith("For ") and ": - " in line)
        or line.startswith("For cost optimization teams:")
    ]
    text = "\n".join(lines)
    for english, italian in [
        ("Updated December 11, 2025", "Aggiornato il 11 dicembre 2025"),
        ("\nKey takeaways\n", "\nPunti chiave\n"),
        ("\nReferences\n", "\nRiferimenti\n"),
        ("For cost optimization teams:", "Per i team di ottimizzazione dei costi:"),
    ]:
        text = text.replace(english, italian)
    (folder / "it.txt").write_text(text, "utf-8")


def test_a_group_that_cannot_be_rendered_never_stops_the_others(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    folder = tmp_path / "articles"
    shutil.copytree(ARTICLES, folder)
    italian_article(folder)
    path = write_config(
        tmp_path, database_url, port, folder,
        site=['languages = ["en", "nl", "it"]'], rest=ITALIAN,
    )  # fmt: skip
    store = open_store(database_url)
    for email, lang, audiences in [
        ("en@example.com", "en", ["cost"]),
        ("it@example.com", "it", ["cost"]),
        ("nl@example.com", "nl", ["cost", "strategy"]),
    ]:
        store.subscribers.add_subscriber(
            email, lang, audiences, status="active", consent_source="t", now=NOW
        )

    dry = CliRunner().invoke(main, ["send", "--config", str(path), "--dry-run"])
    assert dry.exit_code == 1
    assert "would issue en-cost to 1 reader(s)" in dry.stderr
    assert "would issue nl-cost+strategy to 1 reader(s)" in dry.stderr
    assert "would not issue it-cost to 1 reader(s): cannot render 'it' digests" in dry.stderr
    assert inbox.received == [] and store.issues.last_issue("en", ["cost"]) is None

    run = CliRunner().invoke(main, ["send", "--config", str(path)])
    assert run.exit_code == 1  # partial
    assert "not issued it-cost to 1 reader(s): cannot render 'it' digests" in run.stderr
    assert "it/LC_MESSAGES/messages.po" in run.stderr
    assert "partial run: 1 group(s) not issued" in run.stderr
    assert inbox.counts() == {"en@example.com": 1, "nl@example.com": 1}
    assert store.issues.last_issue("it", ["cost"]) is None
    # A scheduled send says so too: its run is partial, and the log line names the group.
    config = load_config(path)
    report = default_jobs(config).send_digest(DigestJob(name="weekly"), NOW)
    assert not report.complete and report.counts["refused"] == 1
    assert report.reason.startswith("it-cost: cannot render 'it' digests")
    assert inbox.counts() == {"en@example.com": 1, "nl@example.com": 1}
    store.close()


def test_the_reason_of_many_groups_not_rendered_names_the_first_and_counts_the_rest() -> None:
    """Each group not rendered has its own log line; the run's one line names the first and
    counts the others, however many languages lack a catalog."""
    why = "cannot render '{}' digests: its catalog lacks 30 mail message(s)"
    refused = [(f"{lang}-cost", 1, why.format(lang)) for lang in ("bg", "hr", "sk")]
    assert refused_reason(refused[:1]) == f"bg-cost: {why.format('bg')}"
    assert refused_reason(refused) == (
        f"bg-cost: {why.format('bg')}; and 2 more group(s) not rendered, each logged"
    )
    assert refused_reason([]) is None


def test_the_digest_command_previews_the_next_issue_of_a_group(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    inbox, port = smtp_server
    archive = write_articles(tmp_path / "articles", 30, newest=date(2025, 12, 11))
    path = write_config(tmp_path, database_url, port, archive)
    store = open_store(database_url)
    store.subscribers.add_subscriber(
        "a@example.com", "en", ["cost"], status="active", consent_source="t", now=NOW
    )
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
    issuing.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store)
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
    archive = write_articles(tmp_path / "articles", 300, newest=date(2025, 12, 11))
    path = write_config(tmp_path, database_url, port, archive, email=["max_articles = 1000"])
    config = load_config(path)
    store = open_store(database_url)
    store.subscribers.add_subscriber(
        "all@example.com",
        "en",
        list(config.audiences),
        status="active",
        consent_source="t",
        now=NOW,
    )
    report = issuing.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url),
                                   store=store)  # fmt: skip
    assert (report.sent, report.refused) == (1, [])
    [message] = [message_from_bytes(data, policy=default) for _, data in inbox.received]
    page = next(p for p in message.walk() if p.get_content_type() == "text/html").get_content()
    assert len(page.encode()) < 102_000 - 10_000  # under Gmail's clipping, with a margin
    listed = store.issues.sent_articles("en", config.audiences)
    assert 5 < len(listed) < 300  # the issue records what it listed, the newest
    assert set(listed) == {("en", f"piece-{n}") for n in range(len(listed))}
    assert f"And {300 - len(listed)} more articles" in page
    store.close()


def test_a_bullets_emphasis_and_link_arrive_as_html_and_as_written_text(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    """A takeaway written with Markdown emphasis and an address: in the delivered message's
    HTML part they are <strong> and a link, in its text part they stay as the writer wrote."""
    inbox, port = smtp_server
    folder = tmp_path / "articles"
    folder.mkdir()
    english = next(p for p in ARTICLES.iterdir() if b"\n\nUpdated " in p.read_bytes())
    bullet = "Trade-off: requires Neuron SDK adoption"
    written = "**Trade-off:** requires Neuron_SDK adoption (https://example.org/neuron_sdk)"
    text = english.read_text("utf-8")
    assert bullet in text
    (folder / "en.txt").write_text(text.replace(bullet, written), "utf-8")
    config = _config(tmp_path, database_url, port, articles=folder)
    store = open_store(config.database_url)
    _subscribe(store, "a@example.com")
    report = issuing.send_digests(
        config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store
    )
    store.close()
    assert report.sent == 1
    message = message_from_bytes(inbox.received[0][1], policy=default)
    html = message.get_body(("html",)).get_content()
    assert (
        "<li><strong>Trade-off:</strong> requires Neuron_SDK adoption "
        '(<a href="https://example.org/neuron_sdk">https://example.org/neuron_sdk</a>)'
    ) in html
    plain = " ".join(message.get_body(("plain",)).get_content().split())
    assert f"- {written}" in plain
