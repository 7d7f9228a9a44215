"""The state database: every SQL statement of the project lives in this package.

``open_store`` gives a ``Store``: one repository per aggregate, each in a module of its own
and handed to the code that works on it: ``published`` (first publication times of feed
entries), ``subscribers``, ``issues`` with ``planning`` (an issue's readers planned in chunks,
an issue closed once settled), ``ledger`` (send runs and deliveries, the exactly-once
protocol), ``bounce_reports`` (bounce reports), ``buckets`` (each relay's shared rate),
``firings`` (scheduled runs owed); ``locks`` (the scheduler's and the send run's), ``schema``
(tables and migrations), ``database`` (the engine, its errors, the one way to write).
Two are imported by name, not from here, for what they import: ``jobstore`` (APScheduler's
job store on the state engine, with the scheduler's lock and ledger) and ``workers``
(Procrastinate's tables; the scale extra).
"""

from .bounce_reports import AtRisk, Bounced, BounceReports
from .buckets import Buckets
from .database import create_engine, database_errors, utc
from .firings import Firings, OwedRun
from .issues import BATCH_SIZE, Issue, Within
from .ledger import Batch, Claim, Deliveries, Delivery, Ledger
from .locks import AdvisoryLock, FileLock, NoLock, SchedulerLock, scheduler_lock
from .planning import PLAN_CHUNK, Finished, IssuePlanning, Planning
from .published import Publications
from .schema import DELIVERY_STATUSES, HEAD_REVISION, SUBSCRIBER_STATUSES
from .store import Store, open_store
from .subscribers import BouncePolicy, Subscriber, Subscribers

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
    "BounceReports",
    "Bounced",
    "Buckets",
    "Claim",
    "Deliveries",
    "Delivery",
    "FileLock",
    "Finished",
    "Firings",
    "Issue",
    "IssuePlanning",
    "Ledger",
    "NoLock",
    "OwedRun",
    "Planning",
    "Publications",
    "SchedulerLock",
    "Store",
    "Subscriber",
    "Subscribers",
    "Within",
    "create_engine",
    "database_errors",
    "open_store",
    "scheduler_lock",
    "utc",
]
