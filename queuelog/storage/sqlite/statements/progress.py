"""SQLite's statements of a holder's progress reports, and of the attempts read from events."""

from __future__ import annotations

from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.sqlite.statements.fragments import NEXT_REVISION_SQL, STAMP_SQL
from queuelog.storage.statements import Statements


class ProgressStatements(Statements, part=True):
    """reportProgress and Job.attempts."""

    REPORT_PROGRESS = f"""
        UPDATE jobs SET progress = :progress, progress_message = :message, progress_at = :at,
            lease_expires_at = CASE WHEN status = 'running' THEN max(lease_expires_at, :lease)
                ELSE lease_expires_at END,
            updated_at = {STAMP_SQL}, {NEXT_REVISION_SQL}
        WHERE id = :id AND attempt = :attempt AND (:late OR (status = 'running' AND worker_id = :worker))
            AND (NOT :late OR progress_at IS NULL OR progress_at <= :at)
        RETURNING {JOB_COLUMN_LIST}
    """
    # Through ix_job_events_job, as EVENTS_OF_JOBS.
    ATTEMPT_EVENTS_OF_JOBS = (
        "SELECT job_id, kind, at, attempt, worker_id, error FROM (SELECT job_id, id, kind, at, attempt,"
        " worker_id, error, row_number() OVER (PARTITION BY job_id ORDER BY id DESC) AS newness"
        " FROM job_events WHERE job_id IN (SELECT value FROM json_each(:ids)) AND attempt IS NOT NULL)"
        " AS newest WHERE newness <= :limit ORDER BY job_id, id"
    )
