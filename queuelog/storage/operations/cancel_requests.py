"""Cancelling a RUNNING job (API.md section 12): the request, and the end it leads to.

A cancelJob on a RUNNING job stamps `cancel_requested_at` and records CANCEL_REQUESTED: the
job stays RUNNING and held, the answer to its holder's next heartbeat carries the request, and
the event reaches subscribers on every server as any other does. The grace period is the job's
timeout brought forward: `timeout_at` becomes the end of the grace unless the job would time out
sooner, so the timeout sweep that every server runs, and every claim before it claims (OVERDUE,
through ix_jobs_timeout), finds the job when the grace is up, with no walk and no loop of its
own; a server killed after the request leaves nothing undone, since the deadline is in the row.

From the request on, every end of the attempt but a completion (failJob whatever its retry
flags, lease expiry, a timeout, the grace) ends the job CANCELLED with error `cancelled while
running`, its worker kept, never retried (running.py asks `ends_cancelled`). A CANCELLED job's
dependents are cancelled as for any cancelled dependency (settlements.py, through
`tx.record`). retryJob clears the request.
"""

from __future__ import annotations

from collections.abc import Sequence

from queuelog.errors import Conflict
from queuelog.model import EventKind, Job, JobStatus
from queuelog.storage.schema.codec import decode_job
from queuelog.storage.schema.types import ids_json
from queuelog.storage.statements import RUNNING
from queuelog.storage.transaction import WriteTx


def ends_cancelled(job: Job) -> bool:
    """Whether the end of this RUNNING job's attempt, other than a completion, cancels it."""
    return job.cancel_requested_at is not None


def request(tx: WriteTx, job: Job, grace_seconds: int) -> Job:
    """Request the cancellation of `job`, RUNNING as read under its row's lock; a job whose
    cancellation was requested already is answered as it is."""
    if job.status is not JobStatus.RUNNING:  # pragma: no cover - the caller checked
        raise Conflict(f"job {job.id} is {job.status.name}, not RUNNING")
    if ends_cancelled(job):
        return job
    params = {"id": job.id, "now": tx.now_us, "deadline": _deadline(tx, grace_seconds)}
    row = tx.execute(tx.sql.REQUEST_CANCEL, params).fetchone()
    if row is None:  # pragma: no cover - the row's lock keeps it as read
        raise Conflict(f"job {job.id} changed while its cancellation was requested")
    requested = decode_job(row)
    tx.record(EventKind.CANCEL_REQUESTED, job, requested)
    return requested


def request_many(tx: WriteTx, ids: Sequence[int], grace_seconds: int) -> list[Job]:
    """A bulk chunk's RUNNING jobs `ids` (locked): those with no request yet are requested,
    and answered in id order."""
    if not ids:
        return []
    params = {"ids": ids_json(ids), "now": tx.now_us, "deadline": _deadline(tx, grace_seconds)}
    rows = tx.execute(tx.sql.REQUEST_CANCEL_IDS, params).fetchall()
    requested = sorted((decode_job(row) for row in rows), key=lambda job: job.id)
    for job in requested:
        tx.record_from(EventKind.CANCEL_REQUESTED, RUNNING, job.worker_id, job)
    return requested


def _deadline(tx: WriteTx, grace_seconds: int) -> int:
    """The end of the grace, in microseconds."""
    return tx.now_us + grace_seconds * 1_000_000
