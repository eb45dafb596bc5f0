"""The pieces PostgreSQL's statements are made of: parameters as timestamps and lists, state
guards that no partial index serves, a job's stamp and revision, and the terms of ready and
delayed jobs."""

from __future__ import annotations

import functools


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
READY = "status = 'pending' AND delayed = 0"
# A ready job a claim may take: not past its expiry (API.md section 12). A job without one
# passes on the first term, and the claim's head reads visit the row to lock it all the
# same: their plans do not change (tests/steering/test_expiry_plans.py). The sweep cancels expired
# jobs within a second.
UNEXPIRED = f"(expires_at IS NULL OR expires_at > {NOW})"
CLAIMABLE = f"{READY} AND {UNEXPIRED}"
PER_KEY = "concurrency_key >= ''"  # ix_jobs_ready_key's mark (schema/tables.py)
DELAYED = "status = 'pending' AND delayed = 1"
# One row per type asked for (the `types` array; `quotas`: at most that many of each). The
# per-type statements read each type's own index range (LATERAL), so other types' rows and
# delayed jobs are never walked; their text is the same whatever the number of types.
WANTED = "unnest(%(types)s::text[]) AS wanted(type)"
WANTED_QUOTAS = "unnest(%(types)s::text[], %(quotas)s::int[]) AS wanted(type, quota)"
UNKEYED = "concurrency_key IS NULL"
KEYED = "concurrency_key IS NOT NULL"
CANDIDATE = "id, type, concurrency_key, priority, created_at"


def same_text(sql: str) -> functools._lru_cache_wrapper[str]:
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
RETRIED = (
    f"status = 'pending', retry_count = 0, run_at = {STAMP}, delayed = 0, waiting_for = 0, worker_id = NULL,"
    " lease_expires_at = NULL, timeout_at = NULL, finished_at = NULL, cancel_requested_at = NULL,"
    f" updated_at = {STAMP}, {NEXT_REVISION}"
)
CANCELLED = f"status = 'cancelled', finished_at = {STAMP}, updated_at = {STAMP}, {NEXT_REVISION}"


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
