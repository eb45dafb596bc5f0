"""What each write does with the statements of statements.py, and nothing else: enqueue, the
holder's reports (heartbeat, complete, fail, lease and timeout expiry), cancel, retry and
pruning, and what every write batch adds (its events and counters). The claim is in
claims.py, the reads in reads.py; the three share these conventions.

The functions hand the SQL to the driver's connection, asking it for each statement by
name (`tx.sql.INSERT_JOB_ONCE`): the connection carries its database's text (statements.py).
Writes take a `WriteTx` (a group-commit transaction: see transaction.py) and report each
transition through `tx.record`; reads take a plain connection. State guards
(`status = 'running' AND attempt = :attempt`) sit in every UPDATE, so a row that changed
since it was read is left alone. The rules (limits, sanitising, retry policy) are the
queue's; they arrive here as values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from queuelog import jsonutil
from queuelog.enqueue_request import REPLAY_MAY_CHANGE, REQUEST_FIELDS
from queuelog.errors import Conflict, NotFound, job_not_found
from queuelog.model import (
    ALL_JOBS,
    Completion,
    CompletionOutcome,
    EnqueueOutcome,
    EventKind,
    Job,
    JobScope,
    JobStatus,
    NewJob,
)
from queuelog.storage import counters, dependencies, settlements
from queuelog.storage.codec import STATUS_BY_VALUE, decode_job, micros_to_datetime
from queuelog.storage.new_job import new_job, row_values
from queuelog.storage.reads import fetch_job
from queuelog.storage.statements import (
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
    KIND_TEXT,
    LEASE_EXPIRED_ERROR,
    PENDING,
    RUNNING,
    STATUS_TEXT,
    TIMED_OUT_ERROR,
    RetryDecision,
)
from queuelog.storage.transaction import Cursor, WriteTx
from queuelog.storage.types import compact_json, ids_json, to_micros

MICROS_PER_MINUTE = 60_000_000
T = TypeVar("T")


# --- enqueue -------------------------------------------------------------------------------


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: object key order does not matter; 1, true and "1" all differ."""
    return jsonutil.canonical(a) == jsonutil.canonical(b)


# What a replay of an idempotency key must repeat, field by field (enqueue_request.py); the
# payload compares as JSON and the dependencies as sets, below.
_SAME_FIELDS = tuple(
    name
    for name in REQUEST_FIELDS
    if name not in REPLAY_MAY_CHANGE and name not in ("payload", "depends_on", "depends_on_items")
)


def _same_request(job: Job | NewJob, item: NewJob) -> bool:
    return (
        all(getattr(job, name) == getattr(item, name) for name in _SAME_FIELDS)
        and same_json(job.payload, item.payload)
        and (
            set(job.depends_on) == set(item.depends_on)
            and set(job.depends_on_items) == set(item.depends_on_items)
            if isinstance(job, NewJob)
            else job.dependency_count == 0 or bool(item.depends_on or item.depends_on_items)
        )
    )


def _enqueue_once(tx: WriteTx, item: NewJob, created_by: str) -> EnqueueOutcome:
    # ON CONFLICT DO NOTHING lets the unique constraint settle races between processes.
    cursor = tx.execute(tx.sql.INSERT_JOB_ONCE, row_values(item, created_by, tx.now_us))
    if cursor.rowcount == 1:
        job = new_job(_inserted_id(cursor), item, created_by, tx.now)
        tx.record(EventKind.ENQUEUED, None, job)
        return EnqueueOutcome(job=job, created=True)
    key = {"created_by": created_by, "key": item.idempotency_key}
    row = tx.execute(tx.sql.JOB_BY_IDEMPOTENCY_KEY, key).fetchone()
    if row is None:  # pruned between the two statements: try again
        return _enqueue_once(tx, item, created_by)
    existing = decode_job(row)
    if not _same_request(existing, item):
        raise Conflict("idempotency key already used for a different job")
    return EnqueueOutcome(job=existing, created=False)


def enqueue(
    tx: WriteTx, items: Sequence[NewJob], created_by: str, scope: JobScope = ALL_JOBS
) -> list[EnqueueOutcome]:
    """Insert the jobs (all or nothing), in a fixed number of statements.

    Items whose idempotency key this producer already used get that job back (or CONFLICT
    when their input differs); a key repeated within the call is created once, the same
    way. Everything new goes in one executemany. Dependencies (`depends_on`: jobs `scope`
    may see; `depends_on_items`: earlier items) are read and locked first (dependencies.py).
    """
    with_dependencies = any(item.depends_on or item.depends_on_items for item in items)
    if len(items) == 1 and items[0].idempotency_key is not None and not with_dependencies:
        return [_enqueue_once(tx, items[0], created_by)]
    existing: dict[str | None, Job] = {}
    keys = [item.idempotency_key for item in items if item.idempotency_key is not None]
    if keys:
        params = {"created_by": created_by, "keys": jsonutil.dumps(keys).decode()}
        rows = tx.execute(tx.sql.JOBS_BY_IDEMPOTENCY_KEYS, params).fetchall()
        existing = {job.idempotency_key: job for job in map(decode_job, rows)}
    outcomes: list[EnqueueOutcome | None] = [None] * len(items)
    new: list[int] = []
    first_with_key: dict[str, int] = {}
    repeats: list[tuple[int, int]] = []
    same_as: dict[int, int] = {}  # an item repeating an earlier key -> that earlier item
    for i, item in enumerate(items):
        key = item.idempotency_key
        if key is None:
            new.append(i)
        elif key in existing:
            if not _same_request(existing[key], item):
                raise Conflict("idempotency key already used for a different job")
            outcomes[i] = EnqueueOutcome(job=existing[key], created=False)
        elif key in first_with_key:
            if not _same_request(items[first_with_key[key]], item):
                raise Conflict("idempotency key already used for a different job")
            repeats.append((i, first_with_key[key]))
            same_as[i] = first_with_key[key]
        else:
            first_with_key[key] = i
            new.append(i)
    fresh = [items[i] for i in new]
    if with_dependencies:
        fresh = _with_dependencies(tx, items, outcomes, new, same_as, scope)
    if new:
        ids = _insert_new(tx, [row_values(item, created_by, tx.now_us) for item in fresh])
        if with_dependencies:
            dependencies.write_edges(tx, fresh, ids)
        for job_id, i, item in zip(ids, new, fresh, strict=True):
            job = new_job(job_id, item, created_by, tx.now)
            tx.record(EventKind.ENQUEUED, None, job)
            outcomes[i] = EnqueueOutcome(job=job, created=True)
    for i, first in repeats:
        earlier = outcomes[first]
        assert earlier is not None  # `first` is one of `new`, all set above
        outcomes[i] = EnqueueOutcome(job=earlier.job, created=False)
    return [o for o in outcomes if o is not None]


def _with_dependencies(
    tx: WriteTx,
    items: Sequence[NewJob],
    outcomes: list[EnqueueOutcome | None],
    new: list[int],
    same_as: dict[int, int],
    scope: JobScope,
) -> list[NewJob]:
    """The new items ready to insert: each earlier item they wait for named by its id when it
    exists already (a replayed key), else by its place among the new items; every job waited
    for locked and checked. A replayed item must wait for the same jobs as the one it found."""

    def target(j: int) -> int:
        return same_as.get(j, j)

    for i, item in enumerate(items):
        outcome = outcomes[i]
        if outcome is None or not (item.depends_on or item.depends_on_items or outcome.job.dependency_count):
            continue
        wanted = set(item.depends_on)
        for j in item.depends_on_items:
            earlier = outcomes[target(j)]
            if earlier is None:  # waits for a job this call creates: not the one it found
                raise Conflict("idempotency key already used for a different job")
            wanted.add(earlier.job.id)
        if set(dependencies.dependency_ids(tx, [outcome.job.id]).get(outcome.job.id, [])) != wanted:
            raise Conflict("idempotency key already used for a different job")
    position = {i: n for n, i in enumerate(new)}
    fresh = []
    for i in new:
        item = items[i]
        ids = set(item.depends_on)
        places = set()
        for j in item.depends_on_items:
            earlier = outcomes[target(j)]
            if earlier is not None:
                ids.add(earlier.job.id)
            else:
                places.add(position[target(j)])
        fresh.append(
            dataclasses.replace(item, depends_on=tuple(sorted(ids)), depends_on_items=tuple(sorted(places)))
        )
    statuses = dependencies.lock_existing(tx, {job_id for item in fresh for job_id in item.depends_on}, scope)
    return dependencies.prepare(fresh, statuses)


def _insert_new(tx: WriteTx, rows: list[dict[str, Any]]) -> Sequence[int]:
    """Insert rows known to be new; returns their ids, in order."""
    if len(rows) == 1:
        return [_inserted_id(tx.execute(tx.sql.INSERT_JOB, rows[0]))]
    return tx.connection.insert_ids(tx.sql.INSERT_JOB, rows)


def _inserted_id(cursor: Cursor) -> int:
    """The id of the one row the INSERT just run wrote (a cursor has none before that)."""
    job_id = cursor.lastrowid
    assert job_id is not None
    return job_id


# --- the holder's reports -----------------------------------------------------------------


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
    if tx.sql.COMPLETE_MANY is not None:
        return _complete_many_at_once(tx, tx.sql.COMPLETE_MANY, worker, items)
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


def _complete_many_at_once(
    tx: WriteTx, sql: str, worker: str, items: Sequence[Completion]
) -> CompletionOutcome:
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
    done = {row[COL_ID]: row for row in tx.execute(sql, params).fetchall()}
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


def _failure_params(job: Job, now: datetime, error: str, delay: float | None) -> dict[str, Any]:
    """The failure's values for a job read under its row's lock: stamped at `now`, or at the
    job's own last stamp when that is later (as the statements do)."""
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
        "status": JobStatus.FAILED.value,
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
    params = _failure_params(held, tx.now, error, delay(held, retryable, retry_in))
    row = tx.execute(tx.sql.FAIL_RUNNING, params).fetchone()
    if row is None:  # pragma: no cover - the write lock keeps the row as read
        raise Conflict(f"job {job_id} changed while being updated")
    job = decode_job(row)
    tx.record(EventKind.RETRYING if job.status is JobStatus.PENDING else EventKind.FAILED, held, job)
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
        params = [_failure_params(job, tx.now, LEASE_EXPIRED_ERROR, delay(job, True, None)) for job in stale]
        if tx.executemany(tx.sql.EXPIRE_RUNNING, params).rowcount != len(stale):  # pragma: no cover
            raise Conflict("leases changed while being expired; nothing was applied")
        for job, values in zip(stale, params, strict=True):
            tx.record(EventKind.LEASE_EXPIRED, job, _after_failure(job, values))
    if late:
        params = [_failure_params(job, tx.now, TIMED_OUT_ERROR, delay(job, True, None)) for job in late]
        if tx.executemany(tx.sql.TIME_OUT_RUNNING, params).rowcount != len(late):  # pragma: no cover
            raise Conflict("timeouts changed while being applied; nothing was applied")
        for job, values in zip(late, params, strict=True):
            after = _after_failure(job, values)
            kind = EventKind.RETRYING if after.status is JobStatus.PENDING else EventKind.FAILED
            tx.record(kind, job, after)
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


# --- producer and admin actions ------------------------------------------------------------


def cancel(tx: WriteTx, job_id: int, scope: JobScope) -> Job:
    job = fetch_job(tx, job_id)
    if job is None or not scope.allows(job):
        raise job_not_found(job_id)
    if job.status is not JobStatus.PENDING:
        raise Conflict(f"job {job_id} is {job.status.name}; only PENDING jobs can be cancelled")
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


def prune(tx: WriteTx, finished_before: datetime) -> int:
    """Delete up to PRUNE_BATCH terminal jobs finished before the cutoff, with their events,
    but none that a PENDING job waits for (a retried dependent may wait for a FAILED job)."""
    found = tx.execute(tx.sql.PRUNABLE, {"cutoff": to_micros(finished_before)}).fetchall()
    if not found:
        return 0
    rows = tx.execute(tx.sql.PRUNE, {"ids": ids_json([r[0] for r in found])}).fetchall()
    if rows:
        tx.execute(tx.sql.DELETE_EVENTS_OF, {"ids": ids_json([r[0] for r in rows])})
        tx.execute(tx.sql.DELETE_DEPENDENCIES_OF, {"ids": ids_json([r[0] for r in rows])})
        for _, job_type, status, created_by, worker_id in rows:
            tx.forget(job_type, status, created_by, worker_id)
    return len(rows)


def run(operation: Callable[[WriteTx], T], tx: WriteTx) -> T:
    """One operation of a write batch, then what its finished jobs' dependents need: both in
    the operation's savepoint."""
    value = operation(tx)
    if tx.parents:
        settlements.settle(tx)
    return value


def write_side_effects(tx: WriteTx) -> None:
    """The events and counter changes of a group commit's successful operations."""
    now = tx.now_us
    if tx.events:
        # Each event is stamped as its job was (never before the job's previous stamp).
        rows = [
            {
                "job_id": e.job.id,
                "kind": KIND_TEXT[e.kind],
                "status": STATUS_TEXT[e.job.status],
                "at": to_micros(e.at),
            }
            for e in tx.events
        ]
        if tx.event_ids is None:
            tx.executemany(tx.sql.INSERT_EVENT, rows)
        else:  # an event tail runs: it must know this process's events from the others'
            tx.event_ids.extend(tx.connection.insert_ids(tx.sql.INSERT_EVENT, rows))
    if tx.rate_claims:
        tx.executemany(tx.sql.INSERT_RATE_CLAIM, tx.rate_claims)
    # In key order: concurrent transactions (PostgreSQL servers) then lock the shared counter
    # rows in the same order and queue behind each other instead of deadlocking.
    changes = sorted(counters.net(tx.moves))
    if changes:
        tx.executemany(
            tx.sql.ADD_TO_COUNT,
            [
                {"scope": k[0], "name": k[1], "type": k[2], "status": k[3], "shard": tx.counter_shard, "n": n}
                for k, n in changes
            ],
        )
    finished = counters.finished(tx.moves, now // MICROS_PER_MINUTE)
    if finished:
        tx.executemany(
            tx.sql.ADD_TO_MINUTE,
            [
                {
                    "scope": k[0],
                    "name": k[1],
                    "minute": k[2],
                    "status": k[3],
                    "shard": tx.counter_shard,
                    "n": n,
                }
                for k, n in finished
            ],
        )


def prune_minutes(tx: WriteTx) -> int:
    """Drop job_minutes rows older than counters.MINUTES_KEPT."""
    before = tx.now_us // MICROS_PER_MINUTE - counters.MINUTES_KEPT
    return tx.execute(tx.sql.PRUNE_MINUTES, {"before": before}).rowcount
