"""The producer: claims jobs for the free slots and hands them to the executor.

The free slots are claimed together, in one `claimJobs` that long-polls while nothing is due,
so an idle worker starts a new job within milliseconds. When the last claim found fewer jobs
than it asked for, the next jobs due are likely those the running ones will release (chains
of dependencies), so the next claim waits briefly (completer.CARRY_WAIT) for running jobs to
finish and goes out as one `completeAndClaimJobs` carrying their completions: the server
completes them and claims in the same transaction, and a chain moves a step per round trip.

A claim is never sent twice. One whose answer is lost (the connection died, a timeout, a bad
gateway, or its cancellation when stopping) may still have claimed jobs, so before claiming
again (or, when stopping, before the grace period) the producer lists the RUNNING jobs held
under the worker's name and takes over, as if just claimed, those it does not hold that were
claimed after the newest claim it saw answered (before any, all of them): only the lost
claim can have claimed those, if no other process uses the same key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from queuelog.errors import Forbidden, PayloadTooLarge, QueuelogError, Unauthenticated
from queuelog.sdk.wire import ServerUnreachable
from queuelog.sdk.worker.backoff import Backoff
from queuelog.sdk.worker.completer import Batch, Completer
from queuelog.sdk.worker.executor import Executor
from queuelog.sdk.worker.heartbeat import Heartbeats
from queuelog.sdk.worker.held import HeldJobs
from queuelog.sdk.worker_calls import WorkerCalls

log = logging.getLogger("queuelog.worker")
CLAIM_WAIT_SECONDS = 20
CLAIM_LIMIT = 100  # the most one claimJobs may ask for
# What the worker reads of a claimed job: the handler's view, and the lease (to heartbeat).
CLAIM_FIELDS = (
    "id type payload priority attempt retryCount maxRetries concurrencyKey timeoutSeconds"
    " claimedAt leaseExpiresAt"
)
SHUTDOWN_TAKEOVER_TRIES = 2  # looking for a lost claim's jobs while stopping (less than a second)
_EPOCH = datetime.fromtimestamp(0, UTC)


def claimed_at(data: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(data["claimedAt"])
    except (KeyError, TypeError, ValueError):
        return None


class Producer:
    def __init__(
        self,
        client: WorkerCalls,
        job_types: list[str],
        held: HeldJobs,
        executor: Executor,
        completer: Completer,
        heartbeats: Heartbeats,
        stopping: asyncio.Event,
        refuse: Callable[[QueuelogError], None],
    ) -> None:
        self._client = client
        self._types = job_types
        self._handled = frozenset(job_types)
        self._held = held
        self._executor = executor
        self._completer = completer
        self._heartbeats = heartbeats
        self._stopping = stopping
        self._refuse = refuse
        self._last_claim_short = False  # the last claim answered fewer jobs than it asked for
        # A claim's answer was lost: what it claimed, if anything, is taken over before the next.
        self._claim_unsure = False
        self._claimed_since: datetime | None = None  # claimedAt of the newest claim answered

    async def claim_until_stopped(self) -> None:
        """Claim and start jobs until the worker stops; then take over what a claim cut short
        by stopping may have claimed."""
        backoff = Backoff()
        stop_wait = asyncio.create_task(self._stopping.wait())
        try:
            while not self._stopping.is_set():
                if self._claim_unsure:
                    try:
                        await self._take_over_lost_claim()
                    except ServerUnreachable as exc:
                        pause = backoff.next()
                        log.warning(
                            "looking for a lost claim's jobs failed (%s); retrying in %.1fs", exc, pause
                        )
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(asyncio.shield(stop_wait), pause)
                        continue
                if self._room() <= 0:
                    self._held.capacity.clear()
                    await self._held.capacity.wait()
                    continue
                carried = await self._completer.carry(self._last_claim_short and self._held.active > 0)
                limit = self._room()  # what the wait for them freed counts too
                if carried and limit > 0:
                    claim = asyncio.create_task(self._complete_and_claim(carried, limit))
                elif carried:
                    self._completer.give_back(carried)
                    continue
                else:
                    claim = asyncio.create_task(
                        self._client.claim_data(
                            limit, CLAIM_FIELDS, types=self._types, wait_seconds=CLAIM_WAIT_SECONDS
                        )
                    )
                await asyncio.wait([claim, stop_wait], return_when=asyncio.FIRST_COMPLETED)
                if not claim.done() and carried:
                    await asyncio.wait([claim])  # answers at once: its answer is worth waiting for
                if not claim.done():
                    # Closing the request makes the server drop the waiting claim unclaimed.
                    claim.cancel()
                    with contextlib.suppress(asyncio.CancelledError, QueuelogError):
                        await claim
                jobs = self._claimed(claim, backoff)
                if claim.done() and not claim.cancelled() and claim.exception() is None:
                    self._last_claim_short = len(jobs) < limit
                if jobs:
                    self._start(jobs)
                if claim.cancelled() or not claim.exception() or self._stopping.is_set():
                    continue
                pause = backoff.next()
                log.warning("claim failed (%s); retrying in %.1fs", claim.exception(), pause)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stop_wait), pause)
        finally:
            stop_wait.cancel()
        if self._claim_unsure:  # the claim cancelled by stopping may have been answered meanwhile
            await self._take_over_when_stopping()

    def _room(self) -> int:
        """How many jobs the next claim may ask for."""
        return min(CLAIM_LIMIT, self._held.room())

    async def _complete_and_claim(self, batch: Batch, limit: int) -> list[dict[str, Any]]:
        """One completeAndClaimJobs: settles `batch`, returns the jobs claimed. Should the call
        fail, the completer reports `batch` (it is safe to repeat) and the claim is handled
        as any failed claim (a lost answer: the jobs it may have claimed are taken over)."""
        items = [item for _, item in batch]
        try:
            rejected, claimed = await self._client.complete_and_claim_data(
                items, limit, CLAIM_FIELDS, types=self._types
            )
        except PayloadTooLarge:
            self._completer.give_back(batch)  # it finds the result at fault; nothing was claimed
            return []
        except BaseException:
            self._completer.give_back(batch)
            raise
        await self._completer.settle(batch, set(rejected))
        self._completer.write_job_lines()
        return claimed

    def _claimed(self, claim: asyncio.Task[list[dict[str, Any]]], backoff: Backoff) -> list[dict[str, Any]]:
        if claim.cancelled():
            self._claim_unsure = True
            return []
        exc = claim.exception()
        if exc is None:
            backoff.reset()
            return claim.result()
        if isinstance(exc, Unauthenticated | Forbidden):  # FORBIDDEN on a claim: not a WORKER key
            self._refuse(exc)
        elif isinstance(exc, QueuelogError) and not isinstance(exc, ServerUnreachable):
            # Another refusal (a type no longer allowed) may be fixed by an operator: keep
            # trying, slowly, rather than exiting. The server answered: it claimed nothing.
            log.error("claim refused: %s", exc)
        else:
            self._claim_unsure = True
        return []

    def _start(self, jobs: list[dict[str, Any]], *, beat_now: bool = False) -> None:
        claimed = claimed_at(jobs[0])
        if claimed is not None and (self._claimed_since is None or claimed > self._claimed_since):
            self._claimed_since = claimed
        self._executor.run(jobs, self._heartbeats.interval(jobs[0], claimed), beat_now=beat_now)

    async def _take_over_lost_claim(self) -> None:
        """Take over the jobs that a claim whose answer was lost may have claimed.

        Those are RUNNING under this worker's name, not held here, and claimed after the newest
        claim answered (claims go out one at a time, each after the last answer, so the lost
        one came later; both times are the server's clock). Raises ServerUnreachable when the
        server cannot say; a refusal gives up (it refused the claim, too).
        """
        try:
            running = await self._client.running_data(CLAIM_FIELDS)
        except ServerUnreachable:
            raise
        except QueuelogError as exc:
            if isinstance(exc, Unauthenticated):
                self._refuse(exc)
            else:
                log.error("looking for a lost claim's jobs refused: %s", exc)
            self._claim_unsure = False
            return
        self._claim_unsure = False
        held = {(h.id, h.attempt) for h in self._held.jobs}
        since = self._claimed_since
        lost = [
            data
            for data in running
            if (data["id"], data["attempt"]) not in held
            and data["type"] in self._handled
            and (since is None or (claimed_at(data) or _EPOCH) > since)
        ]
        if not lost:
            return
        lost.sort(key=lambda data: claimed_at(data) or _EPOCH, reverse=True)  # the lost claim's first
        room = max(0, self._held.room())
        if len(lost) > room:  # more than the lost claim asked for: another process shares the key?
            log.warning(
                "%d job(s) RUNNING under this worker's name and not held here; taking over %d,"
                " the rest wait for their lease",
                len(lost),
                room,
            )
            lost = lost[:room]
        if lost:
            log.warning("taking over %d job(s) claimed by a claim whose answer was lost", len(lost))
            self._start(lost, beat_now=True)

    async def _take_over_when_stopping(self) -> None:
        """`_take_over_lost_claim` with a few tries: what it takes over gets the grace period."""
        backoff = Backoff()
        while True:
            try:
                await self._take_over_lost_claim()
                return
            except ServerUnreachable as exc:
                if backoff.failures >= SHUTDOWN_TAKEOVER_TRIES:
                    log.error("giving up looking for a lost claim's jobs while stopping: %s", exc)
                    return
                await asyncio.sleep(backoff.next())
