"""Each claim of a job and how it ended (`Job.attempts`), read from the events already written.

No write of its own: a claim's CLAIMED event carries its attempt and worker, and the event
that ends the attempt carries the attempt and, for a failure, its sanitised error
(`event_columns`, applied where every transaction writes its events: batch.py). A job's
attempts are its events that carry an attempt, paired by it; they go with the job's events,
pruned with the job.

The outcome is the ending event's kind. A timeout records RETRYING or FAILED, as a failJob
does, with the error `timed out` (API.md section 9): that error is what makes the attempt
TIMED_OUT, so a failJob whose own error is exactly `timed out` reads as one too. A
CANCELLED event ends an attempt only when the job still names its worker: a job cancelled
while RUNNING keeps it (API.md section 12), a PENDING one never has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from queuelog.model import AttemptOutcome, EventKind, Job, JobAttempt, JobStatus
from queuelog.storage.schema.codec import micros_to_datetime
from queuelog.storage.schema.types import ids_json
from queuelog.storage.statements import TIMED_OUT_ERROR
from queuelog.storage.transaction import Connection

OUTCOME_OF_END = {
    EventKind.COMPLETED: AttemptOutcome.COMPLETED,
    EventKind.RETRYING: AttemptOutcome.RETRIED,
    EventKind.FAILED: AttemptOutcome.FAILED,
    EventKind.SNOOZED: AttemptOutcome.SNOOZED,
    EventKind.LEASE_EXPIRED: AttemptOutcome.LEASE_EXPIRED,
    EventKind.CANCELLED: AttemptOutcome.CANCELLED,
}
ENDS_WITH_ERROR = frozenset(
    {EventKind.RETRYING, EventKind.FAILED, EventKind.LEASE_EXPIRED, EventKind.CANCELLED}
)
# A terminal job whose ending event carries no attempt (written by a queuelog before 0015).
OUTCOME_OF_STATUS = {
    JobStatus.COMPLETED: AttemptOutcome.COMPLETED,
    JobStatus.FAILED: AttemptOutcome.FAILED,
    JobStatus.CANCELLED: AttemptOutcome.CANCELLED,
}
NO_ATTEMPT: tuple[None, None, None] = (None, None, None)
KINDS = {kind.value: kind for kind in EventKind}


def event_columns(kind: EventKind, job: Job) -> tuple[int | None, str | None, str | None]:
    """(attempt, worker_id, error) of the event row of `kind` that left the job as `job`."""
    if kind is EventKind.CLAIMED:
        return job.attempt, job.worker_id, None
    if kind not in OUTCOME_OF_END or (kind is EventKind.CANCELLED and job.worker_id is None):
        return NO_ATTEMPT
    return job.attempt, None, job.error if kind in ENDS_WITH_ERROR else None


@dataclass(frozen=True, slots=True)
class AttemptEvent:
    """An event row that carries an attempt."""

    kind: EventKind
    at: datetime
    attempt: int
    worker_id: str | None
    error: str | None


def attempt_events_of_jobs(
    conn: Connection, job_ids: Sequence[int], last: int
) -> dict[int, list[AttemptEvent]]:
    """Each job's events that carry an attempt, enough for its newest `last` attempts (two
    each at most), oldest first, in one read."""
    params = {"ids": ids_json(job_ids), "limit": 2 * last}
    found: dict[int, list[AttemptEvent]] = {}
    rows = conn.execute(conn.sql.ATTEMPT_EVENTS_OF_JOBS, params).fetchall()
    for job_id, kind, at, attempt, worker_id, error in rows:
        if kind not in KINDS:
            continue  # a kind this version does not know (a newer server's)
        event = AttemptEvent(KINDS[kind], micros_to_datetime(at), attempt, worker_id, error)
        found.setdefault(job_id, []).append(event)
    return found


def attempts_of(job: Job, events: Sequence[AttemptEvent], last: int) -> list[JobAttempt]:
    """The job's newest `last` attempts, oldest first, from its events that carry one."""
    claims: dict[int, AttemptEvent] = {}
    ends: dict[int, AttemptEvent] = {}
    for event in events:
        (claims if event.kind is EventKind.CLAIMED else ends)[event.attempt] = event
    attempts = [_attempt(job, claim, ends.get(number)) for number, claim in sorted(claims.items())]
    return attempts[-last:]


def _attempt(job: Job, claim: AttemptEvent, end: AttemptEvent | None) -> JobAttempt:
    worker = claim.worker_id or ""
    if end is not None:
        outcome = OUTCOME_OF_END[end.kind]
        if outcome in (AttemptOutcome.RETRIED, AttemptOutcome.FAILED) and end.error == TIMED_OUT_ERROR:
            outcome = AttemptOutcome.TIMED_OUT
        return JobAttempt(claim.attempt, worker, claim.at, end.at, outcome, end.error)
    current = claim.attempt == job.attempt
    if current and job.status is JobStatus.RUNNING:
        return JobAttempt(claim.attempt, worker, claim.at, None, AttemptOutcome.RUNNING, None)
    # Ended by an event without its attempt: one a queuelog before 0015 wrote (a server not
    # yet upgraded). The job's last attempt ended as the job did; an earlier one, or one
    # after which the job went back to PENDING, ended in a retry as far as can be told.
    if current and job.status in OUTCOME_OF_STATUS:
        error = None if job.status is JobStatus.COMPLETED else job.error
        return JobAttempt(
            claim.attempt, worker, claim.at, job.finished_at, OUTCOME_OF_STATUS[job.status], error
        )
    return JobAttempt(claim.attempt, worker, claim.at, None, AttemptOutcome.RETRIED, None)
