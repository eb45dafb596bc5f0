"""Where autovacuum does not run, a PostgreSQL server vacuums queuelog's tables itself.

storage/postgres/vacuum.py decides by autovacuum's own formula and settings (the table's, else the
server's) and does nothing where autovacuum runs; these tests check the decision on its
own, and on the real PostgreSQL (whose test cluster runs with autovacuum = off) that the
step vacuums a table with dead rows over its threshold and nothing else, that one server at
a time does it, and that a running server does it from its maintenance loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import POSTGRES, Server, require_backend

from queuelog.storage.postgres import vacuum
from queuelog.storage.postgres.vacuum import TableState, Work, work_for

# The server's settings as PostgreSQL ships them, autovacuum off.
SERVER = {
    "autovacuum": "off",
    "autovacuum_vacuum_threshold": "50",
    "autovacuum_vacuum_scale_factor": "0.2",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.2",
    "autovacuum_analyze_threshold": "50",
    "autovacuum_analyze_scale_factor": "0.1",
    "autovacuum_vacuum_cost_delay": "2ms",
    "autovacuum_vacuum_cost_limit": "-1",
}
# What migration 0013 sets on jobs.
JOBS_OPTIONS = {
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_analyze_threshold": "1000",
}


def jobs(dead: int, inserted: int = 0, changed: int = 0, **options: str) -> TableState:
    return TableState("jobs", dead, inserted, changed, 1_000_000.0, {**JOBS_OPTIONS, **options})


def test_it_does_what_autovacuum_would_by_the_tables_own_thresholds() -> None:
    # 1,000 + 2 % of 1M rows = 21,000
    assert work_for(jobs(dead=20_000), SERVER) is None
    assert work_for(jobs(dead=22_000), SERVER) == Work("jobs", vacuum=True, analyze=False)
    assert work_for(jobs(dead=0, inserted=22_000), SERVER) == Work("jobs", vacuum=True, analyze=False)
    assert work_for(jobs(dead=22_000, changed=22_000), SERVER) == Work("jobs", vacuum=True, analyze=True)
    assert work_for(jobs(dead=0, changed=22_000), SERVER) == Work("jobs", vacuum=False, analyze=True)
    assert Work("jobs", vacuum=False, analyze=True).statement == "ANALYZE (SKIP_LOCKED) jobs"
    assert Work("jobs", vacuum=True, analyze=True).statement == "VACUUM (SKIP_LOCKED, ANALYZE) jobs"
    # a table without settings of its own goes by the server's: 50 + 20 % of 300 = 110
    counts = TableState("job_counts", 111, 0, 0, 300.0, {})
    assert work_for(counts, SERVER) == Work("job_counts", vacuum=True, analyze=False)
    # never vacuumed nor analyzed: reltuples is -1, the thresholds alone count
    fresh = TableState("job_minutes", 49, 999, 49, -1.0, {})
    assert work_for(fresh, SERVER) is None


def test_it_does_nothing_where_autovacuum_runs_but_on_a_table_autovacuum_skips() -> None:
    running = {**SERVER, "autovacuum": "on"}
    assert work_for(jobs(dead=900_000, inserted=900_000, changed=900_000), running) is None
    skipped = jobs(dead=22_000, autovacuum_enabled="false")
    assert work_for(skipped, running) == Work("jobs", vacuum=True, analyze=False)


# --- on the real PostgreSQL ----------------------------------------------------------------------


@pytest.fixture
def connection() -> Iterator[Any]:
    """An autocommit connection to a fresh migrated database, whose cluster runs without
    autovacuum (this project's test cluster does; elsewhere these tests are skipped)."""
    require_backend("postgresql")
    import psycopg

    name = POSTGRES.create()
    try:
        with psycopg.connect(POSTGRES.url(name), autocommit=True) as opened:
            if opened.execute("SHOW autovacuum").fetchone()[0] != "off":
                pytest.skip("autovacuum runs on this cluster: queuelog leaves VACUUM to it")
            yield opened
    finally:
        POSTGRES.drop_later(name)


INSERT_JOBS = """
INSERT INTO jobs (type, payload, priority, status, max_retries, run_at, created_by, created_at, updated_at)
SELECT 'noop', '{}', 0, 'pending', 3, now(), 'p', now(), now() FROM generate_series(1, %(n)s)
"""


def dead_rows(connection: Any) -> tuple[int, Any]:
    """(n_dead_tup, last_vacuum) of jobs, once this session's statistics have reached the
    server (at once from PostgreSQL 15 on; a backend sends them within a second before)."""
    if connection.execute("SELECT to_regproc('pg_stat_force_next_flush') IS NOT NULL").fetchone()[0]:
        connection.execute("SELECT pg_stat_force_next_flush()")
    else:
        time.sleep(1.5)
    connection.execute("SELECT pg_stat_clear_snapshot()")
    (dead, last), *_ = connection.execute(
        "SELECT n_dead_tup, last_vacuum FROM pg_stat_user_tables WHERE relname = 'jobs'"
    ).fetchall()
    return dead, last


def test_a_table_over_its_threshold_is_vacuumed_and_then_left_alone(connection: Any) -> None:
    connection.execute(INSERT_JOBS, {"n": 3000})
    connection.execute("UPDATE jobs SET status = 'cancelled' WHERE id % 2 = 0")  # 1,500 dead rows
    assert dead_rows(connection) == (1500, None)

    done = vacuum.vacuum_where_due(connection)

    assert Work("jobs", vacuum=True, analyze=True) in done, done
    dead, last = dead_rows(connection)
    assert dead == 0 and last is not None
    assert [work.table for work in vacuum.vacuum_where_due(connection)] == []  # nothing over now
    connection.execute("UPDATE jobs SET status = 'pending' WHERE id <= 10")  # 10: under 1,000 + 2 %
    assert vacuum.vacuum_where_due(connection) == []


def test_one_server_at_a_time_vacuums(connection: Any) -> None:
    import psycopg

    connection.execute(INSERT_JOBS, {"n": 3000})
    connection.execute("UPDATE jobs SET status = 'cancelled'")
    assert dead_rows(connection) == (3000, None)
    with psycopg.connect(connection.info.dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%(lock)s)", {"lock": vacuum.VACUUM_LOCK})
        assert vacuum.vacuum_where_due(connection) == []
        other.execute("SELECT pg_advisory_unlock(%(lock)s)", {"lock": vacuum.VACUUM_LOCK})
    assert [work.table for work in vacuum.vacuum_where_due(connection)] == ["jobs"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_server_vacuums_from_its_maintenance_loop(
    backend: str, start_server: Callable[..., Server], unique: Callable[[str], str]
) -> None:
    server = start_server(env={"QUEUELOG_VACUUM_CHECK_SECONDS": "0.2"})
    if server.sql("SHOW autovacuum")[0][0] != "off":
        pytest.skip("autovacuum runs on this cluster: queuelog leaves VACUUM to it")
    producer = server.make_key(unique("producer"), "producer")
    inputs = [{"type": "email", "payload": {"n": n}} for n in range(1000)]
    document = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { job { id } } }"
    for _ in range(2):
        server.gql(document, {"i": inputs}, key=producer).ok()
    while server.gql('mutation { cancelJobs(filter: {type: "email"}) { more } }', key=producer).ok()[
        "cancelJobs"
    ]["more"]:
        pass  # 2,000 rows dead: over 1,000 + 2 % of 2,000
    deadline = time.monotonic() + 30
    while not server.sql("SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'jobs'")[0][0]:
        assert time.monotonic() < deadline, "the server never vacuumed jobs"
        time.sleep(0.2)
