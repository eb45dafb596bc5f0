"""PostgreSQL's statements of steering a job in time (API.md section 12): the expiry of
PENDING jobs, a holder's snooze and the edit of a PENDING job."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import (
    IS_PENDING,
    IS_RUNNING,
    NEXT_REVISION,
    NOW,
    STAMP,
    ts,
)
from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import EXPIRE_BATCH, EXPIRED_ERROR, Statements

# PENDING jobs that expire, soonest first: ix_jobs_expiry's predicate, stated whole so that
# the planner may read it (it holds only those jobs, in this order).
_EXPIRING = "FROM jobs WHERE status = 'pending' AND expires_at IS NOT NULL"


class ReschedulingStatements(Statements, part=True):
    """Expiry, snooze and the edit of a PENDING job."""

    # Every server sweeps: each takes the rows no other holds (SKIP LOCKED), a claim that
    # holds one keeps it (it was not expired when the claim read it).
    EXPIRE_DUE = f"""
        UPDATE jobs SET status = 'cancelled', error = '{EXPIRED_ERROR}', finished_at = {STAMP},
            updated_at = {STAMP}, {NEXT_REVISION}
        WHERE id = ANY(ARRAY(
            SELECT id {_EXPIRING} AND expires_at <= {NOW}
            ORDER BY expires_at LIMIT {EXPIRE_BATCH} FOR UPDATE SKIP LOCKED))
        AND {IS_PENDING}
        RETURNING {JOB_COLUMN_LIST}
    """
    NEXT_EXPIRY = f"SELECT MIN(expires_at) {_EXPIRING}"
    SNOOZE_RUNNING = f"""
        UPDATE jobs SET status = 'pending', worker_id = NULL, lease_expires_at = NULL, timeout_at = NULL,
            run_at = {ts("run_at")}, delayed = %(delayed)s, snooze_count = jobs.snooze_count + 1,
            updated_at = {STAMP}, {NEXT_REVISION}
        WHERE id = %(id)s AND {IS_RUNNING} AND attempt = %(attempt)s
        RETURNING {JOB_COLUMN_LIST}
    """
    UPDATE_PENDING = f"""
        UPDATE jobs SET priority = %(priority)s, max_retries = %(max_retries)s, run_at = {ts("run_at")},
            delayed = %(delayed)s, expires_at = {ts("expires_at")}, enqueued_as = %(enqueued_as)s,
            updated_at = {STAMP}, {NEXT_REVISION}
        WHERE id = %(id)s AND {IS_PENDING}
        RETURNING {JOB_COLUMN_LIST}
    """
