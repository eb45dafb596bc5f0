"""SQLite's statements of steering a job in time (API.md section 12): the expiry of PENDING
jobs, a holder's snooze and the edit of a PENDING job."""

from __future__ import annotations

from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.sqlite.statements.fragments import NEXT_REVISION_SQL, STAMP_SQL
from queuelog.storage.statements import EXPIRE_BATCH, EXPIRED_ERROR, Statements

# PENDING jobs that expire, soonest first: the partial index holds only those.
_EXPIRING = "FROM jobs INDEXED BY ix_jobs_expiry WHERE status = 'pending' AND expires_at IS NOT NULL"


class ReschedulingStatements(Statements, part=True):
    """Expiry, snooze and the edit of a PENDING job."""

    EXPIRE_DUE = f"""
        UPDATE jobs SET status = 'cancelled', error = '{EXPIRED_ERROR}', finished_at = {STAMP_SQL},
            updated_at = {STAMP_SQL}, {NEXT_REVISION_SQL}
        WHERE id IN (SELECT id {_EXPIRING} AND expires_at <= :now ORDER BY expires_at LIMIT {EXPIRE_BATCH})
        RETURNING {JOB_COLUMN_LIST}
    """
    NEXT_EXPIRY = f"SELECT MIN(expires_at) {_EXPIRING}"
    SNOOZE_RUNNING = f"""
        UPDATE jobs SET status = 'pending', worker_id = NULL, lease_expires_at = NULL, timeout_at = NULL,
            run_at = :run_at, delayed = :delayed, snooze_count = snooze_count + 1,
            updated_at = {STAMP_SQL}, {NEXT_REVISION_SQL}
        WHERE id = :id AND status = 'running' AND attempt = :attempt
        RETURNING {JOB_COLUMN_LIST}
    """
    UPDATE_PENDING = f"""
        UPDATE jobs SET priority = :priority, max_retries = :max_retries, run_at = :run_at,
            delayed = :delayed, expires_at = :expires_at, enqueued_as = :enqueued_as,
            updated_at = {STAMP_SQL}, {NEXT_REVISION_SQL}
        WHERE id = :id AND status = 'pending'
        RETURNING {JOB_COLUMN_LIST}
    """
