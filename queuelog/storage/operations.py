"""What each storage operation does with the statements of statements.py, and nothing else.

The functions hand the SQL to the driver's connection, asking it for each statement by
name (`tx.sql.CLAIM_ANY`): the connection carries its database's text (statements.py).
Writes take a `WriteTx` (a group-commit transaction: see sqlite.py) and report each
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
from queuelog.errors import Conflict, NotFound
from queuelog.model import (
    ALL_JOBS,
    Completion,
    CompletionOutcome,
    EnqueueOutcome,
    EventKind,
    Job,
    JobScope,
    JobStatus,
    MinuteCount,
    NewJob,
    QueueStats,
    RecordedEvent,
    TypeControl,
)
from queuelog.storage import counters, dependencies, flow
from queuelog.storage.codec import STATUS_BY_VALUE, decode_job, micros_to_datetime
from queuelog.storage.new_job import new_job, row_values
from queuelog.storage.read_plans import OldestPending, Walk, plan_list, plan_oldest_pending
from queuelog.storage.statements import (
    COL_ATTEMPT,
    COL_CREATED,
    COL_FINISHED,
    COL_ID,
    COL_LEASE,
    COL_PRIORITY,
    COL_RESULT,
    COL_STATUS,
    COL_UPDATED,
    COL_WORKER,
    KIND_TEXT,
    LEASE_EXPIRED_ERROR,
    PENDING,
    RUNNING,
    STATUS_TEXT,
    TIMED_OUT_ERROR,
    RetryDecision,
    per_type_params,
)
from queuelog.storage.transaction import Connection, Cursor, WriteTx
from queuelog.storage.types import compact_json, to_micros

MICROS_PER_MINUTE = 60_000_000
T = TypeVar("T")


def _ids_json(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(int(i)) for i in ids) + "]"


# --- enqueue -------------------------------------------------------------------------------


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: object key order does not matter; 1, true and "1" all differ."""
    return jsonutil.canonical(a) == jsonutil.canonical(b)


def _same_request(job: Job | NewJob, item: NewJob) -> bool:
    return (
        job.type == item.type
        and job.priority == item.priority
        and job.max_retries == item.max_retries
        and job.concurrency_key == item.concurrency_key
        and job.timeout_seconds == item.timeout_seconds
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


# --- claim and the holder's reports --------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Claimed:
    jobs: list[Job]
    # Types a control held back in this claim (paused, at a limit, out of rate), and the
    # earliest moment one of them may free by time alone (a pause's end, a rate window).
    held: list[str]
    wake_at: datetime | None
    # The controls the claim went by, when any bound one of its types: a waiting claim
    # claims again when they change (another process's resume or raised limit).
    controls: dict[str, TypeControl] = dataclasses.field(default_factory=dict)


class RunAgain(Exception):
    """Raised inside an operation that must be undone (to its savepoint) and run again: on
    PostgreSQL, a claim that went by controls another server has changed since."""


class ClaimerRevoked(Exception):
    """A claim rolled back because the worker's key has been revoked: it ends, claiming nothing."""


def claim(
    tx: WriteTx,
    worker: str,
    types: Sequence[str] | None,
    limit: int,
    lease_seconds: int,
    delay: RetryDecision,
    check_key: bool = False,
) -> Claimed:
    """Claim up to `limit` ready jobs of these types (None: any type) in claim order, within
    the types' controls (flow.py). Expired leases and timeouts are handled first, and due
    delayed jobs made ready. With `check_key`, a claim by a worker whose key is no longer
    active raises ClaimerRevoked (the check goes with the claim's own statements: no round
    trip of its own, none more under the controlled-claim lock)."""
    key_check = [(tx.sql.KEY_IS_ACTIVE, {"name": worker})] if check_key else []
    if types is None:
        types, controls = expire_read_pending_types_and_promote(tx, delay)
        if not types:
            return Claimed([], [], None)
    elif not types:
        return Claimed([], [], None)
    else:
        controls = expire_and_promote(tx, types, delay)
    if not flow.any_binds(controls, types, tx.now):
        params = _claim_params(tx, worker, lease_seconds, limit)
        params.update(per_type_params(types))
        rows = _claim_uncontrolled(tx, types, (tx.sql.claim_jobs(len(types)), params), key_check)
        return Claimed(_claimed(tx, rows), [], None)
    plan = flow.lock_and_plan(tx, types, limit, controls, also=key_check)
    _check_key(plan.also)

    def claim_planned(sql: str, chosen: dict[str, Any]) -> list[Any]:
        if plan.counted_running:
            # Stamped after every count the plan read: a claim that takes a slot a finish
            # freed is never recorded as starting before that finish.
            tx.read_clock_again()
        statement = (sql, {**_claim_params(tx, worker, lease_seconds, limit), **chosen})
        recheck = _controls_recheck(tx)
        if not plan.unsent and not recheck:
            return tx.execute(*statement).fetchall()
        rows, *answers = tx.execute_together([statement, *plan.unsent, *recheck])
        if recheck:
            _same_controls(tx, controls, flow.read_controls(tx, answers.pop()), types)
        _check_key(answers)
        return rows

    rows = []
    if plan.per_key_types:
        ids = flow.choose(plan, flow.candidates(tx, plan), limit)
        if ids:
            rows = claim_planned(tx.sql.CLAIM_IDS, {"ids": _ids_json(ids)})
    elif plan.types:
        names, quotas = zip(*plan.types, strict=True)
        rows = claim_planned(tx.sql.claim_within_quotas(len(names)), per_type_params(names, quotas))
    claimed = _claimed(tx, rows)
    flow.record_rate_claims(tx, plan, claimed)
    return Claimed(claimed, plan.held, plan.wake_at, controls)


def _claim_uncontrolled(
    tx: WriteTx, types: Sequence[str], claim: tuple[str, Any], key_check: list[tuple[str, Any]]
) -> list[Any]:
    """The claim statement's rows, for types no control binds. Where this claim went by
    controls an earlier claim of the transaction read (PostgreSQL, promotion skipped), they
    are read again beside the statement; should one now bind a type, the claim runs again
    from its savepoint (RunAgain), promotion and fresh controls first."""
    recheck = _controls_recheck(tx)
    statements = [claim, *key_check, *recheck]
    if len(statements) == 1:  # one statement: no pipeline to enter
        return tx.execute(*claim).fetchall()
    rows, *answers = tx.execute_together(statements)
    if recheck:
        controls = flow.read_controls(tx, answers.pop())
        if flow.any_binds(controls, types, tx.now):
            raise RunAgain()
        tx.claim_preamble.controls = controls
    _check_key(answers)
    return rows


def _controls_recheck(tx: WriteTx) -> list[tuple[str, Any]]:
    """TYPE_CONTROLS, to send beside a claim that went by controls an earlier claim of the
    transaction read (PostgreSQL: other servers may have changed them since); none when the
    claim's own promotion read them, or where the write lock keeps other writers out."""
    if tx.sql.PROMOTE_READS_CONTROLS and not tx.claim_preamble.controls_fresh:
        return [(tx.sql.TYPE_CONTROLS, {})]
    return []


def _same_controls(
    tx: WriteTx, used: dict[str, TypeControl], now: dict[str, TypeControl], types: Sequence[str]
) -> None:
    """Keep the controls read beside a claim; should those of its types differ from what it
    went by (another server changed them meanwhile), it runs again (RunAgain)."""
    if any(used.get(t) != now.get(t) for t in types):
        raise RunAgain()
    tx.claim_preamble.controls = now


def _check_key(answers: Sequence[list[Any]]) -> None:
    """KEY_IS_ACTIVE's answer, when it was asked: no row, the key was revoked."""
    if answers and not answers[0]:
        raise ClaimerRevoked()


def _claim_params(tx: WriteTx, worker: str, lease_seconds: int, limit: int) -> dict[str, Any]:
    lease = tx.now_us + lease_seconds * 1_000_000
    return {"worker": worker, "now": tx.now_us, "lease": lease, "limit": limit}


def _claimed(tx: WriteTx, rows: list[Any]) -> list[Job]:
    rows.sort(key=lambda r: (-r[COL_PRIORITY], r[COL_CREATED], r[COL_ID]))  # RETURNING has no order
    claimed = [decode_job(row) for row in rows]
    for job in claimed:
        tx.record_from(EventKind.CLAIMED, PENDING, None, job)
    return claimed


def pending_types(conn: Connection) -> list[str]:
    """The types that have PENDING jobs, by the counters: what a claim of any type reads."""
    return sorted(job_type for (job_type,) in conn.execute(conn.sql.PENDING_TYPES).fetchall())


def expire_and_read_pending_types(tx: WriteTx, delay: RetryDecision) -> list[str]:
    """expire_leases and pending_types, their statements sent together (one round trip on
    PostgreSQL instead of two), once a transaction (tx.claim_preamble). The counters move
    when the transaction's side effects are written, so the types of jobs moved to PENDING
    in it (an enqueue, an expiry) are added here."""
    preamble = tx.claim_preamble
    if preamble.pending is None:
        (counted,) = _after_expiry(tx, [(tx.sql.PENDING_TYPES, {})], delay)
        preamble.pending = frozenset(job_type for (job_type,) in counted)
    pending = set(preamble.pending)
    pending.update(move[0] for move in tx.moves if move[4] == PENDING)
    return sorted(pending)


def expire_read_pending_types_and_promote(
    tx: WriteTx, delay: RetryDecision
) -> tuple[list[str], dict[str, TypeControl]]:
    """What a claim of any type does first: expire_and_read_pending_types, then promote_due
    of those types. Where the database can read the types inside the promotion
    (PROMOTE_PENDING), the first claim of a transaction sends all three in one round trip.
    Types that only this transaction's moves made PENDING need no promotion: a job made
    PENDING and due at once is written ready."""
    preamble = tx.claim_preamble
    if tx.sql.PROMOTE_PENDING is None or preamble.pending is not None:
        types = expire_and_read_pending_types(tx, delay)
        return types, promote_due(tx, types) if types else _controls(tx)
    reads = [(tx.sql.PENDING_TYPES, {}), (tx.sql.PROMOTE_PENDING, {"now": tx.now_us})]
    counted, promoted = _after_expiry(tx, reads, delay)
    preamble.pending = frozenset(job_type for (job_type,) in counted)
    controls = _promoted(tx, sorted(preamble.pending), promoted)
    return expire_and_read_pending_types(tx, delay), controls


def promote_due(tx: WriteTx, types: Sequence[str]) -> dict[str, TypeControl]:
    """Make the delayed jobs of these types whose run_at has come ready (claimable), and
    read the type controls (in the same statement where the database can)."""
    due = _not_promoted(tx, types)
    if not due:
        return _controls(tx)
    rows = tx.execute(*_promotion(tx, due)).fetchall()
    return _promoted(tx, due, rows)


def expire_and_promote(tx: WriteTx, types: Sequence[str], delay: RetryDecision) -> dict[str, TypeControl]:
    """expire_leases and promote_due, their statements sent together (one round trip on
    PostgreSQL instead of two), each once a transaction. The order between them does not
    matter: expiry moves RUNNING jobs, promotion delayed PENDING ones, and a retry that
    expiry makes due at once is written ready (delayed = 0)."""
    due = _not_promoted(tx, types)
    answers = _after_expiry(tx, [_promotion(tx, due)] if due else [], delay)
    return _promoted(tx, due, answers[0]) if due else _controls(tx)


def _after_expiry(tx: WriteTx, statements: list[tuple[str, Any]], delay: RetryDecision) -> list[list[Any]]:
    """The answers of `statements`, sent together with the overdue probe (leases, timeouts)
    when this transaction has not run it yet; what the probe finds is expired first."""
    preamble = tx.claim_preamble
    if preamble.expired:
        return tx.execute_together(statements) if statements else []
    overdue, *answers = tx.execute_together([(tx.sql.OVERDUE, {"now": tx.now_us}), *statements])
    expire_overdue(tx, overdue, delay)
    preamble.expired = True
    return answers


def _not_promoted(tx: WriteTx, types: Sequence[str]) -> list[str]:
    """The types whose due delayed jobs this transaction has not made ready yet (its claims
    share one `now`). PostgreSQL: all of them, unless every one was promoted already and the
    controls then read bound none of them; its promotion reads the controls in the same
    statement, and another server may have changed them since (on SQLite the write lock
    keeps every other writer out). Where they bind, all but a type-wide rate window whose
    rows the transaction holds (flow.windows_known), promotion is skipped as well. A claim
    that skips it checks the controls with its own statement (`_claim_uncontrolled`,
    `claim_planned`), and runs again should they have changed."""
    preamble = tx.claim_preamble
    preamble.controls_fresh = False
    if tx.sql.PROMOTE_READS_CONTROLS:
        if preamble.controls is None or not preamble.promoted.issuperset(types):
            return list(types)
        if flow.any_binds(preamble.controls, types, tx.now) and not flow.windows_known(
            tx, preamble.controls, types
        ):
            return list(types)
        return []
    return [t for t in types if t not in preamble.promoted]


def _promoted(tx: WriteTx, types: Sequence[str], rows: list[Any]) -> dict[str, TypeControl]:
    """The controls after promoting `types`: read by the promotion (PostgreSQL), else as
    this transaction read them last."""
    preamble = tx.claim_preamble
    preamble.promoted.update(types)
    if tx.sql.PROMOTE_READS_CONTROLS:
        preamble.controls = flow.read_controls(tx, rows)
        preamble.controls_fresh = True
    return _controls(tx)


def _controls(tx: WriteTx) -> dict[str, TypeControl]:
    preamble = tx.claim_preamble
    if preamble.controls is None:
        preamble.controls = flow.read_controls(tx)
    return preamble.controls


def _promotion(tx: WriteTx, types: Sequence[str]) -> tuple[str, dict[str, Any]]:
    params = per_type_params(types)
    params["now"] = tx.now_us
    return tx.sql.promote_due(len(types)), params


def _fetch(tx: WriteTx | Connection, job_id: int) -> Job | None:
    row = tx.execute(tx.sql.JOB_BY_ID, {"id": job_id}).fetchone()
    return decode_job(row) if row is not None else None


def check_holder(job: Job, worker: str, attempt: int | None) -> None:
    if job.status is not JobStatus.RUNNING:
        raise Conflict(f"job {job.id} is {job.status.name}, not RUNNING")
    if job.worker_id != worker:
        raise Conflict(f"job {job.id} is not held by this worker")
    if attempt is not None and attempt != job.attempt:
        raise Conflict(f"job {job.id} is at attempt {job.attempt}, not {attempt}")


def _refusal(tx: WriteTx, job_id: int, worker: str, attempt: int | None) -> Exception:
    """Why a guarded UPDATE on a held job matched nothing."""
    job = _fetch(tx, job_id)
    if job is None:
        return NotFound(f"job {job_id} not found")
    try:
        check_holder(job, worker, attempt)
    except Conflict as conflict:
        return conflict
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
    write. Rows are checked as read and decoded once, in their completed form.
    """
    rows = tx.execute(tx.sql.JOBS_BY_IDS, {"ids": _ids_json([item.id for item in items])}).fetchall()
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
            done = list(row)
            done[COL_STATUS], done[COL_RESULT], done[COL_FINISHED] = "completed", result, now_us
            done[COL_LEASE], done[COL_UPDATED] = None, now_us
            job = decode_job(done)
            tx.record_from(EventKind.COMPLETED, RUNNING, job.worker_id, job)
            completed.append(job)
        if tx.executemany(tx.sql.COMPLETE_CHECKED, params).rowcount != len(accepted):
            raise Conflict("jobs changed while being completed; nothing was applied")
    return CompletionOutcome(completed=completed, rejected=rejected)


def _failure_params(job: Job, now: datetime, error: str, delay: float | None) -> dict[str, Any]:
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
    held = _fetch(tx, job_id)
    if held is None:
        raise NotFound(f"job {job_id} not found")
    check_holder(held, worker, attempt)
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
            tx.record(EventKind.LEASE_EXPIRED, job, _after_failure(job, values, tx.now))
    if late:
        params = [_failure_params(job, tx.now, TIMED_OUT_ERROR, delay(job, True, None)) for job in late]
        if tx.executemany(tx.sql.TIME_OUT_RUNNING, params).rowcount != len(late):  # pragma: no cover
            raise Conflict("timeouts changed while being applied; nothing was applied")
        for job, values in zip(late, params, strict=True):
            after = _after_failure(job, values, tx.now)
            kind = EventKind.RETRYING if after.status is JobStatus.PENDING else EventKind.FAILED
            tx.record(kind, job, after)
    return len(stale) + len(late)


def _after_failure(job: Job, values: dict[str, Any], now: datetime) -> Job:
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
        updated_at=now,
    )


# --- producer and admin actions ------------------------------------------------------------


def cancel(tx: WriteTx, job_id: int, scope: JobScope) -> Job:
    job = _fetch(tx, job_id)
    if job is None or not scope.allows(job):
        raise NotFound(f"job {job_id} not found")
    if job.status is not JobStatus.PENDING:
        raise Conflict(f"job {job_id} is {job.status.name}; only PENDING jobs can be cancelled")
    row = tx.execute(tx.sql.CANCEL_PENDING, {"id": job_id, "now": tx.now_us}).fetchone()
    if row is None:  # pragma: no cover - the write lock keeps the row as read
        raise Conflict(f"job {job_id} is no longer PENDING")
    cancelled = decode_job(row)
    tx.record(EventKind.CANCELLED, job, cancelled)
    return cancelled


def retry(tx: WriteTx, job_id: int) -> Job:
    job = _fetch(tx, job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
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
    """Delete up to PRUNE_BATCH terminal jobs finished before the cutoff, with their events."""
    rows = tx.execute(tx.sql.PRUNE, {"cutoff": to_micros(finished_before)}).fetchall()
    if rows:
        tx.execute(tx.sql.DELETE_EVENTS_OF, {"ids": _ids_json([r[0] for r in rows])})
        tx.execute(tx.sql.DELETE_DEPENDENCIES_OF, {"ids": _ids_json([r[0] for r in rows])})
        for _, job_type, status, created_by, worker_id in rows:
            tx.forget(job_type, status, created_by, worker_id)
    return len(rows)


def run(operation: Callable[[WriteTx], T], tx: WriteTx) -> T:
    """One operation of a write batch, then what its finished jobs' dependents need: both in
    the operation's savepoint."""
    value = operation(tx)
    if tx.parents:
        dependencies.settle(tx)
    return value


def write_side_effects(tx: WriteTx) -> None:
    """The events and counter changes of a group commit's successful operations."""
    now = tx.now_us
    if tx.events:
        rows = [
            dict(job_id=e.job.id, kind=KIND_TEXT[e.kind], status=STATUS_TEXT[e.job.status], at=now)
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


# --- reads ---------------------------------------------------------------------------------


def get_job(conn: Connection, job_id: int, scope: JobScope) -> Job | None:
    """The job, if the caller may see it: its scope's, or (a worker) a job that a job it
    holds depends on, so that one step can read the result of the one before."""
    job = _fetch(conn, job_id)
    if job is None:
        return None
    if scope.allows(job):
        return job
    if scope.worker_id is not None and job.has_dependents:
        return job if dependencies.held_dependency(conn, job_id, scope.worker_id) else None
    return None


def get_jobs(conn: Connection, job_ids: Sequence[int]) -> list[Job]:
    rows = conn.execute(conn.sql.JOBS_BY_IDS, {"ids": _ids_json(job_ids)}).fetchall()
    return [decode_job(row) for row in rows]


def last_event_id(conn: Connection) -> int:
    row = conn.execute(conn.sql.MAX_EVENT_ID).fetchone()
    return row[0] if row is not None and row[0] is not None else 0


def events_after(conn: Connection, after_id: int) -> list[tuple[int, int, str, str]]:
    """(id, job_id, kind, status) of the events after this id, oldest first (EVENT_TAIL_BATCH at most)."""
    return [tuple(row) for row in conn.execute(conn.sql.EVENTS_AFTER, {"after": after_id}).fetchall()]


def key_is_active(conn: Connection, name: str) -> bool:
    return conn.execute(conn.sql.KEY_IS_ACTIVE, {"name": name}).fetchone() is not None


def events_of_jobs(conn: Connection, job_ids: Sequence[int], last: int) -> dict[int, list[RecordedEvent]]:
    """Each job's newest `last` events, oldest first, in one read (jobs without any: absent)."""
    rows = conn.execute(conn.sql.EVENTS_OF_JOBS, {"ids": _ids_json(job_ids), "limit": last}).fetchall()
    events: dict[int, list[RecordedEvent]] = {}
    for job_id, kind, status, at in rows:
        event = RecordedEvent(EventKind(kind), STATUS_BY_VALUE[status], micros_to_datetime(at))
        events.setdefault(job_id, []).append(event)
    return events


def events_with_ids(conn: Connection, event_ids: Sequence[int]) -> list[tuple[int, int, str, str]]:
    return [
        tuple(row) for row in conn.execute(conn.sql.EVENTS_WITH_IDS, {"ids": _ids_json(event_ids)}).fetchall()
    ]


def _counts_and_everyones(
    conn: Connection, scope: JobScope
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """type -> status -> n, for what the scope sees and for every job, in one read."""
    terms = counters.scope_terms(scope)
    if not terms:
        return {}, {}
    everyone = [(counters.ALL, "", 1)]
    wanted = terms if scope.everything else [*terms, *everyone]
    rows = conn.execute(conn.sql.COUNTS_OF_SCOPES, {"scopes": _scopes_json(wanted)}).fetchall()
    mine = counters.by_type(rows, terms)
    return mine, mine if scope.everything else counters.by_type(rows, everyone)


def _scopes_json(terms: list[tuple[str, str, int]]) -> str:
    """The (scope, name) pairs of counter terms, as the JSON array the *_OF_SCOPES reads take."""
    return jsonutil.dumps([[scope, name] for scope, name, _ in terms]).decode()


def list_jobs(
    conn: Connection,
    scope: JobScope,
    status: JobStatus | None,
    job_type: str | None,
    first: int,
    after_id: int | None,
) -> tuple[list[Job], bool, int]:
    """Newest first (id DESC). Returns the page, whether more follow, and the total count.

    The counters give the total exactly, and choose the walk (read_plans.plan_list): no
    matching job, no read at all.
    """
    if not scope.everything and scope.created_by is None and scope.worker_id is None:
        return [], False, 0
    mine, everyones = _counts_and_everyones(conn, scope)
    by_creator = not scope.everything and scope.created_by is not None
    by_worker = not scope.everything and scope.worker_id is not None
    plan = plan_list(mine, everyones, by_creator, by_worker, status, job_type)
    if plan.walk is Walk.NOTHING:
        return [], False, 0
    has_status = plan.statuses[0] is not None
    walk_scope = plan.walk is Walk.SCOPE
    sql = conn.sql.list_jobs(
        by_creator, by_worker, has_status, job_type is not None, after_id is not None, walk_scope
    )
    params = {
        "name": scope.created_by if by_creator else scope.worker_id,
        "type": job_type,
        "after": after_id,
        "limit": first + 1,
    }
    rows = []
    for part in plan.statuses:  # each part's newest first+1: the page is among them
        rows += conn.execute(sql, {**params, "status": part.value if part else None}).fetchall()
    if len(plan.statuses) > 1:
        rows.sort(key=lambda row: row[COL_ID], reverse=True)
    return [decode_job(r) for r in rows[:first]], len(rows) > first, plan.total


def list_schedule_jobs(
    conn: Connection,
    scope: JobScope,
    schedule_name: str,
    status: JobStatus | None,
    job_type: str | None,
    first: int,
    after_id: int | None,
) -> tuple[list[Job], bool, int]:
    """`jobs(scheduleName:)`: the schedule's jobs the caller may see, newest first, from the
    schedule's own index (its jobs are few next to the table: counted, not from counters)."""
    params = {
        "schedule": schedule_name,
        "status": status.value if status is not None else None,
        "type": job_type,
        "everyone": int(scope.everything),
        "creator": scope.created_by,
        "worker": scope.worker_id,
    }
    total = conn.execute(conn.sql.COUNT_SCHEDULE_JOBS, params).fetchone()[0]
    if not total:
        return [], False, 0
    page = {**params, "after": after_id if after_id is not None else 2**63 - 1, "limit": first + 1}
    rows = conn.execute(conn.sql.SCHEDULE_JOBS, page).fetchall()
    return [decode_job(r) for r in rows[:first]], len(rows) > first, total


def finished_per_minute(conn: Connection, now: datetime, scope: JobScope, minutes: int) -> list[MinuteCount]:
    """The last `minutes` minutes, oldest first, the current one included, each with the
    jobs of the scope that became COMPLETED or FAILED in it (zeros where none did)."""
    current = to_micros(now) // MICROS_PER_MINUTE
    since = current - minutes + 1
    terms = counters.scope_terms(scope)
    found: dict[int, dict[str, int]] = {}
    if terms:
        rows = conn.execute(
            conn.sql.MINUTES_OF_SCOPES, {"since": since, "scopes": _scopes_json(terms)}
        ).fetchall()
        found = counters.by_minute(rows, terms)
    completed, failed = STATUS_TEXT[JobStatus.COMPLETED], STATUS_TEXT[JobStatus.FAILED]
    return [
        MinuteCount(
            micros_to_datetime(minute * MICROS_PER_MINUTE),
            found.get(minute, {}).get(completed, 0),
            found.get(minute, {}).get(failed, 0),
        )
        for minute in range(since, current + 1)
    ]


def queue_stats(conn: Connection, now: datetime, scope: JobScope) -> QueueStats:
    per_type, everyones = _counts_and_everyones(conn, scope)
    totals: dict[str, int] = {}
    for per_status in per_type.values():
        for status, n in per_status.items():
            totals[status] = totals.get(status, 0) + n
    oldest, oldest_by_type = _oldest_pending_seconds(conn, now, scope, per_type, everyones)
    return QueueStats(
        counts=counters.status_counts(totals),
        by_type={t: counters.status_counts(c) for t, c in sorted(per_type.items())},
        oldest_pending_seconds=oldest,
        oldest_pending_by_type=oldest_by_type,
    )


def _oldest_pending_seconds(
    conn: Connection,
    now: datetime,
    scope: JobScope,
    counts: dict[str, dict[str, int]],
    everyones: dict[str, dict[str, int]],
) -> tuple[float | None, dict[str, float]]:
    """Queue lag: how long the longest-waiting claimable job has been due (now - run_at),
    read from each type's head in ix_jobs_lag and ix_jobs_delayed, never by a walk. Only
    types with PENDING jobs in the scope (the counters say which) that are not paused are
    read: a paused type's jobs are not claimable. Also each type's own lag (types without a
    claimable job left out), when the read goes type by type (always for every job)."""
    plan = plan_oldest_pending(scope.everything, scope.created_by is not None, counts, everyones)
    if plan is OldestPending.NOTHING:
        return None, {}
    controls = flow.read_controls(conn)
    types = sorted(
        t
        for t, per_status in counts.items()
        if per_status.get(PENDING, 0) > 0 and not (t in controls and controls[t].paused_at(now))
    )
    if not types:
        return None, {}
    params = per_type_params(types)
    params.update(now=to_micros(now), created_by=scope.created_by)
    if plan is OldestPending.AMONG_OWN:
        params["types"] = jsonutil.dumps(types).decode()
        row = conn.execute(conn.sql.OLDEST_DUE_AMONG_OWN, params).fetchone()
        oldest = micros_to_datetime(row[0]) if row is not None else None
        return (None if oldest is None else _lag(now, oldest)), {}
    if plan is OldestPending.EVERY_PENDING:
        sql = conn.sql.oldest_due(len(types))
    else:
        sql = conn.sql.oldest_due_of(len(types))
    heads = _earliest_by_type(conn.execute(sql, params).fetchall())
    by_type = {job_type: _lag(now, due) for job_type, due in sorted(heads.items())}
    return max(by_type.values(), default=None), by_type


def _earliest_by_type(rows: Sequence[Any]) -> dict[str, datetime]:
    """oldest_due's (type, run_at) rows: each type's earliest."""
    earliest: dict[str, datetime] = {}
    for job_type, run_at in rows:
        due = micros_to_datetime(run_at)
        if due is not None and (job_type not in earliest or due < earliest[job_type]):
            earliest[job_type] = due
    return earliest


def _lag(now: datetime, due: datetime) -> float:
    return max(0.0, (now - due).total_seconds())


def next_due_at(
    conn: Connection, types: Sequence[str] | None, now: datetime | None = None
) -> datetime | None:
    """When the earliest delayed job of these types (None: any) becomes due; may be past.
    With `now`, a ready job (another process's enqueue, say) counts too, as due already."""
    if types is None:
        types = pending_types(conn)
    if not types:
        return None
    params = per_type_params(types)
    row = conn.execute(conn.sql.next_due(len(types)), params).fetchone()
    due = micros_to_datetime(row[0]) if row is not None else None
    if now is not None:
        params.update(now=to_micros(now), created_by=None)
        heads = _earliest_by_type(conn.execute(conn.sql.oldest_due(len(types)), params).fetchall())
        ready_at = min(heads.values(), default=None)
        if ready_at is not None and (due is None or ready_at < due):
            due = ready_at
    return due
