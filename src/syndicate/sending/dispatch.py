"""Dispatch: who sends an issue's deliveries. The ``Dispatcher`` protocol, and the local one:
this process sends every pending delivery itself. A dispatcher is chosen where the program is
put together (``engine.dispatcher``) and handed in; nothing here knows the scale-out.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ..bounces import verp_address
from ..config import Config
from ..state import Batch, Claim, Store
from ..tokens import secret_key
from .loop import DeliveryCounts, Progress, Senders, SendOptions, deliver
from .messages import MessageFactory, bounce_policy, envelope_sender, return_path
from .pacing import Pace, slow_down
from .transports import Mailer


class Dispatcher(Protocol):
    """Who sends the deliveries: this process, or workers on other machines through a task
    engine. Either way a batch is sent by ``send_batch``; the ledger stays the one record.
    ``engine.dispatcher`` makes the one ``send.engine`` names."""

    def plan(self, db: Any, issue_id: int, batches: range) -> None:
        """In each transaction that writes rows of an issue (``db``, SQLAlchemy's
        connection): arrange for those ``batches`` (their numbers) to be sent, committed
        with the rows."""
        ...

    def run(self, context: BatchContext, counts: DeliveryCounts) -> None:
        """Send what is due now, or leave it to the workers."""
        ...


@dataclass(frozen=True)
class BatchContext:
    """What sending a batch needs: the same in the ``send`` process and in a worker."""

    config: Config
    store: Store
    mailer: Mailer
    now: datetime
    progress: Progress | None = None
    stop: threading.Event | None = None
    pace: Pace | None = None
    """The rate shared with other senders (workers); None: ``smtp.rate`` for this run."""
    standing: Senders | None = None
    """A worker process's senders, which outlive the batch; None: threads of the batch's own."""


def send_batch(context: BatchContext, batch: Batch | None, counts: DeliveryCounts) -> None:
    """Send the pending deliveries of one batch (None: every pending one), each exactly once
    (``deliver``): run twice, or by two workers at once, it sends nothing twice."""
    config, now = context.config, context.now
    options = send_options(config)
    if context.pace is not None:
        options = dataclasses.replace(options, pace=context.pace)
    deliver(
        context.store,
        context.mailer,
        MessageFactory.for_send(config, now).message,
        options,
        now,
        progress=context.progress,
        counts=counts,
        stop=context.stop,
        batch=batch,
        standing=context.standing,
    )


class LocalDispatcher:
    """The default: the ``send`` process sends every pending delivery itself, as one batch,
    through its ``smtp.pool_size`` connections."""

    def plan(self, db: Any, issue_id: int, batches: range) -> None:
        """Nothing to arrange: the rows are what this process sends next."""

    def run(self, context: BatchContext, counts: DeliveryCounts) -> None:
        send_batch(context, None, counts)


def send_options(config: Config) -> SendOptions:
    """How the send loop delivers: the envelope sender (or each delivery's VERP address),
    the pool, the rate and the retries."""
    smtp = config.smtp
    verp: Callable[[Claim], str] | None = None
    if config.email.verp:
        secret, bounce_to = secret_key(config), return_path(config)

        def verp(claim: Claim) -> str:
            return verp_address(secret, bounce_to, claim.id)

    return SendOptions(
        sender=config.email.return_path or envelope_sender(config.email.sender),
        workers=smtp.pool_size,
        micro_batch=config.send.micro_batch or (20 if config.send.engine == "procrastinate" else 1),
        rate=smtp.rate,
        retries=smtp.retries,
        backoff=smtp.retry_backoff,
        bounces=bounce_policy(config),
        return_path=verp,
        slow_down=slow_down(config),
    )
