"""Bounce mail read from an IMAP mailbox (``bounces.imap_url``), against a real IMAP server
(Debian's Dovecot, tests/imapserver.py): by ``bounces process`` without a path and by the
scheduler's job; a message dealt with moves to a folder, none is deleted."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from syndicate.bouncebox import ImapBox
from syndicate.cli import main
from syndicate.config import Config, load_config
from syndicate.schedule.jobs import default_jobs
from syndicate.schedule.plan import BOUNCES_JOB
from syndicate.schedule.scheduler import describe_trigger, job_specs
from syndicate.sending import issuing
from syndicate.sending.transports import SmtpMailer
from syndicate.state import open_store
from tests.conftest import missing_real_part
from tests.imapserver import DOVECOT, PASSWORD, ImapServer, dovecot
from tests.sending import NOW
from tests.test_bounces import fill, site


@pytest.fixture
def imap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ImapServer]:
    if not DOVECOT.exists():
        missing_real_part(f"no Dovecot at {DOVECOT} (apt-get install dovecot-imapd)")
    with dovecot(tmp_path) as server:
        # the test's certificate is the one trusted: TLS is verified as in production
        monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_file))
        yield server


def imap_site(tmp_path: Path, database_url: str, port: int, url: str, every: str = "") -> Config:
    site(tmp_path, database_url, port)
    path = tmp_path / "config.toml"
    extra = f'\n[bounces]\nimap_url = "{url}"\n' + (f'every = "{every}"\n' if every else "")
    path.write_text(path.read_text("utf-8") + extra, "utf-8")
    return load_config(path, env={"SYNDICATE_IMAP_PASSWORD": PASSWORD})


def process(tmp_path: Path, *args: str, password: str = PASSWORD) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        main,
        ["bounces", "process", *args, "--config", str(tmp_path / "config.toml")],
        env={"SYNDICATE_IMAP_PASSWORD": password},
    )
    return result.exit_code, result.stdout, result.stderr


def test_bounces_process_reads_the_imap_folder_and_moves_what_it_dealt_with(
    tmp_path: Path, database_url: str, smtp_server, imap: ImapServer
) -> None:
    inbox, port = smtp_server
    config = imap_site(tmp_path, database_url, port, imap.url())
    store = open_store(config.database_url)
    store.subscribers.add_subscriber(
        "gone@example.com", "en", ["cost"], status="active", consent_source="t", now=NOW
    )
    issuing.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store)
    [delivery] = store.ledger.deliveries()
    mail = {
        name: fill(
            f"{name}.eml",
            return_path=inbox.mail_from["gone@example.com"],
            reader="gone@example.com",
            message_id=delivery.message_id,
        ).replace(b"\r\n", b"\n")
        for name in ("gmail-failed", "human-reply")
    }
    junk = b"Subject: \x00\x01\x02\n\n" + random.Random(29).randbytes(40).replace(b"\r", b"")
    for data in (*mail.values(), junk):
        imap.append(data.replace(b"\n", b"\r\n"))

    code, out, err = process(tmp_path, "--dry-run")
    assert code == 0, out + err
    assert "gone@example.com (by verp): would count" in out
    assert (
        len(imap.folder("INBOX")) == 3
        and store.subscribers.subscriber("gone@example.com").bounces == 0
    )

    code, out, err = process(tmp_path)
    assert code == 0, out + err
    assert "gone@example.com (by verp): counted" in out
    assert "not a bounce (a reply): moved to replies/" in out
    assert err == (
        "3 message(s) read; 1 moved to INBOX.processed; "
        "1 not a bounce, moved to INBOX.replies; 1 unreadable, left in place\n"
    )
    assert store.subscribers.subscriber("gone@example.com").bounces == 1
    # moved byte for byte, none deleted; what is no mail stays for a person to look at
    assert imap.folder("INBOX.processed") == [mail["gmail-failed"].replace(b"\n", b"\r\n")]
    assert imap.folder("INBOX.replies") == [mail["human-reply"].replace(b"\n", b"\r\n")]
    assert len(imap.folder("INBOX")) == 1

    code, out, err = process(tmp_path)  # a rerun finds only what it left
    assert (code, err) == (0, "1 message(s) read; 1 unreadable, left in place\n")
    # a message put back is recognised and changes nothing
    imap.append(imap.folder("INBOX.processed")[0])
    code, out, err = process(tmp_path)
    assert code == 0 and "(by verp): duplicate" in out, out
    assert store.subscribers.subscriber("gone@example.com").bounces == 1
    assert len(imap.folder("INBOX.processed")) == 2
    store.close()


def test_the_scheduler_reads_the_imap_folder_every_period(
    tmp_path: Path, database_url: str, smtp_server, imap: ImapServer
) -> None:
    inbox, port = smtp_server
    config = imap_site(tmp_path, database_url, port, imap.url(), every="2h")
    [spec] = [s for s in job_specs(config, NOW) if s.id == BOUNCES_JOB]
    assert describe_trigger(spec.trigger) == "every 2 hours"
    assert spec.trigger.get_next_fire_time(None, NOW) == NOW + timedelta(hours=2)
    store = open_store(config.database_url)
    store.subscribers.add_subscriber(
        "gone@example.com", "en", ["cost"], status="active", consent_source="t", now=NOW
    )
    issuing.send_digests(config, NOW, mailer=SmtpMailer.from_url(config.smtp.url), store=store)
    [delivery] = store.ledger.deliveries()
    bounce = fill(
        "gmail-failed.eml",
        return_path=inbox.mail_from["gone@example.com"],
        reader="gone@example.com",
        message_id=delivery.message_id,
    )
    imap.append(bounce.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))

    read_bounces = default_jobs(config).read_bounces
    assert read_bounces is not None
    report = read_bounces(NOW)
    assert (report.counts["read"], report.counts["permanent"]) == (1, 1)
    assert store.subscribers.subscriber("gone@example.com").bounces == 1
    assert imap.folder("INBOX") == [] and len(imap.folder("INBOX.processed")) == 1
    assert read_bounces(NOW).counts["read"] == 0
    store.close()


def test_no_imap_job_without_a_mailbox(tmp_path: Path, database_url: str) -> None:
    config = site(tmp_path, database_url, 25)
    assert BOUNCES_JOB not in {s.id for s in job_specs(config, NOW)}
    assert default_jobs(config).read_bounces is None
    code, out, err = process(tmp_path)
    assert code == 2 and "no mailbox: give a Maildir or mbox, or set bounces.imap_url" in out + err


def test_a_refused_login_is_named_and_nothing_moves(
    tmp_path: Path, database_url: str, imap: ImapServer
) -> None:
    imap_site(tmp_path, database_url, 25, imap.url())
    imap.append(b"From: someone@example.com\r\nSubject: hello\r\n\r\nhi\r\n")
    code, out, err = process(tmp_path, password="not the password")
    assert code == 1, out + err
    assert f"imaps://bounces@localhost:{imap.port}/INBOX: " in out + err
    assert "AUTHENTICATIONFAILED" in out + err and "Traceback" not in out + err
    assert PASSWORD not in out + err and len(imap.folder("INBOX")) == 1


def test_a_folder_the_server_does_not_have_is_named(
    tmp_path: Path, database_url: str, imap: ImapServer
) -> None:
    imap_site(tmp_path, database_url, 25, imap.url("Bounces"))
    code, out, err = process(tmp_path)
    assert code == 1 and f"localhost:{imap.port}/Bounces: no such folder" in out + err


@pytest.mark.parametrize(
    ("bounces", "message"),
    [
        ('imap_url = "imap://u@mail.example.org/INBOX"', "must be imaps://user@host"),
        ('imap_url = "imaps://mail.example.org/INBOX"', "must be imaps://user@host"),
        ('every = "soon"', "not a period like 15m, 2h or 1d: 'soon'"),
        ('every = "0m"', "not a period like 15m, 2h or 1d: '0m'"),
    ],
)
def test_a_wrong_imap_key_is_named(tmp_path: Path, bounces: str, message: str) -> None:
    (tmp_path / "config.toml").write_text(f"[bounces]\n{bounces}\n", "utf-8")
    result = CliRunner().invoke(
        main, ["bounces", "list", "--config", str(tmp_path / "config.toml")]
    )
    assert result.exit_code == 2 and "bounces." in result.output and message in result.output


@pytest.mark.parametrize("offers", ["UIDPLUS", ""])
def test_a_server_without_move_gets_a_copy_and_the_original_marked_deleted(
    imap: ImapServer, offers: str
) -> None:
    """Without MOVE (RFC 6851): copied, then marked deleted and, with UIDPLUS, expunged by
    UID (no other message marked deleted goes with it); without UIDPLUS only marked."""
    for n in range(3):
        imap.append(f"From: a@example.com\r\nSubject: {n}\r\n\r\nhi\r\n".encode())
    with imap.client() as other:  # someone else's deletion, not ours to expunge
        other.uid("STORE", "3", "+FLAGS.SILENT", r"(\Deleted)")
    box = ImapBox(imap.url(), PASSWORD)
    try:
        box.offers = {offers} if offers else set()
        assert [key for key, _ in box.messages()] == ["1", "2"]
        box.move({"1": "processed"})
        assert [key for key, _ in box.messages()] == ["2"]
    finally:
        box.close()
    assert [m.split(b"\r\n")[1] for m in imap.folder("INBOX.processed")] == [b"Subject: 0"]
    assert len(imap.folder("INBOX")) == (2 if offers else 3)  # the one marked by another stays
