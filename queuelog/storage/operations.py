"""Every statement on `jobs` and `job_events`, as functions of an open connection in a transaction.

They are synchronous on purpose: SQLite runs them on its writer/reader threads, and an
async PostgreSQL connection runs the same functions through `run_sync`. Each write
returns the events it recorded so the caller can publish them once the transaction has
committed. State guards (`status = 'running' AND attempt = :seen`) sit in every UPDATE, so
a row that changed since it was read is left alone on every database.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Row,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import ColumnElement

from queuelog.errors import Conflict, NotFound
from queuelog.model import (
    Completion,
    CompletionOutcome,
    EnqueueOutcome,
    EventKind,
    Job,
    JobEvent,
    JobScope,
    JobStatus,
    NewJob,
    Priority,
    QueueStats,
    StatusCounts,
)
from queuelog.storage.tables import job_events, jobs
from queuelog.storage.types import JsonDocument, UtcTimestamp

PENDING = JobStatus.PENDING.value
RUNNING = JobStatus.RUNNING.value
TERMINAL = [s.value for s in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)]
LEASE_EXPIRED_ERROR = "lease expired"
EXPIRE_BATCH = 500
PRUNE_BATCH = 2000

# Status written as a literal, not a bound parameter: SQLite only uses a partial index
# (`WHERE status = 'pending'`) when it can see the value while planning.
IS_PENDING = jobs.c.status == literal_column(f"'{PENDING}'")
IS_RUNNING = jobs.c.status == literal_column(f"'{RUNNING}'")


class ClaimAbandoned(Exception):
    """Raised inside a claim's transaction to roll it back: nobody will receive the jobs."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with jitter: d = min(max, base * 2^retry_count), delay in [0.75d, d]."""

    base_seconds: float
    max_seconds: float

    def delay(self, retry_count: int, rng: random.Random = random._inst) -> float:  # type: ignore[attr-defined]
        exponent = min(retry_count, 62)
        cap = min(self.max_seconds, self.base_seconds * (2**exponent))
        return cap * rng.uniform(0.75, 1.0)


def row_to_job(row: Row[Any]) -> Job:
    m = row._mapping
    return Job(
        id=m["id"],
        type=m["type"],
        payload=m["payload"],
        priority=Priority(m["priority"]),
        status=JobStatus(m["status"]),
        retry_count=m["retry_count"],
        max_retries=m["max_retries"],
        attempt=m["attempt"],
        idempotency_key=m["idempotency_key"],
        worker_id=m["worker_id"],
        claimed_at=m["claimed_at"],
        lease_expires_at=m["lease_expires_at"],
        run_at=m["run_at"],
        finished_at=m["finished_at"],
        result=m["result"],
        error=m["error"],
        created_by=m["created_by"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


def record_events(conn: Connection, events: Sequence[JobEvent]) -> None:
    if events:
        conn.execute(
            insert(job_events),
            [
                {"job_id": e.job.id, "kind": e.kind.value, "status": e.job.status.value, "at": e.at}
                for e in events
            ],
        )


def _scope_filter(scope: JobScope) -> ColumnElement[bool] | None:
    if scope.everything:
        return None
    clauses = []
    if scope.created_by is not None:
        clauses.append(jobs.c.created_by == scope.created_by)
    if scope.worker_id is not None:
        clauses.append(jobs.c.worker_id == scope.worker_id)
    if not clauses:
        return jobs.c.id.is_(None)  # sees nothing
    return or_(*clauses)


def _fetch_job(conn: Connection, job_id: int) -> Job | None:
    row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
    return row_to_job(row) if row is not None else None


def _insert_stmt(conn: Connection) -> Any:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(jobs)


# --- enqueue -------------------------------------------------------------------------------


def _new_row(item: NewJob, created_by: str, now: datetime) -> dict[str, Any]:
    return {
        "type": item.type,
        "payload": item.payload,
        "priority": item.priority.value,
        "status": PENDING,
        "retry_count": 0,
        "max_retries": item.max_retries,
        "attempt": 0,
        "idempotency_key": item.idempotency_key,
        "run_at": item.run_at if item.run_at is not None else now,
        "created_by": created_by,
        "created_at": now,
        "updated_at": now,
    }


def _same_request(job: Job, item: NewJob) -> bool:
    return (
        job.type == item.type
        and job.payload == item.payload
        and job.priority == item.priority
        and job.max_retries == item.max_retries
    )


def _enqueue_with_key(conn: Connection, item: NewJob, created_by: str, now: datetime) -> EnqueueOutcome:
    # ON CONFLICT DO NOTHING lets the unique constraint settle races between processes.
    stmt = (
        _insert_stmt(conn)
        .values(_new_row(item, created_by, now))
        .on_conflict_do_nothing(index_elements=["created_by", "idempotency_key"])
        .returning(*jobs.c)
    )
    row = conn.execute(stmt).first()
    if row is not None:
        return EnqueueOutcome(job=row_to_job(row), created=True)
    existing = conn.execute(
        select(jobs).where(jobs.c.created_by == created_by, jobs.c.idempotency_key == item.idempotency_key)
    ).first()
    if existing is None:  # deleted between the two statements (pruned): try again once
        return _enqueue_with_key(conn, item, created_by, now)
    job = row_to_job(existing)
    if not _same_request(job, item):
        raise Conflict("idempotency key already used for a different job")
    return EnqueueOutcome(job=job, created=False)


def enqueue(
    conn: Connection, now: datetime, items: Sequence[NewJob], created_by: str
) -> tuple[list[EnqueueOutcome], list[JobEvent]]:
    outcomes: list[EnqueueOutcome | None] = [None] * len(items)
    plain = [i for i, item in enumerate(items) if item.idempotency_key is None]
    if plain:
        # One multi-row INSERT ... RETURNING. Ids follow the VALUES order, so sorting by id
        # maps rows back to inputs (sort_by_parameter_order would send one INSERT per row).
        rows = conn.execute(
            insert(jobs).returning(*jobs.c),
            [_new_row(items[i], created_by, now) for i in plain],
        ).all()
        rows.sort(key=lambda r: r.id)
        for i, row in zip(plain, rows, strict=True):
            outcomes[i] = EnqueueOutcome(job=row_to_job(row), created=True)
    for i, item in enumerate(items):
        if item.idempotency_key is not None:
            outcomes[i] = _enqueue_with_key(conn, item, created_by, now)
    done = [o for o in outcomes if o is not None]
    events = [JobEvent(EventKind.ENQUEUED, o.job, now) for o in done if o.created]
    record_events(conn, events)
    return done, events


# --- reads ---------------------------------------------------------------------------------


def get_job(conn: Connection, job_id: int, scope: JobScope) -> Job | None:
    job = _fetch_job(conn, job_id)
    return job if job is not None and scope.allows(job) else None


def list_jobs(
    conn: Connection,
    scope: JobScope,
    status: JobStatus | None,
    job_type: str | None,
    first: int,
    after_id: int | None,
) -> tuple[list[Job], bool, int]:
    """Newest first (id DESC). Returns the page, whether more follow, and the total count."""
    filters: list[ColumnElement[bool]] = []
    scope_clause = _scope_filter(scope)
    if scope_clause is not None:
        filters.append(scope_clause)
    if status is not None:
        filters.append(jobs.c.status == status.value)
    if job_type is not None:
        filters.append(jobs.c.type == job_type)
    total = conn.execute(select(func.count()).select_from(jobs).where(*filters)).scalar_one()
    page_filters = [*filters, jobs.c.id < after_id] if after_id is not None else filters
    rows = conn.execute(select(jobs).where(*page_filters).order_by(jobs.c.id.desc()).limit(first + 1)).all()
    page = [row_to_job(r) for r in rows[:first]]
    return page, len(rows) > first, total


def queue_stats(conn: Connection, now: datetime, scope: JobScope) -> QueueStats:
    scope_clause = _scope_filter(scope)
    filters = [scope_clause] if scope_clause is not None else []
    rows = conn.execute(
        select(jobs.c.type, jobs.c.status, func.count()).where(*filters).group_by(jobs.c.type, jobs.c.status)
    ).all()
    totals: dict[str, int] = {}
    per_type: dict[str, dict[str, int]] = {}
    for job_type, status, count in rows:
        totals[status] = totals.get(status, 0) + count
        per_type.setdefault(job_type, {})[status] = count
    oldest = conn.execute(
        select(func.min(jobs.c.created_at)).where(*filters, jobs.c.status == PENDING, jobs.c.run_at <= now)
    ).scalar_one()
    oldest_seconds = None
    if oldest is not None:
        oldest_seconds = max(0.0, (now - oldest).total_seconds())
    return QueueStats(
        counts=StatusCounts(**totals),
        by_type={t: StatusCounts(**c) for t, c in sorted(per_type.items())},
        oldest_pending_seconds=oldest_seconds,
    )


def next_due_at(conn: Connection, types: Sequence[str] | None) -> datetime | None:
    """When the earliest PENDING job (of these types) becomes due; may be in the past."""
    filters = [IS_PENDING]
    if types is not None:
        filters.append(jobs.c.type.in_(list(types)))
    return conn.execute(select(func.min(jobs.c.run_at)).where(*filters)).scalar_one()


# --- claim and the holder's reports --------------------------------------------------------


def claim(
    conn: Connection,
    now: datetime,
    worker: str,
    types: Sequence[str] | None,
    limit: int,
    lease_seconds: int,
    policy: RetryPolicy,
    wanted: Callable[[], bool] | None = None,
) -> tuple[list[Job], list[JobEvent]]:
    """Claim up to `limit` due jobs. If `wanted()` turns false before commit (the waiting
    client went away), raise ClaimAbandoned so the transaction rolls back."""
    events = expire_leases(conn, now, policy)
    rows = conn.execute(
        update(jobs)
        .where(jobs.c.id.in_(_claim_candidates(conn, now, types, limit)), IS_PENDING)
        .values(
            status=RUNNING,
            worker_id=worker,
            claimed_at=now,
            attempt=jobs.c.attempt + 1,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            updated_at=now,
        )
        .returning(*jobs.c)
    ).all()
    claimed = sorted((row_to_job(r) for r in rows), key=lambda j: (-j.priority.value, j.created_at, j.id))
    if claimed and wanted is not None and not wanted():
        raise ClaimAbandoned()
    claim_events = [JobEvent(EventKind.CLAIMED, j, now) for j in claimed]
    record_events(conn, claim_events)
    return claimed, events + claim_events


_SQLITE_CLAIM = """
    SELECT id FROM jobs INDEXED BY ix_jobs_claim
    WHERE status = 'pending' AND run_at <= :now {type_filter}
    ORDER BY priority DESC, created_at, id
    LIMIT :limit
"""


def _claim_candidates(conn: Connection, now: datetime, types: Sequence[str] | None, limit: int) -> Any:
    """The ids to claim: the first due rows in claim order, read from ix_jobs_claim.

    SQLite gets the index by name (its planner, lacking statistics, may otherwise sort
    every pending row); the write lock of BEGIN IMMEDIATE makes the claim atomic there.
    PostgreSQL locks the rows it picks and skips rows other claims hold.
    """
    if conn.dialect.name == "sqlite":
        params = [bindparam("now", now, type_=UtcTimestamp()), bindparam("limit", limit)]
        type_filter = ""
        if types is not None:
            type_filter = "AND type IN :types"
            params.append(bindparam("types", list(types), expanding=True))
        sql = _SQLITE_CLAIM.format(type_filter=type_filter)
        return text(sql).bindparams(*params).columns(id=Integer)
    due = [IS_PENDING, jobs.c.run_at <= now]
    if types is not None:
        due.append(jobs.c.type.in_(list(types)))
    return (
        select(jobs.c.id)
        .where(*due)
        .order_by(jobs.c.priority.desc(), jobs.c.created_at, jobs.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def _held_job(conn: Connection, job_id: int, worker: str, attempt: int | None) -> Job:
    job = _fetch_job(conn, job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    _check_holder(job, worker, attempt)
    return job


def _check_holder(job: Job, worker: str, attempt: int | None) -> None:
    if job.status is not JobStatus.RUNNING:
        raise Conflict(f"job {job.id} is {job.status.name}, not RUNNING")
    if job.worker_id != worker:
        raise Conflict(f"job {job.id} is not held by this worker")
    if attempt is not None and attempt != job.attempt:
        raise Conflict(f"job {job.id} is at attempt {job.attempt}, not {attempt}")


def _guarded_update(conn: Connection, job: Job, values: dict[str, Any]) -> Job:
    """UPDATE the row only if it is still RUNNING at the attempt we read."""
    row = conn.execute(
        update(jobs)
        .where(jobs.c.id == job.id, jobs.c.status == RUNNING, jobs.c.attempt == job.attempt)
        .values(**values)
        .returning(*jobs.c)
    ).first()
    if row is None:
        raise Conflict(f"job {job.id} changed while being updated")
    return row_to_job(row)


def heartbeat(
    conn: Connection, now: datetime, worker: str, job_id: int, attempt: int | None, lease_seconds: int
) -> Job:
    job = _held_job(conn, job_id, worker, attempt)
    return _guarded_update(
        conn, job, {"lease_expires_at": now + timedelta(seconds=lease_seconds), "updated_at": now}
    )


_COMPLETE_ONE = (
    update(jobs)
    .where(jobs.c.id == bindparam("b_id"), IS_RUNNING, jobs.c.attempt == bindparam("b_attempt"))
    .values(
        status=JobStatus.COMPLETED.value,
        result=bindparam("b_result", type_=JsonDocument()),
        finished_at=bindparam("b_now", type_=UtcTimestamp()),
        lease_expires_at=None,
        updated_at=bindparam("b_now", type_=UtcTimestamp()),
    )
)


def _apply_completions(
    conn: Connection, now: datetime, accepted: Sequence[tuple[Job, Any]]
) -> tuple[list[Job], list[JobEvent]]:
    """Complete jobs already checked against their holder, in one executemany.

    Each UPDATE still requires the row to be RUNNING at the attempt read, so a row that
    changed anyway turns the whole call into a CONFLICT rather than a partial write.
    """
    if accepted:
        result = conn.execute(
            _COMPLETE_ONE,
            [{"b_id": j.id, "b_attempt": j.attempt, "b_result": r, "b_now": now} for j, r in accepted],
        )
        if result.rowcount != len(accepted):
            raise Conflict("jobs changed while being completed; nothing was applied")
    completed = [
        dataclasses.replace(
            job, status=JobStatus.COMPLETED, result=r, finished_at=now, lease_expires_at=None, updated_at=now
        )
        for job, r in accepted
    ]
    events = [JobEvent(EventKind.COMPLETED, j, now) for j in completed]
    record_events(conn, events)
    return completed, events


def complete(
    conn: Connection, now: datetime, worker: str, job_id: int, result: Any, attempt: int | None
) -> tuple[Job, list[JobEvent]]:
    (job,), events = _apply_completions(conn, now, [(_held_job(conn, job_id, worker, attempt), result)])
    return job, events


def complete_many(
    conn: Connection, now: datetime, worker: str, items: Sequence[Completion]
) -> tuple[CompletionOutcome, list[JobEvent]]:
    """Check every item against the rows as read, then apply the good ones in one executemany.

    The rows are locked as read (FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE already
    holds the write lock), so the checks still hold when the UPDATE runs.
    """
    ids = {item.id for item in items}
    rows = conn.execute(select(jobs).where(jobs.c.id.in_(ids)).with_for_update()).all()
    current = {r.id: row_to_job(r) for r in rows}
    accepted: list[tuple[Job, Any]] = []
    rejected: list[int] = []
    seen: set[int] = set()
    for item in items:
        job = current.get(item.id)
        repeated = item.id in seen
        seen.add(item.id)
        try:
            if repeated or job is None:
                raise Conflict("not applicable")
            _check_holder(job, worker, item.attempt)
        except Conflict:
            rejected.append(item.id)
            continue
        accepted.append((job, item.result))
    completed, events = _apply_completions(conn, now, accepted)
    return CompletionOutcome(completed=completed, rejected=rejected), events


def _failure_values(
    job: Job, now: datetime, error: str, retryable: bool, retry_in: float | None, policy: RetryPolicy
) -> dict[str, Any]:
    if retryable and job.retry_count < job.max_retries:
        delay = retry_in if retry_in is not None else policy.delay(job.retry_count)
        return {
            "status": PENDING,
            "retry_count": job.retry_count + 1,
            "worker_id": None,
            "lease_expires_at": None,
            "run_at": now + timedelta(seconds=delay),
            "error": error,
            "updated_at": now,
        }
    return {
        "status": JobStatus.FAILED.value,
        "lease_expires_at": None,
        "finished_at": now,
        "error": error,
        "updated_at": now,
    }


def fail(
    conn: Connection,
    now: datetime,
    worker: str,
    job_id: int,
    error: str,
    retryable: bool,
    retry_in: float | None,
    attempt: int | None,
    policy: RetryPolicy,
) -> tuple[Job, list[JobEvent]]:
    held = _held_job(conn, job_id, worker, attempt)
    job = _guarded_update(conn, held, _failure_values(held, now, error, retryable, retry_in, policy))
    kind = EventKind.RETRYING if job.status is JobStatus.PENDING else EventKind.FAILED
    events = [JobEvent(kind, job, now)]
    record_events(conn, events)
    return job, events


def expire_leases(conn: Connection, now: datetime, policy: RetryPolicy) -> list[JobEvent]:
    """Treat RUNNING jobs whose lease has passed as failed attempts.

    Each row is updated only if it is still RUNNING at the attempt read here, so a job
    its holder completed (or another server expired) in the meantime is left alone.
    """
    rows = conn.execute(
        select(jobs)
        .where(IS_RUNNING, jobs.c.lease_expires_at < now)
        .order_by(jobs.c.lease_expires_at)
        .limit(EXPIRE_BATCH)
    ).all()
    events: list[JobEvent] = []
    for row in rows:
        stale = row_to_job(row)
        values = _failure_values(stale, now, LEASE_EXPIRED_ERROR, True, None, policy)
        updated = conn.execute(
            update(jobs)
            .where(
                jobs.c.id == stale.id,
                jobs.c.status == RUNNING,
                jobs.c.attempt == stale.attempt,
                jobs.c.lease_expires_at < now,
            )
            .values(**values)
            .returning(*jobs.c)
        ).first()
        if updated is not None:
            events.append(JobEvent(EventKind.LEASE_EXPIRED, row_to_job(updated), now))
    record_events(conn, events)
    return events


# --- producer and admin actions ------------------------------------------------------------


def cancel(conn: Connection, now: datetime, job_id: int, scope: JobScope) -> tuple[Job, list[JobEvent]]:
    job = get_job(conn, job_id, scope)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    if job.status is not JobStatus.PENDING:
        raise Conflict(f"job {job_id} is {job.status.name}; only PENDING jobs can be cancelled")
    row = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status == PENDING)
        .values(status=JobStatus.CANCELLED.value, finished_at=now, updated_at=now)
        .returning(*jobs.c)
    ).first()
    if row is None:
        raise Conflict(f"job {job_id} is no longer PENDING")
    events = [JobEvent(EventKind.CANCELLED, row_to_job(row), now)]
    record_events(conn, events)
    return events[0].job, events


def retry(conn: Connection, now: datetime, job_id: int) -> tuple[Job, list[JobEvent]]:
    job = _fetch_job(conn, job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    retryable = (JobStatus.FAILED.value, JobStatus.CANCELLED.value)
    if job.status.value not in retryable:
        raise Conflict(f"job {job_id} is {job.status.name}; only FAILED or CANCELLED jobs can be retried")
    row = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.status.in_(retryable))
        .values(
            status=PENDING,
            retry_count=0,
            run_at=now,
            worker_id=None,
            lease_expires_at=None,
            finished_at=None,
            updated_at=now,
        )
        .returning(*jobs.c)
    ).first()
    if row is None:
        raise Conflict(f"job {job_id} changed while being retried")
    events = [JobEvent(EventKind.RETRIED, row_to_job(row), now)]
    record_events(conn, events)
    return events[0].job, events


def prune(conn: Connection, finished_before: datetime) -> int:
    """Delete up to PRUNE_BATCH terminal jobs finished before the cutoff, with their events."""
    ids = (
        conn.execute(
            select(jobs.c.id)
            .where(jobs.c.finished_at < finished_before, jobs.c.status.in_(TERMINAL))
            .limit(PRUNE_BATCH)
        )
        .scalars()
        .all()
    )
    if ids:
        conn.execute(delete(job_events).where(job_events.c.job_id.in_(ids)))
        conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
    return len(ids)
