"""Other processes' job events, found by reading `job_events` forward by id.

The feed on SQLite (QUEUELOG_EVENT_FEED=auto or poll: several `queuelog serve` processes
on one file, started by `--workers N` or by a process manager), and the fallback for
PostgreSQL where LISTEN/NOTIFY is unavailable (PgBouncer in transaction mode): every
EVENT_POLL_SECONDS the tail reads the events after the last one it saw (one indexed range
read), skips this process's own (their ids are collected at commit: `OwnEvents`), reads the
other events' jobs back in one statement and delivers them: each job as it is now, with its
status as of the event.

It first asks the database whether any other connection has committed since it last looked
(`others_wrote`: on SQLite PRAGMA data_version, microseconds; PostgreSQL always says yes).
When none has and its last read reached the end, every event after the last one seen is
this process's own, so it moves past them without reading: a server alone on its SQLite file
pays a few microseconds per poll, whatever its write rate.

On SQLite, ids are committed in order (one writer at a time holds the write lock). On
PostgreSQL a lower id may commit after a higher one, however long after: ids skipped over
are kept as holes and read again at every poll until they appear, or until PostgreSQL says
that no transaction that may still write them is running (a rolled-back transaction leaves a
hole forever): a hole found in a snapshot belongs to a transaction that had its id when the
snapshot was taken, so below the next transaction id of that moment; once a later
snapshot's xmin has passed that id and the hole is still not there, it never will be
(reads.events_since reads the holes and that horizon in one snapshot; statements/server.py
SNAPSHOT_HORIZON says why not the snapshot's xmax). No committed
event is missed. This relies on two things PostgreSQL does: an event's id is taken from its
sequence (one id at a time, no per-session cache) by a transaction that already has its
transaction id (it wrote its jobs first). The tail starts once every transaction running
when it starts has ended (at most STARTUP_SETTLE_SECONDS): what committed before is history.
(SQLite's holes, which only a copied or hand-written id can make, are read again for
HOLE_SECONDS.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from queuelog.model import Job, JobEvent
from queuelog.storage.database import SETTLE_POLL_SECONDS, STARTUP_SETTLE_SECONDS, Database
from queuelog.storage.group_commit import OwnEvents
from queuelog.storage.operations import reads
from queuelog.storage.operations.reads import Horizon
from queuelog.storage.schema.codec import RemoteEvent, remote_event
from queuelog.storage.statements import EVENT_TAIL_BATCH

log = logging.getLogger("queuelog.storage")


def events_as_of(items: Sequence[RemoteEvent], jobs: Sequence[Job]) -> list[JobEvent]:
    """Events for these items, each with its job as read back but with the status it had as
    of the event (API.md: jobEvents(statuses:) filters on that). Where that status is not
    the job's now, the job as read back is the event's `latest`: a state of the job that
    happened, which jobUpdated follows, never the mix of the two. A job gone since (pruned)
    has no event."""
    by_id = {job.id: job for job in jobs}
    events = []
    for kind, job_id, status in items:
        job = by_id.get(job_id)
        if job is None:
            continue
        if job.status is status:
            events.append(JobEvent(kind, job, job.updated_at))
        else:
            events.append(JobEvent(kind, dataclasses.replace(job, status=status), job.updated_at, job))
    return events


EVENT_POLL_SECONDS = 0.05
HOLE_SECONDS = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class Hole:
    """An event id skipped over: when it was first missed, and (PostgreSQL) the next
    transaction id as of the snapshot it was missed in."""

    since: float
    next_xid: int | None

    def settled(self, now: float, horizon: Horizon | None) -> bool:
        """Whether it can no longer appear, by a read (that did not find it) whose snapshot
        had `horizon`."""
        if self.next_xid is None or horizon is None:
            return now - self.since > HOLE_SECONDS
        return horizon[0] >= self.next_xid


async def settle_running_transactions(db: Database) -> None:
    """Until every transaction running now has ended (PostgreSQL; at most
    STARTUP_SETTLE_SECONDS): a feed that starts after that has seen every event id below
    the newest one that will ever commit."""
    horizon = await db.read(reads.event_horizon)
    if horizon is None:
        return
    deadline = time.monotonic() + STARTUP_SETTLE_SECONDS
    while time.monotonic() < deadline:
        await asyncio.sleep(SETTLE_POLL_SECONDS)
        now = await db.read(reads.event_horizon)
        if now is None or now[0] >= horizon[1]:
            return


class EventTail:
    def __init__(
        self,
        db: Database,
        own: OwnEvents,
        deliver: Callable[[Sequence[JobEvent]], None],
        before_delivery: Callable[[], Awaitable[Any]] | None = None,
        others_wrote: Callable[[], bool] | None = None,
    ) -> None:
        self._db = db
        self._own = own
        self._deliver = deliver
        self._before_delivery = before_delivery  # as in notify.py: the keys generation
        # False means no other connection committed since the last call, and every id this
        # process added to `own` has committed (or been withdrawn); only SQLite ever says so.
        self._others_wrote = others_wrote
        self._high = 0  # the highest event id handled
        self._behind = False  # the last read failed or took a whole batch: more may wait
        self._holes: dict[int, Hole] = {}  # lower ids not seen yet
        self._undelivered: list[RemoteEvent] = []  # read, but their jobs' read-back failed
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await settle_running_transactions(self._db)
        self._high = await self._db.read(reads.last_event_id)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(EVENT_POLL_SECONDS)
            try:
                while await self.poll() >= EVENT_TAIL_BATCH:
                    pass  # more are waiting: read on without sleeping
                failures = 0
            except Exception as exc:  # the database is unavailable for a moment
                failures += 1
                if failures == 1:
                    log.warning("event tail could not read job_events (%s); retrying", type(exc).__name__)

    async def poll(self) -> int:
        """Read and deliver what is new; returns how many new rows were read."""
        if (
            self._others_wrote is not None
            and not self._others_wrote()
            and not self._behind
            and not self._holes
            and not self._undelivered
        ):
            self._high = max(self._high, self._own.last)
            self._own.forget_through(self._high)
            return 0
        self._behind = True
        rows, late, horizon = await self._db.read(reads.events_since, self._high, sorted(self._holes))
        self._behind = len(rows) >= EVENT_TAIL_BATCH
        now = time.monotonic()
        hole = Hole(now, horizon[1] if horizon is not None else None)
        items: list[RemoteEvent] = []
        for event_id, job_id, kind, status in late + rows:
            if event_id > self._high:
                for missing in range(self._high + 1, event_id):
                    self._holes[missing] = hole
                self._high = event_id
            else:
                self._holes.pop(event_id, None)
            event = None if event_id in self._own else remote_event(kind, job_id, status)
            if event is not None:
                items.append(event)
        for event_id in [i for i, missing in self._holes.items() if missing.settled(now, horizon)]:
            del self._holes[event_id]
        self._own.forget_through(min(self._holes) - 1 if self._holes else self._high)
        # Held until delivered: `_high` has passed them, so a failed read below would lose them.
        self._undelivered += items
        if self._undelivered:
            if self._before_delivery is not None:
                await self._before_delivery()
            items = self._undelivered
            jobs = await self._db.read(reads.get_jobs, sorted({job_id for _, job_id, _ in items}))
            self._undelivered = []
            events = events_as_of(items, jobs)
            if events:
                self._deliver(events)
        return len(rows)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
