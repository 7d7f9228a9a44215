"""send_digests end to end: articles → issues → one signed message per reader at a real server."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from syndicate import pipeline
from syndicate.config import parse_config
from syndicate.deliver import SmtpMailer
from syndicate.store import open_store
from syndicate.tokens import UNSUBSCRIBE, read_token, secret_key
from tests.conftest import ARTICLES
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
