"""SQLite's statements of job_events and of the counters (job_counts, job_minutes): what every
write batch adds, and their reads."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, insert, literal_column
from sqlalchemy.dialects import sqlite

from queuelog.storage.schema.tables import job_counts, job_events, job_minutes
from queuelog.storage.sqlite.statements.fragments import sql_of
from queuelog.storage.statements import EVENT_TAIL_BATCH, Statements

# What every event row is written with (the last three: operations/attempts.py).
EVENT_COLUMNS = ("job_id", "kind", "status", "at", "attempt", "worker_id", "error")


def _adding_to(table: Any) -> str:
    """Upsert that adds `n` to the row with these keys (every primary key column)."""
    keys = [c.name for c in table.primary_key.columns]
    return sql_of(
        sqlite.insert(table)
        .values({n: bindparam(n) for n in (*keys, "n")})
        .on_conflict_do_update(index_elements=keys, set_={"n": table.c.n + literal_column("excluded.n")})
    )


class EventStatements(Statements, part=True):
    """job_events, job_counts and job_minutes."""

    INSERT_EVENT = sql_of(insert(job_events).values({n: bindparam(n) for n in EVENT_COLUMNS}))
    DELETE_EVENTS_OF = "DELETE FROM job_events WHERE job_id IN (SELECT value FROM json_each(:ids))"
    MAX_EVENT_ID = "SELECT MAX(id) FROM job_events"
    EVENTS_WITH_IDS = (
        "SELECT id, job_id, kind, status FROM job_events WHERE id IN (SELECT value FROM json_each(:ids))"
    )
    EVENTS_AFTER = (
        "SELECT id, job_id, kind, status FROM job_events WHERE id > :after"
        f" ORDER BY id LIMIT {EVENT_TAIL_BATCH}"
    )
    # Jobs' own events, the newest `limit` of each, by job and oldest first (ix_job_events_job):
    # every `Job.events` of one request in one read.
    EVENTS_OF_JOBS = (
        "SELECT job_id, kind, status, at FROM (SELECT job_id, id, kind, status, at,"
        " row_number() OVER (PARTITION BY job_id ORDER BY id DESC) AS newness FROM job_events"
        " WHERE job_id IN (SELECT value FROM json_each(:ids))) AS newest"
        " WHERE newness <= :limit ORDER BY job_id, id"
    )
    ADD_TO_COUNT = _adding_to(job_counts)
    ADD_TO_MINUTE = _adding_to(job_minutes)
    # Sums over the shards: one on a database SQLite wrote, more on one copied from PostgreSQL.
    COUNTS_OF_SCOPES = (
        "SELECT scope, name, type, status, SUM(n) FROM job_counts"
        " WHERE (scope, name) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:scopes))"
        " GROUP BY scope, name, type, status"
    )
    MINUTES_OF_SCOPES = (
        "SELECT scope, name, minute, status, SUM(n) FROM job_minutes WHERE minute >= :since"
        " AND (scope, name) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:scopes))"
        " GROUP BY scope, name, minute, status"
    )
    PRUNE_MINUTES = "DELETE FROM job_minutes WHERE minute < :before"
