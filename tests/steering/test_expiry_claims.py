"""An expired PENDING job is never claimed, even before the expiry sweep reaches it (API.md
section 12), by any of the claim's paths; the sweep then cancels it once, through
ix_jobs_expiry.

The storage layer runs in process on a real SQLite file and a real PostgreSQL database,
with no maintenance loop: only what the test calls runs, so a job is known to be expired and
still PENDING when the claim comes. Its plans are in tests/steering/test_expiry_plans.py; the sweep
on real servers, in tests/steering/test_expiry.py.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from conftest import Databases

from queuelog.errors import Conflict
from queuelog.model import ALL_JOBS, EventKind, JobEdit, JobStatus, NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.repository import Repository
from queuelog.storage.statements import EXPIRE_BATCH

TYPE = "email"
SOON = timedelta(milliseconds=200)


def new_job(
    expires_at: datetime | None = None, priority: Priority = Priority.LOW, key: str | None = None
) -> NewJob:
    return NewJob(
        type=TYPE,
        payload={},
        priority=priority,
        max_retries=0,
        concurrency_key=key,
        payload_json="{}",
        expires_at=expires_at,
    )


async def opened(url: str) -> Repository:
    repository = Repository(url, RetryPolicy(10, 3600), event_feed="local")
    await repository.open()
    return repository


async def enqueue_expired(repository: Repository, jobs: list[NewJob]) -> list[int]:
    """Enqueue `jobs` (their expiry SOON from now), then wait until it has passed."""
    expires_at = repository.now() + SOON
    outcomes = await repository.enqueue([_expiring(job, expires_at) for job in jobs], "producer")
    await asyncio.sleep((expires_at - repository.now()).total_seconds() + 0.05)
    return [outcome.job.id for outcome in outcomes]


def _expiring(job: NewJob, at: datetime) -> NewJob:
    return NewJob(
        type=job.type,
        payload={},
        priority=job.priority,
        max_retries=0,
        concurrency_key=job.concurrency_key,
        payload_json="{}",
        expires_at=at,
    )


def test_no_claim_path_takes_an_expired_job_and_the_sweep_cancels_it_once(databases: Databases) -> None:
    """The expired jobs are CRITICAL, first in claim order: each claim passes over them to
    the LOW jobs without an expiry behind them, uncontrolled, within a maxRunning quota, and
    per key (candidates checked on the row)."""

    async def scenario() -> None:
        repository = await opened(databases.migrated())
        try:
            critical = [new_job(priority=Priority.CRITICAL), new_job(priority=Priority.CRITICAL, key="a")]
            expired = await enqueue_expired(repository, critical)
            fresh = [o.job.id for o in await repository.enqueue([new_job(), new_job(key="b")], "producer")]
            # a claim of any type, then one of the type, uncontrolled
            (first,) = (await repository.claim("w", None, 1, 60)).jobs
            (second,) = (await repository.claim("w", [TYPE], 1, 60)).jobs
            assert [first.id, second.id] == fresh
            assert (await repository.claim("w", [TYPE], 10, 60)).jobs == []
            # within a quota (maxRunning), then per key: still nothing but fresh jobs
            third = (await repository.enqueue([new_job()], "producer"))[0].job.id
            await repository.update_type_control(TYPE, max_running=10)
            assert [j.id for j in (await repository.claim("w", [TYPE], 10, 60)).jobs] == [third]
            fourth = (await repository.enqueue([new_job(key="c")], "producer"))[0].job.id
            await repository.update_type_control(TYPE, max_running_per_key=1)
            assert [j.id for j in (await repository.claim("w", [TYPE], 10, 60)).jobs] == [fourth]

            stats = await repository.queue_stats(ALL_JOBS)
            assert (stats.counts.pending, stats.counts.running) == (2, 4)
            assert await repository.next_expiry() is not None
            assert await repository.expire_due() == 2
            assert await repository.expire_due() == 0
            assert await repository.next_expiry() is None
            for job_id in expired:
                job = await repository.get_job(job_id, ALL_JOBS)
                assert job is not None and job.status is JobStatus.CANCELLED and job.error == "expired"
                assert job.finished_at is not None and job.worker_id is None and job.attempt == 0
            events = await repository.events_of_jobs(expired, 10)
            for job_id in expired:
                assert [(e.kind, e.status) for e in events[job_id]] == [
                    (EventKind.ENQUEUED, JobStatus.PENDING),
                    (EventKind.EXPIRED, JobStatus.CANCELLED),
                ]
            stats = await repository.queue_stats(ALL_JOBS)
            assert (stats.counts.pending, stats.counts.running, stats.counts.cancelled) == (0, 4, 2)
        finally:
            await repository.close()

    asyncio.run(scenario())


def test_a_sweep_takes_every_due_job_in_batches_and_leaves_the_rest(databases: Databases) -> None:
    """More due jobs than one batch holds: one call expires them all, batch after batch; a
    job expiring later and a job without an expiry stay PENDING."""

    async def scenario() -> None:
        repository = await opened(databases.migrated())
        try:
            due = await enqueue_expired(repository, [new_job()] * (EXPIRE_BATCH + 7))
            later = repository.now() + timedelta(hours=1)
            kept = await repository.enqueue([new_job(expires_at=later), new_job()], "producer")
            assert await repository.expire_due() == len(due)
            stats = await repository.queue_stats(ALL_JOBS)
            assert (stats.counts.pending, stats.counts.cancelled) == (2, len(due))
            assert await repository.next_expiry() == kept[0].job.expires_at
        finally:
            await repository.close()

    asyncio.run(scenario())


def test_an_expired_job_not_yet_swept_cannot_be_edited(databases: Databases) -> None:
    """Past its expiry a PENDING job is as good as CANCELLED: an edit that would move its
    expiry later, or run it now, is a CONFLICT, and the sweep still cancels it."""

    async def scenario() -> None:
        repository = await opened(databases.migrated())
        try:
            (job_id,) = await enqueue_expired(repository, [new_job()])
            later = repository.now() + timedelta(hours=1)
            for edit in (JobEdit(expires_at=later), JobEdit(clear_expiry=True), JobEdit(run_now=True)):
                with pytest.raises(Conflict, match="expired"):
                    await repository.update_job(job_id, ALL_JOBS, edit)
            assert await repository.expire_due() == 1
            events = await repository.events_of_jobs([job_id], 10)
            assert [e.kind for e in events[job_id]] == [EventKind.ENQUEUED, EventKind.EXPIRED]
        finally:
            await repository.close()

    asyncio.run(scenario())
