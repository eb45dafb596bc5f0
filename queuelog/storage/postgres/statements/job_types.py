"""PostgreSQL's statements of the job types added at runtime."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import NOW
from queuelog.storage.statements import Statements


class JobTypeStatements(Statements, part=True):
    """job_types."""

    # In code-point order whatever the database's collation, as SQLite sorts.
    JOB_TYPE_NAMES = 'SELECT name FROM job_types ORDER BY name COLLATE "C"'
    INSERT_JOB_TYPE = (
        f"INSERT INTO job_types (name, added_by, added_at) VALUES (%(name)s, %(added_by)s, {NOW})"
        " ON CONFLICT (name) DO NOTHING RETURNING name"
    )
    DELETE_JOB_TYPE = "DELETE FROM job_types WHERE name = %(name)s RETURNING name"
