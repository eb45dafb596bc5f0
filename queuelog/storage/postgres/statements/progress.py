"""PostgreSQL's statements of a holder's progress reports, and of the attempts read from events."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import IS_RUNNING, NEXT_REVISION, STAMP, id_list, ts
from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import Statements


class ProgressStatements(Statements, part=True):
    """reportProgress and Job.attempts."""

    REPORT_PROGRESS = f"""
        UPDATE jobs SET progress = %(progress)s, progress_message = %(message)s, progress_at = {ts("at")},
            lease_expires_at = CASE WHEN status = 'running'
                THEN GREATEST(lease_expires_at, {ts("lease")}) ELSE lease_expires_at END,
            updated_at = {STAMP}, {NEXT_REVISION}
        WHERE id = %(id)s AND attempt = %(attempt)s
            AND (%(late)s::boolean OR ({IS_RUNNING} AND worker_id = %(worker)s))
            AND (NOT %(late)s::boolean OR progress_at IS NULL OR progress_at <= {ts("at")})
        RETURNING {JOB_COLUMN_LIST}
    """
    # Each job's newest rows that carry an attempt, from ix_job_events_job (LATERAL), as
    # EVENTS_OF_JOBS.
    ATTEMPT_EVENTS_OF_JOBS = (
        "SELECT wanted.job_id, newest.kind, newest.at, newest.attempt, newest.worker_id, newest.error"
        f" FROM (SELECT DISTINCT ids.value AS job_id FROM {id_list('ids')} AS ids) AS wanted"
        " CROSS JOIN LATERAL (SELECT id, kind, at, attempt, worker_id, error FROM job_events"
        " WHERE job_id = wanted.job_id AND attempt IS NOT NULL ORDER BY id DESC LIMIT %(limit)s) AS newest"
        " ORDER BY wanted.job_id, newest.id"
    )
