"""Enqueue: new jobs inserted in a fixed number of statements, idempotency keys replayed or
refused, the jobs they wait for locked first (dependencies.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from queuelog import jsonutil
from queuelog.enqueue_request import REPLAY_MAY_CHANGE, REQUEST_FIELDS
from queuelog.errors import BadInput, Conflict
from queuelog.model import ALL_JOBS, EnqueueOutcome, EventKind, Job, JobScope, NewJob, Priority
from queuelog.storage.operations import dependencies
from queuelog.storage.schema.codec import decode_job, micros_to_datetime
from queuelog.storage.schema.new_job import new_job, row_values
from queuelog.storage.transaction import Cursor, WriteTx


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
    """Whether `item` asks for what `job` was enqueued as: for a job edited since
    (updateJob), the values its first edit kept (Job.enqueued_as)."""
    original: dict[str, Any] = {}
    if isinstance(job, Job) and job.enqueued_as is not None:
        priority, max_retries, expires_at = enqueued_values(job.enqueued_as)
        original = {"priority": priority, "max_retries": max_retries, "expires_at": expires_at}
    return (
        all(original.get(name, getattr(job, name)) == getattr(item, name) for name in _SAME_FIELDS)
        and same_json(job.payload, item.payload)
        and (
            set(job.depends_on) == set(item.depends_on)
            and set(job.depends_on_items) == set(item.depends_on_items)
            if isinstance(job, NewJob)
            else job.dependency_count == 0 or bool(item.depends_on or item.depends_on_items)
        )
    )


def enqueued_values(enqueued_as: dict[str, Any]) -> tuple[Priority, int, datetime | None]:
    """(priority, max_retries, expires_at) of a job as enqueued, from Job.enqueued_as."""
    expires_at = enqueued_as["expires_at"]
    return (
        Priority(enqueued_as["priority"]),
        enqueued_as["max_retries"],
        None if expires_at is None else micros_to_datetime(expires_at),
    )


def check_unexpired(tx: WriteTx, items: Sequence[NewJob]) -> None:
    """A job is not created already expired: its expiresAt must be later than now."""
    for item in items:
        if item.expires_at is not None and item.expires_at <= tx.now:
            raise BadInput("expiresAt must be in the future")


def _enqueue_once(tx: WriteTx, item: NewJob, created_by: str) -> EnqueueOutcome:
    # ON CONFLICT DO NOTHING lets the unique constraint settle races between processes.
    expired = item.expires_at is not None and item.expires_at <= tx.now
    cursor = None if expired else tx.execute(tx.sql.INSERT_JOB_ONCE, row_values(item, created_by, tx.now_us))
    if cursor is not None and cursor.rowcount == 1:
        job = new_job(_inserted_id(cursor), item, created_by, tx.now)
        tx.record(EventKind.ENQUEUED, None, job)
        return EnqueueOutcome(job=job, created=True)
    key = {"created_by": created_by, "key": item.idempotency_key}
    row = tx.execute(tx.sql.JOB_BY_IDEMPOTENCY_KEY, key).fetchone()
    if row is None and expired:  # no job to replay: this one would be created expired
        check_unexpired(tx, [item])
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
        check_unexpired(tx, fresh)
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
