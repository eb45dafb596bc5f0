"""PostgreSQL's reads: pages of jobs through the index that fits, the queue's lag, when the
next delayed job is due, and every request's key checks."""

from __future__ import annotations

import functools

from queuelog.storage.postgres.statements.fragments import (
    DELAYED,
    NOW,
    READY,
    WANTED,
    own_scope,
    same_text,
    text_list,
)
from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import STATUS_VALUES_IN_ORDER, Statements, status_literal

_NEXT_DUE = f"""
    SELECT MIN(head.run_at) FROM {WANTED} CROSS JOIN LATERAL (
        SELECT run_at FROM jobs WHERE jobs.type = wanted.type AND {DELAYED}
        ORDER BY run_at LIMIT 1) AS head
"""


def _oldest_due_sql(scope: str) -> str:
    return f"""
    SELECT wanted.type, head.run_at FROM {WANTED} CROSS JOIN LATERAL (
        (SELECT run_at FROM jobs WHERE jobs.type = wanted.type AND {READY} AND run_at IS NOT NULL{scope}
            ORDER BY run_at LIMIT 1)
        UNION ALL
        (SELECT run_at FROM jobs WHERE jobs.type = wanted.type AND {DELAYED} AND run_at <= {NOW}{scope}
            ORDER BY run_at LIMIT 1)) AS head
"""


@functools.cache
def list_statement(
    by_creator: bool, by_worker: bool, statuses: tuple[str, ...], job_type: bool, after: bool
) -> str:
    """`jobs(...)`, newest first, through the filter's index; with several statuses, each
    status's part, merged. With a status or type filter, the ORDER BY names those columns
    before id: the same order (they are fixed), but one that only the filter's index gives,
    so the planner walks that index instead of the primary key. Its statistics cannot know
    that completed jobs are the oldest: walking ids newest first would read past every
    pending job to find 20 completed ones, a page that grows with the queue. A caller's own
    index is walked by scope_page_statement."""
    filters = []
    if by_creator and by_worker:
        filters.append("(created_by = %(name)s OR worker_id = %(name)s)")
    elif by_creator or by_worker:
        filters.append(f"{'created_by' if by_creator else 'worker_id'} = %(name)s")
    # ix_jobs_type_status, ix_jobs_type, ix_jobs_status
    leading = [column for column, on in (("type", job_type), ("status", bool(statuses))) if on]
    order = ", ".join(f"{column} DESC" for column in [*leading, "id"])
    # A range, not `=`: for an equality PostgreSQL drops the column from the ORDER BY (it is
    # constant) and is back to walking the primary key.
    if job_type:
        filters.append("type >= %(type)s AND type <= %(type)s")
    if after:
        filters.append("id < %(after)s")

    def part(status: str | None) -> str:
        terms = [*filters]
        if status is not None:
            terms.append(f"status >= {status_literal(status)} AND status <= {status_literal(status)}")
        where = " WHERE " + " AND ".join(terms) if terms else ""
        return f"SELECT {JOB_COLUMN_LIST} FROM jobs{where} ORDER BY {order} LIMIT %(limit)s"

    return _newest_of_each([part(status) for status in statuses or (None,)])


def _newest_of_each(parts: list[str]) -> str:
    """The first `limit` rows of these parts together, newest first: each part has `limit`
    rows at most, so the sort that merges them is bounded by the page."""
    if len(parts) == 1:
        return parts[0]
    merged = " UNION ALL ".join(f"({part})" for part in parts)
    return f"SELECT * FROM ({merged}) AS parts ORDER BY id DESC LIMIT %(limit)s"


@functools.cache
def scope_page_statement(by_worker: bool, statuses: tuple[str, ...], job_type: bool) -> str:
    """A scoped caller's page through its own index (Statements.scope_page): each part
    starts at (name, status, after) and ends with the status (own_scope). The type is tested
    as `(...) IS TRUE`, which no index can serve. Run after WALK_IN_INDEX_ORDER: with a sort
    or a bitmap scan allowed, the planner read a worker's 500k COMPLETED jobs and sorted
    them for a page of 20 (410 ms at 1M jobs)."""
    column = "worker_id" if by_worker else "created_by"
    of_type = " AND (type = %(type)s) IS TRUE" if job_type else ""
    return _newest_of_each(
        [
            f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE {own_scope(column, 'name')} AND status = {literal}"
            f"{of_type} AND id < %(after)s ORDER BY {column} DESC, id DESC LIMIT %(limit)s"
            for literal in map(status_literal, statuses)
        ]
    )


_HELD_OF_SCHEDULE = (
    " AND (%(status)s::text IS NULL OR status = %(status)s::text)"
    " AND (%(type)s::text IS NULL OR type = %(type)s::text)"
)


@functools.cache
def held_schedule_jobs_statement(by_worker: bool, count: bool) -> str:
    """A schedule's jobs held by a worker (Statements.held_schedule_jobs). The count is the
    planner's to make, from the walked index's column. The page through ix_jobs_schedule
    names its column in the ORDER BY (as list_statement does); through the worker's index,
    each status's part walks (worker, status) as scope_page_statement does (its condition on
    `status` is a one-time filter) and the parts are merged."""
    walked, tested = ("worker_id", "schedule_name") if by_worker else ("schedule_name", "worker_id")
    value = {"worker_id": "%(worker)s", "schedule_name": "%(schedule)s"}
    where = f"{walked} >= {value[walked]} AND {walked} <= {value[walked]} AND {tested} = {value[tested]}"
    if count:
        return f"SELECT count(*) FROM jobs WHERE {where}{_HELD_OF_SCHEDULE}"
    if not by_worker:
        return (
            f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE {where}{_HELD_OF_SCHEDULE}"
            f" AND id < %(after)s ORDER BY {walked} DESC, id DESC LIMIT %(limit)s"
        )
    return _newest_of_each(
        [
            f"SELECT {JOB_COLUMN_LIST} FROM jobs"
            f" WHERE {own_scope('worker_id', 'worker')} AND status = {literal}"
            f" AND (%(status)s::text IS NULL OR %(status)s::text = {literal})"
            " AND schedule_name = %(schedule)s AND (%(type)s::text IS NULL OR type = %(type)s::text)"
            " AND id < %(after)s ORDER BY worker_id DESC, id DESC LIMIT %(limit)s"
            for literal in map(status_literal, STATUS_VALUES_IN_ORDER)
        ]
    )


class ReadStatements(Statements, part=True):
    """Pages of jobs, the lag, the next due job, and the key checks."""

    next_due = staticmethod(same_text(_NEXT_DUE))
    oldest_due = staticmethod(same_text(_oldest_due_sql("")))
    oldest_due_of = staticmethod(same_text(_oldest_due_sql(" AND created_by = %(created_by)s")))
    OLDEST_DUE_AMONG_OWN = (
        "SELECT MIN(run_at) FROM jobs WHERE created_by = %(created_by)s AND status = 'pending'"
        f" AND delayed <> 2 AND run_at <= {NOW} AND type IN {text_list('types')}"
    )
    list_jobs = staticmethod(list_statement)
    scope_page = staticmethod(scope_page_statement)
    held_schedule_jobs = staticmethod(held_schedule_jobs_statement)
    # Without statistics (a table just filled, not yet analyzed) the planner estimates a
    # handful of rows for any range of a status, and would read match_jobs's walk with a
    # bitmap scan and sort it: every row of the range, however many, to keep the first
    # `scan`. Sorts and bitmap scans are turned down for the rest of the read's transaction
    # (set_config(..., true): SET LOCAL), so that its walks go in the index's order and stop;
    # and its plans are made for the values: a generic plan, made for any type, would walk
    # the status's index and test the type, past every job of other types.
    # JIT off too: where every plan of a statement sorts after all (a caller with both roles:
    # created_by = name OR worker_id = name), the sort's penalty puts its cost far above
    # jit_above_cost, and compiling it takes longer than running it.
    WALK_IN_INDEX_ORDER = (
        "SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),"
        " set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true)"
    )
    ACTIVE_KEY = (
        "SELECT name, roles, max_priority, created_at FROM api_keys"
        " WHERE key_hash = %(key_hash)s AND revoked_at IS NULL"
    )
    KEY_IS_ACTIVE = "SELECT 1 FROM api_keys WHERE name = %(name)s AND revoked_at IS NULL"
    KEY_GENERATION = "SELECT generation, types_generation FROM key_state WHERE id = 1"
    PING = "SELECT 1"
