"""The PostgreSQL text of every statement in statements.py, under the same names.

operations.py is written once, against the names of statements.py; on PostgreSQL the
connection (postgres.py) carries `PostgresStatements` as its `.sql` (`PostgresWriterStatements`
on a writer). Values keep the shapes operations.py gives them: timestamps are integer microseconds
(turned into `timestamptz` by `ts()` on the way in, and back by a binary loader on the way
out), JSON documents are text, id and type lists are JSON arrays.

What differs from SQLite, and why:
- claims take `FOR UPDATE SKIP LOCKED`: servers on other machines claim at the same time,
  and each must skip the rows another is taking instead of waiting for them (V-06);
- rows a write reads before it updates them are locked (`FOR UPDATE`): on SQLite the
  write lock keeps them as read, here other processes write concurrently;
- lease expiry and pruning skip locked rows, so every process can run them at once;
- new ids come back from RETURNING (ids are not consecutive across processes);
- new jobs and events, which SQLite inserts row by row (executemany), go in as one
  statement over arrays (`AT_ONCE`), and so do `completeJobs`' completions.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Integer, SmallInteger, String, Text

from queuelog.storage.codec import JOB_COLUMN_LIST, NEW_JOB_COLUMNS
from queuelog.storage.read_plans import BulkWalk
from queuelog.storage.statements import (
    BROKEN_SCHEDULES_SQL,
    EVENT_TAIL_BATCH,
    EXPIRE_BATCH,
    PENDING_TYPES_SQL,
    PROMOTE_BATCH,
    PRUNE_BATCH,
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
from queuelog.storage.tables import jobs
from queuelog.storage.types import JsonDocument, UtcTimestamp


def as_timestamp(micros: str) -> str:
    """An SQL expression of integer microseconds since the epoch, as a timestamptz."""
    return f"(TIMESTAMPTZ 'epoch' + {micros} * INTERVAL '1 microsecond')"


def ts(name: str) -> str:
    """A parameter holding integer microseconds since the epoch, as a timestamptz."""
    return as_timestamp(f"%({name})s::bigint")


def id_list(name: str) -> str:
    return f"(SELECT value::bigint FROM json_array_elements_text(%({name})s::json) AS value)"


def text_list(name: str) -> str:
    return f"(SELECT value FROM json_array_elements_text(%({name})s::json) AS value)"


def among_ids(column: str, name: str) -> str:
    """`column` is one of the ids in the JSON array `name`. Written `= ANY(ARRAY(...))`, not
    `IN (SELECT ...)`: a prepared statement's generic plan cannot see the array's length and
    takes a set-returning function for 100 rows, enough to hash-join a sequential scan of a
    table of a few ten thousand rows (5 ms at 20k jobs, growing with the table); an array
    from an InitPlan is planned as a handful of keys, looked up by index."""
    return f"{column} = ANY(ARRAY{id_list(name)})"


def among_texts(column: str, name: str) -> str:
    """`column` is one of the strings in the JSON array `name` (as among_ids)."""
    return f"{column} = ANY(ARRAY{text_list(name)})"


NOW = ts("now")
# A job's stamp for the change being made: the batch's clock, or the job's own last stamp when
# that is later (a write that waited for the row's lock, behind a change from a transaction
# that began after this one), so that a job's recorded times never run backwards. In an
# UPDATE's SET, `updated_at` is the row as it was (the latest committed version: row locks
# serialise the changes of one job).
STAMP = f"GREATEST({NOW}, jobs.updated_at)"
# Every UPDATE of a job adds one: under the row's lock, so revisions grow in commit order.
NEXT_REVISION = "revision = jobs.revision + 1"


def _job_value(column: str) -> str:
    """A new job's value for `column`, from the parameter of the same name."""
    return ts(column) if isinstance(jobs.c[column].type, UtcTimestamp) else f"%({column})s"


_INSERT_COLUMNS = ", ".join(NEW_JOB_COLUMNS)
_INSERT_VALUES = ", ".join(_job_value(column) for column in NEW_JOB_COLUMNS)

READY = "status = 'pending' AND delayed = 0"
PER_KEY = "concurrency_key >= ''"  # ix_jobs_ready_key's mark (tables.py)
DELAYED = "status = 'pending' AND delayed = 1"
# One row per type asked for (the `types` array; `quotas`: at most that many of each). The
# per-type statements read each type's own index range (LATERAL), so other types' rows and
# delayed jobs are never walked; their text is the same whatever the number of types.
_WANTED = "unnest(%(types)s::text[]) AS wanted(type)"
_WANTED_QUOTAS = "unnest(%(types)s::text[], %(quotas)s::int[]) AS wanted(type, quota)"
_UNKEYED = "concurrency_key IS NULL"
_KEYED = "concurrency_key IS NOT NULL"
_CANDIDATE = "id, type, concurrency_key, priority, created_at"
# Set by every claim: the job's own timeout, else its type's (a read by key).
_TIMEOUT_AT = (
    f"timeout_at = {NOW} + COALESCE(timeout_seconds,"
    " (SELECT c.timeout_seconds FROM type_controls AS c WHERE c.type = jobs.type)) * INTERVAL '1 second'"
)
# claimed_at is never before run_at: a job a dependency released in a transaction that began
# after this one (another writer connection; its clock was read later) became due then.
_CLAIM_STAMP = f"GREATEST({NOW}, jobs.run_at, jobs.updated_at)"
_CLAIMED = f"""
    UPDATE jobs SET status = 'running', worker_id = %(worker)s, claimed_at = {_CLAIM_STAMP},
        attempt = attempt + 1, lease_expires_at = {ts("lease")}, updated_at = {_CLAIM_STAMP},
        {NEXT_REVISION}, {_TIMEOUT_AT}
"""


def _heads(columns: str, wanted: str, unkeyed_limit: str, keyed_limit: str, lock: bool) -> str:
    """Each wanted type's first ready jobs without a key and with one (two LATERAL reads:
    FOR UPDATE is not allowed under a UNION's branches, but is in their FROM)."""
    skip = " FOR UPDATE SKIP LOCKED" if lock else ""
    reads = [
        f"SELECT head.* FROM {wanted} CROSS JOIN LATERAL ("
        f"SELECT {columns} FROM jobs WHERE jobs.type = wanted.type AND {READY} AND {keyness}"
        f" ORDER BY priority DESC, created_at, id LIMIT {limit}{skip}) AS head"
        for keyness, limit in ((_UNKEYED, unkeyed_limit), (_KEYED, keyed_limit))
    ]
    return " UNION ALL ".join(reads)


def _within_quotas(columns: str) -> str:
    """Each wanted type's first `quota` ready jobs, keyed and unkeyed together: the quota is
    the type's, so it applies to the merge of its two index reads, not to each of them."""
    reads = [
        f"SELECT * FROM (SELECT {columns} FROM jobs WHERE jobs.type = wanted.type AND {READY}"
        f" AND {keyness} ORDER BY priority DESC, created_at, id LIMIT wanted.quota"
        f" FOR UPDATE SKIP LOCKED) AS {name}"
        for keyness, name in ((_UNKEYED, "unkeyed"), (_KEYED, "keyed"))
    ]
    return (
        f"SELECT head.* FROM {_WANTED_QUOTAS} CROSS JOIN LATERAL ("
        f"SELECT * FROM ({' UNION ALL '.join(reads)}) AS both_heads"
        " ORDER BY priority DESC, created_at, id LIMIT wanted.quota) AS head"
    )


def _claim_heads(heads: str) -> str:
    """Claim the first `limit` of `heads`, in claim order."""
    return f"""{_CLAIMED}
    WHERE id = ANY(ARRAY(
        SELECT heads.id FROM ({heads}) AS heads
        ORDER BY heads.priority DESC, heads.created_at, heads.id
        LIMIT %(limit)s))
    RETURNING {JOB_COLUMN_LIST}
"""


_CLAIM = _claim_heads(_heads("id, priority, created_at", _WANTED, "%(limit)s", "%(limit)s", True))
_READY_HEADS = _heads(
    _CANDIDATE,
    "unnest(%(types)s::text[], %(quotas)s::int[], %(kquotas)s::int[]) AS wanted(type, quota, kquota)",
    "wanted.quota",
    "wanted.kquota",
    True,
)
_CLAIM_WITHIN_QUOTAS = _claim_heads(_within_quotas("id, priority, created_at"))
_KEY_HEADS = f"""
    SELECT head.* FROM unnest(%(types)s::text[], %(keys)s::text[], %(quotas)s::int[])
        AS wanted(type, key, quota)
    CROSS JOIN LATERAL (
        SELECT {_CANDIDATE} FROM jobs
        WHERE jobs.type = wanted.type AND concurrency_key = wanted.key AND {READY} AND {PER_KEY}
        ORDER BY priority DESC, created_at, id LIMIT wanted.quota FOR UPDATE SKIP LOCKED) AS head
"""
_TYPE_CONTROLS = f"SELECT {TYPE_CONTROL_COLUMN_LIST} FROM type_controls ORDER BY type"


def _promote(wanted: str) -> str:
    """Make the due delayed jobs of the `wanted` types ready, then read the controls (a
    data-modifying WITH runs whatever the query reads)."""
    return f"""
    WITH promoted AS (UPDATE jobs SET delayed = 0, {NEXT_REVISION} WHERE id = ANY(ARRAY(
        SELECT due.id FROM {wanted} CROSS JOIN LATERAL (
            SELECT id FROM jobs WHERE jobs.type = wanted.type AND {DELAYED} AND run_at <= {NOW}
            ORDER BY run_at LIMIT {PROMOTE_BATCH} FOR UPDATE SKIP LOCKED) AS due)))
    {_TYPE_CONTROLS}
"""


_PROMOTE = _promote(_WANTED)
# The types that have PENDING jobs (a claim of any type), read in the statement, so that it
# goes in one round trip with PENDING_TYPES.
_PROMOTE_PENDING = _promote(f"({PENDING_TYPES_SQL}) AS wanted(type)")
_NEXT_DUE = f"""
    SELECT MIN(head.run_at) FROM {_WANTED} CROSS JOIN LATERAL (
        SELECT run_at FROM jobs WHERE jobs.type = wanted.type AND {DELAYED}
        ORDER BY run_at LIMIT 1) AS head
"""


def _oldest_due_sql(scope: str) -> str:
    return f"""
    SELECT wanted.type, head.run_at FROM {_WANTED} CROSS JOIN LATERAL (
        (SELECT run_at FROM jobs WHERE jobs.type = wanted.type AND {READY} AND run_at IS NOT NULL{scope}
            ORDER BY run_at LIMIT 1)
        UNION ALL
        (SELECT run_at FROM jobs WHERE jobs.type = wanted.type AND {DELAYED} AND run_at <= {NOW}{scope}
            ORDER BY run_at LIMIT 1)) AS head
"""


def _same_text(sql: str) -> functools._lru_cache_wrapper[str]:
    """A per-type statement whose text does not depend on the number of types (cached like
    SQLite's, which does)."""

    @functools.cache
    def statement(type_count: int) -> str:
        return sql

    return statement


def state_guard(condition: str) -> str:
    """A condition on the state of a row found by id, that no index can serve.

    Statements that update one job by id must take the primary key. Given `status =
    'running'` beside `id = %(id)s`, the planner may walk a partial index on status
    instead (ix_jobs_lease for running jobs, ix_jobs_claim for pending ones) whenever its
    statistics say that state is rare: right after a burst of claims, before autovacuum
    has looked again (under `python -m bench --database postgresql`, 27M entries of
    ix_jobs_lease for 2,900 completions, 3.5-4.9 ms of PostgreSQL CPU each). `(...) IS TRUE`
    (the same truth: status is NOT NULL) is a test that no index's predicate matches."""
    return f"({condition}) IS TRUE"


IS_RUNNING = state_guard("status = 'running'")
IS_PENDING = state_guard("status = 'pending'")
IS_RETRIABLE = state_guard("status IN ('failed', 'cancelled')")


def _of_row(name: str, kind: str) -> str:
    """The element of array parameter `name` that belongs to the row being updated."""
    return f"(%({name})s::{kind}[])[array_position(%(id)s::bigint[], jobs.id)]"


_HOLDER_GUARD = (
    f"id = %(id)s AND {IS_RUNNING} AND worker_id = %(worker)s"
    " AND (%(attempt)s::integer IS NULL OR attempt = %(attempt)s::integer)"
)


def _completed(now: str, result: str) -> str:
    stamp = f"GREATEST({now}, jobs.updated_at)"
    return (
        f"status = 'completed', lease_expires_at = NULL, timeout_at = NULL, finished_at = {stamp},"
        f" result = {result},"
        f" updated_at = {stamp}, {NEXT_REVISION}"
    )


_COMPLETED = _completed(NOW, "%(result)s")
_FAILURE = (
    "status = %(status)s, retry_count = %(retry_count)s, worker_id = %(worker_id)s,"
    f" lease_expires_at = NULL, run_at = {ts('run_at')}, delayed = %(delayed)s, timeout_at = NULL,"
    f" finished_at = {ts('finished_at')},"
    f" error = %(error)s, updated_at = {STAMP}, {NEXT_REVISION}"
)
_SEEN_RUNNING = f"id = %(id)s AND {IS_RUNNING} AND attempt = %(attempt)s"


# A finished job that no PENDING job waits for (API.md section 10: a job retried after its
# dependency failed waits for it again). Only a job with dependents that did not complete can
# be waited for, so the common finished job costs no read; for the others, each edge to it
# (ix_job_dependencies_on), then its dependent by key. Written as scalar subqueries so that
# this is the only plan: as EXISTS over a join, PostgreSQL hashed every edge and waiting job
# once per statement, or (the dependent's state guarded) scanned the jobs for each edge.
_UNAWAITED = """(has_dependents = 0 OR status = 'completed' OR (
    SELECT 1 FROM job_dependencies AS d WHERE d.depends_on = jobs.id
        AND (SELECT w.status = 'pending' AND w.delayed = 2 FROM jobs AS w WHERE w.id = d.job_id)
    LIMIT 1) IS NULL)"""
_RETRIED = (
    f"status = 'pending', retry_count = 0, run_at = {STAMP}, delayed = 0, waiting_for = 0, worker_id = NULL,"
    f" lease_expires_at = NULL, timeout_at = NULL, finished_at = NULL, updated_at = {STAMP}, {NEXT_REVISION}"
)
_CANCELLED = f"status = 'cancelled', finished_at = {STAMP}, updated_at = {STAMP}, {NEXT_REVISION}"


def own_scope(column: str, name: str) -> str:
    """The term that bounds a walk of a caller's own index (ix_jobs_creator_status,
    ix_jobs_worker_status) to `column` = the parameter `name`, while the ORDER BY names
    `column` before id, an order only that index gives. As `column = %(name)s`, PostgreSQL
    would drop the column from the ORDER BY (it is constant), and the primary key and the
    status index would give the same id order: with statistics saying the caller has most
    jobs, it walked the primary key past others' jobs. As a range (`>= %(name)s AND <=`),
    the B-tree would not stop at the end of the status that follows: it only stops at a
    column's bound when every column before it has `=`, so a worker's page of its 3 RUNNING
    jobs went on through its 500k COMPLETED ones. `= ANY(ARRAY[...])` of one value is an
    equality to the B-tree and none to the planner's ordering."""
    return f"{column} = ANY(ARRAY[%({name})s::text])"


# Each bulk walk's terms and the order that only its index gives (bulk.py). PostgreSQL's
# B-tree stops a walk only at a bound of its first column, or of a column after equalities:
# the type is an equality, so that the walk of ix_jobs_type_status ends with the status.
_BULK_WALKS = {
    BulkWalk.STATUS: ("status >= %(status)s AND status <= %(status)s", "status, id"),
    BulkWalk.TYPE_STATUS: ("type = %(type)s AND status >= %(status)s AND status <= %(status)s", "status, id"),
    # See own_scope: the walk stops at the creator's last PENDING job.
    BulkWalk.CREATOR: (f"{own_scope('created_by', 'name')} AND status = 'pending'", "created_by, id"),
}


@functools.cache
def match_statement(walk: BulkWalk, by_creator: bool, job_type: bool, key: bool, before: bool) -> str:
    """A bulk chunk's jobs of one status (Statements.match_jobs). The ORDER BY names the
    walk's columns before id (as list_statement does) so that only the walk's index gives
    the order. An upper bound on id would not end that walk (the status is a range, and the
    B-tree stops only at bounds of its first column or after equalities): LIMIT scan does,
    and `edge`, the id of the scan-th row, reads the same snapshot."""
    walked, order = _BULK_WALKS[walk]
    filters = []
    if job_type and walk is not BulkWalk.TYPE_STATUS:
        filters.append("type = %(type)s")
    if key:
        filters.append("concurrency_key = %(key)s")
    if before:
        filters.append(f"created_at < {ts('before')}")
    if by_creator and walk is not BulkWalk.CREATOR:
        filters.append("created_by = %(name)s")
    matches = " AND ".join(filters) if filters else "TRUE"
    return f"""
        WITH edge AS (
            SELECT id FROM jobs WHERE {walked} AND id > %(after)s ORDER BY {order}
            LIMIT 1 OFFSET %(scan)s - 1)
        SELECT id, status, worker_id FROM (
            SELECT id, status, worker_id FROM (
                SELECT id, status, worker_id, type, concurrency_key, created_at, created_by FROM jobs
                WHERE {walked} AND id > %(after)s ORDER BY {order} LIMIT %(scan)s) AS walked
            WHERE {matches} ORDER BY {order} LIMIT %(limit)s) AS hits
        UNION ALL SELECT id, NULL, NULL FROM edge"""


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


class PostgresStatements(Statements):
    INSERT_JOB = f"INSERT INTO jobs ({_INSERT_COLUMNS}) VALUES ({_INSERT_VALUES}) RETURNING id"
    INSERT_JOB_ONCE = (
        f"INSERT INTO jobs ({_INSERT_COLUMNS}) VALUES ({_INSERT_VALUES})"
        " ON CONFLICT (created_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id"
    )
    JOB_BY_IDEMPOTENCY_KEY = (
        f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE created_by = %(created_by)s AND idempotency_key = %(key)s"
    )
    JOBS_BY_IDEMPOTENCY_KEYS = (
        f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE created_by = %(created_by)s"
        f" AND {among_texts('idempotency_key', 'keys')}"
    )
    JOB_BY_ID = f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE id = %(id)s"
    JOBS_BY_IDS = f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE {among_ids('id', 'ids')}"

    claim_jobs = staticmethod(_same_text(_CLAIM))
    promote_due = staticmethod(_same_text(_PROMOTE))
    claim_within_quotas = staticmethod(_same_text(_CLAIM_WITHIN_QUOTAS))
    ready_heads = staticmethod(_same_text(_READY_HEADS))
    key_heads = staticmethod(_same_text(_KEY_HEADS))
    CLAIM_IDS = f"{_CLAIMED} WHERE {among_ids('id', 'ids')} AND {IS_PENDING} RETURNING {JOB_COLUMN_LIST}"
    TIME_OUT_RUNNING = f"UPDATE jobs SET {_FAILURE} WHERE {_SEEN_RUNNING} AND timeout_at < {NOW}"
    HEARTBEAT = (
        f"UPDATE jobs SET lease_expires_at = {ts('lease')}, updated_at = {STAMP}, {NEXT_REVISION}"
        f" WHERE {_HOLDER_GUARD} RETURNING {JOB_COLUMN_LIST}"
    )
    COMPLETE_HELD = f"UPDATE jobs SET {_COMPLETED} WHERE {_HOLDER_GUARD} RETURNING {JOB_COLUMN_LIST}"
    COMPLETE_CHECKED = (
        f"UPDATE jobs SET {_COMPLETED} WHERE id = %(id)s AND {IS_RUNNING} AND attempt = %(attempt)s"
    )
    # completeJobs: the rows found by `id = ANY(...)` on the primary key, each checked and
    # given its values from the arrays at its id's position (the ids are distinct). Not a
    # join with unnest: under stale statistics the planner rescanned the whole array for
    # every row, or scanned the table. The state guard is one that no partial index serves
    # (`state_guard`), and so is the holder's (ix_jobs_worker would walk all a worker ever
    # held). No read before it: a row that another transaction changes meanwhile is
    # checked again as that one left it (READ COMMITTED), and is not completed if it no
    # longer passes.
    COMPLETE_MANY = (
        f"UPDATE jobs SET {_completed(NOW, _of_row('result', 'text'))}"
        f" WHERE id = ANY(%(id)s::bigint[]) AND {IS_RUNNING} AND {state_guard('worker_id = %(worker)s')}"
        f" AND attempt = COALESCE({_of_row('attempt', 'bigint')}, attempt) RETURNING {JOB_COLUMN_LIST}"
    )
    FAIL_RUNNING = f"UPDATE jobs SET {_FAILURE} WHERE {_SEEN_RUNNING} RETURNING {JOB_COLUMN_LIST}"
    EXPIRE_RUNNING = f"UPDATE jobs SET {_FAILURE} WHERE {_SEEN_RUNNING} AND lease_expires_at < {NOW}"
    # RUNNING jobs past their lease, then those past their timeout: one probe for both. Each
    # reads its own index (ix_jobs_lease, ix_jobs_timeout: the rows whose lease or timeout
    # is set, only RUNNING jobs') in its order: stated with `status = 'running'`, stale
    # statistics can have the planner walk every running job through ix_jobs_status. The
    # status is checked after the LIMIT, where it cannot steer the plan: a guard
    # the planner believes rare made it read all that is overdue and sort it.
    # Every way out of RUNNING clears both columns; a finished job that still has one (left
    # by an older queuelog, or copied from one) is cleared here, the first time the probe
    # meets it, so that it is met once: left alone, the oldest of them would fill every
    # batch and hide the jobs that really are overdue.
    OVERDUE = f"""
        WITH expired AS MATERIALIZED (
            SELECT {JOB_COLUMN_LIST}, 'lease' AS why FROM jobs WHERE lease_expires_at < {NOW}
            ORDER BY lease_expires_at LIMIT {EXPIRE_BATCH} FOR UPDATE SKIP LOCKED),
        late AS MATERIALIZED (
            SELECT {JOB_COLUMN_LIST}, 'timeout' AS why FROM jobs WHERE timeout_at < {NOW}
            ORDER BY timeout_at LIMIT {EXPIRE_BATCH} FOR UPDATE SKIP LOCKED),
        stale AS (
            UPDATE jobs SET lease_expires_at = NULL, timeout_at = NULL, {NEXT_REVISION}
            WHERE id = ANY(ARRAY(
                SELECT id FROM expired WHERE status <> 'running'
                UNION ALL SELECT id FROM late WHERE status <> 'running'))
            AND {state_guard("status <> 'running'")})
        SELECT * FROM expired WHERE status = 'running'
        UNION ALL
        SELECT * FROM late WHERE status = 'running'
    """

    CANCEL_PENDING = (
        f"UPDATE jobs SET {_CANCELLED} WHERE id = %(id)s AND {IS_PENDING} RETURNING {JOB_COLUMN_LIST}"
    )
    RETRY_FINISHED = (
        f"UPDATE jobs SET {_RETRIED} WHERE id = %(id)s AND {IS_RETRIABLE} RETURNING {JOB_COLUMN_LIST}"
    )
    match_jobs = staticmethod(match_statement)
    CANCEL_IDS = (
        f"UPDATE jobs SET {_CANCELLED}"
        f" WHERE {among_ids('id', 'ids')} AND {IS_PENDING} RETURNING {JOB_COLUMN_LIST}"
    )
    RETRY_IDS = (
        f"UPDATE jobs SET {_RETRIED} WHERE {among_ids('id', 'ids')} AND {IS_RETRIABLE}"
        f" RETURNING {JOB_COLUMN_LIST}"
    )
    # Two statements: the second asks again whether anything waits for a job, in a snapshot
    # taken once the first holds the job's lock. A retry that made a job wait for one of
    # them either still held that job's row (FOR SHARE: OPEN_DEPENDENCIES) when the first
    # came to it, which skips it, or had committed before, which the second sees; one that
    # comes after waits for the pruner, and then finds the job gone.
    PRUNABLE = f"""
        SELECT id FROM jobs
        WHERE finished_at < {ts("cutoff")} AND status IN {TERMINAL_SQL} AND {_UNAWAITED}
        ORDER BY finished_at LIMIT {PRUNE_BATCH}
        FOR UPDATE SKIP LOCKED
    """
    PRUNE = f"""
        DELETE FROM jobs WHERE {among_ids("id", "ids")} AND {_UNAWAITED}
        RETURNING id, type, status, created_by, worker_id
    """

    next_due = staticmethod(_same_text(_NEXT_DUE))
    oldest_due = staticmethod(_same_text(_oldest_due_sql("")))
    oldest_due_of = staticmethod(_same_text(_oldest_due_sql(" AND created_by = %(created_by)s")))
    OLDEST_DUE_AMONG_OWN = (
        "SELECT MIN(run_at) FROM jobs WHERE created_by = %(created_by)s AND status = 'pending'"
        f" AND delayed <> 2 AND run_at <= {NOW} AND type IN {text_list('types')}"
    )
    list_jobs = staticmethod(list_statement)
    scope_page = staticmethod(scope_page_statement)

    INSERT_EVENT = (
        "INSERT INTO job_events (job_id, kind, status, at)"
        f" VALUES (%(job_id)s, %(kind)s, %(status)s, {ts('at')}) RETURNING id"
    )
    DELETE_EVENTS_OF = f"DELETE FROM job_events WHERE {among_ids('job_id', 'ids')}"
    MAX_EVENT_ID = "SELECT MAX(id) FROM job_events"
    EVENT_HORIZON = (
        "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint"
        " FROM pg_current_snapshot() AS s"
    )
    EVENTS_WITH_IDS = (
        f"SELECT id, job_id, kind, status FROM job_events WHERE {among_ids('id', 'ids')} ORDER BY id"
    )
    EVENTS_AFTER = (
        "SELECT id, job_id, kind, status FROM job_events"
        f" WHERE id > %(after)s ORDER BY id LIMIT {EVENT_TAIL_BATCH}"
    )
    # Each job's newest rows straight from ix_job_events_job (LATERAL), however many it has.
    EVENTS_OF_JOBS = (
        "SELECT wanted.job_id, newest.kind, newest.status, newest.at"
        f" FROM (SELECT DISTINCT ids.value AS job_id FROM {id_list('ids')} AS ids) AS wanted"
        " CROSS JOIN LATERAL (SELECT id, kind, status, at FROM job_events WHERE job_id = wanted.job_id"
        " ORDER BY id DESC LIMIT %(limit)s) AS newest ORDER BY wanted.job_id, newest.id"
    )

    # Each write batch adds to the rows of its own shard (WriteTx.counter_shard), so batches
    # of several servers do not queue behind one row's lock; reads sum the shards.
    ADD_TO_COUNT = (
        "INSERT INTO job_counts (scope, name, type, status, shard, n)"
        " VALUES (%(scope)s, %(name)s, %(type)s, %(status)s, %(shard)s, %(n)s)"
        " ON CONFLICT (scope, name, type, status, shard) DO UPDATE SET n = job_counts.n + excluded.n"
    )
    ADD_TO_MINUTE = (
        "INSERT INTO job_minutes (scope, name, minute, status, shard, n)"
        " VALUES (%(scope)s, %(name)s, %(minute)s, %(status)s, %(shard)s, %(n)s)"
        " ON CONFLICT (scope, name, minute, status, shard) DO UPDATE SET n = job_minutes.n + excluded.n"
    )
    PENDING_TYPES = PENDING_TYPES_SQL
    COUNTS_OF_SCOPES = (
        "SELECT scope, name, type, status, SUM(n)::bigint FROM job_counts WHERE (scope, name) IN"
        " (SELECT value ->> 0, value ->> 1 FROM json_array_elements(%(scopes)s::json) AS value)"
        " GROUP BY scope, name, type, status"
    )
    MINUTES_OF_SCOPES = (
        "SELECT scope, name, minute, status, SUM(n)::bigint FROM job_minutes WHERE minute >= %(since)s"
        " AND (scope, name) IN"
        " (SELECT value ->> 0, value ->> 1 FROM json_array_elements(%(scopes)s::json) AS value)"
        " GROUP BY scope, name, minute, status"
    )
    PRUNE_MINUTES = "DELETE FROM job_minutes WHERE minute < %(before)s"

    TYPE_CONTROLS = _TYPE_CONTROLS
    PROMOTE_READS_CONTROLS = True
    TYPE_INDEX = False  # migration 0014
    PROMOTE_PENDING = _PROMOTE_PENDING
    # Every server's claims of controlled types take turns (flow.py); the number is arbitrary
    # but fixed: queuelog's only advisory lock. Answers the clock once the lock is held (the
    # subquery, kept apart by OFFSET 0, runs first), so what the claim plans is timed after
    # every controlled claim it waited for.
    LOCK_CONTROLLED_CLAIMS = (
        "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint"
        " FROM (SELECT pg_advisory_xact_lock(7160419) OFFSET 0) AS locked"
    )
    RUNNING_PER_KEY = (
        "SELECT concurrency_key, count(*) FROM jobs"
        " WHERE type = %(type)s AND status = 'running' AND concurrency_key IS NOT NULL"
        " GROUP BY concurrency_key"
    )
    # Not locked: CLAIM_IDS claims only what is still PENDING once it holds the row.
    KEYED_WALK = (
        f"SELECT {_CANDIDATE} FROM jobs WHERE type = %(type)s AND {READY} AND {_KEYED}"
        f" AND NOT concurrency_key = ANY(ARRAY{text_list('full')})"
        " ORDER BY priority DESC, created_at, id LIMIT %(walk)s"
    )
    # Each key's head: the keys of the type's ready jobs by a loose index scan (one seek a
    # key), then each key's first job in claim order (one more).
    KEYED_HEADS = f"""
        WITH RECURSIVE ready_keys(key) AS (
            (SELECT concurrency_key FROM jobs
            WHERE type = %(type)s AND {READY} AND {PER_KEY} ORDER BY concurrency_key LIMIT 1)
            UNION ALL
            SELECT (SELECT concurrency_key FROM jobs
                WHERE type = %(type)s AND {READY} AND {PER_KEY} AND concurrency_key > ready_keys.key
                ORDER BY concurrency_key LIMIT 1)
            FROM ready_keys WHERE ready_keys.key IS NOT NULL)
        SELECT head.* FROM ready_keys CROSS JOIN LATERAL (
            SELECT {_CANDIDATE} FROM jobs
            WHERE jobs.type = %(type)s AND concurrency_key = ready_keys.key AND {READY} AND {PER_KEY}
            ORDER BY priority DESC, created_at, id LIMIT 1) AS head
        WHERE ready_keys.key IS NOT NULL AND NOT ready_keys.key = ANY(ARRAY{text_list("full")})
    """
    # Each key with claims in the window (a loose index scan), its count (last seq - first
    # seq in the window + 1) and its oldest claim: two seeks a key, whatever the count.
    RATE_WINDOW = f"""
        WITH RECURSIVE window_keys(key) AS (
            (SELECT key FROM rate_claims WHERE type = %(type)s ORDER BY key LIMIT 1)
            UNION ALL
            SELECT (SELECT key FROM rate_claims WHERE type = %(type)s AND key > window_keys.key
                ORDER BY key LIMIT 1)
            FROM window_keys WHERE window_keys.key IS NOT NULL)
        SELECT window_keys.key, last.seq - first.seq + 1, first.at FROM window_keys
        CROSS JOIN LATERAL (SELECT seq FROM rate_claims WHERE type = %(type)s AND key = window_keys.key
            ORDER BY at DESC, seq DESC LIMIT 1) AS last
        CROSS JOIN LATERAL (SELECT seq, at FROM rate_claims WHERE type = %(type)s AND key = window_keys.key
            AND at > {ts("since")} ORDER BY at, seq LIMIT 1) AS first
        WHERE window_keys.key IS NOT NULL
    """
    FORGET_RATE_CLAIMS = f"DELETE FROM rate_claims WHERE type = %(type)s AND at <= {ts('since')}"
    # The key's next sequence number, at no earlier than its last claim's (see SQLite's).
    INSERT_RATE_CLAIM = f"""
        INSERT INTO rate_claims (type, key, at, seq)
        SELECT %(type)s, %(key)s, GREATEST({ts("at")}, MAX(at)), COALESCE(MAX(seq), 0) + 1 FROM (
            SELECT at, seq FROM rate_claims WHERE type = %(type)s AND key = %(key)s
            ORDER BY at DESC, seq DESC LIMIT 1) AS last
    """
    PUT_TYPE_CONTROL = put_type_control(
        lambda name: f"%({name})s",
        lambda column: ts(column) if column in ("paused_until", "updated_at") else f"%({column})s",
    )

    held_schedule_jobs = staticmethod(held_schedule_jobs_statement)
    MARK_DEPENDED_ON = (
        f"UPDATE jobs SET has_dependents = GREATEST(has_dependents, 1), {NEXT_REVISION}"
        f" WHERE {among_ids('id', 'ids')} RETURNING id, status, created_by, worker_id"
    )
    INSERT_DEPENDENCY = (
        "INSERT INTO job_dependencies (job_id, depends_on) VALUES (%(job_id)s, %(depends_on)s)"
    )
    DEPENDENCIES_OF_JOBS = (
        "SELECT job_id, depends_on FROM job_dependencies"
        f" WHERE {among_ids('job_id', 'ids')} ORDER BY job_id, depends_on"
    )
    # In ix_job_dependencies_on's order: its walk stops after `limit` edges, however many a
    # job has.
    NEXT_EDGES = f"""
        SELECT depends_on, job_id, spared_by FROM job_dependencies
        WHERE {among_ids("depends_on", "ids")} AND job_id > %(passed)s AND job_id <= %(reaches)s
        ORDER BY depends_on, job_id LIMIT %(limit)s"""
    # One statement, so that the edges it returns are the ones it counted (in two, a dependent
    # pruned in between would shift the second's window). The jobs are read by key, through
    # an array (= ANY, an InitPlan), the state guarded where no index serves it, and their
    # counts looked up in one jsonb object: joined with the edges instead, a plan estimated
    # for a handful of rows (a table not analyzed yet) compared every job with every edge, 0.6 s
    # for a chunk of 1,000. For the same reason the edges and the jobs released come back
    # one after the other (UNION ALL), not joined.
    _RELEASED_COUNT = "((SELECT counts FROM d) ->> jobs.id::text)::integer"
    RELEASE_NEXT = f"""
        WITH e AS MATERIALIZED ({NEXT_EDGES}),
        d AS MATERIALIZED (
            SELECT jsonb_object_agg(job_id::text, n) AS counts
            FROM (SELECT job_id, count(*) AS n FROM e GROUP BY job_id) AS per_job),
        released AS (
            UPDATE jobs SET waiting_for = jobs.waiting_for - {_RELEASED_COUNT},
                delayed = CASE WHEN jobs.waiting_for - {_RELEASED_COUNT} > 0 THEN 2
                    WHEN jobs.run_at > {NOW} THEN 1 ELSE 0 END,
                run_at = CASE WHEN jobs.waiting_for - {_RELEASED_COUNT} <= 0 AND jobs.run_at < {NOW}
                    THEN {NOW} ELSE jobs.run_at END,
                updated_at = {STAMP}, {NEXT_REVISION}
            WHERE jobs.id = ANY(ARRAY(SELECT DISTINCT job_id FROM e))
                AND {state_guard("jobs.status = 'pending' AND jobs.delayed = 2")}
            RETURNING jobs.type, jobs.delayed)
        SELECT depends_on, job_id, spared_by, NULL AS type, NULL::smallint AS delayed FROM e
        UNION ALL SELECT NULL, NULL, NULL, type, delayed FROM released"""
    RELEASE_NEXT_RETURNS_EDGES = True
    CANCEL_DEPENDENTS = f"""
        UPDATE jobs SET {_CANCELLED}, error = %(error)s
        WHERE {among_ids("id", "ids")} AND {IS_PENDING}
            AND NOT EXISTS (SELECT 1 FROM job_dependencies AS d WHERE d.job_id = jobs.id
                AND {among_ids("d.depends_on", "parents")} AND d.spared_by >= %(settlement)s)
        RETURNING {JOB_COLUMN_LIST}"""
    HIGHEST_JOB_ID = "SELECT COALESCE(max(id), 0) FROM jobs"
    ANY_SETTLEMENT = "SELECT 1 FROM dependency_settlements LIMIT 1"
    SETTLING_JOBS = f"SELECT DISTINCT job_id FROM dependency_settlements WHERE {among_ids('job_id', 'ids')}"
    INSERT_SETTLEMENT = (
        "INSERT INTO dependency_settlements (job_id, error, passed, reaches)"
        " VALUES (%(job_id)s, %(error)s, %(passed)s, %(reaches)s)"
    )
    PASS_SETTLEMENT = "UPDATE dependency_settlements SET passed = %(passed)s WHERE id = %(id)s"
    DELETE_SETTLEMENTS = f"DELETE FROM dependency_settlements WHERE {among_ids('id', 'ids')}"
    MARK_SETTLING = f"UPDATE jobs SET has_dependents = 2, {NEXT_REVISION} WHERE {among_ids('id', 'ids')}"
    # Each server's sweeper takes rows no other one holds; a job's later rows wait for its
    # oldest, even while another server holds that one.
    SETTLEMENTS_DUE = """
        SELECT id, job_id, error, passed, reaches FROM dependency_settlements AS s
        WHERE NOT EXISTS (SELECT 1 FROM dependency_settlements AS o WHERE o.job_id = s.job_id AND o.id < s.id)
        ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""
    # The dependencies not COMPLETED are locked (FOR SHARE) as they are counted, as an enqueue
    # locks what it waits for (MARK_DEPENDED_ON): a completion or failure of one of them on
    # another connection either committed first (the lock waits for it, then reads the row
    # again and counts it or not), or waits for this retry and then sees it waiting, to
    # release or cancel it. Read without a lock, a dependency completing meanwhile was
    # counted open, and its completion did not release the job, still CANCELLED in its
    # snapshot: PENDING forever. The settlements are read in a statement of their own, after
    # those waits (it sees the settlement a completion waited for left), and locked too: a
    # sweeper's chunk has passed the job or not, and one that comes after sees it waiting.
    _DEPENDENCIES_OF_IDS = (
        f"ARRAY(SELECT depends_on FROM job_dependencies WHERE {among_ids('job_id', 'ids')})"
    )
    OPEN_DEPENDENCIES = f"""
        SELECT id FROM jobs WHERE id = ANY({_DEPENDENCIES_OF_IDS}) AND {state_guard("status <> 'completed'")}
        ORDER BY id FOR SHARE"""
    SETTLEMENTS_OF_DEPENDENCIES = f"""
        SELECT job_id, error, passed, reaches, id FROM dependency_settlements
        WHERE job_id = ANY({_DEPENDENCIES_OF_IDS}) ORDER BY id FOR SHARE"""
    WAIT_AGAIN = f"""
        UPDATE jobs SET waiting_for = %(waiting)s, delayed = 2, updated_at = {STAMP}, {NEXT_REVISION}
        WHERE {among_ids("id", "ids")} AND {IS_PENDING}
        RETURNING {JOB_COLUMN_LIST}"""
    SPARE = (
        "UPDATE job_dependencies SET spared_by = %(settlement)s"
        " WHERE job_id = %(job_id)s AND depends_on = %(depends_on)s"
    )
    DEPENDENCY_OF_HELD = (
        "SELECT 1 FROM job_dependencies d JOIN jobs j ON j.id = d.job_id"
        " WHERE d.depends_on = %(id)s AND j.status = 'running' AND j.worker_id = %(worker)s LIMIT 1"
    )
    DELETE_DEPENDENCIES_OF = f"DELETE FROM job_dependencies WHERE {among_ids('job_id', 'ids')}"
    # In code-point order whatever the database's collation, as SQLite sorts.
    SCHEDULES = f'SELECT {SCHEDULE_COLUMN_LIST} FROM schedules ORDER BY name COLLATE "C"'
    SCHEDULE_BY_NAME = f"SELECT {SCHEDULE_COLUMN_LIST} FROM schedules WHERE name = %(name)s"
    PUT_SCHEDULE = f"""
        INSERT INTO schedules (name, type, cron, timezone, payload, priority, max_retries, misfire,
            overlap, paused, next_run_at, created_at, updated_at)
        VALUES (%(name)s, %(type)s, %(cron)s, %(timezone)s, %(payload)s, %(priority)s, %(max_retries)s,
            %(misfire)s, %(overlap)s, 0, {as_timestamp("%(next_run_at)s::bigint")}, {NOW}, {NOW})
        ON CONFLICT (name) DO UPDATE SET type = excluded.type, cron = excluded.cron,
            timezone = excluded.timezone, payload = excluded.payload, priority = excluded.priority,
            max_retries = excluded.max_retries, misfire = excluded.misfire, overlap = excluded.overlap,
            next_run_at = CASE WHEN schedules.paused = 1 THEN NULL ELSE excluded.next_run_at END,
            updated_at = excluded.updated_at
        RETURNING {SCHEDULE_COLUMN_LIST}"""
    DELETE_SCHEDULE = "DELETE FROM schedules WHERE name = %(name)s"
    SET_SCHEDULE_PAUSED = f"""
        UPDATE schedules SET paused = %(paused)s, next_run_at = {as_timestamp("%(next_run_at)s::bigint")},
            updated_at = {NOW}
        WHERE name = %(name)s RETURNING {SCHEDULE_COLUMN_LIST}"""
    # Servers tick at once: each takes the due schedules no other is firing (SKIP LOCKED).
    DUE_SCHEDULES = f"""
        SELECT {SCHEDULE_COLUMN_LIST} FROM schedules
        WHERE paused = 0 AND next_run_at <= {NOW} ORDER BY next_run_at LIMIT {SCHEDULES_PER_PASS}
        FOR UPDATE SKIP LOCKED"""
    NEXT_SCHEDULE_AT = "SELECT min(next_run_at) FROM schedules WHERE paused = 0"
    BROKEN_SCHEDULES = BROKEN_SCHEDULES_SQL
    SCHEDULE_COUNT = SCHEDULE_COUNT_SQL
    SCHEDULE_FIRED = f"""
        UPDATE schedules SET next_run_at = {as_timestamp("%(next_run_at)s::bigint")},
            last_run_at = coalesce({as_timestamp("%(last_run_at)s::bigint")}, last_run_at),
            last_job_id = coalesce(%(last_job_id)s::bigint, last_job_id), updated_at = {NOW}
        WHERE name = %(name)s"""
    EXISTING_KEYS = (
        "SELECT created_by, idempotency_key FROM jobs WHERE (created_by, idempotency_key) IN"
        " (SELECT value ->> 0, value ->> 1 FROM json_array_elements(%(pairs)s::json) AS value)"
    )
    JOB_STATES = f"SELECT id, status FROM jobs WHERE {among_ids('id', 'ids')}"
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
    BULK_STATES = (
        f"SELECT id, status, worker_id FROM jobs WHERE {among_ids('id', 'ids')} ORDER BY id FOR UPDATE"
    )
    SCHEDULE_CLOCK = "SELECT alive_at FROM schedule_clock WHERE id = 1"
    LOCK_SCHEDULE_CLOCK = SCHEDULE_CLOCK + " FOR UPDATE"
    MARK_SCHEDULE_CLOCK = f"UPDATE schedule_clock SET alive_at = {NOW} WHERE id = 1"
    ACTIVE_KEY = (
        "SELECT name, roles, max_priority, created_at FROM api_keys"
        " WHERE key_hash = %(key_hash)s AND revoked_at IS NULL"
    )
    KEY_IS_ACTIVE = "SELECT 1 FROM api_keys WHERE name = %(name)s AND revoked_at IS NULL"
    KEY_GENERATION = "SELECT generation FROM key_state WHERE id = 1"
    PING = "SELECT 1"


class PostgresWriterStatements(PostgresStatements):
    """A writer's: the rows a write reads before it updates them are taken locked (see the
    module docstring)."""

    JOB_BY_ID = PostgresStatements.JOB_BY_ID + " FOR UPDATE"
    JOBS_BY_IDS = PostgresStatements.JOBS_BY_IDS + " ORDER BY id FOR UPDATE"


# Statements whose RETURNING gives the new row's id (a cursor's `lastrowid`).
RETURNING_ID = frozenset(
    {PostgresStatements.INSERT_JOB, PostgresStatements.INSERT_JOB_ONCE, PostgresStatements.INSERT_EVENT}
)

# --- many rows in one statement ---------------------------------------------------------------


@dataclass(frozen=True)
class SetForm:
    """A statement that operations.py runs once per row (executemany), written for all the
    rows at once: each parameter is sent as one array and `unnest` turns them back into rows,
    in order (`v.n`). One statement instead of a pipeline of as many: a fraction of the
    PostgreSQL and driver CPU per row."""

    sql: str
    arrays: tuple[tuple[str, str], ...]  # (parameter, element type), in unnest's column order

    def parameters(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
        return {name: [row[name] for row in rows] for name, _ in self.arrays}


def _rows_of(arrays: tuple[tuple[str, str], ...]) -> str:
    columns = ", ".join(f"%({name})s::{kind}[]" for name, kind in arrays)
    names = ", ".join(name for name, _ in arrays)
    return f"unnest({columns}) WITH ORDINALITY AS v({names}, n)"


def _ts_of(column: str) -> str:
    return as_timestamp(f"v.{column}")


# A job column's array element type, as operations.py sends its values: timestamps as integer
# microseconds, JSON documents as text. Most specific first (Text is a String).
_ELEMENT_TYPES = (
    (UtcTimestamp, "bigint"),
    (JsonDocument, "text"),
    (SmallInteger, "smallint"),
    (BigInteger, "bigint"),
    (Integer, "integer"),
    (String, "text"),
    (Text, "text"),
)


def _element_type(column: str) -> str:
    for kind, name in _ELEMENT_TYPES:
        if isinstance(jobs.c[column].type, kind):
            return name
    raise TypeError(f"jobs.{column}: no array element type for {jobs.c[column].type!r}")  # at import


def _from_array(column: str) -> str:
    return _ts_of(column) if isinstance(jobs.c[column].type, UtcTimestamp) else f"v.{column}"


_JOB_ARRAYS = tuple((column, _element_type(column)) for column in NEW_JOB_COLUMNS)
_EVENT_ARRAYS = (("job_id", "bigint"), ("kind", "text"), ("status", "text"), ("at", "bigint"))
# Rows go in in `n` order, so their ids (one sequence) rise in the order of the rows given.
INSERT_JOBS_AT_ONCE = SetForm(
    f"INSERT INTO jobs ({_INSERT_COLUMNS})"
    f" SELECT {', '.join(_from_array(column) for column in NEW_JOB_COLUMNS)}"
    f" FROM {_rows_of(_JOB_ARRAYS)} ORDER BY v.n RETURNING id",
    _JOB_ARRAYS,
)
INSERT_EVENTS_AT_ONCE = SetForm(
    "INSERT INTO job_events (job_id, kind, status, at)"
    f" SELECT v.job_id, v.kind, v.status, {_ts_of('at')} FROM {_rows_of(_EVENT_ARRAYS)}"
    " ORDER BY v.n RETURNING id",
    _EVENT_ARRAYS,
)


# Integer array parameters sent as bigint[] whatever their values (psycopg sends small ones as
# smallint[]): these statements look into the arrays once per row, and a cast there would
# copy the array for every row (array_map: 3.6 % of PostgreSQL's CPU in a drain).
INT8_ARRAYS: dict[str, tuple[str, ...]] = {PostgresStatements.COMPLETE_MANY: ("id", "attempt")}

# executemany of these statements runs as one statement.
AT_ONCE = {
    PostgresStatements.INSERT_JOB: INSERT_JOBS_AT_ONCE,
    PostgresStatements.INSERT_EVENT: INSERT_EVENTS_AT_ONCE,
}

# Statements run with a generic plan, made once per connection. Their custom plans cost
# 0.5-0.7 ms of PostgreSQL's CPU to make, on every call, for a few hundredths of a
# millisecond's work: PostgreSQL's own choice ("auto") keeps making them because a generic
# plan cannot see how many types the array holds, nor the limit, and so looks costlier. The
# generic plans of these statements seek the same indexes (test_postgres_plans checks them).
# Every other statement keeps the server's plan_cache_mode: some need their parameters seen.
GENERIC_PLANS = frozenset(
    {
        PostgresStatements.claim_jobs(1),
        PostgresStatements.claim_within_quotas(1),
        PostgresStatements.promote_due(1),
        PostgresStatements.ready_heads(1),
        PostgresStatements.key_heads(1),
        PostgresStatements.next_due(1),
        PostgresStatements.OVERDUE,
        _PROMOTE_PENDING,
        # One plan whatever their parameters (none; a lookup by a unique key or the primary
        # key, tested with generic plans; an insert; a small table's index): here so that a
        # batch of claims and completions, and a claim's own statements, run in one mode
        # instead of switching for nearly every statement (2.9 SET LOCAL / RESET per claim and
        # completion, each a statement more for the driver and the server).
        PostgresStatements.PENDING_TYPES,
        PostgresStatements.TYPE_CONTROLS,
        PostgresStatements.LOCK_CONTROLLED_CLAIMS,
        PostgresStatements.RATE_WINDOW,
        PostgresStatements.KEYED_WALK,
        PostgresStatements.FORGET_RATE_CLAIMS,
        PostgresStatements.INSERT_RATE_CLAIM,
        PostgresStatements.KEY_IS_ACTIVE,
        PostgresStatements.COMPLETE_HELD,
        PostgresStatements.COMPLETE_CHECKED,
        PostgresStatements.COMPLETE_MANY,
        PostgresStatements.HEARTBEAT,
        PostgresStatements.FAIL_RUNNING,
        PostgresStatements.INSERT_JOB,
        PostgresStatements.INSERT_JOB_ONCE,
        INSERT_JOBS_AT_ONCE.sql,
        PostgresStatements.INSERT_EVENT,
        INSERT_EVENTS_AT_ONCE.sql,
        PostgresStatements.ADD_TO_COUNT,
        PostgresStatements.ADD_TO_MINUTE,
        # By a list of ids, written for generic plans (among_ids; test_postgres_plans checks
        # each generic): the reads and updates of a completeJobs batch, the dependents it releases
        PostgresStatements.JOB_BY_ID,
        PostgresWriterStatements.JOB_BY_ID,
        PostgresStatements.JOBS_BY_IDS,
        PostgresWriterStatements.JOBS_BY_IDS,
        PostgresStatements.CLAIM_IDS,
        PostgresStatements.CANCEL_IDS,
        PostgresStatements.RETRY_IDS,
        PostgresStatements.MARK_DEPENDED_ON,
        PostgresStatements.JOB_STATES,
        PostgresStatements.BULK_STATES,
        PostgresStatements.NEXT_EDGES,
        PostgresStatements.RELEASE_NEXT,
        PostgresStatements.EVENTS_OF_JOBS,
    }
)
# JIT off for the transaction too (a write batch starts with this): a generic plan cannot
# see a claim's LIMIT and takes it for a tenth of the ready rows, so once ANALYZE has counted
# a big table (90k ready jobs of a type at 1M jobs) the claim's estimate passed
# jit_above_cost, and every claim spent 14-21 ms compiling what runs in 0.2 ms.
FORCE_GENERIC_PLANS = (
    "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true)"
)
# The server's own mode, until the transaction ends.
DEFAULT_PLANS = "SET LOCAL plan_cache_mode TO DEFAULT"

# --- the server's own ---------------------------------------------------------------------------

EVENTS_CHANNEL = "queuelog_events"
DB_NOW = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint"
NOTIFY = "SELECT pg_notify(%s, %s)"
LISTEN = f"LISTEN {EVENTS_CHANNEL}"
# The listener's checkpoint (listener.py): the newest event id committed and the snapshot's
# horizon (EVENT_HORIZON), from one statement, so from one snapshot.
LISTENER_CHECKPOINT = (
    "SELECT (SELECT MAX(id) FROM job_events), pg_snapshot_xmin(s)::text::bigint,"
    " pg_snapshot_xmax(s)::text::bigint FROM pg_current_snapshot() AS s"
)

# --- `queuelog copy-database`, on the target ------------------------------------------------

SEQUENCE_OF = "SELECT pg_get_serial_sequence(:table, 'id')"
COLUMN_TYPES = (
    "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute"
    " WHERE attrelid = CAST(:table AS regclass) AND attnum > 0 AND NOT attisdropped"
)


def lock_exclusive(tables: Sequence[str]) -> str:
    """Lock `tables` (names from tables.py) against every other writer until the transaction ends."""
    return f"LOCK TABLE {', '.join(tables)} IN EXCLUSIVE MODE"


def sequence_state(sequence: str) -> str:
    """`sequence` as pg_get_serial_sequence returned it: already quoted."""
    return f"SELECT last_value, is_called FROM {sequence}"


def restart_sequence(sequence: str, next_id: int) -> str:
    return f"ALTER SEQUENCE {sequence} RESTART WITH {int(next_id)}"


def copy_binary(table: str, columns: Sequence[str]) -> str:
    return f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
