"""PostgreSQL reads that must not grow with the queue walk the index of their filter.

A queue's completed jobs are its oldest ids and its pending jobs its newest. PostgreSQL's
statistics cannot see that, and for `jobs(status: COMPLETED)` newest first it would walk
the primary key backwards past every pending job (measured: 66 ms at 200k jobs, growing
with the queue). The statements name the filter's columns in their ORDER BY so that only
the filter's index gives the order; this checks the plans on a table shaped like a queue,
after ANALYZE, with EXPLAIN.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Databases

from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.postgres_statements import CLAIM_ANY, FOR_SQLITE
from queuelog.storage.statements import list_statement

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
    sql = FOR_SQLITE[list_statement(False, False, has_status, has_type, after)]
    for status in ("completed", "pending"):
        shown = plan(queue_shaped, sql, status=status, type="noop", after=30000, limit=21)
        assert index in shown, shown
        assert "jobs_pkey" not in shown and "Sort" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_claim_reads_the_pending_index_and_skips_locked_rows(queue_shaped: Any) -> None:
    now = int(time.time() * 1_000_000) + 1_000_000  # every pending job is due
    shown = plan(queue_shaped, CLAIM_ANY, worker="w", now=now, lease=now + 60_000_000, limit=10)
    assert "ix_jobs_claim" in shown, shown
    assert "LockRows" in shown, shown
