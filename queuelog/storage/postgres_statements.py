"""The PostgreSQL text of every statement in statements.py, under the same names.

operations.py is written once, against statements.py; on PostgreSQL the connection
adapter (postgres.py) swaps each SQLite statement for its counterpart here (`FOR_SQLITE`).
Values keep the shapes operations.py gives them: timestamps are integer microseconds
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queuelog.storage import statements as sqlite
from queuelog.storage.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import EVENT_TAIL_BATCH, EXPIRE_BATCH, PRUNE_BATCH, TERMINAL_SQL


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


NOW = ts("now")
_INSERT_COLUMNS = (
    "type, payload, priority, status, retry_count, max_retries, attempt, idempotency_key,"
    " run_at, created_by, created_at, updated_at"
)
_INSERT_VALUES = (
    "%(type)s, %(payload)s, %(priority)s, %(status)s, %(retry_count)s, %(max_retries)s,"
    f" %(attempt)s, %(idempotency_key)s, {ts('run_at')}, %(created_by)s, {ts('created_at')},"
    f" {ts('updated_at')}"
)
INSERT_JOB = f"INSERT INTO jobs ({_INSERT_COLUMNS}) VALUES ({_INSERT_VALUES}) RETURNING id"
INSERT_JOB_ONCE = (
    f"INSERT INTO jobs ({_INSERT_COLUMNS}) VALUES ({_INSERT_VALUES})"
    " ON CONFLICT (created_by, idempotency_key) DO NOTHING RETURNING id"
)
JOB_BY_IDEMPOTENCY_KEY = (
    f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE created_by = %(created_by)s AND idempotency_key = %(key)s"
)
JOBS_BY_IDEMPOTENCY_KEYS = (
    f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE created_by = %(created_by)s"
    f" AND idempotency_key IN {text_list('keys')}"
)
JOB_BY_ID = f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE id = %(id)s"
JOBS_BY_IDS = f"SELECT {JOB_COLUMN_LIST} FROM jobs WHERE id IN {id_list('ids')}"
# Not run on PostgreSQL (ids come from RETURNING); here so that every name has its text.
LAST_JOB_ID = "SELECT last_value FROM jobs_id_seq"
LAST_EVENT_ID = "SELECT last_value FROM job_events_id_seq"
MAX_EVENT_ID = "SELECT MAX(id) FROM job_events"
EVENTS_WITH_IDS = f"SELECT id, job_id, kind, status FROM job_events WHERE id IN {id_list('ids')} ORDER BY id"
EVENTS_AFTER = (
    "SELECT id, job_id, kind, status FROM job_events"
    f" WHERE id > %(after)s ORDER BY id LIMIT {EVENT_TAIL_BATCH}"
)
KEY_IS_ACTIVE = "SELECT 1 FROM api_keys WHERE name = %(name)s AND revoked_at IS NULL"
# Each job's newest rows straight from ix_job_events_job (LATERAL), however many it has.
EVENTS_OF_JOBS = (
    "SELECT wanted.job_id, newest.kind, newest.status, newest.at"
    f" FROM (SELECT DISTINCT ids.value AS job_id FROM {id_list('ids')} AS ids) AS wanted"
    " CROSS JOIN LATERAL (SELECT id, kind, status, at FROM job_events WHERE job_id = wanted.job_id"
    " ORDER BY id DESC LIMIT %(limit)s) AS newest ORDER BY wanted.job_id, newest.id"
)
INSERT_EVENT = (
    "INSERT INTO job_events (job_id, kind, status, at)"
    f" VALUES (%(job_id)s, %(kind)s, %(status)s, {ts('at')}) RETURNING id"
)
DELETE_EVENTS_OF = f"DELETE FROM job_events WHERE job_id IN {id_list('ids')}"
ADD_TO_COUNT = (
    "INSERT INTO job_counts (scope, name, type, status, n)"
    " VALUES (%(scope)s, %(name)s, %(type)s, %(status)s, %(n)s)"
    " ON CONFLICT (scope, name, type, status) DO UPDATE SET n = job_counts.n + excluded.n"
)
ADD_TO_MINUTE = (
    "INSERT INTO job_minutes (scope, name, minute, status, n)"
    " VALUES (%(scope)s, %(name)s, %(minute)s, %(status)s, %(n)s)"
    " ON CONFLICT (scope, name, minute, status) DO UPDATE SET n = job_minutes.n + excluded.n"
)
MINUTES_OF_SCOPES = (
    "SELECT scope, name, minute, status, n FROM job_minutes WHERE minute >= %(since)s AND (scope, name) IN"
    " (SELECT value ->> 0, value ->> 1 FROM json_array_elements(%(scopes)s::json) AS value)"
)
PRUNE_MINUTES = "DELETE FROM job_minutes WHERE minute < %(before)s"
COUNTS_OF_SCOPES = (
    "SELECT scope, name, type, status, n FROM job_counts WHERE (scope, name) IN"
    " (SELECT value ->> 0, value ->> 1 FROM json_array_elements(%(scopes)s::json) AS value)"
)

_CLAIM = f"""
    UPDATE jobs SET status = 'running', worker_id = %(worker)s, claimed_at = {NOW},
        attempt = attempt + 1, lease_expires_at = {ts("lease")}, updated_at = {NOW}
    WHERE id IN (
        SELECT id FROM jobs
        WHERE status = 'pending' AND run_at <= {NOW} {{types}}
        ORDER BY priority DESC, created_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
    RETURNING {JOB_COLUMN_LIST}
"""
CLAIM_ANY = _CLAIM.format(types="")
CLAIM_TYPES = _CLAIM.format(types=f"AND type IN {text_list('types')}")


def state_guard(condition: str) -> str:
    """A condition on the state of a row found by id, that no index can serve.

    Statements that update one job by id must take the primary key. Given `status =
    'running'` beside `id = %(id)s`, the planner may walk a partial index on status
    instead (ix_jobs_lease for running jobs, ix_jobs_claim for pending ones) whenever its
    statistics say that state is rare: right after a burst of claims, before autovacuum
    has looked again (`python -m bench --database postgresql`: ix_jobs_lease read 27M
    entries for 2,900 completions, 3.5-4.9 ms of PostgreSQL CPU each). `(...) IS TRUE`
    (the same truth: status is NOT NULL) is a test that no index's predicate matches."""
    return f"({condition}) IS TRUE"


IS_RUNNING = state_guard("status = 'running'")
IS_PENDING = state_guard("status = 'pending'")
IS_RETRIABLE = state_guard("status IN ('failed', 'cancelled')")
_HOLDER_GUARD = (
    f"id = %(id)s AND {IS_RUNNING} AND worker_id = %(worker)s"
    " AND (%(attempt)s::integer IS NULL OR attempt = %(attempt)s::integer)"
)
HEARTBEAT = (
    f"UPDATE jobs SET lease_expires_at = {ts('lease')}, updated_at = {NOW}"
    f" WHERE {_HOLDER_GUARD} RETURNING {JOB_COLUMN_LIST}"
)


def _completed(now: str, result: str) -> str:
    return (
        f"status = 'completed', lease_expires_at = NULL, finished_at = {now}, result = {result},"
        f" updated_at = {now}"
    )


_COMPLETED = _completed(NOW, "%(result)s")
COMPLETE_HELD = f"UPDATE jobs SET {_COMPLETED} WHERE {_HOLDER_GUARD} RETURNING {JOB_COLUMN_LIST}"
COMPLETE_CHECKED = (
    f"UPDATE jobs SET {_COMPLETED} WHERE id = %(id)s AND {IS_RUNNING} AND attempt = %(attempt)s"
)
_FAILURE = (
    "status = %(status)s, retry_count = %(retry_count)s, worker_id = %(worker_id)s,"
    f" lease_expires_at = NULL, run_at = {ts('run_at')}, finished_at = {ts('finished_at')},"
    f" error = %(error)s, updated_at = {NOW}"
)
_SEEN_RUNNING = f"id = %(id)s AND {IS_RUNNING} AND attempt = %(attempt)s"
FAIL_RUNNING = f"UPDATE jobs SET {_FAILURE} WHERE {_SEEN_RUNNING} RETURNING {JOB_COLUMN_LIST}"
EXPIRE_RUNNING = f"UPDATE jobs SET {_FAILURE} WHERE {_SEEN_RUNNING} AND lease_expires_at < {NOW}"
EXPIRED_LEASES = f"""
    SELECT {JOB_COLUMN_LIST} FROM jobs
    WHERE status = 'running' AND lease_expires_at < {NOW}
    ORDER BY lease_expires_at LIMIT {EXPIRE_BATCH}
    FOR UPDATE SKIP LOCKED
"""
CANCEL_PENDING = (
    f"UPDATE jobs SET status = 'cancelled', finished_at = {NOW}, updated_at = {NOW}"
    f" WHERE id = %(id)s AND {IS_PENDING} RETURNING {JOB_COLUMN_LIST}"
)
RETRY_FINISHED = (
    f"UPDATE jobs SET status = 'pending', retry_count = 0, run_at = {NOW}, worker_id = NULL,"
    f" lease_expires_at = NULL, finished_at = NULL, updated_at = {NOW}"
    f" WHERE id = %(id)s AND {IS_RETRIABLE}"
    f" RETURNING {JOB_COLUMN_LIST}"
)
PRUNE = f"""
    DELETE FROM jobs WHERE id IN (
        SELECT id FROM jobs
        WHERE finished_at < {ts("cutoff")} AND status IN {TERMINAL_SQL}
        LIMIT {PRUNE_BATCH}
        FOR UPDATE SKIP LOCKED)
    RETURNING id, type, status, created_by, worker_id
"""
NEXT_DUE_ANY = "SELECT MIN(run_at) FROM jobs WHERE status = 'pending'"
NEXT_DUE_TYPES = NEXT_DUE_ANY + f" AND type IN {text_list('types')}"
_OLDEST_OF_PRIORITY = """
    (SELECT created_at FROM jobs
        WHERE status = 'pending' AND priority = {priority} AND run_at <= {now} {scope}
        ORDER BY priority DESC, created_at LIMIT 1)
"""


def _oldest_pending_sql(scope: str) -> str:
    parts = [_OLDEST_OF_PRIORITY.format(priority=p, now=NOW, scope=scope) for p in (0, 10, 20, 30)]
    return "SELECT MIN(created_at) FROM (" + " UNION ALL ".join(parts) + ") AS oldest"


OLDEST_PENDING_ANY = _oldest_pending_sql("")
OLDEST_PENDING_OF = _oldest_pending_sql("AND created_by = %(created_by)s")
OLDEST_PENDING_AMONG_OWN = (
    "SELECT MIN(created_at) FROM jobs"
    f" WHERE created_by >= %(created_by)s AND created_by <= %(created_by)s AND status = 'pending'"
    f" AND run_at <= {NOW}"
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


_JOB_ARRAYS = (
    ("type", "text"),
    ("payload", "text"),
    ("priority", "smallint"),
    ("status", "text"),
    ("retry_count", "integer"),
    ("max_retries", "integer"),
    ("attempt", "integer"),
    ("idempotency_key", "text"),
    ("run_at", "bigint"),
    ("created_by", "text"),
    ("created_at", "bigint"),
    ("updated_at", "bigint"),
)
_EVENT_ARRAYS = (("job_id", "bigint"), ("kind", "text"), ("status", "text"), ("at", "bigint"))
# Rows go in in `n` order, so their ids (one sequence) rise in the order of the rows given.
INSERT_JOBS_AT_ONCE = SetForm(
    f"INSERT INTO jobs ({_INSERT_COLUMNS})"
    " SELECT v.type, v.payload, v.priority, v.status, v.retry_count, v.max_retries, v.attempt,"
    f" v.idempotency_key, {_ts_of('run_at')}, v.created_by, {_ts_of('created_at')},"
    f" {_ts_of('updated_at')} FROM {_rows_of(_JOB_ARRAYS)} ORDER BY v.n RETURNING id",
    _JOB_ARRAYS,
)
INSERT_EVENTS_AT_ONCE = SetForm(
    "INSERT INTO job_events (job_id, kind, status, at)"
    f" SELECT v.job_id, v.kind, v.status, {_ts_of('at')} FROM {_rows_of(_EVENT_ARRAYS)}"
    " ORDER BY v.n RETURNING id",
    _EVENT_ARRAYS,
)
_COMPLETION_ARRAYS = (("id", "bigint"), ("attempt", "integer"), ("result", "text"), ("now", "bigint"))


def _of_row(name: str, kind: str) -> str:
    """The element of array parameter `name` that belongs to the row being updated."""
    return f"(%({name})s::{kind}[])[array_position(%(id)s::bigint[], jobs.id)]"


# completeJobs: one UPDATE of the rows found by `id = ANY(...)` on the primary key, each
# taking its values from the arrays at its id's position (the ids are distinct). Not a join
# with unnest: under stale statistics the planner rescanned the whole array for every row,
# or scanned the table. The state guard is one that no partial index serves (`state_guard`).
COMPLETE_CHECKED_AT_ONCE = SetForm(
    f"UPDATE jobs SET {_completed(as_timestamp(_of_row('now', 'bigint')), _of_row('result', 'text'))}"
    f" WHERE id = ANY(%(id)s::bigint[]) AND {IS_RUNNING} AND attempt = {_of_row('attempt', 'integer')}",
    _COMPLETION_ARRAYS,
)
# executemany of these SQLite statements runs as one statement on PostgreSQL.
AT_ONCE = {
    sqlite.INSERT_JOB: INSERT_JOBS_AT_ONCE,
    sqlite.INSERT_EVENT: INSERT_EVENTS_AT_ONCE,
    sqlite.COMPLETE_CHECKED: COMPLETE_CHECKED_AT_ONCE,
}

# The writes that read a row before updating it take it locked (see the module docstring).
FOR_UPDATE = {
    JOB_BY_ID: JOB_BY_ID + " FOR UPDATE",
    JOBS_BY_IDS: JOBS_BY_IDS + " ORDER BY id FOR UPDATE",
}


def _list_statement(
    by_creator: bool, by_worker: bool, status: bool, job_type: bool, after: bool, walk_scope: bool = False
) -> str:
    """`jobs(...)`, newest first. With a status or type filter, the ORDER BY names those
    columns before id: the same order (they are fixed), but one that only the filter's index
    gives, so the planner walks that index instead of the primary key. Its statistics cannot
    know that completed jobs are the oldest: walking ids newest first would read past every
    pending job to find 20 completed ones, a page that grows with the queue. `walk_scope`
    (list_jobs decides it from the counters, as on SQLite) names the caller's column
    instead, for its index: ix_jobs_created_by or ix_jobs_worker."""
    filters = []
    leading = []
    scope_column = "created_by" if by_creator else "worker_id"
    if by_creator and by_worker:
        filters.append("(created_by = %(name)s OR worker_id = %(name)s)")
    elif (by_creator or by_worker) and walk_scope:
        filters.append(f"{scope_column} >= %(name)s AND {scope_column} <= %(name)s")
        leading = [scope_column]
    elif by_creator or by_worker:
        filters.append(f"{scope_column} = %(name)s")
    if not leading:  # ix_jobs_type_status, ix_jobs_type, ix_jobs_status
        leading = [c for c, on in (("type", job_type), ("status", status)) if on]
    for column, on in (("status", status), ("type", job_type)):
        if on and column in leading:
            # A range, not `=`: for an equality PostgreSQL drops the column from the ORDER BY
            # (it is constant) and is back to walking the primary key.
            filters.append(f"{column} >= %({column})s AND {column} <= %({column})s")
        elif on:
            filters.append(f"{column} = %({column})s")
    if after:
        filters.append("id < %(after)s")
    where = " WHERE " + " AND ".join(filters) if filters else ""
    order = ", ".join(f"{column} DESC" for column in [*leading, "id"])
    return f"SELECT {JOB_COLUMN_LIST} FROM jobs{where} ORDER BY {order} LIMIT %(limit)s"


def _translations() -> dict[str, str]:
    names = [
        name
        for name, value in vars(sqlite).items()
        if name.isupper() and isinstance(value, str) and not name.startswith("_") and name in globals()
    ]
    table = {getattr(sqlite, name): globals()[name] for name in names}
    flags = (False, True)
    for key in [(c, w, s, t, a) for c in flags for w in flags for s in flags for t in flags for a in flags]:
        for walk_scope in flags:
            table[sqlite.list_statement(*key, walk_scope)] = _list_statement(*key, walk_scope)
    return table


# Every statement operations.py runs, SQLite text -> PostgreSQL text.
FOR_SQLITE = _translations()
