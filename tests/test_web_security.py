"""What guards the web side: CSRF tokens, rate limits, trusted proxies."""

from __future__ import annotations

from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from syndicate.errors import ConfigError
from syndicate.tokens import CONFIRM, PREFERENCES, UNSUBSCRIBE, make_token
from syndicate.web import create_app
from tests.websites import (
    SAME_ORIGIN,
    SECRET,
    html,
    make_client,
    smtp_mailer,
    subscribe,
    web_config,
)


def test_form_posts_need_the_csrf_token_or_the_same_origin(site, clock):
    client, store, inbox, *_ = site
    data = {"email": "a@example.org", "lang": "nl", "audiences": "cost"}
    assert client.post("/subscribe", data=data).status_code == 400
    assert client.post("/subscribe", data={**data, "csrf": "0" * 64}).status_code == 400
    for elsewhere in (
        {"Origin": "https://attacker.example"},
        {"Origin": "http://testserver.attacker.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # a sibling host is another site's page
        {"Origin": "null"},
    ):
        clock.now += timedelta(minutes=1)  # past the rate limit of each client
        assert client.post("/subscribe", data=data, headers=elsewhere).status_code == 400
    assert list(store.subscribers.all()) == []

    reader = store.subscribers.add_subscriber(
        "a@example.org", "nl", ["cost"], status="pending", consent_source="t", now=clock()
    )
    confirm = f"/confirm/{make_token(SECRET, CONFIRM, reader.id, issued=clock())}"
    # A reader's page has a form of its own, with the token its cookie goes with: the
    # origin alone, which the public subscribe form goes by, is not enough there.
    assert client.post(confirm, data={}, headers=SAME_ORIGIN).status_code == 400
    store.subscribers.set_status(reader.id, "active", clock())
    unsubscribe = f"/u/{make_token(SECRET, UNSUBSCRIBE, reader.id, issued=clock())}"
    assert client.post(unsubscribe, data={}, headers=SAME_ORIGIN).status_code == 400
    prefs = f"/preferences/{make_token(SECRET, PREFERENCES, reader.id, issued=clock())}"
    form = {"lang": "de", "audiences": "cost"}
    assert client.post(prefs, data=form, headers=SAME_ORIGIN).status_code == 400
    after = store.subscribers.subscriber_by_id(reader.id)
    assert (after.status, after.lang) == ("active", "nl")
    assert inbox.messages == []


def test_the_subscribe_form_is_posted_from_the_site_itself(site):
    """The index page is the same for every visitor (a static host serves it as written):
    its form has no token of theirs. A browser posting it says where the page came from,
    the site's own origin (site.base_url's) or Sec-Fetch-Site: same-origin."""
    client, store, inbox, *_ = site
    assert not html(client.get("/nl/")).xpath("//input[@name='csrf']")
    data = {"email": "a@example.org", "lang": "nl", "audiences": "cost"}
    assert client.post("/subscribe", data=data, headers={"Origin": "http://testserver"}).is_success
    same = {**data, "email": "b@example.org"}
    assert client.post("/subscribe", data=same, headers=SAME_ORIGIN).is_success
    assert sorted(s.email for s in store.subscribers.all()) == ["a@example.org", "b@example.org"]
    assert inbox.wait_idle()
    assert sorted(inbox.counts()) == ["a@example.org", "b@example.org"]


def test_subscribe_is_rate_limited_per_client(site, clock):
    client, _, inbox, *_ = site
    statuses = [subscribe(client, f"r{i}@example.org").status_code for i in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert len(inbox.messages) == 3
    clock.now += timedelta(seconds=61)
    assert subscribe(client, "later@example.org").status_code == 200


def test_mails_to_one_address_are_limited_per_hour(
    tmp_path, store, smtp_server, article_set, clock
):
    config = web_config(tmp_path, mails_per_address_hour=2)
    inbox, port = smtp_server
    client = make_client(config, store, smtp_mailer(port), article_set, clock)
    pages = [subscribe(client, "Victim@example.org") for _ in range(3)]
    pages.append(subscribe(client, "victim@EXAMPLE.org"))  # the same mailbox
    assert [p.status_code for p in pages] == [200] * 4
    assert len({p.text for p in pages}) == 1  # the visitor cannot tell the difference
    assert len(inbox.messages) == 2
    assert subscribe(client, "other@example.org").status_code == 200
    assert len(inbox.messages) == 3
    clock.now += timedelta(minutes=61)
    subscribe(client, "victim@example.org")
    assert len(inbox.messages) == 4


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(
    tmp_path, store, smtp_server, article_set, clock
):
    _, port = smtp_server

    def client_from(address: str, **web: object) -> TestClient:
        config = web_config(tmp_path, subscribe_per_minute=2, **web)
        app = create_app(
            config,
            store=store,
            send_message=smtp_mailer(port),
            articles=lambda: article_set,
            secret=SECRET,
            now=clock,
        )
        return TestClient(app, client=(address, 40000), follow_redirects=False)

    def statuses(client: TestClient, forwarded: list[str]) -> list[int]:
        return [
            subscribe(client, f"r{i}@example.org", headers={"X-Forwarded-For": value}).status_code
            for i, value in enumerate(forwarded)
        ]

    # By default no one is trusted: a client naming a new address each time is still one client.
    direct = client_from("203.0.113.9")
    assert statuses(direct, ["198.51.100.1", "198.51.100.2", "198.51.100.3"]) == [200, 200, 429]
    # Behind a trusted proxy, each client forwarded has its own bucket...
    proxied = client_from("10.0.0.2", trusted_proxies=["10.0.0.0/8"])
    assert statuses(proxied, ["198.51.100.1", "198.51.100.2", "198.51.100.1"]) == [200] * 3
    assert statuses(proxied, ["198.51.100.1"]) == [429]
    # ...and what a client puts in front of the proxy's own entry changes nothing.
    spoofed = ["1.1.1.1, 198.51.100.7", "2.2.2.2, 198.51.100.7", "3.3.3.3, 198.51.100.7"]
    assert statuses(proxied, spoofed) == [200, 200, 429]
    # A proxy not on the list is a client like any other.
    untrusted = client_from("192.0.2.1", trusted_proxies=["10.0.0.0/8"])
    assert statuses(untrusted, ["198.51.100.20", "198.51.100.21", "198.51.100.22"]) == [
        200,
        200,
        429,
    ]


def test_trusted_proxies_must_be_addresses(tmp_path):
    with pytest.raises(ConfigError, match=r"web\.trusted_proxies\.0: not an IP address"):
        web_config(tmp_path, trusted_proxies=["proxy.example.org"])
