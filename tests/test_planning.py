"""An issue's readers planned in chunks (``send.plan_chunk``), on the real databases and a real
SMTP server: each chunk's rows, jobs and cursor commit together, a planning stopped between
two chunks is taken up where it stopped, two planners at once plan each reader once, and an
issue with nothing left to send is closed with its counts."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import Counter
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import Config, load_config
from syndicate.sending import issuing, transports
from syndicate.sending.dispatch import BatchContext, Dispatcher, LocalDispatcher
from syndicate.sending.engine import dispatcher
from syndicate.sending.loop import DeliveryCounts
from syndicate.sending.transports import SmtpMailer
from syndicate.state import Store, create_engine, open_store, schema, utc
from syndicate.subscribers import ReaderRow
from tests.conftest import ARTICLES
from tests.sending import NOW

try:
    from syndicate.sending import scale
except ImportError:  # the optional extra syndicate[scale]: the scale_url fixture says so
    scale = None

CHUNK, BATCH = 7, 3
"""Readers per planning transaction (rounded up to whole batches: 9) and per batch."""
ROWS = 9


def write_config(root: Path, url: str, port: int, *lines: str, engine: str = "local") -> Path:
    """A config file (the CLI reads it too): small chunks, small batches."""
    path = root / "config.toml"
    path.write_text(
        "\n".join(
            [
                "[site]",
                'base_url = "https://news.example.org"',
                f'articles = "{ARTICLES}"',
                "[state]",
                f'database = "{url}"',
                "[email]",
                'sender = "News <digest@news.example.org>"',
                *(line.removeprefix("email.") for line in lines if line.startswith("email.")),
                "[smtp]",
                f'url = "smtp://127.0.0.1:{port}"',
                "rate = 10000",
                "retry_backoff = 0",
                *(line.removeprefix("smtp.") for line in lines if line.startswith("smtp.")),
                "[web]",
                'secret_key = "a test key that is long enough to sign tokens"',
                "[send]",
                f'engine = "{engine}"',
                f"plan_chunk = {CHUNK}",
                f"batch_size = {BATCH}",
            ]
        )
        + "\n"
    )
    return path


def add_readers(store: Store, count: int, other: int = 0) -> None:
    """``count`` readers of en-cost, and ``other`` of en-architects among them (ids taking
    turns), so that a chunk of one variant's readers skips the other's."""
    rows = []
    for n in range(max(count, other)):
        if n < count:
            rows.append(ReaderRow(f"reader{n}@example.com", "en", ("cost",)))
        if n < other:
            rows.append(ReaderRow(f"architect{n}@example.com", "en", ("architects",)))
    store.subscribers.import_subscribers(rows, status="active", consent_source="test", now=NOW)


def deliveries(store: Store) -> list[Any]:
    """(issue_id, subscriber_id, batch_no, status) of every delivery row."""
    query = "SELECT issue_id, subscriber_id, batch_no, status FROM deliveries ORDER BY id"
    with store.engine.connect() as db:
        return db.execute(sa.text(query)).all()


def jobs(store: Store) -> list[tuple[int, int]]:
    """(issue id, batch number) of each send job."""
    with store.engine.connect() as db:
        query = "SELECT args FROM procrastinate_jobs WHERE task_name = :task ORDER BY id"
        found = db.execute(sa.text(query), {"task": scale.SEND_BATCH})
        return [(row.args["issue_id"], row.args["batch_no"]) for row in found]


def readers_of(store: Store, lang: str, audiences: str) -> list[int]:
    query = "SELECT id FROM subscribers WHERE lang = :l AND audiences = :a ORDER BY id"
    with store.engine.connect() as db:
        return list(db.execute(sa.text(query), {"l": lang, "a": audiences}).scalars())


def assert_planned_once(store: Store, issue_id: int, readers: list[int]) -> None:
    """One row per reader, in whole batches numbered on from 0, and one job per batch."""
    rows = [row for row in deliveries(store) if row.issue_id == issue_id]
    assert Counter(row.subscriber_id for row in rows) == Counter(readers)
    per_batch = Counter(row.batch_no for row in rows)
    batches = math.ceil(len(readers) / BATCH)
    assert sorted(per_batch) == list(range(batches))
    assert set(per_batch.values()) - {BATCH} <= {len(readers) % BATCH}
    issue = store.issues.issue(issue_id)
    assert issue is not None and issue.planned_through is None


class Interrupted(Exception):
    """The planning process dies between two chunks."""


class Planner:
    """A dispatcher that records each chunk's batches, and can fail on the n-th chunk (its
    transaction is then rolled back, as if the process died before its commit)."""

    def __init__(self, inner: Dispatcher, fail_at: int | None = None) -> None:
        self.inner, self.fail_at = inner, fail_at
        self.planned: list[tuple[int, range]] = []

    def plan(self, db: sa.Connection, issue_id: int, batches: range) -> None:
        if len(self.planned) + 1 == self.fail_at:
            raise Interrupted
        self.inner.plan(db, issue_id, batches)
        self.planned.append((issue_id, batches))

    def run(self, context: BatchContext, counts: DeliveryCounts) -> None:
        self.inner.run(context, counts)


def _no_mail() -> SmtpMailer:
    """A mailer nothing is sent through (planning for the workers sends nothing)."""
    return SmtpMailer("127.0.0.1", 9)


def _interrupted_send(config: Config, store: Store, inner: Dispatcher) -> None:
    """A send that dies after the first chunk of its issue committed."""
    with pytest.raises(Interrupted):
        issuing.send_digests(
            config, NOW, mailer=_no_mail(), store=store, dispatch=Planner(inner, fail_at=2)
        )


def test_chunks_plan_each_reader_once_with_one_job_per_batch(
    tmp_path: Path, scale_url: str
) -> None:
    """20 readers of one variant among 11 of another, 7 a chunk (9: whole batches of 3): three
    transactions for the one, two for the other; rows = readers, jobs = ceil(readers / 3),
    batch numbers distinct and following on across the chunks."""
    config = load_config(write_config(tmp_path, scale_url, 9, engine="procrastinate"))
    store = open_store(scale_url)
    add_readers(store, 20, other=11)
    planner = Planner(scale.ProcrastinateDispatcher(config))
    report = issuing.send_digests(config, NOW, mailer=_no_mail(), store=store, dispatch=planner)
    assert report.issues == [("en-architects", 11), ("en-cost", 20)]
    architects, cost = (store.issues.issue(i) for i in (1, 2))
    assert architects is not None and cost is not None and cost.key == "en-cost"
    assert [b for i, b in planner.planned if i == cost.id] == [range(3), range(3, 6), range(6, 7)]
    assert [b for i, b in planner.planned if i == architects.id] == [range(3), range(3, 4)]
    assert_planned_once(store, cost.id, readers_of(store, "en", "cost"))
    assert_planned_once(store, architects.id, readers_of(store, "en", "architects"))
    planned = jobs(store)
    assert len(planned) == len(set(planned)) == 7 + 4
    assert set(planned) == {(r.issue_id, r.batch_no) for r in deliveries(store)}
    assert report.left == 31  # for the workers
    store.close()


def test_a_planning_stopped_between_chunks_leaves_its_prefix_and_the_next_send_ends_it(
    tmp_path: Path, scale_url: str
) -> None:
    """The planner dies in its second chunk: the issue, the first chunk's 9 rows and their 3
    jobs stand, the cursor at the 9th reader. The next send issues nothing new and plans the
    other 11 readers with their 4 jobs, no row or job twice."""
    config = load_config(write_config(tmp_path, scale_url, 9, engine="procrastinate"))
    store = open_store(scale_url)
    add_readers(store, 20)
    readers = readers_of(store, "en", "cost")
    _interrupted_send(config, store, scale.ProcrastinateDispatcher(config))
    assert [row.subscriber_id for row in deliveries(store)] == readers[:ROWS]
    assert jobs(store) == [(1, 0), (1, 1), (1, 2)]
    issue = store.issues.issue(1)
    assert issue is not None and issue.planned_through == readers[ROWS - 1]
    assert [i.id for i in store.planning.issues_in_planning()] == [1]

    report = issuing.send_digests(
        config, NOW, mailer=_no_mail(), store=store, dispatch=dispatcher(config)
    )
    assert (report.issues, report.resumed) == ([], [(1, "en-cost")])
    assert_planned_once(store, 1, readers)
    assert jobs(store) == [(1, b) for b in range(7)]
    assert store.planning.issues_in_planning() == []
    store.close()


def test_the_reconciler_ends_a_stopped_planning_and_closes_the_sent_issue(
    tmp_path: Path, scale_url: str, smtp_server, caplog: pytest.LogCaptureFixture
) -> None:
    """With no send after the one that died, the reconciler plans the rest; once the jobs
    have sent every batch, it closes the issue, with a log line of its counts."""
    inbox, port = smtp_server
    config = load_config(write_config(tmp_path, scale_url, port, engine="procrastinate"))
    store = open_store(scale_url)
    add_readers(store, 20)
    _interrupted_send(config, store, scale.ProcrastinateDispatcher(config))
    first = scale.reconcile_now(config)
    assert (first.planned, first.deferred, first.finished) == (1, 0, 0)
    assert_planned_once(store, 1, readers_of(store, "en", "cost"))
    assert jobs(store) == [(1, b) for b in range(7)]
    worker = scale._Worker(config)
    for issue_id, batch_no in jobs(store):
        worker.send(issue_id, batch_no)
    assert len({m["Message-ID"] for m in inbox.messages}) == len(inbox.messages) == 20
    with caplog.at_level(logging.INFO, logger="syndicate.send"):
        closed = scale.reconcile_now(config)
        again = scale.reconcile_now(config)
    assert (closed.planned, closed.finished, again.finished) == (0, 1, 0)
    issue = store.issues.issue(1)
    assert issue is not None and issue.finished_at is not None
    lines = [r.getMessage() for r in caplog.records if "finished" in r.getMessage()]
    assert lines == ["issue 1 (en-cost) finished: 20 sent, 0 failed, 0 uncertain, 0 skipped"]
    store.close()


def test_two_planners_at_once_plan_each_reader_once(tmp_path: Path, scale_url: str) -> None:
    """Two planners take up the same stopped planning at once; the first holds its chunk's
    transaction open until the second is seen waiting on the cursor behind it. Each reader
    gets one row and each batch one job; neither planner fails."""
    config = load_config(write_config(tmp_path, scale_url, 9, engine="procrastinate"))
    store = open_store(scale_url)
    add_readers(store, 60)
    _interrupted_send(config, store, scale.ProcrastinateDispatcher(config))
    entered, seen = threading.Event(), []

    class Holding(scale.ProcrastinateDispatcher):
        def plan(self, db: sa.Connection, issue_id: int, batches: range) -> None:
            if not entered.is_set():
                entered.set()
                seen.append(_until_blocked_behind(db, 15))
            super().plan(db, issue_id, batches)

    errors: list[BaseException] = []

    def resume(dispatch: Dispatcher) -> None:
        own = open_store(scale_url)
        try:
            issuing.resume_planning(config, own, NOW, dispatch)
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.close()

    first = threading.Thread(target=resume, args=(Holding(config),))
    second = threading.Thread(target=resume, args=(scale.ProcrastinateDispatcher(config),))
    first.start()
    assert entered.wait(15)
    second.start()
    for thread in (first, second):
        thread.join(60)
    assert errors == [] and seen == [True]
    assert_planned_once(store, 1, readers_of(store, "en", "cost"))
    assert jobs(store) == [(1, b) for b in range(20)]
    store.close()


def _until_blocked_behind(db: sa.Connection, seconds: float) -> bool:
    """Wait (in this transaction) until another session waits for a lock this one holds."""
    me = db.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE :me = ANY(pg_blocking_pids(pid))")
    watcher = sa.create_engine(db.engine.url)
    try:
        with watcher.connect() as other:
            for _ in range(int(seconds / 0.05)):
                if other.execute(query, {"me": me}).scalar_one():
                    return True
                other.rollback()
                threading.Event().wait(0.05)
    finally:
        watcher.dispose()
    return False


def test_the_local_engine_plans_in_chunks_resumes_and_closes_what_it_sent(
    tmp_path: Path, database_url: str, smtp_server, caplog: pytest.LogCaptureFixture
) -> None:
    """The local engine plans in chunks too: a send dies in its second chunk having sent
    nothing; the next one plans the rest, sends each reader one message and closes the
    issue, with a log line of its counts."""
    inbox, port = smtp_server
    config = load_config(write_config(tmp_path, database_url, port))
    store = open_store(database_url)
    add_readers(store, 20)
    mailer = transports.open_mailer(config)
    with pytest.raises(Interrupted):
        issuing.send_digests(
            config, NOW, mailer=mailer, store=store, dispatch=Planner(LocalDispatcher(), 2)
        )
    assert len(deliveries(store)) == ROWS and not inbox.received
    with caplog.at_level(logging.INFO, logger="syndicate.send"):
        report = issuing.send_digests(config, NOW, mailer=mailer, store=store)
    assert (report.resumed, report.sent) == ([(1, "en-cost")], 20)
    assert_planned_once(store, 1, readers_of(store, "en", "cost"))
    assert Counter(inbox.counts().values()) == {1: 20}
    assert [(f.id, f.counts["sent"]) for f in report.finished] == [(1, 20)]
    issue = store.issues.issue(1)
    assert issue is not None and issue.finished_at == NOW
    lines = [r.getMessage() for r in caplog.records if "finished" in r.getMessage()]
    assert lines == ["issue 1 (en-cost) finished: 20 sent, 0 failed, 0 uncertain, 0 skipped"]
    store.close()


def test_a_held_issue_has_held_rows_in_every_chunk(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    """email.approval: the first chunk and those planned after a stop are all held, the
    issue is not finished while held; approved, every reader gets it once and it closes."""
    inbox, port = smtp_server
    editor = "email.preview_to = 'editor@news.example.org'"
    path = write_config(tmp_path, database_url, port, "email.approval = true", editor)
    config = load_config(path)
    store = open_store(database_url)
    add_readers(store, 20)
    mailer = transports.open_mailer(config)
    with pytest.raises(Interrupted):
        issuing.send_digests(
            config, NOW, mailer=mailer, store=store, dispatch=Planner(LocalDispatcher(), 2)
        )
    report = issuing.send_digests(config, NOW, mailer=mailer, store=store)
    assert (report.resumed, report.finished) == ([(1, "en-cost")], [])
    assert_planned_once(store, 1, readers_of(store, "en", "cost"))
    assert {row.status for row in deliveries(store)} == {"held"}
    assert inbox.counts() == {"editor@news.example.org": 1}  # the test copy alone
    assert issuing.approve_issue(config, store, 1, NOW) is not None
    report = issuing.send_digests(config, NOW, mailer=mailer, store=store, issue=False)
    assert report.sent == 20 and [f.id for f in report.finished] == [1]
    store.close()


def test_a_local_time_issue_resumed_gives_each_reader_the_same_time(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    """A local-time digest's later chunks, planned by a send that knows nothing of the job's
    hour, wait for the same time of day in each reader's zone as the first chunk's."""
    _, port = smtp_server
    config = load_config(write_config(tmp_path, database_url, port))
    store = open_store(database_url)
    mailer = transports.open_mailer(config)
    zones = ("Asia/Tokyo", "Europe/Amsterdam", "America/New_York", None)
    rows = [
        ReaderRow(f"reader{n}@example.com", "en", ("cost",), timezone=zones[n % 4])
        for n in range(20)
    ]
    store.subscribers.import_subscribers(rows, status="active", consent_source="test", now=NOW)
    with pytest.raises(Interrupted):
        issuing.send_digests(
            config,
            NOW,
            mailer=mailer,
            store=store,
            local_time=(7, 30),
            dispatch=Planner(LocalDispatcher(), 2),
        )
    later = NOW.replace(hour=9)
    issuing.send_digests(config, later, mailer=mailer, store=store, issue=False)
    when = issuing.local_times(config, NOW, 7, 30)
    query = sa.select(schema.deliveries.c.subscriber_id, schema.deliveries.c.not_before)
    with store.engine.connect() as db:
        planned = {reader: moment for reader, moment in db.execute(query)}
    assert len(planned) == 20
    for reader in store.subscribers.all():
        assert utc(planned[reader.id]) == when(reader.timezone)
    store.close()


def test_an_issue_closes_once_nothing_is_left_to_send_uncertain_rows_counted(
    tmp_path: Path, database_url: str, smtp_server
) -> None:
    """One reader's message cut off after its end of data (uncertain), another's refused
    for now with no retry left (pending): the issue stays open; the next send delivers the
    pending one and closes it, the uncertain one counted. ``send --status`` says when it
    finished; an uncertain delivery queued again opens it until it is sent."""
    inbox, port = smtp_server
    path = write_config(tmp_path, database_url, port, "smtp.retries = 0")
    config = load_config(path)
    store = open_store(database_url)
    add_readers(store, 6)
    inbox.script[("accepted", "reader1@example.com")] = ["DROP"]
    inbox.script[("rcpt", "reader3@example.com")] = ["451 4.3.0 try later"]
    first = issuing.send_digests(config, NOW, mailer=transports.open_mailer(config), store=store)
    assert (first.sent, first.uncertain, first.left, first.finished) == (4, 1, 1, [])
    assert store.planning.close_finished(NOW) == []
    (open_issue,) = _status(path)["issues"]
    assert (open_issue["finished"], open_issue["planning"]) == (None, False)

    second = issuing.send_digests(config, NOW, mailer=transports.open_mailer(config), store=store)
    assert second.sent == 1
    [done] = second.finished
    assert done.counts == {"sent": 5, "failed": 0, "uncertain": 1, "skipped": 0}
    (issue,) = _status(path)["issues"]
    assert issue["finished"] == NOW.isoformat()
    table = CliRunner().invoke(main, ["send", "--status", "--config", str(path)])
    assert "finished: nothing left to send" in table.output
    assert "2025-12-15 08:00" in table.output and "deliveries per issue" not in table.output

    result = CliRunner().invoke(main, ["send", "--config", str(path), "--resend-uncertain"])
    assert result.exit_code == 0, result.output
    assert _status(path)["issues"][0]["finished"] is None
    result = CliRunner().invoke(main, ["send", "--config", str(path)])
    assert "issue 1 (en-cost) finished: 6 sent, 0 failed, 0 uncertain, 0 skipped" in result.stderr
    assert _status(path)["issues"][0]["finished"] is not None
    store.close()


def _status(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["send", "--status", "--json", "--config", str(path)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_upgrade_closes_the_issues_settled_before_it(database_url: str) -> None:
    """An issue sent in full before issues were closed is closed by the migration, at its last
    delivery's time, so the first send after the upgrade does not report it; one with a
    delivery pending stays open."""
    engine = create_engine(database_url)
    alembic = AlembicConfig()
    alembic.set_main_option("script_location", str(resources.files("syndicate") / "migrations"))
    with engine.begin() as db:
        alembic.attributes["connection"] = db
        command.upgrade(alembic, "0006")
    with engine.begin() as db:
        for n, last in ((1, "sent"), (2, "pending")):
            db.execute(
                schema.issues.insert().values(
                    id=n, key=f"en-{n}", lang="en", audiences="cost", content_hash=f"h{n}",
                    subject="s", rendered="{}", created_at=NOW,
                )
            )  # fmt: skip
            for reader, status in ((1, "sent"), (2, last)):
                db.execute(
                    schema.deliveries.insert().values(
                        issue_id=n, subscriber_id=reader, email=f"r{reader}@example.com",
                        status=status, message_id=f"<{n}.{reader}@x>",
                        updated_at=NOW + timedelta(hours=reader),
                    )
                )  # fmt: skip
    engine.dispose()
    store = open_store(database_url)
    settled, left = store.issues.issue(1), store.issues.issue(2)
    assert settled is not None and settled.finished_at == NOW + timedelta(hours=2)
    assert left is not None and left.finished_at is None
    assert store.planning.close_finished(NOW) == []
    store.close()
