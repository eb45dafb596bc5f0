"""Bulk cancel and retry by filter (API.md section 9), in chunks, oldest first.

Each chunk is a read and a short write transaction: claims and enqueues go on between chunks.
Chunks are sized by time, not count (`next_chunk_size`): SQLite's writer runs a batch on
the event loop, so a 500-job chunk (about 60 ms) would hold every other request of the
server that long; a chunk aims at its database's chunk time (`chunk_seconds`: CHUNK_SECONDS
on SQLite) whatever the jobs cost. PostgreSQL's writers run on their own connections and
threads, beside each other: a chunk holds up only the rows it changes, while each of its
transactions costs a few milliseconds whatever its size (the COMMIT's flush among them).
Aimed at 5 ms there, chunks would shrink to SMALLEST_CHUNK and a call of 1,000 jobs take a
hundred transactions; PG_CHUNK_SECONDS gives them room. What other traffic
meets there is the chunk's write-ahead log: every COMMIT flushes the log up to its own
record, so a small transaction committing after a chunk waits for the chunk's log (hundreds
of kilobytes: each changed row is a new row version in every index) to reach the disk too.
So after each chunk a PostgreSQL bulk call pauses for half the time the chunk took
(PG_PAUSE_RATIO): it writes at most two thirds of the time, and the small transactions
between its chunks commit behind nothing; and its chunks aim at 25 ms, not 50, so that less
log is ahead of a commit that does meet one. Bench figure 10 (a claim long-polling while
retryJobs runs) weighs the pause: as long as the chunk, it takes a call of 1,000 jobs past
the figure's 250 ms bar; half as long keeps the call under it, with the claim's p99 about
the same.
A call first reads the counters to plan its walks (read_plans.plan_bulk): for each status
it may change, the index it walks in id order: the status's (with a type, the type's), or a
producer's own PENDING jobs. Then each chunk reads (a read, not a write) the next matching
jobs from the last id the call has passed, so that a call never rereads what it skipped. A
filter that the index does not lead with (a concurrency key, createdBefore, a producer's
jobs among everyone's of a type) is tested on each row, so a read passes at most SCAN_ROWS
rows of each walk (PG_SCAN_ROWS), however few match, and the call reads on from where it
stopped: at 100k pending jobs a chunk with no match left read them all, 19 ms inside
SQLite's writer. A read that found jobs is followed by the chunk's write transaction, which
locks them, keeps those still in a status the action changes (no other column of the filter
ever changes), changes them with one UPDATE and records each job's event and counter move
like the single-job mutations. A read that found none writes nothing and waits for nothing.
`cancelJobs(includeRunning: true)` reads the RUNNING jobs too, as one more status, and asks
each one that has no cancel request yet to stop (API.md section 12): those asked already do
not match, so that `more` ends while they still run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from queuelog.model import ALL_JOBS, EventKind, Job, JobFilter, JobScope, JobStatus
from queuelog.storage.operations import cancel_requests, dependencies, reads
from queuelog.storage.operations.read_plans import plan_bulk
from queuelog.storage.schema.codec import decode_job
from queuelog.storage.schema.types import ids_json, to_micros
from queuelog.storage.statements import BulkWalk
from queuelog.storage.transaction import Connection, WriteTx

FIRST_CHUNK = 50
SMALLEST_CHUNK, LARGEST_CHUNK = 10, 1000
# The rows of each walk a chunk passes at most, matching or not: about a millisecond on
# SQLite (on the event loop), 5 ms on PostgreSQL (its writer's own connection).
SCAN_ROWS = 2000
PG_SCAN_ROWS = 10_000
CHUNK_SECONDS = 0.005
PG_CHUNK_SECONDS = 0.025
PAUSE_RATIO = 0.0  # SQLite: between chunks the writer takes what waits anyway
PG_PAUSE_RATIO = 0.5
CANCELLABLE = (JobStatus.PENDING,)
RETRIABLE = (JobStatus.FAILED, JobStatus.CANCELLED)

Part = tuple[JobStatus, BulkWalk]  # a status a call reads, and the index it walks for it


@dataclass(frozen=True, slots=True)
class Found:
    rows: list[tuple[int, str, str | None]]  # (id, status, worker_id) of matching jobs, by id
    last: int  # the id up to which every walk has passed: the next chunk starts after it
    exhausted: bool  # every walk reached its end


def next_chunk_size(size: int, seconds: float, chunk_seconds: float = CHUNK_SECONDS) -> int:
    """The next chunk's size, from how long a chunk of `size` jobs took (its write call,
    waiting included: under load chunks shrink and other traffic gets in sooner), aiming
    at `chunk_seconds`."""
    if seconds <= 0:
        return LARGEST_CHUNK
    scaled = int(size * chunk_seconds / seconds)
    return max(SMALLEST_CHUNK, min(LARGEST_CHUNK, scaled, size * 2))


def pause_after(chunk_seconds: float, ratio: float) -> float:
    """How long a bulk call waits after a chunk that took `chunk_seconds`."""
    return max(0.0, chunk_seconds * ratio)


def changes(action: EventKind, include_running: bool = False) -> tuple[JobStatus, ...]:
    """The statuses a bulk action changes; `include_running`: a cancel requests the
    cancellation of RUNNING jobs too (cancelJobs(includeRunning: true))."""
    if action is not EventKind.CANCELLED:
        return RETRIABLE
    return (*CANCELLABLE, JobStatus.RUNNING) if include_running else CANCELLABLE


def statuses(action: EventKind, job_filter: JobFilter, include_running: bool = False) -> list[JobStatus]:
    """The statuses a bulk action reads: those it may change that the filter admits."""
    allowed = changes(action, include_running)
    return [s for s in allowed if job_filter.status is None or job_filter.status is s]


def plan(
    conn: Connection,
    action: EventKind,
    job_filter: JobFilter,
    created_by: str | None,
    include_running: bool = False,
) -> tuple[Part, ...]:
    """The statuses a call reads and the walk of each, from the counters (one read): none
    where no job of the caller's has the status and the type."""
    scope = ALL_JOBS if created_by is None else JobScope(everything=False, created_by=created_by)
    mine, everyones = reads.counts_and_everyones(conn, scope)
    wanted = statuses(action, job_filter, include_running)
    return plan_bulk(mine, everyones, created_by is not None, wanted, job_filter.type)


def matching(
    conn: Connection,
    job_filter: JobFilter,
    parts: Sequence[Part],
    created_by: str | None,
    after: int,
    limit: int,
    scan: int = SCAN_ROWS,
) -> Found:
    """The first `limit` matching jobs with id > after, by id, among the next `scan` rows of
    each part's walk. Where the walks of several statuses reach different ids, only the
    matches up to the nearest are kept: the next chunk goes on from there in each."""
    params: dict[str, Any] = {
        "name": created_by,
        "type": job_filter.type,
        "key": job_filter.concurrency_key,
        "before": to_micros(job_filter.created_before) if job_filter.created_before is not None else None,
        "after": after,
        "scan": scan,
        "limit": limit,
    }
    flags = (
        created_by is not None,
        job_filter.type is not None,
        job_filter.concurrency_key is not None,
        job_filter.created_before is not None,
    )
    reads.walk_in_index_order(conn)
    rows: list[tuple[int, str, str | None]] = []
    reach: int | None = None  # every walk has passed up to this id; None: to its end
    for status, walk in parts:
        # RUNNING jobs are read by cancelJobs(includeRunning): those asked to stop already
        # are not its to count, and must not keep `more` true until they end.
        sql = conn.sql.match_jobs(walk, *flags, status is JobStatus.RUNNING)
        read = conn.execute(sql, {**params, "status": status.value}).fetchall()
        hits = sorted((row[0], row[1], row[2]) for row in read if row[1] is not None)
        edge = next((row[0] for row in read if row[1] is None), None)
        end = hits[-1][0] if len(hits) == limit else edge
        if end is not None and (reach is None or end < reach):
            reach = end
        rows.extend(hits)
    rows = sorted(row for row in rows if reach is None or row[0] <= reach)[:limit]
    if len(rows) == limit:
        return Found(rows, rows[-1][0], exhausted=False)
    if reach is None:
        return Found(rows, rows[-1][0] if rows else after, exhausted=True)
    return Found(rows, reach, exhausted=False)


def apply(tx: WriteTx, action: EventKind, ids: Sequence[int], running_grace: int | None = None) -> int:
    """One chunk: cancel or retry the jobs `ids` that a read found matching, those still in
    a status the action changes (the filter's other columns never change); how many. With
    `running_grace` (cancelJobs(includeRunning: true)), the RUNNING ones with no cancel
    request yet have their cancellation requested, with that grace (cancel_requests.py)."""
    allowed = {s.value for s in changes(action, running_grace is not None)}
    states = tx.execute(tx.sql.BULK_STATES, {"ids": ids_json(ids)}).fetchall()
    before = {job_id: (status, worker) for job_id, status, worker in states if status in allowed}
    running = [job_id for job_id, (status, _) in before.items() if status == JobStatus.RUNNING.value]
    for job_id in running:
        del before[job_id]
    requested = cancel_requests.request_many(tx, running, running_grace) if running_grace is not None else []
    if not before:
        return len(requested)
    sql = tx.sql.CANCEL_IDS if action is EventKind.CANCELLED else tx.sql.RETRY_IDS
    rows = tx.execute(sql, {"ids": ids_json(list(before)), "now": tx.now_us}).fetchall()
    changed: list[Job] = [decode_job(row) for row in rows]
    if action is EventKind.RETRIED:
        waiting = dependencies.restore_waiting(tx, changed)
        changed = [waiting.get(job.id, job) for job in changed]
    changed.sort(key=lambda job: job.id)
    for job in changed:
        old_status, old_worker = before[job.id]
        tx.record_from(action, old_status, old_worker, job)
    return len(changed) + len(requested)
