"""PostgreSQL reads that must not grow with the queue walk the index of their filter.

A queue's completed jobs are its oldest ids and its pending jobs its newest. PostgreSQL's
statistics cannot see that, and for `jobs(status: COMPLETED)` newest first it would walk
the primary key backwards past every pending job (measured: 66 ms at 200k jobs, growing
with the queue). The statements name the filter's columns in their ORDER BY so that only
the filter's index gives the order; this checks the plans on a table shaped like a queue,
after ANALYZE, with EXPLAIN.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Databases

from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.postgres_statements import PostgresStatements
from queuelog.storage.statements import per_type_params

FILL = """
INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt, run_at,
                  created_by, created_at, updated_at, finished_at)
SELECT CASE WHEN g % 2 = 0 THEN 'noop' ELSE 'email' END, '{}', 10,
       CASE WHEN g <= 20000 THEN 'completed' ELSE 'pending' END, 0, 3, 0, now(), 'p', now(), now(),
       CASE WHEN g <= 20000 THEN now() END
FROM generate_series(1, 40000) AS g
"""


@pytest.fixture
def queue_shaped(databases: Databases) -> Iterator[Any]:
    import psycopg

    url = databases.fresh()
    engine = create_sync_engine(url)
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(FILL)  # type: ignore[arg-type]
        connection.execute("ANALYZE jobs")
        yield connection


@pytest.fixture
def never_analyzed(databases: Databases) -> Iterator[Any]:
    """The queue-shaped table right after a burst, before autovacuum has looked at it: the
    planner has no statistics at all (issue 16's backlogs were measured so)."""
    import psycopg

    url = databases.fresh()
    engine = create_sync_engine(url)
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(FILL)  # type: ignore[arg-type]
        connection.execute(
            "UPDATE jobs SET delayed = 1, run_at = now() + interval '1 day'"
            " WHERE id % 4 = 0 AND status = 'pending'"
        )
        connection.execute("UPDATE jobs SET concurrency_key = 'k' || (id % 7) WHERE id % 3 = 0")
        yield connection


def plan(connection: Any, sql: str, **params: Any) -> str:
    rows = connection.execute("EXPLAIN " + sql, params).fetchall()
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("has_status", "has_type", "after", "index"),
    [
        (True, False, False, "ix_jobs_status"),
        (True, False, True, "ix_jobs_status"),
        (False, True, False, "ix_jobs_type"),
        (True, True, False, "ix_jobs_type_status"),
        (True, True, True, "ix_jobs_type_status"),
    ],
)
def test_filtered_pages_walk_their_filters_index(
    queue_shaped: Any, has_status: bool, has_type: bool, after: bool, index: str
) -> None:
    sql = PostgresStatements.list_jobs(False, False, has_status, has_type, after, False)
    for status in ("completed", "pending"):
        shown = plan(queue_shaped, sql, status=status, type="noop", after=30000, limit=21)
        assert index in shown, shown
        assert "jobs_pkey" not in shown and "Sort" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize(("by_creator", "index"), [(True, "ix_jobs_created_by"), (False, "ix_jobs_worker")])
@pytest.mark.parametrize(("has_status", "has_type"), [(True, False), (False, True), (True, True)])
def test_a_callers_filtered_pages_can_walk_the_callers_index(
    queue_shaped: Any, by_creator: bool, index: str, has_status: bool, has_type: bool
) -> None:
    """list_jobs walks the caller's own index when it holds fewer rows than the filter's
    (the counters say so): the statement must then be planned on that index, in id order."""
    queue_shaped.execute("UPDATE jobs SET worker_id = 'w' WHERE status = 'completed'")
    queue_shaped.execute("ANALYZE jobs")
    sql = PostgresStatements.list_jobs(by_creator, not by_creator, has_status, has_type, False, True)
    shown = plan(queue_shaped, sql, name="p" if by_creator else "w", status="pending", type="noop", limit=26)
    assert index in shown, shown
    assert "Sort" not in shown and "Seq Scan" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("generic", [False, True])
def test_the_claim_reads_each_types_ready_index_and_skips_locked_rows(
    queue_shaped: Any, generic: bool
) -> None:
    if generic:
        queue_shaped.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000) + 1_000_000
    params = {**per_type_params(["noop", "email"], [10, 10]), "worker": "w", "now": now}
    shown = plan(queue_shaped, PostgresStatements.claim_jobs(2), **params, lease=now, limit=10)
    assert "ix_jobs_ready" in shown, shown
    assert "LockRows" in shown and "Seq Scan on jobs" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_claims_read_the_ready_indexes_without_any_statistics(never_analyzed: Any) -> None:
    """Each index a claim may use must be the only one whose predicate its query implies
    (ix_jobs_lag and ix_jobs_ready_key carry a mark only their own statements state): with
    no statistics, PostgreSQL read a claim's 50k candidates from ix_jobs_lag and sorted them."""
    now = int(time.time() * 1_000_000)
    params = {**per_type_params(["noop", "email"], [10, 10], kquota=[10, 10]), "worker": "w", "now": now}
    for sql in (PostgresStatements.claim_jobs(2), PostgresStatements.ready_heads(2)):
        shown = plan(never_analyzed, sql, **params, lease=now, limit=10)
        assert "ix_jobs_ready on" in shown and "ix_jobs_ready_keyed on" in shown, shown
        assert "ix_jobs_lag" not in shown and "ix_jobs_ready_key on" not in shown, shown
    key_params = per_type_params(["noop", "email"], [5, 5], key=["k1", "k2"])
    shown = plan(never_analyzed, PostgresStatements.key_heads(2), **key_params)
    assert "ix_jobs_ready_key on" in shown and "Sort" not in shown, shown
    shown = plan(never_analyzed, PostgresStatements.KEYS_WITH_READY_JOBS, type="noop")
    assert "ix_jobs_ready_key" in shown and "Seq Scan" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("name", "indexes"),
    [
        ("promote_due", {"ix_jobs_delayed"}),
        ("next_due", {"ix_jobs_delayed"}),
        ("oldest_due", {"ix_jobs_lag", "ix_jobs_delayed"}),
        ("oldest_due_of", {"ix_jobs_lag", "ix_jobs_delayed"}),
    ],
)
def test_per_type_reads_seek_their_types_range_even_when_statistics_are_stale(
    queue_shaped: Any, name: str, indexes: set[str]
) -> None:
    """Statistics taken before a burst of delayed jobs: the planner believes none are
    delayed. Each statement must still seek the type's range of its partial indexes,
    never scan the table or another index (issue 16's backlogs)."""
    queue_shaped.execute(
        "UPDATE jobs SET delayed = 1, run_at = now() + interval '1 day'"
        " WHERE id % 3 = 0 AND status = 'pending'"
    )
    queue_shaped.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    sql = getattr(PostgresStatements, name)(2)
    shown = plan(queue_shaped, sql, **per_type_params(["noop", "email"]), now=now, created_by="p")
    assert all(index in shown for index in indexes), shown
    # promote_due also reads the (few) type controls, sorted by type: no other sort
    sorts = re.findall(r"Sort Key: (.*)", shown)
    assert "Seq Scan on jobs" not in shown and set(sorts) <= {"type_controls.type"}, shown


# Every statement that changes one job found by id, with its guard on the job's state.
BY_ID = ["COMPLETE_CHECKED", "COMPLETE_HELD", "HEARTBEAT", "FAIL_RUNNING", "EXPIRE_RUNNING"]
BY_ID_OTHER_STATES = ["CANCEL_PENDING", "RETRY_FINISHED"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("name", BY_ID + BY_ID_OTHER_STATES)
def test_one_job_by_id_is_looked_up_by_id_even_when_statistics_are_stale(
    queue_shaped: Any, name: str
) -> None:
    """Statistics taken when no job was running, then a burst of claims: the planner believes
    running jobs are rare. With a guard written `status = 'running'`, `python -m bench
    --database postgresql` saw each completion walk every running job through ix_jobs_lease
    (pg_stat_user_indexes: 27M index entries read for 2,900 completions; 3.5-4.9 ms of
    PostgreSQL CPU per job). queuelog's guards leave the planner only lookups by id."""
    queue_shaped.execute(
        "UPDATE jobs SET status = 'running', worker_id = 'w', attempt = 1,"
        " lease_expires_at = now() + interval '1 hour' WHERE status = 'pending'"
    )
    # The plan a server runs: psycopg prepares a statement it has run five times, and
    # PostgreSQL then plans it once for any id.
    queue_shaped.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    params = {
        "id": 30000, "worker": "w", "attempt": 1, "result": "{}", "now": now, "lease": now,
        "status": "completed", "retry_count": 0, "worker_id": None, "run_at": now,
        "finished_at": now, "error": None, "delayed": 0,
    }  # fmt: skip
    shown = plan(queue_shaped, getattr(PostgresStatements, name), **params)
    assert re.search(r"Index Cond: .*\bid = ", shown), shown  # a point lookup: the key, or (worker_id, id)
    assert not any(
        index in shown for index in ("ix_jobs_lease", "ix_jobs_ready", "ix_jobs_delayed", "ix_jobs_lag")
    ), shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_completing_many_jobs_at_once_looks_them_up_by_id_even_when_statistics_are_stale(
    queue_shaped: Any,
) -> None:
    """`completeJobs` is one UPDATE over arrays on PostgreSQL: its rows must come from the
    primary key (id = ANY), whatever the statistics say about running jobs."""
    from queuelog.storage.postgres_statements import COMPLETE_CHECKED_AT_ONCE

    queue_shaped.execute(
        "UPDATE jobs SET status = 'running', worker_id = 'w', attempt = 1,"
        " lease_expires_at = now() + interval '1 hour' WHERE status = 'pending'"
    )
    queue_shaped.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    rows = [{"id": 30000 + i, "attempt": 1, "result": "{}", "now": now} for i in range(100)]
    shown = plan(queue_shaped, COMPLETE_CHECKED_AT_ONCE.sql, **COMPLETE_CHECKED_AT_ONCE.parameters(rows))
    assert re.search(r"Index Cond: \(id = ANY", shown), shown
    assert "jobs_pkey" in shown, shown
    assert not any(
        index in shown for index in ("ix_jobs_lease", "ix_jobs_ready", "ix_jobs_delayed", "ix_jobs_lag")
    ), shown
    assert "Seq Scan on jobs" not in shown and "Loop" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_jobs_events_are_read_through_the_jobs_index(queue_shaped: Any) -> None:
    """Job.events (the dashboard's timeline, or a page's worth batched) reads only the asked
    jobs' rows of job_events, however many other jobs' events there are."""
    queue_shaped.execute(
        "INSERT INTO job_events (job_id, kind, status, at)"
        " SELECT g / 3, 'ENQUEUED', 'pending', now() FROM generate_series(3, 120000) AS g"
    )
    queue_shaped.execute("ANALYZE job_events")
    queue_shaped.execute("SET plan_cache_mode = force_generic_plan")
    shown = plan(queue_shaped, PostgresStatements.EVENTS_OF_JOBS, ids="[30000, 30001, 29000]", limit=50)
    assert "ix_job_events_job" in shown and "Seq Scan" not in shown, shown
