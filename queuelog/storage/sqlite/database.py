"""SQLite on the event loop, with group commit.

Every statement queuelog runs is an indexed lookup or a bounded write that takes
microseconds, so they run on the event loop thread itself: no thread hop per call.

Writes are grouped: an operation is queued with `write()`, and the loop runs every
operation queued during one turn in a single transaction, each inside its own SAVEPOINT
so that a refusal (CONFLICT, NOT_FOUND...) rolls back only itself. The events and counter
changes of the operations that succeeded are written at the end, then COMMIT, and only
then is each caller answered: an acknowledged write has been committed (WAL with
synchronous=NORMAL survives a killed process). One COMMIT for many requests is what lets
one writer reach tens of thousands of writes per second.

With several server processes on one file (`serve --workers N`) writers queue on an
exclusive `flock` beside the database (write_lock.py). The loop only ever tries it
without blocking; when another process holds it, that batch runs on a helper thread that
waits for the lock, and new operations keep queueing for the next batch meanwhile.

Checkpoints (copying the write-ahead log back into the database) stay off that path. SQLite
runs one every 1,000 log pages inside the COMMIT that crosses the mark: the writer, on the
event loop, then waits for the log's fsync, the copy and the database's fsync, and so does
every request of the server (a quarter of the server's time on chains of dependent jobs,
whose steps dirty pages all over the table). The writer turns that off
(wal_autocheckpoint=0); a `Checkpointer` thread checkpoints every CHECKPOINT_SECONDS on its
own connection instead, PASSIVE: it never waits for a writer or a reader, nor holds one up,
and sqlite3 lets go of the GIL meanwhile. Other connections (the CLI) keep SQLite's default.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from queuelog import clock
from queuelog.model import JobEvent
from queuelog.storage.database import Heard, Listening, Missed
from queuelog.storage.group_commit import Batch, BatchSteps, GroupCommit, Outcome, all_failed
from queuelog.storage.sqlite.connection import SQLITE, connect, database_path
from queuelog.storage.sqlite.statements import SqliteStatements
from queuelog.storage.transaction import WriteTx
from queuelog.storage.write_lock import WriteLock

T = TypeVar("T")
log = logging.getLogger("queuelog.storage")
CHECKPOINT_SECONDS = 0.2


class Checkpointer:
    """Checkpoints the database at `path` every CHECKPOINT_SECONDS, PASSIVE, on a thread and
    a connection of its own, until `close()` (which checkpoints once more)."""

    def __init__(self, path: str) -> None:
        self._connection = connect(path)
        self._stop = threading.Event()
        self.checkpoints = 0  # checkpoints run (for tests)
        self._thread = threading.Thread(target=self._run, name="queuelog-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(CHECKPOINT_SECONDS):
            self.checkpoint()
        self.checkpoint()
        self._connection.close()

    def checkpoint(self) -> None:
        try:
            self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:  # the file went away, the disk is full: the next try may do
            log.warning("SQLite checkpoint failed: %s", exc)
        else:
            self.checkpoints += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class SqliteDatabase(GroupCommit):
    sql = SqliteStatements
    can = SQLITE

    def __init__(self, url: str, on_commit: Callable[[Sequence[JobEvent]], None], steps: BatchSteps) -> None:
        super().__init__(on_commit, steps)
        path = database_path(url)
        self._writer = connect(path)
        self._writer.execute("PRAGMA wal_autocheckpoint=0")  # the Checkpointer's job
        self._reader = connect(path)
        self._reader.execute("PRAGMA query_only=ON")
        self.checkpointer = Checkpointer(path)
        self._lock = WriteLock(url)
        self._flush_scheduled = False
        self._in_thread = False
        self._thread: ThreadPoolExecutor | None = None
        self._data_version: int | None = None

    # --- writes ------------------------------------------------------------------------------

    def _schedule(self) -> None:
        if not self._flush_scheduled and not self._in_thread and self._waiting:
            self._flush_scheduled = True
            self._idle.clear()
            asyncio.get_running_loop().call_soon(self._flush)

    def _working(self) -> bool:
        return self._flush_scheduled or self._in_thread

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch = self._take()
        if not batch:
            self._idle.set()
            return
        if self._lock.try_acquire():
            try:
                outcomes, events = self._commit(batch)
            finally:
                self._lock.release()
            self._settle(outcomes, events)
            return
        self._in_thread = True
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="queuelog-writer")
        done = asyncio.get_running_loop().run_in_executor(self._thread, self._commit_waiting_for_lock, batch)
        done.add_done_callback(self._thread_done)

    def _commit_waiting_for_lock(self, batch: Batch) -> tuple[list[Outcome], list[JobEvent]]:
        with self._lock.held():
            return self._commit(batch)

    def _thread_done(self, done: asyncio.Future[tuple[list[Outcome], list[JobEvent]]]) -> None:
        self._in_thread = False
        outcomes, events = done.result()  # _commit catches everything
        self._settle(outcomes, events)

    def _commit(self, batch: Batch) -> tuple[list[Outcome], list[JobEvent]]:
        connection = self._writer
        tx = WriteTx(connection, clock.utcnow())
        if self.own_events is not None:
            tx.event_ids = []
        outcomes: list[Outcome] = []
        run = self._run_operation
        try:
            connection.execute("BEGIN IMMEDIATE")
            # Timed once the write lock is held: another process's commit that this batch
            # waited for (and may read) is never stamped after it.
            tx.move_clock_to(clock.utcnow())
            for operation, future in batch:
                mark = tx.mark()
                connection.execute("SAVEPOINT op")
                try:
                    value = run(operation, tx)
                except Exception as exc:
                    connection.execute("ROLLBACK TO op")
                    connection.execute("RELEASE op")
                    tx.forget_since(mark)
                    outcomes.append((future, None, exc))
                else:
                    connection.execute("RELEASE op")
                    outcomes.append((future, value, None))
            self._write_side_effects(tx)
            if self.own_events is not None and tx.event_ids:
                self.own_events.add(tx.event_ids)  # before COMMIT: the tail may read them at once
            connection.execute("COMMIT")
            self._committed(tx)
        except Exception as exc:  # BEGIN, a savepoint, the side tables or COMMIT: nothing is kept
            if self.own_events is not None and tx.event_ids:
                self.own_events.withdraw(tx.event_ids)
            if connection.in_transaction:
                try:
                    connection.execute("ROLLBACK")
                except sqlite3.Error:  # pragma: no cover - the connection is already broken
                    log.exception("rollback failed")
            return all_failed(batch, exc), []
        return outcomes, tx.events

    # --- reads -------------------------------------------------------------------------------

    async def read(self, function: Callable[..., T], *args: Any) -> T:
        """Run a read on the loop; several statements see one snapshot."""
        return self.read_now(function, *args)

    def read_now(self, function: Callable[..., T], *args: Any) -> T:
        reader = self._reader
        reader.execute("BEGIN")
        try:
            return function(reader, *args)
        finally:
            reader.execute("COMMIT")

    async def read_one(self, sql: str, parameters: Any = ()) -> Any:
        return self.read_one_now(sql, parameters)

    def read_one_now(self, sql: str, parameters: Any = ()) -> Any:
        """One row of one statement (its own implicit read transaction)."""
        return self._reader.execute(sql, parameters).fetchone()

    def others_wrote(self) -> bool:
        """Whether another connection (another process) may have committed since the last
        call. The writer's PRAGMA data_version moves only on other connections' commits, never
        on its own, and costs a few microseconds. While the writer waits on its thread another
        process held the write lock: that answers yes without touching the connection."""
        if self._in_thread:
            return True
        version = self._writer.execute("PRAGMA data_version").fetchall()[0][0]
        changed = version != self._data_version
        self._data_version = version
        return changed

    def listen(self, heard: Heard, missed: Missed) -> Listening:
        raise NotImplementedError("SQLite has no LISTEN/NOTIFY (can.notifies)")

    async def vacuum_where_due(self) -> list[str]:
        return []  # SQLite has no autovacuum to stand in for

    async def close(self) -> None:
        await self._drained()
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        self._writer.close()
        self._reader.close()
        self.checkpointer.close()
        self._lock.close()
