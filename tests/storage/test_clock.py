"""One clock: time-dependent reads use the clock the database's writes use.

On PostgreSQL writes take `now` from the database, so a replica whose own clock is wrong
must still report `oldestPendingSeconds`, throughput minutes and the long-poll's wait for a
due job by the database's time. Here the server process's clock (queuelog.clock.utcnow) is
set an hour ahead of the database's: PostgreSQL's answers must not move, while SQLite,
whose writes use the process's clock, moves consistently with its writes.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from conftest import Databases

from queuelog import clock
from queuelog.model import ALL_JOBS, NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.repository import Repository

AHEAD = timedelta(hours=1)


def new_job(run_at: datetime | None = None) -> NewJob:
    return NewJob("email", {}, Priority.MEDIUM, 0, None, run_at, payload_json="{}")


def skew(monkeypatch: pytest.MonkeyPatch, by: timedelta) -> None:
    real = clock.utcnow
    monkeypatch.setattr(clock, "utcnow", lambda: real() + by)


def test_a_replica_whose_clock_runs_ahead_reads_by_the_databases_clock(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = databases.migrated()

    async def scenario() -> tuple[float | None, float, int]:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        try:
            await repository.enqueue([new_job()], "producer")
            skew(monkeypatch, AHEAD)
            await repository.enqueue([new_job()], "producer")  # a write batch: measures the offset
            oldest = (await repository.queue_stats(ALL_JOBS)).oldest_pending_seconds
            offset = (repository.now() - clock.utcnow()).total_seconds()
            (job,) = (await repository.claim("worker", None, 1, 60)).jobs
            await repository.complete("worker", job.id, None, job.attempt)
            minutes = await repository.finished_per_minute(ALL_JOBS, 5)
            return oldest, offset, sum(minute.completed for minute in minutes)
        finally:
            await repository.close()

    oldest, offset, completed = asyncio.run(scenario())
    assert oldest is not None
    # The completion is in the last five minutes by the clock that wrote it, on both.
    assert completed == 1
    if databases.backend == "postgresql":
        # The database's clock did not jump: the oldest job is seconds old, not an hour.
        assert oldest < 60
        assert abs(offset + AHEAD.total_seconds()) < 5
    else:
        # SQLite's writes use the process's clock: the first job was written an hour "ago".
        assert oldest >= AHEAD.total_seconds() - 60
        assert abs(offset) < 1
