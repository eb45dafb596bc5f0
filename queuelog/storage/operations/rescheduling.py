"""Steering a job in time (API.md section 12): PENDING jobs that expire, the holder's snooze,
and the edit of a PENDING job (updateJob, runJobNow).

Each reads the job under its row's lock (a writer's JOB_BY_ID on PostgreSQL, the write lock
on SQLite) before it changes it, as a claim takes its rows: against a claim on any server,
an edit or a snooze applies either wholly before it or not at all (CONFLICT, the job having
left PENDING or its holder). The expiry sweep skips the rows a claim holds (SKIP LOCKED): a
job claimed before its expiry runs, and expiry never interrupts a RUNNING job.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from queuelog.errors import BadInput, Conflict, job_not_found
from queuelog.model import EventKind, Job, JobEdit, JobScope, JobStatus
from queuelog.storage.operations.reads import fetch_job
from queuelog.storage.operations.running import check_holder
from queuelog.storage.schema.codec import decode_job, micros_to_datetime
from queuelog.storage.schema.types import compact_json, to_micros
from queuelog.storage.statements import PENDING
from queuelog.storage.transaction import Connection, WriteTx

CANCELLED_WHILE_RUNNING_ERROR = "cancelled while running"


def expire_due(tx: WriteTx) -> int:
    """Cancel up to EXPIRE_BATCH PENDING jobs whose expiry has come (error `expired`, one
    EXPIRED event each); their dependents are cancelled as for any cancelled dependency."""
    rows = tx.execute(tx.sql.EXPIRE_DUE, {"now": tx.now_us}).fetchall()
    for row in rows:
        tx.record_from(EventKind.EXPIRED, PENDING, None, decode_job(row))
    return len(rows)


def next_expiry(conn: Connection) -> datetime | None:
    """When the next PENDING job expires (maybe past already), or None."""
    row = conn.execute(conn.sql.NEXT_EXPIRY).fetchone()
    return None if row is None else micros_to_datetime(row[0])


def snooze(tx: WriteTx, worker: str, job_id: int, attempt: int, seconds: int) -> Job:
    """The holder puts its job back to PENDING, due `seconds` from now: no retry used,
    snooze_count + 1, one SNOOZED event. A job whose cancellation was requested ends
    CANCELLED instead, as any other end of its attempt would."""
    held = check_holder(fetch_job(tx, job_id), job_id, worker, attempt)
    if held.cancel_requested_at is not None:
        return _cancel_held(tx, held)
    stamp = max(tx.now, held.updated_at)
    params = {
        "id": held.id,
        "attempt": held.attempt,
        "run_at": to_micros(stamp + timedelta(seconds=seconds)),
        "delayed": 1,
        "now": tx.now_us,
    }
    row = tx.execute(tx.sql.SNOOZE_RUNNING, params).fetchone()
    if row is None:  # pragma: no cover - the row is locked as read
        raise Conflict(f"job {job_id} changed while being snoozed")
    snoozed = decode_job(row)
    tx.record(EventKind.SNOOZED, held, snoozed)
    return snoozed


def _cancel_held(tx: WriteTx, held: Job) -> Job:
    """End the held job's attempt CANCELLED (its cancellation was requested): never retried,
    its worker kept, as for a job that failed for good."""
    stamp = to_micros(max(tx.now, held.updated_at))
    params = {
        "status": JobStatus.CANCELLED.value,
        "retry_count": held.retry_count,
        "worker_id": held.worker_id,
        "run_at": to_micros(held.run_at),
        "delayed": 0,
        "finished_at": stamp,
        "error": CANCELLED_WHILE_RUNNING_ERROR,
        "now": tx.now_us,
        "id": held.id,
        "attempt": held.attempt,
    }
    row = tx.execute(tx.sql.FAIL_RUNNING, params).fetchone()
    if row is None:  # pragma: no cover - the row is locked as read
        raise Conflict(f"job {held.id} changed while being cancelled")
    cancelled = decode_job(row)
    tx.record(EventKind.CANCELLED, held, cancelled)
    return cancelled


def update_pending(tx: WriteTx, job_id: int, scope: JobScope, edit: JobEdit) -> Job:
    """Apply `edit` to a PENDING job the caller may edit (`scope`; any other job is NOT_FOUND):
    one UPDATED event. CONFLICT unless the job is PENDING and not past its expiry."""
    job = fetch_job(tx, job_id)
    if job is None or not scope.allows(job):
        raise job_not_found(job_id)
    if job.status is not JobStatus.PENDING:
        raise Conflict(f"job {job_id} is {job.status.name}; only PENDING jobs can be updated")
    if job.expires_at is not None and job.expires_at <= tx.now:
        raise Conflict(f"job {job_id} has expired; it is about to be CANCELLED")
    run_at = tx.now if edit.run_now else job.run_at if edit.run_at is None else edit.run_at
    expires_at = job.expires_at
    if edit.clear_expiry or edit.expires_at is not None:
        expires_at = edit.expires_at
    _check_expiry(edit, run_at, expires_at, tx.now)
    delayed = job.delayed
    if run_at != job.run_at and job.delayed != 2:  # 2: waiting for dependencies, whenever due
        delayed = int(run_at > tx.now)
    params = {
        "id": job.id,
        "priority": (job.priority if edit.priority is None else edit.priority).value,
        "max_retries": job.max_retries if edit.max_retries is None else edit.max_retries,
        "run_at": to_micros(run_at),
        "delayed": delayed,
        "expires_at": None if expires_at is None else to_micros(expires_at),
        "enqueued_as": _enqueued_as(job),
        "now": tx.now_us,
    }
    row = tx.execute(tx.sql.UPDATE_PENDING, params).fetchone()
    if row is None:  # pragma: no cover - the row is locked as read
        raise Conflict(f"job {job_id} changed while being updated")
    updated = decode_job(row)
    tx.record(EventKind.UPDATED, job, updated)
    return updated


def _check_expiry(edit: JobEdit, run_at: datetime, expires_at: datetime | None, now: datetime) -> None:
    """The job's expiry once edited is later than its runAt, and a new one later than now."""
    if edit.expires_at is not None and edit.expires_at <= now:
        raise BadInput("expiresAt must be in the future")
    if expires_at is not None and expires_at <= run_at:
        if edit.expires_at is not None:
            raise BadInput("expiresAt must be later than runAt")
        raise BadInput("runAt must be earlier than the job's expiresAt")


def _enqueued_as(job: Job) -> str | None:
    """The values a replayed enqueue is compared with, kept at a job's first edit; only a job
    with an idempotency key can be replayed."""
    if job.enqueued_as is not None:
        return compact_json(job.enqueued_as)
    if job.idempotency_key is None:
        return None
    expires_at = None if job.expires_at is None else to_micros(job.expires_at)
    return compact_json(
        {"priority": job.priority.value, "max_retries": job.max_retries, "expires_at": expires_at}
    )
