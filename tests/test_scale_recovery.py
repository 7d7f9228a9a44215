"""A worker killed mid-batch whose row a restarted worker prunes before any reconciliation:
its job is left in ``doing`` with no worker (procrastinate#1518), and the reconciler must still
run it again. On the real PostgreSQL, real worker processes and a real SMTP server."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from syndicate.config import load_config
from syndicate.sending import issuing
from syndicate.sending.engine import dispatcher
from syndicate.state import Store, open_store
from tests.mailserver import Inbox, ScriptedController, free_port
from tests.sending import NOW
from tests.test_scale import (
    MICRO_BATCH,
    PATIENCE,
    _settled,
    _statuses,
    _stop,
    _until,
    _worker,
    _write_config,
    add_readers,
    scale,
)

MESSAGE_SECONDS = 0.02
"""How long the server takes over each message: a batch of 50 on two connections lasts half a
second, so a worker killed early in one leaves most of it unsent."""


@dataclass
class SlowInbox(Inbox):
    """The scripted server, answering each message only after ``MESSAGE_SECONDS``."""

    async def handle_DATA(self, server, session, envelope) -> str:
        await asyncio.sleep(MESSAGE_SECONDS)
        return await super().handle_DATA(server, session, envelope)


@pytest.fixture
def slow_server() -> Iterator[tuple[Inbox, int]]:
    inbox, port = SlowInbox(), free_port()
    controller = ScriptedController(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    inbox.release.set()
    controller.stop()


def test_a_job_left_doing_by_a_pruned_worker_is_run_again(
    tmp_path: Path, scale_url: str, slow_server: tuple[Inbox, int]
) -> None:
    """Test 9: SIGKILL a worker mid-batch; once it is silent past ``send.stalled_seconds`` a
    restarted worker prunes its row, which leaves its job in ``doing`` with no worker at all.
    The restarted worker is kept busy with the next batch (a message held at the server), so
    only the reconciliation below can run the orphan again. Then: the orphan is retried and
    finished, every reader got exactly one message but the killed worker's in-flight ones
    (uncertain, at most a micro-batch per connection), and no job is left in ``doing``."""
    inbox, port = slow_server
    path = _write_config(tmp_path, scale_url, port)
    config = load_config(path)
    store = open_store(scale_url)
    readers = 150  # batches 0, 1 and 2 of 50, taken in that order
    add_readers(store, readers)
    assert issuing.send_due(config, NOW, dispatch=dispatcher(config)).left == readers
    dead, busy = "reader10@example.com", "reader60@example.com"  # in batches 0 and 1
    inbox.script[("data", dead)] = ["HOLD"]
    inbox.script[("data", busy)] = ["HOLD"]
    workers = [_worker(path, concurrency=1)]  # one batch in doing at a time
    try:
        assert inbox.holding.wait(PATIENCE)
        ((batch, victim),) = _doing(store).items()
        assert batch == 0 and victim is not None
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        stalled = config.send.stalled_seconds
        assert _until(lambda: _silent_for(store, victim) > stalled, PATIENCE)
        workers.append(_worker(path, concurrency=1))  # it prunes silent workers as it starts
        assert _until(lambda: busy in inbox.counts(), PATIENCE)  # it holds batch 1 now
        (fresh,) = _workers(store)
        assert fresh != victim  # the victim's row is gone ...
        assert _doing(store) == {0: None, 1: fresh}  # ... and its job is nobody's
        reconciled = scale.reconcile_now(config)
        assert reconciled.retried >= 1 and reconciled.deferred == 0
        assert _status(store, 0) == "todo"  # again, the same job
        inbox.release.set()
        assert _until(lambda: _settled(store) and not _doing(store), PATIENCE)
    finally:
        inbox.release.set()  # a worker holding a message ends only once it is answered
        _stop(workers)
    assert _doing_any(store) == 0  # nothing left in doing, of any task
    by_status = _statuses(store)
    assert by_status["sent"] + by_status["uncertain"] == readers
    uncertain = {d.email for d in store.ledger.deliveries("uncertain")}
    assert dead in uncertain and len(uncertain) <= MICRO_BATCH * 2  # its two connections'
    arrived = Counter(message["Message-ID"] for message in inbox.messages)
    assert set(arrived.values()) == {1}
    sent = {d.message_id for d in store.ledger.deliveries("sent")}
    assert sent <= set(arrived) and len(sent) == readers - len(uncertain)
    store.close()


def _doing(store: Store) -> dict[int, int | None]:
    """The send jobs in ``doing``: batch number → worker id."""
    query = (
        "SELECT (args->>'batch_no')::int, worker_id FROM procrastinate_jobs"
        " WHERE status = 'doing' AND task_name = :task"
    )
    with store.engine.connect() as db:
        rows = db.execute(sa.text(query), {"task": scale.SEND_BATCH})
        return {batch: worker for batch, worker in rows}


def _doing_any(store: Store) -> int:
    """Jobs of any task in ``doing``."""
    query = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
    with store.engine.connect() as db:
        return db.execute(sa.text(query)).scalar_one()


def _status(store: Store, batch_no: int) -> str:
    query = (
        "SELECT status FROM procrastinate_jobs"
        " WHERE task_name = :task AND (args->>'batch_no')::int = :batch"
    )
    with store.engine.connect() as db:
        values = {"task": scale.SEND_BATCH, "batch": batch_no}
        return db.execute(sa.text(query), values).scalar_one()


def _workers(store: Store) -> list[int]:
    with store.engine.connect() as db:
        return list(db.execute(sa.text("SELECT id FROM procrastinate_workers")).scalars())


def _silent_for(store: Store, worker_id: int) -> float:
    """Seconds since the worker's last heartbeat, by the database's clock."""
    query = (
        "SELECT extract(epoch FROM now() - last_heartbeat) FROM procrastinate_workers"
        " WHERE id = :id"
    )
    with store.engine.connect() as db:
        return float(db.execute(sa.text(query), {"id": worker_id}).scalar_one())
