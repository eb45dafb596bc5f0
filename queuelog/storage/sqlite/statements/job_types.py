"""SQLite's statements of the job types added at runtime."""

from __future__ import annotations

from queuelog.storage.statements import Statements


class JobTypeStatements(Statements, part=True):
    """job_types."""

    JOB_TYPE_NAMES = "SELECT name FROM job_types ORDER BY name"
    INSERT_JOB_TYPE = (
        "INSERT INTO job_types (name, added_by, added_at) VALUES (:name, :added_by, :now)"
        " ON CONFLICT (name) DO NOTHING RETURNING name"
    )
    DELETE_JOB_TYPE = "DELETE FROM job_types WHERE name = :name RETURNING name"
