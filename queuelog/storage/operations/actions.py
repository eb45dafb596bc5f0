"""A producer's or an admin's action on one job: cancel, retry."""

from __future__ import annotations

from queuelog.errors import Conflict, job_not_found
from queuelog.model import EventKind, Job, JobScope, JobStatus
from queuelog.storage.operations import cancel_requests, dependencies
from queuelog.storage.operations.reads import fetch_job
from queuelog.storage.schema.codec import decode_job
from queuelog.storage.transaction import WriteTx


def cancel(tx: WriteTx, job_id: int, scope: JobScope, grace_seconds: int) -> Job:
    """A PENDING job CANCELLED at once; a RUNNING one's cancellation requested, its holder
    given `grace_seconds` to stop (cancel_requests.py). A job whose cancellation was requested
    already is answered as it is, whatever its status now."""
    job = fetch_job(tx, job_id)
    if job is None or not scope.allows(job):
        raise job_not_found(job_id)
    if job.status is JobStatus.RUNNING:
        return cancel_requests.request(tx, job, grace_seconds)
    if cancel_requests.ends_cancelled(job):  # requested while it ran, which has ended since
        return job
    if job.status is not JobStatus.PENDING:
        raise Conflict(f"job {job_id} is {job.status.name}; only PENDING or RUNNING jobs can be cancelled")
    row = tx.execute(tx.sql.CANCEL_PENDING, {"id": job_id, "now": tx.now_us}).fetchone()
    if row is None:  # pragma: no cover - the write lock keeps the row as read
        raise Conflict(f"job {job_id} is no longer PENDING")
    cancelled = decode_job(row)
    tx.record(EventKind.CANCELLED, job, cancelled)
    return cancelled


def retry(tx: WriteTx, job_id: int) -> Job:
    job = fetch_job(tx, job_id)
    if job is None:
        raise job_not_found(job_id)
    if job.status not in (JobStatus.FAILED, JobStatus.CANCELLED):
        raise Conflict(f"job {job_id} is {job.status.name}; only FAILED or CANCELLED jobs can be retried")
    row = tx.execute(tx.sql.RETRY_FINISHED, {"id": job_id, "now": tx.now_us}).fetchone()
    if row is None:  # pragma: no cover - the write lock keeps the row as read
        raise Conflict(f"job {job_id} changed while being retried")
    retried = decode_job(row)
    if retried.dependency_count:
        retried = dependencies.restore_waiting(tx, [retried]).get(retried.id, retried)
    tx.record(EventKind.RETRIED, job, retried)
    return retried
