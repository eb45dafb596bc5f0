"""SQLite's reads: pages of jobs through the index that fits, the queue's lag, when the next
delayed job is due, and every request's key checks."""

from __future__ import annotations

import functools

from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.sqlite.statements.fragments import DELAYED, READY, each_type
from queuelog.storage.statements import STATUS_VALUES_IN_ORDER, Statements, status_literal


def _earliest(type_count: int, template: str) -> str:
    return f"SELECT MIN(run_at) FROM ({each_type(type_count, template)})"


@functools.lru_cache(maxsize=64)
def next_due_statement(type_count: int) -> str:
    return _earliest(
        type_count,
        "SELECT MIN(run_at) AS run_at FROM jobs INDEXED BY ix_jobs_delayed"
        f" WHERE type = :type{{i}} AND {DELAYED}",
    )


_READY_HEAD = (
    "SELECT type, run_at FROM jobs INDEXED BY ix_jobs_lag WHERE type = :type{{i}} AND {ready}{scope}"
    " ORDER BY run_at LIMIT 1"
)
_DUE_HEAD = (
    "SELECT type, run_at FROM jobs INDEXED BY ix_jobs_delayed WHERE type = :type{{i}} AND {delayed}"
    " AND run_at <= :now{scope} ORDER BY run_at LIMIT 1"
)


def _oldest_due(type_count: int, scope: str) -> str:
    ready = _READY_HEAD.format(ready=READY, scope=scope)
    due = _DUE_HEAD.format(delayed=DELAYED, scope=scope)
    return each_type(type_count, f"{ready}) UNION ALL SELECT * FROM ({due}")


@functools.lru_cache(maxsize=64)
def oldest_due_statement(type_count: int) -> str:
    return _oldest_due(type_count, "")


@functools.lru_cache(maxsize=64)
def oldest_due_of_statement(type_count: int) -> str:
    return _oldest_due(type_count, " AND created_by = :created_by")


# The filter's index of a page: (status, type) filtered on -> its name.
_FILTER_INDEXES = {
    (True, False): "ix_jobs_status",
    (False, True): "ix_jobs_type",
    (True, True): "ix_jobs_type_status",
}


@functools.cache
def list_statement(
    by_creator: bool, by_worker: bool, statuses: tuple[str, ...], job_type: bool, after: bool
) -> str:
    """`jobs(...)`, newest first, through the filter's index, testing the caller on each row;
    with several statuses, each status's part, merged. A caller who sees only its own jobs
    names the filter's index: SQLite has no statistics to choose between it and the
    caller's own, so list_jobs does, from the counters (operations/read_plans.py), and reads the
    caller's own through scope_page_statement."""
    filters = []
    if by_creator and by_worker:
        filters.append("(created_by = :name OR worker_id = :name)")
    elif by_creator:
        filters.append("created_by = :name")
    elif by_worker:
        filters.append("worker_id = :name")
    if job_type:
        filters.append("type = :type")
    if after:
        filters.append("id < :after")
    index = _FILTER_INDEXES.get((bool(statuses), job_type)) if by_creator != by_worker else None
    indexed = f" INDEXED BY {index}" if index is not None else ""

    def part(status: str | None) -> str:
        terms = [*filters, f"status = {status_literal(status)}"] if status is not None else filters
        where = " WHERE " + " AND ".join(terms) if terms else ""
        return f"SELECT {JOB_COLUMN_LIST} FROM jobs{indexed}{where} ORDER BY id DESC LIMIT :limit"

    return _newest_of_each([part(status) for status in statuses or (None,)])


def _newest_of_each(parts: list[str]) -> str:
    """The first `limit` rows of these parts together, newest first: each part is newest
    first and has `limit` rows at most, so what is sorted is bounded by the page (SQLite
    merges the parts, but sorts each part's rows first: it does not know their order)."""
    if len(parts) == 1:
        return parts[0]
    return " UNION ALL ".join(f"SELECT * FROM ({part})" for part in parts) + " ORDER BY id DESC LIMIT :limit"


@functools.cache
def scope_page_statement(by_worker: bool, statuses: tuple[str, ...], job_type: bool) -> str:
    """A scoped caller's page through its own index (Statements.scope_page): each status's
    part walks (name, status) from `after` down, in id order, and stops at the page's end;
    `+type` keeps the type's index out of the plan."""
    column, index = (
        ("worker_id", "ix_jobs_worker_status") if by_worker else ("created_by", "ix_jobs_creator_status")
    )
    of_type = " AND +type = :type" if job_type else ""
    return _newest_of_each(
        [
            f"SELECT {JOB_COLUMN_LIST} FROM jobs INDEXED BY {index}"
            f" WHERE {column} = :name AND status = {status_literal(status)}{of_type} AND id < :after"
            " ORDER BY id DESC LIMIT :limit"
            for status in statuses
        ]
    )


_HELD_OF_SCHEDULE = (
    "worker_id = :worker AND schedule_name = :schedule AND (:status IS NULL OR status = :status)"
    " AND (:type IS NULL OR type = :type)"
)


@functools.cache
def held_schedule_jobs_statement(by_worker: bool, count: bool) -> str:
    """A schedule's jobs held by a worker (Statements.held_schedule_jobs), through the
    worker's index or the schedule's. The worker's index gives id order one status at a
    time: a page reads each status's part (its condition on `:status` is tested once, before
    the walk) and merges them."""
    index = "ix_jobs_worker_status" if by_worker else "ix_jobs_schedule"
    if count:
        return f"SELECT count(*) FROM jobs INDEXED BY {index} WHERE {_HELD_OF_SCHEDULE}"
    if not by_worker:
        return (
            f"SELECT {JOB_COLUMN_LIST} FROM jobs INDEXED BY {index} WHERE {_HELD_OF_SCHEDULE}"
            " AND id < :after ORDER BY id DESC LIMIT :limit"
        )
    return _newest_of_each(
        [
            f"SELECT {JOB_COLUMN_LIST} FROM jobs INDEXED BY {index}"
            f" WHERE worker_id = :worker AND status = {status_literal(status)}"
            f" AND (:status IS NULL OR :status = {status_literal(status)}) AND schedule_name = :schedule"
            " AND (:type IS NULL OR type = :type) AND id < :after ORDER BY id DESC LIMIT :limit"
            for status in STATUS_VALUES_IN_ORDER
        ]
    )


class ReadStatements(Statements, part=True):
    """Pages of jobs, the lag, the next due job, and the key checks."""

    next_due = staticmethod(next_due_statement)
    oldest_due = staticmethod(oldest_due_statement)
    oldest_due_of = staticmethod(oldest_due_of_statement)
    # Through the creator's own PENDING jobs, for a creator with fewer of them than the queue
    # has (read_plans.plan_oldest_pending chooses, from the counters).
    OLDEST_DUE_AMONG_OWN = (
        "SELECT MIN(run_at) FROM jobs INDEXED BY ix_jobs_creator_status"
        " WHERE created_by = :created_by AND status = 'pending' AND delayed <> 2 AND run_at <= :now"
        " AND type IN (SELECT value FROM json_each(:types))"
    )
    list_jobs = staticmethod(list_statement)
    scope_page = staticmethod(scope_page_statement)
    held_schedule_jobs = staticmethod(held_schedule_jobs_statement)
    ACTIVE_KEY = (
        "SELECT name, roles, max_priority, created_at FROM api_keys"
        " WHERE key_hash = :key_hash AND revoked_at IS NULL"
    )
    # Whether a key still works: a waiting claim asks inside its transaction (revoked: no claim).
    KEY_IS_ACTIVE = "SELECT 1 FROM api_keys WHERE name = :name AND revoked_at IS NULL"
    KEY_GENERATION = "SELECT generation, types_generation FROM key_state WHERE id = 1"
    PING = "SELECT 1"
