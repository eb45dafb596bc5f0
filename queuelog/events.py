"""In-process fan-out of job events to subscriptions.

Storage hands every committed batch of events to `EventBus.publish`; each subscription
holds a bounded queue. A subscriber that falls that far behind is ended with an error
rather than letting one slow websocket hold an unbounded backlog in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

from queuelog.model import JobEvent

SUBSCRIBER_BACKLOG = 1000


class SubscriberTooSlow(Exception):
    pass


class Subscription:
    def __init__(self, bus: EventBus, accepts: Callable[[JobEvent], bool], backlog: int) -> None:
        self._bus = bus
        self._accepts = accepts
        self._queue: asyncio.Queue[JobEvent] = asyncio.Queue(maxsize=backlog)
        self._overflowed = False

    def offer(self, event: JobEvent) -> None:
        if self._overflowed or not self._accepts(event):
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self._overflowed = True

    async def __aiter__(self) -> AsyncIterator[JobEvent]:
        while True:
            if self._overflowed and self._queue.empty():
                raise SubscriberTooSlow("subscriber fell too far behind; subscribe again")
            yield await self._queue.get()

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
        self, accepts: Callable[[JobEvent], bool], backlog: int = SUBSCRIBER_BACKLOG
    ) -> Subscription:
        subscription = Subscription(self, accepts, backlog)
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
