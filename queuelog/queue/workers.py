"""The queue's worker side: claims (the long poll), heartbeats, completions, failures, progress
reports and attempts. A part of JobQueue (its base class), which holds the state it uses."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from queuelog.allowlist import Allowlist
from queuelog.auth import Principal
from queuelog.errors import BadInput
from queuelog.model import (
    ALL_JOBS,
    CompleteAndClaimOutcome,
    Completion,
    CompletionOutcome,
    Job,
    JobAttempt,
    ProgressReport,
)
from queuelog.progress import ProgressWindows
from queuelog.queue.checks import check_no_nul, check_storable, checked_json
from queuelog.queue.limits import (
    CROSS_PROCESS_RECHECK_SECONDS,
    MAX_CLAIM_BATCH,
    MAX_COMPLETE_BATCH,
    MAX_HISTORY,
    MAX_LEASE_SECONDS,
    MAX_PROGRESS_MESSAGE,
    MAX_RETRY_IN_SECONDS,
    MAX_WAIT_SECONDS,
)
from queuelog.sanitize import sanitize_error
from queuelog.settings import Settings
from queuelog.shared_reads import ControlWatch, Recent
from queuelog.stopping import Stopping
from queuelog.storage import AttemptEvent, Claimed, ClaimerRevoked, ParkedClaim, Repository, attempts_of
from queuelog.wakeup import WorkSignal

# Where `attempts` gets a job's events that carry an attempt: (job id, how many attempts).
AttemptsRead = Callable[[tuple[int, int]], Awaitable[list[AttemptEvent]]]
log = logging.getLogger("queuelog.queue")


def _caller_still_there() -> Callable[[], bool]:
    """Whether the task running this claim still wants its answer: not once it has been
    cancelled, as a websocket's operation is when its socket closes or the client stops it
    (an HTTP request's task is not: `client_gone` tells of that). Read from the writer's
    thread, inside the claim's transaction."""
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - claims run in a task
        return lambda: True
    return lambda: not (task.cancelling() or task.done())


class WorkerOperations:
    """JobQueue's worker operations (queuelog.queue.JobQueue sets these attributes)."""

    settings: Settings
    repository: Repository
    signal: WorkSignal
    stopping: Stopping
    on_held: Callable[[Sequence[str]], None] | None
    allowlist: Allowlist
    progress: ProgressWindows
    _control_watch: ControlWatch
    _key_generation: Recent[int]

    async def claim(
        self,
        principal: Principal,
        *,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int | None,
        wait_seconds: int | None,
        client_gone: Callable[[], Awaitable[object]] | None = None,
    ) -> builtins.list[Job]:
        type_list, lease = self._claim_arguments(types, limit, lease_seconds)
        wait = 0 if wait_seconds is None else wait_seconds
        if not 0 <= wait <= MAX_WAIT_SECONDS:
            raise BadInput(f"waitSeconds must be between 0 and {MAX_WAIT_SECONDS}")
        claim = functools.partial(self.repository.claim, principal.name, type_list, limit, lease)
        if not wait:
            return self._seen(await claim(wanted=_caller_still_there())).jobs
        park = functools.partial(self.repository.park_claim, principal.name, type_list, limit, lease)
        return await self._claim_waiting(
            functools.partial(claim, key_checked=True), park, principal.name, type_list, wait, client_gone
        )

    def _claim_arguments(
        self, types: Sequence[str] | None, limit: int, lease_seconds: int | None
    ) -> tuple[builtins.list[str] | None, int]:
        """A claim's types (None: any) and lease, checked."""
        if not 1 <= limit <= MAX_CLAIM_BATCH:
            raise BadInput(f"limit must be between 1 and {MAX_CLAIM_BATCH}")
        lease = self._lease(lease_seconds)
        if types is not None and not types:
            raise BadInput("types must not be empty; leave it out to claim any type")
        for job_type in types or ():
            check_storable(job_type, "types")
        return (list(dict.fromkeys(types)) if types is not None else None), lease

    async def _claim_waiting(
        self,
        claim: Callable[..., Awaitable[Claimed]],
        park: Callable[..., ParkedClaim[Claimed]],
        worker: str,
        types: builtins.list[str] | None,
        wait: float,
        client_gone: Callable[[], Awaitable[object]] | None,
    ) -> builtins.list[Job]:
        """Claim; if nothing is due, sleep until woken, something is due, or time is up.

        Between claims it only reads when the next job is due (an indexed MIN), so an idle
        worker costs one cheap read per recheck, never a write. Enqueues in this process
        wake it at once; those of other processes wake it through the event feed, or are
        seen at the next recheck (CROSS_PROCESS_RECHECK_SECONDS). While it sleeps, it is
        parked (group_commit.py): a completion in this process that releases jobs of its
        types claims them for it in its own transaction. A revoke of
        the worker's key ends the wait with nothing claimed: each claim checks the key in its
        transaction, and a moved keys generation (any process's revoke) ends it at the next
        recheck. So does the server stopping, at once: the claim answers as when its time is up.
        """
        deadline = time.monotonic() + wait
        gone = asyncio.ensure_future(client_gone()) if client_gone is not None else None
        there = _caller_still_there()

        def wanted() -> bool:
            # Read from the writer thread right before commit: a client that has gone away by
            # then claims nothing (the claim rolls back) instead of stranding jobs until
            # their lease expires.
            return there() and (gone is None or not gone.done())

        try:
            while True:
                if gone is not None and gone.done():
                    return []
                # Taken before the claim: what becomes ready while it runs (after its snapshot)
                # ends the wait that follows at once, instead of being missed until a recheck.
                mark = self.signal.mark()
                try:
                    outcome = self._seen(await claim(wanted=wanted))
                except ClaimerRevoked:
                    return []
                if outcome.jobs:
                    return outcome.jobs
                if self.stopping.is_set():
                    return []
                # Claims a control binds stay out of other transactions: they take the
                # controlled-claim lock (flow.py).
                parked = None if outcome.controls else park(wanted=wanted)
                failure: Exception | None = None
                try:
                    again = await self._sleep_until_claimable(
                        outcome, worker, types, deadline, gone, parked, mark
                    )
                except Exception as exc:  # a read failed: what the parked claim took still goes out
                    failure, again = exc, False
                finally:
                    found = await self.repository.leave_claim(parked) if parked is not None else None
                if found is not None:  # even past the deadline: these jobs are claimed
                    return self._seen(found).jobs
                if failure is not None:
                    raise failure
                if not again:
                    return []
        finally:
            if gone is not None and not gone.done():
                gone.cancel()

    async def _sleep_until_claimable(
        self,
        outcome: Claimed,
        worker: str,
        types: builtins.list[str] | None,
        deadline: float,
        gone: asyncio.Future[object] | None,
        parked: ParkedClaim[Claimed] | None,
        mark: int,
    ) -> bool:
        """Sleep after a claim that found nothing: True when the claim should run again,
        False when the wait is over (time is up, the client has gone, the key was revoked,
        the server is stopping); either as soon as `parked` has claimed."""
        generation = self.repository.key_generation()
        watched: builtins.list[asyncio.Future[Any]] = [self.stopping.future()]
        if gone is not None:
            watched.append(gone)
        if parked is not None:
            watched.append(parked.claimed)
        # A type held back by a control frees when a job leaves RUNNING (a job
        # event, from any process, wakes us), when a pause or rate window ends
        # (wake_at), or when a control changes (the process's ControlWatch).
        controls_changed = None
        if outcome.controls:
            controls_changed = self._control_watch.changed(outcome.controls, types)
            watched.append(controls_changed)
        rechecking = False
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (gone is not None and gone.done()) or self.stopping.is_set():
                    return False
                if parked is not None and parked.claimed.done():
                    return True
                if controls_changed is not None and controls_changed.done():
                    return True  # a control changed on some server: claim again
                # Read afresh (one read shared by the process's waiting claims): on
                # PostgreSQL the cached generation moves only when a request or an event
                # arrives, and an idle queue has neither.
                if await self._key_generation.get() != generation:
                    if not await self.repository.key_is_active(worker):
                        return False
                    generation = self.repository.key_generation()
                # At a recheck, a ready job of a type no control holds (another
                # process's enqueue whose event has not reached us) ends the wait too. Not
                # right after the claim: the ready jobs it skipped are being claimed.
                ready_too = rechecking and not outcome.controls
                next_due = await self.repository.next_due_at(types, ready_too=ready_too)
                if outcome.wake_at is not None and (next_due is None or outcome.wake_at < next_due):
                    next_due = outcome.wake_at
                until_due = remaining
                if next_due is not None:
                    until_due = (next_due - self.repository.now()).total_seconds()
                if until_due <= 0:
                    return True
                pause = min(remaining, until_due + 0.001, CROSS_PROCESS_RECHECK_SECONDS)
                if await self.signal.wait(pause, *watched, types=types, since=mark):
                    return True  # woken: claim again
                rechecking = True
        finally:
            if controls_changed is not None and not controls_changed.done():
                controls_changed.cancel()

    def _seen(self, outcome: Claimed) -> Claimed:
        """Types held back by a control: their jobs leaving RUNNING wake waiting claims."""
        if outcome.controls:  # a job of a type with a RUNNING limit finishing may free a slot
            self.signal.watch(outcome.controls)
        if outcome.held and self.on_held is not None:
            self.on_held(outcome.held)
        return outcome

    def _lease(self, lease_seconds: int | None) -> int:
        if lease_seconds is None:
            return self.settings.lease_seconds
        if not 1 <= lease_seconds <= MAX_LEASE_SECONDS:
            raise BadInput(f"leaseSeconds must be between 1 and {MAX_LEASE_SECONDS}")
        return lease_seconds

    async def heartbeat(
        self, principal: Principal, job_id: int, attempt: int | None, lease_seconds: int | None
    ) -> Job:
        return await self.repository.heartbeat(principal.name, job_id, attempt, self._lease(lease_seconds))

    async def complete(self, principal: Principal, job_id: int, result: Any, attempt: int | None) -> Job:
        checked_json(result, "result", self.settings.max_payload_bytes)
        await self._before_attempts_end([job_id])
        return await self.repository.complete(principal.name, job_id, result, attempt)

    async def complete_many(self, principal: Principal, items: Sequence[Completion]) -> CompletionOutcome:
        items = self._completions(items)
        if not items:
            return CompletionOutcome(completed=[], rejected=[])
        await self._before_attempts_end(item.id for item in items)
        return await self.repository.complete_many(principal.name, items)

    async def complete_and_claim(
        self,
        principal: Principal,
        items: Sequence[Completion],
        *,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int | None,
    ) -> CompleteAndClaimOutcome:
        """complete_many, then a claim that answers at once, in one transaction (a chain's
        next step is claimable as soon as the completion before it applies)."""
        items = self._completions(items)
        type_list, lease = self._claim_arguments(types, limit, lease_seconds)
        await self._before_attempts_end(item.id for item in items)
        outcome, claimed = await self.repository.complete_and_claim(
            principal.name, items, type_list, limit, lease
        )
        return CompleteAndClaimOutcome(outcome.completed, outcome.rejected, self._seen(claimed).jobs)

    def _completions(self, items: Sequence[Completion]) -> builtins.list[Completion]:
        """completeJobs items, checked, with their results measured."""
        if len(items) > MAX_COMPLETE_BATCH:
            raise BadInput(f"at most {MAX_COMPLETE_BATCH} items per call, got {len(items)}")
        return [
            dataclasses.replace(
                item, result_json=checked_json(item.result, "result", self.settings.max_payload_bytes)
            )
            if item.result is not None
            else item
            for item in items
        ]

    async def fail(
        self,
        principal: Principal,
        job_id: int,
        error: str,
        retryable: bool,
        retry_in_seconds: int | None,
        attempt: int | None,
    ) -> Job:
        if retry_in_seconds is not None and not 0 <= retry_in_seconds <= MAX_RETRY_IN_SECONDS:
            raise BadInput(f"retryInSeconds must be between 0 and {MAX_RETRY_IN_SECONDS}")
        check_no_nul(error, "error")  # lone surrogates: sanitize_error replaces them
        clean = sanitize_error(error, self.settings.max_error_chars)
        await self._before_attempts_end([job_id])
        return await self.repository.fail(principal.name, job_id, clean, retryable, retry_in_seconds, attempt)

    # --- progress and attempts (API.md section 12) ------------------------------------------

    async def report_progress(
        self, principal: Principal, job_id: int, attempt: int, progress: float, message: str | None
    ) -> Job:
        if not 0 <= progress <= 1:  # NaN too
            raise BadInput("progress must be between 0 and 1")
        if message is not None:
            if len(message) > MAX_PROGRESS_MESSAGE:
                raise BadInput(f"message must be at most {MAX_PROGRESS_MESSAGE} characters")
            check_storable(message, "message")
        report = ProgressReport(job_id, principal.name, attempt, progress, message)
        return await self.progress.report(report, lambda: self.repository.get_job(job_id, ALL_JOBS))

    def following_progress(self, job: Job) -> contextlib.AbstractContextManager[None]:
        """While the block runs, reports on `job` through other servers reach this server's
        subscribers (storage/feeds/progress_watch.py); those through this one always do."""
        return self.repository.progress_watch.following(job)

    async def _before_attempts_end(self, job_ids: Iterable[int]) -> None:
        """Store the progress reports held for these jobs before their holder ends their
        attempts through this server: the last report of an attempt comes before its end."""
        held = self.progress.take_held(job_ids)
        if held:
            await self.progress.store_held(held)

    async def attempts(
        self, principal: Principal, job: Job, last: int, read: AttemptsRead
    ) -> builtins.list[JobAttempt]:
        """The newest `last` claims of a job the caller was shown (so already may see);
        `read` gets its events that carry an attempt (`attempt_events`, batched by the
        resolvers' DataLoader)."""
        if not 1 <= last <= MAX_HISTORY:
            raise BadInput(f"last must be between 1 and {MAX_HISTORY}")
        if not principal.scope.allows(job):
            return []
        return attempts_of(job, await read((job.id, last)), last)

    async def attempt_events(
        self, wanted: Sequence[tuple[int, int]]
    ) -> builtins.list[builtins.list[AttemptEvent]]:
        """The events that carry an attempt of many jobs, (job id, how many attempts) each,
        in one read."""
        if not wanted:
            return []
        found = await self.repository.attempt_events_of_jobs(
            list(dict.fromkeys(job_id for job_id, _ in wanted)), max(last for _, last in wanted)
        )
        return [found.get(job_id, []) for job_id, _ in wanted]
