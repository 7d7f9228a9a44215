"""WebSub: after a build that changed feeds, every configured hub is told, against real hubs."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from lxml import etree

from syndicate.build import MANIFEST, build_feeds
from syndicate.cli import main
from syndicate.config import Config, parse_config
from syndicate.websub import HubNotifier
from tests.hubserver import Hub
from tests.test_feeds import AUDIENCES, seeds

BASE = "https://news.example.org"
FAST = HubNotifier(timeout=2.0, retries=2, backoff=0.01)


def feeds_of(*langs: str) -> list[str]:
    """The subscription feeds of ``langs``: each language's, then each of its audiences'."""
    return [
        f"{BASE}/feeds/{lang}{audience}.{kind}"
        for lang in langs
        for audience in ("", *(f"/{a}" for a in AUDIENCES))
        for kind in ("atom.xml", "rss.xml", "json")
    ]


EVERY = len(feeds_of("en", "nl", "de"))
"""How many subscription feeds the seeds make: a hub is told of each."""


def make_config(root: Path, hub: Any) -> Config:
    data = {"site": {"base_url": BASE}, "feeds": {"hub": hub, "max_entries": 1}}
    return parse_config(data, root=root, source="(test)", env={})


def write_articles(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for lang, text in seeds().items():
        (folder / f"{lang}.txt").write_text(text, "utf-8")


def revise(folder: Path, lang: str) -> None:
    """A new title for the article of ``lang``: only that language's documents change."""
    path = folder / f"{lang}.txt"
    title, rest = path.read_text("utf-8").split("\n\n", 1)
    path.write_text(f"{title} (revised)\n\n{rest}", "utf-8")


def manifest(root: Path) -> dict[str, Any]:
    head = (root / "feeds" / MANIFEST).read_text("utf-8").split("\n", 1)[0]
    return json.loads(head)


@pytest.fixture
def silent_hub() -> Iterator[str]:
    """A hub that takes the connection and never answers: the notifier's timeout ends it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_every_hub_is_told_of_the_changed_feeds_once(
    tmp_path: Path, hubs: Callable[[], Hub]
) -> None:
    first, second = hubs(), hubs()
    config = make_config(tmp_path, [first.url, second.url])
    write_articles(tmp_path / "articles")
    report = build_feeds(config, tmp_path / "articles", notify=FAST)
    for hub in (first, second):
        # one request naming every subscription feed; no archive, no OPML
        assert len(hub.requests) == 1
        assert ("hub.mode", "publish") in hub.requests[0]
        assert sorted(hub.urls()[0]) == sorted(feeds_of("en", "nl", "de"))
    assert report.announced == {first.url: EVERY, second.url: EVERY} and report.unannounced == {}
    assert manifest(tmp_path)["unannounced"] == {}

    assert build_feeds(config, tmp_path / "articles", notify=FAST).skipped
    assert len(first.requests) == len(second.requests) == 1  # nothing changed: nobody told

    revise(tmp_path / "articles", "nl")
    build_feeds(config, tmp_path / "articles", notify=FAST)
    assert sorted(first.urls()[1]) == sorted(feeds_of("nl"))
    assert sorted(second.urls()[1]) == sorted(feeds_of("nl"))


def test_a_hub_that_is_down_is_told_by_a_later_build(
    tmp_path: Path, hubs: Callable[[], Hub], silent_hub: str
) -> None:
    up, flaky = hubs(), hubs()
    flaky.script = [503, 503, 503]  # every attempt of the first build fails
    config = make_config(tmp_path, [up.url, flaky.url, silent_hub])
    write_articles(tmp_path / "articles")
    quick = HubNotifier(timeout=0.2, retries=2, backoff=0.01)

    def notify(hub: str, topics: Sequence[str]) -> list[str]:
        """The silent hub's short timeout ends it; a hub that answers has FAST's 2 s (0.2 s
        took one for down when a busy machine kept its reply back)."""
        return (quick if hub == silent_hub else FAST)(hub, topics)

    report = build_feeds(config, tmp_path / "articles", notify=notify)
    assert not report.has_errors and len(report.written) == EVERY + 1  # the feeds and the OPML
    assert len(flaky.requests) == 3  # the first attempt and two retries
    assert set(report.unannounced) == {flaky.url, silent_hub}
    assert sorted(manifest(tmp_path)["unannounced"][flaky.url]) == sorted(
        feeds_of("en", "nl", "de")
    )

    # Nothing changed, yet the flaky hub hears what it missed; the working one nothing again.
    again = build_feeds(config, tmp_path / "articles", notify=notify)
    assert again.skipped
    assert len(up.requests) == 1 and len(flaky.requests) == 4
    assert sorted(flaky.urls()[3]) == sorted(feeds_of("en", "nl", "de"))
    assert set(manifest(tmp_path)["unannounced"]) == {silent_hub}

    # What one hub still waits for is kept with what changes next, each feed once.
    revise(tmp_path / "articles", "de")
    build_feeds(config, tmp_path / "articles", notify=notify)
    assert sorted(flaky.urls()[4]) == sorted(feeds_of("de"))
    waiting = manifest(tmp_path)["unannounced"][silent_hub]
    assert sorted(waiting) == sorted(feeds_of("en", "nl", "de"))


def test_a_transient_failure_is_retried_within_the_build(
    tmp_path: Path, hubs: Callable[[], Hub]
) -> None:
    hub = hubs()
    hub.script = [502, 500]
    write_articles(tmp_path / "articles")
    report = build_feeds(make_config(tmp_path, hub.url), tmp_path / "articles", notify=FAST)
    assert len(hub.requests) == 3 and hub.urls()[0] == hub.urls()[2]
    assert report.unannounced == {} and report.announced == {hub.url: EVERY}


def test_a_hub_that_takes_one_feed_per_request_is_told_of_each(
    tmp_path: Path, hubs: Callable[[], Hub]
) -> None:
    hub = hubs()
    hub.refuse_batches = True
    write_articles(tmp_path / "articles")
    report = build_feeds(make_config(tmp_path, hub.url), tmp_path / "articles", notify=FAST)
    assert report.unannounced == {}
    singles = hub.requests[1:]
    assert len(singles) == EVERY
    for fields in singles:
        urls = [v for k, v in fields if k == "hub.url"]
        assert len(urls) == 1 and ("hub.topic", urls[0]) in fields
    assert sorted(u for urls in hub.urls()[1:] for u in urls) == sorted(feeds_of("en", "nl", "de"))


def test_a_single_hub_url_is_still_accepted_and_every_hub_is_announced(tmp_path: Path) -> None:
    one = make_config(tmp_path, "https://hub.example.org/")
    assert one.feeds.hub == ["https://hub.example.org"]
    both = make_config(tmp_path, ["https://a.example.org/", "https://b.example.org"])
    write_articles(tmp_path / "articles")
    build_feeds(both, tmp_path / "articles")  # no notifier: the hubs wait in the manifest
    out = tmp_path / "feeds"
    atom = etree.parse(str(out / "en.atom.xml"))
    hubs = atom.xpath("//a:link[@rel='hub']/@href", namespaces={"a": "http://www.w3.org/2005/Atom"})
    assert hubs == ["https://a.example.org", "https://b.example.org"]
    rss = etree.parse(str(out / "en.rss.xml"))
    assert len(rss.xpath("//*[local-name()='link'][@rel='hub']")) == 2
    doc = json.loads((out / "en.json").read_text("utf-8"))
    assert [h["url"] for h in doc["hubs"]] == ["https://a.example.org", "https://b.example.org"]
    assert set(manifest(tmp_path)["unannounced"]) == {
        "https://a.example.org",
        "https://b.example.org",
    }


def test_the_build_command_reports_each_hub(tmp_path: Path, hubs: Callable[[], Hub]) -> None:
    hub = hubs()
    write_articles(tmp_path / "articles")
    (tmp_path / "config.toml").write_text(
        f'[site]\nbase_url = "{BASE}"\n[feeds]\nhub = "{hub.url}"\n', "utf-8"
    )
    result = CliRunner().invoke(main, ["build", "--config", str(tmp_path / "config.toml")])
    assert result.exit_code == 0, result.output
    assert f"WebSub hub {hub.url} told of {EVERY} changed feed(s)" in result.output
    assert len(hub.requests) == 1


class NoBroker:
    """Celery's task decorator without a broker: a task runs when it is queued."""

    def task(self, **_options: Any) -> Callable[[Callable[..., Any]], Any]:
        def register(function: Callable[..., Any]) -> Any:
            function.delay = function  # type: ignore[attr-defined]
            return function

        return register


def test_a_websub_hub_from_pypi_accepts_the_pings(tmp_path: Path) -> None:
    """Flask-WebSub's hub (its own endpoint, over real HTTP) takes one feed per request, as
    ``hub.topic``: it refuses the batch, and the notifier then tells it of each feed."""
    from flask import Flask
    from flask_websub.hub import Hub as WebSubHub
    from flask_websub.hub import SQLite3HubStorage
    from werkzeug.serving import make_server

    app = Flask("hub")
    app.config["PUBLISH_SUPPORTED"] = True
    hub = WebSubHub(SQLite3HubStorage(str(tmp_path / "hub.db")), NoBroker())
    topics: list[str] = []
    # Its task would fetch each topic and push it to the subscribers: record the topics instead.
    hub.send_change = SimpleNamespace(delay=topics.append)
    app.register_blueprint(hub.build_blueprint(url_prefix="/hub"))
    server = make_server("127.0.0.1", 0, app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hub"
        assert FAST(url, feeds_of("en")[:1]) == []
        assert topics == feeds_of("en")[:1]
        assert FAST(url, feeds_of("nl", "de")) == []
        assert topics == feeds_of("en")[:1] + feeds_of("nl", "de")
    finally:
        server.shutdown()
        thread.join()
