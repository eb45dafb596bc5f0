"""PostgreSQL's statements of jobs that wait for others: their edges, and the settling of a
finished job's dependents."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import (
    CANCELLED,
    IS_PENDING,
    NEXT_REVISION,
    NOW,
    STAMP,
    among_ids,
    state_guard,
)
from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import Statements


class DependencyStatements(Statements, part=True):
    """Dependencies' edges and settlements."""

    MARK_DEPENDED_ON = (
        f"UPDATE jobs SET has_dependents = GREATEST(has_dependents, 1), {NEXT_REVISION}"
        f" WHERE {among_ids('id', 'ids')} RETURNING id, status, created_by, worker_id"
    )
    INSERT_DEPENDENCY = (
        "INSERT INTO job_dependencies (job_id, depends_on) VALUES (%(job_id)s, %(depends_on)s)"
    )
    DEPENDENCIES_OF_JOBS = (
        "SELECT job_id, depends_on FROM job_dependencies"
        f" WHERE {among_ids('job_id', 'ids')} ORDER BY job_id, depends_on"
    )
    # In ix_job_dependencies_on's order: its walk stops after `limit` edges, however many a
    # job has.
    NEXT_EDGES = f"""
        SELECT depends_on, job_id, spared_by FROM job_dependencies
        WHERE {among_ids("depends_on", "ids")} AND job_id > %(passed)s AND job_id <= %(reaches)s
        ORDER BY depends_on, job_id LIMIT %(limit)s"""
    # One statement, so that the edges it returns are the ones it counted (in two, a dependent
    # pruned in between would shift the second's window). The jobs are read by key, through
    # an array (= ANY, an InitPlan), the state guarded where no index serves it, and their
    # counts looked up in one jsonb object: joined with the edges instead, a plan estimated
    # for a handful of rows (a table not analyzed yet) compared every job with every edge, 0.6 s
    # for a chunk of 1,000. For the same reason the edges and the jobs released come back
    # one after the other (UNION ALL), not joined.
    _RELEASED_COUNT = "((SELECT counts FROM d) ->> jobs.id::text)::integer"
    RELEASE_NEXT = f"""
        WITH e AS MATERIALIZED ({NEXT_EDGES}),
        d AS MATERIALIZED (
            SELECT jsonb_object_agg(job_id::text, n) AS counts
            FROM (SELECT job_id, count(*) AS n FROM e GROUP BY job_id) AS per_job),
        released AS (
            UPDATE jobs SET waiting_for = jobs.waiting_for - {_RELEASED_COUNT},
                delayed = CASE WHEN jobs.waiting_for - {_RELEASED_COUNT} > 0 THEN 2
                    WHEN jobs.run_at > {NOW} THEN 1 ELSE 0 END,
                run_at = CASE WHEN jobs.waiting_for - {_RELEASED_COUNT} <= 0 AND jobs.run_at < {NOW}
                    THEN {NOW} ELSE jobs.run_at END,
                updated_at = {STAMP}, {NEXT_REVISION}
            WHERE jobs.id = ANY(ARRAY(SELECT DISTINCT job_id FROM e))
                AND {state_guard("jobs.status = 'pending' AND jobs.delayed = 2")}
            RETURNING jobs.type, jobs.delayed)
        SELECT depends_on, job_id, spared_by, NULL AS type, NULL::smallint AS delayed FROM e
        UNION ALL SELECT NULL, NULL, NULL, type, delayed FROM released"""
    CANCEL_DEPENDENTS = f"""
        UPDATE jobs SET {CANCELLED}, error = %(error)s
        WHERE {among_ids("id", "ids")} AND {IS_PENDING}
            AND NOT EXISTS (SELECT 1 FROM job_dependencies AS d WHERE d.job_id = jobs.id
                AND {among_ids("d.depends_on", "parents")} AND d.spared_by >= %(settlement)s)
        RETURNING {JOB_COLUMN_LIST}"""
    HIGHEST_JOB_ID = "SELECT COALESCE(max(id), 0) FROM jobs"
    ANY_SETTLEMENT = "SELECT 1 FROM dependency_settlements LIMIT 1"
    SETTLING_JOBS = f"SELECT DISTINCT job_id FROM dependency_settlements WHERE {among_ids('job_id', 'ids')}"
    INSERT_SETTLEMENT = (
        "INSERT INTO dependency_settlements (job_id, error, passed, reaches)"
        " VALUES (%(job_id)s, %(error)s, %(passed)s, %(reaches)s)"
    )
    PASS_SETTLEMENT = "UPDATE dependency_settlements SET passed = %(passed)s WHERE id = %(id)s"
    DELETE_SETTLEMENTS = f"DELETE FROM dependency_settlements WHERE {among_ids('id', 'ids')}"
    MARK_SETTLING = f"UPDATE jobs SET has_dependents = 2, {NEXT_REVISION} WHERE {among_ids('id', 'ids')}"
    # Each server's sweeper takes rows no other one holds; a job's later rows wait for its
    # oldest, even while another server holds that one.
    SETTLEMENTS_DUE = """
        SELECT id, job_id, error, passed, reaches FROM dependency_settlements AS s
        WHERE NOT EXISTS (SELECT 1 FROM dependency_settlements AS o WHERE o.job_id = s.job_id AND o.id < s.id)
        ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""
    # The dependencies not COMPLETED are locked (FOR SHARE) as they are counted, as an enqueue
    # locks what it waits for (MARK_DEPENDED_ON): a completion or failure of one of them on
    # another connection either committed first (the lock waits for it, then reads the row
    # again and counts it or not), or waits for this retry and then sees it waiting, to
    # release or cancel it. Read without a lock, a dependency completing meanwhile was
    # counted open, and its completion did not release the job, still CANCELLED in its
    # snapshot: PENDING forever. The settlements are read in a statement of their own, after
    # those waits (it sees the settlement a completion waited for left), and locked too: a
    # sweeper's chunk has passed the job or not, and one that comes after sees it waiting.
    _DEPENDENCIES_OF_IDS = (
        f"ARRAY(SELECT depends_on FROM job_dependencies WHERE {among_ids('job_id', 'ids')})"
    )
    OPEN_DEPENDENCIES = f"""
        SELECT id FROM jobs WHERE id = ANY({_DEPENDENCIES_OF_IDS}) AND {state_guard("status <> 'completed'")}
        ORDER BY id FOR SHARE"""
    SETTLEMENTS_OF_DEPENDENCIES = f"""
        SELECT job_id, error, passed, reaches, id FROM dependency_settlements
        WHERE job_id = ANY({_DEPENDENCIES_OF_IDS}) ORDER BY id FOR SHARE"""
    WAIT_AGAIN = f"""
        UPDATE jobs SET waiting_for = %(waiting)s, delayed = 2, updated_at = {STAMP}, {NEXT_REVISION}
        WHERE {among_ids("id", "ids")} AND {IS_PENDING}
        RETURNING {JOB_COLUMN_LIST}"""
    SPARE = (
        "UPDATE job_dependencies SET spared_by = %(settlement)s"
        " WHERE job_id = %(job_id)s AND depends_on = %(depends_on)s"
    )
    DEPENDENCY_OF_HELD = (
        "SELECT 1 FROM job_dependencies d JOIN jobs j ON j.id = d.job_id"
        " WHERE d.depends_on = %(id)s AND j.status = 'running' AND j.worker_id = %(worker)s LIMIT 1"
    )
    DELETE_DEPENDENCIES_OF = f"DELETE FROM job_dependencies WHERE {among_ids('job_id', 'ids')}"
