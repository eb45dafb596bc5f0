"""PostgreSQL through psycopg 3: the group commit (group_commit.py), reads, and events across
servers.

Writes are grouped as on SQLite: operations queued meanwhile are run in one transaction,
each in its own SAVEPOINT, and answered after COMMIT. Up to WRITE_CONNECTIONS batches run at
once, each on a writer connection and a thread of its own (psycopg's sync API: a network
round trip must not hold the event loop): while one waits for its COMMIT to reach the disk,
the next one runs. Each batch is answered once its COMMIT is done; its events are published
in the order the COMMITs began, so a job's events reach subscribers in the order they
happened.

Many server processes write at once; PostgreSQL's row locks, `FOR UPDATE SKIP LOCKED`
claims and unique constraints keep them apart (statements/), as they keep this
server's own concurrent batches apart. A batch that PostgreSQL aborts as a deadlock or
serialization failure is run again from the start; nothing of it was kept.

The database's clock rules: each batch takes `now` from PostgreSQL (`clock_timestamp()`),
so leases and `runAt` mean the same on every server whatever its own clock says. (An
offset read every few seconds would save that round trip, but servers' estimates then
differ by milliseconds: a job enqueued on one was not yet due for a claim on another.)

Events cross processes with LISTEN/NOTIFY: each commit notifies `queuelog_events` with a
small payload (this server's id, then `kind:job_id:status` items) in the same transaction, so it
is delivered exactly when the rows are visible. Every other server reads those jobs back
and hands them to its subscriptions and waiting claims (notifications.py, feeds/notify.py).

Reads run on a small pool of connections, on threads, each in one read-only REPEATABLE READ
transaction: all its statements see one snapshot, as a read on SQLite does.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors

from queuelog import clock
from queuelog.errors import DatabaseUnavailable
from queuelog.model import JobEvent
from queuelog.storage.database import Heard, Missed
from queuelog.storage.group_commit import Batch, BatchSteps, GroupCommit, Operation, Outcome, all_failed
from queuelog.storage.postgres import vacuum
from queuelog.storage.postgres.connection import POSTGRES, PgConnection, close_quietly, connect
from queuelog.storage.postgres.notifications import Notifications
from queuelog.storage.postgres.statements import PostgresStatements
from queuelog.storage.postgres.statements.plans import OPEN_WRITE_BATCH
from queuelog.storage.postgres.statements.server import DB_NOW, EVENTS_CHANNEL, NOTIFY
from queuelog.storage.schema.types import from_micros
from queuelog.storage.transaction import RunAgain, WriteTx

T = TypeVar("T")
log = logging.getLogger("queuelog.storage")

# What a write batch hands back: its outcomes, the events of what it kept, and the ticket of
# each COMMIT it began (one per attempt; none when it never got that far).
Committed = tuple[list[Outcome], list[JobEvent], list[int]]
NOTIFY_PAYLOAD_MAX = 7000  # PostgreSQL's limit is 8000 bytes
READ_CONNECTIONS = 4
WRITE_CONNECTIONS = 4
BATCH_ATTEMPTS = 5
# Counter shards a write batch picks from at random (schema/tables.py, job_counts): two
# concurrent batches, of any servers, add to the same counter rows once in this many.
COUNTER_SHARDS = 16
RETRIED_ERRORS = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
# An operation that meets a unique violation runs again, at most this many times in all. Only
# idempotency keys can collide (ids come from a sequence, counters are upserts), and each
# collision is a key another transaction has committed since the operation looked: the next
# run finds that job. So a run of collisions is at most as long as the batch has keys that
# other servers insert at that very moment; the bound only stops a loop that would not end.
UNIQUE_VIOLATION_ATTEMPTS = 64


def _first_row(connection: PgConnection, sql: str, parameters: Any) -> Any:
    return connection.execute(sql, parameters).fetchone()


def notify_payloads(origin: str, events: Sequence[JobEvent]) -> list[str]:
    """`origin kind:id:status ...`, split to stay under PostgreSQL's payload limit."""
    payloads, current = [], [origin]
    size = len(origin)
    for event in events:
        item = f"{event.kind.value}:{event.job.id}:{event.job.status.value}"
        if size + len(item) + 1 > NOTIFY_PAYLOAD_MAX:
            payloads.append(" ".join(current))
            current, size = [origin], len(origin)
        current.append(item)
        size += len(item) + 1
    if len(current) > 1:
        payloads.append(" ".join(current))
    return payloads


class PostgresDatabase(GroupCommit):
    sql = PostgresStatements
    can = POSTGRES

    def __init__(self, url: str, on_commit: Callable[[Sequence[JobEvent]], None], steps: BatchSteps) -> None:
        super().__init__(on_commit, steps)
        self.url = url
        self.origin = uuid.uuid4().hex[:12]  # tells this server's notifications from others'
        # Writer connections not in use; the first is opened now, so that a server whose
        # database does not answer says so at start-up.
        self._spare_writers: list[psycopg.Connection[Any]] = [connect(url, autocommit=False)]
        self._writers_lock = threading.Lock()
        self._running = 0  # write batches under way
        self._lane_running = False  # one of them is the controlled lane's
        # Each COMMIT takes a ticket as it begins; events are published in ticket order.
        self._tickets = itertools.count()
        self._tickets_lock = threading.Lock()
        self._next_ticket = 0
        self._in_commit_order: dict[int, list[JobEvent]] = {}  # events waiting for earlier ones
        self._write_threads = ThreadPoolExecutor(WRITE_CONNECTIONS, thread_name_prefix="queuelog-pg-writer")
        self._read_threads = ThreadPoolExecutor(READ_CONNECTIONS, thread_name_prefix="queuelog-pg-reader")
        self._readers = threading.local()
        self._all_readers: list[psycopg.Connection[Any]] = []
        self._readers_lock = threading.Lock()

    # --- writes ------------------------------------------------------------------------------

    has_lane = True

    def _schedule(self) -> None:
        # Up to WRITE_CONNECTIONS batches at once: while one waits for its COMMIT to reach the
        # disk, the next runs (PostgreSQL flushes their commits together). What arrives while
        # all are busy waits, and goes in the next batch. Of those, at most one batch of the
        # controlled lane: the lane's claims would only queue for the lock one after another.
        # A lane batch takes what else waits too, claims last as ever (they see the batch's
        # completions).
        while self._running < WRITE_CONNECTIONS:
            lane = bool(self._lane) and not self._lane_running
            if lane:
                batch = self._take() + self._take_lane()
            elif self._queue or self._last:
                batch = self._take()
            else:
                return
            if not batch:
                continue
            self._running += 1
            self._lane_running = self._lane_running or lane
            self._idle.clear()
            done = asyncio.get_running_loop().run_in_executor(self._write_threads, self._commit, batch)
            done.add_done_callback(functools.partial(self._batch_done, lane))

    def _working(self) -> bool:
        return self._running > 0

    def _batch_done(self, lane: bool, done: asyncio.Future[Committed]) -> None:
        """Answer the batch's callers at once: its COMMIT is done, whatever other batches
        still wait for (a COMMIT stalled on a disk or a replica holds back no other answer).
        Publish its events once those of every batch whose COMMIT began before its own are:
        a batch that waited for a row another batch had locked began its COMMIT after that
        one ended, so subscribers hear of a job's changes in the order they were made."""
        self._running -= 1
        if lane:
            self._lane_running = False
        outcomes, events, tickets = done.result()  # _commit catches everything
        self._answer(outcomes)
        for ticket in tickets[:-1]:  # attempts that were rolled back
            self._in_commit_order[ticket] = []
        if tickets:  # else nothing reached COMMIT: nothing to publish
            self._in_commit_order[tickets[-1]] = events
        while self._next_ticket in self._in_commit_order:
            self._publish(self._in_commit_order.pop(self._next_ticket))
            self._next_ticket += 1
        self._look_again()

    def _check_out_writer(self) -> psycopg.Connection[Any]:
        with self._writers_lock:
            while self._spare_writers:
                raw = self._spare_writers.pop()
                if not raw.closed and not raw.broken:
                    return raw
        return connect(self.url, autocommit=False)

    def _check_in_writer(self, raw: psycopg.Connection[Any]) -> None:
        if raw.closed or raw.broken:
            return
        with self._writers_lock:
            self._spare_writers.append(raw)

    def _close_spare_writers(self) -> None:
        with self._writers_lock:
            spares, self._spare_writers = self._spare_writers, []
        for raw in spares:
            close_quietly(raw)

    def _commit(self, batch: Batch) -> Committed:
        tickets: list[int] = []
        outcomes, events = self._commit_attempts(batch, tickets)
        return outcomes, events, tickets

    def _commit_attempts(self, batch: Batch, tickets: list[int]) -> tuple[list[Outcome], list[JobEvent]]:
        for attempt in range(BATCH_ATTEMPTS):
            raw = None
            try:
                raw = self._check_out_writer()
                result = self._commit_once(raw, batch, tickets)
                self._check_in_writer(raw)
                return result
            except RETRIED_ERRORS as exc:
                log.info("write batch %s (%d operations); running it again", type(exc).__name__, len(batch))
                self._rollback(raw)
                if attempt == BATCH_ATTEMPTS - 1:
                    return all_failed(batch, exc), []
            except (psycopg.OperationalError, psycopg.InterfaceError, DatabaseUnavailable) as exc:
                # The connection is gone (PostgreSQL restarting, network): nothing of this batch
                # is acknowledged; the next batch reconnects.
                log.warning("PostgreSQL unavailable for a write batch: %s", type(exc).__name__)
                close_quietly(raw)
                self._close_spare_writers()  # gone with it, most likely: the next batch reconnects
                failure = DatabaseUnavailable("the database is unavailable; try again")
                return all_failed(batch, failure), []
            except Exception as exc:
                self._rollback(raw)
                return all_failed(batch, exc), []
        raise AssertionError("unreachable")  # pragma: no cover

    def _commit_once(
        self, raw: psycopg.Connection[Any], batch: Batch, tickets: list[int], savepoints: bool | None = None
    ) -> tuple[list[Outcome], list[JobEvent]]:
        """One transaction for the batch. A batch of one runs without a savepoint (two round
        trips fewer: the common case under light load); if it fails, rolling back the whole
        transaction is the same thing, and an idempotency race reruns it with one."""
        # Generic plans from the start (nearly every statement of a write batch is in
        # GENERIC_PLANS), set with BEGIN: a batch that runs no other statement sends no switch.
        # SET LOCAL, not a session setting: behind PgBouncer's transaction pooling a session
        # SET would stay on a server connection that other clients then get.
        connection = PgConnection(raw, locking=True, generic=True)
        before = clock.utcnow()
        with raw.pipeline():  # psycopg's BEGIN and the clock's read: one round trip, not two
            opened = raw.execute(OPEN_WRITE_BATCH)
        now_us = opened.fetchone()[2]  # type: ignore[index]
        tx = WriteTx(connection, from_micros(now_us), read_clock=lambda: _database_now(raw))
        tx.counter_shard = random.randrange(COUNTER_SHARDS)
        self.db_clock.observe(tx.now, before, clock.utcnow())
        if self.own_events is not None:
            tx.event_ids = []
        if savepoints is None:
            savepoints = len(batch) > 1
        outcomes: list[Outcome] = []
        if savepoints:
            for index, (operation, future) in enumerate(batch):
                # The previous operation's savepoint is released as the next one is taken,
                # both sent with the operation's first statement; COMMIT releases the last.
                connection.defer(*(("RELEASE SAVEPOINT op",) if index else ()), "SAVEPOINT op")
                outcomes.append((future, *self._run_one(connection, tx, operation)))
            connection.drop_deferred()
        else:
            ((operation, future),) = batch
            try:
                outcomes.append((future, self._run_operation(operation, tx), None))
            except (pg_errors.UniqueViolation, RunAgain):
                raw.rollback()
                return self._commit_once(raw, batch, tickets, savepoints=True)
            except (*RETRIED_ERRORS, psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except Exception as exc:
                raw.rollback()
                return [(future, None, exc)], []
        # The side tables, the notification and the COMMIT need no answer but success: one
        # round trip for them all. Should one fail, the pipeline raises it and the COMMIT
        # only ends the failed transaction (nothing of it is stored). Always NOTIFY, even
        # where this server polls: replicas that LISTEN hear it too.
        with raw.pipeline():
            self._write_side_effects(tx)
            for payload in notify_payloads(self.origin, tx.stored_events()):
                raw.execute(NOTIFY, (EVENTS_CHANNEL, payload))
            if self.own_events is not None:
                self.own_events.add(tx.event_ids or ())  # ids never reused: no withdraw on failure
            with self._tickets_lock:
                tickets.append(next(self._tickets))
            raw.commit()
        self._committed(tx)
        return outcomes, tx.events

    def _run_one(self, connection: PgConnection, tx: WriteTx, operation: Operation) -> tuple[Any, Any]:
        """One operation in its savepoint (taken by the deferred SAVEPOINT that goes with its
        first statement): (value, None) or (None, the exception)."""
        run = self._run_operation
        for attempt in range(1, UNIQUE_VIOLATION_ATTEMPTS + 1):
            mark = tx.mark()
            try:
                value = run(operation, tx)
            except (pg_errors.UniqueViolation, RunAgain) as exc:
                # Another server inserted one of its idempotency keys after this operation
                # looked (a batch may meet several, one after the other), or changed the
                # controls a claim went by: run it again, and it finds that job, or reads them.
                self._undo(connection, tx, mark)
                if attempt == UNIQUE_VIOLATION_ATTEMPTS:
                    return None, exc
            except RETRIED_ERRORS:
                raise  # the transaction is lost: the whole batch runs again
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except Exception as exc:
                self._undo(connection, tx, mark)
                return None, exc
            else:
                return value, None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _undo(connection: PgConnection, tx: WriteTx, mark: tuple[int, int, int]) -> None:
        """Back to the operation's savepoint (kept, for another run), forgetting its events.
        An operation that failed before its first statement has not taken it yet: now it does."""
        connection.send_deferred()
        connection.raw.execute("ROLLBACK TO SAVEPOINT op")
        connection.rolled_back_to_savepoint()
        tx.forget_since(mark)

    def _rollback(self, raw: psycopg.Connection[Any] | None) -> None:
        if raw is None:
            return
        try:
            raw.rollback()
        except psycopg.Error:
            close_quietly(raw)
        else:
            self._check_in_writer(raw)

    # --- reads -------------------------------------------------------------------------------

    def _reader(self) -> psycopg.Connection[Any]:
        connection = getattr(self._readers, "connection", None)
        if connection is None or connection.closed or connection.broken:
            connection = self._readers.connection = connect(self.url, autocommit=True)
            # Each read sees one snapshot, as on SQLite (a page and its totalCount agree).
            connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            connection.read_only = True
            with self._readers_lock:
                self._all_readers.append(connection)
        return connection

    def _run_read(self, function: Callable[..., T], args: tuple[Any, ...], one_statement: bool = False) -> T:
        try:
            raw = self._reader()
            try:
                return self._read_on(raw, function, args, one_statement)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                # A kept connection that died while idle (PostgreSQL restarted, a network cut)
                # says so only when used. A read is safe to run again: once, on a new one.
                if not (raw.broken or raw.closed):
                    raise
                return self._read_on(self._reader(), function, args, one_statement)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            log.warning("PostgreSQL unavailable for a read: %s", type(exc).__name__)
            raise DatabaseUnavailable("the database is unavailable; try again") from None

    @staticmethod
    def _read_on(
        raw: psycopg.Connection[Any], function: Callable[..., T], args: tuple[Any, ...], one_statement: bool
    ) -> T:
        if one_statement:  # a statement of its own is a snapshot already: no BEGIN, no COMMIT
            return function(PgConnection(raw, locking=False, in_transaction=False), *args)
        with raw.transaction():
            return function(PgConnection(raw, locking=False), *args)

    async def read(self, function: Callable[..., T], *args: Any) -> T:
        """Run a read on a pooled connection, in one transaction."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._read_threads, self._run_read, function, args)

    async def read_one(self, sql: str, parameters: Any = ()) -> Any:
        """The first row of one statement (every request's key checks: one round trip)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._read_threads, self._run_read, _first_row, (sql, parameters), True
        )

    def read_one_now(self, sql: str, parameters: Any = ()) -> Any:
        """read_one on the caller's thread, which waits for the round trip."""
        return self._run_read(_first_row, (sql, parameters), True)

    # --- other servers -------------------------------------------------------------------

    def others_wrote(self) -> bool:
        """Whether another server may have committed since the last call: always."""
        return True

    def listen(self, heard: Heard, missed: Missed) -> Notifications:
        """Hear other servers' events as they commit (notifications.py)."""
        return Notifications(self.url, self.origin, heard, missed)

    # --- maintenance ---------------------------------------------------------------------

    async def vacuum_where_due(self) -> list[str]:
        """VACUUM and ANALYZE what autovacuum would have, where it does not run (vacuum.py),
        on a connection of its own, closed after (its advisory lock goes with it); the
        statements run."""
        done = await asyncio.get_running_loop().run_in_executor(None, self._vacuum_where_due)
        return [work.statement for work in done]

    def _vacuum_where_due(self) -> list[vacuum.Work]:
        try:
            with connect(self.url, autocommit=True) as raw:
                return vacuum.vacuum_where_due(raw)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            log.warning("PostgreSQL unavailable for VACUUM: %s", type(exc).__name__)
            raise DatabaseUnavailable("the database is unavailable; try again") from None

    async def close(self) -> None:
        await self._drained()
        self._write_threads.shutdown(wait=True)
        self._read_threads.shutdown(wait=True)
        self._close_spare_writers()
        with self._readers_lock:
            for connection in self._all_readers:
                connection.close()


def _database_now(raw: psycopg.Connection[Any]) -> datetime:
    return from_micros(raw.execute(DB_NOW).fetchone()[0])  # type: ignore[index]
