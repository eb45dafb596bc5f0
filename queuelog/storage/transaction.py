"""What an operation sees of the write transaction it runs in.

Operations run SQL through `execute`, and report what they changed: `record` adds the
job event and moves the job between counter rows. The group-commit writer writes the
events and counter changes of every operation that succeeded in one go before COMMIT,
and forgets those of an operation that rolled back to its savepoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from queuelog.model import TERMINAL_STATUSES, EventKind, Job, JobEvent, TypeControl
from queuelog.storage.schema.counters import STATUS_TEXT, Move
from queuelog.storage.schema.types import to_micros
from queuelog.storage.statements import Capabilities, Statements

FINISHED = TERMINAL_STATUSES


class RunAgain(Exception):
    """Raised inside an operation that must be undone (to its savepoint) and run again in the
    same transaction: where other transactions commit meanwhile (PostgreSQL), a claim whose
    controls another server has changed since it read them."""


class Cursor(Protocol):
    # Read-only, as sqlite3.Cursor has them; postgres/connection.py's Result's plain attributes
    # match too.
    @property
    def rowcount(self) -> int: ...
    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """What a read needs of a database's connection (SqliteConnection, PgConnection: each
    backend's connection.py), or of a WriteTx when the read runs inside a write: the
    database's statements as `sql`, its capabilities as `can`, and `execute`."""

    @property
    def sql(self) -> type[Statements]: ...
    @property
    def can(self) -> Capabilities: ...

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...


class WriteConnection(Connection, Protocol):
    """A connection a WriteTx writes through."""

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor: ...
    def execute_together(self, statements: Sequence[tuple[str, Any]], /) -> list[list[Any]]:
        """Run these statements in order, in one round trip where the database can (each
        still sees what the ones before it did); every statement's rows."""
        ...

    def insert_ids(self, sql: str, rows: list[dict[str, Any]], /) -> Sequence[int]:
        """executemany an INSERT; the new rows' ids, in the rows' order."""
        ...


@dataclass(slots=True)
class ClaimPreamble:
    """What a transaction's first claim did before claiming, which the claims after it in the
    same transaction (a group commit's batch) need not do again: overdue leases and timeouts
    expired (`expired`), the types with PENDING jobs read from the counters (`pending`; those
    moved to PENDING since are in the transaction's moves), due delayed jobs made ready
    (`promoted`, per type) and the controls read (`controls`: a write in the transaction that
    changes them drops them)."""

    expired: bool = False
    pending: frozenset[str] | None = None
    promoted: set[str] = field(default_factory=set)
    controls: dict[str, TypeControl] | None = None
    # Whether `controls` were read after this claim began (PostgreSQL: its promotion read
    # them); False: read by a claim before it, so other servers may have changed them since.
    controls_fresh: bool = False
    # Once a claim of the transaction holds the controlled-claim lock (flow.lock_and_plan):
    # the rate windows it read, per type. Only controlled claims add to a window, and they
    # wait for the lock, so the claims after it in the transaction count on these rows plus
    # its own claims, with no read of their own. (A rollback to a savepoint may release the
    # lock: forget_since drops this with the rest.)
    rate_windows: dict[str, list[Any]] | None = None


class WriteTx:
    def __init__(
        self, connection: WriteConnection, now: datetime, read_clock: Callable[[], datetime] | None = None
    ) -> None:
        self.connection = connection
        # The database's clock, read again by a step that must be stamped after what it waited
        # for and read (a controlled claim); None where the batch's `now` already is (SQLite
        # takes it once it holds the write lock).
        self.read_clock = read_clock
        # Which job_counts / job_minutes rows this transaction adds to (schema/tables.py).
        self.counter_shard = 0
        self.sql = connection.sql
        self.can = connection.can
        # The ids of the events this transaction writes, collected only when an event tail
        # (feeds/tail.py) must tell this process's events from other processes'.
        self.event_ids: list[int] | None = None
        self.now = now
        self.now_us = to_micros(now)
        self.events: list[JobEvent] = []
        # Whether `events` may hold some that are not stored (record_progress).
        self.unstored = False
        # (type, created_by, old status, old worker, new status, new worker) per transition;
        # turned into counter changes once per transaction, for each distinct move.
        self.moves: list[Move] = []
        # rate_claims rows of this transaction's rate-limited claims (operations/flow.py),
        # written with the events.
        self.rate_claims: list[dict[str, Any]] = []
        # Jobs with dependents that the running operation finished: settlements.settle
        # releases or cancels their dependents right after it, in its savepoint.
        self.parents: list[Job] = []
        # Set when this transaction wrote down dependents to settle later
        # (operations/settlements.py): once it commits, the server's sweeper looks at once.
        self.settlements_left = False
        # The types of the jobs this transaction made ready to claim now (released by a
        # completion): the batch's parked claims run only for these (group_commit.py).
        self.ready_types: set[str] = set()
        self.claim_preamble = ClaimPreamble()

    def move_clock_to(self, now: datetime) -> None:
        """Stamp what follows at `now`, when it is later (the batch's clock never goes back)."""
        if now > self.now:
            self.now = now
            self.now_us = to_micros(now)

    def read_clock_again(self) -> None:
        if self.read_clock is not None:
            self.move_clock_to(self.read_clock())

    def execute(self, sql: str, parameters: Mapping[str, Any] | Sequence[Any] = ()) -> Cursor:
        return self.connection.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any]) -> Cursor:
        return self.connection.executemany(sql, parameters)

    def execute_together(self, statements: Sequence[tuple[str, Any]]) -> list[list[Any]]:
        return self.connection.execute_together(statements)

    def record(self, kind: EventKind | None, before: Job | None, after: Job | None) -> None:
        """A transition of one job: its event (if any) and its move between counter rows."""
        job = after if after is not None else before
        assert job is not None
        self.moves.append(
            (
                job.type,
                job.created_by,
                STATUS_TEXT[before.status] if before is not None else None,
                before.worker_id if before is not None else None,
                STATUS_TEXT[after.status] if after is not None else None,
                after.worker_id if after is not None else None,
            )
        )
        if after is not None and kind is not None:
            self._stamped(after)
            self.events.append(JobEvent(kind, after, after.updated_at))
        if after is not None and after.has_dependents and after.status in FINISHED:
            self.parents.append(after)

    def record_from(self, kind: EventKind, old_status: str, old_worker: str | None, after: Job) -> None:
        """`record` for a job whose earlier state differs from `after` only in these two."""
        self.moves.append(
            (after.type, after.created_by, old_status, old_worker, STATUS_TEXT[after.status], after.worker_id)
        )
        self._stamped(after)
        self.events.append(JobEvent(kind, after, after.updated_at))
        if after.has_dependents and after.status in FINISHED:
            self.parents.append(after)

    def record_progress(self, job: Job) -> None:
        """A progress report stored on a job: its PROGRESS event goes to this server's
        subscribers, but is neither written to job_events nor notified
        (operations/progress.py says why); no counter moves, nothing for dependents to settle."""
        self._stamped(job)
        self.events.append(JobEvent(EventKind.PROGRESS, job, job.updated_at))
        self.unstored = True

    def stored_events(self) -> list[JobEvent]:
        """The events written to job_events and notified to other servers."""
        if not self.unstored:
            return self.events
        return [e for e in self.events if e.kind is not EventKind.PROGRESS]

    def _stamped(self, after: Job) -> None:
        """A job changed, stamped `after.updated_at`: never before its own last stamp, which
        may be after this batch's clock (statements.py). What this transaction writes next,
        its dependents among it, is stamped no earlier."""
        if after.updated_at > self.now:
            self.move_clock_to(after.updated_at)

    def forget(self, job_type: str, status: str, created_by: str, worker_id: str | None) -> None:
        """A job deleted (pruned) in this state."""
        self.moves.append((job_type, created_by, status, worker_id, None, None))

    def mark(self) -> tuple[int, int, int]:
        return len(self.events), len(self.moves), len(self.rate_claims)

    def forget_since(self, mark: tuple[int, int, int]) -> None:
        del self.events[mark[0] :]
        del self.moves[mark[1] :]
        del self.rate_claims[mark[2] :]
        self.parents.clear()  # only ever the failed operation's
        self.claim_preamble = ClaimPreamble()  # it may have done part of it: the next claim redoes it
