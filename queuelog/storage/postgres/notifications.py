"""Other servers' commits, as LISTEN hears them, on a connection and a thread of their own.

Each commit notifies `queuelog_events` (database.py) with its server's id and
`kind:job_id:status` items. `Notifications` LISTENs (psycopg's `notifies()` blocks: a thread
of its own) and hands the items of other servers' notifications to `heard`, on the event
loop; what the feed does with them is its own (feeds/notify.py).

While the connection is down (PostgreSQL restarting, a network cut) it reconnects with a
short back-off. Notifications sent meanwhile are lost, so once it LISTENs again it hands
`missed` the range of event ids to read from `job_events`: from its safe point to the newest
committed. The safe point is not simply the newest id it knew of while connected: a lower
id may commit after a higher one, and a transaction that took its id before the newest
committed may commit while the listener is away. So every CHECKPOINT_SECONDS it reads the
newest id with its snapshot's horizon (xmin, and the next transaction id: `Checkpoints`;
statements/server.py SNAPSHOT_HORIZON); the newest id of a checkpoint becomes safe once a
later checkpoint's xmin has passed that checkpoint's next transaction id (every transaction
running then, which may hold a lower id, has ended while this connection
listened) - a checkpoint later still, so that their notifications have arrived. At start, it
listens only once every transaction running then has ended (at most
STARTUP_SETTLE_SECONDS): what committed before is history. Around an outage a subscriber may
thus get an event twice (one it had already had, or one of this server's own); it never
misses one. A transaction left open for long elsewhere holds the safe point back, and a
catch-up after it delivers more events twice.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any

import psycopg

from queuelog.storage.database import SETTLE_POLL_SECONDS, STARTUP_SETTLE_SECONDS, Heard, Missed, retry_delay
from queuelog.storage.postgres.connection import connect
from queuelog.storage.postgres.statements.server import LISTEN, LISTENER_CHECKPOINT
from queuelog.storage.schema.codec import RemoteEvent, remote_event

log = logging.getLogger("queuelog.storage")
NOTIFY_WAIT_SECONDS = 0.5
CHECKPOINT_SECONDS = 1.0


class Checkpoints:
    """The listener's checkpoints: the newest event id committed, with its snapshot's horizon.

    `safe`: every event whose id is at most this has reached the listener, or never will
    commit (None until the first connection). `add` takes each checkpoint in order; one
    confirms the checkpoints before it whose next transaction id the previous checkpoint's
    xmin has passed."""

    def __init__(self) -> None:
        self.safe: int | None = None
        self._unconfirmed: deque[tuple[int, int]] = deque()  # (newest id, next xid), oldest first
        self._confirm_with: int | None = None  # the xmin of the checkpoint before the last

    def add(self, newest: int, xmin: int, next_xid: int) -> None:
        if self._confirm_with is not None:
            while self._unconfirmed and self._unconfirmed[0][1] <= self._confirm_with:
                confirmed, _ = self._unconfirmed.popleft()
                if self.safe is not None and confirmed > self.safe:
                    self.safe = confirmed
        self._unconfirmed.append((newest, next_xid))
        self._confirm_with = xmin


def _checkpoint(connection: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """(newest event id or 0, xmin, next transaction id), from one snapshot."""
    row = connection.execute(LISTENER_CHECKPOINT).fetchone()
    assert row is not None
    newest, xmin, next_xid = row
    return newest or 0, xmin, next_xid


def parse_payload(payload: str) -> tuple[str, list[RemoteEvent]]:
    origin, *words = payload.split(" ")
    items = []
    for word in words:
        kind, job_id, status = (word.split(":") + ["", ""])[:3]
        event = remote_event(kind, int(job_id), status) if job_id.isdigit() else None
        if event is not None:
            items.append(event)
    return origin, items


class Notifications:
    """LISTENs on `url` until `close()`: the items of every notification but those of
    `origin` (this server's) go to `heard`, and each range of event ids (after, through]
    that may have been missed while the connection was down goes to `missed`, both called
    on the event loop that created it."""

    def __init__(
        self,
        url: str,
        origin: str,
        heard: Heard,
        missed: Missed,
    ) -> None:
        self._url = url
        self._origin = origin
        self._heard = heard
        self._missed = missed
        self._loop = asyncio.get_running_loop()
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._checkpoints = Checkpoints()
        self._thread = threading.Thread(target=self._listen_forever, name="queuelog-pg-listen", daemon=True)
        self._thread.start()

    def wait_listening(self, timeout: float) -> bool:
        return self._listening.wait(timeout)

    def _listen_forever(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                with connect(self._url, autocommit=True) as connection:
                    connection.execute(LISTEN)
                    checkpoints = self._checkpoints
                    if checkpoints.safe is None:
                        self._settle(connection)
                    latest, xmin, next_xid = _checkpoint(connection)
                    if checkpoints.safe is None:
                        checkpoints.safe = latest  # before: history
                    elif latest > checkpoints.safe:
                        # From the safe point as it was: the checkpoint taken now confirms
                        # those before the drop, whose notifications may have been lost.
                        self._loop.call_soon_threadsafe(self._missed, checkpoints.safe, latest)
                    checkpoints.add(latest, xmin, next_xid)
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
        _, _, next_xid = _checkpoint(connection)
        deadline = time.monotonic() + STARTUP_SETTLE_SECONDS
        while time.monotonic() < deadline and not self._stop.wait(SETTLE_POLL_SECONDS):
            if _checkpoint(connection)[1] >= next_xid:
                return

    def _receive(self, connection: psycopg.Connection[Any]) -> None:
        checked = time.monotonic()
        while not self._stop.is_set():
            for notify in connection.notifies(timeout=NOTIFY_WAIT_SECONDS):
                origin, pairs = parse_payload(notify.payload)
                if origin != self._origin and pairs:
                    self._loop.call_soon_threadsafe(self._heard, pairs)
            if time.monotonic() - checked >= CHECKPOINT_SECONDS:
                self._checkpoints.add(*_checkpoint(connection))
                checked = time.monotonic()

    async def close(self) -> None:
        self._stop.set()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 2 * NOTIFY_WAIT_SECONDS)
