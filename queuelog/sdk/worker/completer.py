"""The completer: reports what the handlers ended with, and lets a job go once its report
is in (or given up).

Completions queue up and go out as one `completeJobs`: whatever finished while the previous
call was in flight, so batches grow with the load and nothing waits for company at low
load. The producer may take a batch instead, to carry in its next claim (`carry`). Failures
go one `failJob` each. A report is sent until the server answers; a refusal means the job
is no longer this worker's ("lost"). A completion may be sent twice (its items carry the
attempt): items a repeat finds COMPLETED at that attempt are logged "completed".
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from queuelog.errors import Conflict, NotFound, PayloadTooLarge, QueuelogError, Unauthenticated
from queuelog.sdk.wire import ServerUnreachable
from queuelog.sdk.worker.backoff import Backoff
from queuelog.sdk.worker.held import Held, HeldJobs
from queuelog.sdk.worker.job_log import JobLog, timestamp
from queuelog.sdk.worker.outcomes import TIMED_OUT, Outcome
from queuelog.sdk.worker_calls import WorkerCalls

log = logging.getLogger("queuelog.worker")
T = TypeVar("T")
COMPLETE_BATCH = 100
COMPLETE_BATCH_BYTES = 256 * 1024  # well under QUEUELOG_MAX_BODY_BYTES' default (1 MiB)
# How long the producer waits for a running job to finish, so as to carry its completion in
# its next claim. A new job due meanwhile waits at most this much longer.
CARRY_WAIT = 0.02
SHUTDOWN_REPORT_TRIES = 5
Batch = list[tuple[Held, bytes]]


def completion_batch(waiting: collections.deque[tuple[Held, bytes]]) -> Batch:
    """The queued completions that go in one call, oldest first, taken from `waiting`: at most
    COMPLETE_BATCH items and COMPLETE_BATCH_BYTES (a request over the server's body limit is
    refused whole), and one attempt of a job a call (the server answers which ids it
    rejected, not which attempts)."""
    if not waiting:
        return []
    batch = [waiting.popleft()]
    size = len(batch[0][1])
    ids = {batch[0][0].id}
    while (
        waiting
        and len(batch) < COMPLETE_BATCH
        and size + len(waiting[0][1]) <= COMPLETE_BATCH_BYTES
        and waiting[0][0].id not in ids
    ):
        held, item = waiting.popleft()
        batch.append((held, item))
        ids.add(held.id)
        size += len(item)
    return batch


class Completer:
    def __init__(
        self,
        client: WorkerCalls,
        held: HeldJobs,
        job_log: JobLog,
        stopping: asyncio.Event,
        refuse: Callable[[QueuelogError], None],
    ) -> None:
        self._client = client
        self._held = held
        self._log = job_log
        self._stopping = stopping
        self._refuse = refuse
        self._completions: collections.deque[tuple[Held, bytes]] = collections.deque()
        self._ready = asyncio.Event()
        self._carrying = False  # the producer waits to carry the completions queued next
        self._reports: set[asyncio.Task[None]] = set()  # failures being reported

    # --- what the executor hands over --------------------------------------------------------

    def complete(self, held: Held, item: bytes) -> None:
        """Report `held` completed with `item` (its CompleteJobInput as JSON)."""
        self._completions.append((held, item))
        self._ready.set()

    def fail(self, held: Held, outcome: Outcome) -> None:
        """Report `held` failed as `outcome` says."""
        task = asyncio.ensure_future(self._report_failure(held, outcome))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    def cancel(self) -> None:
        """The worker has stopped: abandon the failure reports still trying."""
        for task in list(self._reports):
            task.cancel()

    # --- what the producer carries -----------------------------------------------------------

    async def carry(self, wait: bool) -> Batch:
        """The completions the next claim carries: those queued, after waiting up to
        CARRY_WAIT for one when none is and `wait` (the producer expects one soon)."""
        if not self._completions:
            if not wait:
                return []
            self._carrying = True
            self._ready.clear()
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._ready.wait(), CARRY_WAIT)
                await asyncio.sleep(0)  # handlers that finished together queue theirs first
            finally:
                self._carrying = False
        carried = completion_batch(self._completions)
        if self._completions:
            self._ready.set()  # the rest are the flush loop's
        return carried

    def give_back(self, batch: Batch) -> None:
        """Completions taken to carry but not sent: the flush loop reports them."""
        self._completions.extendleft(reversed(batch))
        self._ready.set()

    async def settle(self, batch: Batch, rejected: set[str]) -> None:
        """Let go of the jobs of a completion call the server answered, `rejected` as it said."""
        now, ts = time.monotonic(), timestamp()
        if rejected:
            rejected -= await self._completed_before(batch, rejected)
            now, ts = time.monotonic(), timestamp()
        for held, _ in batch:
            self._finish(held, "lost" if held.id in rejected else "completed", now, ts)

    def write_job_lines(self) -> None:
        self._log.write()

    # --- completions -------------------------------------------------------------------------

    async def flush(self) -> None:
        """Until cancelled: send what has completed in one `completeJobs`; what completes
        meanwhile goes next."""
        waiting = self._completions
        while True:
            if not waiting or self._carrying:
                self._ready.clear()
                await self._ready.wait()
                continue
            batch = completion_batch(waiting)
            try:
                await self._send_completions(batch)
            except Exception:  # never leave a job held (and heartbeated) for ever
                log.exception("reporting %d completion(s) failed", len(batch))
                now, ts = time.monotonic(), timestamp()
                for held, _ in batch:
                    self._finish(held, "unreported", now, ts)
            self._log.write()

    async def _send_completions(self, batch: Batch) -> None:
        items = [item for _, item in batch]
        outcome: list[str] | str
        error: str | None = None  # a failure reported in place of the completion
        try:
            outcome = await self._with_retries(lambda: self._client.complete_encoded(items))
        except PayloadTooLarge as exc:
            # One result over the server's limit refuses the whole call: settle each alone,
            # so that only the job with that result fails (for good: it would again).
            if len(batch) > 1:
                for one in batch:
                    await self._send_completions([one])
                return
            held = batch[0][0]
            log.error("job %s: result refused: %s", held.id, exc)
            too_large = Outcome("failed", f"result refused: {exc}", retryable=False)
            outcome = str(await self._with_retries(lambda: self._send_failure(held, too_large)))
            error = too_large.error
        except QueuelogError as exc:
            if isinstance(exc, Unauthenticated):
                self._refuse(exc)
            log.error("completeJobs refused: %s", exc)
            outcome = "refused"
        now, ts = time.monotonic(), timestamp()
        if isinstance(outcome, str):
            for held, _ in batch:
                self._finish(held, outcome, now, ts, error)
            return
        await self.settle(batch, set(outcome))

    async def _completed_before(self, batch: Batch, rejected: set[str]) -> set[str]:
        """The rejected ids that are COMPLETED at the attempt this worker held: an earlier copy
        of the call applied (it was sent again after its answer was lost)."""
        attempts = {held.id: held.attempt for held, _ in batch if held.id in rejected}
        try:
            states = await asyncio.gather(*(self._client.job_state(id) for id in attempts))
        except QueuelogError as exc:
            log.warning("could not check %d rejected completion(s): %s", len(attempts), exc)
            return set()
        return {
            id
            for (id, attempt), state in zip(attempts.items(), states, strict=True)
            if state == ("COMPLETED", attempt)
        }

    # --- failures ----------------------------------------------------------------------------

    async def _report_failure(self, held: Held, outcome: Outcome) -> None:
        try:
            status = str(await self._with_retries(lambda: self._send_failure(held, outcome)))
            if outcome is TIMED_OUT and status == "lost":
                status = TIMED_OUT.status  # the server failed it first, for the same reason
        except QueuelogError as exc:
            if isinstance(exc, Unauthenticated):
                self._refuse(exc)
            log.error("job %s: failJob refused: %s", held.id, exc)
            status = "refused"
        except Exception:  # never leave a job held (and heartbeated) for ever
            log.exception("job %s: reporting its failure failed", held.id)
            status = "unreported"
        self._finish(held, status, time.monotonic(), timestamp(), outcome.error)
        self._log.write()

    async def _send_failure(self, held: Held, outcome: Outcome) -> str:
        if outcome.snooze is not None:
            updated = await self._client.snooze(held.id, held.attempt, outcome.snooze)
        else:
            updated = await self._client.fail(
                held.id,
                held.attempt,
                outcome.error or "failed",
                retryable=outcome.retryable,
                retry_in_seconds=outcome.retry_in,
            )
        if updated.status == "CANCELLED":  # its cancellation was requested: whatever the end
            return "cancelled"
        if outcome is TIMED_OUT:
            return TIMED_OUT.status
        if outcome.snooze is not None:
            return "snoozed"
        if updated.status == "PENDING":
            return "retrying"
        return "discarded" if outcome.status == "discarded" else "failed"

    # --- both --------------------------------------------------------------------------------

    async def _with_retries(self, send: Callable[[], Awaitable[T]]) -> T | str:
        """Send one report until the server answers; a refusal means the job is not ours.

        While shutting down, give up after a few failures: the lease returns the job.
        """
        backoff = Backoff()
        while True:
            try:
                return await send()
            except (Conflict, NotFound):
                return "lost"
            except ServerUnreachable as exc:
                if self._stopping.is_set() and backoff.failures >= SHUTDOWN_REPORT_TRIES:
                    log.error("giving up reporting while stopping: %s", exc)
                    return "unreported"
                await asyncio.sleep(backoff.next())

    def _finish(self, held: Held, status: str, now: float, ts: str, error: str | None = None) -> None:
        """Let go of `held` and write its line; `error`: the failure reported for it."""
        if self._held.release(held):
            self._log.record(held, status, now, ts, error)
