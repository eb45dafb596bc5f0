"""Group commit: what the SQLite and PostgreSQL writers share.

`write(operation)` queues an operation and waits. The backend takes everything queued as one
batch (`_take`), runs it in one transaction, each operation in its own SAVEPOINT, and hands
back one outcome per operation plus the job events of those that were kept; `_settle`
answers every caller, only then publishes the events, and looks for the next batch. An
acknowledged write has therefore always been committed.

Backends say when a batch runs (`_schedule`) and whether one is under way (`_working`).

Claims expected to take the controlled-claim lock (flow.py) may go in the controlled lane
(`write(lane=True)`): a backend that runs several batches at once (PostgreSQL) runs at most
one batch of the lane at a time, so that the claims arriving meanwhile share the next one,
and its one wait for the lock, instead of each transaction queueing for it on its own. A
backend that runs one batch at a time (SQLite) treats the lane as `last`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from queuelog.clock import DatabaseClock
from queuelog.model import JobEvent
from queuelog.storage import bulk
from queuelog.storage.transaction import WriteTx

T = TypeVar("T")
Operation = Callable[[WriteTx], Any]
Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]
Batch = list[tuple[Operation, "asyncio.Future[Any]"]]


def all_failed(batch: Batch, exc: BaseException) -> list[Outcome]:
    """The outcomes of a batch of which nothing was kept."""
    return [(future, None, exc) for _, future in batch]


def _live(batch: Batch) -> Batch:
    return [(operation, future) for operation, future in batch if not future.cancelled()]


class GroupCommit:
    def __init__(self, on_commit: Callable[[Sequence[JobEvent]], None]) -> None:
        self._on_commit = on_commit
        self._queue: Batch = []
        self._last: Batch = []  # run after the others (write(last=True))
        self._lane: Batch = []  # the controlled lane (write(lane=True)), where a backend has one
        self._idle = asyncio.Event()
        self._idle.set()
        self.db_clock = DatabaseClock()

    def now(self) -> datetime:
        """The time by the clock this database's writes use (queuelog/clock.py)."""
        return self.db_clock.now()

    has_lane = False  # whether the backend keeps the controlled lane apart
    bulk_chunk_seconds = bulk.CHUNK_SECONDS  # what a bulk action's chunk aims at (bulk.py)
    bulk_pause_ratio = bulk.PAUSE_RATIO  # a bulk action's pause after a chunk, per its time

    async def write(self, operation: Callable[[WriteTx], T], last: bool = False, lane: bool = False) -> T:
        """Run `operation` in the next batch; `last`: after the batch's other operations (a
        claim: it then sees their completions, and on PostgreSQL holds the controlled-claim
        lock from as close to COMMIT as it can); `lane`: in the controlled lane's next batch
        (a claim expected to take the controlled-claim lock)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if lane and self.has_lane:
            self._lane.append((operation, future))
        else:
            (self._last if last or lane else self._queue).append((operation, future))
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
        return bool(self._queue or self._last or self._lane)

    def _take(self) -> Batch:
        """Everything queued outside the lane, less the operations whose callers have gone."""
        queued = self._queue + self._last
        self._queue, self._last = [], []
        return _live(queued)

    def _take_lane(self) -> Batch:
        """Everything queued in the controlled lane, less the operations whose callers have gone."""
        queued, self._lane = self._lane, []
        return _live(queued)

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
