"""How bulk actions size their chunks (storage/operations/bulk.py): by time, within bounds."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from conftest import Databases

from queuelog.model import EventKind, JobFilter, NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.operations import bulk, pacing
from queuelog.storage.repository import Repository


def test_a_slow_chunk_makes_the_next_one_smaller() -> None:
    # 500 jobs took 60 ms (SQLite's old fixed chunk): the next aims at CHUNK_SECONDS
    assert bulk.next_chunk_size(500, 0.060) == int(500 * bulk.CHUNK_SECONDS / 0.060)


def test_a_fast_chunk_at_most_doubles() -> None:
    assert bulk.next_chunk_size(50, 0.0001) == 100


def test_sizes_stay_within_bounds() -> None:
    assert bulk.next_chunk_size(bulk.SMALLEST_CHUNK, 10.0) == bulk.SMALLEST_CHUNK
    assert bulk.next_chunk_size(bulk.LARGEST_CHUNK, 0.000001) == bulk.LARGEST_CHUNK
    assert bulk.next_chunk_size(100, 0.0) == bulk.LARGEST_CHUNK


def test_sizes_settle_where_a_chunk_takes_the_target_time() -> None:
    per_job = 0.0001  # 100 us a job: 50 jobs fill 5 ms
    size = bulk.FIRST_CHUNK * 4
    for _ in range(10):
        size = bulk.next_chunk_size(size, size * per_job)
    assert abs(size * per_job - bulk.CHUNK_SECONDS) <= per_job


def test_chunks_aim_at_their_databases_time_so_fixed_costs_do_not_shrink_them_to_nothing() -> None:
    """A PostgreSQL chunk costs a few milliseconds whatever its size (a COMMIT's flush): aimed
    at SQLite's 5 ms it shrank to the smallest chunk, and a call of 1,000 jobs took 100
    transactions. Aimed at PG_CHUNK_SECONDS it settles where the fixed cost is a small part."""
    assert pacing.SQLITE.bulk_chunk_seconds == bulk.CHUNK_SECONDS
    assert pacing.POSTGRES.bulk_chunk_seconds == bulk.PG_CHUNK_SECONDS > bulk.CHUNK_SECONDS

    def settle(chunk_seconds: float, fixed: float = 0.006, per_job: float = 0.00006) -> int:
        size = bulk.FIRST_CHUNK
        for _ in range(20):
            size = bulk.next_chunk_size(size, fixed + size * per_job, chunk_seconds)
        return size

    assert settle(bulk.CHUNK_SECONDS) == bulk.SMALLEST_CHUNK
    assert settle(bulk.PG_CHUNK_SECONDS) >= 250  # a transaction of 6 ms holds hundreds of jobs


def test_a_bulk_call_pauses_after_each_chunk_where_its_database_needs_it(databases: Databases) -> None:
    """On PostgreSQL a chunk's write-ahead log delays every COMMIT after it: the call waits
    as long as each chunk took before the next (PG_PAUSE_RATIO), so that others commit behind
    nothing. On SQLite it goes straight on. Every matching job is changed either way."""
    url = databases.migrated()
    ratio = bulk.PG_PAUSE_RATIO if databases.backend == "postgresql" else bulk.PAUSE_RATIO
    count = 3000

    async def scenario() -> tuple[int, list[tuple[float, float]]]:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        try:
            job = NewJob("email", {}, Priority.MEDIUM, 0, None, None, payload_json="{}")
            for _ in range(count // 1000):
                await repository.enqueue([job] * 1000, "producer")
            writes: list[tuple[float, float]] = []
            write = repository._db.write

            async def timed(operation: Any, **options: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await write(operation, **options)
                finally:
                    writes.append((started, time.perf_counter()))

            repository._db.write = timed  # type: ignore[method-assign]
            outcome = await repository.bulk(EventKind.CANCELLED, JobFilter(type="email"), None, count)
            return outcome.count, writes
        finally:
            await repository.close()

    changed, chunks = asyncio.run(scenario())
    assert changed == count
    assert len(chunks) >= 3  # chunks start at FIRST_CHUNK and at most double
    for (started, ended), (next_started, _) in itertools.pairwise(chunks):
        assert next_started - ended >= ratio * (ended - started) * 0.99
