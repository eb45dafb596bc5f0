"""The server's own statements, outside the statements' names: its clock, and events across
servers (NOTIFY, LISTEN, the listener's checkpoint)."""

from __future__ import annotations

EVENTS_CHANNEL = "queuelog_events"
DB_NOW = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint"
NOTIFY = "SELECT pg_notify(%s, %s)"
LISTEN = f"LISTEN {EVENTS_CHANNEL}"
# The listener's checkpoint (notifications.py): the newest event id committed and the snapshot's
# horizon (EVENT_HORIZON), from one statement, so from one snapshot.
LISTENER_CHECKPOINT = (
    "SELECT (SELECT MAX(id) FROM job_events), pg_snapshot_xmin(s)::text::bigint,"
    " pg_snapshot_xmax(s)::text::bigint FROM pg_current_snapshot() AS s"
)
