"""The executor: runs each claimed job's handler in a slot, stops it past its timeout, and
hands what it ended with to the completer.

Async handlers run on the loop, sync ones in threads (threads.py). A job's timeout is its
`timeoutSeconds`, else its type's (`TypeTimeouts`, read now and then, never per job), counted
from the claim's answer. Past it an async handler is cancelled (it sees CancelledError) and a
sync one, which cannot be stopped, has its result discarded; either way the job is failed
with the server's error `timed out`, unless the server, which applies the timeout on its
own, did so first. A handler that goes on regardless keeps its slot until it returns, so
`concurrency` still bounds the handlers running.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from queuelog.errors import QueuelogError, Unauthenticated, echo
from queuelog.sdk.flow_control_calls import FlowControlCalls
from queuelog.sdk.worker.held import Held, HeldJobs
from queuelog.sdk.worker.job import Handler, JobContext
from queuelog.sdk.worker.outcomes import CANCELLED, STOPPED, TIMED_OUT, Outcome, completion_item, failure
from queuelog.sdk.worker.progress import ProgressReports
from queuelog.sdk.worker.threads import HandlerThreads
from queuelog.sdk.worker_calls import WorkerCalls

log = logging.getLogger("queuelog.worker")
T = TypeVar("T")
# How often the worker reads the types' default timeouts (typeControls). The server applies
# the timeout whatever the worker knows; this only lets the worker stop the handler too.
TYPE_TIMEOUTS_REFRESH_SECONDS = 60.0


class TypeTimeouts:
    """The handled types' default timeouts, as `typeControls` last said."""

    def __init__(
        self, client: FlowControlCalls, job_types: list[str], refuse: Callable[[QueuelogError], None]
    ) -> None:
        self._client = client
        self._job_types = frozenset(job_types)
        self._refuse = refuse
        self.seconds: dict[str, int] = {}
        self.read = asyncio.Event()  # the first read answered (or failed)

    async def refresh(self) -> None:
        """Until cancelled: read them now and every TYPE_TIMEOUTS_REFRESH_SECONDS. A failed
        read keeps what was known (a server that cannot say leaves the timeouts to itself)."""
        while True:
            try:
                controls = await self._client.type_controls()
            except Unauthenticated as exc:
                self._refuse(exc)
            except Exception as exc:  # unreachable, refused, an older server: try again later
                log.debug("reading the types' timeouts failed: %s", exc)
            else:
                self.seconds = {
                    c.type: c.timeout_seconds
                    for c in controls
                    if c.type in self._job_types and c.timeout_seconds is not None
                }
            self.read.set()
            await asyncio.sleep(TYPE_TIMEOUTS_REFRESH_SECONDS)


class Reports(Protocol):
    """Where the executor hands each job's end (completer.Completer)."""

    def complete(self, held: Held, item: bytes) -> None: ...

    def fail(self, held: Held, outcome: Outcome) -> None: ...


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


class Executor:
    def __init__(
        self,
        client: WorkerCalls,
        handlers: Mapping[str, Handler],
        held: HeldJobs,
        reports: Reports,
        timeouts: TypeTimeouts,
        progress: ProgressReports,
    ) -> None:
        self._client = client
        self._progress = progress
        self._handlers = handlers
        self._is_async = {name: inspect.iscoroutinefunction(h) for name, h in handlers.items()}
        self._held = held
        self._reports = reports
        self._timeouts = timeouts
        self._threads = HandlerThreads()

    def run(self, jobs: list[dict[str, Any]], interval: float, *, beat_now: bool = False) -> None:
        """Start the handlers of claimed jobs (GraphQL objects of producer.CLAIM_FIELDS),
        heartbeated every `interval` seconds; `beat_now`: at the next sweep (taken over,
        their lease has been running for a while)."""
        now = time.monotonic()
        held_jobs = self._held
        type_timeouts = self._timeouts.seconds
        loop = asyncio.get_running_loop()
        # What JobContext.dependencies() and report_progress() go through.
        binding = (self._client, loop, self._progress)
        for data in jobs:  # the hot path: per job, one dict read for its timeout, no request
            context = JobContext.from_graphql(data)
            held = Held(context, now, interval)
            object.__setattr__(context, "_worker", binding)  # frozen: no plain assignment
            object.__setattr__(context, "_held", held)
            if beat_now:
                held.next_beat = now
            held_jobs.take(held)
            running = self._launch(context)
            held.running = running
            running.add_done_callback(functools.partial(self._returned, held))
            timeout = context.timeout_seconds or type_timeouts.get(context.type)
            if timeout:
                held.deadline = loop.call_later(timeout, self._time_out, held)
        held_jobs.taken()

    async def drain(self, grace: float, why: str = "") -> None:
        """Give the handlers still running `grace` seconds, then cancel them (a sync handler's
        thread is abandoned); returns once each has ended."""
        running = [held.running for held in self._held.jobs if held.running is not None]
        if not running:
            return
        log.info("stopping%s: waiting up to %.0fs for %d running job(s)", why, grace, len(running))
        _, pending = await asyncio.wait(running, timeout=grace)
        for future in pending:
            future.cancel()
        if pending:
            await asyncio.wait(pending)

    def _launch(self, context: JobContext) -> asyncio.Future[Any]:
        handler = self._handlers.get(context.type)
        if handler is None:  # the server sent a type that was not asked for
            return self._failed_future(LookupError(f"no handler for job type {echo(context.type)}"))
        if not self._is_async[context.type]:
            return self._threads.submit(handler, context)
        try:
            awaitable = handler(context)
        except Exception as exc:
            return self._failed_future(exc)
        try:
            return asyncio.get_running_loop().create_task(awaitable)
        except TypeError:  # not a coroutine: some other awaitable, or none at all
            pass
        try:
            return asyncio.ensure_future(awaitable)
        except TypeError as exc:
            return self._failed_future(exc)

    @staticmethod
    def _failed_future(exc: BaseException) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        future.set_exception(exc)
        return future

    def _returned(self, held: Held, done: asyncio.Future[Any]) -> None:
        if held.timed_out:
            self._timed_out_returned(held, done)
            return
        outcome: Outcome | None
        if done.cancelled():
            outcome = CANCELLED if held.cancel_requested else STOPPED
        elif (exc := done.exception()) is not None:
            outcome = failure(exc)
        else:
            result = done.result()
            if not isinstance(done, asyncio.Task) and inspect.isawaitable(result):
                # A sync handler that returned an awaitable: await it on the loop, in the same
                # slot (and under the same deadline).
                task = asyncio.ensure_future(_await(result))
                held.running = task
                task.add_done_callback(functools.partial(self._returned, held))
                return
            try:
                item = completion_item(held.id_json, held.attempt, result)
            except (TypeError, ValueError, RecursionError) as error:
                outcome = Outcome("failed", f"handler result is not JSON: {error}", retryable=False)
            else:
                outcome = None
                self._report(held, functools.partial(self._reports.complete, held, item))
        if held.deadline is not None:
            held.deadline.cancel()
            held.deadline = None
        held.running = None
        self._held.handler_ended()
        if outcome is not None:
            self._report(held, functools.partial(self._reports.fail, held, outcome))

    def _report(self, held: Held, report: Callable[[], None]) -> None:
        """Hand the attempt's outcome over, after its last progress report if one is pending."""
        if held.progress is not None and self._progress.pending(held):
            self._progress.then(held, report)
        else:
            report()

    def _timed_out_returned(self, held: Held, done: asyncio.Future[Any]) -> None:
        """A timed-out job's handler has ended: free its slot and discard what it returned
        or raised (the job has been failed as timed out)."""
        if not done.cancelled():
            result = done.result() if done.exception() is None else None
            if inspect.iscoroutine(result):
                result.close()  # a sync handler's coroutine, never to be run
            log.info("job %s: the handler of a timed-out job has ended; its outcome is discarded", held.id)
        held.running = None
        self._held.handler_ended()

    def _time_out(self, held: Held) -> None:
        """The job has passed its timeout: cancel an async handler (a sync one cannot be
        stopped: its result will be discarded) and fail the job as the server does."""
        held.deadline = None
        running = held.running
        if running is None or running.done() or held.timed_out:
            return  # it returned in time; its report is on its way
        held.timed_out = True
        if isinstance(running, asyncio.Task):
            running.cancel()  # the handler sees CancelledError; its slot frees when it ends
        else:
            log.warning(
                "job %s: timed out; its sync handler cannot be interrupted: its result will be"
                " discarded, and its slot stays busy until it returns",
                held.id,
            )
        self._reports.fail(held, TIMED_OUT)
