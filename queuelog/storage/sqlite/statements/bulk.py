"""SQLite's statements of bulk actions: a chunk's walk of one status, and the changes of the
jobs it found."""

from __future__ import annotations

import functools

from sqlalchemy import literal_column, select, text, update

from queuelog.storage.schema.tables import jobs
from queuelog.storage.sqlite.statements.fragments import (
    CANCELLED_VALUES,
    IS_PENDING,
    RETRIED_VALUES,
    lit,
    sql_of,
)
from queuelog.storage.statements import LAST_ID, BulkWalk, Statements

# Each bulk walk's index, and the terms that walk it (operations/bulk.py).
_BULK_WALKS = {
    BulkWalk.STATUS: ("ix_jobs_status", "status = :status"),
    BulkWalk.TYPE_STATUS: ("ix_jobs_type_status", "type = :type AND status = :status"),
    BulkWalk.CREATOR: ("ix_jobs_creator_status", "created_by = :name AND status = 'pending'"),
}


@functools.cache
def match_statement(
    walk: BulkWalk, by_creator: bool, job_type: bool, key: bool, before: bool, unrequested: bool = False
) -> str:
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
    if unrequested:
        filters.append("cancel_requested_at IS NULL")
    return (
        f"WITH edge AS (SELECT id FROM jobs INDEXED BY {index} WHERE {walked} AND id > :after"
        " ORDER BY id LIMIT 1 OFFSET :scan - 1)"
        f" SELECT * FROM (SELECT id, status, worker_id FROM jobs INDEXED BY {index}"
        f" WHERE {' AND '.join(filters)} ORDER BY id LIMIT :limit)"
        " UNION ALL SELECT id, NULL, NULL FROM edge"
    )


class BulkStatements(Statements, part=True):
    """A bulk chunk's walk and its changes."""

    match_jobs = staticmethod(match_statement)
    CANCEL_IDS = sql_of(
        update(jobs)
        .where(
            IS_PENDING, jobs.c.id.in_(select(literal_column("value")).select_from(text("json_each(:ids)")))
        )
        .values(CANCELLED_VALUES)
        .returning(*jobs.c)
    )
    RETRY_IDS = sql_of(
        update(jobs)
        .where(
            jobs.c.status.in_([lit("failed"), lit("cancelled")]),
            jobs.c.id.in_(select(literal_column("value")).select_from(text("json_each(:ids)"))),
        )
        .values(RETRIED_VALUES)
        .returning(*jobs.c)
    )
    BULK_STATES = "SELECT id, status, worker_id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))"
