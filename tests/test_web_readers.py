"""Subscribing and the links in readers' mail, against a real SMTP server and database."""

from __future__ import annotations

import logging
from datetime import timedelta
from email.message import EmailMessage

import pytest
from starlette.testclient import TestClient

from syndicate.config import parse_config
from syndicate.sending.messages import message_sender
from syndicate.tokens import CONFIRM, PREFERENCES, UNSUBSCRIBE, make_token
from tests.websites import (
    SECRET,
    free_port,
    html,
    make_client,
    smtp_mailer,
    subscribe,
    web_config,
)


def test_double_opt_in(site, caplog):
    client, store, inbox, *_ = site
    caplog.set_level(logging.INFO, logger="syndicate")
    response = subscribe(client, "Lezer@Example.org", audiences=("cost", "architects"))
    assert response.status_code == 200
    assert "Kijk in je inbox" in response.text
    reader = store.subscribers.subscriber("Lezer@example.org")
    assert (reader.status, reader.lang, reader.audiences) == (
        "pending",
        "nl",
        ("architects", "cost"),
    )
    [mail] = inbox.messages
    assert mail["To"] == "Lezer@example.org"
    assert mail["Subject"] == "Bevestig je aanmelding bij Syndicate"
    link = inbox.link()
    assert link.startswith("http://testserver/confirm/")

    page = client.get(link)
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert (
        store.subscribers.subscriber_by_id(reader.id).status == "pending"
    )  # GET alone does nothing
    token = html(page).xpath("//form//input[@name='csrf']/@value")[0]
    confirmed = client.post(link, data={"csrf": token})
    assert confirmed.status_code == 200
    assert "Aanmelding bevestigd" in confirmed.text
    assert store.subscribers.subscriber_by_id(reader.id).status == "active"
    assert "lezer" not in caplog.text.lower()
    assert f"reader {reader.id} confirmed" in caplog.text


def test_invalid_input_is_refused_without_side_effects(site):
    client, store, inbox, *_ = site
    bad_email = subscribe(client, "not an address")
    assert bad_email.status_code == 400
    assert "Vul een geldig e-mailadres in." in bad_email.text
    no_group = subscribe(client, "a@example.org", audiences=())
    assert no_group.status_code == 400
    assert list(store.subscribers.all()) == []
    assert inbox.messages == []


def test_echoed_input_is_escaped(site):
    client, *_ = site
    response = subscribe(client, '"><script>alert(1)</script>')
    assert response.status_code == 400
    assert "<script>alert" not in response.text
    assert html(response).xpath("//input[@name='email']/@value") == ['"><script>alert(1)</script>']


def test_subscribing_a_known_address_reveals_nothing(site, clock):
    client, store, inbox, *_ = site
    active = store.subscribers.add_subscriber(
        "known@example.org", "de", ["strategy"], status="active", consent_source="t", now=clock()
    )
    new = subscribe(client, "new@example.org")
    known = subscribe(client, "known@example.org")
    assert (known.status_code, known.text) == (new.status_code, new.text)
    unchanged = store.subscribers.subscriber_by_id(active.id)
    assert (unchanged.status, unchanged.lang, unchanged.audiences) == (
        "active",
        "de",
        ("strategy",),
    )
    # The owner, not the visitor, learns of it: a note in the reader's own language.
    note = inbox.messages[-1]
    assert note["To"] == "known@example.org"
    assert note["Subject"] == "Ihr Abonnement bei Syndicate"
    assert "/preferences/" in inbox.link()
    # In another letter case it is still the same reader: no second one, nothing changed.
    again = subscribe(client, "KNOWN@Example.ORG")
    assert (again.status_code, again.text) == (new.status_code, new.text)
    assert [s.email for s in store.subscribers.all()] == ["known@example.org", "new@example.org"]
    assert store.subscribers.subscriber_by_id(active.id).status == "active"
    assert inbox.messages[-1]["Subject"] == "Ihr Abonnement bei Syndicate"


def test_a_mail_server_failure_is_a_polite_503(tmp_path, store, article_set, clock):
    config = web_config(tmp_path)
    client = make_client(config, store, smtp_mailer(free_port()), article_set, clock)
    response = subscribe(client, "a@example.org")
    assert response.status_code == 503
    assert "Niet verzonden" in response.text


# -- reader links --------------------------------------------------------------------------


@pytest.fixture
def active(site, clock):
    _, store, *_ = site
    return store.subscribers.add_subscriber(
        "reader@example.org", "de", ["cost"], status="active", consent_source="t", now=clock()
    )


def test_unsubscribe_page_then_post(site, active, clock):
    client, store, *_ = site
    url = f"/u/{make_token(SECRET, UNSUBSCRIBE, active.id, issued=clock())}"
    page = client.get(url)
    assert page.status_code == 200
    assert html(page).get("lang") == "de"
    assert "Abbestellen" in page.text
    assert "reader@example.org" not in page.text
    assert html(page).xpath("//main/p[1]/text()") == ["Für die Adresse r•••@example.org"]
    assert store.subscribers.subscriber_by_id(active.id).status == "active"
    token = html(page).xpath("//form//input[@name='csrf']/@value")[0]
    done = client.post(url, data={"csrf": token})
    assert done.status_code == 200
    assert "Sie haben abbestellt" in done.text
    assert "Für die Adresse r•••@example.org" in done.text
    assert store.subscribers.subscriber_by_id(active.id).status == "unsubscribed"


def test_rfc8058_one_click_post_needs_no_cookie(site, active, clock):
    client, store, *_ = site
    url = f"/u/{make_token(SECRET, UNSUBSCRIBE, active.id, issued=clock())}"
    mail_client = TestClient(client.app)
    response = mail_client.post(
        url,
        content=b"List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 200
    assert store.subscribers.subscriber_by_id(active.id).status == "unsubscribed"
    # Repeating it is harmless.
    again = mail_client.post(url, data={"List-Unsubscribe": "One-Click"})
    assert again.status_code == 200


def test_preferences_change_language_and_audiences(site, active, clock):
    client, store, *_ = site
    url = f"/preferences/{make_token(SECRET, PREFERENCES, active.id, issued=clock())}"
    response = client.get(url)
    assert "reader@example.org" not in response.text
    page = html(response)
    assert page.xpath("//main/p[1]/text()") == ["Für die Adresse r•••@example.org"]
    assert page.xpath("//select[@name='lang']/option[@selected]/@value") == ["de"]
    assert page.xpath("//input[@name='audiences'][@checked]/@value") == ["cost"]
    token = page.xpath("//input[@name='csrf']/@value")[0]
    saved = client.post(url, data={"csrf": token, "lang": "nl", "audiences": ["strategy", "cost"]})
    assert saved.status_code == 200
    assert "Je voorkeuren zijn opgeslagen." in saved.text  # now shown in the new language
    after = store.subscribers.subscriber_by_id(active.id)
    assert (after.lang, after.audiences, after.status) == ("nl", ("cost", "strategy"), "active")
    unsubscribe = html(saved).xpath("//a[contains(@href, '/u/')]/@href")[0]
    assert client.get(unsubscribe).status_code == 200


def test_preferences_set_the_readers_time_zone(site, active, clock):
    client, store, *_ = site
    url = f"/preferences/{make_token(SECRET, PREFERENCES, active.id, issued=clock())}"
    page = html(client.get(url))
    zone = "//select[@name='timezone']/option[@selected]/@value"
    assert page.xpath(zone) == ["Europe/Amsterdam"]  # the site's, until the reader picks one
    assert "Asia/Tokyo" in page.xpath("//select[@name='timezone']/option/@label")
    token = page.xpath("//input[@name='csrf']/@value")[0]
    form = {"csrf": token, "lang": "de", "audiences": ["cost"]}
    saved = client.post(url, data={**form, "timezone": "Asia/Tokyo"})
    assert html(saved).xpath(zone) == ["Asia/Tokyo"]
    assert store.subscribers.subscriber_by_id(active.id).timezone == "Asia/Tokyo"
    client.post(url, data={**form, "timezone": "Mars/Olympus_Mons"})  # not a zone: kept
    assert store.subscribers.subscriber_by_id(active.id).timezone == "Asia/Tokyo"


def test_bad_tokens_get_one_plain_page(site, active, clock, store):
    client, *_ = site
    good = make_token(SECRET, UNSUBSCRIBE, active.id, issued=clock())
    flipped = good[:10] + ("A" if good[10] != "A" else "B") + good[11:]
    gone = store.subscribers.add_subscriber(
        "gone@example.org", "nl", ["cost"], status="active", consent_source="t", now=clock()
    )
    gone_token = make_token(SECRET, UNSUBSCRIBE, gone.id, issued=clock())
    store.subscribers.remove_subscriber("gone@example.org")
    expired = make_token(SECRET, CONFIRM, active.id, issued=clock() - timedelta(days=8))
    cases = [
        f"/u/{flipped}",
        f"/u/{good[:-4]}",
        "/u/not-a-token",
        f"/u/{make_token(b'other key', UNSUBSCRIBE, active.id, issued=clock())}",
        f"/u/{make_token(SECRET, PREFERENCES, active.id, issued=clock())}",  # wrong purpose
        f"/u/{gone_token}",
        f"/confirm/{expired}",
        f"/preferences/{good}",
    ]
    bodies = set()
    for path in cases:
        for method in (client.get, client.post):
            response = method(path)
            assert response.status_code == 404, path
            assert "reader@example.org" not in response.text
            bodies.add(response.text)
    assert len(bodies) == 1
    assert store.subscribers.subscriber_by_id(active.id).status == "active"


# -- single messages (confirmations) through the configured mailer ------------------------


def test_confirmation_mail_goes_to_the_configured_smtp_server(tmp_path, smtp_server, clock):
    inbox, port = smtp_server
    config = parse_config(
        {"smtp": {"url": f"smtp://127.0.0.1:{port}"}}, root=tmp_path, source="(t)", env={}
    )
    message = EmailMessage()
    message["To"], message["Subject"] = "a@example.org", "hello"
    message.set_content("body")
    message_sender(config)(message)
    assert [m["Subject"] for m in inbox.messages] == ["hello"]


def test_without_smtp_the_mail_lands_in_the_outbox_maildir(tmp_path):
    config = parse_config({}, root=tmp_path, source="(t)", env={})
    message = EmailMessage()
    message["To"], message["Subject"] = "a@example.org", "hello"
    message.set_content("body")
    message_sender(config)(message)
    [stored] = list((tmp_path / "outbox" / "maildir" / "new").iterdir())
    assert b"Subject: hello" in stored.read_bytes()
