"""PostgreSQL reads that must not grow with the queue walk the index of their filter.

A queue's completed jobs are its oldest ids and its pending jobs its newest. PostgreSQL's
statistics cannot see that, and for `jobs(status: COMPLETED)` newest first it would walk
the primary key backwards past every pending job (measured: 66 ms at 200k jobs, growing
with the queue). The statements name the filter's columns in their ORDER BY so that only
the filter's index gives the order; this checks the plans on a table shaped like a queue,
after ANALYZE, with EXPLAIN.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import POSTGRES, Databases, postgres_admin, require_backend
from prepared_plans import explain_prepared

from queuelog.storage.postgres.statements import PostgresStatements, PostgresWriterStatements
from queuelog.storage.schema.codec import NEW_JOB_COLUMNS
from queuelog.storage.statements import BulkWalk, per_type_params

FILL = """
INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt, run_at,
                  created_by, created_at, updated_at, finished_at)
SELECT CASE WHEN g % 2 = 0 THEN 'noop' ELSE 'email' END, '{}', 10,
       CASE WHEN g <= 20000 THEN 'completed' ELSE 'pending' END, 0, 3, 0, now(), 'p', now(), now(),
       CASE WHEN g <= 20000 THEN now() END
FROM generate_series(1, 40000) AS g
"""


class Shapes:
    """Queue-shaped databases made once per module (per xdist process), copied for each test.

    Filling 40,000 jobs and analyzing them took seconds of PostgreSQL's time per test; a copy
    (`CREATE DATABASE ... TEMPLATE`) takes a fraction of one and holds the same rows and the
    same statistics (pg_statistic is copied with the database). Autovacuum is off on the
    templates' tables, so that their statistics stay those taken at the shape (or stay
    absent) however long the module runs; each test's copy turns it back on, as a test's own
    database had it.
    """

    def __init__(self) -> None:
        self.templates: dict[str, str] = {}
        self._copies = itertools.count(1)

    def template(self, shape: str) -> str:
        """The template database of this shape (SHAPES), made on first use."""
        if shape not in self.templates:
            import psycopg

            base, statements = SHAPES[shape]
            if base is None:
                name = POSTGRES.create()
                first = (
                    "ALTER TABLE jobs SET (autovacuum_enabled = false)",
                    "ALTER TABLE job_events SET (autovacuum_enabled = false)",
                )
            else:
                name = self._copy(self.template(base), shape.replace(" ", "_"))
                first = ()
            with psycopg.connect(POSTGRES.url(name), autocommit=True) as connection:
                for sql in (*first, *statements):
                    connection.execute(sql)  # type: ignore[arg-type]
            self.templates[shape] = name
        return self.templates[shape]

    def _copy(self, template: str, suffix: str) -> str:
        name = f"{template}_{suffix}"
        postgres_admin(
            f'CREATE DATABASE "{name}" TEMPLATE "{template}"',
            f'ALTER DATABASE "{name}" SET synchronous_commit = off',
        )
        return name

    @contextlib.contextmanager
    def copy(self, shape: str) -> Iterator[Any]:
        """A connection to a database of its own of this shape."""
        import psycopg

        name = self._copy(self.template(shape), f"copy{next(self._copies)}")
        try:
            with psycopg.connect(POSTGRES.url(name), autocommit=True) as connection:
                connection.execute("ALTER TABLE jobs RESET (autovacuum_enabled)")
                connection.execute("ALTER TABLE job_events RESET (autovacuum_enabled)")
                yield connection
        finally:
            POSTGRES.drop_later(name)

    def drop(self) -> None:
        for name in self.templates.values():
            POSTGRES.drop_later(name)


# shape: (the shape it starts from, or None for a fresh database; the statements that follow)
SHAPES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    # the older half completed, the newer half pending, of two types; analyzed
    "queue": (None, (FILL, "ANALYZE jobs")),
    # the completed jobs got a worker, then statistics were taken again (a caller's own index)
    "callers": ("queue", ("UPDATE jobs SET worker_id = 'w' WHERE status = 'completed'", "ANALYZE jobs")),
    # statistics taken when no job was running, then a burst of claims
    "running burst": (
        "queue",
        (
            "UPDATE jobs SET status = 'running', worker_id = 'w', attempt = 1,"
            " lease_expires_at = now() + interval '1 hour' WHERE status = 'pending'",
        ),
    ),
}


@pytest.fixture(scope="module")
def shapes() -> Iterator[Shapes]:
    require_backend("postgresql")
    made = Shapes()
    try:
        yield made
    finally:
        made.drop()


@pytest.fixture
def queue_shaped(backend: str, shapes: Shapes) -> Iterator[Any]:
    """A database holding a queue of 40,000 jobs, analyzed: the older half completed, the
    newer half pending, of two types."""
    with shapes.copy("queue") as connection:
        yield connection


@pytest.fixture
def callers_shaped(backend: str, shapes: Shapes) -> Iterator[Any]:
    """queue_shaped, its completed jobs held by worker 'w', analyzed again."""
    with shapes.copy("callers") as connection:
        yield connection


@pytest.fixture
def running_burst(backend: str, shapes: Shapes) -> Iterator[Any]:
    """queue_shaped after a burst of claims made every pending job RUNNING, statistics not
    taken since: the planner believes running jobs are rare."""
    with shapes.copy("running burst") as connection:
        yield connection


@pytest.fixture
def never_analyzed(databases: Databases) -> Iterator[Any]:
    """The queue-shaped table right after a burst, before autovacuum has looked at it: the
    planner has no statistics at all (issue 16's backlogs were measured so)."""
    import psycopg

    with psycopg.connect(databases.fresh(), autocommit=True) as connection:
        connection.execute(FILL)  # type: ignore[arg-type]
        connection.execute(
            "UPDATE jobs SET delayed = 1, run_at = now() + interval '1 day'"
            " WHERE id % 4 = 0 AND status = 'pending'"
        )
        connection.execute("UPDATE jobs SET concurrency_key = 'k' || (id % 7) WHERE id % 3 = 0")
        yield connection


def plan(connection: Any, sql: str, **params: Any) -> str:
    """EXPLAIN of `sql` with `params`: the plan a server runs. Where the connection has
    plan_cache_mode = force_generic_plan, that is the generic plan of the prepared statement:
    `EXPLAIN sql` with bound parameters would show a plan made for the values, whatever the
    setting, and so would not show what a prepared statement runs."""
    (mode,) = connection.execute("SHOW plan_cache_mode").fetchone()
    if mode != "force_generic_plan":
        rows = connection.execute("EXPLAIN " + sql, params).fetchall()
    else:
        rows = connection.execute(explain_prepared(connection, sql, params)).fetchall()
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("has_status", "has_type", "after", "index"),
    [
        (True, False, False, "ix_jobs_status"),
        (True, False, True, "ix_jobs_status"),
        (True, True, False, "ix_jobs_type_status"),
        (True, True, True, "ix_jobs_type_status"),
    ],
)
def test_filtered_pages_walk_their_filters_index(
    queue_shaped: Any, has_status: bool, has_type: bool, after: bool, index: str
) -> None:
    for status in ("completed", "pending"):
        sql = PostgresStatements.list_jobs(False, False, (status,) if has_status else (), has_type, after)
        shown = plan(queue_shaped, sql, type="noop", after=30000, limit=21)
        assert index in shown, shown
        assert "jobs_pkey" not in shown and "Sort" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("by_worker", "index"), [(False, "ix_jobs_creator_status"), (True, "ix_jobs_worker_status")]
)
@pytest.mark.parametrize("statuses", [("pending",), ("completed",), ("pending", "running", "completed")])
@pytest.mark.parametrize("has_type", [False, True])
def test_a_callers_own_pages_walk_the_callers_index(
    callers_shaped: Any, by_worker: bool, index: str, statuses: tuple[str, ...], has_type: bool
) -> None:
    """list_jobs walks the caller's own index when the counters say so (scope_page; the
    plans on a smaller queue of issue 31's shape, with and without statistics and as
    generic plans: tests/storage/test_scoped_walks.py)."""
    sql = PostgresStatements.scope_page(by_worker, statuses, has_type)
    callers_shaped.execute("BEGIN")
    try:
        callers_shaped.execute(PostgresStatements.WALK_IN_INDEX_ORDER)
        shown = plan(callers_shaped, sql, name="w" if by_worker else "p", type="noop", after=2**62, limit=26)
    finally:
        callers_shaped.execute("ROLLBACK")
    scans = re.findall(
        r"(Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan)( Backward)?( using| on) (\w+)", shown
    )
    assert {name for *_, name in scans} == {index} and len(scans) == len(statuses), shown


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
    # The claimed rows are then found by key. Written `id IN (...)`, the generic plan took
    # the subquery's LIMIT for 10% of the table and hash-joined a scan of all of it.
    assert re.search(r"jobs_pkey on jobs\s.*\n\s+Index Cond: \(id = ANY", shown), shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("generic", [False, True])
def test_claims_read_the_ready_indexes_without_any_statistics(never_analyzed: Any, generic: bool) -> None:
    """Each index a claim may use must be the only one whose predicate its query implies
    (ix_jobs_lag and ix_jobs_ready_key carry a mark only their own statements state): with
    no statistics, PostgreSQL read a claim's 50k candidates from ix_jobs_lag and sorted them.
    A server runs these statements with generic plans (GENERIC_PLANS): those too."""
    if generic:
        never_analyzed.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    params = {**per_type_params(["noop", "email"], [10, 10], kquota=[10, 10]), "worker": "w", "now": now}
    for sql in (PostgresStatements.claim_jobs(2), PostgresStatements.ready_heads(2)):
        shown = plan(never_analyzed, sql, **params, lease=now, limit=10)
        assert "ix_jobs_ready on" in shown and "ix_jobs_ready_keyed on" in shown, shown
        assert "ix_jobs_lag" not in shown and "ix_jobs_ready_key on" not in shown, shown
    key_params = per_type_params(["noop", "email"], [5, 5], key=["k1", "k2"])
    shown = plan(never_analyzed, PostgresStatements.key_heads(2), **key_params)
    assert "ix_jobs_ready_key on" in shown and "Sort" not in shown, shown
    shown = plan(never_analyzed, PostgresStatements.KEYED_HEADS, type="noop", full="[]")
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


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("generic", [False, True])
def test_a_claim_of_any_type_promotes_each_pending_types_due_jobs_by_its_range(
    queue_shaped: Any, generic: bool
) -> None:
    """PROMOTE_PENDING reads the types with PENDING jobs from the counters, then each type's
    due delayed jobs from its range of ix_jobs_delayed: never the table, whatever the
    statistics (taken before the burst of delayed jobs)."""
    queue_shaped.execute(
        "UPDATE jobs SET delayed = 1, run_at = now() + interval '1 day'"
        " WHERE id % 3 = 0 AND status = 'pending'"
    )
    queue_shaped.execute(
        "INSERT INTO job_counts (scope, name, type, status, shard, n)"
        " VALUES ('*', '', 'noop', 'pending', 0, 10000), ('*', '', 'email', 'pending', 0, 10000)"
    )
    if generic:
        queue_shaped.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    shown = plan(queue_shaped, PostgresStatements.PROMOTE_PENDING, now=now)
    assert re.search(r"ix_jobs_delayed on jobs\s.*\n\s+Index Cond: \(\(\(type\)::text = ", shown), shown
    assert "Seq Scan on jobs" not in shown, shown


# Every statement that changes one job found by id, with its guard on the job's state.
BY_ID = [
    "COMPLETE_CHECKED",
    "COMPLETE_HELD",
    "HEARTBEAT",
    "FAIL_RUNNING",
    "EXPIRE_RUNNING",
    "REPORT_PROGRESS",
]
BY_ID_OTHER_STATES = ["CANCEL_PENDING", "RETRY_FINISHED", "REQUEST_CANCEL"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("name", BY_ID + BY_ID_OTHER_STATES)
def test_one_job_by_id_is_looked_up_by_id_even_when_statistics_are_stale(
    running_burst: Any, name: str
) -> None:
    """Statistics taken when no job was running, then a burst of claims: the planner believes
    running jobs are rare. With a guard written `status = 'running'`, `python -m bench
    --database postgresql` saw each completion walk every running job through ix_jobs_lease
    (pg_stat_user_indexes: 27M index entries read for 2,900 completions; 3.5-4.9 ms of
    PostgreSQL CPU per job). queuelog's guards leave the planner only lookups by id."""
    # The plan a server runs: psycopg prepares a statement it has run five times, and
    # PostgreSQL then plans it once for any id.
    running_burst.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    params = {
        "id": 30000, "worker": "w", "attempt": 1, "result": "{}", "now": now, "lease": now,
        "status": "completed", "retry_count": 0, "worker_id": None, "run_at": now,
        "finished_at": now, "error": None, "delayed": 0, "deadline": now, "progress": 0.5, "message": None,
        "at": now, "late": False,
    }  # fmt: skip
    shown = plan(running_burst, getattr(PostgresStatements, name), **params)
    assert re.search(r"Index Cond: .*\bid = ", shown), shown  # a point lookup: the key, or (worker_id, id)
    assert not any(
        index in shown for index in ("ix_jobs_lease", "ix_jobs_ready", "ix_jobs_delayed", "ix_jobs_lag")
    ), shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("generic", [False, True])
@pytest.mark.parametrize("analyzed", [False, True], ids=["stale", "analyzed"])
def test_the_overdue_probe_reads_only_its_own_indexes_after_a_burst_of_claims(
    running_burst: Any, generic: bool, analyzed: bool
) -> None:
    """The probe before every claim (leases, timeouts) on statistics taken when no job was
    running: written `status = 'running' AND lease_expires_at < now`, it walked all 20,000
    running jobs through ix_jobs_status and sorted them, 11 ms a claim for no row (figure 3,
    claimJobs(100)). It must seek ix_jobs_lease and ix_jobs_timeout by their columns."""
    running_burst.execute("UPDATE jobs SET timeout_at = now() + interval '1 hour' WHERE status = 'running'")
    if analyzed:
        running_burst.execute("ANALYZE jobs")
    if generic:
        running_burst.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    shown = plan(running_burst, PostgresWriterStatements.OVERDUE, now=now)
    # Each reads its index in order, up to its LIMIT: never all that is overdue, sorted.
    assert re.search(
        r"Index Scan using ix_jobs_lease on jobs\s.*\n\s+Index Cond: \(lease_expires_at <", shown
    ), shown
    assert re.search(r"Index Scan using ix_jobs_timeout on jobs\s.*\n\s+Index Cond: \(timeout_at <", shown), (
        shown
    )
    assert "ix_jobs_status" not in shown and "Seq Scan" not in shown and "Sort" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_completing_many_jobs_at_once_looks_them_up_by_id_even_when_statistics_are_stale(
    running_burst: Any,
) -> None:
    """`completeJobs` is one UPDATE over arrays on PostgreSQL: its rows must come from the
    primary key (id = ANY), whatever the statistics say about running jobs."""
    running_burst.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    ids = [30000 + i for i in range(100)]
    parameters = {"id": ids, "attempt": [1] * 100, "result": ["{}"] * 100, "worker": "w", "now": now}
    shown = plan(running_burst, PostgresStatements.COMPLETE_MANY, **parameters)
    assert re.search(r"Index Cond: \(id = ANY", shown), shown
    assert "jobs_pkey" in shown, shown
    assert not any(
        index in shown for index in ("ix_jobs_lease", "ix_jobs_ready", "ix_jobs_delayed", "ix_jobs_lag")
    ), shown
    assert "Seq Scan on jobs" not in shown and "Loop" not in shown, shown


# Every statement that reads or changes the jobs of a list of ids (a JSON array).
BY_IDS = [
    (PostgresStatements, "JOBS_BY_IDS"),
    (PostgresWriterStatements, "JOBS_BY_IDS"),
    (PostgresStatements, "CLAIM_IDS"),
    (PostgresStatements, "CANCEL_IDS"),
    (PostgresStatements, "RETRY_IDS"),
    (PostgresStatements, "REQUEST_CANCEL_IDS"),
    (PostgresStatements, "MARK_DEPENDED_ON"),
    (PostgresStatements, "JOB_STATES"),
    (PostgresStatements, "BULK_STATES"),
]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize(("statements", "name"), BY_IDS, ids=[f"{c.__name__}.{n}" for c, n in BY_IDS])
@pytest.mark.parametrize("analyzed", [False, True], ids=["never analyzed", "analyzed"])
def test_jobs_of_a_list_of_ids_are_looked_up_by_key_in_the_plan_a_server_runs(
    databases: Databases, statements: Any, name: str, analyzed: bool
) -> None:
    """psycopg prepares a statement run five times, and PostgreSQL may then run its generic
    plan. Written `id IN (SELECT ... FROM json_array_elements_text(...))`, that plan took the
    list for 100 rows and hash-joined a scan of the whole table once it held a few ten
    thousand jobs (5 ms a batch of completions at 20k jobs, growing with the table)."""
    import psycopg

    with psycopg.connect(databases.fresh(), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt,"
            " run_at, created_by, created_at, updated_at)"
            " SELECT 'noop', '{}', 10, 'pending', 0, 3, 0, now(), 'p', now(), now()"
            " FROM generate_series(1, 20000)"
        )
        if analyzed:
            connection.execute("ANALYZE jobs")
        connection.execute("SET plan_cache_mode = force_generic_plan")
        params = {"ids": "[5000, 5001, 5002]", "now": 0, "worker": "w", "lease": 0, "deadline": 0}
        shown = plan(connection, getattr(statements, name), **params)
    assert "Seq Scan" not in shown and "Hash" not in shown, shown
    by_key = r"(using jobs_pkey on jobs|Index Scan on jobs_pkey)\s.*\n\s+Index Cond: \(id = ANY"
    assert re.search(by_key, shown), shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("name", ["EVENTS_OF_JOBS", "ATTEMPT_EVENTS_OF_JOBS"])
def test_a_jobs_events_are_read_through_the_jobs_index(queue_shaped: Any, name: str) -> None:
    """Job.events (the dashboard's timeline, or a page's worth batched) and Job.attempts read
    only the asked jobs' rows of job_events, however many other jobs' events there are."""
    queue_shaped.execute(
        "INSERT INTO job_events (job_id, kind, status, at, attempt, worker_id)"
        " SELECT g / 3, 'CLAIMED', 'running', now(), 1, 'w' FROM generate_series(3, 120000) AS g"
    )
    queue_shaped.execute("ANALYZE job_events")
    queue_shaped.execute("SET plan_cache_mode = force_generic_plan")
    shown = plan(queue_shaped, getattr(PostgresStatements, name), ids="[30000, 30001, 29000]", limit=50)
    assert "ix_job_events_job" in shown and "Seq Scan" not in shown, shown


CHAINS = """
INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt, run_at,
                  created_by, created_at, updated_at, delayed, waiting_for, dependency_count,
                  has_dependents)
SELECT 'noop', '{}', 10, CASE WHEN g % 100 < 30 THEN 'completed' ELSE 'pending' END, 0, 3, 0,
       now(), 'p', now(), now(), CASE WHEN g % 100 < 31 THEN 0 ELSE 2 END,
       CASE WHEN g % 100 < 31 THEN 0 ELSE 1 END, CASE WHEN g % 100 = 1 THEN 0 ELSE 1 END, 1
FROM generate_series(1, 20000) AS g
"""


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("analyzed", [False, True], ids=["never analyzed", "analyzed"])
def test_releasing_dependents_reads_both_tables_by_key(databases: Databases, analyzed: bool) -> None:
    """A completion that releases dependents (200 chains of 100 jobs, 30 done in each, the
    next of 64 chains just completed) reads only those jobs' rows of job_dependencies and
    jobs, whatever the statistics: the join it once was read both tables whole each time.
    The edges are walked in the index's order (no sort), so that a chunk's walk stops at its
    limit."""
    import psycopg

    with psycopg.connect(databases.fresh(), autocommit=True) as connection:
        connection.execute(CHAINS)  # type: ignore[arg-type]
        connection.execute(
            "INSERT INTO job_dependencies (job_id, depends_on)"
            " SELECT id, id - 1 FROM jobs WHERE id % 100 <> 1"
        )
        if analyzed:
            connection.execute("ANALYZE jobs")
            connection.execute("ANALYZE job_dependencies")
        connection.execute("SET plan_cache_mode = force_generic_plan")
        completed = "[" + ",".join(str(100 * chain + 30) for chain in range(64)) + "]"
        shown = plan(
            connection,
            PostgresStatements.RELEASE_NEXT,
            ids=completed,
            passed=0,
            reaches=2**62,
            limit=1000,
            now=0,
        )
    assert "Seq Scan" not in shown and "Sort" not in shown, shown
    assert re.search(
        r"(Index Scan using jobs_pkey on jobs|Bitmap Index Scan on jobs_pkey)\s.*\n\s+Index Cond: \(id = ANY",
        shown,
    ), shown
    assert re.search(
        r"Index Scan using ix_job_dependencies_on\s.*\n\s+Index Cond: \(\(depends_on = ANY", shown
    ), shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("analyzed", [False, True], ids=["never analyzed", "analyzed"])
@pytest.mark.parametrize("statement", ["NEXT_EDGES", "RELEASE_NEXT"])
def test_a_settlement_walks_one_jobs_dependents_in_order_and_stops(
    databases: Databases, analyzed: bool, statement: str
) -> None:
    """A chunk of a settlement (storage/operations/settlements.py) of a job with 50,000 dependents, far
    into them, reads its next edges from ix_job_dependencies_on in order and stops at its
    limit: a bitmap scan and a sort (the plan a table not analyzed yet invited) read every
    edge left, each chunk."""
    import psycopg

    with psycopg.connect(databases.fresh(), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO jobs (type, payload, priority, status, max_retries, run_at, created_by,"
            " created_at, updated_at, delayed, waiting_for, dependency_count)"
            " SELECT 'noop', '{}', 10, 'pending', 3, now(), 'p', now(), now(), 2, 1, 1"
            " FROM generate_series(1, 50001)"
        )
        connection.execute(
            "INSERT INTO job_dependencies (job_id, depends_on) SELECT id, 1 FROM jobs WHERE id > 1"
        )
        if analyzed:
            connection.execute("ANALYZE jobs")
            connection.execute("ANALYZE job_dependencies")
        connection.execute("SET plan_cache_mode = force_generic_plan")
        sql = getattr(PostgresStatements, statement)
        shown = plan(connection, sql, ids="[1]", passed=30000, reaches=50001, limit=500, now=0)
    assert "Sort" not in shown and "Seq Scan" not in shown, shown
    assert not re.search(r"Bitmap \w+ Scan on (job_dependencies|ix_job_dependencies_on)", shown), shown
    assert re.search(
        r"Limit .*\n\s+(InitPlan.*\n.*\n\s+)?->  Index Scan using ix_job_dependencies_on", shown
    ), shown


# (walk, its index, unrequested: the walk of RUNNING jobs by cancelJobs(includeRunning))
BULK_WALKS = [
    (BulkWalk.STATUS, "ix_jobs_status", False),
    (BulkWalk.TYPE_STATUS, "ix_jobs_type_status", False),
    (BulkWalk.CREATOR, "ix_jobs_creator_status", False),
    (BulkWalk.STATUS, "ix_jobs_status", True),
    (BulkWalk.TYPE_STATUS, "ix_jobs_type_status", True),
]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("walk", "index", "unrequested"),
    BULK_WALKS,
    ids=[walk.name + ("-unrequested" if unrequested else "") for walk, _, unrequested in BULK_WALKS],
)
@pytest.mark.parametrize("statistics", ["analyzed", "never analyzed"])
@pytest.mark.parametrize("generic", [False, True])
def test_a_bulk_chunk_walks_its_index_in_order_and_stops_whatever_the_statistics(
    backend: str,
    request: pytest.FixtureRequest,
    walk: BulkWalk,
    index: str,
    unrequested: bool,
    statistics: str,
    generic: bool,
) -> None:
    """A bulk chunk's read (bulk.matching) walks its index from `after`, in order, and stops
    after `scan` rows, however few of them match (a concurrency key, createdBefore): never a
    bitmap scan of the rest of the status sorted (what PostgreSQL chose with no statistics,
    reading all of it), nor the primary key, nor the creator's every job."""
    connection = request.getfixturevalue("queue_shaped" if statistics == "analyzed" else "never_analyzed")
    connection.execute("BEGIN")
    try:
        if generic:
            connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        connection.execute(PostgresStatements.WALK_IN_INDEX_ORDER)
        sql = PostgresStatements.match_jobs(walk, walk is BulkWalk.CREATOR, True, True, True, unrequested)
        # plan_bulk walks a type's index for a type that is few among its status: none here
        params = {"status": "pending", "type": "report", "name": "p", "key": "k", "before": 0}
        shown = plan(connection, sql, **params, after=25000, scan=10000, limit=100)
    finally:
        connection.execute("ROLLBACK")
    scans = re.findall(r"(Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan)( using| on) (\w+)", shown)
    assert {name for _, _, name in scans} == {index} and len(scans) == 2, shown  # the walk and its edge
    assert "Bitmap" not in shown and "Sort" not in shown, shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("by_worker", "index"), [(True, "ix_jobs_worker_status"), (False, "ix_jobs_schedule")]
)
def test_a_workers_page_of_schedule_jobs_walks_the_index_it_was_planned_on(
    callers_shaped: Any, by_worker: bool, index: str
) -> None:
    callers_shaped.execute("UPDATE jobs SET schedule_name = 'nightly' WHERE id % 2 = 0")
    callers_shaped.execute("ANALYZE jobs")
    sql = PostgresStatements.held_schedule_jobs(by_worker, False)
    callers_shaped.execute("BEGIN")
    try:
        callers_shaped.execute(PostgresStatements.WALK_IN_INDEX_ORDER)  # as reads.py runs it
        shown = plan(
            callers_shaped, sql, worker="w", schedule="nightly", status=None, type=None, after=2**62, limit=21
        )
    finally:
        callers_shaped.execute("ROLLBACK")
    assert index in shown and "Seq Scan" not in shown, shown
    # the worker's index is walked status by status; only their pages are sorted, merged
    assert re.findall(r"Sort  \(.*\n.*Sort Key.*\n\s+->  (\w+)", shown) == (
        ["Append"] if by_worker else []
    ), shown


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("name", ["JOB_BY_IDEMPOTENCY_KEY", "JOBS_BY_IDEMPOTENCY_KEYS", "INSERT_JOB_ONCE"])
def test_idempotency_keys_are_found_in_the_partial_unique_index(queue_shaped: Any, name: str) -> None:
    """Migration 0014 keeps keys in ix_jobs_idempotency, a unique index of the jobs that have
    one: a lookup by key must still seek it in the generic plan (the planner proves `key IS
    NOT NULL` from `key = $n`), and ON CONFLICT must infer it (else PostgreSQL refuses the
    statement: no unique index matches)."""
    queue_shaped.execute("SET plan_cache_mode = force_generic_plan")
    now = int(time.time() * 1_000_000)
    params: dict[str, Any] = {"created_by": "p", "key": "k1", "keys": '["k1", "k2"]'}
    if name == "INSERT_JOB_ONCE":
        params = {column: None for column in NEW_JOB_COLUMNS} | {
            "type": "noop",
            "payload": "{}",
            "priority": 10,
            "status": "pending",
            "max_retries": 3,
            "idempotency_key": "k1",
            "run_at": now,
            "created_by": "p",
            "created_at": now,
            "updated_at": now,
        }
    shown = plan(queue_shaped, getattr(PostgresStatements, name), **params)
    if name == "INSERT_JOB_ONCE":
        assert "Conflict Arbiter Indexes: ix_jobs_idempotency" in shown, shown
    else:
        assert "Index Scan using ix_jobs_idempotency" in shown, shown
