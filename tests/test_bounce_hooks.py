"""Bounces and complaints that relay services post by webhook, against the whole app over a real
SQLite file or PostgreSQL schema: payloads shaped as each relay's documentation shows them,
signed with keys made here."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.testclient import TestClient

from syndicate.config import parse_config
from tests.sending import add_readers, make_issue
from tests.websites import make_client

MAILGUN_KEY = "key-0123456789abcdef"
SENDGRID_PRIVATE = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(
    SENDGRID_PRIVATE.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()
SECRETS = {
    "postmark_user": "postmark",
    "postmark_password": "hook password",
    "mailgun_signing_key": MAILGUN_KEY,
    "sendgrid_public_key": SENDGRID_PUBLIC,
}


def refuse(message) -> None:
    raise AssertionError("no mail is sent here")


@pytest.fixture
def hooks(tmp_path, store, article_set, clock):
    """A client of the app with every relay's secret set, and two readers with a delivery."""
    config = parse_config(
        {"site": {"base_url": "http://testserver"}, "bounces": SECRETS},
        root=tmp_path,
        source="(test)",
        env={},
    )
    readers = add_readers(store, 2)
    issue = make_issue(store, readers)
    client = make_client(config, store, refuse, article_set, clock)
    return client, store, readers, issue, clock


def message_id(issue, reader) -> str:
    return f"<{issue.id}.{reader.id}@news.example.org>"


def state(store, reader) -> tuple:
    found = store.subscribers.subscriber_by_id(reader.id)
    return found.status, found.bounces, found.soft_bounces, store.bounces.bounce_counts()


# -- Postmark: basic auth ----------------------------------------------------------------------


def postmark_bounce(email: str, kind: str = "HardBounce", details: str = "") -> dict:
    """A bounce webhook as Postmark's documentation shows it."""
    return {
        "RecordType": "Bounce",
        "MessageStream": "outbound",
        "ID": 4323372036854775807,
        "Type": kind,
        "TypeCode": 1,
        "Name": "Hard bounce",
        "Tag": "Test",
        "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
        "Metadata": {},
        "ServerID": 23,
        "Description": "The server was unable to deliver your message (ex: unknown user, "
        "mailbox not found).",
        "Details": details
        or "smtp;550 5.1.1 The email account that you tried to reach does "
        "not exist. Please try double-checking the recipient's email address for typos",
        "Email": email,
        "From": "digest@news.example.org",
        "BouncedAt": "2025-12-15T07:58:01Z",
        "DumpAvailable": True,
        "Inactive": True,
        "CanActivate": True,
        "Subject": "Digest one",
    }


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_a_postmark_hard_bounce_drops_the_reader_once(hooks):
    client, store, (reader, other), _, _ = hooks
    body = postmark_bounce(reader.email)
    response = client.post(
        "/hooks/bounces/postmark", json=body, headers=basic("postmark", "hook password")
    )
    assert response.status_code == 200
    assert response.json() == {"actions": ["bounced"]}
    assert state(store, reader) == ("bounced", 1, 0, {"permanent": 1})
    assert store.subscribers.subscriber_by_id(other.id).status == "active"
    again = client.post(
        "/hooks/bounces/postmark", json=body, headers=basic("postmark", "hook password")
    )
    assert again.json() == {"actions": ["duplicate"]}
    assert state(store, reader) == ("bounced", 1, 0, {"permanent": 1})


def test_a_postmark_complaint_unsubscribes(hooks):
    client, store, (reader, _), _, _ = hooks
    body = {**postmark_bounce(reader.email, "SpamComplaint"), "RecordType": "SpamComplaint"}
    response = client.post(
        "/hooks/bounces/postmark", json=body, headers=basic("postmark", "hook password")
    )
    assert response.json() == {"actions": ["unsubscribed"]}
    assert store.subscribers.subscriber_by_id(reader.id).status == "unsubscribed"


@pytest.mark.parametrize(
    "headers",
    [{}, basic("postmark", "wrong"), basic("other", "hook password"), {"Authorization": "Basic !"}],
)
def test_postmark_without_its_login_is_refused(hooks, headers):
    client, store, (reader, _), _, _ = hooks
    before = state(store, reader)
    response = client.post(
        "/hooks/bounces/postmark", json=postmark_bounce(reader.email), headers=headers
    )
    assert response.status_code == 403
    assert state(store, reader) == before == ("active", 0, 0, {})


# -- Mailgun: HMAC of timestamp and token ------------------------------------------------------


def mailgun_failed(
    email: str, mid: str, when: float, *, severity: str = "permanent", token: str = "a" * 50
) -> dict:
    """A ``failed`` event as Mailgun's webhooks post it, signed with the key."""
    timestamp = str(int(when))
    signature = hmac.new(MAILGUN_KEY.encode(), (timestamp + token).encode(), hashlib.sha256)
    return {
        "signature": {"timestamp": timestamp, "token": token, "signature": signature.hexdigest()},
        "event-data": {
            "id": "G9Bn5sl1TC6nu79C8C0bwg",
            "timestamp": when,
            "log-level": "error",
            "event": "failed",
            "severity": severity,
            "reason": "bounce" if severity == "permanent" else "generic",
            "recipient": email,
            "recipient-domain": email.partition("@")[2],
            "message": {"headers": {"message-id": mid.strip("<>"), "to": email}, "size": 111},
            "delivery-status": {
                "attempt-no": 1,
                "code": 550 if severity == "permanent" else 452,
                "message": "5.1.1 The email account that you tried to reach does not exist"
                if severity == "permanent"
                else "4.2.2 Mailbox full, try again later",
                "description": "",
                "session-seconds": 0.1,
            },
            "flags": {"is-authenticated": True, "is-test-mode": False},
        },
    }


def test_a_mailgun_failure_is_matched_by_message_id_and_counted_once(hooks):
    client, store, (reader, _), issue, clock = hooks
    body = mailgun_failed(reader.email, message_id(issue, reader), clock().timestamp())
    response = client.post("/hooks/bounces/mailgun", json=body)
    assert response.json() == {"actions": ["bounced"]}
    assert state(store, reader) == ("bounced", 1, 0, {"permanent": 1})
    replay = client.post("/hooks/bounces/mailgun", json=body)
    assert replay.json() == {"actions": ["duplicate"]}
    assert state(store, reader) == ("bounced", 1, 0, {"permanent": 1})


def test_a_mailgun_temporary_failure_is_only_recorded(hooks):
    client, store, (reader, _), issue, clock = hooks
    body = mailgun_failed(
        reader.email, message_id(issue, reader), clock().timestamp(), severity="temporary"
    )
    assert client.post("/hooks/bounces/mailgun", json=body).json() == {"actions": ["recorded"]}
    assert state(store, reader) == ("active", 0, 0, {"temporary": 1})


def test_mailgun_unsigned_forged_or_stale_is_refused(hooks):
    client, store, (reader, _), issue, clock = hooks
    now = clock().timestamp()
    good = mailgun_failed(reader.email, message_id(issue, reader), now)
    forged = {**good, "signature": {**good["signature"], "signature": "0" * 64}}
    unsigned = {"event-data": good["event-data"]}
    stale = mailgun_failed(reader.email, message_id(issue, reader), now - 16 * 60)
    for body in (forged, unsigned, stale):
        assert client.post("/hooks/bounces/mailgun", json=body).status_code == 403
    assert client.post("/hooks/bounces/mailgun", content=b"not json").status_code == 403
    assert state(store, reader) == ("active", 0, 0, {})
    clock.now += timedelta(minutes=14)  # within 15 minutes, late or early, it is taken
    assert client.post("/hooks/bounces/mailgun", json=good).status_code == 200


# -- SendGrid: ECDSA over timestamp and body ---------------------------------------------------


def sendgrid_post(
    client: TestClient,
    events: list[dict],
    *,
    key=SENDGRID_PRIVATE,
    timestamp="1765785600",
    signature=None,
):
    body = json.dumps(events).encode()
    signed = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    headers = {
        "X-Twilio-Email-Event-Webhook-Signature": signature
        if signature is not None
        else base64.b64encode(signed).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        "Content-Type": "application/json",
    }
    return client.post("/hooks/bounces/sendgrid", content=body, headers=headers)


def sendgrid_events(issue, readers) -> list[dict]:
    """One batch as SendGrid's event webhook posts it."""
    bounced, deferred = readers
    common = {
        "timestamp": 1765785480,
        "category": ["digest"],
        "sg_message_id": "14c5d75ce93.dfd.64b469",
    }
    return [
        {
            **common,
            "email": bounced.email,
            "smtp-id": message_id(issue, bounced),
            "event": "bounce",
            "type": "bounce",
            "bounce_classification": "Invalid Address",
            "reason": "550 5.1.1 The email account that you tried to reach does not exist.",
            "status": "5.1.1",
            "sg_event_id": "6g4ZI7SA-xmRDv57GoPIPw==",
        },
        {
            **common,
            "email": deferred.email,
            "smtp-id": message_id(issue, deferred),
            "event": "deferred",
            "response": "400 try again later",
            "attempt": "5",
            "sg_event_id": "t7LEShmowp86DTdUW8M-GQ==",
        },
        {
            **common,
            "email": deferred.email,
            "smtp-id": message_id(issue, deferred),
            "event": "delivered",
            "response": "250 OK",
            "sg_event_id": "rWVYmVk90MjZJ9iohOBa3w==",
        },
    ]


def test_a_sendgrid_batch_is_recorded_event_by_event_once(hooks):
    client, store, readers, issue, _ = hooks
    events = sendgrid_events(issue, readers)
    response = sendgrid_post(client, events)
    assert response.json() == {"actions": ["bounced", "recorded", "ignored: no bounce"]}
    assert state(store, readers[0]) == ("bounced", 1, 0, {"permanent": 1, "temporary": 1})
    assert store.subscribers.subscriber_by_id(readers[1].id).status == "active"
    replay = sendgrid_post(client, events)
    assert replay.json() == {"actions": ["duplicate", "duplicate", "ignored: no bounce"]}
    assert store.bounces.bounce_counts() == {"permanent": 1, "temporary": 1}


def test_a_sendgrid_spam_report_unsubscribes(hooks):
    client, store, (reader, _), *_ = hooks
    event = {
        "email": reader.email,
        "timestamp": 1765785480,
        "event": "spamreport",
        "sg_event_id": "x1",
    }
    assert sendgrid_post(client, [event]).json() == {"actions": ["unsubscribed"]}
    assert store.subscribers.subscriber_by_id(reader.id).status == "unsubscribed"


def test_sendgrid_unsigned_or_signed_by_another_key_is_refused(hooks):
    client, store, readers, issue, _ = hooks
    events = sendgrid_events(issue, readers)
    other = ec.generate_private_key(ec.SECP256R1())
    assert sendgrid_post(client, events, key=other).status_code == 403
    assert sendgrid_post(client, events, signature="").status_code == 403
    assert sendgrid_post(client, events, signature="bm90IGEgc2lnbmF0dXJl").status_code == 403
    body = json.dumps(events).encode()
    assert client.post("/hooks/bounces/sendgrid", content=body).status_code == 403
    assert state(store, readers[0]) == ("active", 0, 0, {})


# -- routes whose secret is unset --------------------------------------------------------------


def test_a_relay_without_its_secret_has_no_route(tmp_path, store, article_set, clock):
    config = parse_config({}, root=tmp_path, source="(test)", env={})
    client = make_client(config, store, refuse, article_set, clock)
    for relay in ("postmark", "mailgun", "sendgrid", "ses"):
        assert client.post(f"/hooks/bounces/{relay}", json={}).status_code == 404


def test_secrets_come_from_the_environment_and_a_bad_key_is_refused(tmp_path):
    env = {"SYNDICATE_POSTMARK_PASSWORD": "p", "SYNDICATE_MAILGUN_SIGNING_KEY": "k"}
    config = parse_config({"bounces": {"postmark_user": "u"}}, root=tmp_path, source="(t)", env=env)
    assert config.bounces.postmark_password.get_secret_value() == "p"
    assert config.bounces.mailgun_signing_key.get_secret_value() == "k"
    with pytest.raises(Exception, match="sendgrid_public_key"):
        parse_config(
            {"bounces": {"sendgrid_public_key": "bm9wZQ=="}}, root=tmp_path, source="(t)", env={}
        )
    with pytest.raises(Exception, match="go together"):
        parse_config({"bounces": {"postmark_user": "u"}}, root=tmp_path, source="(t)", env={})
