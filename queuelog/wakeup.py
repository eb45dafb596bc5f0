"""Wakes long-polling claims when work may have become available in this process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from queuelog.model import JobEvent, JobStatus, TypeControl


class WorkSignal:
    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()
        # Types with a limit on RUNNING jobs: a job of one leaving RUNNING may free a slot.
        # Not types that only a pause or a rate window holds back: their jobs finishing
        # free nothing, and 200 completions a second waking every waiting claim of a
        # rate-limited type would make each of them claim again in vain.
        self._held_types: set[str] = set()

    def watch(self, controls: Mapping[str, TypeControl]) -> None:
        """Take the latest controls of these types: which of them limit RUNNING jobs."""
        for job_type, control in controls.items():
            if control.limits_running:
                self._held_types.add(job_type)
            else:
                self._held_types.discard(job_type)

    def notify(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    def on_events(self, events: Sequence[JobEvent]) -> None:
        if any(
            e.job.status is JobStatus.PENDING
            or (e.job.type in self._held_types and e.job.status is not JobStatus.RUNNING)
            or (e.job.has_dependents and e.job.status is JobStatus.COMPLETED)  # may release some
            for e in events
        ):
            self.notify()

    async def wait(self, timeout: float, *also: asyncio.Future[Any]) -> bool:
        """Wait for notify(), `timeout` seconds, or any of `also`; True if notified."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            await asyncio.wait([waiter, *also], timeout=max(timeout, 0), return_when=asyncio.FIRST_COMPLETED)
            return waiter.done() and not waiter.cancelled()
        finally:
            self._waiters.discard(waiter)
            if not waiter.done():
                waiter.cancel()

    @property
    def waiting(self) -> int:
        return len(self._waiters)
