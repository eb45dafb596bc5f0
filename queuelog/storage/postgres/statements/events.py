"""PostgreSQL's statements of job_events and of the counters (job_counts, job_minutes): what
every write batch adds, and their reads."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import among_ids, id_list, ts
from queuelog.storage.postgres.statements.server import SNAPSHOT_HORIZON
from queuelog.storage.statements import EVENT_TAIL_BATCH, Statements


class EventStatements(Statements, part=True):
    """job_events, job_counts and job_minutes."""

    INSERT_EVENT = (
        "INSERT INTO job_events (job_id, kind, status, at, attempt, worker_id, error)"
        f" VALUES (%(job_id)s, %(kind)s, %(status)s, {ts('at')}, %(attempt)s, %(worker_id)s, %(error)s)"
        " RETURNING id"
    )
    DELETE_EVENTS_OF = f"DELETE FROM job_events WHERE {among_ids('job_id', 'ids')}"
    MAX_EVENT_ID = "SELECT MAX(id) FROM job_events"
    EVENT_HORIZON = f"SELECT {SNAPSHOT_HORIZON} FROM pg_current_snapshot() AS s"
    EVENTS_WITH_IDS = (
        f"SELECT id, job_id, kind, status FROM job_events WHERE {among_ids('id', 'ids')} ORDER BY id"
    )
    EVENTS_AFTER = (
        "SELECT id, job_id, kind, status FROM job_events"
        f" WHERE id > %(after)s ORDER BY id LIMIT {EVENT_TAIL_BATCH}"
    )
    # Each job's newest rows straight from ix_job_events_job (LATERAL), however many it has.
    EVENTS_OF_JOBS = (
        "SELECT wanted.job_id, newest.kind, newest.status, newest.at"
        f" FROM (SELECT DISTINCT ids.value AS job_id FROM {id_list('ids')} AS ids) AS wanted"
        " CROSS JOIN LATERAL (SELECT id, kind, status, at FROM job_events WHERE job_id = wanted.job_id"
        " ORDER BY id DESC LIMIT %(limit)s) AS newest ORDER BY wanted.job_id, newest.id"
    )
    # Each write batch adds to the rows of its own shard (WriteTx.counter_shard), so batches
    # of several servers do not queue behind one row's lock; reads sum the shards.
    ADD_TO_COUNT = (
        "INSERT INTO job_counts (scope, name, type, status, shard, n)"
        " VALUES (%(scope)s, %(name)s, %(type)s, %(status)s, %(shard)s, %(n)s)"
        " ON CONFLICT (scope, name, type, status, shard) DO UPDATE SET n = job_counts.n + excluded.n"
    )
    ADD_TO_MINUTE = (
        "INSERT INTO job_minutes (scope, name, minute, status, shard, n)"
        " VALUES (%(scope)s, %(name)s, %(minute)s, %(status)s, %(shard)s, %(n)s)"
        " ON CONFLICT (scope, name, minute, status, shard) DO UPDATE SET n = job_minutes.n + excluded.n"
    )
    COUNTS_OF_SCOPES = (
        "SELECT scope, name, type, status, SUM(n)::bigint FROM job_counts WHERE (scope, name) IN"
        " (SELECT value ->> 0, value ->> 1 FROM json_array_elements(%(scopes)s::json) AS value)"
        " GROUP BY scope, name, type, status"
    )
    MINUTES_OF_SCOPES = (
        "SELECT scope, name, minute, status, SUM(n)::bigint FROM job_minutes WHERE minute >= %(since)s"
        " AND (scope, name) IN"
        " (SELECT value ->> 0, value ->> 1 FROM json_array_elements(%(scopes)s::json) AS value)"
        " GROUP BY scope, name, minute, status"
    )
    PRUNE_MINUTES = "DELETE FROM job_minutes WHERE minute < %(before)s"
