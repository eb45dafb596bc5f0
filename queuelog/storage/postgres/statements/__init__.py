"""The PostgreSQL text of every statement in statements.py, under the same names.

The operations (storage/operations/) are written once, against the names of statements.py;
on PostgreSQL the connection (connection.py) carries `PostgresStatements` as its `.sql`
(`PostgresWriterStatements` on a writer). Values keep the shapes the operations give them:
timestamps are integer microseconds (turned into `timestamptz` by `ts()` on the way in, and
back by a binary loader on the way out), JSON documents are text, id and type lists are JSON
arrays. Each concern's statements are in a module of their own, gathered here in one class.

What differs from SQLite, and why:
- claims take `FOR UPDATE SKIP LOCKED`: servers on other machines claim at the same time,
  and each must skip the rows another is taking instead of waiting for them (V-06);
- rows a write reads before it updates them are locked (`FOR UPDATE`): on SQLite the
  write lock keeps them as read, here other processes write concurrently;
- lease expiry and pruning skip locked rows, so every process can run them at once;
- new ids come back from RETURNING (ids are not consecutive across processes);
- new jobs and events, which SQLite inserts row by row (executemany), go in as one
  statement over arrays (`AT_ONCE`, sending.py), and so do `completeJobs`' completions.
"""

from __future__ import annotations

from queuelog.storage.postgres.statements.bulk import BulkStatements
from queuelog.storage.postgres.statements.cancel_requests import CancelRequestStatements
from queuelog.storage.postgres.statements.claims import ClaimStatements
from queuelog.storage.postgres.statements.dependencies import DependencyStatements
from queuelog.storage.postgres.statements.events import EventStatements
from queuelog.storage.postgres.statements.flow import FlowStatements
from queuelog.storage.postgres.statements.job_types import JobTypeStatements
from queuelog.storage.postgres.statements.jobs import JobStatements
from queuelog.storage.postgres.statements.progress import ProgressStatements
from queuelog.storage.postgres.statements.reads import ReadStatements
from queuelog.storage.postgres.statements.rescheduling import ReschedulingStatements
from queuelog.storage.postgres.statements.schedules import ScheduleStatements


class PostgresStatements(
    JobStatements,
    ClaimStatements,
    FlowStatements,
    BulkStatements,
    ReadStatements,
    EventStatements,
    DependencyStatements,
    ScheduleStatements,
    CancelRequestStatements,
    ReschedulingStatements,
    JobTypeStatements,
    ProgressStatements,
):
    """Every statement, by name (statements.Statements)."""


class PostgresWriterStatements(PostgresStatements):
    """A writer's: the rows a write reads before it updates them are taken locked (see the
    module docstring)."""

    JOB_BY_ID = PostgresStatements.JOB_BY_ID + " FOR UPDATE"
    JOBS_BY_IDS = PostgresStatements.JOBS_BY_IDS + " ORDER BY id FOR UPDATE"
