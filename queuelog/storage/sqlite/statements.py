"""SQLite's text of every statement in statements.py, built once with SQLAlchemy Core.

operations.py runs these on the driver's connection, whose statement cache keeps each one
prepared. Constants are written into the SQL (`lit`), values are always named parameters.
SQLite's statements name the partial indexes they need (INDEXED BY): lacking statistics,
its planner may otherwise pick a status index and sort every pending row.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import and_, bindparam, func, insert, literal_column, null, or_, select, text, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.elements import BindParameter

from queuelog.model import JobStatus
from queuelog.storage.operations.read_plans import BulkWalk
from queuelog.storage.schema.codec import JOB_COLUMN_LIST, NEW_JOB_COLUMNS
from queuelog.storage.schema.tables import job_counts, job_events, job_minutes, jobs
from queuelog.storage.statements import (
    BROKEN_SCHEDULES_SQL,
    EVENT_TAIL_BATCH,
    EXPIRE_BATCH,
    LAST_ID,
    PENDING,
    PENDING_TYPES_SQL,
    PROMOTE_BATCH,
    PRUNE_BATCH,
    RUNNING,
    SCHEDULE_COLUMN_LIST,
    SCHEDULE_COUNT_SQL,
    SCHEDULES_PER_PASS,
    STATUS_VALUES_IN_ORDER,
    TERMINAL_SQL,
    TYPE_CONTROL_COLUMN_LIST,
    Statements,
    put_type_control,
    status_literal,
)

_DIALECT = sqlite.dialect(paramstyle="named")


def _sql(statement: Any) -> str:
    """The statement's SQL; every value in it is a named parameter or a literal (`lit`)."""
    compiled = statement.compile(dialect=_DIALECT)
    embedded = [name for name, bind in compiled.binds.items() if bind.value is not None or bind.expanding]
    if embedded:  # pragma: no cover - a mistake in a statement below
        raise RuntimeError(f"values must be parameters or lit(): {embedded}")
    return str(compiled)


def lit(value: str | int | None) -> Any:
    """A constant written into the SQL itself (never user input)."""
    if value is None:
        return null()
    return literal_column(f"'{value}'" if isinstance(value, str) else str(int(value)))


# Status written as a literal, not a bound parameter: SQLite only uses a partial index
# (`WHERE status = 'pending'`) when it can see the value while planning.
IS_PENDING = jobs.c.status == literal_column(f"'{PENDING}'")
IS_RUNNING = jobs.c.status == literal_column(f"'{RUNNING}'")
_INSERT_VALUES: dict[str, BindParameter[Any]] = {name: bindparam(name) for name in NEW_JOB_COLUMNS}


def _adding_to(table: Any) -> str:
    """Upsert that adds `n` to the row with these keys (every primary key column)."""
    keys = [c.name for c in table.primary_key.columns]
    return _sql(
        sqlite.insert(table)
        .values({n: bindparam(n) for n in (*keys, "n")})
        .on_conflict_do_update(index_elements=keys, set_={"n": table.c.n + literal_column("excluded.n")})
    )


READY = "status = 'pending' AND delayed = 0"
DELAYED = "status = 'pending' AND delayed = 1"


def _each_type(count: int, template: str) -> str:
    """`template` once per type (`{i}` its number), joined by UNION ALL."""
    return " UNION ALL ".join(f"SELECT * FROM ({template.format(i=i)})" for i in range(count))


# A type's ready jobs in claim order: those without a key (ix_jobs_ready), or with one
# (ix_jobs_ready_keyed), each index named (INDEXED BY): lacking statistics, SQLite's planner
# may otherwise pick a status index and sort every pending row.
_UNKEYED_HEAD = (
    "SELECT {columns} FROM jobs INDEXED BY ix_jobs_ready WHERE type = :type{{i}} AND {ready}"
    " AND concurrency_key IS NULL ORDER BY priority DESC, created_at, id LIMIT {limit}"
)
_KEYED_HEAD = (
    "SELECT {columns} FROM jobs INDEXED BY ix_jobs_ready_keyed WHERE type = :type{{i}} AND {ready}"
    " AND concurrency_key IS NOT NULL ORDER BY priority DESC, created_at, id LIMIT {limit}"
)
_CANDIDATE = "id, type, concurrency_key, priority, created_at"
# Set by every claim: the job's own timeout, else its type's (a correlated read by key).
_TIMEOUT_AT = (
    "timeout_at = :now + COALESCE(timeout_seconds,"
    " (SELECT c.timeout_seconds FROM type_controls AS c WHERE c.type = jobs.type)) * 1000000"
)
# A job's stamp for the change being made: the batch's clock, or the job's own last stamp when
# that is later (as on PostgreSQL; here the clock is read once the write lock is held, so only
# a clock stepped back makes a difference): a job's recorded times never run backwards.
STAMP: Any = func.max(bindparam("now"), jobs.c.updated_at)
STAMP_SQL = "max(:now, updated_at)"
# Every UPDATE of a job adds one (storage/tables.py).
NEXT_REVISION = jobs.c.revision + literal_column("1")
NEXT_REVISION_SQL = "revision = revision + 1"
_CLAIM_STAMP = "max(:now, run_at, updated_at)"
_CLAIMED = f"""
    UPDATE jobs SET status = 'running', worker_id = :worker, claimed_at = {_CLAIM_STAMP},
        attempt = attempt + 1, lease_expires_at = :lease, updated_at = {_CLAIM_STAMP},
        {NEXT_REVISION_SQL}, {_TIMEOUT_AT}
"""


def _heads(type_count: int, columns: str, unkeyed_limit: str, keyed_limit: str) -> str:
    unkeyed = _UNKEYED_HEAD.format(columns=columns, ready=READY, limit=unkeyed_limit)
    keyed = _KEYED_HEAD.format(columns=columns, ready=READY, limit=keyed_limit)
    return _each_type(type_count, f"{unkeyed}) UNION ALL SELECT * FROM ({keyed}")


def _within_quotas(type_count: int, columns: str) -> str:
    """Each type's first `quota{i}` ready jobs, keyed and unkeyed together: the quota is the
    type's, so it applies to the merge of its two index reads, not to each of them."""
    unkeyed = _UNKEYED_HEAD.format(columns=columns, ready=READY, limit=":quota{i}")
    keyed = _KEYED_HEAD.format(columns=columns, ready=READY, limit=":quota{i}")
    return _each_type(
        type_count,
        f"SELECT * FROM ({unkeyed}) UNION ALL SELECT * FROM ({keyed})"
        " ORDER BY priority DESC, created_at, id LIMIT :quota{i}",
    )


def _claim_heads(heads: str) -> str:
    """Claim the first `limit` of `heads`, in claim order. BEGIN IMMEDIATE makes it atomic."""
    return f"""{_CLAIMED}
    WHERE status = 'pending' AND id IN (
        SELECT id FROM ({heads}) ORDER BY priority DESC, created_at, id LIMIT :limit)
    RETURNING {JOB_COLUMN_LIST}
"""


# The claim of types without controls: up to `limit` of each type's heads.
@functools.lru_cache(maxsize=64)
def claim_statement(type_count: int) -> str:
    return _claim_heads(_heads(type_count, "id, priority, created_at", ":limit", ":limit"))


@functools.lru_cache(maxsize=64)
def claim_within_quotas_statement(type_count: int) -> str:
    return _claim_heads(_within_quotas(type_count, "id, priority, created_at"))


@functools.lru_cache(maxsize=64)
def ready_heads_statement(type_count: int) -> str:
    return _heads(type_count, _CANDIDATE, ":quota{i}", ":kquota{i}")


@functools.lru_cache(maxsize=64)
def key_heads_statement(key_count: int) -> str:
    return _each_type(
        key_count,
        f"SELECT {_CANDIDATE} FROM jobs INDEXED BY ix_jobs_ready_key"
        f" WHERE type = :type{{i}} AND concurrency_key = :key{{i}} AND {READY}"
        " ORDER BY priority DESC, created_at, id LIMIT :quota{i}",
    )


@functools.lru_cache(maxsize=64)
def promote_statement(type_count: int) -> str:
    due = _each_type(
        type_count,
        "SELECT id FROM jobs INDEXED BY ix_jobs_delayed"
        f" WHERE type = :type{{i}} AND {DELAYED} AND run_at <= :now ORDER BY run_at LIMIT {PROMOTE_BATCH}",
    )
    return f"UPDATE jobs SET delayed = 0, {NEXT_REVISION_SQL} WHERE {DELAYED} AND id IN ({due})"


def _earliest(type_count: int, template: str) -> str:
    return f"SELECT MIN(run_at) FROM ({_each_type(type_count, template)})"


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
    return _each_type(type_count, f"{ready}) UNION ALL SELECT * FROM ({due}")


@functools.lru_cache(maxsize=64)
def oldest_due_statement(type_count: int) -> str:
    return _oldest_due(type_count, "")


@functools.lru_cache(maxsize=64)
def oldest_due_of_statement(type_count: int) -> str:
    return _oldest_due(type_count, " AND created_by = :created_by")


_HOLDER_GUARD = and_(
    jobs.c.id == bindparam("id"),
    IS_RUNNING,
    jobs.c.worker_id == bindparam("worker"),
    or_(bindparam("attempt").is_(None), jobs.c.attempt == bindparam("attempt")),
)
_COMPLETED_VALUES = {
    "status": lit(JobStatus.COMPLETED.value),
    "result": bindparam("result"),
    "finished_at": STAMP,
    "lease_expires_at": lit(None),
    "timeout_at": lit(None),
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}
_FAILURE_VALUES = {
    "status": bindparam("status"),
    "retry_count": bindparam("retry_count"),
    "worker_id": bindparam("worker_id"),
    "lease_expires_at": lit(None),
    "run_at": bindparam("run_at"),
    "delayed": bindparam("delayed"),
    "timeout_at": lit(None),
    "finished_at": bindparam("finished_at"),
    "error": bindparam("error"),
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}
_RETRIED_VALUES = {
    "status": lit(PENDING),
    "retry_count": lit(0),
    "run_at": STAMP,
    "delayed": lit(0),
    "waiting_for": lit(0),  # dependencies.restore_waiting counts those still open
    "worker_id": lit(None),
    "lease_expires_at": lit(None),
    "timeout_at": lit(None),
    "finished_at": lit(None),
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}
_CANCELLED_VALUES = {
    "status": lit(JobStatus.CANCELLED.value),
    "finished_at": STAMP,
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}
# A finished job that no PENDING job waits for (API.md section 10: a job retried after its
# dependency failed waits for it again). Only a job with dependents that did not complete can
# be waited for, so the common finished job costs no read; for the others, their dependents
# are looked up by key.
_UNAWAITED = """(has_dependents = 0 OR status = 'completed' OR NOT EXISTS (
    SELECT 1 FROM job_dependencies AS d JOIN jobs AS w ON w.id = d.job_id
    WHERE d.depends_on = jobs.id AND w.status = 'pending' AND w.delayed = 2))"""
_SEEN_RUNNING = and_(jobs.c.id == bindparam("id"), IS_RUNNING, jobs.c.attempt == bindparam("attempt"))


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
    caller's own, so list_jobs does, from the counters (read_plans.py), and reads the
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


# Each bulk walk's index, and the terms that walk it (bulk.py).
_BULK_WALKS = {
    BulkWalk.STATUS: ("ix_jobs_status", "status = :status"),
    BulkWalk.TYPE_STATUS: ("ix_jobs_type_status", "type = :type AND status = :status"),
    BulkWalk.CREATOR: ("ix_jobs_creator_status", "created_by = :name AND status = 'pending'"),
}


@functools.cache
def match_statement(walk: BulkWalk, by_creator: bool, job_type: bool, key: bool, before: bool) -> str:
    """A bulk chunk's jobs of one status (Statements.match_jobs): the walk's index from
    `after` up to its `scan`-th row (`edge`), a range of the index however few rows match."""
    index, walked = _BULK_WALKS[walk]
    filters = [walked, "id > :after", f"id <= coalesce((SELECT id FROM edge), {LAST_ID})"]
    if job_type and walk is not BulkWalk.TYPE_STATUS:
        filters.append("type = :type")
    if key:
        filters.append("concurrency_key = :key")
    if before:
        filters.append("created_at < :before")
    if by_creator and walk is not BulkWalk.CREATOR:
        filters.append("created_by = :name")
    return (
        f"WITH edge AS (SELECT id FROM jobs INDEXED BY {index} WHERE {walked} AND id > :after"
        " ORDER BY id LIMIT 1 OFFSET :scan - 1)"
        f" SELECT * FROM (SELECT id, status, worker_id FROM jobs INDEXED BY {index}"
        f" WHERE {' AND '.join(filters)} ORDER BY id LIMIT :limit)"
        " UNION ALL SELECT id, NULL, NULL FROM edge"
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


class SqliteStatements(Statements):
    INSERT_JOB = _sql(insert(jobs).values(_INSERT_VALUES))
    INSERT_JOB_ONCE = _sql(
        sqlite.insert(jobs)
        .values(_INSERT_VALUES)
        .on_conflict_do_nothing(index_elements=["created_by", "idempotency_key"])
    )
    JOB_BY_IDEMPOTENCY_KEY = _sql(
        select(*jobs.c).where(
            jobs.c.created_by == bindparam("created_by"), jobs.c.idempotency_key == bindparam("key")
        )
    )
    JOBS_BY_IDEMPOTENCY_KEYS = (
        f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE created_by = :created_by"
        " AND idempotency_key IN (SELECT value FROM json_each(:keys))"
    )
    JOB_BY_ID = _sql(select(*jobs.c).where(jobs.c.id == bindparam("id")))
    JOBS_BY_IDS = f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))"

    claim_jobs = staticmethod(claim_statement)
    claim_within_quotas = staticmethod(claim_within_quotas_statement)
    promote_due = staticmethod(promote_statement)
    ready_heads = staticmethod(ready_heads_statement)
    key_heads = staticmethod(key_heads_statement)
    CLAIM_IDS = f"""{_CLAIMED}
        WHERE status = 'pending' AND id IN (SELECT value FROM json_each(:ids))
        RETURNING {JOB_COLUMN_LIST}
    """
    TIME_OUT_RUNNING = _sql(
        update(jobs).where(_SEEN_RUNNING, jobs.c.timeout_at < bindparam("now")).values(_FAILURE_VALUES)
    )
    HEARTBEAT = _sql(
        update(jobs)
        .where(_HOLDER_GUARD)
        .values(lease_expires_at=bindparam("lease"), updated_at=STAMP, revision=NEXT_REVISION)
        .returning(*jobs.c)
    )
    COMPLETE_HELD = _sql(update(jobs).where(_HOLDER_GUARD).values(_COMPLETED_VALUES).returning(*jobs.c))
    COMPLETE_CHECKED = _sql(update(jobs).where(_SEEN_RUNNING).values(_COMPLETED_VALUES))
    FAIL_RUNNING = _sql(update(jobs).where(_SEEN_RUNNING).values(_FAILURE_VALUES).returning(*jobs.c))
    EXPIRE_RUNNING = _sql(
        update(jobs).where(_SEEN_RUNNING, jobs.c.lease_expires_at < bindparam("now")).values(_FAILURE_VALUES)
    )
    # RUNNING jobs past their lease, then those past their timeout: one probe for both.
    OVERDUE = f"""
        SELECT * FROM (SELECT {JOB_COLUMN_LIST}, 'lease' FROM jobs INDEXED BY ix_jobs_lease
            WHERE status = 'running' AND lease_expires_at < :now
            ORDER BY lease_expires_at LIMIT {EXPIRE_BATCH})
        UNION ALL
        SELECT * FROM (SELECT {JOB_COLUMN_LIST}, 'timeout' FROM jobs INDEXED BY ix_jobs_timeout
            WHERE status = 'running' AND timeout_at IS NOT NULL AND timeout_at < :now
            ORDER BY timeout_at LIMIT {EXPIRE_BATCH})
    """

    CANCEL_PENDING = _sql(
        update(jobs)
        .where(jobs.c.id == bindparam("id"), IS_PENDING)
        .values(_CANCELLED_VALUES)
        .returning(*jobs.c)
    )
    RETRY_FINISHED = _sql(
        update(jobs)
        .where(jobs.c.id == bindparam("id"), jobs.c.status.in_([lit("failed"), lit("cancelled")]))
        .values(_RETRIED_VALUES)
        .returning(*jobs.c)
    )
    match_jobs = staticmethod(match_statement)
    CANCEL_IDS = _sql(
        update(jobs)
        .where(
            IS_PENDING, jobs.c.id.in_(select(literal_column("value")).select_from(text("json_each(:ids)")))
        )
        .values(_CANCELLED_VALUES)
        .returning(*jobs.c)
    )
    RETRY_IDS = _sql(
        update(jobs)
        .where(
            jobs.c.status.in_([lit("failed"), lit("cancelled")]),
            jobs.c.id.in_(select(literal_column("value")).select_from(text("json_each(:ids)"))),
        )
        .values(_RETRIED_VALUES)
        .returning(*jobs.c)
    )
    PRUNABLE = f"""
        SELECT id FROM jobs INDEXED BY ix_jobs_finished
        WHERE finished_at < :cutoff AND status IN {TERMINAL_SQL} AND {_UNAWAITED} LIMIT {PRUNE_BATCH}
    """
    PRUNE = f"""
        DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND {_UNAWAITED}
        RETURNING id, type, status, created_by, worker_id
    """

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

    INSERT_EVENT = _sql(
        insert(job_events).values({n: bindparam(n) for n in ("job_id", "kind", "status", "at")})
    )
    DELETE_EVENTS_OF = "DELETE FROM job_events WHERE job_id IN (SELECT value FROM json_each(:ids))"
    MAX_EVENT_ID = "SELECT MAX(id) FROM job_events"
    EVENT_HORIZON = None  # one writer at a time: ids commit in order
    EVENTS_WITH_IDS = (
        "SELECT id, job_id, kind, status FROM job_events WHERE id IN (SELECT value FROM json_each(:ids))"
    )
    EVENTS_AFTER = (
        "SELECT id, job_id, kind, status FROM job_events WHERE id > :after"
        f" ORDER BY id LIMIT {EVENT_TAIL_BATCH}"
    )
    # Jobs' own events, the newest `limit` of each, by job and oldest first (ix_job_events_job):
    # every `Job.events` of one request in one read.
    EVENTS_OF_JOBS = (
        "SELECT job_id, kind, status, at FROM (SELECT job_id, id, kind, status, at,"
        " row_number() OVER (PARTITION BY job_id ORDER BY id DESC) AS newness FROM job_events"
        " WHERE job_id IN (SELECT value FROM json_each(:ids))) AS newest"
        " WHERE newness <= :limit ORDER BY job_id, id"
    )

    ADD_TO_COUNT = _adding_to(job_counts)
    ADD_TO_MINUTE = _adding_to(job_minutes)
    PENDING_TYPES = PENDING_TYPES_SQL
    # Sums over the shards: one on a database SQLite wrote, more on one copied from PostgreSQL.
    COUNTS_OF_SCOPES = (
        "SELECT scope, name, type, status, SUM(n) FROM job_counts"
        " WHERE (scope, name) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:scopes))"
        " GROUP BY scope, name, type, status"
    )
    MINUTES_OF_SCOPES = (
        "SELECT scope, name, minute, status, SUM(n) FROM job_minutes WHERE minute >= :since"
        " AND (scope, name) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:scopes))"
        " GROUP BY scope, name, minute, status"
    )
    PRUNE_MINUTES = "DELETE FROM job_minutes WHERE minute < :before"

    TYPE_CONTROLS = f"SELECT {TYPE_CONTROL_COLUMN_LIST} FROM type_controls ORDER BY type"
    TYPE_INDEX = True
    COMPLETE_MANY = None
    PROMOTE_READS_CONTROLS = False  # an UPDATE without RETURNING: TYPE_CONTROLS follows
    PROMOTE_PENDING = None  # one writer, no round trips: promote_due of the types read
    # BEGIN IMMEDIATE already holds the write lock, and the batch took its time after it:
    # nothing to lock, no clock to read again (NULL)
    LOCK_CONTROLLED_CLAIMS = "SELECT NULL"
    RUNNING_PER_KEY = (
        "SELECT concurrency_key, count(*) FROM jobs INDEXED BY ix_jobs_running_key"
        " WHERE type = :type AND status = 'running' AND concurrency_key IS NOT NULL"
        " GROUP BY concurrency_key"
    )
    KEYED_WALK = (
        f"SELECT {_CANDIDATE} FROM jobs INDEXED BY ix_jobs_ready_keyed WHERE type = :type AND {READY}"
        " AND concurrency_key IS NOT NULL AND concurrency_key NOT IN (SELECT value FROM json_each(:full))"
        " ORDER BY priority DESC, created_at, id LIMIT :walk"
    )
    # Each key's head: the keys of the type's ready jobs by a loose index scan (one seek a
    # key), then each key's first job in claim order (one more).
    KEYED_HEADS = f"""
        WITH RECURSIVE ready_keys(key) AS (
            SELECT MIN(concurrency_key) FROM jobs INDEXED BY ix_jobs_ready_key
            WHERE type = :type AND {READY} AND concurrency_key IS NOT NULL
            UNION ALL
            SELECT (SELECT MIN(concurrency_key) FROM jobs INDEXED BY ix_jobs_ready_key
                WHERE type = :type AND {READY} AND concurrency_key > ready_keys.key)
            FROM ready_keys WHERE ready_keys.key IS NOT NULL)
        SELECT {_CANDIDATE} FROM jobs WHERE id IN (
            SELECT (SELECT id FROM jobs INDEXED BY ix_jobs_ready_key
                WHERE type = :type AND concurrency_key = ready_keys.key AND {READY}
                ORDER BY priority DESC, created_at, id LIMIT 1)
            FROM ready_keys
            WHERE key IS NOT NULL AND key NOT IN (SELECT value FROM json_each(:full)))
    """
    # Each key with claims in the window (a loose index scan), its count (last seq - first
    # seq in the window + 1) and its oldest claim: three seeks a key, whatever the count.
    RATE_WINDOW = """
        WITH RECURSIVE window_keys(key) AS (
            SELECT MIN(key) FROM rate_claims INDEXED BY ix_rate_claims_window WHERE type = :type
            UNION ALL
            SELECT (SELECT MIN(key) FROM rate_claims INDEXED BY ix_rate_claims_window
                WHERE type = :type AND key > window_keys.key)
            FROM window_keys WHERE window_keys.key IS NOT NULL),
        ends(key, last_seq, first_seq, first_at) AS (
            SELECT key,
                (SELECT seq FROM rate_claims INDEXED BY ix_rate_claims_window
                    WHERE type = :type AND key = window_keys.key ORDER BY at DESC, seq DESC LIMIT 1),
                (SELECT seq FROM rate_claims INDEXED BY ix_rate_claims_window
                    WHERE type = :type AND key = window_keys.key AND at > :since ORDER BY at, seq LIMIT 1),
                (SELECT at FROM rate_claims INDEXED BY ix_rate_claims_window
                    WHERE type = :type AND key = window_keys.key AND at > :since ORDER BY at, seq LIMIT 1)
            FROM window_keys WHERE key IS NOT NULL)
        SELECT key, last_seq - first_seq + 1, first_at FROM ends WHERE first_seq IS NOT NULL
    """
    FORGET_RATE_CLAIMS = "DELETE FROM rate_claims WHERE type = :type AND at <= :since"
    # The key's next sequence number, at no earlier than its last claim's (a clock that
    # stepped back would otherwise break the order that RATE_WINDOW's count relies on).
    INSERT_RATE_CLAIM = """
        INSERT INTO rate_claims (type, key, at, seq)
        SELECT :type, :key, MAX(:at, COALESCE(MAX(at), :at)), COALESCE(MAX(seq), 0) + 1 FROM (
            SELECT at, seq FROM rate_claims INDEXED BY ix_rate_claims_window
            WHERE type = :type AND key = :key ORDER BY at DESC, seq DESC LIMIT 1)
    """
    PUT_TYPE_CONTROL = put_type_control(lambda name: f":{name}", lambda column: f":{column}")

    held_schedule_jobs = staticmethod(held_schedule_jobs_statement)
    MARK_DEPENDED_ON = (
        f"UPDATE jobs SET has_dependents = max(has_dependents, 1), {NEXT_REVISION_SQL}"
        " WHERE id IN (SELECT value FROM json_each(:ids)) RETURNING id, status, created_by, worker_id"
    )
    INSERT_DEPENDENCY = "INSERT INTO job_dependencies (job_id, depends_on) VALUES (:job_id, :depends_on)"
    DEPENDENCIES_OF_JOBS = (
        "SELECT job_id, depends_on FROM job_dependencies"
        " WHERE job_id IN (SELECT value FROM json_each(:ids)) ORDER BY job_id, depends_on"
    )
    NEXT_EDGES = """
        SELECT depends_on, job_id, spared_by FROM job_dependencies
        WHERE depends_on IN (SELECT value FROM json_each(:ids)) AND job_id > :passed AND job_id <= :reaches
        ORDER BY depends_on, job_id LIMIT :limit"""
    # The same edges as NEXT_EDGES, run just before it: the write lock holds them still.
    RELEASE_NEXT = f"""
        UPDATE jobs SET waiting_for = jobs.waiting_for - d.n,
            delayed = CASE WHEN jobs.waiting_for - d.n > 0 THEN 2 WHEN jobs.run_at > :now THEN 1 ELSE 0 END,
            run_at = CASE WHEN jobs.waiting_for - d.n <= 0 AND jobs.run_at < :now
                THEN :now ELSE jobs.run_at END,
            updated_at = max(:now, jobs.updated_at), revision = jobs.revision + 1
        FROM (SELECT job_id, count(*) AS n FROM ({NEXT_EDGES}) GROUP BY job_id) AS d
        WHERE jobs.id = d.job_id AND jobs.status = 'pending' AND jobs.delayed = 2
        RETURNING jobs.type, jobs.delayed"""
    RELEASE_NEXT_RETURNS_EDGES = False
    CANCEL_DEPENDENTS = f"""
        UPDATE jobs SET status = 'cancelled', error = :error, finished_at = {STAMP_SQL},
            updated_at = {STAMP_SQL}, {NEXT_REVISION_SQL}
        WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'pending'
            AND NOT EXISTS (SELECT 1 FROM job_dependencies AS d WHERE d.job_id = jobs.id
                AND d.depends_on IN (SELECT value FROM json_each(:parents)) AND d.spared_by >= :settlement)
        RETURNING {JOB_COLUMN_LIST}"""
    HIGHEST_JOB_ID = "SELECT COALESCE(max(id), 0) FROM jobs"
    ANY_SETTLEMENT = "SELECT 1 FROM dependency_settlements LIMIT 1"
    SETTLING_JOBS = (
        "SELECT DISTINCT job_id FROM dependency_settlements"
        " WHERE job_id IN (SELECT value FROM json_each(:ids))"
    )
    INSERT_SETTLEMENT = (
        "INSERT INTO dependency_settlements (job_id, error, passed, reaches)"
        " VALUES (:job_id, :error, :passed, :reaches)"
    )
    PASS_SETTLEMENT = "UPDATE dependency_settlements SET passed = :passed WHERE id = :id"
    DELETE_SETTLEMENTS = "DELETE FROM dependency_settlements WHERE id IN (SELECT value FROM json_each(:ids))"
    MARK_SETTLING = (
        f"UPDATE jobs SET has_dependents = 2, {NEXT_REVISION_SQL}"
        " WHERE id IN (SELECT value FROM json_each(:ids))"
    )
    SETTLEMENTS_DUE = """
        SELECT id, job_id, error, passed, reaches FROM dependency_settlements AS s
        WHERE NOT EXISTS (SELECT 1 FROM dependency_settlements AS o WHERE o.job_id = s.job_id AND o.id < s.id)
        ORDER BY id LIMIT :limit"""
    _DEPENDENCIES_OF_IDS = (
        "(SELECT depends_on FROM job_dependencies WHERE job_id IN (SELECT value FROM json_each(:ids)))"
    )
    OPEN_DEPENDENCIES = f"SELECT id FROM jobs WHERE id IN {_DEPENDENCIES_OF_IDS} AND status <> 'completed'"
    SETTLEMENTS_OF_DEPENDENCIES = (
        "SELECT job_id, error, passed, reaches, id FROM dependency_settlements"
        f" WHERE job_id IN {_DEPENDENCIES_OF_IDS} ORDER BY id"
    )
    WAIT_AGAIN = f"""
        UPDATE jobs SET waiting_for = :waiting, delayed = 2, updated_at = {STAMP_SQL}, {NEXT_REVISION_SQL}
        WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'pending'
        RETURNING {JOB_COLUMN_LIST}"""
    SPARE = (
        "UPDATE job_dependencies SET spared_by = :settlement"
        " WHERE job_id = :job_id AND depends_on = :depends_on"
    )
    DEPENDENCY_OF_HELD = (
        "SELECT 1 FROM job_dependencies d JOIN jobs j ON j.id = d.job_id"
        " WHERE d.depends_on = :id AND j.status = 'running' AND j.worker_id = :worker LIMIT 1"
    )
    DELETE_DEPENDENCIES_OF = (
        "DELETE FROM job_dependencies WHERE job_id IN (SELECT value FROM json_each(:ids))"
    )
    SCHEDULES = f"SELECT {SCHEDULE_COLUMN_LIST} FROM schedules ORDER BY name"
    SCHEDULE_BY_NAME = f"SELECT {SCHEDULE_COLUMN_LIST} FROM schedules WHERE name = :name"
    PUT_SCHEDULE = f"""
        INSERT INTO schedules (name, type, cron, timezone, payload, priority, max_retries, misfire,
            overlap, paused, next_run_at, created_at, updated_at)
        VALUES (:name, :type, :cron, :timezone, :payload, :priority, :max_retries, :misfire, :overlap, 0,
            :next_run_at, :now, :now)
        ON CONFLICT (name) DO UPDATE SET type = excluded.type, cron = excluded.cron,
            timezone = excluded.timezone, payload = excluded.payload, priority = excluded.priority,
            max_retries = excluded.max_retries, misfire = excluded.misfire, overlap = excluded.overlap,
            next_run_at = CASE WHEN schedules.paused = 1 THEN NULL ELSE excluded.next_run_at END,
            updated_at = excluded.updated_at
        RETURNING {SCHEDULE_COLUMN_LIST}"""
    DELETE_SCHEDULE = "DELETE FROM schedules WHERE name = :name"
    SET_SCHEDULE_PAUSED = f"""
        UPDATE schedules SET paused = :paused, next_run_at = :next_run_at, updated_at = :now
        WHERE name = :name RETURNING {SCHEDULE_COLUMN_LIST}"""
    DUE_SCHEDULES = f"""
        SELECT {SCHEDULE_COLUMN_LIST} FROM schedules INDEXED BY ix_schedules_due
        WHERE paused = 0 AND next_run_at <= :now ORDER BY next_run_at LIMIT {SCHEDULES_PER_PASS}"""
    NEXT_SCHEDULE_AT = "SELECT min(next_run_at) FROM schedules INDEXED BY ix_schedules_due WHERE paused = 0"
    BROKEN_SCHEDULES = BROKEN_SCHEDULES_SQL
    SCHEDULE_COUNT = SCHEDULE_COUNT_SQL
    SCHEDULE_FIRED = """
        UPDATE schedules SET next_run_at = :next_run_at, last_run_at = coalesce(:last_run_at, last_run_at),
            last_job_id = coalesce(:last_job_id, last_job_id), updated_at = :now
        WHERE name = :name"""
    EXISTING_KEYS = (
        "SELECT created_by, idempotency_key FROM jobs WHERE (created_by, idempotency_key) IN"
        " (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs))"
    )
    JOB_STATES = "SELECT id, status FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))"
    WALK_IN_INDEX_ORDER = None  # match_jobs names its index (INDEXED BY)
    BULK_STATES = "SELECT id, status, worker_id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))"
    SCHEDULE_CLOCK = "SELECT alive_at FROM schedule_clock WHERE id = 1"
    LOCK_SCHEDULE_CLOCK = SCHEDULE_CLOCK
    MARK_SCHEDULE_CLOCK = "UPDATE schedule_clock SET alive_at = :now WHERE id = 1"
    ACTIVE_KEY = (
        "SELECT name, roles, max_priority, created_at FROM api_keys"
        " WHERE key_hash = :key_hash AND revoked_at IS NULL"
    )
    # Whether a key still works: a waiting claim asks inside its transaction (revoked: no claim).
    KEY_IS_ACTIVE = "SELECT 1 FROM api_keys WHERE name = :name AND revoked_at IS NULL"
    KEY_GENERATION = "SELECT generation FROM key_state WHERE id = 1"
    PING = "SELECT 1"


# The last id AUTOINCREMENT gave out in a table: SqliteConnection.insert_ids reads it on
# either side of an executemany to learn the ids of the rows it inserted.
LAST_JOB_ID = "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'"
LAST_EVENT_ID = "SELECT seq FROM sqlite_sequence WHERE name = 'job_events'"
LAST_ID_AFTER = {SqliteStatements.INSERT_JOB: LAST_JOB_ID, SqliteStatements.INSERT_EVENT: LAST_EVENT_ID}

# `queuelog copy-database`, on the source file.
IS_MIGRATED = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
GIVEN_OUT = "SELECT seq FROM sqlite_sequence WHERE name = :name"
