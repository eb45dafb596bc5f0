"""Group commit: what the SQLite and PostgreSQL writers share.

`write(operation)` queues an operation and waits. The backend takes everything queued as one
batch (`_take`), runs it in one transaction, each operation in its own SAVEPOINT, and hands
back one outcome per operation plus the job events of those that were kept; `_settle`
answers every caller, only then publishes the events, and looks for the next batch. An
acknowledged write has therefore always been committed.

Backends say when a batch runs (`_schedule`) and whether one is under way (`_working`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from queuelog.clock import DatabaseClock
from queuelog.model import JobEvent
from queuelog.storage.transaction import WriteTx

T = TypeVar("T")
Operation = Callable[[WriteTx], Any]
Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]
Batch = list[tuple[Operation, "asyncio.Future[Any]"]]


def all_failed(batch: Batch, exc: BaseException) -> list[Outcome]:
    """The outcomes of a batch of which nothing was kept."""
    return [(future, None, exc) for _, future in batch]


class GroupCommit:
    def __init__(self, on_commit: Callable[[Sequence[JobEvent]], None]) -> None:
        self._on_commit = on_commit
        self._queue: Batch = []
        self._last: Batch = []  # run after the others (write(last=True))
        self._idle = asyncio.Event()
        self._idle.set()
        self.db_clock = DatabaseClock()

    def now(self) -> datetime:
        """The time by the clock this database's writes use (queuelog/clock.py)."""
        return self.db_clock.now()

    async def write(self, operation: Callable[[WriteTx], T], last: bool = False) -> T:
        """Run `operation` in the next batch; `last`: after the batch's other operations (a
        claim: it then sees their completions, and on PostgreSQL holds the controlled-claim
        lock from as close to COMMIT as it can)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        (self._last if last else self._queue).append((operation, future))
        self._schedule()
        return await future

    def _schedule(self) -> None:
        """Start a batch when none is under way and operations wait."""
        raise NotImplementedError

    def _working(self) -> bool:
        """A batch is scheduled or running."""
        raise NotImplementedError

    @property
    def _waiting(self) -> bool:
        """Operations are queued for the next batch."""
        return bool(self._queue or self._last)

    def _take(self) -> Batch:
        """Everything queued, less the operations whose callers have gone."""
        queued = self._queue + self._last
        self._queue, self._last = [], []
        return [(operation, future) for operation, future in queued if not future.cancelled()]

    def _settle(self, outcomes: list[Outcome], events: list[JobEvent]) -> None:
        for future, value, exc in outcomes:
            if future.done():
                continue
            if exc is None:
                future.set_result(value)
            else:
                future.set_exception(exc)
        if events:
            self._on_commit(events)
        self._schedule()
        if not self._working():
            self._idle.set()

    async def _drained(self) -> None:
        """Until no batch is scheduled or running (before closing connections)."""
        await self._idle.wait()
