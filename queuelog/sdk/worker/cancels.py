"""Cancel requests: how the worker hears that a job it holds is to stop (API.md section 12).

While it holds jobs, the worker keeps one websocket subscription, `jobEvents(kinds:
["CANCEL_REQUESTED"])`: with a WORKER key the server sends only the requests for the jobs
held under the key's name, within a second of the cancelJob, whatever server received it.
Once the subscription is live (a ping answered after it), one read of the RUNNING jobs
catches the requests made before. The heartbeats' answers (`cancelRequested`) are the
fallback: a websocket that cannot be had is retried with back-off, logging one line per
outage, and the worker runs on without it. After CANCELS_IDLE_SECONDS without a job held,
the connection is closed until the next claim.

A request marks the job (`job.cancel_requested`) and cancels an async handler's task (it
sees CancelledError); a sync handler cannot be interrupted and checks the mark itself. The
executor then reports the attempt as a failure, which the server ends CANCELLED.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from queuelog.errors import QueuelogError, Unauthenticated
from queuelog.sdk.session import Session
from queuelog.sdk.worker.backoff import Backoff
from queuelog.sdk.worker.held import Held, HeldJobs
from queuelog.sdk.worker_calls import WorkerCalls

log = logging.getLogger("queuelog.worker")
CANCEL_REQUESTS = 'subscription { jobEvents(kinds: ["CANCEL_REQUESTED"]) { job { id attempt } } }'
CANCELS_IDLE_SECONDS = 10.0  # without a job held this long, the websocket is closed
IDLE_CHECK_SECONDS = 2.0


class Cancels:
    def __init__(self, client: WorkerCalls, held: HeldJobs, refuse: Callable[[QueuelogError], None]) -> None:
        self._client = client
        self._held = held
        self._refuse = refuse
        self.live = asyncio.Event()  # the subscription is live (tests, and the figures of bench/)

    def request(self, held: Held) -> None:
        """The job's cancellation was requested: mark it, and cancel its async handler."""
        if held.cancel_requested:
            return
        held.cancel_requested = True
        running = held.running
        if isinstance(running, asyncio.Task) and not running.done() and not held.timed_out:
            running.cancel()  # the executor reports it cancelled once the handler has ended
            log.info("job %s: cancellation requested; its handler is cancelled", held.id)
        elif running is not None:
            log.info("job %s: cancellation requested; its sync handler sees job.cancel_requested", held.id)

    def requested(self, job_id: str, attempt: int) -> None:
        for held in self._held.jobs:
            if held.id == job_id and held.attempt == attempt:
                self.request(held)

    async def listen(self, session: Session) -> None:
        """Until cancelled: keep the subscription while jobs are held."""
        backoff = Backoff()
        out = False  # the websocket is unavailable; said once, until it is back
        while True:
            held_jobs = self._held
            if not held_jobs.jobs:
                held_jobs.has_held.clear()
                await held_jobs.has_held.wait()
            try:
                await self._subscribed(session)
            except Unauthenticated as exc:
                self._refuse(exc)
                return
            except Exception as exc:  # unreachable, refused, a bad message: never the worker's end
                if self.live.is_set() or not out:
                    log.warning(
                        "cancel requests: no websocket (%s); the worker hears of them from its"
                        " heartbeats until it is back",
                        exc,
                    )
                out = True
                self.live.clear()
                await asyncio.sleep(backoff.next())
                continue
            if out:
                log.info("cancel requests: the websocket is back")
                out = False
            backoff.reset()

    async def _subscribed(self, session: Session) -> None:
        """One connection, from its opening until it has been idle long enough."""
        async with session._open_socket() as socket:
            await socket.subscribe(CANCEL_REQUESTS)
            await socket.synchronise()
            await self._catch_up()
            self.live.set()
            idle_for = 0.0
            while True:
                try:
                    data = await asyncio.wait_for(socket.next(), IDLE_CHECK_SECONDS)
                except TimeoutError:
                    idle_for = 0.0 if self._held.jobs else idle_for + IDLE_CHECK_SECONDS
                    if idle_for >= CANCELS_IDLE_SECONDS:
                        self.live.clear()
                        return
                    continue
                if data is None:
                    raise QueuelogError("the server ended the cancel-request subscription")
                job = data["jobEvents"]["job"]
                self.requested(str(job["id"]), job["attempt"])

    async def _catch_up(self) -> None:
        """The requests made while the subscription was not live, for the jobs held now."""
        if not self._held.jobs:
            return
        for job in await self._client.running_data("id attempt cancelRequested"):
            if job["cancelRequested"]:
                self.requested(str(job["id"]), job["attempt"])
