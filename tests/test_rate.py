"""The rate backing off when the relay asks to slow down (421, 4.7.x, a reply that speaks of
rate or too many connections) and climbing back: in memory for one ``send`` process
(``Pacer``), in the shared bucket row for every worker of a distributed send; a temporary
refusal of one reader (a plain 451, greylisting) retrying that reader alone, at the same rate;
and ``send --status`` showing the workers alive and the rate now."""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import load_config
from syndicate.sending import issuing
from syndicate.sending.engine import dispatcher
from syndicate.sending.loop import deliver
from syndicate.sending.pacing import CUT_INTERVAL, SLOW_DOWN, Pace, Pacer, SlowDown, throttling
from syndicate.state import Store, open_store
from tests import sending
from tests.mailserver import Inbox, ScriptedController, free_port
from tests.test_scale import (
    PATIENCE,
    _statuses,
    _stop,
    _until,
    _worker,
    _write_config,
    add_readers,
)

try:
    from syndicate.sending import scale
except ImportError:  # the optional extra syndicate[scale]: the scale_url fixture says so
    scale = None


@pytest.mark.parametrize(
    ("reply", "slow_down"),
    [
        # the relay asks every connection to slow down: a 421, a 4.7.x, or it says so
        ("451 4.7.1 slow down", True),
        ("421 4.3.2 closing", True),
        ("421 Too many concurrent SMTP connections; please try again later.", True),  # Exim
        ("421 4.7.0 mx.example.org Error: too many connections from 192.0.2.1", True),  # Postfix
        ("450 4.7.1 Error: too much mail from 192.0.2.1", True),  # Postfix's message rate
        ("450 4.7.1 Client host rejected: too many messages", True),  # 4.7.x: policy
        (
            "421 4.7.28 Gmail has detected an unusual rate of unsolicited mail originating "
            "from your IP address.",
            True,
        ),
        ("451 4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77719)", True),
        ("452 4.7.0 rate limit exceeded", True),
        ("451 Rate limit exceeded", True),
        ("450 too many connections from your host", True),
        ("454 Throttling failure: Maximum sending rate exceeded.", True),  # Amazon SES
        ("451 try again later, slow down", True),
        # one reader's state: that reader is retried, the rate is left as it is
        ("451 4.3.0 try later", False),
        ("451 ", False),
        ("451 Temporary local problem - please try later", False),  # Exim
        ("451 4.3.0 Mail server temporarily rejected message.", False),  # Gmail
        ("452 4.2.2 mailbox full", False),
        ("450 4.2.0 greylisted, try again", False),
        ("451 4.7.1 Greylisting in action, please come back later", False),  # 4.7.1: greylist
        (
            "450 4.2.0 <reader@example.com>: Recipient address rejected: Greylisted, see "
            "http://postgrey.schweikert.ch/help/example.com.html",
            False,
        ),
        (
            "450 4.2.1 The user you are trying to contact is receiving mail at a rate that "
            "prevents additional messages from being delivered.",
            False,
        ),  # Gmail: that one mailbox's rate
        ("452 4.5.3 too many recipients", False),
        ("454 4.74.1 not an enhanced code of class 7", False),
        ("connection lost: [Errno 104] Connection reset by peer", False),
        ("connection lost before the end of data: 421 4.7.0 closing", False),
        ("cannot reach the SMTP server relay:25 ((421, b'4.7.0 busy'))", False),
        ("all 4 connections to relay:25 in use", False),
        ("4510 nonsense", False),
    ],
)
def test_which_replies_ask_to_slow_down(reply: str, slow_down: bool) -> None:
    assert throttling(reply) is slow_down


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_pacer_cuts_once_a_burst_never_below_the_floor_and_climbs_back() -> None:
    clock = Clock()
    pacer = Pacer(100.0, SlowDown(min_rate=20.0, recover_seconds=50.0), clock=clock)
    assert pacer.current() == 100.0
    pacer.slowed("451 4.7.1 slow down")
    assert pacer.current() == pytest.approx(100 * SLOW_DOWN)
    clock.now += CUT_INTERVAL / 2
    pacer.slowed("451 4.7.1 slow down")  # the same burst: no second cut
    assert pacer.current() == pytest.approx(70 + 100 * (CUT_INTERVAL / 2) / 50)
    for _ in range(10):  # a relay that keeps refusing: down to the floor, no further
        clock.now += CUT_INTERVAL
        pacer.slowed("421 4.7.0 try again later")
    assert pacer.current() == pytest.approx(20.0)
    clock.now += 20  # 100/s every 50 s: 40/s more
    assert pacer.current() == pytest.approx(60.0)
    clock.now += 20
    assert pacer.current() == 100.0  # back at the rate, and never above it
    clock.now += 1000
    assert pacer.current() == 100.0


def test_the_pacer_spaces_sends_by_the_rate_now() -> None:
    clock = Clock()
    pacer = Pacer(100.0, SlowDown(min_rate=1.0, recover_seconds=1e9), clock=clock)
    waits: list[float] = []

    def pause(seconds: float) -> bool:
        waits.append(seconds)
        return True

    for _ in range(3):
        pacer.wait(pause)
    pacer.slowed("451 4.7.1 slow down")
    for _ in range(3):
        pacer.wait(pause)
    # 1/100 s apart, then (from the slot already given out) 1/70 s apart
    assert waits == pytest.approx([0.01, 0.02, 0.03, 0.03 + 1 / 70, 0.03 + 2 / 70])


def test_one_send_process_slows_down_on_a_slow_down_reply_only(store: Store, smtp_server) -> None:
    """The local engine: a 452 (mailbox full) or a plain 451 (greylisting) leaves the rate as
    it is, a 451 4.7.1 cuts it (all retried, every reader gets one message)."""
    inbox, port = smtp_server
    readers = sending.add_readers(store, 6)
    pacer = Pacer(10_000, SlowDown(min_rate=1.0, recover_seconds=1e9))

    def run() -> int:
        options = sending.options(pace=pacer)
        return deliver(store, sending.mailer(port), sending.compose, options, sending.NOW).sent

    sending.make_issue(store, readers)
    inbox.script[("rcpt", "reader1@example.com")] = ["452 4.2.2 mailbox full"]
    inbox.script[("rcpt", "reader3@example.com")] = ["451 4.3.0 try again later"]
    assert run() == 6 and pacer.current() == 10_000
    sending.make_issue(store, readers, content="two")
    inbox.script[("rcpt", "reader2@example.com")] = ["451 4.7.1 slow down"]
    assert run() == 6 and pacer.current() == pytest.approx(7_000)
    assert set(inbox.counts().values()) == {2}


# -- the shared bucket, on the real PostgreSQL ---------------------------------------------------

RELAY = "relay.example.org:25"

ONE_READERS = {
    "reader3@example.com": "451 4.3.0 try again later",
    "reader17@example.com": (
        "450 4.2.0 <reader17@example.com>: Recipient address rejected: Greylisted, see "
        "http://postgrey.schweikert.ch/help/example.com.html"
    ),
    "reader29@example.com": "451 4.7.1 Greylisting in action, please come back later",
    "reader33@example.com": (
        "450 4.2.1 The user you are trying to contact is receiving mail at a rate that "
        "prevents additional messages from being delivered."
    ),
}
"""Temporary refusals of one reader, each as a real relay gives it: a plain 451, Postgrey's
and sqlgrey's greylisting, Gmail's mailbox receiving too fast."""


def _pace(store: Store, kind: str) -> tuple[Pace, Callable[[], float]]:
    """A pace at 10,000/s that never climbs back, and how to read its rate now: one send
    process's (``Pacer``) or the relay's bucket row that every worker shares."""
    slow_down = SlowDown(min_rate=1.0, recover_seconds=1e9)
    if kind == "local":
        pacer = Pacer(10_000, slow_down)
        return pacer, pacer.current
    shared = scale.SharedPace(store, RELAY, 10_000, slow_down)
    return shared, lambda: store.relays.relay_rates(1e9)[0].current


@pytest.mark.parametrize("kind", ["local", "shared"])
def test_a_451_to_one_reader_retries_that_reader_alone_and_keeps_the_rate(
    scale_url: str, smtp_server, kind: str
) -> None:
    """Issue 26: one reader's temporary refusal (greylisting: one mailbox's state) retries
    that reader and leaves the rate as it is, in one process and across workers alike; a
    relay asking to slow down (Microsoft's 451 4.7.500) cuts it."""
    inbox, port = smtp_server
    store = open_store(scale_url)
    readers = sending.add_readers(store, 40)
    pace, rate_now = _pace(store, kind)

    def run() -> int:
        options = sending.options(pace=pace)
        return deliver(store, sending.mailer(port), sending.compose, options, sending.NOW).sent

    sending.make_issue(store, readers)
    for email, reply in ONE_READERS.items():
        inbox.script[("rcpt", email)] = [reply]
    assert run() == 40 and rate_now() == 10_000
    attempts = {d.email: d.attempts for d in store.ledger.deliveries("sent")}
    assert {email for email, tries in attempts.items() if tries > 1} == set(ONE_READERS)
    assert {attempts[email] for email in ONE_READERS} == {2}

    sending.make_issue(store, readers, content="two")
    busy = "451 4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77719)"
    inbox.script[("rcpt", "reader5@example.com")] = [busy]
    assert run() == 40 and rate_now() == pytest.approx(7_000)
    assert set(inbox.counts().values()) == {2}
    store.close()


def _cut_back(store: Store, seconds: float) -> None:
    """Move the last cut ``seconds`` into the past (as if that long had gone by since)."""
    query = "UPDATE relay_buckets SET cut_at = cut_at - make_interval(secs => :s)"
    with store.engine.begin() as db:
        db.execute(sa.text(query), {"s": seconds})


def test_a_cut_of_the_shared_rate_holds_for_its_burst_and_stops_at_the_floor(
    scale_url: str,
) -> None:
    store = open_store(scale_url)
    store.relays.ensure_bucket(RELAY, 100.0)
    [fresh] = store.relays.relay_rates(100.0)
    assert (fresh.rate, fresh.current, fresh.cut_rate, fresh.cut_at) == (100.0, 100.0, None, None)
    assert store.relays.cut_rate(RELAY, 0.7, 10.0, 60.0, 1e9) == pytest.approx(70.0)
    assert store.relays.cut_rate(RELAY, 0.7, 10.0, 60.0, 1e9) is None  # within the interval
    [cut] = store.relays.relay_rates(1e9)
    assert cut.current == pytest.approx(70.0) and cut.cut_at is not None
    cuts = [store.relays.cut_rate(RELAY, 0.7, 10.0, 0.0, 1e9) for _ in range(8)]
    assert cuts[:3] == pytest.approx([49.0, 34.3, 24.01])
    assert cuts[-1] == pytest.approx(10.0)  # the floor
    assert store.relays.cut_rate(RELAY, 0.7, 500.0, 0.0, 1e9) == 100.0  # a floor above the rate
    store.close()


def test_workers_hearing_one_burst_at_once_cut_the_shared_rate_once(scale_url: str) -> None:
    store = open_store(scale_url)
    store.relays.ensure_bucket(RELAY, 100.0)
    start = threading.Barrier(8)
    cuts: list[float | None] = []

    def hear_451() -> None:
        start.wait()
        cuts.append(store.relays.cut_rate(RELAY, 0.7, 10.0, 60.0, 1e9))

    threads = [threading.Thread(target=hear_451) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(cuts, key=lambda c: c is None) == [pytest.approx(70.0)] + [None] * 7
    assert store.relays.relay_rates(1e9)[0].current == pytest.approx(70.0)
    store.close()


def test_the_shared_rate_climbs_back_by_itself_and_a_config_change_keeps_the_cut(
    scale_url: str,
) -> None:
    store = open_store(scale_url)
    store.relays.ensure_bucket(RELAY, 100.0)
    store.relays.cut_rate(RELAY, 0.5, 10.0, 1.0, 100.0)
    _cut_back(store, 20)  # 100/s every 100 s: 20/s more
    [climbing] = store.relays.relay_rates(100.0)
    assert climbing.current == pytest.approx(70.0, abs=0.5)
    assert climbing.back_at is not None and climbing.cut_at is not None
    assert (climbing.back_at - climbing.cut_at).total_seconds() == pytest.approx(50.0)
    # the next cut starts from the rate now, not from the last cut
    assert store.relays.cut_rate(RELAY, 0.5, 10.0, 1.0, 100.0) == pytest.approx(35.0, abs=0.5)
    store.relays.ensure_bucket(RELAY, 200.0)  # the config changed: a cut stays in force
    [changed] = store.relays.relay_rates(100.0)
    assert changed.rate == 200.0 and changed.current == pytest.approx(35.0, abs=2.0)
    _cut_back(store, 30)  # 200/s every 100 s: 60/s more
    assert store.relays.relay_rates(100.0)[0].current == pytest.approx(95.0, abs=2.0)
    _cut_back(store, 60)
    [back] = store.relays.relay_rates(100.0)
    assert back.current == 200.0  # never above the rate
    store.close()


def test_a_worker_waits_for_a_token_at_the_rate_now(scale_url: str) -> None:
    """Tokens come at the cut rate: once the burst is drawn, the next is 1/rate away."""
    store = open_store(scale_url)
    store.relays.ensure_bucket(RELAY, 100.0)  # a burst of 10
    store.relays.cut_rate(RELAY, 0.1, 1.0, 1.0, 1e9)  # 10/s

    def drained() -> float:
        for _ in range(100):
            taken, wait = store.relays.take_tokens(RELAY, 1e9, 1)
            if not taken:
                return wait
        raise AssertionError("a bucket at 10/s never ran dry")

    assert drained() == pytest.approx(0.1)
    _cut_back(store, 1e9)  # recovered long since
    assert store.relays.relay_rates(1e9)[0].current == 100.0
    assert drained() == pytest.approx(0.01)
    store.close()


def test_a_fast_relay_gives_its_tokens_a_block_at_a_time_and_never_more_than_it_holds(
    scale_url: str,
) -> None:
    """At a high rate a batch takes a few tokens per commit; the bucket never gives more than
    it holds, and a slow relay's tokens still come one at a time."""
    store = open_store(scale_url)
    store.relays.ensure_bucket(RELAY, 100.0)  # a burst of 10
    assert store.relays.take_tokens(RELAY, 1e9, 4) == (4, 0.0)
    assert store.relays.take_tokens(RELAY, 1e9, 20)[0] in (6, 7)  # what is left, and a refill
    taken, wait = store.relays.take_tokens(RELAY, 1e9, 20)
    assert taken <= 1 and (taken or wait == pytest.approx(0.01))
    fast = scale.SharedPace(store, "fast.example.org:25", 100_000.0, SlowDown())
    slow = scale.SharedPace(store, "slow.example.org:25", 200.0, SlowDown())
    assert (fast.block, slow.block) == (scale.TOKEN_BLOCK, 1)
    assert all(fast.wait(lambda seconds: True) for _ in range(50))
    [fast_row] = [r for r in store.relays.relay_rates(1e9) if r.relay == "fast.example.org:25"]
    with store.engine.connect() as db:
        left = db.execute(
            sa.text("SELECT tokens FROM relay_buckets WHERE relay = 'fast.example.org:25'")
        ).scalar_one()
    taken = -(-50 // fast.block) * fast.block  # whole blocks for 50 messages
    assert fast_row.rate == 100_000.0 and left == pytest.approx(10_000 - taken, abs=200)
    assert fast.tokens == taken - 50
    store.close()


# -- test 5: a 451 burst across workers ----------------------------------------------------------


@dataclass
class Throttling(Inbox):
    """A relay that answers its first ``burst`` recipients 451 4.7.1, each reader ``each``
    times at most, then takes them all: a count, not a span of time, so that the burst is
    the same however fast the workers run, and no reader outlasts its retries."""

    burst: int = 12
    each: int = 3
    refused: int = 0
    tries: Counter[str] = field(default_factory=Counter)

    async def handle_RCPT(self, server, session, envelope, address, options) -> str:
        with self.lock:
            throttled = self.refused < self.burst and self.tries[address] < self.each
            if throttled:
                self.refused += 1
                self.tries[address] += 1
        if throttled:
            return "451 4.7.1 too many messages, slow down"
        return await super().handle_RCPT(server, session, envelope, address, options)


@pytest.fixture
def throttling_server():
    inbox = Throttling()
    controller = ScriptedController(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield inbox, controller.port
    controller.stop()


def _rate_config(root: Path, url: str, port: int) -> Path:
    """Two connections a worker at 200/s across the workers; a row tried up to six times
    (retries 0.25 s, 0.5 s, ... apart), more than a reader of the burst needs; a cut made up
    within 6 s, never below 50/s."""
    path = _write_config(root, url, port)
    text = path.read_text().replace("rate = 10000", "rate = 200\nretries = 5")
    text = text.replace("retry_backoff = 0", "retry_backoff = 0.25")
    path.write_text(text + "min_rate = 50\nrecover_seconds = 6\n")
    return path


def _rate_now(store: Store, recover_seconds: float) -> float | None:
    """The one relay's rate now (None before its bucket exists)."""
    rates = store.relays.relay_rates(recover_seconds)
    return rates[0].current if rates else None


def test_a_451_burst_slows_every_worker_and_the_rate_recovers(
    tmp_path: Path, scale_url: str, throttling_server
) -> None:
    """Test 5: the relay answers 451 4.7.1 to its first recipients. Two workers back off (the
    rows are retried), every reader gets one message, the shared rate every worker draws
    from is cut (to 70 %, at most once a second, not below the floor) and is back at the
    configured rate later, by itself.

    Nothing here waits on the clock for an outcome: the burst is a count of replies, the cut
    is read from the row that records it (a rate sampled now and then could miss a dip on a
    busy machine), and each wait ends when what it waits for happens."""
    inbox, port = throttling_server
    path = _rate_config(tmp_path, scale_url, port)
    config = load_config(path)
    store = open_store(scale_url)
    readers = 200
    add_readers(store, readers)
    issuing.send_due(config, sending.NOW, dispatch=dispatcher(config))
    workers = [_worker(path) for _ in range(2)]
    try:
        assert _until(lambda: len(inbox.received) >= readers, PATIENCE)
        [relay] = store.relays.relay_rates(6)  # the refused readers were retried after their cut
        assert relay.cut_rate is not None and 50.0 <= relay.cut_rate <= 0.7 * 200 + 1e-6
        assert _until(lambda: _rate_now(store, 6) == 200.0, PATIENCE)
        # the last replies are recorded a moment after their message arrived
        assert _until(lambda: _statuses(store) == {"sent": readers}, PATIENCE)
    finally:
        _stop(workers)
    arrived = Counter(message["Message-ID"] for message in inbox.messages)
    assert len(arrived) == readers and set(arrived.values()) == {1}
    assert inbox.refused == inbox.burst
    attempts = Counter(d.attempts for d in store.ledger.deliveries("sent"))
    assert max(attempts) > 1 and max(attempts) <= inbox.each + 1
    store.close()


# -- send --status with workers ------------------------------------------------------------------


def _status(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["send", "--status", "--json", "--config", str(path)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_send_status_shows_the_workers_alive_and_the_rate_now(
    tmp_path: Path, scale_url: str, smtp_server
) -> None:
    _, port = smtp_server
    path = _write_config(tmp_path, scale_url, port)
    config = load_config(path)
    store = open_store(scale_url)
    relay = scale.relay_name(config)
    assert _status(path)["workers"] == [] and _status(path)["relays"] == []
    worker = _worker(path)
    try:
        # the status that showed it alive (on a busy machine its next heartbeat may come
        # late, and a second look find it silent)
        statuses: list[dict[str, Any]] = []

        def one_alive() -> bool:
            statuses.append(_status(path))
            return len(statuses[-1]["workers"]) == 1

        assert _until(one_alive, PATIENCE)
        [alive] = statuses[-1]["workers"]
        assert alive["seconds_since"] < config.send.stalled_seconds and alive["batches"] == 0
        store.relays.ensure_bucket(relay, config.smtp.rate)  # what a worker's first batch does
        assert store.relays.cut_rate(relay, 0.7, 1.0, 1.0, config.send.recover_seconds) is not None
        [rate] = _status(path)["relays"]
        assert rate["relay"] == relay and rate["rate"] == 10_000
        assert rate["cut_to"] == pytest.approx(7_000) and 7_000 <= rate["current"] < 8_000
        assert rate["cut_at"] and rate["back_at"]
        text = CliRunner().invoke(
            main, ["send", "--status", "--config", str(path)], env={"COLUMNS": "100"}
        )
        assert text.exit_code == 0, text.output
        assert "workers alive" in text.output and f"{alive['id']} " in text.output
        assert relay in text.output and "to 7,000.0 at" in text.output
        worker.send_signal(signal.SIGKILL)  # no goodbye: silent, then not alive any more
        worker.wait()
        assert _until(lambda: _status(path)["workers"] == [], PATIENCE)
    finally:
        _stop([worker])
    text = CliRunner().invoke(main, ["send", "--status", "--config", str(path)])
    assert "workers alive: none" in text.output
    store.close()
