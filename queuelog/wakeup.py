"""Wakes long-polling claims when work may have become available in this process.

A waiting claim waits for its own types only: a job of another type becoming ready wakes
nothing (a bulk retry of 10,000 jobs of one type does not send every claim waiting for
other types back to the database). And a change that comes while the claim is not waiting
(between its claim statement and its next wait) is not lost: the claim takes a `mark()`
before it claims, and `wait(since=mark)` returns at once if one of its types changed since.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from queuelog.model import JobEvent, JobStatus, TypeControl


class WorkSignal:
    def __init__(self) -> None:
        # Each waiter with the types it waits for (None: any type).
        self._waiters: dict[asyncio.Future[None], frozenset[str] | None] = {}
        # Types with a limit on RUNNING jobs: a job of one leaving RUNNING may free a slot.
        # Not types that only a pause or a rate window holds back: their jobs finishing
        # free nothing, and 200 completions a second waking every waiting claim of a
        # rate-limited type would make each of them claim again in vain.
        self._held_types: set[str] = set()
        self._changes = 0  # notifications so far
        self._any_changed = 0  # the notification count at the last one for every type
        self._type_changed: dict[str, int] = {}  # ... at the last one for each type

    def watch(self, controls: Mapping[str, TypeControl]) -> None:
        """Take the latest controls of these types: which of them limit RUNNING jobs."""
        for job_type, control in controls.items():
            if control.limits_running:
                self._held_types.add(job_type)
            else:
                self._held_types.discard(job_type)

    def mark(self) -> int:
        """Where the signal stands: pass it to `wait(since=)`."""
        return self._changes

    def notify(self, types: Collection[str] | None = None) -> None:
        """Work may be available for these types (None: any type)."""
        self._changes += 1
        if types is None:
            self._any_changed = self._changes
        else:
            for job_type in types:
                self._type_changed[job_type] = self._changes
        for waiter, wanted in self._waiters.items():
            if not waiter.done() and (types is None or wanted is None or not wanted.isdisjoint(types)):
                waiter.set_result(None)

    def on_events(self, events: Sequence[JobEvent]) -> None:
        types: set[str] = set()
        for e in events:
            status = e.job.status
            if status is JobStatus.COMPLETED and e.job.has_dependents:
                self.notify()  # it may release dependents of any type
                return
            if status is JobStatus.PENDING or (
                e.job.type in self._held_types and status is not JobStatus.RUNNING
            ):
                types.add(e.job.type)
        if types:
            self.notify(types)

    def changed_since(self, mark: int, types: Collection[str] | None) -> bool:
        """Whether a notification for any of `types` (None: any type) came after `mark`."""
        if self._any_changed > mark or (types is None and self._changes > mark):
            return True
        return types is not None and any(self._type_changed.get(t, 0) > mark for t in types)

    async def wait(
        self,
        timeout: float,
        *also: asyncio.Future[Any],
        types: Collection[str] | None = None,
        since: int | None = None,
    ) -> bool:
        """Wait for a notification for `types` (None: any type), `timeout` seconds, or any of
        `also`; True if notified. With `since` (a `mark()`), True at once if one came after it."""
        if since is not None and self.changed_since(since, types):
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = None if types is None else frozenset(types)
        try:
            await asyncio.wait([waiter, *also], timeout=max(timeout, 0), return_when=asyncio.FIRST_COMPLETED)
            return waiter.done() and not waiter.cancelled()
        finally:
            del self._waiters[waiter]
            if not waiter.done():
                waiter.cancel()

    @property
    def waiting(self) -> int:
        return len(self._waiters)
