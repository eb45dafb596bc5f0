"""The one clock: every `now` queuelog computes comes from here or from the database.

Writes take `now` once per transaction (storage's WriteTx.now): SQLite's is this process's
clock, PostgreSQL's is the database's (`clock_timestamp()`, read as each write batch opens),
so that leases, `runAt` and back-off mean the same on every replica whatever their own
clocks say. Reads that depend on the time (the long-poll's wait for the next due job,
`oldestPendingSeconds`, the throughput minutes, the pruning cutoff) use the same clock as
the writes: see `DatabaseClock`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def utcnow() -> datetime:
    """This process's clock, timezone-aware UTC."""
    return datetime.now(UTC)


class DatabaseClock:
    """The database's clock, as this process last measured it.

    PostgreSQL's write batches each read the database's time; `observe` keeps the offset
    between it and this process's clock, and `now` applies it. Lease expiry writes every
    second, so the offset is never older than that while the server runs. Before the first
    write (and on SQLite, whose clock is this process's) the offset is zero.
    """

    def __init__(self) -> None:
        self._offset = timedelta(0)

    def observe(self, database_now: datetime, local_before: datetime, local_after: datetime) -> None:
        """The database said `database_now` between the two local readings."""
        self._offset = database_now - (local_before + (local_after - local_before) / 2)

    def now(self) -> datetime:
        return utcnow() + self._offset
