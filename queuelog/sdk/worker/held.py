"""The jobs a worker holds: claimed, and not yet reported. Every unit of the worker reads
and changes them here, on the worker's event loop."""

from __future__ import annotations

import asyncio
from typing import Any

from queuelog.sdk.worker.job import JobContext
from queuelog.sdk.worker.outcomes import json_string


class Held:
    """One job held: its handler runs, or its report is on its way."""

    __slots__ = (
        "id",
        "id_json",
        "type",
        "attempt",
        "started",
        "interval",
        "next_beat",
        "beat",
        "running",
        "deadline",
        "timed_out",
        "cancel_requested",
        "progress",
    )

    def __init__(self, context: JobContext, started: float, interval: float) -> None:
        self.id = context.id
        self.id_json = json_string(context.id)
        self.type = context.type
        self.attempt = context.attempt
        self.started = started
        self.interval = interval  # between heartbeats
        self.next_beat = started + interval
        self.beat: asyncio.Task[None] | None = None  # the heartbeat in flight
        self.running: asyncio.Future[Any] | None = None  # the handler, until it returns
        self.deadline: asyncio.TimerHandle | None = None  # when the job passes its timeout
        self.timed_out = False  # reported as timed out: whatever the handler returns is discarded
        self.cancel_requested = False  # cancelJob while it ran (cancels.py): the handler should stop
        self.progress: Any = None  # progress.Reporting, from the handler's first report on


class HeldJobs:
    """The held jobs, and the handler slots: `concurrency` handlers run at once, and up to
    `concurrency` more jobs may wait for their report while the next ones run."""

    def __init__(self, concurrency: int) -> None:
        self.jobs: set[Held] = set()  # not keyed by id: one job's next attempt may come back
        self.free = concurrency  # handler slots
        self.max_held = 2 * concurrency
        self.capacity = asyncio.Event()  # a slot or a held place was given back
        self.has_held = asyncio.Event()
        self.none_held = asyncio.Event()
        self.active = 0  # handlers running
        self.max_active_seen = 0
        self.processed = 0  # jobs released

    def room(self) -> int:
        """How many more jobs may be taken now (free slots and held places alike)."""
        return min(self.free, self.max_held - len(self.jobs))

    def take(self, held: Held) -> None:
        """A claimed job, whose handler starts now."""
        self.jobs.add(held)
        self.free -= 1
        self.active += 1

    def taken(self) -> None:
        """After `take`s: the most that ran at once, and wake who waits for a job held."""
        self.max_active_seen = max(self.max_active_seen, self.active)
        self.has_held.set()

    def handler_ended(self) -> None:
        """A handler has ended (returned, raised, cancelled): its slot is free again."""
        self.active -= 1
        self.free += 1
        self.capacity.set()

    def release(self, held: Held) -> bool:
        """The job's report is in (or given up): it is no longer held. False if it was not."""
        jobs = self.jobs
        if held not in jobs:
            return False
        jobs.remove(held)
        if held.beat is not None:
            held.beat.cancel()
        self.processed += 1
        if not jobs:
            self.none_held.set()
        self.capacity.set()
        return True
