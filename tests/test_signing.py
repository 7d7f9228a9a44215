"""DKIM signatures made through OpenSSL, verified by dkimpy as a receiving server would."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from email.message import EmailMessage

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from syndicate.signing import DkimSigner

NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def signer(key: rsa.RSAPrivateKey) -> DkimSigner:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return DkimSigner("news.example.org", "sel1", pem)


def dns(key: rsa.RSAPrivateKey):
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name == b"sel1._domainkey.news.example.org." else None

    return lookup


def digest_message(subject: str = "Weekly digest: cost  \u00e9dition") -> bytes:
    message = EmailMessage()
    message["From"] = "Syndicate <digest@news.example.org>"
    message["To"] = "reader@example.com"
    message["Subject"] = subject
    message["Message-ID"] = "<1.2@news.example.org>"
    message["List-Id"] = "<digest.news.example.org>"
    message["List-Unsubscribe"] = "<https://news.example.org/u/TOKEN>"
    message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    message.set_content("Plain  text \t with   spaces \n\n\n")
    message.add_alternative("<p>HTML</p>", subtype="html")
    return message.as_bytes()


def test_signatures_verify_with_dkimpy_and_cover_both_unsubscribe_headers(key, signer) -> None:
    signed = signer.sign(digest_message(), now=NOW)
    assert dkim.verify(signed, dnsfunc=dns(key))
    header = signed.split(b"\r\n\r\n")[0].decode()
    names = header.split("h=")[1].split(";")[0].replace("\r\n\t", "").split(":")
    assert {"list-unsubscribe", "list-unsubscribe-post", "from", "subject"} <= set(names)


def test_a_changed_or_added_unsubscribe_header_breaks_the_signature(key, signer) -> None:
    signed = signer.sign(digest_message())
    tampered = signed.replace(b"/u/TOKEN", b"/u/OTHER")
    assert not dkim.verify(tampered, dnsfunc=dns(key))
    head, body = signed.split(b"\r\n\r\n", 1)
    added = head + b"\r\nList-Unsubscribe: <https://evil.example/>\r\n\r\n" + body
    assert not dkim.verify(added, dnsfunc=dns(key))


def test_the_signature_survives_whitespace_changes_in_transit(key, signer) -> None:
    signed = signer.sign(digest_message())
    relaxed = signed.replace(b"Subject: Weekly", b"Subject:   Weekly")
    assert dkim.verify(relaxed, dnsfunc=dns(key))


def test_dkimpy_accepts_many_different_messages(key, signer) -> None:
    for n in range(20):
        message = digest_message(subject=f"Digest {n} " + "x" * (n * 7))
        assert dkim.verify(signer.sign(message, now=NOW), dnsfunc=dns(key)), n
