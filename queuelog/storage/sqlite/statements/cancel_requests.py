"""SQLite's statements of cancel requests on RUNNING jobs (API.md section 12)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, bindparam, func, literal_column, select, text, update

from queuelog.storage.schema.tables import jobs
from queuelog.storage.sqlite.statements.fragments import IS_RUNNING, NEXT_REVISION, STAMP, sql_of
from queuelog.storage.statements import Statements

_DEADLINE: Any = bindparam("deadline")
_UNREQUESTED = and_(IS_RUNNING, jobs.c.cancel_requested_at.is_(None))
# SQLite's min() of two values is NULL when either is: a job with no timeout gets the deadline.
_REQUESTED: dict[str, Any] = {
    "cancel_requested_at": STAMP,
    "timeout_at": func.min(func.coalesce(jobs.c.timeout_at, _DEADLINE), _DEADLINE),
    "updated_at": STAMP,
    "revision": NEXT_REVISION,
}


class CancelRequestStatements(Statements, part=True):
    """A RUNNING job's cancel request: one by id, or a bulk chunk's."""

    REQUEST_CANCEL = sql_of(
        update(jobs).where(jobs.c.id == bindparam("id"), _UNREQUESTED).values(_REQUESTED).returning(*jobs.c)
    )
    REQUEST_CANCEL_IDS = sql_of(
        update(jobs)
        .where(
            _UNREQUESTED,
            jobs.c.id.in_(select(literal_column("value")).select_from(text("json_each(:ids)"))),
        )
        .values(_REQUESTED)
        .returning(*jobs.c)
    )
