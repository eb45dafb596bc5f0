"""A claim skips what it cannot take without walking it (issue 16).

Delayed jobs ahead of due ones and other types' backlogs stay out of the claim's path: each
type's ready jobs have their own index range (ix_jobs_ready), delayed jobs are elsewhere
(ix_jobs_delayed) until they are due, when a claim makes them ready. The claim order of
API.md section 3 holds across types. Queue lag (`oldestPendingSeconds`) is now - runAt of
the longest-waiting claimable job, read from each type's head.

Run against a real database on both backends, through the repository; the plans are
checked on SQLite here and on PostgreSQL in test_postgres_plans.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import Databases, sqlite_plan

from queuelog.model import ALL_JOBS, JobScope, NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.repository import Repository
from queuelog.storage.sqlite.statements import SqliteStatements
from queuelog.storage.statements import per_type_params

T = TypeVar("T")


def job(
    job_type: str, run_at: datetime | None = None, priority: Priority = Priority.LOW, n: int = 0
) -> NewJob:
    return NewJob(job_type, {"n": n}, priority, 0, None, run_at, payload_json=f'{{"n":{n}}}')


def with_repository(databases: Databases, scenario: Callable[[Repository], Awaitable[T]]) -> T:
    url = databases.migrated()

    async def run() -> T:
        repository = Repository(url, RetryPolicy(1, 60))
        await repository.open()
        try:
            return await scenario(repository)
        finally:
            await repository.close()

    return asyncio.run(run())


def test_delayed_jobs_ahead_of_due_ones_are_passed_over(databases: Databases) -> None:
    tomorrow = datetime.now(UTC) + timedelta(days=1)

    async def scenario(repository: Repository) -> tuple[list[int], list[int], int]:
        delayed = await repository.enqueue([job("bench", tomorrow, n=i) for i in range(300)], "p")
        due = await repository.enqueue([job("bench", n=1000 + i) for i in range(3)], "p")
        claimed = (await repository.claim("w", ["bench"], 10, 60)).jobs
        again = (await repository.claim("w", ["bench"], 10, 60)).jobs
        assert not again
        return [o.job.id for o in due], [j.id for j in claimed], len(delayed)

    due, claimed, _ = with_repository(databases, scenario)
    assert claimed == due


def test_a_rare_type_behind_another_types_backlog_is_claimed(databases: Databases) -> None:
    async def scenario(repository: Repository) -> tuple[list[str], list[str]]:
        await repository.enqueue([job("bench", n=i) for i in range(300)], "p")
        await repository.enqueue([job("rare", n=i) for i in range(2)], "other")
        rare = (await repository.claim("w", ["rare"], 5, 60)).jobs
        either = (await repository.claim("w", ["rare", "bench"], 3, 60)).jobs
        return [j.type for j in rare], [j.type for j in either]

    rare, either = with_repository(databases, scenario)
    assert rare == ["rare", "rare"]
    assert either == ["bench", "bench", "bench"]


def test_claim_order_holds_across_types_and_for_any_type(databases: Databases) -> None:
    async def scenario(repository: Repository) -> tuple[list[int], list[int]]:
        order: list[tuple[int, int]] = []  # (-priority, id): claim order for jobs made in id order
        for n, (job_type, priority) in enumerate(
            [("a", Priority.LOW), ("b", Priority.HIGH), ("a", Priority.HIGH), ("c", Priority.MEDIUM)] * 3
        ):
            (outcome,) = await repository.enqueue([job(job_type, priority=priority, n=n)], "p")
            order.append((-priority.value, outcome.job.id))
        typed = (await repository.claim("w", ["a", "b", "c"], 5, 60)).jobs
        anything = (await repository.claim("w", None, 100, 60)).jobs
        expected = [job_id for _, job_id in sorted(order)]
        return expected, [j.id for j in typed + anything]

    expected, claimed = with_repository(databases, scenario)
    assert claimed == expected


def test_a_delayed_job_is_claimed_once_due_in_claim_order(databases: Databases) -> None:
    async def scenario(repository: Repository) -> tuple[int, list[int], list[int], float]:
        soon = repository.now() + timedelta(seconds=0.4)
        (early,) = await repository.enqueue([job("bench", soon, Priority.HIGH)], "p")
        await repository.enqueue([job("bench", n=1)], "p")
        first = (await repository.claim("w", ["bench"], 10, 60)).jobs
        next_due = await repository.next_due_at(["bench"])
        assert next_due is not None
        await asyncio.sleep(0.5)
        await repository.enqueue([job("bench", n=2)], "p")
        second = (await repository.claim("w", ["bench"], 10, 60)).jobs
        return early.job.id, [j.id for j in first], [j.id for j in second], (next_due - soon).total_seconds()

    early, first, second, next_due_error = with_repository(databases, scenario)
    assert early not in first and len(first) == 1
    assert abs(next_due_error) < 0.001
    # The HIGH job that became due goes first, ahead of the LOW one enqueued before it was due.
    assert len(second) == 2 and second[0] == early


def test_lag_counts_from_when_a_job_became_due_not_from_its_creation(databases: Databases) -> None:
    async def scenario(repository: Repository) -> tuple[float | None, float | None, float | None]:
        empty = (await repository.queue_stats(ALL_JOBS)).oldest_pending_seconds
        await repository.enqueue([job("bench", repository.now() + timedelta(seconds=0.6))], "p")
        before_due = (await repository.queue_stats(ALL_JOBS)).oldest_pending_seconds
        await asyncio.sleep(0.8)
        # Due for about 0.2 s, created about 0.8 s ago; not yet made ready by any claim.
        lag = (await repository.queue_stats(ALL_JOBS)).oldest_pending_seconds
        return empty, before_due, lag

    empty, before_due, lag = with_repository(databases, scenario)
    assert empty is None
    assert before_due == 0.0 or before_due is None
    assert lag is not None and 0.1 <= lag < 0.6, lag


def test_lag_of_a_producer_counts_only_its_own_due_jobs(databases: Databases) -> None:
    past = datetime.now(UTC) - timedelta(seconds=100)

    async def scenario(repository: Repository) -> tuple[float | None, float | None, float | None]:
        await repository.enqueue([job("bench", past)], "old-producer")
        await repository.enqueue([job("bench", n=i) for i in range(5)], "new-producer")
        everyone = (await repository.queue_stats(ALL_JOBS)).oldest_pending_seconds
        new = (
            await repository.queue_stats(JobScope(False, created_by="new-producer"))
        ).oldest_pending_seconds
        idle = (await repository.queue_stats(JobScope(False, created_by="idle"))).oldest_pending_seconds
        return everyone, new, idle

    everyone, new, idle = with_repository(databases, scenario)
    assert everyone is not None and 99 < everyone < 130
    assert new is not None and new < 30
    assert idle is None


# --- SQLite's plans: each type's range, never a walk of the pending jobs ----------------------


@pytest.mark.parametrize("types", [1, 3])
def test_the_sqlite_claim_seeks_each_types_ready_range(tmp_path: Path, types: int) -> None:
    names = [f"t{i}" for i in range(types)]
    params: dict[str, Any] = {**per_type_params(names, [10] * types), "worker": "w", "now": 1, "lease": 2}
    shown = sqlite_plan(tmp_path, SqliteStatements.claim_jobs(types), {**params, "limit": 10})
    assert shown.count("USING INDEX ix_jobs_ready (type=?)") == types, shown
    assert shown.count("USING INDEX ix_jobs_ready_keyed (type=?)") == types, shown
    assert "SCAN jobs" not in shown.replace("SCAN jobs USING INDEX", ""), shown


def test_the_sqlite_per_key_reads_seek_each_key(tmp_path: Path) -> None:
    params = per_type_params(["a", "a"], [3, 3], key=["k1", "k2"])
    shown = sqlite_plan(tmp_path, SqliteStatements.key_heads(2), params)
    assert shown.count("USING INDEX ix_jobs_ready_key (type=? AND concurrency_key=?)") == 2, shown
    shown = sqlite_plan(tmp_path, SqliteStatements.KEYED_HEADS, {"type": "a", "full": "[]"})
    assert "SCAN jobs" not in shown.replace("SCAN jobs USING", ""), shown


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("promote_due", "ix_jobs_delayed (type=? AND run_at<?)"),
        ("next_due", "ix_jobs_delayed (type=?)"),
        ("oldest_due", "ix_jobs_lag (type=?)"),
        ("oldest_due_of", "ix_jobs_lag (type=?)"),
    ],
)
def test_sqlite_per_type_reads_seek_their_types_range(tmp_path: Path, name: str, index: str) -> None:
    params = {**per_type_params(["a", "b"]), "now": 1, "created_by": "p"}
    shown = sqlite_plan(tmp_path, getattr(SqliteStatements, name)(2), params)
    assert shown.count(index) == 2, shown
    assert "SCAN jobs" not in shown.replace("SCAN jobs USING INDEX", ""), shown


def test_an_enqueue_marks_a_delayed_job_from_its_row_alone() -> None:
    # A delayed job is recognised at enqueue without a read: its row says so.
    from queuelog.storage.schema.new_job import row_values

    now_us = int(time.time() * 1_000_000)
    later = datetime.now(UTC) + timedelta(hours=1)
    assert row_values(job("a", later), "p", now_us)["delayed"] == 1
    assert row_values(job("a"), "p", now_us)["delayed"] == 0
