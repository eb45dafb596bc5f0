"""A holder's progress report (API.md section 12): one UPDATE of its job, as a heartbeat is.

Its PROGRESS event goes to this server's jobUpdated subscribers, and nowhere else: no
job_events row, no notification. A row would cost every report an INSERT beside the
heartbeat's UPDATE (and, to keep a job reporting for hours from filling job_events, a DELETE
too), and on PostgreSQL a NOTIFY; a report must cost no more than a heartbeat. Other
servers' subscribers read the jobs they follow instead (feeds/progress_watch.py): a cost
that grows with the jobs followed, not with the reports.
"""

from __future__ import annotations

from collections.abc import Sequence

from queuelog.errors import Conflict, NotFound
from queuelog.model import Job, ProgressReport
from queuelog.storage.operations.reads import fetch_job
from queuelog.storage.operations.running import check_holder
from queuelog.storage.schema.codec import decode_job
from queuelog.storage.schema.types import to_micros
from queuelog.storage.transaction import WriteTx


def report(tx: WriteTx, held: ProgressReport, lease_seconds: int) -> Job:
    """Store `held` on the job its holder holds at that attempt (else NOT_FOUND or CONFLICT,
    as a heartbeat), its lease extended to at least `lease_seconds` from now."""
    job = _store(tx, held, lease_seconds, late=False)
    if job is None:
        raise _refusal(tx, held)
    return job


def report_late(tx: WriteTx, reports: Sequence[ProgressReport], lease_seconds: int) -> list[Job]:
    """Store reports the server held back, whose attempts may have ended since: on whatever
    each job is while that attempt is its last claim (a RUNNING one's lease extended as by
    `report`); the jobs they applied to (none for a job claimed again since, or gone, or one
    that another server stored a later report on meanwhile: each server holds reports in its
    own window, so a holder whose reports reach two servers would otherwise see a held, older
    one overwrite the newer)."""
    stored = [_store(tx, held, lease_seconds, late=True) for held in reports]
    return [job for job in stored if job is not None]


def _store(tx: WriteTx, held: ProgressReport, lease_seconds: int, late: bool) -> Job | None:
    params = {
        "id": held.job_id,
        "worker": held.worker,
        "attempt": held.attempt,
        "progress": held.progress,
        "message": held.message,
        "at": tx.now_us if held.at is None else to_micros(held.at),
        "lease": tx.now_us + lease_seconds * 1_000_000,
        "now": tx.now_us,
        "late": late,
    }
    row = tx.execute(tx.sql.REPORT_PROGRESS, params).fetchone()
    if row is None:
        return None
    job = decode_job(row)
    tx.record_progress(job)
    return job


def _refusal(tx: WriteTx, report: ProgressReport) -> Exception:
    """Why a report matched no row, as a heartbeat's refusal says it."""
    try:
        check_holder(fetch_job(tx, report.job_id), report.job_id, report.worker, report.attempt)
    except (NotFound, Conflict) as why:
        return why
    return Conflict(f"job {report.job_id} changed while being updated")  # pragma: no cover
