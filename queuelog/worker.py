"""The worker: claims jobs of the types it handles, runs handlers, reports back.

    from queuelog.worker import Worker, Retry, Discard

    def send_email(job):                # or: async def send_email(job)
        if not job.payload.get("to"):
            raise Discard("no recipient")  # fails for good
        ...
        return {"sent": True}           # becomes the job's result

    Worker("http://127.0.0.1:8000", key, handlers={"email": send_email}).run_forever()

At most `concurrency` handlers run at once; async handlers on the loop, sync ones in
threads. Each job is heartbeated at a third of its lease. Completions that finish close
together are sent as one `completeJobs`. Every report carries the attempt, so a worker
whose lease expired cannot overwrite the job's next holder. On SIGTERM/SIGINT the worker
stops claiming (closing the long poll in flight, so it claims nothing more), lets
running handlers finish within `grace` seconds, fails the rest as retryable, and returns.
Network failures are retried with jittered back-off; they never stop the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import random
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from queuelog.client import AsyncClient, Completed, Job, ServerUnreachable
from queuelog.errors import Conflict, NotFound, PayloadTooLarge, QueuelogError

log = logging.getLogger("queuelog.worker")
# One JSON object per finished job; `run_forever` prints them as bare JSON lines on stderr.
job_log = logging.getLogger("queuelog.worker.jobs")

T = TypeVar("T")
Handler = Callable[["JobContext"], Any]
SHUTDOWN_REPORT_TRIES = 5
CLAIM_WAIT_SECONDS = 20
COMPLETE_BATCH = 100
COMPLETE_LINGER_SECONDS = 0.005
COMPLETE_BATCH_BYTES = 256 * 1024  # well under QUEUELOG_MAX_BODY_BYTES' default (1 MiB)
BACKOFF_START = 0.2
BACKOFF_MAX = 15.0


class Retry(Exception):
    """Fail this attempt and retry after `after` seconds (counts against maxRetries)."""

    def __init__(self, after: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.after = after


class Discard(Exception):
    """Fail the job for good, whatever retries it has left."""

    def __init__(self, reason: str = "discarded") -> None:
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a handler sees of its job."""

    id: str
    type: str
    payload: dict[str, Any]
    priority: str
    attempt: int
    retry_count: int
    max_retries: int

    @classmethod
    def from_job(cls, job: Job) -> JobContext:
        return cls(job.id, job.type, job.payload, job.priority, job.attempt, job.retry_count, job.max_retries)


@dataclass
class Outcome:
    status: str
    error: str | None = None
    retryable: bool = True
    retry_in: int | None = None
    result: Any = None


@dataclass
class Backoff:
    """Jittered exponential back-off for unreachable servers."""

    delay: float = BACKOFF_START
    failures: int = field(default=0)

    def next(self) -> float:
        self.failures += 1
        pause = self.delay * random.uniform(0.5, 1.0)
        self.delay = min(BACKOFF_MAX, self.delay * 2)
        return pause

    def reset(self) -> None:
        self.delay, self.failures = BACKOFF_START, 0


def _in_daemon_thread(handler: Handler, context: JobContext) -> asyncio.Future[Any]:
    """Run a sync handler in its own daemon thread.

    Not `asyncio.to_thread`: the default executor's threads are joined when the loop and
    the interpreter shut down, so a handler still stuck after the grace period would keep
    the worker from exiting until it returned. A daemon thread is abandoned instead (its
    job has already been failed as retryable).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def target() -> None:
        try:
            result, exc = ctx.run(handler, context), None
        except BaseException as error:
            result, exc = None, error
        with contextlib.suppress(RuntimeError):  # the loop is gone: the worker has stopped
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=target, name=f"queuelog-job-{context.id}", daemon=True).start()
    return future


def _job_lines_as_json() -> None:
    """Unless the application configured it, print job records as bare JSON lines on stderr
    (not behind the root logger's text prefix), so log shippers can parse each line whole."""
    if job_log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    job_log.addHandler(handler)
    job_log.propagate = False


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Worker:
    def __init__(
        self,
        url: str,
        key: str,
        handlers: Mapping[str, Handler],
        *,
        concurrency: int = 4,
        grace: float = 30.0,
        client: AsyncClient | None = None,
    ) -> None:
        if not handlers:
            raise ValueError("a worker needs at least one handler")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.grace = grace
        self._client = client or AsyncClient(url, key)
        self._stopping = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._completions: asyncio.Queue[tuple[Job, Any, asyncio.Future[str]]] = asyncio.Queue()
        self._slots = asyncio.Semaphore(concurrency)
        self.active = 0
        self.max_active_seen = 0
        self.processed = 0

    # --- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; `run()` then drains and returns. Safe to call from a signal handler."""
        self._stopping.set()

    def run_forever(self) -> None:
        """Run until SIGTERM or SIGINT (installs the handlers), then shut down gracefully."""
        _job_lines_as_json()
        asyncio.run(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        await self.run()

    async def run(self) -> None:
        flusher = asyncio.create_task(self._flush_completions())
        try:
            await self._claim_until_stopped()
            await self._drain()
        finally:
            await self._completions.join()
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            await self._client.aclose()

    async def _claim_until_stopped(self) -> None:
        backoff = Backoff()
        stop_wait = asyncio.create_task(self._stopping.wait())
        try:
            while not self._stopping.is_set():
                await self._slots.acquire()
                free = 1
                while free < self.concurrency and not self._slots.locked():
                    await self._slots.acquire()
                    free += 1
                claim = asyncio.create_task(
                    self._client.claim(free, types=list(self.handlers), wait_seconds=CLAIM_WAIT_SECONDS)
                )
                await asyncio.wait([claim, stop_wait], return_when=asyncio.FIRST_COMPLETED)
                if not claim.done():
                    # Closing the request makes the server drop the waiting claim unclaimed.
                    claim.cancel()
                    with contextlib.suppress(asyncio.CancelledError, QueuelogError):
                        await claim
                jobs = self._claimed(claim, backoff)
                for _ in range(free - len(jobs)):
                    self._slots.release()
                for job in jobs:
                    self._running[job.id] = asyncio.create_task(self._run_job(job))
                if claim.cancelled() or not claim.exception():
                    continue
                pause = backoff.next()
                log.warning("claim failed (%s); retrying in %.1fs", claim.exception(), pause)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stop_wait), pause)
        finally:
            stop_wait.cancel()

    def _claimed(self, claim: asyncio.Task[list[Job]], backoff: Backoff) -> list[Job]:
        if claim.cancelled():
            return []
        exc = claim.exception()
        if exc is None:
            backoff.reset()
            return claim.result()
        if not isinstance(exc, ServerUnreachable):
            # A refusal (revoked key, type not allowed) may be fixed by an operator: keep
            # trying, slowly, rather than exiting.
            log.error("claim refused: %s", exc)
        return []

    async def _drain(self) -> None:
        running = list(self._running.values())
        if not running:
            return
        log.info("stopping: waiting up to %.0fs for %d running job(s)", self.grace, len(running))
        _, pending = await asyncio.wait(running, timeout=self.grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    # --- one job ---------------------------------------------------------------------------

    async def _run_job(self, job: Job) -> None:
        started = time.monotonic()
        self.active += 1
        self.max_active_seen = max(self.max_active_seen, self.active)
        # The heartbeat runs until the report is in: a report held up by an unreachable
        # server must not let the lease lapse and the job run twice.
        heartbeat = asyncio.create_task(self._heartbeat(job))
        try:
            outcome = await self._call_handler(job)
        except asyncio.CancelledError:
            outcome = Outcome("retrying", "worker stopped before the job finished")
        finally:
            self.active -= 1
        try:
            status = await asyncio.shield(self._report(job, outcome))
        finally:
            heartbeat.cancel()
            self._running.pop(job.id, None)
            self._slots.release()
        self.processed += 1
        self._log_job(job, status, started)

    async def _call_handler(self, job: Job) -> Outcome:
        handler = self.handlers[job.type]
        context = JobContext.from_job(job)
        try:
            if inspect.iscoroutinefunction(handler):
                result = await handler(context)
            else:
                result = await _in_daemon_thread(handler, context)
                if inspect.isawaitable(result):
                    result = await result
        except Retry as exc:
            after = None if exc.after is None else max(0, min(86400, round(exc.after)))
            return Outcome("retrying", _describe(exc), retry_in=after)
        except Discard as exc:
            return Outcome("discarded", str(exc) or "discarded", retryable=False)
        except Exception as exc:
            return Outcome("retrying", _describe(exc))
        try:
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            return Outcome("failed", f"handler result is not JSON: {exc}", retryable=False)
        return Outcome("completed", result=result)

    async def _heartbeat(self, job: Job) -> None:
        lease = 300.0
        if job.lease_expires_at is not None and job.claimed_at is not None:
            lease = (job.lease_expires_at - job.claimed_at).total_seconds()
        interval = max(0.2, lease / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await self._client.heartbeat(job.id, job.attempt)
            except (Conflict, NotFound):
                log.warning("job %s: lease lost (another worker may hold it now)", job.id)
                return
            except QueuelogError as exc:
                log.warning("job %s: heartbeat failed (%s); trying again", job.id, exc)

    async def _report(self, job: Job, outcome: Outcome) -> str:
        if outcome.status == "completed":
            done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            await self._completions.put((job, outcome.result, done))
            return await done
        return await self._with_retries(lambda: self._fail(job, outcome))

    async def _fail(self, job: Job, outcome: Outcome) -> str:
        updated = await self._client.fail(
            job.id,
            job.attempt,
            outcome.error or "failed",
            retryable=outcome.retryable,
            retry_in_seconds=outcome.retry_in,
        )
        if updated.status == "PENDING":
            return "retrying"
        return "discarded" if outcome.status == "discarded" else "failed"

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

    # --- batched completions -----------------------------------------------------------------

    async def _flush_completions(self) -> None:
        while True:
            batch = [await self._completions.get()]
            size = _json_size(batch[0][1])
            deadline = time.monotonic() + COMPLETE_LINGER_SECONDS
            # Bounded in bytes too: a request over the server's body limit is refused whole.
            while len(batch) < COMPLETE_BATCH and size < COMPLETE_BATCH_BYTES:
                try:  # what is queued already, without a loop iteration per item
                    batch.append(self._completions.get_nowait())
                except asyncio.QueueEmpty:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        batch.append(await asyncio.wait_for(self._completions.get(), remaining))
                    except TimeoutError:
                        break
                size += _json_size(batch[-1][1])
            await self._send_completions(batch)
            for _ in batch:
                self._completions.task_done()

    async def _send_completions(self, batch: list[tuple[Job, Any, asyncio.Future[str]]]) -> None:
        items = [(job.id, job.attempt, result) for job, result, _ in batch]
        outcome: Completed | str
        try:
            outcome = await self._with_retries(lambda: self._client.complete_many(items))
        except PayloadTooLarge as exc:
            # One result over the server's limit refuses the whole call: settle each alone,
            # so that only the job with that result fails (for good: it would again).
            if len(batch) > 1:
                for item in batch:
                    await self._send_completions([item])
                return
            job = batch[0][0]
            log.error("job %s: result refused: %s", job.id, exc)
            too_large = Outcome("failed", f"result refused: {exc}", retryable=False)
            outcome = str(await self._with_retries(lambda: self._fail(job, too_large)))
        except QueuelogError as exc:
            log.error("completeJobs refused: %s", exc)
            outcome = "refused"
        for job, _, done in batch:
            if isinstance(outcome, Completed):
                status = "lost" if job.id in outcome.rejected else "completed"
            else:
                status = str(outcome)
            if not done.done():
                done.set_result(status)

    def _log_job(self, job: Job, outcome: str, started: float) -> None:
        job_log.info(
            json.dumps(
                {
                    "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
                    "event": "job",
                    "id": job.id,
                    "type": job.type,
                    "attempt": job.attempt,
                    "outcome": outcome,
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                }
            )
        )
