"""Amazon SES bounces, complaints and deliveries as SNS posts them to /hooks/bounces/ses,
against the whole app and a real HTTP server this test starts, which serves the signing
certificate and takes the subscription confirmation as SNS's hosts would. The certificate
and its RSA key are made here; messages are signed as SNS signs them (SignatureVersion 1 and
2). Only the URL pattern SNS's hosts must match is the test's (``SnsClient(allowed)``)."""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from syndicate.bounces.sns import SNS_URL, signed_text, sns_url_ok
from syndicate.config import parse_config
from syndicate.web.sns import SnsClient
from tests.certificates import certificate, pem
from tests.sending import add_readers, make_issue
from tests.test_bounce_hooks import message_id, refuse, state
from tests.websites import make_client

TOPIC = "arn:aws:sns:eu-west-1:123456789012:ses-bounces"


SNS_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


class SnsHost:
    """What the test's HTTP server serves and what it was asked for."""

    def __init__(self) -> None:
        self.files = {
            "/cert.pem": pem(certificate("sns.amazonaws.com", SNS_KEY)),
            "/other.pem": pem(certificate("sns.amazonaws.com", OTHER_KEY)),
        }
        self.asked: list[str] = []
        self.base = ""


@pytest.fixture
def sns_host() -> Iterator[SnsHost]:
    host = SnsHost()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            host.asked.append(self.path)
            body = host.files.get(self.path.split("?")[0], b"<ConfirmSubscriptionResponse/>")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def ses(tmp_path, store, article_set, clock, sns_host):
    """A client of the app with the SES topic set, SNS's hosts being the test's server."""
    config = parse_config(
        {"site": {"base_url": "http://testserver"}, "bounces": {"sns_topics": [TOPIC]}},
        root=tmp_path,
        source="(test)",
        env={},
    )
    readers = add_readers(store, 2)
    issue = make_issue(store, readers)
    sns = SnsClient(re.compile(re.escape(sns_host.base) + "/"))
    return make_client(config, store, refuse, article_set, clock, sns=sns), store, readers, issue


def signed(fields: dict[str, str], key: rsa.RSAPrivateKey = SNS_KEY, version: str = "1") -> dict:
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()
    signature = key.sign(signed_text(fields), padding.PKCS1v15(), algorithm)
    encoded = base64.b64encode(signature).decode()
    return {**fields, "SignatureVersion": version, "Signature": encoded}


def notification(host: SnsHost, ses_message: dict, **fields: str) -> dict[str, str]:
    return {
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "TopicArn": TOPIC,
        "Message": json.dumps(ses_message),
        "Timestamp": "2026-12-01T12:00:00.000Z",
        "SigningCertURL": f"{host.base}/cert.pem",
        "UnsubscribeURL": f"{host.base}/?Action=Unsubscribe",
        **fields,
    }


def ses_bounce(email: str, mid: str, kind: str = "Permanent", code: str = "") -> dict:
    """A bounce notification as SES's documentation shows it."""
    return {
        "notificationType": "Bounce",
        "bounce": {
            "feedbackId": "0102017a-bounce-" + email,
            "bounceType": kind,
            "bounceSubType": "General",
            "bouncedRecipients": [
                {
                    "emailAddress": email,
                    "action": "failed",
                    "status": "5.1.1" if kind == "Permanent" else "4.2.2",
                    "diagnosticCode": code or "smtp; 550 5.1.1 user unknown",
                }
            ],
            "timestamp": "2026-12-01T11:59:58.000Z",
            "reportingMTA": "dsn; a8-70.smtp-out.amazonses.com",
        },
        "mail": {
            "timestamp": "2026-12-01T11:59:50.000Z",
            "source": "digest@news.example.org",
            "messageId": "0102017a-ses-own-id",
            "destination": [email],
            "commonHeaders": {"messageId": mid, "subject": "Digest one"},
        },
    }


def ses_complaint(email: str, mid: str) -> dict:
    return {
        "notificationType": "Complaint",
        "complaint": {
            "feedbackId": "0102017a-complaint",
            "complainedRecipients": [{"emailAddress": email}],
            "complaintFeedbackType": "abuse",
            "timestamp": "2026-12-01T12:00:00.000Z",
        },
        "mail": {"messageId": "0102017a-ses-own-id", "commonHeaders": {"messageId": mid}},
    }


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_signed_ses_bounce_drops_the_reader_once(ses, sns_host, version):
    client, store, (reader, other), issue = ses
    body = signed(
        notification(sns_host, ses_bounce(reader.email, message_id(issue, reader))),
        version=version,
    )
    response = client.post("/hooks/bounces/ses", json=body)
    assert response.status_code == 200, response.text
    assert response.json() == {"actions": ["bounced"]}
    assert state(store, reader) == ("bounced", 1, 0, {"permanent": 1})
    assert store.subscribers.subscriber_by_id(other.id).status == "active"
    assert client.post("/hooks/bounces/ses", json=body).json() == {"actions": ["duplicate"]}
    assert state(store, reader) == ("bounced", 1, 0, {"permanent": 1})
    assert sns_host.asked == ["/cert.pem"]  # fetched once, then kept


def test_a_transient_ses_bounce_counts_soft_and_a_complaint_unsubscribes(ses, sns_host):
    client, store, (reader, other), issue = ses
    full = ses_bounce(reader.email, message_id(issue, reader), "Transient", "552 5.2.2 full")
    response = client.post("/hooks/bounces/ses", json=signed(notification(sns_host, full)))
    assert response.json() == {"actions": ["counted"]}
    assert state(store, reader)[:3] == ("active", 0, 1)
    complaint = ses_complaint(other.email, message_id(issue, other))
    fields = notification(sns_host, complaint, MessageId="complaint-1")
    response = client.post("/hooks/bounces/ses", json=signed(fields))
    assert response.json() == {"actions": ["unsubscribed"]}
    assert store.subscribers.subscriber_by_id(other.id).status == "unsubscribed"


def test_a_delivery_notification_changes_nothing(ses, sns_host):
    client, store, (reader, _), issue = ses
    delivery = {
        "notificationType": "Delivery",
        "delivery": {"recipients": [reader.email], "smtpResponse": "250 ok"},
        "mail": {"commonHeaders": {"messageId": message_id(issue, reader)}},
    }
    response = client.post("/hooks/bounces/ses", json=signed(notification(sns_host, delivery)))
    assert response.json() == {"actions": ["ignored: no bounce"]}
    assert state(store, reader) == ("active", 0, 0, {})


def test_a_subscription_is_confirmed_at_its_url(ses, sns_host):
    client, store, (reader, _), _ = ses
    confirm = f"{sns_host.base}/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=abc"
    body = signed(
        {
            "Type": "SubscriptionConfirmation",
            "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
            "Token": "abc",
            "TopicArn": TOPIC,
            "Message": f"You have chosen to subscribe to the topic {TOPIC}.",
            "SubscribeURL": confirm,
            "Timestamp": "2026-12-01T12:00:00.000Z",
            "SigningCertURL": f"{sns_host.base}/cert.pem",
        },
        version="2",
    )
    response = client.post("/hooks/bounces/ses", json=body)
    assert response.status_code == 200 and response.json() == {"actions": []}
    assert sns_host.asked == ["/cert.pem", confirm.removeprefix(sns_host.base)]
    assert state(store, reader) == ("active", 0, 0, {})


def test_an_unverified_sns_message_is_refused_and_changes_nothing(ses, sns_host):
    client, store, (reader, _), issue = ses
    fields = notification(sns_host, ses_bounce(reader.email, message_id(issue, reader)))
    good = signed(fields)
    forged = {
        "other key": signed(fields, OTHER_KEY),
        "no signature": {k: v for k, v in good.items() if k != "Signature"},
        "garbled signature": {**good, "Signature": "not base64!"},
        "unknown version": {**good, "SignatureVersion": "3"},
        "changed after signing": {**good, "Message": good["Message"].replace("5.1.1", "5.1.2")},
        "another topic": signed({**fields, "TopicArn": TOPIC + "-theirs"}),
        "their certificate": signed({**fields, "SigningCertURL": f"{sns_host.base}/other.pem"}),
        "not SNS's host": signed({**fields, "SigningCertURL": "https://example.com/cert.pem"}),
        "not a .pem": signed({**fields, "SigningCertURL": f"{sns_host.base}/cert.txt"}),
    }
    for why, body in forged.items():
        response = client.post("/hooks/bounces/ses", json=body)
        assert response.status_code == 403, why
    assert state(store, reader) == ("active", 0, 0, {})
    assert not any(path.startswith("/cert.txt") for path in sns_host.asked)
    bad = client.post("/hooks/bounces/ses", content=b"{not json")
    assert bad.status_code == 400 and state(store, reader) == ("active", 0, 0, {})


def test_without_a_topic_the_route_is_not_there(tmp_path, store, article_set, clock):
    config = parse_config({}, root=tmp_path, source="(test)", env={})
    client = make_client(config, store, refuse, article_set, clock)
    assert client.post("/hooks/bounces/ses", json={}).status_code == 404


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem", True),
        ("https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem", True),
        ("http://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem", False),
        ("https://sns.eu-west-1.amazonaws.com.example.com/cert.pem", False),
        ("https://sns.eu-west-1.amazonaws.com@example.com/cert.pem", False),
        ("https://example.com/sns.eu-west-1.amazonaws.com/cert.pem", False),
        ("https://sqs.eu-west-1.amazonaws.com/cert.pem", False),
    ],
)
def test_in_production_only_snss_own_hosts_are_asked(url, ok):
    assert sns_url_ok(url) is ok
    assert sns_url_ok(url, SNS_URL) is ok
