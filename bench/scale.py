"""Sends spread over worker processes (``send.engine = "procrastinate"``).

Runs, each on a fresh schema with the same planned rows and the same composed messages:

1. relay-bound: 1, 2, 3 and 4 ``syndicate worker`` processes against a sink that answers each
   message after ``--delay-ms`` (a relay's latency); the ratio of each to one worker;
2. CPU-bound: one worker and a sink that answers at once, against the bare loop: the local
   engine (``send.engine = "local"``) sending the same rows in one process through the same
   number of connections (``smtp.pool_size``) and micro-batches (``send.micro_batch``). It
   keeps the ledger's exactly-once protocol (rows claimed, marked ``sending`` before their
   messages are written, each reply committed with the next claim) and drops what
   spreading a send adds: the jobs, each batch's checks before its first claim (rows of dead
   runs, readers who left), the shared relay bucket (a database round trip per block of
   tokens). Worker / bare is that overhead;
3. where ``ip netns`` works (as root): two workers in two network namespaces, each joined to
   this one by a veth pair, that reach the sink and PostgreSQL over it, nothing else (the
   server listens on 127.0.0.1 only, so a TCP forwarder the bench runs carries it).

The workers are started and idle (registered with the queue) before the send is planned, and
a rate is the messages from the first to the last at the sink: neither a worker's start
(imports, connecting) nor planning is in it. The ledger's writes (updated delivery rows, from
PostgreSQL's table statistics) are printed beside each rate, with the shared bucket's (one
row every worker updates for each message).

Targets on a 2-core machine: 4 workers at least 3x one worker when relay-bound; one worker at
least 80% of the bare loop when CPU-bound.

Not part of ``make bench``: it needs PostgreSQL (``SYNDICATE_BENCH_POSTGRES_URL``, default the
local test database) and takes minutes at full size (``--quick``: 3,000 messages).

    .venv/bin/python bench/scale.py [MESSAGES] [--quick] [--workers 1,2,3,4] [--delay-ms 5]
        [--batch-size 500] [--micro-batch 20] [--runs relay,cpu,netns] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from syndicate.config import load_config
from syndicate.sending import issuing
from syndicate.sending.engine import dispatcher
from syndicate.state import Store, open_store
from syndicate.state.workers import ensure_schema
from syndicate.subscribers import ReaderRow

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get(
    "SYNDICATE_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)
CONNECTIONS = 4
"""``smtp.pool_size``: each worker's (one batch at a time) and the bare loop's connections."""


# -- the sink ------------------------------------------------------------------------------------


class _Session(asyncio.Protocol):
    """One SMTP session at the sink: the commands a sender gives, each answered in turn, every
    message taken (answered ``delay`` seconds after its end of data) and counted.

    A few dozen lines of protocol, not aiosmtpd: the sink shares the machine's cores with the
    workers and PostgreSQL, and a full server costs more per message than a worker does, which
    a relay on a machine of its own would not take from them."""

    def __init__(self, delay: float, shared, by_peer: Counter[str]) -> None:
        self.delay, self.shared, self.by_peer = delay, shared, by_peer
        self.buffer, self.in_data, self.peer = b"", False, ""

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")[0]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.write(b"220 sink ESMTP\r\n")

    def data_received(self, data: bytes) -> None:
        """Handle every complete command in ``data``; the replies to a pipelined group go
        out in one write, as a relay's do."""
        self.buffer += data
        replies: list[bytes] = []
        while True:
            if self.in_data:
                end = self.buffer.find(b"\r\n.\r\n")
                if end < 0:
                    break
                self.buffer, self.in_data = self.buffer[end + 5 :], False
                if self.delay:
                    asyncio.get_running_loop().call_later(self.delay, self.taken)
                else:
                    self.taken()
                continue
            end = self.buffer.find(b"\r\n")
            if end < 0:
                break
            line, self.buffer = self.buffer[:end], self.buffer[end + 2 :]
            replies.append(self.reply(line[:4].upper()))
        if replies:
            self.transport.write(b"".join(replies))

    def reply(self, verb: bytes) -> bytes:
        if verb == b"EHLO":
            return b"250-sink\r\n250-8BITMIME\r\n250-PIPELINING\r\n250 SMTPUTF8\r\n"
        if verb == b"DATA":
            self.in_data = True
            return b"354 go on\r\n"
        if verb == b"QUIT":
            asyncio.get_running_loop().call_soon(self.transport.close)
            return b"221 bye\r\n"
        return b"250 OK\r\n"  # HELO, MAIL, RCPT, RSET, NOOP

    def taken(self) -> None:
        now = time.monotonic()
        with self.shared.get_lock():
            if not self.shared[0]:
                self.shared[1] = now
            self.shared[0] += 1
            self.shared[2] = now
        self.by_peer[self.peer] += 1
        if not self.transport.is_closing():
            self.transport.write(b"250 OK\r\n")


def _serve_sink(host: str, port: int, delay: float, ready, shared, peers) -> None:
    """The sink's process: serves until SIGTERM, then reports how many messages came from each
    peer address. ``shared`` holds the count and the first and last answer (monotonic)."""
    by_peer: Counter[str] = Counter()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stopped.set)
        server = await loop.create_server(lambda: _Session(delay, shared, by_peer), host, port)
        ready.set()
        async with server:
            await stopped.wait()

    asyncio.run(serve())
    peers.put(dict(by_peer))


class Sink:
    """The sink's process, seen from here."""

    def __init__(self, host: str, delay: float) -> None:
        self.host, self.port = host, free_port(host)
        self.shared = multiprocessing.Array("d", 3)
        self._peers: Any = multiprocessing.Queue()
        ready = multiprocessing.Event()
        args = (host, self.port, delay, ready, self.shared, self._peers)
        self.process = multiprocessing.Process(target=_serve_sink, args=args)
        self.process.start()
        if not ready.wait(30):
            self.process.terminate()
            raise RuntimeError(f"the sink did not start on {host}:{self.port}")

    @property
    def count(self) -> int:
        return int(self.shared[0])

    @property
    def seconds(self) -> float:
        """From the first message answered to the last."""
        return self.shared[2] - self.shared[1]

    def stop(self) -> dict[str, int]:
        """Stop it; the messages each peer address sent."""
        self.process.terminate()  # SIGTERM: it stops and reports
        try:
            return self._peers.get(timeout=30)
        finally:
            self.process.join()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# -- one run -------------------------------------------------------------------------------------


@dataclass
class Run:
    """What one timed send measured."""

    messages: int
    seconds: float
    """First to last message at the sink."""
    started: float | None = None
    """Seconds the workers took from their start to being registered (not in ``seconds``)."""
    writes: int = 0
    """Delivery rows updated (PostgreSQL's table statistics)."""
    takes: int = 0
    """Updates of the relay's bucket row (a token taken)."""
    peers: dict[str, int] = field(default_factory=dict)
    """Messages per address the sink saw them come from."""
    senders: dict[int, int] = field(default_factory=dict)
    """Deliveries sent per worker process (pid), from the ledger."""

    @property
    def rate(self) -> float:
        return (self.messages - 1) / self.seconds if self.seconds > 0 else float("nan")

    def line(self) -> str:
        each, bucket = self.writes / self.messages, self.takes / self.messages
        started = f", started in {self.started:.1f} s" if self.started is not None else ""
        return (
            f"{self.rate:8,.0f} msg/s   ledger {self.writes / self.seconds:7,.0f} row writes/s"
            f" ({each:.1f} a message, bucket {bucket:.1f}{started})"
        )


@dataclass(frozen=True)
class Workers:
    """Where the worker processes run: ``prefixes`` (one command prefix per worker, ``[]``
    for this namespace), the address the sink listens on, and the database they use (None:
    the bench's own)."""

    prefixes: Sequence[Sequence[str]]
    sink_host: str = "127.0.0.1"
    database: tuple[str, int] | None = None

    @classmethod
    def local(cls, count: int) -> Workers:
        return cls([[]] * count)


def config_file(
    path: Path, url: str, host: str, port: int, engine: str, batch: int, micro: int
) -> Path:
    path.write_text(
        f"""
[site]
base_url = "https://news.example.org"
articles = "{ROOT / "articles"}"
[state]
database = "{url}"
[email]
sender = "News <digest@news.example.org>"
[smtp]
url = "smtp://{host}:{port}"
pool_size = {CONNECTIONS}
rate = 1000000
[web]
secret_key = "a bench key that is long enough to sign tokens"
[send]
engine = "{engine}"
batch_size = {batch}
micro_batch = {micro}
poll_seconds = 0.5
"""
    )
    return path


@contextmanager
def bench_schema() -> Iterator[tuple[str, str]]:
    """A fresh schema and the URL whose search path it is; dropped afterwards. A checkpoint
    first, so that every run starts alike: one that the last run's writes (hundreds of MB of
    WAL at full size) set off would otherwise fall inside the next."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(POSTGRES)
    with admin.begin() as db:
        db.execute(sa.text(f"CREATE SCHEMA {schema}"))
    with suppress(sa.exc.DBAPIError), admin.connect() as db:  # a superuser's alone
        db.execute(sa.text("CHECKPOINT"))
    try:
        yield schema, f"{POSTGRES}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as db:
            db.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def one_run(messages: int, batch: int, micro: int, delay: float, workers: Workers | None) -> Run:
    """Plan ``messages`` deliveries in a fresh schema and time their sending: by ``workers``
    (started first, and idle until the plan commits), or, with None, by the bare loop."""
    host = workers.sink_host if workers else "127.0.0.1"
    with ExitStack() as stack:
        schema, url = stack.enter_context(bench_schema())
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        sink = Sink(host, delay)
        stack.callback(lambda: sink.process.is_alive() and sink.stop())
        engine = "procrastinate" if workers else "local"
        plan = config_file(folder / "plan.toml", url, host, sink.port, engine, batch, micro)
        config = load_config(plan)
        store = open_store(url)
        stack.callback(store.close)
        rows = [ReaderRow(f"r{n}@example.com", "en", ("cost",)) for n in range(messages)]
        store.subscribers.import_subscribers(rows, status="active", consent_source="bench", now=NOW)
        procs: list[subprocess.Popen] = []
        started = None
        if workers:
            worker_config = config_file(
                folder / "worker.toml", _url(url, workers), host, sink.port, engine, batch, micro
            )
            procs, started = start_workers(store.engine, worker_config, workers.prefixes, stack)
        # bare: plans and sends; else plans for the workers
        issuing.send_due(config, NOW, dispatch=dispatcher(config))
        wait_for(arrived(sink, store, messages), procs, folder)
        stop_workers(procs)
        run = Run(messages, sink.seconds, started=started, peers=sink.stop())
        store.close()
        run.writes = row_updates(schema, "deliveries")
        run.takes = row_updates(schema, "relay_buckets")
        run.senders = sent_by(url)
    return run


def arrived(sink: Sink, store: Store, messages: int) -> Callable[[], bool]:
    """Whether every message reached the sink; fails once the ledger has nothing left to send
    and some never did (the ledger is looked at every few seconds, not to load it)."""
    last = time.monotonic()

    def done() -> bool:
        nonlocal last
        if sink.count >= messages:
            return True
        if time.monotonic() - last > 3:
            last = time.monotonic()
            counts: Counter[str] = Counter()
            for (_, _, status), n in store.ledger.delivery_counts().items():
                counts[status] += n
            if not counts["pending"] + counts["sending"] and sink.count < messages:
                raise RuntimeError(f"{sink.count:,} of {messages:,} at the sink: {dict(counts)}")
        return False

    return done


def _url(url: str, workers: Workers) -> str:
    """The database URL the workers use: the bench's, or the forwarder's address."""
    if workers.database is None:
        return url
    host, port = workers.database
    return sa.engine.make_url(url).set(host=host, port=port).render_as_string(hide_password=False)


def start_workers(
    engine: sa.Engine, path: Path, prefixes: Sequence[Sequence[str]], stack: ExitStack
) -> tuple[list[subprocess.Popen], float]:
    """Worker processes, each once registered with the queue (stopped when ``stack`` ends),
    and the seconds they took to get there."""
    with engine.begin() as db:
        ensure_schema(db)  # once, not raced by the workers
    command = [sys.executable, "-m", "syndicate", "--config", str(path), "worker"]
    start, procs = time.monotonic(), []
    for n, prefix in enumerate(prefixes):
        with open(_log(path.parent, n), "wb") as log:
            procs.append(subprocess.Popen([*prefix, *command], cwd=ROOT, stderr=log))
    stack.callback(stop_workers, procs)
    query = sa.text("SELECT count(*) FROM procrastinate_workers")

    def registered() -> bool:
        with engine.connect() as db:
            return db.execute(query).scalar_one() >= len(procs)

    wait_for(registered, procs, path.parent, timeout=120)
    return procs, time.monotonic() - start


def _log(folder: Path, n: int) -> Path:
    """Where the n-th worker's standard error goes."""
    return folder / f"worker{n}.log"


def wait_for(done, procs: list[subprocess.Popen], folder: Path, timeout: float = 3600) -> None:
    """Until ``done()``; fails with the worker's log when one exits or ``timeout`` passes."""
    end = time.monotonic() + timeout
    while not done():
        for n, proc in enumerate(procs):
            if proc.poll() is not None:
                log = _log(folder, n).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"worker {n} exited ({proc.returncode}):\n{log}")
        if time.monotonic() > end:
            raise RuntimeError(f"not done after {timeout:.0f} s")
        time.sleep(0.02)


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def row_updates(schema: str, table: str) -> int:
    """Rows of ``table`` in ``schema`` updated (planning only inserts the deliveries). The
    counters of a session reach the statistics when it ends: read until they stop moving."""
    query = sa.text(
        "SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables"
        " WHERE schemaname = :schema AND relname = :table"
    )
    engine = sa.create_engine(POSTGRES)
    try:
        last, seen = -1, 0
        for _ in range(20):
            with engine.connect() as db:
                seen = int(db.execute(query, {"schema": schema, "table": table}).scalar_one())
            if seen == last:
                break
            last = seen
            time.sleep(0.25)
        return seen
    finally:
        engine.dispose()


def sent_by(url: str) -> dict[int, int]:
    """Deliveries sent per process, from the ledger (each run names its pid)."""
    query = sa.text(
        "SELECT r.pid, count(*) FROM deliveries d JOIN send_runs r ON r.id = d.run_id"
        " WHERE d.status = 'sent' GROUP BY r.pid"
    )
    engine = sa.create_engine(url)
    try:
        with engine.connect() as db:
            return {pid: n for pid, n in db.execute(query)}
    finally:
        engine.dispose()


# -- network namespaces --------------------------------------------------------------------------


def _forward(host: str, port: int, target: tuple[str, int], ready) -> None:
    """Accept on (host, port) and carry each connection to ``target``, both ways."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the bench's clean-up

    class Pipe(asyncio.Protocol):
        def __init__(self, peer: Pipe | None = None) -> None:
            self.peer, self.transport = peer, None

        def connection_made(self, transport) -> None:
            self.transport = transport
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def data_received(self, data: bytes) -> None:
            self.peer.transport.write(data)

        def connection_lost(self, exc) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.close()

    class Accepted(Pipe):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            transport.pause_reading()  # until the other side is connected
            asyncio.get_running_loop().create_task(self.connect())

        async def connect(self) -> None:
            loop = asyncio.get_running_loop()
            _, self.peer = await loop.create_connection(lambda: Pipe(self), *target)
            self.transport.resume_reading()

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Accepted, host, port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


@contextmanager
def forwarder(host: str, target: tuple[str, int]) -> Iterator[int]:
    """A TCP forwarder process listening on ``host`` (a free port, yielded) to ``target``."""
    port, ready = free_port(host), multiprocessing.Event()
    process = multiprocessing.Process(target=_forward, args=(host, port, target, ready))
    process.start()
    try:
        if not ready.wait(30):
            raise RuntimeError(f"the forwarder did not start on {host}:{port}")
        yield port
    finally:
        process.terminate()
        process.join()


@dataclass
class Network:
    """Namespaces ``names``, the i-th reaching this one as ``peers[i]`` over its veth pair;
    ``service`` is this namespace's address they all reach (on a device of its own), so the
    workers share one relay name (one bucket) and one database address."""

    names: list[str]
    peers: list[str]
    service: str


def ip(*args: str, namespace: str | None = None) -> None:
    prefix = ["ip", "-n", namespace] if namespace else ["ip"]
    done = subprocess.run([*prefix, *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join([*prefix, *args])}: {done.stderr.strip()}")


def free_subnet() -> str:
    """A 10.x.y. prefix no address or route of this machine is in."""
    taken = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    taken += subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for _ in range(100):
        prefix = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}."
        if prefix not in taken:
            return prefix
    raise RuntimeError("no free 10.x.y.0/24 for the namespaces")


@contextmanager
def namespaces(count: int) -> Iterator[Network]:
    """``count`` network namespaces, each with a veth pair to this one in a /30 of its own and
    a default route through it; everything made is removed at the end, whatever happened."""
    tag, net = uuid.uuid4().hex[:6], free_subnet()
    device = f"sb{tag}s"
    network = Network([], [], f"{net}{4 * count + 1}")
    made: list[tuple[str, ...]] = []  # what to delete, newest last
    try:
        # the service address on a device of its own (a veth pair: dummy devices need a
        # module containers often lack); an address on any device is this host's
        ip("link", "add", device, "type", "veth", "peer", "name", f"sb{tag}t")
        made.append(("link", "del", device))
        ip("addr", "add", f"{network.service}/32", "dev", device)
        for link in (device, f"sb{tag}t"):
            ip("link", "set", link, "up")
        for n in range(count):
            name, outer, inner = f"synbench-{tag}-{n}", f"sb{tag}h{n}", f"sb{tag}n{n}"
            ip("netns", "add", name)
            made.append(("netns", "del", name))
            ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            made.append(("link", "del", outer))
            ip("link", "set", inner, "netns", name)
            gateway, peer = f"{net}{4 * n + 1}", f"{net}{4 * n + 2}"
            ip("addr", "add", f"{gateway}/30", "dev", outer)
            ip("link", "set", outer, "up")
            ip("addr", "add", f"{peer}/30", "dev", inner, namespace=name)
            for link in (inner, "lo"):
                ip("link", "set", link, "up", namespace=name)
            ip("route", "add", "default", "via", gateway, namespace=name)
            network.names.append(name)
            network.peers.append(peer)
        yield network
    finally:
        for undo in reversed(made):
            try:
                ip(*undo)
            except RuntimeError as exc:  # a veth goes with its namespace
                if "Cannot find device" not in str(exc):
                    print(f"  could not remove: {exc}", file=sys.stderr)


def netns_unavailable() -> str | None:
    """Why the namespace run cannot be done here, or None."""
    if os.geteuid() != 0:
        return "not root"
    try:
        done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    except OSError as exc:
        return f"no ip command ({exc})"
    return f"ip netns fails: {done.stderr.strip()}" if done.returncode else None


def netns_run(messages: int, batch: int, micro: int, delay: float) -> tuple[Run, Network]:
    """Two workers, one in each of two namespaces, through the sink and PostgreSQL as seen
    over their veth pairs."""
    target = sa.engine.make_url(POSTGRES)
    with (
        namespaces(2) as network,
        forwarder(network.service, (target.host or "127.0.0.1", target.port or 5432)) as port,
    ):
        prefixes = [["ip", "netns", "exec", name] for name in network.names]
        workers = Workers(prefixes, network.service, (network.service, port))
        return one_run(messages, batch, micro, delay, workers), network


# -- the report ----------------------------------------------------------------------------------


def verdict(value: float, target: float) -> str:
    return "met" if value >= target else "NOT met"


def median_run(args: argparse.Namespace, delay: float, workers: Workers | None) -> Run:
    """The run of median rate of ``--repeat`` runs (a single run on a shared 2-core machine
    moves by several percent from one to the next); each one's rate is printed when more."""
    runs = [
        one_run(args.messages, args.batch_size, args.micro_batch, delay, workers)
        for _ in range(args.repeat)
    ]
    runs.sort(key=lambda run: run.rate)
    if len(runs) > 1:
        print(f"  (runs: {', '.join(f'{run.rate:,.0f}' for run in runs)} msg/s; the median:)")
    return runs[len(runs) // 2]


def relay_bound(args: argparse.Namespace, counts: list[int]) -> dict[int, Run]:
    runs: dict[int, Run] = {}
    delay = args.delay_ms / 1000
    for n in counts:
        runs[n] = run = median_run(args, delay, Workers.local(n))
        ratio = run.rate / runs[counts[0]].rate
        print(f"relay-bound  {workers(n):11}  {run.line()}   {ratio:.2f}x {workers(counts[0])}")
    if 1 in runs and 4 in runs:
        ratio = runs[4].rate / runs[1].rate
        print(f"  target 4 workers >= 3x 1 worker: {ratio:.2f}x, {verdict(ratio, 3)}")
    return runs


def workers(n: int) -> str:
    return f"{n} worker{'s' if n > 1 else ''}"


def cpu_bound(args: argparse.Namespace) -> None:
    worker = median_run(args, 0.0, Workers.local(1))
    print(f"CPU-bound    1 worker     {worker.line()}")
    bare = median_run(args, 0.0, None)
    print(f"CPU-bound    bare loop    {bare.line()}")
    print(
        "  (bare: the local engine, one process, the same rows, messages and"
        f" {CONNECTIONS} connections; no jobs, no shared relay bucket)"
    )
    share = worker.rate / bare.rate
    print(f"  target 1 worker >= 80% of the bare loop: {share:.0%}, {verdict(share, 0.8)}")


def netns(args: argparse.Namespace, loopback: Run | None) -> None:
    """The two-namespace run, or why it is skipped."""
    reason = netns_unavailable()
    if reason:
        print(f"netns        skipped: {reason}")
        return
    run, network = netns_run(args.messages, args.batch_size, args.micro_batch, args.delay_ms / 1000)
    compared = f"   {run.rate / loopback.rate:.2f}x 2 workers here" if loopback else ""
    print(f"netns        2 workers    {run.line()}{compared}")
    for name, peer in zip(network.names, network.peers, strict=True):
        print(f"  {name} ({peer}): {run.peers.get(peer, 0):,} messages at the sink")
    print(f"  the ledger, sent per worker process: {sorted(run.senders.values())}")
    both = all(run.peers.get(peer) for peer in network.peers) and len(run.senders) == 2
    print(
        f"  both namespaces sent: {'yes' if both else 'NO'} (PostgreSQL through a forwarder"
        " in the bench: a hop more per statement than the runs above)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("messages", type=int, nargs="?", default=100_000)
    parser.add_argument("--quick", action="store_true", help="3,000 messages, batches of 100")
    parser.add_argument("--workers", default="1,2,3,4")
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument(
        "--micro-batch", type=int, default=20, help="send.micro_batch, of every run alike"
    )
    parser.add_argument("--runs", default="relay,cpu,netns", help="which runs, of these")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the median counts")
    args = parser.parse_args()
    # stopped, it still removes what it made (namespaces, schemas, processes)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.messages, args.batch_size = 3_000, 100
    counts = [int(n) for n in args.workers.split(",")]
    print(
        f"{args.messages:,} messages in batches of {args.batch_size}, micro-batches of"
        f" {args.micro_batch}, {CONNECTIONS} connections a worker, relay delay"
        f" {args.delay_ms:g} ms; rates from the first message at the sink to the last (the"
        " workers started and idle before the send is planned)"
    )
    chosen = set(args.runs.split(","))
    runs = relay_bound(args, counts) if "relay" in chosen else {}
    if "cpu" in chosen:
        cpu_bound(args)
    if "netns" in chosen:
        netns(args, runs.get(2))


if __name__ == "__main__":
    main()
