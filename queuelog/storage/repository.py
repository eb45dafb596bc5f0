"""The repository: the async interface the rest of queuelog uses to reach the database.

It runs the functions of `operations` in a transaction and, once that has committed,
hands the events it recorded to the listeners (subscriptions, metrics, the claim wake-up).

SQLite is served by the stdlib driver on threads: one writer thread, whose transactions
start with BEGIN IMMEDIATE, so writes from concurrent requests queue in-process instead of
busy-waiting on SQLite's file lock, and a few reader threads (WAL lets them read while the
writer writes).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, text

from queuelog.model import (
    ApiKey,
    Completion,
    CompletionOutcome,
    EnqueueOutcome,
    Job,
    JobEvent,
    JobScope,
    JobStatus,
    NewJob,
    QueueStats,
)
from queuelog.storage import key_operations
from queuelog.storage import operations as ops
from queuelog.storage.engine import create_sqlite_engine, dialect_of
from queuelog.storage.operations import RetryPolicy
from queuelog.storage.write_lock import WriteLock

P = ParamSpec("P")
T = TypeVar("T")
EventListener = Callable[[Sequence[JobEvent]], None]
SQLITE_READERS = 4


def utcnow() -> datetime:
    return datetime.now(UTC)


class SqliteRunner:
    """Runs operation functions in SQLite transactions on dedicated threads."""

    def __init__(self, url: str) -> None:
        self.writer: Engine = create_sqlite_engine(url, immediate=True, pool_size=1)
        self.reader: Engine = create_sqlite_engine(url, immediate=False, pool_size=SQLITE_READERS)
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="queuelog-writer")
        self._read_threads = ThreadPoolExecutor(SQLITE_READERS, thread_name_prefix="queuelog-reader")
        self._write_lock = WriteLock(url)

    @staticmethod
    def _in_transaction(engine: Engine, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with engine.begin() as conn:
            return fn(conn, *args)

    def _write_locked(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._write_lock.held():
            return self._in_transaction(self.writer, fn, args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._write_thread, self._write_locked, fn, args)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        call = functools.partial(self._in_transaction, self.reader, fn, args)
        return await loop.run_in_executor(self._read_threads, call)

    async def close(self) -> None:
        self._write_thread.shutdown(wait=True)
        self._read_threads.shutdown(wait=True)
        self.writer.dispose()
        self.reader.dispose()
        self._write_lock.close()


def _now_then(fn: Callable[..., T]) -> Callable[..., T]:
    """Operation wrapper that reads the clock inside the transaction, not when queued."""

    @functools.wraps(fn)
    def wrapper(conn: Connection, *args: Any) -> T:
        return fn(conn, utcnow(), *args)

    return wrapper


class Repository:
    def __init__(self, runner: SqliteRunner, policy: RetryPolicy) -> None:
        self._runner = runner
        self._policy = policy
        self._listeners: list[EventListener] = []

    @classmethod
    def open(cls, url: str, policy: RetryPolicy) -> Repository:
        dialect = dialect_of(url)
        if dialect != "sqlite":
            raise NotImplementedError(f"the {dialect} backend is not available yet")
        return cls(SqliteRunner(url), policy)

    def add_listener(self, listener: EventListener) -> None:
        self._listeners.append(listener)

    async def close(self) -> None:
        await self._runner.close()

    def _publish(self, events: Sequence[JobEvent]) -> None:
        if events:
            for listener in self._listeners:
                listener(events)

    async def _write_with_events(self, fn: Callable[..., tuple[T, list[JobEvent]]], *args: Any) -> T:
        value, events = await self._runner.write(_now_then(fn), *args)
        self._publish(events)
        return value

    # --- jobs ------------------------------------------------------------------------------

    async def enqueue(self, items: Sequence[NewJob], created_by: str) -> list[EnqueueOutcome]:
        return await self._write_with_events(ops.enqueue, items, created_by)

    async def get_job(self, job_id: int, scope: JobScope) -> Job | None:
        return await self._runner.read(ops.get_job, job_id, scope)

    async def list_jobs(
        self,
        scope: JobScope,
        status: JobStatus | None,
        job_type: str | None,
        first: int,
        after_id: int | None,
    ) -> tuple[list[Job], bool, int]:
        return await self._runner.read(ops.list_jobs, scope, status, job_type, first, after_id)

    async def queue_stats(self, scope: JobScope) -> QueueStats:
        return await self._runner.read(_now_then(ops.queue_stats), scope)

    async def next_due_at(self, types: Sequence[str] | None) -> datetime | None:
        return await self._runner.read(ops.next_due_at, types)

    async def claim(
        self,
        worker: str,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int,
        wanted: Callable[[], bool] | None = None,
    ) -> list[Job]:
        """Claim due jobs; `wanted` is asked (on the writer thread) just before commit."""
        try:
            return await self._write_with_events(
                ops.claim, worker, types, limit, lease_seconds, self._policy, wanted
            )
        except ops.ClaimAbandoned:
            return []

    async def heartbeat(self, worker: str, job_id: int, attempt: int | None, lease_seconds: int) -> Job:
        return await self._runner.write(_now_then(ops.heartbeat), worker, job_id, attempt, lease_seconds)

    async def complete(self, worker: str, job_id: int, result: Any, attempt: int | None) -> Job:
        return await self._write_with_events(ops.complete, worker, job_id, result, attempt)

    async def complete_many(self, worker: str, items: Sequence[Completion]) -> CompletionOutcome:
        return await self._write_with_events(ops.complete_many, worker, items)

    async def fail(
        self,
        worker: str,
        job_id: int,
        error: str,
        retryable: bool,
        retry_in: float | None,
        attempt: int | None,
    ) -> Job:
        return await self._write_with_events(
            ops.fail, worker, job_id, error, retryable, retry_in, attempt, self._policy
        )

    async def cancel(self, job_id: int, scope: JobScope) -> Job:
        return await self._write_with_events(ops.cancel, job_id, scope)

    async def retry(self, job_id: int) -> Job:
        return await self._write_with_events(ops.retry, job_id)

    async def expire_leases(self) -> int:
        events = await self._runner.write(_now_then(ops.expire_leases), self._policy)
        self._publish(events)
        return len(events)

    async def prune(self, retention_seconds: int) -> int:
        cutoff = utcnow() - timedelta(seconds=retention_seconds)
        total = 0
        while True:
            deleted = await self._runner.write(ops.prune, cutoff)
            total += deleted
            if deleted < ops.PRUNE_BATCH:
                return total

    async def ping(self) -> None:
        await self._runner.read(_ping)

    # --- API keys --------------------------------------------------------------------------

    async def find_active_key(self, key_hash: str) -> ApiKey | None:
        return await self._runner.read(key_operations.find_active_key, key_hash)


def _ping(conn: Connection) -> None:
    conn.execute(text("SELECT 1"))
