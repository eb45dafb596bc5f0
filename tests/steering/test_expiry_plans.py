"""Expiry costs nothing to jobs without one, and is found through its index (API.md section 12).

A claim must never take a job past its expiresAt, even before the sweep reaches it: its head
reads carry `(expires_at IS NULL OR expires_at > now)`, and so does CLAIM_IDS. Measured here
with EXPLAIN on both databases: every claim statement's plan is the one it has with the term
taken out (the same indexes, in the same order, the same nodes; on PostgreSQL a filter on
the rows its heads lock anyway), on a queue of 40,000 jobs analyzed and on one never
analyzed, as a server runs them (custom and generic plans). And the sweep and the look
before it read ix_jobs_expiry, never the table, whatever the statistics say; the edit and
the snooze find their job by key.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Databases, migrate
from prepared_plans import explain_prepared
from storage.test_postgres_plans import FILL

from queuelog.storage.postgres.statements import PostgresStatements
from queuelog.storage.postgres.statements.fragments import UNEXPIRED as PG_UNEXPIRED
from queuelog.storage.sqlite.statements import SqliteStatements
from queuelog.storage.sqlite.statements.fragments import UNEXPIRED as SQLITE_UNEXPIRED
from queuelog.storage.statements import Statements, per_type_params

EXPIRING = """
UPDATE jobs SET expires_at = now() + interval '1 hour' WHERE status = 'pending' AND id % 40 = 0
"""


def claim_statements(sql: type[Statements]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each claim statement that carries the expiry term, with parameters to plan it by."""
    now = int(time.time() * 1_000_000)
    common = {"worker": "w", "now": now, "lease": now + 60_000_000, "limit": 10}
    types = per_type_params(["noop", "email"], [10, 10])
    return {
        "claim_jobs": (sql.claim_jobs(2), {**common, **types}),
        "claim_within_quotas": (sql.claim_within_quotas(2), {**common, **types}),
        "CLAIM_IDS": (sql.CLAIM_IDS, {**common, "ids": "[30001, 30002, 30003]"}),
    }


def without(sql: str, term: str) -> str:
    """The statement as it was before expiry: the term taken out, which it must hold."""
    assert f" AND {term}" in sql, sql
    return sql.replace(f" AND {term}", "")


# --- SQLite ---------------------------------------------------------------------------------------


def sqlite_plans(database: Path, sql: str, params: dict[str, Any]) -> list[str]:
    import sqlite3

    with sqlite3.connect(database) as connection:
        rows = connection.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return [row[-1] for row in rows]


def test_sqlite_claim_plans_do_not_change_with_the_expiry_term(tmp_path: Path) -> None:
    """The head reads read each row already (ix_jobs_ready does not cover their terms). One
    difference: CLAIM_IDS (per-key claims) tests the term on the row it rewrites, which its
    UPDATE reads all the same, so ix_jobs_status no longer answers its WHERE alone."""
    database = tmp_path / "plans.db"
    migrate(f"sqlite:///{database}")
    for name, (sql, params) in claim_statements(SqliteStatements).items():
        with_term = sqlite_plans(database, sql, params)
        before = sqlite_plans(database, without(sql, SQLITE_UNEXPIRED), params)
        if name == "CLAIM_IDS":
            covering = "SEARCH jobs USING COVERING INDEX ix_jobs_status (status=? AND id=? AND rowid=?)"
            assert before[0] == covering, before
            before[0] = covering.replace("COVERING INDEX", "INDEX")
        assert with_term == before, name
        assert "SCAN jobs" not in " | ".join(with_term), with_term


def test_sqlite_expiry_reads_its_index_and_edits_find_the_job_by_key(tmp_path: Path) -> None:
    database = tmp_path / "plans.db"
    migrate(f"sqlite:///{database}")
    for sql in (SqliteStatements.EXPIRE_DUE, SqliteStatements.NEXT_EXPIRY):
        plan = " | ".join(sqlite_plans(database, sql, {"now": 0}))
        assert "USING COVERING INDEX ix_jobs_expiry" in plan or "USING INDEX ix_jobs_expiry" in plan, plan
        assert "SCAN jobs" not in plan, plan
    by_id = {"id": 1, "attempt": 1, "now": 0, "run_at": 0, "delayed": 1}
    edit = {**by_id, "priority": 10, "max_retries": 3, "expires_at": None, "enqueued_as": None}
    for sql, params in ((SqliteStatements.SNOOZE_RUNNING, by_id), (SqliteStatements.UPDATE_PENDING, edit)):
        plan = " | ".join(sqlite_plans(database, sql, params))
        assert "INTEGER PRIMARY KEY (rowid=?)" in plan, plan


# --- PostgreSQL ----------------------------------------------------------------------------------


@pytest.fixture(params=["analyzed", "never analyzed"])
def shaped(request: pytest.FixtureRequest, databases: Databases) -> Iterator[Any]:
    """40,000 jobs, the older half completed, one pending job in 40 expiring; analyzed, or
    never (the planner has no statistics at all)."""
    import psycopg

    with psycopg.connect(databases.fresh(), autocommit=True) as connection:
        connection.execute(FILL)  # type: ignore[arg-type]
        connection.execute(EXPIRING)  # type: ignore[arg-type]
        if request.param == "analyzed":
            connection.execute("ANALYZE jobs")
        yield connection


def scans(plan: str) -> list[str]:
    """What a plan reads: the index of each index scan, `jobs` for each sequential scan."""
    found = re.findall(
        r"(?:Index Only Scan|Index Scan|Bitmap Index Scan)(?: Backward)? (?:using|on) (\w+)", plan
    )
    return found + ["jobs"] * plan.count("Seq Scan on jobs")


def pg_plan(connection: Any, sql: str, params: dict[str, Any], generic: bool) -> list[str]:
    """The plan's nodes as a server runs the statement (prepared; generic or custom), costs
    and filters left out: which indexes, in which order, under which nodes."""
    connection.execute(f"SET plan_cache_mode = {'force_generic_plan' if generic else 'force_custom_plan'}")
    explain = "EXPLAIN (COSTS OFF)"
    shown = explain_prepared(connection, sql, params, explain) if "%(" in sql else f"{explain} {sql}"
    rows = connection.execute(shown).fetchall()
    return [row[0] for row in rows if not re.match(r"\s*(Filter|Rows Removed)", row[0])]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("generic", [False, True])
def test_postgres_claim_plans_do_not_change_with_the_expiry_term(shaped: Any, generic: bool) -> None:
    for name, (sql, params) in claim_statements(PostgresStatements).items():
        with_term = pg_plan(shaped, sql, params, generic)
        assert with_term == pg_plan(shaped, without(sql, PG_UNEXPIRED), params, generic), (name, with_term)
        assert "Seq Scan on jobs" not in "\n".join(with_term), (name, with_term)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("generic", [False, True])
def test_postgres_expiry_reads_its_index_and_edits_find_the_job_by_key(shaped: Any, generic: bool) -> None:
    now = int(time.time() * 1_000_000) + 7200 * 1_000_000
    for sql, indexes in (
        (PostgresStatements.EXPIRE_DUE, {"ix_jobs_expiry", "jobs_pkey"}),
        (PostgresStatements.NEXT_EXPIRY, {"ix_jobs_expiry"}),
    ):
        plan = "\n".join(pg_plan(shaped, sql, {"now": now}, generic))
        assert set(scans(plan)) == indexes, plan
    by_id = {"id": 30000, "attempt": 1, "now": now, "run_at": now, "delayed": 1}
    edit = {**by_id, "priority": 10, "max_retries": 3, "expires_at": None, "enqueued_as": None}
    for sql, params in (
        (PostgresStatements.SNOOZE_RUNNING, by_id),
        (PostgresStatements.UPDATE_PENDING, edit),
    ):
        plan = "\n".join(pg_plan(shaped, sql, params, generic))
        assert scans(plan) == ["jobs_pkey"], plan
