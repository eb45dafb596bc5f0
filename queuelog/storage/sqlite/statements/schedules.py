"""SQLite's statements of cron schedules and the schedule clock."""

from __future__ import annotations

from queuelog.storage.statements import (
    BROKEN_SCHEDULES_SQL,
    SCHEDULE_COLUMN_LIST,
    SCHEDULE_COUNT_SQL,
    SCHEDULES_PER_PASS,
    Statements,
)


class ScheduleStatements(Statements, part=True):
    """Schedules and the schedule clock."""

    SCHEDULES = f"SELECT {SCHEDULE_COLUMN_LIST} FROM schedules ORDER BY name"
    SCHEDULE_BY_NAME = f"SELECT {SCHEDULE_COLUMN_LIST} FROM schedules WHERE name = :name"
    PUT_SCHEDULE = f"""
        INSERT INTO schedules (name, type, cron, timezone, payload, priority, max_retries, misfire,
            overlap, paused, next_run_at, created_at, updated_at)
        VALUES (:name, :type, :cron, :timezone, :payload, :priority, :max_retries, :misfire, :overlap, 0,
            :next_run_at, :now, :now)
        ON CONFLICT (name) DO UPDATE SET type = excluded.type, cron = excluded.cron,
            timezone = excluded.timezone, payload = excluded.payload, priority = excluded.priority,
            max_retries = excluded.max_retries, misfire = excluded.misfire, overlap = excluded.overlap,
            next_run_at = CASE WHEN schedules.paused = 1 THEN NULL ELSE excluded.next_run_at END,
            updated_at = excluded.updated_at
        RETURNING {SCHEDULE_COLUMN_LIST}"""
    DELETE_SCHEDULE = "DELETE FROM schedules WHERE name = :name"
    SET_SCHEDULE_PAUSED = f"""
        UPDATE schedules SET paused = :paused, next_run_at = :next_run_at, updated_at = :now
        WHERE name = :name RETURNING {SCHEDULE_COLUMN_LIST}"""
    DUE_SCHEDULES = f"""
        SELECT {SCHEDULE_COLUMN_LIST} FROM schedules INDEXED BY ix_schedules_due
        WHERE paused = 0 AND next_run_at <= :now ORDER BY next_run_at LIMIT {SCHEDULES_PER_PASS}"""
    NEXT_SCHEDULE_AT = "SELECT min(next_run_at) FROM schedules INDEXED BY ix_schedules_due WHERE paused = 0"
    BROKEN_SCHEDULES = BROKEN_SCHEDULES_SQL
    SCHEDULE_COUNT = SCHEDULE_COUNT_SQL
    SCHEDULE_FIRED = """
        UPDATE schedules SET next_run_at = :next_run_at, last_run_at = coalesce(:last_run_at, last_run_at),
            last_job_id = coalesce(:last_job_id, last_job_id), updated_at = :now
        WHERE name = :name"""
    EXISTING_KEYS = (
        "SELECT created_by, idempotency_key FROM jobs WHERE (created_by, idempotency_key) IN"
        " (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs))"
    )
    JOB_STATES = "SELECT id, status FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))"
    SCHEDULE_CLOCK = "SELECT alive_at FROM schedule_clock WHERE id = 1"
    LOCK_SCHEDULE_CLOCK = SCHEDULE_CLOCK
    MARK_SCHEDULE_CLOCK = "UPDATE schedule_clock SET alive_at = :now WHERE id = 1"
