"""A bulk action's chunks pass a bounded number of rows, however selective the filter
(storage/operations/bulk.py).

A chunk read the matching jobs of one status from that status's index (or the type's) and
tested the rest of the filter on each row: a producer's own jobs, a concurrency key or
createdBefore. Once the few matches were behind it, the chunk walked the whole backlog to
find there was nothing more (19 ms at 100k pending jobs on SQLite, inside the writer; up to
36 ms on PostgreSQL), and so did the read that says whether more remain. Here a queue of
BACKLOG pending jobs of others is filled directly with SQL, with a few matching jobs before
and after it, and each call of the repository's reads and writes is measured by the
database itself (walk_meter.py: SQLite's VM instructions, PostgreSQL's buffers): none may
cost more than a bound that a walk of the backlog exceeds many times over. The jobs each
call changes, and the counters, are checked exactly.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from conftest import Databases
from sqlalchemy import text
from walk_meter import Meter, numbers

from queuelog.model import BulkOutcome, EventKind, JobFilter, JobStatus
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.operations import bulk
from queuelog.storage.repository import Repository
from queuelog.storage.schema.types import to_micros

T = TypeVar("T")
BACKLOG = 60_000
# A call's cost at most: a read passes SCAN_ROWS (SQLite: about 8 VM instructions each) or
# PG_SCAN_ROWS (PostgreSQL: about 400 buffers) rows of each walk. A walk of the backlog costs
# several times more: before the fix the first call's chunk took 301,096 instructions on
# SQLite, the second's 1,227 buffers on PostgreSQL.
BOUND = {"sqlite": 2 * 8 * bulk.SCAN_ROWS, "postgresql": 600}
BASE = datetime(2026, 1, 1, tzinfo=UTC)
EARLY = BASE - timedelta(minutes=30)  # after the hour-early jobs, before the others
PENDING = JobStatus.PENDING
BACKFILL = importlib.import_module("queuelog.storage.migrations.versions.0002_counters").BACKFILL

COLUMNS = (
    "type, payload, priority, status, retry_count, max_retries, attempt, run_at, created_by,"
    " created_at, updated_at, concurrency_key"
)


def add_jobs(
    connection: Any, backend: str, count: int, creator: str, key: str | None = None, created: datetime = BASE
) -> None:
    at = to_micros(created)
    stamp = f"TIMESTAMPTZ 'epoch' + {at} * INTERVAL '1 microsecond'" if backend == "postgresql" else str(at)
    connection.execute(
        text(
            f"INSERT INTO jobs ({COLUMNS}) SELECT 'bulk', '{{}}', 10, 'pending', 0, 3, 0, {stamp},"
            f" :creator, {stamp}, {stamp}, :key FROM {numbers(backend, count)}"
        ),
        {"creator": creator, "key": key},
    )


def fill(url: str, backend: str) -> None:
    """Before the backlog: 2 jobs of producer `mine`, 2 of `mine2`, 2 keyed `rare`, 2 keyed
    `rare2`, 3 created an hour early; then BACKLOG jobs of `others`; then 2 more of `mine`
    and `mine2`, and 1 more keyed `rare`. All PENDING, of type `bulk`. Counters recounted."""
    engine = create_sync_engine(url)
    try:
        with engine.begin() as connection:
            for creator in ("mine", "mine2"):
                add_jobs(connection, backend, 2, creator)
            add_jobs(connection, backend, 2, "others", key="rare")
            add_jobs(connection, backend, 2, "others", key="rare2")
            add_jobs(connection, backend, 3, "others", created=BASE - timedelta(hours=1))
            add_jobs(connection, backend, BACKLOG, "others")
            for creator in ("mine", "mine2"):
                add_jobs(connection, backend, 2, creator)
            add_jobs(connection, backend, 1, "others", key="rare")
            connection.execute(text("DELETE FROM job_counts"))
            for statement in BACKFILL:
                connection.execute(text(statement))
    finally:
        engine.dispose()


def with_repository(url: str, scenario: Callable[[Repository, Meter], Awaitable[T]]) -> T:
    async def run() -> T:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        meter = Meter()
        meter.install(repository)
        try:
            return await scenario(repository, meter)
        finally:
            await repository.close()

    return asyncio.run(run())


def ids_where(url: str, condition: str) -> list[int]:
    engine = create_sync_engine(url)
    try:
        with engine.connect() as connection:
            return [
                row[0]
                for row in connection.execute(text(f"SELECT id FROM jobs WHERE {condition} ORDER BY id"))
            ]
    finally:
        engine.dispose()


def counters_match_the_table(url: str) -> None:
    engine = create_sync_engine(url)
    try:
        with engine.connect() as connection:
            counted = dict(
                connection.execute(
                    text(
                        "SELECT status, SUM(n) FROM job_counts WHERE scope = '*'"
                        " GROUP BY status HAVING SUM(n) <> 0"
                    )
                ).all()
            )
            table = dict(connection.execute(text("SELECT status, count(*) FROM jobs GROUP BY status")).all())
    finally:
        engine.dispose()
    assert {k: int(v) for k, v in counted.items()} == table


# (who, action, filter, limit, the jobs it changes (SQL; {early}: the hour-early jobs'
# condition), whether more remain), run in this order on one queue
CALLS: list[tuple[str | None, EventKind, JobFilter, int, str, bool]] = [
    ("mine", EventKind.CANCELLED, JobFilter(status=JobStatus.PENDING), 100, "created_by = 'mine'", False),
    ("mine2", EventKind.CANCELLED, JobFilter(type="bulk"), 100, "created_by = 'mine2'", False),
    (
        None,
        EventKind.CANCELLED,
        JobFilter(status=PENDING, concurrency_key="rare"),
        100,
        "concurrency_key = 'rare'",
        False,
    ),
    (None, EventKind.CANCELLED, JobFilter(type="bulk", created_before=EARLY), 100, "{early}", False),
    # 1 of 2: whether more remain is read past the whole backlog
    (
        None,
        EventKind.CANCELLED,
        JobFilter(status=PENDING, concurrency_key="rare2"),
        1,
        "id = {first_rare2}",
        True,
    ),
    # the keyed jobs cancelled above, retried (FAILED has none: only CANCELLED is read)
    (
        None,
        EventKind.RETRIED,
        JobFilter(type="bulk", concurrency_key="rare"),
        100,
        "concurrency_key = 'rare'",
        False,
    ),
]


async def call_bulk(
    action: EventKind,
    job_filter: JobFilter,
    who: str | None,
    limit: int,
    repository: Repository,
    meter: Meter,
) -> tuple[BulkOutcome, Meter]:
    return await repository.bulk(action, job_filter, who, limit), meter


def test_each_read_and_write_of_a_selective_bulk_call_passes_a_bounded_number_of_rows(
    databases: Databases,
) -> None:
    url = databases.migrated()
    fill(url, databases.backend)
    at = to_micros(EARLY)
    early = (
        f"TIMESTAMPTZ 'epoch' + {at} * INTERVAL '1 microsecond'" if databases.backend == "postgresql" else at
    )
    names = {"early": f"created_at < {early}", "first_rare2": ids_where(url, "concurrency_key = 'rare2'")[0]}
    bound = BOUND[databases.backend]
    for who, action, job_filter, limit, changes, more in CALLS:
        expected = ids_where(url, changes.format(**names))
        before = set(ids_where(url, "status = 'cancelled'"))

        outcome, meter = with_repository(url, functools.partial(call_bulk, action, job_filter, who, limit))
        call = f"{action.value} by {who or 'an admin'} of {job_filter}, limit {limit}"
        assert (outcome.count, outcome.more) == (len(expected), more), (call, outcome)
        now = set(ids_where(url, "status = 'cancelled'"))
        assert sorted(now - before if action is EventKind.CANCELLED else before - now) == expected, call
        assert meter.calls and all(c.cost <= bound for c in meter.calls), f"{call}:\n{meter.report()}"
    counters_match_the_table(url)
