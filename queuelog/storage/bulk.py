"""Bulk cancel and retry by filter (API.md section 9), in chunks, oldest first.

Each chunk is its own short write transaction: claims and enqueues go on between chunks.
Chunks are sized by time, not count (`next_chunk_size`): SQLite's writer runs a batch on
the event loop, so a 500-job chunk (about 60 ms) held every other request of the server
that long; a chunk aims at its database's chunk time (`chunk_seconds`: CHUNK_SECONDS on
SQLite) whatever the jobs cost. PostgreSQL's writers run on their own connections and
threads, beside each other: a chunk holds up only the rows it changes, while each of its
transactions costs a few milliseconds whatever its size (the COMMIT's flush among them).
Aimed at 5 ms there, chunks shrank to SMALLEST_CHUNK and a call of 1,000 jobs took a
hundred transactions (250-500 ms); PG_CHUNK_SECONDS gives them room. What other traffic
meets there is the chunk's write-ahead log: every COMMIT flushes the log up to its own
record, so a small transaction committing after a chunk waits for the chunk's log (hundreds
of kilobytes: each changed row is a new row version in every index) to reach the disk too.
So after each chunk a PostgreSQL bulk call pauses for half the time the chunk took
(PG_PAUSE_RATIO): it writes at most two thirds of the time, and the small transactions
between its chunks commit behind nothing; and its chunks aim at 25 ms, not 50, so that less
log is ahead of a commit that does meet one. Measured (bench figure 10 --quick, a claim
long-polling while retryJobs runs; p99 of 30-50 samples from enqueue to claim, and a call
of 1,000 jobs' longest): 50 ms chunks, no pause: 25-31 ms, calls up to 100-120 ms; 25 ms
chunks and a pause as long as the chunk: 19.5-32 ms, calls up to 190-264 ms (over figure
10's 250 ms bar for a call); and half as long, the setting: 24-30 ms, calls up
to 128-164 ms.
A chunk reads the matching jobs of one status in id order from that status's index
(after the last id the call has passed, so a call never rereads what it skipped), changes
them with one UPDATE that re-checks their status, and records each job's event and counter
move like the single-job mutations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queuelog.model import EventKind, Job, JobFilter, JobStatus
from queuelog.storage import dependencies
from queuelog.storage.codec import decode_job
from queuelog.storage.transaction import Connection, WriteTx
from queuelog.storage.types import ids_json, to_micros

FIRST_CHUNK = 50
SMALLEST_CHUNK, LARGEST_CHUNK = 10, 1000
CHUNK_SECONDS = 0.005
PG_CHUNK_SECONDS = 0.025
PAUSE_RATIO = 0.0  # SQLite: between chunks the writer takes what waits anyway
PG_PAUSE_RATIO = 0.5
CANCELLABLE = (JobStatus.PENDING,)
RETRIABLE = (JobStatus.FAILED, JobStatus.CANCELLED)


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


def statuses(action: EventKind, job_filter: JobFilter) -> list[JobStatus]:
    """The statuses a bulk action reads: those it may change that the filter admits."""
    allowed = CANCELLABLE if action is EventKind.CANCELLED else RETRIABLE
    return [s for s in allowed if job_filter.status is None or job_filter.status is s]


def matching(
    conn: Connection,
    job_filter: JobFilter,
    wanted: Sequence[JobStatus],
    created_by: str | None,
    after: int,
    limit: int,
) -> list[tuple[int, str, str | None]]:
    """(id, status, worker_id) of the first `limit` matching jobs with id > after, by id."""
    sql = conn.sql.match_jobs(
        created_by is not None,
        job_filter.type is not None,
        job_filter.concurrency_key is not None,
        job_filter.created_before is not None,
    )
    params: dict[str, Any] = {
        "name": created_by,
        "type": job_filter.type,
        "key": job_filter.concurrency_key,
        "before": to_micros(job_filter.created_before) if job_filter.created_before is not None else None,
        "after": after,
        "limit": limit,
    }
    rows: list[tuple[int, str, str | None]] = []
    for status in wanted:
        rows.extend(conn.execute(sql, {**params, "status": status.value}).fetchall())
    rows.sort()
    return rows[:limit]


def apply(
    tx: WriteTx,
    action: EventKind,
    job_filter: JobFilter,
    created_by: str | None,
    after: int,
    limit: int,
) -> tuple[int, int, bool]:
    """One chunk: (jobs changed, the last id passed, whether the matches ran out)."""
    found = matching(tx, job_filter, statuses(action, job_filter), created_by, after, limit)
    if not found:
        return 0, after, True
    before = {job_id: (status, worker) for job_id, status, worker in found}
    sql = tx.sql.CANCEL_IDS if action is EventKind.CANCELLED else tx.sql.RETRY_IDS
    ids = ids_json(list(before))
    rows = tx.execute(sql, {"ids": ids, "now": tx.now_us}).fetchall()
    changed: list[Job] = [decode_job(row) for row in rows]
    if action is EventKind.RETRIED:
        waiting = dependencies.restore_waiting(tx, changed)
        changed = [waiting.get(job.id, job) for job in changed]
    changed.sort(key=lambda job: job.id)
    for job in changed:
        old_status, old_worker = before[job.id]
        tx.record_from(action, old_status, old_worker, job)
    return len(changed), found[-1][0], len(found) < limit
