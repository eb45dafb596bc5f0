"""Heartbeats: each held job's lease is extended a third of the lease after its claim and
after each beat, until its report is in (a report held up by an unreachable server must not
let the lease lapse and the job run twice). One periodic sweep finds the jobs due, so a job
done in less than a third of its lease is never heartbeated. An answer with `cancelRequested`
is a cancel request (cancels.py hears of it sooner, over its websocket)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from queuelog.errors import Conflict, NotFound, QueuelogError, Unauthenticated
from queuelog.sdk.worker.held import Held, HeldJobs
from queuelog.sdk.worker_calls import WorkerCalls

log = logging.getLogger("queuelog.worker")
DEFAULT_LEASE_SECONDS = 300.0
MIN_HEARTBEAT_INTERVAL = 0.2
SWEEP_TICK_MIN, SWEEP_TICK_MAX = 0.05, 1.0  # a heartbeat is due at most this late


def lease_seconds(data: dict[str, Any], claimed: datetime | None) -> float:
    """The lease a claimed job (`claimedAt`, `leaseExpiresAt` selected) was given."""
    try:
        expires = datetime.fromisoformat(data["leaseExpiresAt"])
    except (KeyError, TypeError, ValueError):
        return DEFAULT_LEASE_SECONDS
    return (expires - claimed).total_seconds() if claimed is not None else DEFAULT_LEASE_SECONDS


class Heartbeats:
    def __init__(
        self,
        client: WorkerCalls,
        held: HeldJobs,
        refuse: Callable[[QueuelogError], None],
        cancel_requested: Callable[[Held], None],
    ) -> None:
        self._client = client
        self._cancel_requested = cancel_requested  # cancels.Cancels.request
        self._held = held
        self._refuse = refuse
        self._tick = SWEEP_TICK_MAX
        self._beats: set[asyncio.Task[None]] = set()

    def interval(self, claimed_job: dict[str, Any], claimed: datetime | None) -> float:
        """Seconds between the heartbeats of the jobs of one claim (one lease for all of
        them, the server's: a third of it); the sweep comes often enough for it."""
        interval = max(MIN_HEARTBEAT_INTERVAL, lease_seconds(claimed_job, claimed) / 3)
        self._tick = min(self._tick, max(SWEEP_TICK_MIN, interval / 10))
        return interval

    async def sweep(self) -> None:
        """Until cancelled: start the heartbeats that are due."""
        held_jobs = self._held
        while True:
            if not held_jobs.jobs:
                held_jobs.has_held.clear()
                await held_jobs.has_held.wait()
            await asyncio.sleep(self._tick)
            now = time.monotonic()
            for held in held_jobs.jobs:
                if held.next_beat <= now and held.beat is None:
                    held.beat = beat = asyncio.ensure_future(self._beat(held))
                    self._beats.add(beat)
                    beat.add_done_callback(self._beats.discard)

    def cancel(self) -> None:
        for beat in list(self._beats):
            beat.cancel()

    async def _beat(self, held: Held) -> None:
        try:
            job = await self._client.heartbeat(held.id, held.attempt)
            if job.cancel_requested:  # the fallback when the websocket (cancels.py) is away
                self._cancel_requested(held)
        except (Conflict, NotFound):
            log.warning("job %s: lease lost (another worker may hold it now)", held.id)
            held.next_beat = math.inf
        except Unauthenticated as exc:
            self._refuse(exc)
            held.next_beat = math.inf
        except Exception as exc:  # unreachable, or anything unexpected: the next one may do
            log.warning("job %s: heartbeat failed (%s); trying again", held.id, exc)
        finally:
            held.beat = None
        held.next_beat = max(held.next_beat, time.monotonic() + held.interval)
