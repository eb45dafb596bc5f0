"""PostgreSQL's statements of bulk actions: a chunk's walk of one status, and the changes of
the jobs it found."""

from __future__ import annotations

import functools

from queuelog.storage.postgres.statements.fragments import (
    CANCELLED,
    IS_PENDING,
    IS_RETRIABLE,
    RETRIED,
    among_ids,
    own_scope,
    ts,
)
from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import BulkWalk, Statements

# Each bulk walk's terms and the order that only its index gives (operations/bulk.py).
# PostgreSQL's B-tree stops a walk only at a bound of its first column, or of a column after
# equalities: the type is an equality, so that the walk of ix_jobs_type_status ends with the
# status.
_BULK_WALKS = {
    BulkWalk.STATUS: ("status >= %(status)s AND status <= %(status)s", "status, id"),
    BulkWalk.TYPE_STATUS: ("type = %(type)s AND status >= %(status)s AND status <= %(status)s", "status, id"),
    # See own_scope: the walk stops at the creator's last PENDING job.
    BulkWalk.CREATOR: (f"{own_scope('created_by', 'name')} AND status = 'pending'", "created_by, id"),
}


@functools.cache
def match_statement(
    walk: BulkWalk, by_creator: bool, job_type: bool, key: bool, before: bool, unrequested: bool = False
) -> str:
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
    if unrequested:
        filters.append("cancel_requested_at IS NULL")
    matches = " AND ".join(filters) if filters else "TRUE"
    return f"""
        WITH edge AS (
            SELECT id FROM jobs WHERE {walked} AND id > %(after)s ORDER BY {order}
            LIMIT 1 OFFSET %(scan)s - 1)
        SELECT id, status, worker_id FROM (
            SELECT id, status, worker_id FROM (
                SELECT id, status, worker_id, type, concurrency_key, created_at, created_by,
                    cancel_requested_at FROM jobs
                WHERE {walked} AND id > %(after)s ORDER BY {order} LIMIT %(scan)s) AS walked
            WHERE {matches} ORDER BY {order} LIMIT %(limit)s) AS hits
        UNION ALL SELECT id, NULL, NULL FROM edge"""


class BulkStatements(Statements, part=True):
    """A bulk chunk's walk and its changes."""

    match_jobs = staticmethod(match_statement)
    CANCEL_IDS = (
        f"UPDATE jobs SET {CANCELLED}"
        f" WHERE {among_ids('id', 'ids')} AND {IS_PENDING} RETURNING {JOB_COLUMN_LIST}"
    )
    RETRY_IDS = (
        f"UPDATE jobs SET {RETRIED} WHERE {among_ids('id', 'ids')} AND {IS_RETRIABLE}"
        f" RETURNING {JOB_COLUMN_LIST}"
    )
    BULK_STATES = (
        f"SELECT id, status, worker_id FROM jobs WHERE {among_ids('id', 'ids')} ORDER BY id FOR UPDATE"
    )
