"""A reader's round trip in a real browser against the real server, SMTP server and database."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from syndicate.routes import reader_url
from syndicate.tokens import UNSUBSCRIBE, make_token
from syndicate.web import create_app
from tests.conftest import ARTIFACTS
from tests.websites import (
    SECRET,
    SLUG,
    Clock,
    free_port,
    smtp_mailer,
    web_config,
)


@pytest.fixture
def live(tmp_path, store, smtp_server, article_set, clock: Clock) -> Iterator[tuple]:
    """The app under uvicorn on a loopback port, as `syndicate serve` runs it."""
    inbox, smtp_port = smtp_server
    port = free_port()
    config = web_config(tmp_path, base_url=f"http://127.0.0.1:{port}")
    app = create_app(
        config,
        store=store,
        send_message=smtp_mailer(smtp_port),
        articles=lambda: article_set,
        secret=SECRET,
        now=clock,
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:  # readiness wait, not a timing assertion
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the web server did not start")
        time.sleep(0.05)
    yield config, store, inbox, clock
    server.should_exit = True
    thread.join(timeout=15)


def test_subscribe_confirm_and_unsubscribe_in_chromium(live, browser):
    from playwright.sync_api import expect

    config, db, inbox, now = live
    base = config.site.base_url
    ARTIFACTS.mkdir(exist_ok=True)
    for width in (375, 1280):
        page = browser.new_page(viewport={"width": width, "height": 900})
        for name, path in (("index", "/nl/"), ("article", f"/nl/{SLUG}/")):
            page.goto(base + path)
            fits = "document.documentElement.scrollWidth <= window.innerWidth"
            assert page.evaluate(fits), f"{path} overflows at {width} px"
            page.screenshot(path=ARTIFACTS / f"nl-{name}-{width}.png", full_page=True)
        page.close()

    page = browser.new_page(viewport={"width": 375, "height": 900})
    page.goto(f"{base}/nl/")
    page.fill("#email", "lezer@example.org")
    page.check("input[name=audiences][value=cost]")
    page.check("input[name=audiences][value=architects]")
    page.get_by_role("button", name="Aanmelden").click()
    expect(page.locator("h1")).to_have_text("Kijk in je inbox")
    reader = db.subscribers.subscriber("lezer@example.org")
    assert (reader.status, reader.audiences) == ("pending", ("architects", "cost"))

    [mail] = inbox.messages
    assert mail["Subject"] == "Bevestig je aanmelding bij Syndicate"
    page.goto(inbox.link())
    page.screenshot(path=ARTIFACTS / "nl-confirm-375.png", full_page=True)
    page.get_by_role("button", name="Aanmelding bevestigen").click()
    expect(page.locator("h1")).to_have_text("Aanmelding bevestigd")
    assert db.subscribers.subscriber_by_id(reader.id).status == "active"

    # The link a digest carries in its footer and List-Unsubscribe header.
    token = make_token(SECRET, UNSUBSCRIBE, reader.id, issued=now())
    page.goto(reader_url(config, UNSUBSCRIBE, token))
    expect(page.locator("h1")).to_have_text("Afmelden")
    masked = page.get_by_text("Voor het adres l•••@example.org")
    expect(masked).to_be_visible()
    assert db.subscribers.subscriber_by_id(reader.id).status == "active"
    page.screenshot(path=ARTIFACTS / "nl-unsubscribe-375.png", full_page=True)
    page.get_by_role("button", name="Afmelden").click()
    expect(page.locator("h1")).to_have_text("Je bent afgemeld")
    assert db.subscribers.subscriber_by_id(reader.id).status == "unsubscribed"
    expect(masked).to_be_visible()
    # Its preferences page, from the link the page offers, says whose they are too.
    page.get_by_role("link", name="Voorkeuren wijzigen").click()
    expect(page.locator("h1")).to_have_text("Je voorkeuren")  # the Dutch catalog says "je"
    expect(page.get_by_text("Voor het adres l•••@example.org")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert "lezer@example.org" not in page.content()
