"""SQLite's text of every statement in statements.py, built once with SQLAlchemy Core.

operations.py runs these on the driver's connection, whose statement cache keeps each one
prepared. Constants are written into the SQL (`lit`), values are always named parameters.
SQLite's statements name the partial indexes they need (INDEXED BY): lacking statistics,
its planner may otherwise pick a status index and sort every pending row.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import and_, bindparam, insert, literal_column, null, or_, select, text, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.elements import BindParameter

from queuelog.model import JobStatus, Priority
from queuelog.storage.codec import JOB_COLUMN_LIST, NEW_JOB_COLUMNS
from queuelog.storage.statements import (
    EVENT_TAIL_BATCH,
    EXPIRE_BATCH,
    PENDING,
    PRUNE_BATCH,
    RUNNING,
    TERMINAL_SQL,
    Statements,
)
from queuelog.storage.tables import job_counts, job_events, job_minutes, jobs

_DIALECT = sqlite.dialect(paramstyle="named")


def _sql(statement: Any) -> str:
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
_INSERT_VALUES: dict[str, BindParameter[Any]] = {name: bindparam(name) for name in NEW_JOB_COLUMNS}


def _adding_to(table: Any) -> str:
    """Upsert that adds `n` to the row with these keys (every primary key column)."""
    keys = [c.name for c in table.primary_key.columns]
    return _sql(
        sqlite.insert(table)
        .values({n: bindparam(n) for n in (*keys, "n")})
        .on_conflict_do_update(index_elements=keys, set_={"n": table.c.n + literal_column("excluded.n")})
    )


# The claim reads ix_jobs_claim by name: lacking statistics, SQLite's planner may otherwise
# pick a status index and sort every pending row. BEGIN IMMEDIATE makes it atomic.
_CLAIM = f"""
    UPDATE jobs SET status = 'running', worker_id = :worker, claimed_at = :now,
        attempt = attempt + 1, lease_expires_at = :lease, updated_at = :now
    WHERE status = 'pending' AND id IN (
        SELECT id FROM jobs INDEXED BY ix_jobs_claim
        WHERE status = 'pending' AND run_at <= :now {{types}}
        ORDER BY priority DESC, created_at, id
        LIMIT :limit)
    RETURNING {JOB_COLUMN_LIST}
"""
_HOLDER_GUARD = and_(
    jobs.c.id == bindparam("id"),
    IS_RUNNING,
    jobs.c.worker_id == bindparam("worker"),
    or_(bindparam("attempt").is_(None), jobs.c.attempt == bindparam("attempt")),
)
_COMPLETED_VALUES = {
    "status": lit(JobStatus.COMPLETED.value),
    "result": bindparam("result"),
    "finished_at": bindparam("now"),
    "lease_expires_at": lit(None),
    "updated_at": bindparam("now"),
}
_FAILURE_VALUES = {
    "status": bindparam("status"),
    "retry_count": bindparam("retry_count"),
    "worker_id": bindparam("worker_id"),
    "lease_expires_at": lit(None),
    "run_at": bindparam("run_at"),
    "finished_at": bindparam("finished_at"),
    "error": bindparam("error"),
    "updated_at": bindparam("now"),
}
_SEEN_RUNNING = and_(jobs.c.id == bindparam("id"), IS_RUNNING, jobs.c.attempt == bindparam("attempt"))
# The oldest due PENDING job: the first due row of each priority in ix_jobs_claim's order.
_OLDEST_OF_PRIORITY = """
    SELECT created_at FROM (SELECT created_at FROM jobs INDEXED BY ix_jobs_claim
        WHERE status = 'pending' AND priority = {priority} AND run_at <= :now {scope}
        ORDER BY priority DESC, created_at LIMIT 1)
"""


def _oldest_pending_sql(scope: str) -> str:
    parts = [_OLDEST_OF_PRIORITY.format(priority=p.value, scope=scope) for p in Priority]
    return "SELECT MIN(created_at) FROM (" + " UNION ALL ".join(parts) + ")"


@functools.cache
def list_statement(
    by_creator: bool, by_worker: bool, status: bool, job_type: bool, after: bool, walk_scope: bool = False
) -> str:
    """`jobs(...)`, newest first. `walk_scope`: walk the caller's own index (created_by or
    worker_id, then id) and test status and type on each row, instead of walking the
    filter's index and testing the caller on each row. SQLite has no statistics to choose
    between them, so list_jobs does, from the counters (read_plans.py); a unary `+` keeps a
    column's index out of the plan."""
    filters: list[Any] = []
    if by_creator and by_worker:
        filters.append(or_(jobs.c.created_by == bindparam("name"), jobs.c.worker_id == bindparam("name")))
    elif by_creator:
        filters.append(jobs.c.created_by == bindparam("name"))
    elif by_worker:
        filters.append(jobs.c.worker_id == bindparam("name"))
    if status:
        filters.append(text("+status = :status") if walk_scope else jobs.c.status == bindparam("status"))
    if job_type:
        filters.append(text("+type = :type") if walk_scope else jobs.c.type == bindparam("type"))
    if after:
        filters.append(jobs.c.id < bindparam("after"))
    return _sql(select(*jobs.c).where(*filters).order_by(jobs.c.id.desc())) + " LIMIT :limit"


class SqliteStatements(Statements):
    INSERT_JOB = _sql(insert(jobs).values(_INSERT_VALUES))
    INSERT_JOB_ONCE = _sql(
        sqlite.insert(jobs)
        .values(_INSERT_VALUES)
        .on_conflict_do_nothing(index_elements=["created_by", "idempotency_key"])
    )
    JOB_BY_IDEMPOTENCY_KEY = _sql(
        select(*jobs.c).where(
            jobs.c.created_by == bindparam("created_by"), jobs.c.idempotency_key == bindparam("key")
        )
    )
    JOBS_BY_IDEMPOTENCY_KEYS = (
        f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE created_by = :created_by"
        " AND idempotency_key IN (SELECT value FROM json_each(:keys))"
    )
    JOB_BY_ID = _sql(select(*jobs.c).where(jobs.c.id == bindparam("id")))
    JOBS_BY_IDS = f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))"

    CLAIM_ANY = _CLAIM.format(types="")
    CLAIM_TYPES = _CLAIM.format(types="AND type IN (SELECT value FROM json_each(:types))")
    HEARTBEAT = _sql(
        update(jobs)
        .where(_HOLDER_GUARD)
        .values(lease_expires_at=bindparam("lease"), updated_at=bindparam("now"))
        .returning(*jobs.c)
    )
    COMPLETE_HELD = _sql(update(jobs).where(_HOLDER_GUARD).values(_COMPLETED_VALUES).returning(*jobs.c))
    COMPLETE_CHECKED = _sql(update(jobs).where(_SEEN_RUNNING).values(_COMPLETED_VALUES))
    FAIL_RUNNING = _sql(update(jobs).where(_SEEN_RUNNING).values(_FAILURE_VALUES).returning(*jobs.c))
    EXPIRE_RUNNING = _sql(
        update(jobs).where(_SEEN_RUNNING, jobs.c.lease_expires_at < bindparam("now")).values(_FAILURE_VALUES)
    )
    EXPIRED_LEASES = f"""
        SELECT {JOB_COLUMN_LIST} FROM jobs INDEXED BY ix_jobs_lease
        WHERE status = 'running' AND lease_expires_at < :now
        ORDER BY lease_expires_at LIMIT {EXPIRE_BATCH}
    """

    CANCEL_PENDING = _sql(
        update(jobs)
        .where(jobs.c.id == bindparam("id"), IS_PENDING)
        .values(
            status=lit(JobStatus.CANCELLED.value), finished_at=bindparam("now"), updated_at=bindparam("now")
        )
        .returning(*jobs.c)
    )
    RETRY_FINISHED = _sql(
        update(jobs)
        .where(jobs.c.id == bindparam("id"), jobs.c.status.in_([lit("failed"), lit("cancelled")]))
        .values(
            status=lit(PENDING),
            retry_count=lit(0),
            run_at=bindparam("now"),
            worker_id=lit(None),
            lease_expires_at=lit(None),
            finished_at=lit(None),
            updated_at=bindparam("now"),
        )
        .returning(*jobs.c)
    )
    PRUNE = f"""
        DELETE FROM jobs WHERE id IN (
            SELECT id FROM jobs INDEXED BY ix_jobs_finished
            WHERE finished_at < :cutoff AND status IN {TERMINAL_SQL} LIMIT {PRUNE_BATCH})
        RETURNING id, type, status, created_by, worker_id
    """

    NEXT_DUE_ANY = "SELECT MIN(run_at) FROM jobs INDEXED BY ix_jobs_due WHERE status = 'pending'"
    NEXT_DUE_TYPES = NEXT_DUE_ANY + " AND type IN (SELECT value FROM json_each(:types))"
    OLDEST_PENDING_ANY = _oldest_pending_sql("")
    OLDEST_PENDING_OF = _oldest_pending_sql("AND created_by = :created_by")
    # The same through the creator's own jobs, for a creator with fewer jobs than the queue
    # has pending ones (read_plans.oldest_pending_walk chooses, from the counters).
    OLDEST_PENDING_AMONG_OWN = (
        "SELECT MIN(created_at) FROM jobs INDEXED BY ix_jobs_created_by"
        " WHERE created_by = :created_by AND status = 'pending' AND run_at <= :now"
    )
    list_jobs = staticmethod(list_statement)

    INSERT_EVENT = _sql(
        insert(job_events).values({n: bindparam(n) for n in ("job_id", "kind", "status", "at")})
    )
    DELETE_EVENTS_OF = "DELETE FROM job_events WHERE job_id IN (SELECT value FROM json_each(:ids))"
    MAX_EVENT_ID = "SELECT MAX(id) FROM job_events"
    EVENTS_WITH_IDS = (
        "SELECT id, job_id, kind, status FROM job_events WHERE id IN (SELECT value FROM json_each(:ids))"
    )
    EVENTS_AFTER = (
        "SELECT id, job_id, kind, status FROM job_events WHERE id > :after"
        f" ORDER BY id LIMIT {EVENT_TAIL_BATCH}"
    )
    # Jobs' own events, the newest `limit` of each, by job and oldest first (ix_job_events_job):
    # every `Job.events` of one request in one read.
    EVENTS_OF_JOBS = (
        "SELECT job_id, kind, status, at FROM (SELECT job_id, id, kind, status, at,"
        " row_number() OVER (PARTITION BY job_id ORDER BY id DESC) AS newness FROM job_events"
        " WHERE job_id IN (SELECT value FROM json_each(:ids))) AS newest"
        " WHERE newness <= :limit ORDER BY job_id, id"
    )

    ADD_TO_COUNT = _adding_to(job_counts)
    ADD_TO_MINUTE = _adding_to(job_minutes)
    COUNTS_OF_SCOPES = (
        "SELECT scope, name, type, status, n FROM job_counts"
        " WHERE (scope, name) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:scopes))"
    )
    MINUTES_OF_SCOPES = (
        "SELECT scope, name, minute, status, n FROM job_minutes WHERE minute >= :since"
        " AND (scope, name) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:scopes))"
    )
    PRUNE_MINUTES = "DELETE FROM job_minutes WHERE minute < :before"

    ACTIVE_KEY = (
        "SELECT name, roles, max_priority, created_at FROM api_keys"
        " WHERE key_hash = :key_hash AND revoked_at IS NULL"
    )
    # Whether a key still works: a waiting claim asks inside its transaction (revoked: no claim).
    KEY_IS_ACTIVE = "SELECT 1 FROM api_keys WHERE name = :name AND revoked_at IS NULL"
    KEY_GENERATION = "SELECT generation FROM key_state WHERE id = 1"
    PING = "SELECT 1"


# The last id AUTOINCREMENT gave out in a table: SqliteConnection.insert_ids reads it on
# either side of an executemany to learn the ids of the rows it inserted.
LAST_JOB_ID = "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'"
LAST_EVENT_ID = "SELECT seq FROM sqlite_sequence WHERE name = 'job_events'"
LAST_ID_AFTER = {SqliteStatements.INSERT_JOB: LAST_JOB_ID, SqliteStatements.INSERT_EVENT: LAST_EVENT_ID}

# `queuelog copy-database`, on the source file.
IS_MIGRATED = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
GIVEN_OUT = "SELECT seq FROM sqlite_sequence WHERE name = :name"
