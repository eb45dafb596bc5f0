"""Group commit: what the SQLite and PostgreSQL writers share.

`write(operation)` queues an operation and waits. The backend takes everything queued as one
batch (`_take`), runs it in one transaction, each operation in its own SAVEPOINT, and hands
back one outcome per operation plus the job events of those that were kept; `_settle`
answers every caller, then publishes the events, and looks for the next batch. An
acknowledged write has therefore always been committed.

Backends say when a batch runs (`_schedule`) and whether one is under way (`_working`).
Besides its operations' own statements, a batch runs what its `steps` say (BatchSteps: the
queue's are in operations/batch.py, handed in by the repository): each operation through
`steps.run`, in its savepoint, and `steps.write_side_effects` before COMMIT.

Claims expected to take the controlled-claim lock (operations/flow.py) may go in the
controlled lane (`write(lane=True)`): a backend that runs several batches at once
(PostgreSQL) runs at most one batch of the lane at a time, so that the claims arriving
meanwhile share the next one, and its one wait for the lock, instead of each transaction
queueing for it on its own. A backend that runs one batch at a time (SQLite) treats the lane
as `last`.

A waiting claim may park (`park`): every batch with a write that may make jobs ready to
claim (`write(makes_ready=True)`: a completion, which may release dependents) then runs it
too, last, in its transaction, if the batch did make jobs of its types ready
(`WriteTx.ready_types`). A job released while a worker waits for it thus goes to that
worker in the transaction that completed its last dependency, instead of waking the claim
for a transaction of its own after that one commits. Not enqueues: their answer would wait
for the claim too (about doubling an enqueue's p50 on PostgreSQL while a claim waits), and
a producer is not to pay for a worker's claim.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from queuelog.clock import DatabaseClock
from queuelog.model import JobEvent
from queuelog.storage.transaction import WriteTx

T = TypeVar("T")
Operation = Callable[[WriteTx], Any]
Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]
Batch = list[tuple[Operation, "asyncio.Future[Any]"]]


class BatchSteps(Protocol):
    """What a write batch runs besides its operations' own statements."""

    def run(self, operation: Callable[[WriteTx], T], tx: WriteTx) -> T:
        """One operation of the batch, in its savepoint, with whatever must follow it there."""
        ...

    def write_side_effects(self, tx: WriteTx) -> None:
        """Before COMMIT: what the operations that were kept changed besides their rows."""
        ...


def all_failed(batch: Batch, exc: BaseException) -> list[Outcome]:
    """The outcomes of a batch of which nothing was kept."""
    return [(future, None, exc) for _, future in batch]


def _live(batch: Batch) -> Batch:
    return [(operation, future) for operation, future in batch if not future.cancelled()]


class ParkedClaim(Generic[T]):
    """A waiting claim that batches making jobs of its `types` (None: any) ready run too.

    `claimed` is set once a run returned what `found` accepts (jobs); `running` is the run
    under way in a batch, if any."""

    def __init__(
        self, operation: Callable[[WriteTx], T], types: Sequence[str] | None, found: Callable[[T], bool]
    ) -> None:
        self.operation = operation
        self.types = None if types is None else frozenset(types)
        self.found = found
        self.claimed: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.running: asyncio.Future[T | None] | None = None

    def run(self, tx: WriteTx) -> T | None:
        """The claim, where the batch made jobs ready that it may take; None (no statement)
        where not."""
        ready = tx.ready_types
        if not ready or (self.types is not None and self.types.isdisjoint(ready)):
            return None
        return self.operation(tx)

    def ran(self, run: asyncio.Future[T | None]) -> None:
        self.running = None
        if run.cancelled() or run.exception() is not None or self.claimed.done():
            return  # a failed batch claimed nothing; the waiting claim finds out by itself
        value = run.result()
        if value is not None and self.found(value):
            self.claimed.set_result(value)


class OwnEvents:
    """The ids of the events this process wrote, as (first, last) runs, oldest first.

    The writer threads (SQLite's one, PostgreSQL's up to four) add ids while the tail, on
    the event loop's thread, looks them up and forgets old runs: every method holds the lock
    (iterating a deque that another thread appends to raises RuntimeError, and the tail
    would lose that read's events).
    """

    def __init__(self) -> None:
        self._runs: deque[tuple[int, int]] = deque()
        self._lock = threading.Lock()
        self._highest = 0  # runs may arrive out of order: PostgreSQL's writers commit in parallel

    def add(self, ids: Sequence[int]) -> None:
        with self._lock:
            self._add(ids)

    def _add(self, ids: Sequence[int]) -> None:
        for event_id in ids:
            self._highest = max(self._highest, event_id)
            if self._runs and self._runs[-1][1] == event_id - 1:
                self._runs[-1] = (self._runs[-1][0], event_id)
            else:
                self._runs.append((event_id, event_id))

    def withdraw(self, ids: Sequence[int]) -> None:
        """Ids of a transaction that did not commit (SQLite would hand them out again)."""
        gone = set(ids)
        with self._lock:
            kept = [i for first, last in self._runs for i in range(first, last + 1) if i not in gone]
            self._runs.clear()
            self._highest = 0
            self._add(kept)

    @property
    def last(self) -> int:
        """The highest id held (0 when none)."""
        with self._lock:
            return self._highest if self._runs else 0

    def __contains__(self, event_id: int) -> bool:
        with self._lock:
            return any(first <= event_id <= last for first, last in self._runs)

    def forget_through(self, event_id: int) -> None:
        """Drop the runs wholly at or below this id (the tail has passed them for good)."""
        with self._lock:
            while self._runs and self._runs[0][1] <= event_id:
                self._runs.popleft()


class GroupCommit:
    def __init__(self, on_commit: Callable[[Sequence[JobEvent]], None], steps: BatchSteps) -> None:
        self._on_commit = on_commit
        self._run_operation = steps.run
        self._write_side_effects = steps.write_side_effects
        self._queue: Batch = []
        self._last: Batch = []  # run after the others (write(last=True))
        self._lane: Batch = []  # the controlled lane (write(lane=True)), where a backend has one
        self._parked: dict[ParkedClaim[Any], None] = {}  # in the order they parked
        self._ready_queued = False  # a write queued may make jobs ready (makes_ready=True)
        self._idle = asyncio.Event()
        self._idle.set()
        self.db_clock = DatabaseClock()
        # Set (from the writer's thread, if it has one) when a committed batch wrote down
        # dependents to settle later; the loop then sets `settlements_left` for the sweeper.
        self._wrote_settlements = False
        self.settlements_left = asyncio.Event()
        # Set when an event tail runs (feeds/tail.py): the ids of the events this process writes.
        self.own_events: OwnEvents | None = None

    def now(self) -> datetime:
        """The time by the clock this database's writes use (queuelog/clock.py)."""
        return self.db_clock.now()

    has_lane = False  # whether the backend keeps the controlled lane apart

    async def write(
        self,
        operation: Callable[[WriteTx], T],
        last: bool = False,
        lane: bool = False,
        makes_ready: bool = False,
    ) -> T:
        """Run `operation` in the next batch; `last`: after the batch's other operations (a
        claim: it then sees their completions, and on PostgreSQL holds the controlled-claim
        lock from as close to COMMIT as it can); `lane`: in the controlled lane's next batch
        (a claim expected to take the controlled-claim lock); `makes_ready`: it may make
        jobs ready to claim (the batch runs the parked claims)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if lane and self.has_lane:
            self._lane.append((operation, future))
        elif last or lane:
            self._last.append((operation, future))
        else:
            self._queue.append((operation, future))
        self._ready_queued = self._ready_queued or makes_ready
        self._schedule()
        return await future

    def park(
        self, operation: Callable[[WriteTx], T], types: Sequence[str] | None, found: Callable[[T], bool]
    ) -> ParkedClaim[T]:
        """Run the claim `operation` in every batch that makes jobs of `types` ready, until
        `leave`; a run whose value `found` accepts sets `claimed`."""
        parked = ParkedClaim(operation, types, found)
        self._parked[parked] = None
        return parked

    async def leave(self, parked: ParkedClaim[T]) -> T | None:
        """Stop running `parked`; what a batch claimed for it, if any (after the run under
        way, if one is)."""
        self._parked.pop(parked, None)
        if parked.running is not None:
            await asyncio.wait([parked.running])
        return parked.claimed.result() if parked.claimed.done() else None

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
        """Everything queued outside the lane, less the operations whose callers have gone;
        then the parked claims, when a write taken may make jobs ready."""
        queued = _live(self._queue + self._last)
        self._queue, self._last = [], []
        if self._ready_queued and queued:
            for parked in self._parked:
                if parked.running is None and not parked.claimed.done():
                    run: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                    run.add_done_callback(parked.ran)
                    parked.running = run
                    queued.append((parked.run, run))
        self._ready_queued = False
        return queued

    def _take_lane(self) -> Batch:
        """Everything queued in the controlled lane, less the operations whose callers have gone."""
        queued, self._lane = self._lane, []
        return _live(queued)

    def _settle(self, outcomes: list[Outcome], events: list[JobEvent]) -> None:
        self._answer(outcomes)
        self._publish(events)
        self._look_again()

    @staticmethod
    def _answer(outcomes: list[Outcome]) -> None:
        for future, value, exc in outcomes:
            if future.done():
                continue
            if exc is None:
                future.set_result(value)
            else:
                future.set_exception(exc)

    def _publish(self, events: list[JobEvent]) -> None:
        if events:
            self._on_commit(events)

    def _committed(self, tx: WriteTx) -> None:
        """After a batch's COMMIT (on whichever thread ran it)."""
        if tx.settlements_left:
            self._wrote_settlements = True

    def _look_again(self) -> None:
        """The next batch, if operations wait; idle, if none is under way."""
        if self._wrote_settlements:
            self._wrote_settlements = False
            self.settlements_left.set()
        self._schedule()
        if not self._working():
            self._idle.set()

    async def _drained(self) -> None:
        """Until no batch is scheduled or running (before closing connections)."""
        await self._idle.wait()
