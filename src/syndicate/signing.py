"""DKIM signatures (RFC 6376, rsa-sha256, relaxed/relaxed), with the RSA step in OpenSSL.

The same signatures dkimpy makes, but dkimpy signs in pure Python (milliseconds per message);
here canonicalisation stays in Python and the private-key operation goes through
``cryptography``. The tests verify every signature with dkimpy. No I/O: the key comes in as PEM.
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import datetime

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

SIGNED = (
    "from",
    "to",
    "subject",
    "date",
    "message-id",
    "reply-to",
    "mime-version",
    "content-type",
    "list-id",
    "list-unsubscribe",
    "list-unsubscribe-post",
)
"""Headers covered by the signature, when present."""

OVERSIGNED = frozenset({"from", "subject", "reply-to", "list-unsubscribe", "list-unsubscribe-post"})
"""Named once more than they occur, so nobody can add one after signing (RFC 6376 8.15)."""

_EOL = re.compile(rb"\r?\n")
_WSP = re.compile(rb"[ \t]+")
_FIELD = re.compile(rb"^([^:\s]+)[ \t]*:(.*)$", re.DOTALL)


def _relaxed_header(name: bytes, value: bytes) -> bytes:
    value = _WSP.sub(b" ", value.replace(b"\r\n", b"")).strip(b" ")
    return name.lower() + b":" + value + b"\r\n"


def _relaxed_body(body: bytes) -> bytes:
    lines = [_WSP.sub(b" ", line).rstrip(b" ") for line in body.split(b"\r\n")]
    while lines and not lines[-1]:
        lines.pop()
    return b"".join(line + b"\r\n" for line in lines)


def _fields(head: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(lower-case name, name, raw value) per header field, folded lines joined back."""
    fields: list[list[bytes]] = []
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1].append(line)
        elif line:
            fields.append([line])
    parsed = []
    for lines in fields:
        found = _FIELD.match(b"\r\n".join(lines))
        if found:
            parsed.append((found[1].lower(), found[1], found[2]))
    return parsed


class DkimSigner:
    """Signs finished messages for one domain and selector."""

    def __init__(self, domain: str, selector: str, private_key_pem: bytes) -> None:
        key = serialization.load_pem_private_key(private_key_pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("DKIM key must be an RSA private key (PEM)")
        self.key = key
        self.domain = domain
        self.selector = selector

    def sign(self, message: bytes, *, now: datetime | None = None) -> bytes:
        """``message`` with a DKIM-Signature header in front (line endings made CRLF)."""
        message = _EOL.sub(b"\r\n", message)
        head, sep, body = message.partition(b"\r\n\r\n")
        if not sep:
            head, body = message.removesuffix(b"\r\n"), b""
        fields = _fields(head)
        names: list[bytes] = []
        for signed_name in SIGNED:
            count = sum(f[0] == signed_name.encode() for f in fields) + (signed_name in OVERSIGNED)
            names += [signed_name.encode()] * count
        # Each name takes the last instance not yet used, from the bottom up.
        unused = list(fields)
        signed = b""
        for name in names:
            for i in range(len(unused) - 1, -1, -1):
                if unused[i][0] == name:
                    signed += _relaxed_header(name, unused.pop(i)[2])
                    break
        body_hash = base64.b64encode(hashlib.sha256(_relaxed_body(body)).digest())
        tags = [
            b"v=1",
            b"a=rsa-sha256",
            b"c=relaxed/relaxed",
            b"d=" + self.domain.encode(),
            b"s=" + self.selector.encode(),
            *([b"t=%d" % int(now.timestamp())] if now else []),
            b"h=" + b":".join(names),
            b"bh=" + body_hash,
            b"b=",
        ]
        value = b" " + b";\r\n\t".join(tags)
        signed += _relaxed_header(b"dkim-signature", value).removesuffix(b"\r\n")
        signature = base64.b64encode(self.key.sign(signed, padding.PKCS1v15(), hashes.SHA256()))
        folded = b"\r\n\t".join(signature[i : i + 76] for i in range(0, len(signature), 76))
        return b"DKIM-Signature:" + value + folded + b"\r\n" + message
