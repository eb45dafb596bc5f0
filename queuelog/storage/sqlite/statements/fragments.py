"""The pieces SQLite's statements are made of: SQLAlchemy Core compiled once, constants written
into the text, the status terms its partial indexes need, a job's stamp and revision, and
the transitions more than one concern writes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, literal_column, null
from sqlalchemy.dialects import sqlite

from queuelog.model import JobStatus
from queuelog.storage.schema.tables import jobs
from queuelog.storage.statements import PENDING, RUNNING

_DIALECT = sqlite.dialect(paramstyle="named")


def sql_of(statement: Any) -> str:
    """The statement's SQL; every value in it is a named parameter or a literal (`lit`)."""
    compiled = statement.compile(dialect=_DIALECT)
    embedded = [name for name, bind in compiled.binds.items() if bind.value is not None or bind.expanding]
    if embedded:  # pragma: no cover - a mistake in a statement below
        raise RuntimeError(f"values must be parameters or lit(): {embedded}")
    return str(compiled)


def lit(value: str | int | None) -> Any:
    """A constant written into the SQL itself (never user input)."""
    if value is None:
        return null()
    return literal_column(f"'{value}'" if isinstance(value, str) else str(int(value)))


# Status written as a literal, not a bound parameter: SQLite only uses a partial index
# (`WHERE status = 'pending'`) when it can see the value while planning.
IS_PENDING = jobs.c.status == literal_column(f"'{PENDING}'")
IS_RUNNING = jobs.c.status == literal_column(f"'{RUNNING}'")
READY = "status = 'pending' AND delayed = 0"
# A ready job a claim may take: not past its expiry (API.md section 12). A job without one
# passes on the first term, and the head reads read the row all the same: their plans do
# not change (tests/steering/test_expiry_plans.py). The sweep cancels expired jobs within a second.
UNEXPIRED = "(expires_at IS NULL OR expires_at > :now)"
CLAIMABLE = f"{READY} AND {UNEXPIRED}"
DELAYED = "status = 'pending' AND delayed = 1"


def each_type(count: int, template: str) -> str:
    """`template` once per type (`{i}` its number), joined by UNION ALL."""
    return " UNION ALL ".join(f"SELECT * FROM ({template.format(i=i)})" for i in range(count))


CANDIDATE = "id, type, concurrency_key, priority, created_at"
# A job's stamp for the change being made: the batch's clock, or the job's own last stamp when
# that is later (as on PostgreSQL; here the clock is read once the write lock is held, so only
# a clock stepped back makes a difference): a job's recorded times never run backwards.
STAMP: Any = func.max(bindparam("now"), jobs.c.updated_at)
STAMP_SQL = "max(:now, updated_at)"
# Every UPDATE of a job adds one (storage/schema/tables.py).
NEXT_REVISION = jobs.c.revision + literal_column("1")
NEXT_REVISION_SQL = "revision = revision + 1"
RETRIED_VALUES = {
    "status": lit(PENDING),
    "retry_count": lit(0),
    "run_at": STAMP,
    "delayed": lit(0),
    "waiting_for": lit(0),  # dependencies.restore_waiting counts those still open
    "worker_id": lit(None),
    "lease_expires_at": lit(None),
    "timeout_at": lit(None),
    "finished_at": lit(None),
    "cancel_requested_at": lit(None),
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}
CANCELLED_VALUES = {
    "status": lit(JobStatus.CANCELLED.value),
    "finished_at": STAMP,
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}
