"""PostgreSQL's statements of cron schedules and the schedule clock."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import NOW, among_ids, as_timestamp
from queuelog.storage.statements import (
    BROKEN_SCHEDULES_SQL,
    SCHEDULE_COLUMN_LIST,
    SCHEDULE_COUNT_SQL,
    SCHEDULES_PER_PASS,
    Statements,
)


class ScheduleStatements(Statements, part=True):
    """Schedules and the schedule clock."""

    # In code-point order whatever the database's collation, as SQLite sorts.
    SCHEDULES = f'SELECT {SCHEDULE_COLUMN_LIST} FROM schedules ORDER BY name COLLATE "C"'
    SCHEDULE_BY_NAME = f"SELECT {SCHEDULE_COLUMN_LIST} FROM schedules WHERE name = %(name)s"
    PUT_SCHEDULE = f"""
        INSERT INTO schedules (name, type, cron, timezone, payload, priority, max_retries, misfire,
            overlap, paused, next_run_at, created_at, updated_at)
        VALUES (%(name)s, %(type)s, %(cron)s, %(timezone)s, %(payload)s, %(priority)s, %(max_retries)s,
            %(misfire)s, %(overlap)s, 0, {as_timestamp("%(next_run_at)s::bigint")}, {NOW}, {NOW})
        ON CONFLICT (name) DO UPDATE SET type = excluded.type, cron = excluded.cron,
            timezone = excluded.timezone, payload = excluded.payload, priority = excluded.priority,
            max_retries = excluded.max_retries, misfire = excluded.misfire, overlap = excluded.overlap,
            next_run_at = CASE WHEN schedules.paused = 1 THEN NULL ELSE excluded.next_run_at END,
            updated_at = excluded.updated_at
        RETURNING {SCHEDULE_COLUMN_LIST}"""
    DELETE_SCHEDULE = "DELETE FROM schedules WHERE name = %(name)s"
    SET_SCHEDULE_PAUSED = f"""
        UPDATE schedules SET paused = %(paused)s, next_run_at = {as_timestamp("%(next_run_at)s::bigint")},
            updated_at = {NOW}
        WHERE name = %(name)s RETURNING {SCHEDULE_COLUMN_LIST}"""
    # Servers tick at once: each takes the due schedules no other is firing (SKIP LOCKED).
    DUE_SCHEDULES = f"""
        SELECT {SCHEDULE_COLUMN_LIST} FROM schedules
        WHERE paused = 0 AND next_run_at <= {NOW} ORDER BY next_run_at LIMIT {SCHEDULES_PER_PASS}
        FOR UPDATE SKIP LOCKED"""
    NEXT_SCHEDULE_AT = "SELECT min(next_run_at) FROM schedules WHERE paused = 0"
    BROKEN_SCHEDULES = BROKEN_SCHEDULES_SQL
    SCHEDULE_COUNT = SCHEDULE_COUNT_SQL
    SCHEDULE_FIRED = f"""
        UPDATE schedules SET next_run_at = {as_timestamp("%(next_run_at)s::bigint")},
            last_run_at = coalesce({as_timestamp("%(last_run_at)s::bigint")}, last_run_at),
            last_job_id = coalesce(%(last_job_id)s::bigint, last_job_id), updated_at = {NOW}
        WHERE name = %(name)s"""
    EXISTING_KEYS = (
        "SELECT created_by, idempotency_key FROM jobs WHERE (created_by, idempotency_key) IN"
        " (SELECT value ->> 0, value ->> 1 FROM json_array_elements(%(pairs)s::json) AS value)"
    )
    JOB_STATES = f"SELECT id, status FROM jobs WHERE {among_ids('id', 'ids')}"
    SCHEDULE_CLOCK = "SELECT alive_at FROM schedule_clock WHERE id = 1"
    LOCK_SCHEDULE_CLOCK = SCHEDULE_CLOCK + " FOR UPDATE"
    MARK_SCHEDULE_CLOCK = f"UPDATE schedule_clock SET alive_at = {NOW} WHERE id = 1"
