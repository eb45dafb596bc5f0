"""SQLite's statements of one job at a time: enqueue, reads by id, the holder's reports,
expiry, cancel, retry and pruning."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, bindparam, insert, or_, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.elements import BindParameter

from queuelog.model import JobStatus
from queuelog.storage.schema.codec import JOB_COLUMN_LIST, NEW_JOB_COLUMNS
from queuelog.storage.schema.tables import jobs
from queuelog.storage.sqlite.statements.fragments import (
    CANCELLED_VALUES,
    IS_PENDING,
    IS_RUNNING,
    NEXT_REVISION,
    RETRIED_VALUES,
    STAMP,
    lit,
    sql_of,
)
from queuelog.storage.statements import EXPIRE_BATCH, PRUNE_BATCH, TERMINAL_SQL, Statements

_INSERT_VALUES: dict[str, BindParameter[Any]] = {name: bindparam(name) for name in NEW_JOB_COLUMNS}
_HOLDER_GUARD = and_(
    jobs.c.id == bindparam("id"),
    IS_RUNNING,
    jobs.c.worker_id == bindparam("worker"),
    or_(bindparam("attempt").is_(None), jobs.c.attempt == bindparam("attempt")),
)
_COMPLETED_VALUES = {
    "status": lit(JobStatus.COMPLETED.value),
    "result": bindparam("result"),
    "finished_at": STAMP,
    "lease_expires_at": lit(None),
    "timeout_at": lit(None),
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}
_FAILURE_VALUES = {
    "status": bindparam("status"),
    "retry_count": bindparam("retry_count"),
    "worker_id": bindparam("worker_id"),
    "lease_expires_at": lit(None),
    "run_at": bindparam("run_at"),
    "delayed": bindparam("delayed"),
    "timeout_at": lit(None),
    "finished_at": bindparam("finished_at"),
    "error": bindparam("error"),
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}
# A finished job that no PENDING job waits for (API.md section 10: a job retried after its
# dependency failed waits for it again). Only a job with dependents that did not complete can
# be waited for, so the common finished job costs no read; for the others, their dependents
# are looked up by key.
_UNAWAITED = """(has_dependents = 0 OR status = 'completed' OR NOT EXISTS (
    SELECT 1 FROM job_dependencies AS d JOIN jobs AS w ON w.id = d.job_id
    WHERE d.depends_on = jobs.id AND w.status = 'pending' AND w.delayed = 2))"""
_SEEN_RUNNING = and_(jobs.c.id == bindparam("id"), IS_RUNNING, jobs.c.attempt == bindparam("attempt"))


class JobStatements(Statements, part=True):
    """Enqueue, reads by id, the holder's reports, expiry, cancel, retry and pruning."""

    INSERT_JOB = sql_of(insert(jobs).values(_INSERT_VALUES))
    INSERT_JOB_ONCE = sql_of(
        sqlite.insert(jobs)
        .values(_INSERT_VALUES)
        .on_conflict_do_nothing(index_elements=["created_by", "idempotency_key"])
    )
    JOB_BY_IDEMPOTENCY_KEY = sql_of(
        select(*jobs.c).where(
            jobs.c.created_by == bindparam("created_by"), jobs.c.idempotency_key == bindparam("key")
        )
    )
    JOBS_BY_IDEMPOTENCY_KEYS = (
        f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE created_by = :created_by"
        " AND idempotency_key IN (SELECT value FROM json_each(:keys))"
    )
    JOB_BY_ID = sql_of(select(*jobs.c).where(jobs.c.id == bindparam("id")))
    JOBS_BY_IDS = f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))"
    TIME_OUT_RUNNING = sql_of(
        update(jobs).where(_SEEN_RUNNING, jobs.c.timeout_at < bindparam("now")).values(_FAILURE_VALUES)
    )
    HEARTBEAT = sql_of(
        update(jobs)
        .where(_HOLDER_GUARD)
        .values(lease_expires_at=bindparam("lease"), updated_at=STAMP, revision=NEXT_REVISION)
        .returning(*jobs.c)
    )
    COMPLETE_HELD = sql_of(update(jobs).where(_HOLDER_GUARD).values(_COMPLETED_VALUES).returning(*jobs.c))
    COMPLETE_CHECKED = sql_of(update(jobs).where(_SEEN_RUNNING).values(_COMPLETED_VALUES))
    FAIL_RUNNING = sql_of(update(jobs).where(_SEEN_RUNNING).values(_FAILURE_VALUES).returning(*jobs.c))
    EXPIRE_RUNNING = sql_of(
        update(jobs).where(_SEEN_RUNNING, jobs.c.lease_expires_at < bindparam("now")).values(_FAILURE_VALUES)
    )
    # RUNNING jobs past their lease, then those past their timeout: one probe for both.
    OVERDUE = f"""
        SELECT * FROM (SELECT {JOB_COLUMN_LIST}, 'lease' FROM jobs INDEXED BY ix_jobs_lease
            WHERE status = 'running' AND lease_expires_at < :now
            ORDER BY lease_expires_at LIMIT {EXPIRE_BATCH})
        UNION ALL
        SELECT * FROM (SELECT {JOB_COLUMN_LIST}, 'timeout' FROM jobs INDEXED BY ix_jobs_timeout
            WHERE status = 'running' AND timeout_at IS NOT NULL AND timeout_at < :now
            ORDER BY timeout_at LIMIT {EXPIRE_BATCH})
    """
    CANCEL_PENDING = sql_of(
        update(jobs)
        .where(jobs.c.id == bindparam("id"), IS_PENDING)
        .values(CANCELLED_VALUES)
        .returning(*jobs.c)
    )
    RETRY_FINISHED = sql_of(
        update(jobs)
        .where(jobs.c.id == bindparam("id"), jobs.c.status.in_([lit("failed"), lit("cancelled")]))
        .values(RETRIED_VALUES)
        .returning(*jobs.c)
    )
    PRUNABLE = f"""
        SELECT id FROM jobs INDEXED BY ix_jobs_finished
        WHERE finished_at < :cutoff AND status IN {TERMINAL_SQL} AND {_UNAWAITED} LIMIT {PRUNE_BATCH}
    """
    PRUNE = f"""
        DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND {_UNAWAITED}
        RETURNING id, type, status, created_by, worker_id
    """
