"""PostgreSQL's statements of one job at a time: enqueue, reads by id, the holder's reports,
expiry, cancel, retry and pruning."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import (
    CANCELLED,
    IS_PENDING,
    IS_RETRIABLE,
    IS_RUNNING,
    NEXT_REVISION,
    NOW,
    RETRIED,
    STAMP,
    among_ids,
    among_texts,
    state_guard,
    ts,
)
from queuelog.storage.schema.codec import JOB_COLUMN_LIST, NEW_JOB_COLUMNS
from queuelog.storage.schema.tables import jobs
from queuelog.storage.schema.types import UtcTimestamp
from queuelog.storage.statements import EXPIRE_BATCH, PRUNE_BATCH, TERMINAL_SQL, Statements


def _job_value(column: str) -> str:
    """A new job's value for `column`, from the parameter of the same name."""
    return ts(column) if isinstance(jobs.c[column].type, UtcTimestamp) else f"%({column})s"


INSERT_COLUMNS = ", ".join(NEW_JOB_COLUMNS)
_INSERT_VALUES = ", ".join(_job_value(column) for column in NEW_JOB_COLUMNS)


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


class JobStatements(Statements, part=True):
    """Enqueue, reads by id, the holder's reports, expiry, cancel, retry and pruning."""

    INSERT_JOB = f"INSERT INTO jobs ({INSERT_COLUMNS}) VALUES ({_INSERT_VALUES}) RETURNING id"
    INSERT_JOB_ONCE = (
        f"INSERT INTO jobs ({INSERT_COLUMNS}) VALUES ({_INSERT_VALUES})"
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
        f"UPDATE jobs SET {CANCELLED} WHERE id = %(id)s AND {IS_PENDING} RETURNING {JOB_COLUMN_LIST}"
    )
    RETRY_FINISHED = (
        f"UPDATE jobs SET {RETRIED} WHERE id = %(id)s AND {IS_RETRIABLE} RETURNING {JOB_COLUMN_LIST}"
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
