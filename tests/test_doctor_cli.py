"""``syndicate doctor`` end to end (its own process, a real DNS server, a real relay with a CA
of its own, SpamAssassin, a SQLite state database), and the preflight ``send`` runs first:
asked again only when stale, refusing what DMARC would reject, one line when DNS is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import load_config, parse_config
from syndicate.doctor.preflight import LastRun, Verdict, keep, preflight, read_last
from syndicate.doctor.records import dkim_record, txt_record
from syndicate.state import open_store

from .conftest import ARTICLES
from .dnszone import unused_port_socket
from .test_doctor_dns import key_pem
from .test_doctor_relay import authenticate, authority, relay

__all__ = ["authenticate", "authority", "relay"]

NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def key():
    return key_pem(2048)


def write_site(root: Path, pem: bytes, smtp_url: str, login: bool = True, **email: str) -> Path:
    (root / "dkim.pem").write_bytes(pem)
    lines = [f'{k} = "{v}"' for k, v in email.items()]
    (root / "config.toml").write_text(
        "\n".join(
            [
                "[site]",
                'base_url = "https://news.example.org"',
                f'articles = "{ARTICLES}"',
                "[email]",
                'sender = "News <digest@example.org>"',
                'dkim_selector = "news"',
                'dkim_key_file = "dkim.pem"',
                'sending_ips = ["192.0.2.10"]',  # the relay is on loopback: where mail leaves
                *lines,
                "[bounces]",
                'imap_url = "imaps://bounces@mail.example.org/INBOX"',
                "[smtp]",
                f'url = "{smtp_url}"',
                *(['username = "news"', 'password = "secret"'] if login else []),
            ]
        )
        + "\n"
    )
    return root / "config.toml"


def good_zone(public) -> list[str]:
    return [
        'example.org. TXT "v=spf1 ip4:192.0.2.10 -all"',
        "example.org. MX 10 mail.example.org.",
        "mail.example.org. A 192.0.2.20",
        txt_record("news._domainkey.example.org", dkim_record(public)),
        '_dmarc.example.org. TXT "v=DMARC1; p=reject"',
    ]


def add_reader(config_path: Path, email: str = "ann@example.org") -> None:
    store = open_store(load_config(config_path, env={}).database_url)
    store.subscribers.add_subscriber(
        email, "en", ["cost"], status="active", consent_source="test", now=NOW
    )
    store.close()


def run_doctor(config_path: Path, nameserver: str, authority) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "SYNDICATE_NAMESERVER": nameserver,
        "SSL_CERT_FILE": str(authority["folder"] / "ca.pem"),  # the relay's CA, trusted
    }
    command = [sys.executable, "-m", "syndicate", "--config", str(config_path), "doctor", "--json"]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_doctor_on_a_configured_site_passes_then_names_a_failure_with_its_fix(
    tmp_path, dns_server, relay, authority, key
) -> None:
    zone, nameserver = dns_server
    zone.publish(*good_zone(key[1]))
    port, handler = relay("current")
    config_path = write_site(tmp_path, key[0], f"smtp+starttls://127.0.0.1:{port}")
    add_reader(config_path)

    done = run_doctor(config_path, nameserver, authority)
    checks = json.loads(done.stdout)["checks"]
    assert [c["name"] for c in checks] == [
        "spf", "dkim", "dmarc", "alignment", "mx", "relay", "message", "message", "message",
        "list",
    ]  # fmt: skip
    assert all(set(c) == {"name", "ok", "severity", "detail", "fix"} for c in checks)
    assert [c for c in checks if c["severity"] != "ok"] == [], done.stderr
    assert done.returncode == 0
    assert handler.messages == []  # the relay check sends nothing
    kept = read_last(tmp_path / "state" / "doctor.json")
    assert kept is not None and kept.refusal is None and len(kept.checks) == len(checks)

    zone.remove("example.org.", "MX")  # no bounces come back, nor mail to the reader there
    done = run_doctor(config_path, nameserver, authority)
    assert done.returncode == 1
    [mx, readers] = [c for c in json.loads(done.stdout)["checks"] if not c["ok"]]
    assert mx["name"] == "mx" and "example.org. MX 10 mail.example.org." in mx["fix"]
    assert readers["name"] == "list" and "ann@example.org" in readers["detail"]


def test_the_text_report_names_each_check_and_its_fix(tmp_path, dns_server, authority, key):
    zone, nameserver = dns_server
    zone.publish(*good_zone(key[1]))
    zone.remove("_dmarc.example.org.", "TXT")
    with unused_port_socket() as silent:  # nobody answers: the relay check fails to connect
        url = f"smtp://127.0.0.1:{silent.getsockname()[1]}"
        config_path = write_site(tmp_path, key[0], url)
        args = ["--config", str(config_path), "doctor", "--nameserver", nameserver]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "FAIL  dmarc" in result.output
    assert 'fix: publish _dmarc.example.org. TXT "v=DMARC1; p=none"' in result.output
    assert "FAIL  relay" in result.output


# -- the preflight -------------------------------------------------------------------------------


def misaligned_site(tmp_path: Path, key, smtp_port: int) -> Path:
    """A relay service's return path and signing domain: DMARC fails under p=reject."""
    return write_site(
        tmp_path,
        key[0],
        f"smtp://127.0.0.1:{smtp_port}",
        login=False,
        return_path="bounces@returns.example.net",
        dkim_domain="returns.example.net",
    )


def test_send_refuses_what_dmarc_would_reject_unless_told_to_skip_the_checks(
    tmp_path, dns_server, smtp_server, key
) -> None:
    zone, nameserver = dns_server
    inbox, port = smtp_server
    zone.publish(*good_zone(key[1]))
    config_path = misaligned_site(tmp_path, key, port)
    add_reader(config_path)
    runner = CliRunner()
    env = {"SYNDICATE_NAMESERVER": nameserver}
    refused = runner.invoke(main, ["--config", str(config_path), "send"], env=env)
    assert refused.exit_code == 1
    assert "send refused: receivers would reject these digests" in refused.output
    assert "p=reject" in refused.output and "--skip-checks" in refused.output
    assert inbox.received == []

    sent = runner.invoke(main, ["--config", str(config_path), "send", "--skip-checks"], env=env)
    assert sent.exit_code == 0, sent.output
    assert "send --skip-checks: the preflight checks are skipped" in sent.output
    assert [to for to, _ in inbox.received] == ["ann@example.org"]


def test_the_preflight_asks_again_only_when_stale_or_the_settings_changed(
    tmp_path, dns_server, key
) -> None:
    zone, nameserver = dns_server
    zone.publish(*good_zone(key[1]))
    config_path = misaligned_site(tmp_path, key, 25)
    config = load_config(config_path, env={})
    assert preflight(config, NOW, nameserver=nameserver).refusal is not None
    kept = read_last(config.path(config.state.doctor_file))
    assert kept is not None and kept.at == NOW

    zone.publish('_dmarc.example.org. TXT "v=DMARC1; p=none"')  # not asked again yet
    assert preflight(config, NOW + timedelta(hours=23), nameserver=nameserver).refusal
    assert preflight(config, NOW + timedelta(hours=25), nameserver=nameserver).refusal is None

    zone.publish('_dmarc.example.org. TXT "v=DMARC1; p=reject"')
    later = NOW + timedelta(hours=26)
    assert preflight(config, later, nameserver=nameserver).refusal is None  # still fresh
    changed = load_config(write_site(tmp_path, key[0], "smtp://127.0.0.1:26"), env={})
    changed = changed.model_copy(update={"email": config.email})  # the same misalignment
    assert preflight(changed, later, nameserver=nameserver).refusal is not None


def test_dns_out_of_reach_is_one_line_and_the_answer_is_kept(tmp_path, key) -> None:
    config = load_config(misaligned_site(tmp_path, key, 25), env={})
    with unused_port_socket() as silent:
        host, port = silent.getsockname()
        first = preflight(config, NOW, nameserver=f"{host}:{port}", timeout=0.3)
        again = preflight(config, NOW + timedelta(hours=1), nameserver=f"{host}:{port}")
    assert first.refusal is None and len(first.lines) == 1
    assert first.lines[0].startswith("preflight: DNS: no answer from")
    assert first.lines[0].endswith("the DNS checks are skipped")
    assert again.lines == [] and again.refusal is None  # kept: not asked (nor waited for)


def test_a_maildir_outbox_skips_the_dns_checks(tmp_path) -> None:
    config = parse_config({}, root=tmp_path, source="(test)", env={})
    assert config.smtp.url is None
    keep(config, LastRun(NOW, "another config", refusal="stale refusal"))
    assert preflight(config, NOW, nameserver="127.0.0.1:9").lines == []
    assert preflight(config, NOW, nameserver="127.0.0.1:9").refusal is None


def test_an_example_sender_asks_the_public_dns_nothing(tmp_path) -> None:
    data = {"smtp": {"url": "smtp://127.0.0.1:25"}}  # the sender: digest@example.com
    config = parse_config(data, root=tmp_path, source="(test)", env={})
    assert preflight(config, NOW) == Verdict([])
    assert not config.path(config.state.doctor_file).exists()


def test_a_result_that_cannot_be_kept_is_a_line_and_the_send_goes_on(tmp_path, key) -> None:
    config = load_config(misaligned_site(tmp_path, key, 25), env={})
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder goes")
    with unused_port_socket() as silent:
        host, port = silent.getsockname()
        verdict = preflight(config, NOW, nameserver=f"{host}:{port}", timeout=0.3)
    assert verdict.refusal is None
    assert verdict.lines[0].endswith("the DNS checks are skipped")
    assert verdict.lines[1].startswith(f"preflight: {blocker / 'doctor.json'}: not kept")
