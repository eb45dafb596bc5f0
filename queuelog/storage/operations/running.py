"""A running job: its holder's reports (heartbeat, complete, fail), and the expiry of the
leases and timeouts that nobody reports on."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from queuelog.errors import Conflict, NotFound, job_not_found
from queuelog.model import Completion, CompletionOutcome, EventKind, Job, JobStatus
from queuelog.storage.operations.cancel_requests import ends_cancelled
from queuelog.storage.operations.reads import fetch_job
from queuelog.storage.schema.codec import STATUS_BY_VALUE, decode_job, micros_to_datetime
from queuelog.storage.schema.types import compact_json, ids_json, to_micros
from queuelog.storage.statements import (
    CANCELLED_WHILE_RUNNING_ERROR,
    COL_ATTEMPT,
    COL_FINISHED,
    COL_ID,
    COL_LEASE,
    COL_RESULT,
    COL_REVISION,
    COL_STATUS,
    COL_TIMEOUT,
    COL_UPDATED,
    COL_WORKER,
    LEASE_EXPIRED_ERROR,
    PENDING,
    RUNNING,
    TIMED_OUT_ERROR,
    RetryDecision,
)
from queuelog.storage.transaction import WriteTx


def check_holder(job: Job | None, job_id: int, worker: str, attempt: int | None) -> Job:
    """`job` (as read under its row's lock) if a report of `worker` on it applies: RUNNING,
    held by `worker`, at `attempt` when one is given.

    A worker sees only the jobs whose worker it is (API.md section 2): any other job, whatever
    its state, is refused exactly as one that does not exist is (NOT_FOUND, same message). A
    job it can see (held or finished by it) in the wrong state or attempt is a CONFLICT.
    """
    if job is None or job.worker_id != worker:
        raise job_not_found(job_id)
    if job.status is not JobStatus.RUNNING:
        raise Conflict(f"job {job_id} is {job.status.name}, not RUNNING")
    if attempt is not None and attempt != job.attempt:
        raise Conflict(f"job {job_id} is at attempt {job.attempt}, not {attempt}")
    return job


def _refusal(tx: WriteTx, job_id: int, worker: str, attempt: int | None) -> Exception:
    """Why a guarded UPDATE on a held job matched nothing."""
    try:
        check_holder(fetch_job(tx, job_id), job_id, worker, attempt)
    except (NotFound, Conflict) as refusal:
        return refusal
    return Conflict(f"job {job_id} changed while being updated")  # pragma: no cover


def heartbeat(tx: WriteTx, worker: str, job_id: int, attempt: int | None, lease_seconds: int) -> Job:
    params = {
        "id": job_id,
        "worker": worker,
        "attempt": attempt,
        "lease": tx.now_us + lease_seconds * 1_000_000,
        "now": tx.now_us,
    }
    row = tx.execute(tx.sql.HEARTBEAT, params).fetchone()
    if row is None:
        raise _refusal(tx, job_id, worker, attempt)
    return decode_job(row)


def complete(tx: WriteTx, worker: str, job_id: int, result: Any, attempt: int | None) -> Job:
    params = {
        "id": job_id,
        "worker": worker,
        "attempt": attempt,
        "result": compact_json(result) if result is not None else None,
        "now": tx.now_us,
    }
    row = tx.execute(tx.sql.COMPLETE_HELD, params).fetchone()
    if row is None:
        raise _refusal(tx, job_id, worker, attempt)
    job = decode_job(row)
    tx.record_from(EventKind.COMPLETED, RUNNING, job.worker_id, job)
    return job


def complete_many(tx: WriteTx, worker: str, items: Sequence[Completion]) -> CompletionOutcome:
    """Check every item against the rows as read, then apply the good ones in one executemany.

    The write lock held since BEGIN IMMEDIATE keeps the rows as read until COMMIT; the
    rowcount check turns any surprise into a CONFLICT for the whole call, never a partial
    write. Rows are checked as read and decoded once, in their completed form. Where the
    database checks and completes in one statement (COMPLETE_MANY), it does that instead.
    """
    if tx.can.completes_at_once:
        return _complete_many_at_once(tx, worker, items)
    rows = tx.execute(tx.sql.JOBS_BY_IDS, {"ids": ids_json([item.id for item in items])}).fetchall()
    current = {row[COL_ID]: row for row in rows}
    accepted: list[tuple[Any, Completion]] = []
    rejected: list[int] = []
    seen: set[int] = set()
    for item in items:
        row = current.get(item.id)
        repeated = item.id in seen
        seen.add(item.id)
        if (
            repeated
            or row is None
            or row[COL_STATUS] != RUNNING
            or row[COL_WORKER] != worker
            or (item.attempt is not None and item.attempt != row[COL_ATTEMPT])
        ):
            rejected.append(item.id)
            continue
        accepted.append((row, item))
    now_us = tx.now_us
    completed = []
    if accepted:
        params = []
        for row, item in accepted:
            result = item.result_json if item.result is not None else None
            if item.result is not None and result is None:
                result = compact_json(item.result)
            params.append({"id": row[COL_ID], "attempt": row[COL_ATTEMPT], "result": result, "now": now_us})
            # What the UPDATE writes (statements: the stamp is never before the row's own).
            stamp = max(now_us, row[COL_UPDATED])
            done = list(row)
            done[COL_STATUS], done[COL_RESULT], done[COL_FINISHED] = "completed", result, stamp
            done[COL_LEASE], done[COL_TIMEOUT], done[COL_UPDATED] = None, None, stamp
            done[COL_REVISION] = row[COL_REVISION] + 1
            job = decode_job(done)
            tx.record_from(EventKind.COMPLETED, RUNNING, job.worker_id, job)
            completed.append(job)
        if tx.executemany(tx.sql.COMPLETE_CHECKED, params).rowcount != len(accepted):
            raise Conflict("jobs changed while being completed; nothing was applied")
    return CompletionOutcome(completed=completed, rejected=rejected)


def _result_text(item: Completion) -> str | None:
    if item.result is None:
        return None
    return item.result_json if item.result_json is not None else compact_json(item.result)


def _complete_many_at_once(tx: WriteTx, worker: str, items: Sequence[Completion]) -> CompletionOutcome:
    """complete_many as one UPDATE that checks each row and returns those it completed: the
    same outcome as checking the rows as read (an id given twice: its later items rejected),
    with no read and no row lock before it."""
    first: dict[int, Completion] = {}
    for item in items:
        first.setdefault(item.id, item)
    chosen = list(first.values())
    params = {
        "id": [item.id for item in chosen],
        "attempt": [item.attempt for item in chosen],
        "result": [_result_text(item) for item in chosen],
        "worker": worker,
        "now": tx.now_us,
    }
    done = {row[COL_ID]: row for row in tx.execute(tx.sql.COMPLETE_MANY, params).fetchall()}
    completed: list[Job] = []
    rejected: list[int] = []
    for item in items:
        row = done.pop(item.id, None)  # popped: a repeated id finds nothing the second time
        if row is None:
            rejected.append(item.id)
            continue
        job = decode_job(row)
        tx.record_from(EventKind.COMPLETED, RUNNING, worker, job)
        completed.append(job)
    return CompletionOutcome(completed=completed, rejected=rejected)


def _end_params(
    job: Job,
    now: datetime,
    error: str,
    delay: RetryDecision,
    retryable: bool = True,
    retry_in: float | None = None,
) -> dict[str, Any]:
    """The values of an attempt's end other than a completion: a failure (a retry, or FAILED),
    or CANCELLED once the job's cancellation was requested (cancel_requests.py)."""
    if ends_cancelled(job):
        return _failure_params(job, now, CANCELLED_WHILE_RUNNING_ERROR, None, JobStatus.CANCELLED)
    return _failure_params(job, now, error, delay(job, retryable, retry_in))


_END_KINDS = {
    JobStatus.PENDING: EventKind.RETRYING,
    JobStatus.FAILED: EventKind.FAILED,
    JobStatus.CANCELLED: EventKind.CANCELLED,
}


def _end_kind(after: Job, lease_expired: bool = False) -> EventKind:
    """The event of an attempt's end other than a completion, by the status it left: an
    expired lease's is LEASE_EXPIRED (retried or FAILED), a cancel request's CANCELLED."""
    if lease_expired and after.status is not JobStatus.CANCELLED:
        return EventKind.LEASE_EXPIRED
    return _END_KINDS[after.status]


def _failure_params(
    job: Job, now: datetime, error: str, delay: float | None, final: JobStatus = JobStatus.FAILED
) -> dict[str, Any]:
    """The failure's values for a job read under its row's lock: stamped at `now`, or at the
    job's own last stamp when that is later (as the statements do); `final` is its status
    when there is no retry (`delay` None)."""
    now = max(now, job.updated_at)
    now_us = to_micros(now)
    if delay is not None:
        return {
            "status": PENDING,
            "retry_count": job.retry_count + 1,
            "worker_id": None,
            "run_at": to_micros(now + timedelta(seconds=delay)),
            "delayed": int(delay > 0),
            "finished_at": None,
            "error": error,
            "now": now_us,
            "id": job.id,
            "attempt": job.attempt,
        }
    return {
        "status": final.value,
        "retry_count": job.retry_count,
        "worker_id": job.worker_id,
        "run_at": to_micros(job.run_at),
        "delayed": 0,
        "finished_at": now_us,
        "error": error,
        "now": now_us,
        "id": job.id,
        "attempt": job.attempt,
    }


def fail(
    tx: WriteTx,
    worker: str,
    job_id: int,
    error: str,
    retryable: bool,
    retry_in: float | None,
    attempt: int | None,
    delay: RetryDecision,
) -> Job:
    held = check_holder(fetch_job(tx, job_id), job_id, worker, attempt)
    params = _end_params(held, tx.now, error, delay, retryable, retry_in)
    row = tx.execute(tx.sql.FAIL_RUNNING, params).fetchone()
    if row is None:  # pragma: no cover - the write lock keeps the row as read
        raise Conflict(f"job {job_id} changed while being updated")
    job = decode_job(row)
    tx.record(_end_kind(job), held, job)
    return job


def expire_leases(tx: WriteTx, delay: RetryDecision) -> int:
    """Treat RUNNING jobs whose lease has passed as failed attempts, and fail those past
    their timeout (up to EXPIRE_BATCH of each).

    One SELECT and one executemany each, however many; under the write lock the rows stay
    as read, and the rowcount check rolls the operation back if they did not.
    """
    return expire_overdue(tx, tx.execute(tx.sql.OVERDUE, {"now": tx.now_us}).fetchall(), delay)


def expire_overdue(tx: WriteTx, rows: Sequence[Any], delay: RetryDecision) -> int:
    """expire_leases, given the rows OVERDUE read."""
    overdue: dict[int, tuple[Job, str]] = {}
    for row in rows:
        job = decode_job(row)
        if job.id not in overdue or row[-1] == "timeout":  # both: the timeout is what ends it
            overdue[job.id] = (job, row[-1])
    stale = [job for job, why in overdue.values() if why == "lease"]
    late = [job for job, why in overdue.values() if why == "timeout"]
    if stale:
        params = [_end_params(job, tx.now, LEASE_EXPIRED_ERROR, delay) for job in stale]
        if tx.executemany(tx.sql.EXPIRE_RUNNING, params).rowcount != len(stale):  # pragma: no cover
            raise Conflict("leases changed while being expired; nothing was applied")
        for job, values in zip(stale, params, strict=True):
            after = _after_failure(job, values)
            tx.record(_end_kind(after, lease_expired=True), job, after)
    if late:
        params = [_end_params(job, tx.now, TIMED_OUT_ERROR, delay) for job in late]
        if tx.executemany(tx.sql.TIME_OUT_RUNNING, params).rowcount != len(late):  # pragma: no cover
            raise Conflict("timeouts changed while being applied; nothing was applied")
        for job, values in zip(late, params, strict=True):
            after = _after_failure(job, values)
            tx.record(_end_kind(after), job, after)
    return len(stale) + len(late)


def _after_failure(job: Job, values: dict[str, Any]) -> Job:
    """The job as `_failure_params` leave it (what RETURNING would have read back)."""
    return dataclasses.replace(
        job,
        status=STATUS_BY_VALUE[values["status"]],
        retry_count=values["retry_count"],
        worker_id=values["worker_id"],
        lease_expires_at=None,
        run_at=micros_to_datetime(values["run_at"]),
        delayed=values["delayed"],
        timeout_at=None,
        finished_at=micros_to_datetime(values["finished_at"]),
        error=values["error"],
        updated_at=micros_to_datetime(values["now"]),
        revision=job.revision + 1,
    )
