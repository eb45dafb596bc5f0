"""PostgreSQL through psycopg 3, with the group commit of sqlite.py and events across servers.

Writes are grouped as on SQLite: operations queued meanwhile are run in one transaction,
each in its own SAVEPOINT, and answered after COMMIT. Up to WRITE_CONNECTIONS batches run at
once, each on a writer connection and a thread of its own (psycopg's sync API: a network
round trip must not hold the event loop): while one waits for its COMMIT to reach the disk,
the next one runs. Each batch is answered once its COMMIT is done; its events are published
in the order the COMMITs began, so a job's events reach subscribers in the order they
happened.

Many server processes write at once; PostgreSQL's row locks, `FOR UPDATE SKIP LOCKED`
claims and unique constraints keep them apart (postgres_statements.py), as they keep this
server's own concurrent batches apart. A batch that PostgreSQL aborts as a deadlock or
serialization failure is run again from the start; nothing of it was kept.

The database's clock rules: each batch takes `now` from PostgreSQL (`clock_timestamp()`),
so leases and `runAt` mean the same on every server whatever its own clock says. (An
offset read every few seconds would save that round trip, but servers' estimates then
differ by milliseconds: a job enqueued on one was not yet due for a claim on another.)

Events cross processes with LISTEN/NOTIFY: each commit notifies `queuelog_events` with a
small payload (this server's id, then `kind:job_id:status` items) in the same transaction, so it
is delivered exactly when the rows are visible. Every other server reads those jobs back
and hands them to its subscriptions and waiting claims (listener.py).

Reads run on a small pool of connections, on threads, each in one read-only REPEATABLE READ
transaction: all its statements see one snapshot, as a read on SQLite does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Loader
from psycopg.pq import ExecStatus, Format
from psycopg.types.numeric import Int8

from queuelog import clock
from queuelog.errors import DatabaseUnavailable
from queuelog.model import JobEvent
from queuelog.storage.feeds.tail import OwnEvents
from queuelog.storage.group_commit import Batch, GroupCommit, Operation, Outcome, all_failed
from queuelog.storage.operations import bulk, claims
from queuelog.storage.operations import jobs as ops
from queuelog.storage.postgres import vacuum
from queuelog.storage.postgres.statements import PostgresStatements, PostgresWriterStatements
from queuelog.storage.postgres.statements.plans import DEFAULT_PLANS, FORCE_GENERIC_PLANS, GENERIC_PLANS
from queuelog.storage.postgres.statements.sending import AT_ONCE, INT8_ARRAYS, RETURNING_ID
from queuelog.storage.postgres.statements.server import DB_NOW, EVENTS_CHANNEL, NOTIFY
from queuelog.storage.schema.types import from_micros
from queuelog.storage.transaction import WriteTx

T = TypeVar("T")
log = logging.getLogger("queuelog.storage")

# What a write batch hands back: its outcomes, the events of what it kept, and the ticket of
# each COMMIT it began (one per attempt; none when it never got that far).
Committed = tuple[list[Outcome], list[JobEvent], list[int]]
NOTIFY_PAYLOAD_MAX = 7000  # PostgreSQL's limit is 8000 bytes
READ_CONNECTIONS = 4
WRITE_CONNECTIONS = 4
BATCH_ATTEMPTS = 5
# Counter shards a write batch picks from at random (tables.py, job_counts): two concurrent
# batches, of any servers, add to the same counter rows once in this many.
COUNTER_SHARDS = 16
CONNECT_TIMEOUT_SECONDS = 5
_PG_EPOCH_US = 946_684_800 * 1_000_000  # 2000-01-01, PostgreSQL's epoch, in Unix microseconds
RETRIED_ERRORS = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
# An operation that meets a unique violation runs again, at most this many times in all. Only
# idempotency keys can collide (ids come from a sequence, counters are upserts), and each
# collision is a key another transaction has committed since the operation looked: the next
# run finds that job. So a run of collisions is at most as long as the batch has keys that
# other servers insert at that very moment; the bound only stops a loop that would not end.
UNIQUE_VIOLATION_ATTEMPTS = 64


class MicrosLoader(Loader):
    """timestamptz, read in binary (microseconds since 2000-01-01), as Unix microseconds:
    the integer form operations.py and the codec use on both backends."""

    format = Format.BINARY

    def load(self, data: Any) -> int:
        return int.from_bytes(data, "big", signed=True) + _PG_EPOCH_US


def conninfo(url: str) -> str:
    """A libpq URL from a SQLAlchemy-style one (`postgresql+psycopg://` -> `postgresql://`)."""
    scheme, sep, rest = url.partition("://")
    return "postgresql://" + rest if sep and scheme.startswith("postgres") else url


def connect(url: str, *, autocommit: bool) -> psycopg.Connection[Any]:
    try:
        connection = psycopg.connect(
            conninfo(url), autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_SECONDS
        )
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {type(exc).__name__}") from None
    connection.adapters.register_loader("timestamptz", MicrosLoader)
    return connection


class Result:
    """What operations.py reads of a cursor: rows, rowcount, and the id an INSERT returned."""

    __slots__ = ("rows", "rowcount", "lastrowid", "_next")

    def __init__(self, rows: list[Any], rowcount: int, lastrowid: int | None = None) -> None:
        self.rows = rows
        self.rowcount = rowcount
        self.lastrowid = lastrowid
        self._next = 0

    def fetchone(self) -> Any:
        if self._next >= len(self.rows):
            return None
        self._next += 1
        return self.rows[self._next - 1]

    def fetchall(self) -> list[Any]:
        rows, self._next = self.rows[self._next :], len(self.rows)
        return rows


class PgConnection:
    """A psycopg connection, carrying PostgreSQL's statements (`sql`): on a writer
    (`locking`), the reads of rows it is about to update take them FOR UPDATE.

    `defer` holds statements that need no answer (a batch's SAVEPOINT and RELEASE) until the
    next statement that does, and sends them in its round trip: an operation in its own
    savepoint then costs no round trip more than one without.

    Statements of GENERIC_PLANS run with plan_cache_mode set to force_generic_plan, for the
    transaction; the others with the server's setting. The switch is deferred likewise, and
    sent only when the next statement needs the other mode."""

    def __init__(
        self,
        connection: psycopg.Connection[Any],
        *,
        locking: bool,
        in_transaction: bool = True,
        generic: bool = False,
    ) -> None:
        self.raw = connection
        self.sql: type[PostgresStatements] = PostgresWriterStatements if locking else PostgresStatements
        self._deferred: list[str] = []
        # Whether plan_cache_mode is forced now; None: not known (after ROLLBACK TO SAVEPOINT,
        # which restores the mode of the savepoint's time).
        self._generic: bool | None = generic  # the mode the transaction began in
        # Outside a transaction (a read of one statement) SET LOCAL does nothing: not sent.
        self._plan_modes = in_transaction

    def _plan_mode_for(self, sql: str) -> None:
        if not self._plan_modes:
            return
        generic = sql in GENERIC_PLANS
        if generic is not self._generic:
            self._deferred.append(FORCE_GENERIC_PLANS if generic else DEFAULT_PLANS)
            self._generic = generic

    def rolled_back_to_savepoint(self) -> None:
        self._generic = None

    def defer(self, *statements: str) -> None:
        self._deferred.extend(statements)

    def drop_deferred(self) -> None:
        """Forget what was deferred (before COMMIT, which releases every savepoint)."""
        self._deferred.clear()

    def send_deferred(self) -> None:
        """Send what was deferred now, in one round trip (before a ROLLBACK TO SAVEPOINT)."""
        if self._deferred:
            with self.raw.pipeline():
                self._queue_deferred()

    def _queue_deferred(self) -> None:
        statements, self._deferred = self._deferred, []
        for statement in statements:
            self.raw.execute(statement)

    def _execute(self, sql: str, parameters: Any) -> psycopg.Cursor[Any]:
        """One statement, in the same round trip as what was deferred."""
        self._plan_mode_for(sql)
        if not self._deferred:
            return self.raw.execute(sql, parameters or None, binary=True)
        with self.raw.pipeline():
            self._queue_deferred()
            return self.raw.execute(sql, parameters or None, binary=True)

    def execute(self, sql: str, parameters: Any = ()) -> Result:
        int8_arrays = INT8_ARRAYS.get(sql)
        if int8_arrays is not None:
            parameters = _as_int8_arrays(parameters, int8_arrays)
        cursor = self._execute(sql, parameters)
        rows = _rows(cursor)
        lastrowid = rows[0][0] if rows and sql in RETURNING_ID else None
        return Result(rows, cursor.rowcount, lastrowid)

    def execute_together(self, statements: Sequence[tuple[str, Any]]) -> list[list[Any]]:
        with self.raw.pipeline():
            cursors = []
            for sql, parameters in statements:
                self._plan_mode_for(sql)
                self._queue_deferred()
                cursors.append(self.raw.execute(sql, parameters or None, binary=True))
        return [_rows(cursor) for cursor in cursors]

    def executemany(self, sql: str, parameters: Iterable[Any]) -> Result:
        rows = list(parameters)
        at_once = AT_ONCE.get(sql)
        if at_once is not None and len(rows) > 1:
            cursor = self._execute(at_once.sql, at_once.parameters(rows))
            return Result([], cursor.rowcount)
        self._plan_mode_for(sql)
        self.send_deferred()
        cursor = self.raw.cursor(binary=True)
        cursor.executemany(sql, rows)
        return Result([], cursor.rowcount)

    def insert_ids(self, sql: str, rows: list[dict[str, Any]]) -> list[int]:
        at_once = AT_ONCE.get(sql)
        if at_once is not None:
            cursor = self._execute(at_once.sql, at_once.parameters(rows))
            return sorted(row[0] for row in cursor.fetchall())  # rising in the rows' order
        self._plan_mode_for(sql)
        self.send_deferred()
        cursor = self.raw.cursor(binary=True)
        cursor.executemany(sql, rows, returning=True)
        ids = []
        while True:
            ids.append(cursor.fetchone()[0])  # type: ignore[index]
            if not cursor.nextset():
                return ids


def _as_int8_arrays(parameters: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """`parameters` with the integer lists `names` sent as bigint[] (postgres_statements.INT8_ARRAYS)."""
    return parameters | {name: [None if v is None else Int8(v) for v in parameters[name]] for name in names}


def _rows(cursor: psycopg.Cursor[Any]) -> list[Any]:
    """The rows of a statement, none for one that returns none. (Not by `cursor.description`,
    which makes a Column object of every column each time it is read: 15 % of a claim's
    Python time in a profile.)"""
    result = cursor.pgresult
    if result is None or result.status != ExecStatus.TUPLES_OK:
        return []
    return cursor.fetchall()


def _close(raw: psycopg.Connection[Any] | None) -> None:
    if raw is not None:
        with contextlib.suppress(psycopg.Error):
            raw.close()


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

    def __init__(self, url: str, on_commit: Callable[[Sequence[JobEvent]], None]) -> None:
        super().__init__(on_commit)
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
        # Set when the polling event feed runs instead of LISTEN: this process's event ids.
        self.own_events: OwnEvents | None = None

    # --- writes ------------------------------------------------------------------------------

    has_lane = True
    bulk_chunk_seconds = bulk.PG_CHUNK_SECONDS
    bulk_pause_ratio = bulk.PG_PAUSE_RATIO
    bulk_scan_rows = bulk.PG_SCAN_ROWS
    settle_chunk_seconds = bulk.PG_CHUNK_SECONDS

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
            _close(raw)

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
                _close(raw)
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
            raw.execute(FORCE_GENERIC_PLANS)
            opened = raw.execute(DB_NOW)
        now_us = opened.fetchone()[0]  # type: ignore[index]
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
                outcomes.append((future, ops.run(operation, tx), None))
            except (pg_errors.UniqueViolation, claims.RunAgain):
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
            ops.write_side_effects(tx)
            for payload in notify_payloads(self.origin, tx.events):
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
        for attempt in range(1, UNIQUE_VIOLATION_ATTEMPTS + 1):
            mark = tx.mark()
            try:
                value = ops.run(operation, tx)
            except (pg_errors.UniqueViolation, claims.RunAgain) as exc:
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
            _close(raw)
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

    # --- maintenance ---------------------------------------------------------------------

    async def vacuum_where_due(self) -> list[vacuum.Work]:
        """VACUUM and ANALYZE what autovacuum would have, where it does not run (vacuum.py),
        on a connection of its own, closed after (its advisory lock goes with it)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._vacuum_where_due)

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
