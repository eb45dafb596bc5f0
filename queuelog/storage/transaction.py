"""What an operation sees of the write transaction it runs in.

Operations run SQL through `execute`, and report what they changed: `record` adds the
job event and moves the job between counter rows. The group-commit writer writes the
events and counter changes of every operation that succeeded in one go before COMMIT,
and forgets those of an operation that rolled back to its savepoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from queuelog.model import EventKind, Job, JobEvent
from queuelog.storage.counters import CountKey, count_keys, keys_of
from queuelog.storage.types import to_micros


class Cursor(Protocol):
    rowcount: int
    lastrowid: int | None

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...
    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor: ...


class WriteTx:
    def __init__(self, connection: Connection, now: datetime) -> None:
        self.connection = connection
        self.now = now
        self.now_us = to_micros(now)
        self.events: list[JobEvent] = []
        self.count_changes: list[tuple[CountKey, int]] = []

    def execute(self, sql: str, parameters: Mapping[str, Any] | Sequence[Any] = ()) -> Cursor:
        return self.connection.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any]) -> Cursor:
        return self.connection.executemany(sql, parameters)

    def record(self, kind: EventKind | None, before: Job | None, after: Job | None) -> None:
        """A transition of one job: its event (if any) and its move between counter rows."""
        if before is not None:
            self.count_changes.extend((key, -1) for key in keys_of(before))
        if after is not None:
            self.count_changes.extend((key, 1) for key in keys_of(after))
            if kind is not None:
                self.events.append(JobEvent(kind, after, self.now))

    def record_from(self, kind: EventKind, old_status: str, old_worker: str | None, after: Job) -> None:
        """`record` for a job whose earlier state differs from `after` only in these two."""
        before = count_keys(after.type, old_status, after.created_by, old_worker)
        self.count_changes.extend((key, -1) for key in before)
        self.count_changes.extend((key, 1) for key in keys_of(after))
        self.events.append(JobEvent(kind, after, self.now))

    def mark(self) -> tuple[int, int]:
        return len(self.events), len(self.count_changes)

    def forget_since(self, mark: tuple[int, int]) -> None:
        del self.events[mark[0] :]
        del self.count_changes[mark[1] :]
