"""The state database: every SQL statement of the project lives in this package.

``open_store`` gives the one ``Store`` the rest of the project uses; its parts, one module per
aggregate: ``published`` (first publication times of feed entries), ``subscribers``,
``issues``, ``planning`` (an issue's readers planned in chunks, an issue closed once settled),
``ledger`` (send runs and deliveries, the exactly-once protocol), ``bounce_reports`` (bounce
reports), ``firings`` (scheduled runs owed); ``locks`` (the scheduler's and the send run's),
``schema`` (tables and migrations), ``database`` (the engine, its errors, the one way to write).
Two are imported by name, not from here, for what they import: ``jobstore`` (APScheduler's
job store on the state engine, with the scheduler's lock and ledger) and ``workers``
(Procrastinate's tables; the scale extra).
"""

from .bounce_reports import AtRisk, Bounced
from .database import create_engine, database_errors, utc
from .firings import OwedRun
from .issues import BATCH_SIZE, Issue, Within
from .ledger import Batch, Claim, Delivery, Ledger
from .locks import AdvisoryLock, FileLock, NoLock, SchedulerLock, scheduler_lock
from .planning import PLAN_CHUNK, Finished, Planning
from .schema import DELIVERY_STATUSES, HEAD_REVISION, SUBSCRIBER_STATUSES
from .store import Store, open_store
from .subscribers import BouncePolicy, Subscriber

__all__ = [
    "BATCH_SIZE",
    "DELIVERY_STATUSES",
    "HEAD_REVISION",
    "PLAN_CHUNK",
    "SUBSCRIBER_STATUSES",
    "AdvisoryLock",
    "AtRisk",
    "Batch",
    "BouncePolicy",
    "Bounced",
    "Claim",
    "Delivery",
    "FileLock",
    "Finished",
    "Issue",
    "Ledger",
    "NoLock",
    "OwedRun",
    "Planning",
    "SchedulerLock",
    "Store",
    "Subscriber",
    "Within",
    "create_engine",
    "database_errors",
    "open_store",
    "scheduler_lock",
    "utc",
]
