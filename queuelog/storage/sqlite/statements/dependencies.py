"""SQLite's statements of jobs that wait for others: their edges, and the settling of a finished
job's dependents."""

from __future__ import annotations

from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.sqlite.statements.fragments import NEXT_REVISION_SQL, STAMP_SQL
from queuelog.storage.statements import Statements


class DependencyStatements(Statements, part=True):
    """Dependencies' edges and settlements."""

    MARK_DEPENDED_ON = (
        f"UPDATE jobs SET has_dependents = max(has_dependents, 1), {NEXT_REVISION_SQL}"
        " WHERE id IN (SELECT value FROM json_each(:ids)) RETURNING id, status, created_by, worker_id"
    )
    INSERT_DEPENDENCY = "INSERT INTO job_dependencies (job_id, depends_on) VALUES (:job_id, :depends_on)"
    DEPENDENCIES_OF_JOBS = (
        "SELECT job_id, depends_on FROM job_dependencies"
        " WHERE job_id IN (SELECT value FROM json_each(:ids)) ORDER BY job_id, depends_on"
    )
    NEXT_EDGES = """
        SELECT depends_on, job_id, spared_by FROM job_dependencies
        WHERE depends_on IN (SELECT value FROM json_each(:ids)) AND job_id > :passed AND job_id <= :reaches
        ORDER BY depends_on, job_id LIMIT :limit"""
    # The same edges as NEXT_EDGES, run just before it: the write lock holds them still.
    RELEASE_NEXT = f"""
        UPDATE jobs SET waiting_for = jobs.waiting_for - d.n,
            delayed = CASE WHEN jobs.waiting_for - d.n > 0 THEN 2 WHEN jobs.run_at > :now THEN 1 ELSE 0 END,
            run_at = CASE WHEN jobs.waiting_for - d.n <= 0 AND jobs.run_at < :now
                THEN :now ELSE jobs.run_at END,
            updated_at = max(:now, jobs.updated_at), revision = jobs.revision + 1
        FROM (SELECT job_id, count(*) AS n FROM ({NEXT_EDGES}) GROUP BY job_id) AS d
        WHERE jobs.id = d.job_id AND jobs.status = 'pending' AND jobs.delayed = 2
        RETURNING jobs.type, jobs.delayed"""
    CANCEL_DEPENDENTS = f"""
        UPDATE jobs SET status = 'cancelled', error = :error, finished_at = {STAMP_SQL},
            updated_at = {STAMP_SQL}, {NEXT_REVISION_SQL}
        WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'pending'
            AND NOT EXISTS (SELECT 1 FROM job_dependencies AS d WHERE d.job_id = jobs.id
                AND d.depends_on IN (SELECT value FROM json_each(:parents)) AND d.spared_by >= :settlement)
        RETURNING {JOB_COLUMN_LIST}"""
    HIGHEST_JOB_ID = "SELECT COALESCE(max(id), 0) FROM jobs"
    ANY_SETTLEMENT = "SELECT 1 FROM dependency_settlements LIMIT 1"
    SETTLING_JOBS = (
        "SELECT DISTINCT job_id FROM dependency_settlements"
        " WHERE job_id IN (SELECT value FROM json_each(:ids))"
    )
    INSERT_SETTLEMENT = (
        "INSERT INTO dependency_settlements (job_id, error, passed, reaches)"
        " VALUES (:job_id, :error, :passed, :reaches)"
    )
    PASS_SETTLEMENT = "UPDATE dependency_settlements SET passed = :passed WHERE id = :id"
    DELETE_SETTLEMENTS = "DELETE FROM dependency_settlements WHERE id IN (SELECT value FROM json_each(:ids))"
    MARK_SETTLING = (
        f"UPDATE jobs SET has_dependents = 2, {NEXT_REVISION_SQL}"
        " WHERE id IN (SELECT value FROM json_each(:ids))"
    )
    SETTLEMENTS_DUE = """
        SELECT id, job_id, error, passed, reaches FROM dependency_settlements AS s
        WHERE NOT EXISTS (SELECT 1 FROM dependency_settlements AS o WHERE o.job_id = s.job_id AND o.id < s.id)
        ORDER BY id LIMIT :limit"""
    _DEPENDENCIES_OF_IDS = (
        "(SELECT depends_on FROM job_dependencies WHERE job_id IN (SELECT value FROM json_each(:ids)))"
    )
    OPEN_DEPENDENCIES = f"SELECT id FROM jobs WHERE id IN {_DEPENDENCIES_OF_IDS} AND status <> 'completed'"
    SETTLEMENTS_OF_DEPENDENCIES = (
        "SELECT job_id, error, passed, reaches, id FROM dependency_settlements"
        f" WHERE job_id IN {_DEPENDENCIES_OF_IDS} ORDER BY id"
    )
    WAIT_AGAIN = f"""
        UPDATE jobs SET waiting_for = :waiting, delayed = 2, updated_at = {STAMP_SQL}, {NEXT_REVISION_SQL}
        WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'pending'
        RETURNING {JOB_COLUMN_LIST}"""
    SPARE = (
        "UPDATE job_dependencies SET spared_by = :settlement"
        " WHERE job_id = :job_id AND depends_on = :depends_on"
    )
    DEPENDENCY_OF_HELD = (
        "SELECT 1 FROM job_dependencies d JOIN jobs j ON j.id = d.job_id"
        " WHERE d.depends_on = :id AND j.status = 'running' AND j.worker_id = :worker LIMIT 1"
    )
    DELETE_DEPENDENCIES_OF = (
        "DELETE FROM job_dependencies WHERE job_id IN (SELECT value FROM json_each(:ids))"
    )
