"""PostgreSQL's statements of cancel requests on RUNNING jobs (API.md section 12)."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import IS_RUNNING, NEXT_REVISION, STAMP, among_ids, ts
from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import Statements

_UNREQUESTED = f"{IS_RUNNING} AND cancel_requested_at IS NULL"
# LEAST ignores NULL: a job with no timeout gets the deadline.
_REQUESTED = (
    f"cancel_requested_at = {STAMP}, timeout_at = LEAST(timeout_at, {ts('deadline')}),"
    f" updated_at = {STAMP}, {NEXT_REVISION}"
)


class CancelRequestStatements(Statements, part=True):
    """A RUNNING job's cancel request: one by id, or a bulk chunk's."""

    REQUEST_CANCEL = (
        f"UPDATE jobs SET {_REQUESTED} WHERE id = %(id)s AND {_UNREQUESTED} RETURNING {JOB_COLUMN_LIST}"
    )
    REQUEST_CANCEL_IDS = (
        f"UPDATE jobs SET {_REQUESTED} WHERE {among_ids('id', 'ids')} AND {_UNREQUESTED}"
        f" RETURNING {JOB_COLUMN_LIST}"
    )
