"""The relay check against real SMTP servers (aiosmtpd): STARTTLS with a certificate from a
CA made here, the same with an expired certificate, implicit TLS, one without STARTTLS, a
refused login. Nothing is ever sent."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from syndicate.config import parse_config
from syndicate.doctor.relay import check_relay
from tests.certificates import LOCAL, certificate, key_pem, pem

from .mailserver import free_port

DAY = timedelta(days=1)
NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def authority(tmp_path_factory) -> dict[str, Path]:
    """A CA of its own, and the server certificates it signed: current, expired, and one
    for another host."""
    folder = tmp_path_factory.mktemp("ca")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("Test CA", ca_key, valid=(NOW - DAY, NOW + 30 * DAY), ca=True)
    (folder / "ca.pem").write_bytes(pem(ca))
    key = ec.generate_private_key(ec.SECP256R1())
    (folder / "key.pem").write_bytes(key_pem(key))
    current, expired = (NOW - DAY, NOW + 30 * DAY), (NOW - 30 * DAY, NOW - DAY)
    elsewhere: list[x509.GeneralName] = [x509.DNSName("mail.example.net")]
    made = {"current": (current, LOCAL), "expired": (expired, LOCAL), "other": (current, elsewhere)}
    for label, (valid, names) in made.items():
        signed = certificate("localhost", key, issuer=ca, signer=ca_key, valid=valid, names=names)
        (folder / f"{label}.pem").write_bytes(pem(signed))
    return {"folder": folder}


def server_context(authority, label: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    folder = authority["folder"]
    context.load_cert_chain(folder / f"{label}.pem", folder / "key.pem")
    return context


def client_context(authority) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(authority["folder"] / "ca.pem"))


class Handler:
    def __init__(self) -> None:
        self.messages: list[object] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.messages.append(envelope)
        return "250 OK"


def authenticate(server, session, envelope, mechanism, auth_data) -> AuthResult:
    ok = auth_data.login == b"news" and auth_data.password == b"secret"
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def relay(authority) -> Iterator[callable]:
    """Starts a relay as asked; yields the starter, stops every relay after the test."""
    started: list[Controller] = []

    def start(label: str | None = "current", implicit: bool = False) -> tuple[int, Handler]:
        handler, port = Handler(), free_port()
        options: dict[str, object] = {"authenticator": authenticate, "auth_require_tls": True}
        if label is not None and implicit:
            # aiosmtpd counts only STARTTLS as TLS for AUTH; the whole session is TLS here
            options.update(ssl_context=server_context(authority, label), auth_require_tls=False)
        elif label is not None:
            options["tls_context"] = server_context(authority, label)
        else:
            options["auth_require_tls"] = False
        controller = Controller(handler, hostname="127.0.0.1", port=port, **options)
        controller.start()
        started.append(controller)
        return port, handler

    yield start
    for controller in started:
        controller.stop()


def config_for(tmp_path: Path, url: str, password: str = "secret"):
    data = {"smtp": {"url": url, "username": "news", "password": password}}
    return parse_config(data, root=tmp_path, source="(test)", env={})


def test_starttls_with_a_valid_certificate_and_a_login_passes(tmp_path, relay, authority) -> None:
    port, handler = relay("current")
    config = config_for(tmp_path, f"smtp+starttls://127.0.0.1:{port}")
    check = check_relay(config, client_context(authority))
    assert check.severity == "ok", check
    assert "STARTTLS" in check.detail and "login accepted" in check.detail
    assert handler.messages == []


def test_an_expired_certificate_fails(tmp_path, relay, authority) -> None:
    port, _ = relay("expired")
    check = check_relay(
        config_for(tmp_path, f"smtp+starttls://127.0.0.1:{port}"), client_context(authority)
    )
    assert not check.ok
    assert "certificate" in check.detail and "expired" in check.detail
    assert "renew" in check.fix


def test_a_certificate_from_an_unknown_authority_fails(tmp_path, relay) -> None:
    port, _ = relay("current")
    config = config_for(tmp_path, f"smtp+starttls://127.0.0.1:{port}")
    check = check_relay(config, ssl.create_default_context())
    assert not check.ok and "certificate" in check.detail


def test_a_relay_without_starttls_fails(tmp_path, relay, authority) -> None:
    port, _ = relay(None)
    check = check_relay(config_for(tmp_path, f"smtp://127.0.0.1:{port}"), client_context(authority))
    assert not check.ok
    assert "STARTTLS is not offered" in check.detail
    assert "smtp+starttls://" in check.fix


def test_a_refused_login_fails(tmp_path, relay, authority) -> None:
    port, _ = relay("current")
    config = config_for(tmp_path, f"smtp+starttls://127.0.0.1:{port}", password="wrong")
    check = check_relay(config, client_context(authority))
    assert not check.ok and "login" in check.detail and "535" in check.detail
    assert "SYNDICATE_SMTP_PASSWORD" in check.fix


def test_implicit_tls_passes(tmp_path, relay, authority) -> None:
    port, handler = relay("current", implicit=True)
    check = check_relay(
        config_for(tmp_path, f"smtps://127.0.0.1:{port}"), client_context(authority)
    )
    assert check.severity == "ok", check
    assert "implicit TLS" in check.detail
    assert handler.messages == []


def test_a_plain_url_to_a_relay_that_offers_starttls_is_a_warning(
    tmp_path, relay, authority
) -> None:
    port, _ = relay("current")
    check = check_relay(config_for(tmp_path, f"smtp://127.0.0.1:{port}"), client_context(authority))
    assert check.ok and check.severity == "warning"
    assert f"smtp+starttls://127.0.0.1:{port}" in check.fix


def test_a_relay_nobody_listens_on_fails_to_connect(tmp_path, authority) -> None:
    check = check_relay(config_for(tmp_path, f"smtp://127.0.0.1:{free_port()}"))
    assert not check.ok and check.detail.split(": ")[1] == "connect"


def test_a_certificate_for_another_host_fails(tmp_path, relay, authority) -> None:
    port, _ = relay("other")
    config = config_for(tmp_path, f"smtp+starttls://127.0.0.1:{port}")
    check = check_relay(config, client_context(authority))
    assert not check.ok and "certificate" in check.detail and "mismatch" in check.detail
