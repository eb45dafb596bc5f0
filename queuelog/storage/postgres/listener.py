"""Job events made by other server processes, handed to this one's subscriptions and claims.

`PostgresListener` LISTENs on `queuelog_events` on a connection of its own (on a thread:
psycopg's `notifies()` blocks). Each notification names its origin and
`kind:job_id:status` items (postgres.py); those from other servers are coalesced and their
jobs read back in one statement, then delivered as events: each job as it is now, with
its status as of the event (what `jobEvents(statuses:)` filters on). The terminal state
of a job is never missed.

While the connection is down (PostgreSQL restarting, a network cut) the listener reconnects
with a short back-off. Notifications sent meanwhile are lost, so once it LISTENs again it
catches up from `job_events`: every event after its safe point is read and delivered like a
notified one. The safe point is not simply the newest id it knew of while connected: a lower
id may commit after a higher one, and a transaction that took its id before the newest
committed may commit while the listener is away. So every CHECKPOINT_SECONDS the listener
reads the newest id with its snapshot's horizon (xmin, xmax: `Checkpoints`); the newest id
of a checkpoint becomes safe once a later checkpoint's xmin has passed that checkpoint's
xmax (every transaction running then, which may hold a lower id, has ended while this
connection listened) - a checkpoint later still, so that their notifications have arrived.
At start, it listens only once every transaction running then has ended (at most
event_tail.STARTUP_SETTLE_SECONDS): what committed before is history. Around an outage a
subscriber may thus get an event twice (one it had already had, or one of this server's own);
it never misses one. A transaction left open for long elsewhere holds the safe point back,
and a catch-up after it delivers more events twice. Long-polling claims also re-check the
database on their own timer.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

from queuelog.model import JobEvent
from queuelog.storage.feeds.tail import (
    SETTLE_POLL_SECONDS,
    STARTUP_SETTLE_SECONDS,
    RemoteEvent,
    events_as_of,
    remote_event,
)
from queuelog.storage.operations import reads
from queuelog.storage.postgres.connection import connect
from queuelog.storage.postgres.database import PostgresDatabase
from queuelog.storage.postgres.statements.server import LISTEN, LISTENER_CHECKPOINT

log = logging.getLogger("queuelog.storage")
RECONNECT_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.0)
NOTIFY_WAIT_SECONDS = 0.5
CHECKPOINT_SECONDS = 1.0


def retry_delay(failures: int) -> float:
    """The pause after this many failures in a row: growing, then RECONNECT_SECONDS's last."""
    return RECONNECT_SECONDS[min(failures, len(RECONNECT_SECONDS) - 1)]


class Checkpoints:
    """The listener's checkpoints: the newest event id committed, with its snapshot's horizon.

    `safe`: every event whose id is at most this has reached the listener, or never will
    commit (None until the first connection). `add` takes each checkpoint in order; one
    confirms the checkpoints before it whose xmax the previous checkpoint's xmin has passed."""

    def __init__(self) -> None:
        self.safe: int | None = None
        self._unconfirmed: deque[tuple[int, int]] = deque()  # (newest id, xmax), oldest first
        self._confirm_with: int | None = None  # the xmin of the checkpoint before the last

    def add(self, newest: int, xmin: int, xmax: int) -> None:
        if self._confirm_with is not None:
            while self._unconfirmed and self._unconfirmed[0][1] <= self._confirm_with:
                confirmed, _ = self._unconfirmed.popleft()
                if self.safe is not None and confirmed > self.safe:
                    self.safe = confirmed
        self._unconfirmed.append((newest, xmax))
        self._confirm_with = xmin


def _checkpoint(connection: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(newest event id or 0, xmin, xmax), from one snapshot."""
    row = connection.execute(LISTENER_CHECKPOINT).fetchone()
    assert row is not None
    newest, xmin, xmax = row
    return newest or 0, xmin, xmax


def parse_payload(payload: str) -> tuple[str, list[RemoteEvent]]:
    origin, *words = payload.split(" ")
    items = []
    for word in words:
        kind, job_id, status = (word.split(":") + ["", ""])[:3]
        event = remote_event(kind, int(job_id), status) if job_id.isdigit() else None
        if event is not None:
            items.append(event)
    return origin, items


class PostgresListener:
    def __init__(
        self,
        db: PostgresDatabase,
        deliver: Callable[[Sequence[JobEvent]], None],
        before_delivery: Callable[[], Awaitable[Any]],
    ) -> None:
        self._db = db
        self._deliver = deliver
        # Run before each delivery: the keys generation is read, so that a key revoked before
        # these events committed (on any server) gets none of them.
        self._before_delivery = before_delivery
        self._loop = asyncio.get_running_loop()
        self._pending: list[RemoteEvent] = []
        self._reading: asyncio.Task[None] | None = None
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._checkpoints = Checkpoints()
        self._thread = threading.Thread(target=self._listen_forever, name="queuelog-pg-listen", daemon=True)
        self._thread.start()

    def wait_listening(self, timeout: float) -> bool:
        return self._listening.wait(timeout)

    # --- the listening thread ----------------------------------------------------------------

    def _listen_forever(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                with connect(self._db.url, autocommit=True) as connection:
                    connection.execute(LISTEN)
                    checkpoints = self._checkpoints
                    if checkpoints.safe is None:
                        self._settle(connection)
                    latest, xmin, xmax = _checkpoint(connection)
                    if checkpoints.safe is None:
                        checkpoints.safe = latest  # before: history
                    elif latest > checkpoints.safe:
                        # From the safe point as it was: the checkpoint taken now confirms
                        # those before the drop, whose notifications may have been lost.
                        self._loop.call_soon_threadsafe(self._catch_up, checkpoints.safe, latest)
                    checkpoints.add(latest, xmin, xmax)
                    self._listening.set()
                    failures = 0
                    self._receive(connection)
            except Exception as exc:  # the connection broke: PostgreSQL restarting, network
                self._listening.clear()
                if self._stop.is_set():
                    return
                delay = retry_delay(failures)
                failures += 1
                if failures == 1:
                    log.warning("event listener lost PostgreSQL (%s); reconnecting", type(exc).__name__)
                self._stop.wait(delay)

    def _settle(self, connection: psycopg.Connection[Any]) -> None:
        """At the first connection, until every transaction running once it LISTENs has
        ended (at most STARTUP_SETTLE_SECONDS): they notify it, or committed before."""
        _, _, xmax = _checkpoint(connection)
        deadline = time.monotonic() + STARTUP_SETTLE_SECONDS
        while time.monotonic() < deadline and not self._stop.wait(SETTLE_POLL_SECONDS):
            if _checkpoint(connection)[1] >= xmax:
                return

    def _receive(self, connection: psycopg.Connection[Any]) -> None:
        checked = time.monotonic()
        while not self._stop.is_set():
            for notify in connection.notifies(timeout=NOTIFY_WAIT_SECONDS):
                origin, pairs = parse_payload(notify.payload)
                if origin != self._db.origin and pairs:
                    self._loop.call_soon_threadsafe(self._received, pairs)
            if time.monotonic() - checked >= CHECKPOINT_SECONDS:
                self._checkpoints.add(*_checkpoint(connection))
                checked = time.monotonic()

    # --- on the event loop ------------------------------------------------------------------

    def _received(self, pairs: list[RemoteEvent]) -> None:
        self._pending.extend(pairs)
        if self._reading is None or self._reading.done():
            self._reading = self._loop.create_task(self._read_back())

    async def _read_back(self) -> None:
        failures = 0
        while self._pending and not self._stop.is_set():
            items, self._pending = self._pending, []
            try:
                await self._before_delivery()
                jobs = await self._db.read(reads.get_jobs, sorted({job_id for _, job_id, _ in items}))
            except Exception as exc:
                # Kept, and read again after a pause: dropped, they would never be delivered
                # (subscribers waiting for a terminal state would wait for ever).
                if failures == 0:
                    log.warning("could not read back %d events from other servers: %s", len(items), exc)
                self._pending[:0] = items
                await asyncio.sleep(retry_delay(failures))
                failures += 1
                continue
            failures = 0
            events = events_as_of(items, jobs)
            if events:
                self._deliver(events)

    def _catch_up(self, after: int, through: int) -> None:
        self._loop.create_task(self._read_events(after, through))

    async def _read_events(self, after: int, through: int) -> None:
        """Deliver the events committed while this listener was not listening. A failed read
        is tried again after a pause (the database may be unreachable again a moment after
        the reconnect): these events would not be delivered otherwise."""
        failures = 0
        while after < through and not self._stop.is_set():
            try:
                rows = await self._db.read(reads.events_after, after)
            except Exception as exc:
                if failures == 0:
                    log.warning("could not catch up on events after reconnecting: %s", exc)
                await asyncio.sleep(retry_delay(failures))
                failures += 1
                continue
            if not rows:
                return
            events = (
                remote_event(kind, job_id, status)
                for event_id, job_id, kind, status in rows
                if event_id <= through
            )
            items = [event for event in events if event is not None]
            after = rows[-1][0]
            self._received(items)

    async def close(self) -> None:
        self._stop.set()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 2 * NOTIFY_WAIT_SECONDS)
        if self._reading is not None:
            self._reading.cancel()
