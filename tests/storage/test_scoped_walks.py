"""The reads of a caller who sees only its own jobs walk its own index and stop at the page.

Issue 31's shape, small: a producer's delayed, completed and due jobs (the completed ones a
worker's), then 20 jobs of a second producer. A worker's page of COMPLETED jobs, the small
producer's PENDING page and its oldest pending job, a producer's cancelJobs walk and a
worker's page of a schedule's jobs must each read ix_jobs_creator_status or
ix_jobs_worker_status by both its columns, in id order, with no sort and no scan of the
table, with statistics or without (and on PostgreSQL with a prepared statement's generic
plan too). On PostgreSQL, EXPLAIN ANALYZE also shows that each page's walk stops at the
page's end: a worker's 20 newest of its 2,000 COMPLETED jobs are 21 rows of the index.
(Before migration 0013, PostgreSQL read the worker's every COMPLETED job and sorted them:
410 ms at 1M jobs.)
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import POSTGRES, migrate, require_backend
from prepared_plans import explain_prepared

from queuelog.storage.postgres.statements import PostgresStatements
from queuelog.storage.schema.types import to_micros
from queuelog.storage.sqlite.statements import SqliteStatements
from queuelog.storage.statements import LAST_ID, BulkWalk, Statements

TYPES = ("noop", "email", "report", "resize")
NOW = datetime.now(UTC)
PAGE = 21  # a page of 20 and the row that says more follow


def shape() -> list[dict[str, Any]]:
    """1,000 delayed jobs of producer p, 2,000 COMPLETED by worker w, 3 RUNNING and 1 FAILED
    by w, 996 due; then 20 `rare` jobs of producer r, 10 of them of schedule s held by w."""
    rows = []
    for i in range(4000):
        status, worker, delayed = "pending", None, 0
        if i < 1000:
            delayed = 1
        elif i < 3000:
            status, worker = "completed", "w"
        elif i < 3003:
            status, worker = "running", "w"
        elif i == 3003:
            status, worker = "failed", "w"
        rows.append(_row(TYPES[i % 4], status, "p", worker, delayed, i))
    for i in range(20):
        held = i % 2 == 0
        row = _row("rare", "running" if held else "pending", "r", "w" if held else None, 0, 4000 + i)
        row["schedule_name"] = "s" if held else None
        rows.append(row)
    return rows


def _row(
    job_type: str, status: str, creator: str, worker: str | None, delayed: int, i: int
) -> dict[str, Any]:
    at = NOW - timedelta(seconds=5000 - i)
    return {
        "type": job_type,
        "status": status,
        "created_by": creator,
        "worker_id": worker,
        "delayed": delayed,
        "run_at": at + timedelta(days=1) if delayed else at,
        "created_at": at,
        "schedule_name": None,
    }


COLUMNS = ("type", "status", "created_by", "worker_id", "delayed", "run_at", "created_at", "schedule_name")
INSERT = (
    "INSERT INTO jobs (payload, priority, max_retries, updated_at, {columns})"
    " VALUES ('{{}}', 0, 3, {created_at}, {values})"
)


@dataclass
class Shaped:
    """A database of the shape, and how to show a statement's plan there."""

    backend: str
    statements: type[Statements]
    show: Callable[[str, dict[str, Any], bool], str]  # (sql, params, walk in index order) -> plan


def _sqlite(path: str, analyzed: bool) -> Iterator[Shaped]:
    migrate(f"sqlite:///{path}")
    with contextlib.closing(sqlite3.connect(path)) as connection:
        values = ", ".join(f":{c}" for c in COLUMNS)
        sql = INSERT.format(columns=", ".join(COLUMNS), created_at=":created_at", values=values)
        micros = ("run_at", "created_at")
        connection.executemany(
            sql, [{k: to_micros(v) if k in micros else v for k, v in r.items()} for r in shape()]
        )
        if analyzed:
            connection.execute("ANALYZE")
        connection.commit()

        def show(sql: str, params: dict[str, Any], walk: bool) -> str:
            rows = connection.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
            return "\n".join(row[-1] for row in rows)

        yield Shaped("sqlite", SqliteStatements, show)


def _postgres(analyzed: bool, generic: bool) -> Iterator[Shaped]:
    import psycopg

    name = POSTGRES.create()
    try:
        # prepare_threshold=None: explain_analyze deallocates every prepared statement
        with psycopg.connect(POSTGRES.url(name), autocommit=True, prepare_threshold=None) as connection:
            connection.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")  # statistics stay as made
            values = ", ".join(f"%({c})s" for c in COLUMNS)
            sql = INSERT.format(columns=", ".join(COLUMNS), created_at="%(created_at)s", values=values)
            with connection.cursor() as cursor:
                cursor.executemany(sql, shape())  # type: ignore[arg-type]
            if analyzed:
                connection.execute("ANALYZE jobs")

            def show(sql: str, params: dict[str, Any], walk: bool) -> str:
                connection.execute("BEGIN")
                try:
                    if walk:
                        connection.execute(PostgresStatements.WALK_IN_INDEX_ORDER)
                    if generic:
                        connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                    return explain_analyze(connection, sql, params)
                finally:
                    connection.execute("ROLLBACK")

            yield Shaped("postgresql", PostgresStatements, show)
    finally:
        POSTGRES.drop_later(name)


def explain_analyze(connection: Any, sql: str, params: dict[str, Any]) -> str:
    """EXPLAIN ANALYZE of the statement as a server prepares it: with plan_cache_mode =
    force_generic_plan, the generic plan."""
    explain = explain_prepared(connection, sql, params, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF)")
    return "\n".join(row[0] for row in connection.execute(explain).fetchall())


SHAPES = {
    "sqlite analyzed": ("sqlite", True, False),
    "sqlite never analyzed": ("sqlite", False, False),
    "postgresql analyzed": ("postgresql", True, False),
    "postgresql never analyzed": ("postgresql", False, False),
    "postgresql generic plans": ("postgresql", True, True),
    "postgresql generic plans, never analyzed": ("postgresql", False, True),
}


@pytest.fixture(scope="module", params=list(SHAPES))
def shaped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shaped]:
    backend, analyzed, generic = SHAPES[request.param]
    require_backend(backend)
    if backend == "sqlite":
        yield from _sqlite(str(tmp_path_factory.mktemp("walks") / "shaped.db"), analyzed)
    else:
        yield from _postgres(analyzed, generic)


@dataclass(frozen=True)
class Read:
    statement: Callable[[type[Statements]], str]
    params: dict[str, Any]
    index: str
    columns: tuple[str, str]  # the index's two columns the walk is bounded by
    page: int | None = PAGE  # rows the walk may pass at most (None: not a page)
    walk: bool = True  # run after WALK_IN_INDEX_ORDER, as reads.py does


PAGE_PARAMS = {"type": None, "after": LAST_ID, "limit": PAGE}
READS = {
    "a worker's COMPLETED page": Read(
        lambda s: s.scope_page(True, ("completed",), False),
        {**PAGE_PARAMS, "name": "w"},
        "ix_jobs_worker_status",
        ("worker_id", "status"),
    ),
    "a worker's page of every status it has": Read(
        lambda s: s.scope_page(True, ("running", "completed", "failed"), False),
        {**PAGE_PARAMS, "name": "w"},
        "ix_jobs_worker_status",
        ("worker_id", "status"),
    ),
    "the small producer's PENDING page": Read(
        lambda s: s.scope_page(False, ("pending",), False),
        {**PAGE_PARAMS, "name": "r"},
        "ix_jobs_creator_status",
        ("created_by", "status"),
    ),
    "a producer's PENDING page of a type, after a cursor": Read(
        lambda s: s.scope_page(False, ("pending",), True),
        {**PAGE_PARAMS, "name": "p", "type": "noop", "after": 3900},
        "ix_jobs_creator_status",
        ("created_by", "status"),
        page=4 * PAGE,  # one row in four is a noop
    ),
    "the small producer's oldest pending job": Read(
        lambda s: s.OLDEST_DUE_AMONG_OWN,
        {"created_by": "r", "now": to_micros(NOW), "types": '["rare"]'},
        "ix_jobs_creator_status",
        ("created_by", "status"),
        page=20,  # its PENDING jobs, no more
        walk=False,
    ),
    "a producer's cancelJobs walk": Read(
        lambda s: s.match_jobs(BulkWalk.CREATOR, True, False, False, False),
        {"name": "r", "status": "pending", "type": None, "key": None, "before": None, "after": 0, "scan": 100}
        | {"limit": 50},
        "ix_jobs_creator_status",
        ("created_by", "status"),
        page=None,
    ),
    "a worker's page of a schedule's jobs": Read(
        lambda s: s.held_schedule_jobs(True, False),
        {**PAGE_PARAMS, "worker": "w", "schedule": "s", "status": None},
        "ix_jobs_worker_status",
        ("worker_id", "status"),
        page=None,  # each status's part passes the worker's jobs of the status, testing the schedule
    ),
}


@pytest.mark.parametrize("name", list(READS))
def test_a_scoped_read_walks_its_own_index_by_both_columns_without_a_sort(shaped: Shaped, name: str) -> None:
    read = READS[name]
    shown = shaped.show(read.statement(shaped.statements), read.params, read.walk)
    if shaped.backend == "sqlite":
        searches = re.findall(r"(SEARCH|SCAN) jobs( USING (?:COVERING )?INDEX (\w+) \(([^)]*)\))?", shown)
        assert searches, shown
        for _, _, index, terms in searches:
            assert index == read.index and terms.startswith(f"{read.columns[0]}=? AND {read.columns[1]}=?"), (
                shown
            )
        # SQLite sorts each part's rows before it merges the parts: at most a page of them
        lines = shown.splitlines()
        sorts = [i for i, line in enumerate(lines) if "TEMP B-TREE" in line]
        assert all(re.fullmatch(r"SCAN \(subquery-\d+\)", lines[i - 1]) for i in sorts), shown
        return
    scans = re.findall(
        r"(Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan)( Backward)?( using| on) (\w+)", shown
    )
    assert scans and {scan[3] for scan in scans} == {read.index}, shown
    assert "Seq Scan" not in shown, shown
    # a sort only merges the parts: at most a page of each
    sorts = re.findall(
        r"\bSort \(actual rows=\d+ loops=1\)\n\s+Sort Key: [^\n]*\n(?:\s+Sort Method[^\n]*\n)?\s+->  (\w+)",
        shown,
    )
    assert len(sorts) == shown.count("Sort (") and set(sorts) <= {"Append"}, shown
    for column in read.columns:
        assert re.search(rf"Index Cond: .*\({column}\)::text = ", shown), shown
    if read.page is not None:  # the rows each walk passed: those it gave and those it tested and left
        walks = re.findall(r"Scan[^\n]* on jobs\w* \(actual rows=(\d+)", shown)
        passed = sum(map(int, walks)) + sum(map(int, re.findall(r"Rows Removed by Filter: (\d+)", shown)))
        assert walks and passed <= read.page * len(walks), shown
