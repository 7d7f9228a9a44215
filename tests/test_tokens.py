"""Signed reader tokens: strict decoding, one purpose each, an age; the generated key."""

from __future__ import annotations

import re
from datetime import timedelta

from syndicate.config import parse_config
from syndicate.tokens import CONFIRM, UNSUBSCRIBE, make_token, read_token, secret_key
from tests.websites import SECRET


def test_token_decoding_is_strict(clock):
    token = make_token(SECRET, UNSUBSCRIBE, 42, issued=clock())
    assert len(token) == 64
    assert read_token(SECRET, UNSUBSCRIBE, token) == 42
    for altered in (
        token + "=",
        token + "==",
        token + "A",
        token + "!",
        token[:32] + "!" + token[32:],
        token[:32] + "." + token[33:],
        token[:-1],
        token + "\n",
        token.replace("-", "+").replace("_", "/"),
        " " + token,
    ):
        if altered != token:
            assert read_token(SECRET, UNSUBSCRIBE, altered) is None, altered


def test_tokens_carry_id_purpose_and_age(clock):
    token = make_token(SECRET, CONFIRM, 42, issued=clock())
    assert read_token(SECRET, CONFIRM, token) == 42
    assert read_token(SECRET, UNSUBSCRIBE, token) is None
    assert read_token(b"another", CONFIRM, token) is None
    day = timedelta(days=1)
    assert read_token(SECRET, CONFIRM, token, day, now=clock() + day / 2) == 42
    assert read_token(SECRET, CONFIRM, token, day, now=clock() + 2 * day) is None
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token)


def test_a_missing_secret_is_generated_once_and_kept(tmp_path):
    config = parse_config({}, root=tmp_path, source="(test)", env={})
    first = secret_key(config)
    assert len(first) >= 32
    assert secret_key(config) == first
    key_file = tmp_path / "state" / "secret_key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    configured = parse_config({}, root=tmp_path, source="(t)", env={"SYNDICATE_SECRET_KEY": "k"})
    assert secret_key(configured) == b"k"
