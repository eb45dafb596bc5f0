"""The server's own statements, outside the statements' names: its clock, and events across
servers (NOTIFY, LISTEN, the listener's checkpoint)."""

from __future__ import annotations

EVENTS_CHANNEL = "queuelog_events"
# The database's clock, in integer microseconds since the epoch.
CLOCK_MICROS = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint"
DB_NOW = f"SELECT {CLOCK_MICROS}"
NOTIFY = "SELECT pg_notify(%s, %s)"
LISTEN = f"LISTEN {EVENTS_CHANNEL}"
# A snapshot `s`'s horizon, for event ids that commit out of order: its xmin (every
# transaction below it has ended), and the next transaction id as of the snapshot (every
# transaction that had an id when it was taken is below that). Not the snapshot's xmax: that
# is one past the newest *ended* transaction, and a transaction that took its id after that
# one, and an event id after it, runs on above xmax unlisted, while a later snapshot's xmin
# may already have passed xmax (seen: a tail that gave up on a batch's 10 events it then
# never read). In a transaction without an id, age() counts from the next id, read once, after
# the snapshot.
SNAPSHOT_HORIZON = (
    "pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint + age(pg_snapshot_xmax(s)::xid)"
)
# The listener's checkpoint (notifications.py): the newest event id committed and the snapshot's
# horizon, from one statement, so from one snapshot.
LISTENER_CHECKPOINT = (
    f"SELECT (SELECT MAX(id) FROM job_events), {SNAPSHOT_HORIZON} FROM pg_current_snapshot() AS s"
)
