"""`jobs(scheduleName:)` reads no more than the page and what the caller may see of the schedule.

Its totalCount counted every job of the schedule that the caller may see, on every page and
for every role, by walking all of the schedule's jobs: 20 ms at 100k, for a producer who sees
none of them. A schedule's jobs are those of its own creator (`schedule:<name>`, a name no key
can have), so the caller who sees every job reads them as that creator's (the counters give
the total), a producer reads nothing, and a worker counts those it holds through its own index
or the schedule's, whichever holds fewer rows.

A schedule with SCHEDULED jobs is filled directly with SQL, and each read is measured by the
database itself (walk_meter.py): every page and total is checked exactly against the table,
and no call may cost more than a bound that a walk of the schedule's jobs exceeds many times.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from conftest import Databases
from sqlalchemy import text
from walk_meter import Meter, numbers

from queuelog.model import ALL_JOBS, JobScope, JobStatus
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.repository import Repository

SCHEDULED = 30_000
# A call's cost at most: the counters and a page of 21 jobs. Counting the schedule's jobs
# costs many times more: before the fix the ADMIN's first page took 210,838 instructions on
# SQLite and 582 buffers on PostgreSQL (after: about 1,000 and 10).
BOUND = {"sqlite": 5_000, "postgresql": 60}
BACKFILL = importlib.import_module("queuelog.storage.migrations.versions.0002_counters").BACKFILL
COLUMNS = (
    "type, payload, priority, status, retry_count, max_retries, attempt, run_at, created_by,"
    " created_at, updated_at, worker_id, schedule_name"
)


def add_jobs(
    connection: Any, backend: str, count: int, status: str, worker: str | None, schedule: str | None
) -> None:
    now = "now()" if backend == "postgresql" else "1767225600000000"
    connection.execute(
        text(
            f"INSERT INTO jobs ({COLUMNS}) SELECT 'report', '{{}}', 10, :status, 0, 3, 0, {now},"
            f" :creator, {now}, {now}, :worker, :schedule FROM {numbers(backend, count)}"
        ),
        {
            "status": status,
            "worker": worker,
            "schedule": schedule,
            "creator": f"schedule:{schedule}" if schedule is not None else "p",
        },
    )


def fill(url: str, backend: str) -> None:
    """Schedule `nightly`: SCHEDULED jobs COMPLETED by w1, 2 FAILED with w1, 3 RUNNING held
    by w2, 4 PENDING. Schedule `hourly`: 4 PENDING. Producer `p`: 5 jobs, COMPLETED by w2.
    Counters recounted."""
    engine = create_sync_engine(url)
    try:
        with engine.begin() as connection:
            add_jobs(connection, backend, SCHEDULED, "completed", "w1", "nightly")
            add_jobs(connection, backend, 2, "failed", "w1", "nightly")
            add_jobs(connection, backend, 3, "running", "w2", "nightly")
            add_jobs(connection, backend, 4, "pending", None, "nightly")
            add_jobs(connection, backend, 4, "pending", None, "hourly")
            add_jobs(connection, backend, 5, "completed", "w2", None)
            connection.execute(text("DELETE FROM job_counts"))
            for statement in BACKFILL:
                connection.execute(text(statement))
        if backend == "postgresql":
            # As autovacuum would after such a fill. Before any statistics, PostgreSQL may read
            # a page of any `jobs` list with a bitmap scan and sort all it found (every list's
            # matter, not this one's).
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.execute(text("ANALYZE jobs"))
    finally:
        engine.dispose()


def truth(url: str, condition: str) -> list[int]:
    """The ids of nightly's jobs matching `condition`, newest first."""
    engine = create_sync_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(f"SELECT id FROM jobs WHERE schedule_name = 'nightly' AND {condition} ORDER BY id DESC")
            )
            return [row[0] for row in rows]
    finally:
        engine.dispose()


# (who, scope, status, type, the jobs it sees: SQL)
READS: list[tuple[str, JobScope, JobStatus | None, str | None, str]] = [
    ("admin", ALL_JOBS, None, None, "TRUE"),
    ("admin", ALL_JOBS, JobStatus.FAILED, None, "status = 'failed'"),
    ("admin", ALL_JOBS, JobStatus.PENDING, "report", "status = 'pending'"),
    ("admin", ALL_JOBS, None, "email", "FALSE"),
    ("producer p", JobScope(everything=False, created_by="p"), None, None, "FALSE"),
    ("worker w2", JobScope(everything=False, worker_id="w2"), None, None, "worker_id = 'w2'"),
    ("worker w2", JobScope(everything=False, worker_id="w2"), JobStatus.COMPLETED, None, "FALSE"),
    (
        "producer+worker w2",
        JobScope(everything=False, created_by="w2", worker_id="w2"),
        None,
        None,
        "worker_id = 'w2'",
    ),
    ("worker w9", JobScope(everything=False, worker_id="w9"), None, None, "FALSE"),
]


def test_each_role_reads_exactly_its_schedule_jobs_without_counting_them_all(databases: Databases) -> None:
    url = databases.migrated()
    fill(url, databases.backend)
    bound = BOUND[databases.backend]

    async def scenario() -> None:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        meter = Meter()
        meter.install(repository)
        try:
            for who, scope, status, job_type, sees in READS:
                expected = truth(url, sees)
                what = f"{who}: status {status}, type {job_type}"
                seen: list[int] = []
                after = None
                while True:  # every page, 20 at a time
                    meter.clear()
                    page, more, total = await repository.list_jobs(
                        scope, status, job_type, 20, after, "nightly"
                    )
                    assert total == len(expected), what
                    assert all(call.cost <= bound for call in meter.calls), f"{what}:\n{meter.report()}"
                    if who.startswith("producer p"):
                        assert not any(c.statements for c in meter.calls), (
                            f"a producer reads nothing:\n{meter.report()}"
                        )
                    seen += [job.id for job in page]
                    if not more or len(seen) >= 60:
                        break
                    after = page[-1].id
                assert seen == expected[: len(seen)] and len(seen) == min(len(expected), 60), what
        finally:
            await repository.close()

    asyncio.run(scenario())
