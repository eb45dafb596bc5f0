"""In-process fan-out of job events to subscriptions.

Storage hands every committed batch of events to `EventBus.publish` (on the event loop's
thread); each subscription holds its own backlog of the events it has not taken yet. Events
are immutable and shared: a backlog holds references, not copies.

The backlog is bounded: a `jobEvents` subscription may have at most SUBSCRIBER_BACKLOG events
waiting; a `jobUpdated` one keeps only the newest (the contract lets it merge changes, and
the newest state is the one that must not be missed). The offer that would go
past the bound ends the subscription: its backlog is dropped at once, it leaves the bus, and
the subscriber gets SubscriberTooSlow (CONFLICT, "subscribe again") instead of the events it
missed, rather than one slow websocket holding an unbounded backlog in memory. An event costs
~1.6 kB with a 500-byte payload, ~62 kB with a 60 kB one (8 MB and 310 MB at the bound);
since every unfiltered backlog is a suffix of the same stream, any number of them together
hold at most the newest SUBSCRIBER_BACKLOG events.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence

from queuelog.errors import Conflict
from queuelog.model import JobEvent

# One group commit publishes every event of its transaction at once (an enqueueJobs of
# 1000 alone is 1000 events): the bound leaves room for several such bursts.
SUBSCRIBER_BACKLOG = 5000

log = logging.getLogger("queuelog.events")


class SubscriberTooSlow(Conflict):
    pass


class Subscription:
    def __init__(
        self, bus: EventBus, accepts: Callable[[JobEvent], bool], backlog: int, latest_only: bool = False
    ) -> None:
        self._bus = bus
        self._accepts = accepts
        self._backlog = backlog
        self._latest_only = latest_only
        self._pending: deque[JobEvent] = deque()
        self._ready = asyncio.Event()
        self._overflowed = False

    def offer(self, event: JobEvent) -> None:
        if self._overflowed or not self._accepts(event):
            return
        if self._latest_only:
            if self._pending and self._pending[-1].newest.revision > event.newest.revision:
                return  # an older state of the job, read back late (another server's event)
            self._pending.clear()  # the newer event carries the newer state: merge into it
        elif len(self._pending) >= self._backlog:
            self._overflow()
            return
        self._pending.append(event)
        self._ready.set()

    def _overflow(self) -> None:
        self._overflowed = True
        self._pending.clear()
        self._bus.unsubscribe(self)
        self._ready.set()
        log.warning("a subscriber fell more than %d events behind: its subscription is ended", self._backlog)

    @property
    def waiting(self) -> int:
        """How many events are waiting to be taken."""
        return len(self._pending)

    async def __aiter__(self) -> AsyncIterator[JobEvent]:
        pending = self._pending
        while True:
            if pending:
                yield pending.popleft()
            elif self._overflowed:
                raise SubscriberTooSlow(
                    f"subscriber fell more than {self._backlog} events behind; subscribe again"
                )
            else:
                self._ready.clear()
                await self._ready.wait()

    def close(self) -> None:
        self._bus.unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventBus:
    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()

    def subscribe(
        self,
        accepts: Callable[[JobEvent], bool],
        backlog: int = SUBSCRIBER_BACKLOG,
        latest_only: bool = False,
    ) -> Subscription:
        """`latest_only`: only the event with the newest state of the job waits (one job's
        updates merge, by `Job.revision`, so a slow reader still gets its latest state,
        terminal included, and never overflows)."""
        subscription = Subscription(self, accepts, backlog, latest_only)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    def publish(self, events: Sequence[JobEvent]) -> None:
        for subscription in list(self._subscriptions):
            for event in events:
                subscription.offer(event)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscriptions)
