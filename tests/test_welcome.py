"""The welcome mail: a reader who confirms gets, in their language, their group's latest issue
or the newest takeaways, delivered to a real SMTP server and parsed back."""

from __future__ import annotations

import re
from email.message import EmailMessage

from syndicate.config import parse_config
from syndicate.reader import read_articles
from syndicate.sending.messages import message_sender
from syndicate.sending.welcome import welcome_message
from syndicate.tokens import UNSUBSCRIBE, read_token
from tests.conftest import ARTICLES
from tests.sending import create_issue
from tests.websites import SECRET, SLUG, html, make_client, smtp_mailer, subscribe, web_config


def _confirm(client, inbox) -> None:
    link = inbox.link(0)
    token = html(client.get(link)).xpath("//form//input[@name='csrf']/@value")[0]
    assert client.post(link, data={"csrf": token}).status_code == 200


def _text(message: EmailMessage) -> str:
    body = message.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


def test_a_reader_who_confirms_is_welcomed_with_the_newest_takeaways(site) -> None:
    client, store, inbox, *_ = site
    subscribe(client, "lezer@example.org", audiences=("cost",))
    _confirm(client, inbox)
    _confirm(client, inbox)  # a second confirmation welcomes no one again
    _, welcome = inbox.messages
    assert welcome["To"] == "lezer@example.org"
    assert welcome["Subject"] == "Welkom bij Syndicate"
    assert re.fullmatch(r"<welcome\.\d+\.\d+@[\w.-]+>", welcome["Message-ID"])
    text = " ".join(_text(welcome).split())
    assert "Je aanmelding is bevestigd: je ontvangt de belangrijkste conclusies" in text
    assert "in het Nederlands." in text
    assert "Hier zijn de belangrijkste conclusies van het nieuwste artikel." in text
    assert f"http://testserver/nl/{SLUG}/" in text
    page = welcome.get_body(("html",))
    assert page is not None and '<html lang="nl"' in str(page.get_content())
    reader = store.subscribers.subscriber("lezer@example.org")
    token = re.search(r"/u/([\w-]+)>", welcome["List-Unsubscribe"])[1]
    assert read_token(SECRET, UNSUBSCRIBE, token) == reader.id


def test_the_welcome_repeats_the_groups_latest_issue(site) -> None:
    client, store, inbox, clock, _ = site
    articles = client.app.state.web.articles()
    article = articles.get("de", SLUG)
    issue = create_issue(
        store,
        key="de-cost",
        lang="de",
        audiences=["cost"],
        content_hash="de-latest",
        subject="Wichtigste Erkenntnisse",
        rendered="{}",
        articles=[("de", SLUG, article.content_hash)],
        readers=[],
        message_id=lambda i, r: f"<{i}.{r}@example.org>",
        now=clock.now,
    )
    assert issue is not None
    subscribe(client, "leser@example.org", lang="de", audiences=("cost",))
    _confirm(client, inbox)
    welcome = inbox.messages[-1]
    assert welcome["Subject"] == "Willkommen bei Syndicate"
    text = " ".join(_text(welcome).split())
    assert "Hier ist die neueste Ausgabe vom 15. Dezember 2025." in text
    assert f"http://testserver/de/{SLUG}/" in text
    assert f"http://testserver/archive/de/{issue.id}-de-cost" in text
    assert len(inbox.messages) == 2  # the confirmation, then the welcome: once


def test_no_welcome_when_it_is_turned_off(tmp_path, store, smtp_server, article_set, clock):
    inbox, port = smtp_server
    config = web_config(tmp_path)
    config = config.model_copy(update={"email": config.email.model_copy(update={"welcome": False})})
    client = make_client(config, store, smtp_mailer(port), article_set, clock)
    subscribe(client, "lezer@example.org", audiences=("cost",))
    _confirm(client, inbox)
    assert store.subscribers.subscriber("lezer@example.org").status == "active"
    assert len(inbox.messages) == 1  # the confirmation only


def test_the_welcome_goes_through_the_sender_serve_uses(tmp_path, store, smtp_server, clock):
    """`syndicate serve` hands mail to ``message_sender`` (7-bit bytes, DKIM when set): the
    welcome arrives whole, its parts and its reader's links intact."""
    inbox, port = smtp_server
    config = parse_config(
        {
            "site": {"base_url": "https://news.example.org"},
            "smtp": {"url": f"smtp://127.0.0.1:{port}"},
        },
        root=tmp_path,
        source="(t)",
        env={},
    )
    reader = store.subscribers.add_subscriber(
        "leserin@example.org", "de", ["cost"], status="active", consent_source="t", now=clock.now
    )
    found = read_articles(ARTICLES, config.profiles)
    message = welcome_message(config, store, found, reader, clock.now, SECRET)
    assert message is not None
    message_sender(config)(message)
    [welcome] = inbox.messages
    assert welcome["Subject"] == "Willkommen bei Syndicate"
    assert welcome.get_content_type() == "multipart/alternative"
    text = " ".join(_text(welcome).split())
    assert "Ihr Abonnement ist bestätigt: Sie erhalten die wichtigsten Erkenntnisse" in text
    assert f"https://news.example.org/de/{SLUG}/" in text
    token = re.search(r"/u/([\w-]+)>", welcome["List-Unsubscribe"])[1]
    assert read_token(SECRET, UNSUBSCRIBE, token) == reader.id
