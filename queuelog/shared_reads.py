"""Reads that every waiting claim of a process shares, instead of each making its own.

A claim long-polling for a type that a control holds back learns of a control change made on
another server (a resume, a raised limit) by reading the controls; it learns of a revoked key
by reading the keys generation. With each waiting claim reading for itself, 200 workers
waiting on a paused type made thousands of reads a second per server. Here one read serves
them all: `ControlWatch` reads the controls every `interval` while any claim waits on it, and
`Recent` answers with a value read no longer than `max_age` ago.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Generic, TypeVar

from queuelog.model import TypeControl

T = TypeVar("T")
Controls = Mapping[str, TypeControl]


class ControlWatch:
    """Tells waiting claims when the controls of their types differ from those they went by."""

    def __init__(self, read: Callable[[], Awaitable[Controls]], interval: float) -> None:
        self._read = read
        self._interval = interval
        self._waiters: dict[asyncio.Future[None], tuple[Controls, frozenset[str] | None]] = {}
        self._task: asyncio.Task[None] | None = None

    def changed(self, seen: Controls, types: Collection[str] | None) -> asyncio.Future[None]:
        """A future done once the stored controls of `types` (None: every type) differ from
        `seen`. Cancel it when no longer waiting."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = (seen, None if types is None else frozenset(types))
        waiter.add_done_callback(self._forget)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._watch())
        return waiter

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.pop(waiter, None)

    async def _watch(self) -> None:
        while self._waiters:
            await asyncio.sleep(self._interval)
            if not self._waiters:
                return
            try:
                now = await self._read()
            except Exception:  # a read that failed: the next one tries again
                continue
            for waiter, (seen, types) in list(self._waiters.items()):
                wanted = seen.keys() | now.keys() if types is None else types
                if not waiter.done() and any(seen.get(t) != now.get(t) for t in wanted):
                    waiter.set_result(None)


class Recent(Generic[T]):
    """A value read at most `max_age` seconds ago; concurrent callers share one read."""

    def __init__(self, read: Callable[[], Awaitable[T]], max_age: float) -> None:
        self._read = read
        self._max_age = max_age
        self._value: tuple[float, T] | None = None
        self._reading: asyncio.Future[T] | None = None

    async def get(self) -> T:
        if self._value is not None and time.monotonic() - self._value[0] <= self._max_age:
            return self._value[1]
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._fetch())
        return await asyncio.shield(self._reading)

    async def _fetch(self) -> T:
        started = time.monotonic()
        value = await self._read()
        self._value = (started, value)
        return value
