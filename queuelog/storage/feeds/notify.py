"""Other servers' job events as PostgreSQL's LISTEN/NOTIFY brings them (QUEUELOG_EVENT_FEED
`notify`), handed to this server's subscriptions and claims.

The database hears the notifications (`Database.listen`: postgres/notifications.py); the
feed reads their jobs back, those heard meanwhile coalesced into one read, and delivers each
job as it is now, with its status as of the event (what `jobEvents(statuses:)` filters on):
the terminal state of a job is never missed. A range of events the listener may have missed
while its connection was down is read from `job_events` and delivered the same way.
Long-polling claims also re-check the database on their own timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from queuelog.model import JobEvent
from queuelog.storage.database import Database, retry_delay
from queuelog.storage.feeds.tail import events_as_of
from queuelog.storage.operations import reads
from queuelog.storage.schema.codec import RemoteEvent, remote_event

log = logging.getLogger("queuelog.storage")


class NotifyFeed:
    def __init__(
        self,
        db: Database,
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
        self._closed = False
        self._notifications = db.listen(self._received, self._catch_up)

    def wait_listening(self, timeout: float) -> bool:
        return self._notifications.wait_listening(timeout)

    def _received(self, pairs: list[RemoteEvent]) -> None:
        self._pending.extend(pairs)
        if self._reading is None or self._reading.done():
            self._reading = self._loop.create_task(self._read_back())

    async def _read_back(self) -> None:
        failures = 0
        while self._pending and not self._closed:
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
        """Deliver the events committed while the listener was not listening. A failed read
        is tried again after a pause (the database may be unreachable again a moment after
        the reconnect): these events would not be delivered otherwise."""
        failures = 0
        while after < through and not self._closed:
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
        self._closed = True
        await self._notifications.close()
        if self._reading is not None:
            self._reading.cancel()
