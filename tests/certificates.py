"""Certificates the tests make for their own servers: a CA of their own and what it signs,
or one that signs itself. Nothing here is trusted outside the test that made it."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

LOCAL = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
"""The names a server on this machine answers to."""


def name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def certificate(
    subject: str,
    key: Key,
    *,
    issuer: x509.Certificate | None = None,
    signer: Key | None = None,
    valid: tuple[datetime, datetime] | None = None,
    names: list[x509.GeneralName] | None = None,
    ca: bool = False,
) -> x509.Certificate:
    """``key``'s certificate for ``subject``: signed by ``signer`` as ``issuer``, else by
    itself; valid for ``valid`` (from five minutes ago for a day); with ``names`` as its
    alternative names."""
    now = datetime.now(UTC)
    start, end = valid or (now - timedelta(minutes=5), now + timedelta(days=1))
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(subject))
        .issuer_name(issuer.subject if issuer is not None else name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer or key, hashes.SHA256())


def pem(made: x509.Certificate) -> bytes:
    return made.public_bytes(serialization.Encoding.PEM)


def key_pem(key: Key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for this machine's names in ``folder``, and its key (the
    key readable by its owner only)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert, private = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(pem(certificate("localhost", key, names=LOCAL, ca=True)))
    private.write_bytes(key_pem(key))
    private.chmod(0o600)
    return cert, private
