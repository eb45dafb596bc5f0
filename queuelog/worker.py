"""The worker: claims jobs of the types it handles, runs handlers, reports back.

    from queuelog.worker import Worker, Retry, Discard

    def send_email(job):                # or: async def send_email(job)
        if not job.payload.get("to"):
            raise Discard("no recipient")  # fails for good
        ...
        return {"sent": True}           # becomes the job's result

    Worker("http://127.0.0.1:8000", handlers={"email": send_email}).run_forever()

The key comes from $QUEUELOG_API_KEY (kept out of `ps`), or `Worker(url, key, handlers)`.

At most `concurrency` handlers run at once; async handlers on the loop, sync ones in
daemon threads (kept for the next job). The free slots are claimed together, in one
`claimJobs` that long-polls while nothing is due, so an idle worker starts a new job
within milliseconds. Completions are sent as one `completeJobs`: whatever finished while
the previous one was in flight, so batches grow with the load and nothing waits for
company at low load. While up to `concurrency` finished jobs wait for their report, the
next ones are claimed and run. When the last claim found fewer jobs than it asked for, the
next jobs due are likely those that the running ones will release (chains of
dependencies), so the next claim waits briefly (CARRY_WAIT) for running jobs to finish and
goes out as one `completeAndClaimJobs` carrying their completions: the server completes
them and claims in the same transaction, and a chain moves a step per round trip. A job
stays this worker's until its report is in; one periodic sweep heartbeats, at a third of
the lease, the jobs held that long (a job done in microseconds never needs one). Every
report carries the attempt, so a worker whose lease expired cannot overwrite the job's
next holder. The per-job JSON log lines of a batch are written together. On SIGTERM/SIGINT
the worker stops claiming (closing the long poll in flight, so it claims nothing more),
lets running handlers finish within `grace` seconds, fails the rest as retryable, and
returns. Network failures are retried with jittered back-off; they never stop the worker.
`run_forever` runs on uvloop when it is installed.

A key the server refuses (API.md section 7) is a configuration error, not a failure to wait
out: UNAUTHENTICATED from any call (a mistyped, unknown or revoked key), or FORBIDDEN on a
claim (a key without the WORKER role). The worker then stops as on SIGTERM (running handlers
get the grace period; their reports will be refused) and `run()` raises `KeyRefused`.
Other refusals of a claim (a type no longer allowed) are logged and the claim tried again.

Log output (`run_forever(log_format=)`): "text", each job's line is a JSON object on stderr
(`ts`, `event`, `id`, `type`, `attempt`, `outcome`, `duration_ms`); "json", each job's line
also has `level`, `logger` and `message` and goes to stdout, where, unless the application
configured logging, the worker's other messages go too, each a JSON object
(queuelog/logformat.py).

A claim is never sent twice. One whose answer is lost (the connection died, a timeout, a
bad gateway, or its cancellation when stopping) may still have claimed jobs on the server,
so before claiming again (or, when stopping, before the grace period) the worker lists the
RUNNING jobs held under its name and takes over, as if just claimed, those it does not hold
that were claimed after the newest claim it saw answered (before any, all of them): only the
lost claim can have claimed those, if no other process uses the same key. So a lost answer
leaves no job RUNNING until its lease expires, unless the server stays unreachable while
the worker stops.

Timeouts (API.md section 9). A job's timeout is its `timeoutSeconds`, else its type's (the
worker reads the types' defaults with `typeControls` as it starts and every minute, never
per job). Past it, counted from the claim's answer, an async handler is cancelled (it sees
CancelledError) and a sync one, which cannot be stopped, has its result discarded; either
way the worker fails the job with the server's error `timed out` (retry rules as for any
failure), unless the server, which applies the timeout on its own, did so first. A handler
that goes on regardless keeps its slot until it returns (so `concurrency` still bounds the
handlers running), and whatever it returns is discarded. A completion that reaches the
server after the job timed out there is rejected and logged "lost", never "completed".

Dependencies (API.md sections 10 and 11). A job enqueued with `depends_on` runs only once the
jobs it waits for are COMPLETED; its handler reads them, with their results, through
`job.dependencies()` (`await job.dependencies()` in an async handler), so one step passes its
output to the next:

    def parse(job):
        (fetched,) = job.dependencies()  # [queuelog.client.Job], in id order
        return {"words": len(fetched.result["text"].split())}
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import inspect
import json
import logging
import math
import queue
import random
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO, TypeVar

from queuelog import logformat
from queuelog.errors import (
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    QueuelogError,
    Unauthenticated,
    echo,
)
from queuelog.sdk.async_client import AsyncClient
from queuelog.sdk.types import WORKER_JOB_FIELDS, Job
from queuelog.sdk.wire import ServerUnreachable

log = logging.getLogger("queuelog.worker")
# One JSON object per finished job; `run_forever` prints them as bare JSON lines (stderr for
# "text", stdout for "json").
job_log = logging.getLogger("queuelog.worker.jobs")
JOB_LOGGER_JSON = json.dumps(job_log.name)

T = TypeVar("T")
Handler = Callable[["JobContext"], Any]
SHUTDOWN_REPORT_TRIES = 5
SHUTDOWN_TAKEOVER_TRIES = 2  # looking for a lost claim's jobs while stopping (less than a second)
CLAIM_WAIT_SECONDS = 20
CLAIM_LIMIT = 100  # the most one claimJobs may ask for
# What the worker reads of a claimed job: the handler's view, and the lease (to heartbeat).
CLAIM_FIELDS = (
    "id type payload priority attempt retryCount maxRetries concurrencyKey timeoutSeconds"
    " claimedAt leaseExpiresAt"
)
COMPLETE_BATCH = 100
COMPLETE_BATCH_BYTES = 256 * 1024  # well under QUEUELOG_MAX_BODY_BYTES' default (1 MiB)
# After a short claim, how long the next one waits for a running job to finish, so as to
# carry its completion (module docstring). A new job due meanwhile waits at most this much
# longer; an idle worker (nothing running) never waits.
CARRY_WAIT = 0.02
DEFAULT_LEASE_SECONDS = 300.0
MIN_HEARTBEAT_INTERVAL = 0.2
SWEEP_TICK_MIN, SWEEP_TICK_MAX = 0.05, 1.0  # a heartbeat is due at most this late
BACKOFF_START = 0.2
BACKOFF_MAX = 15.0
# How often the worker reads the types' default timeouts (typeControls): a job that sets no
# timeoutSeconds of its own gets its type's, as known at its claim. The server applies the
# timeout whatever the worker knows; this only lets the worker stop the handler too.
TYPE_TIMEOUTS_REFRESH_SECONDS = 60.0
FIRST_TYPE_TIMEOUTS_WAIT = 2.0  # at start, before the first claim, at most this long
TIMED_OUT_ERROR = "timed out"  # the server's error for a job past its timeout (API.md section 9)
# Job outcomes where the worker's report did not settle the job (a warning in JSON logs).
UNSETTLED_OUTCOMES = frozenset({"lost", "refused", "unreported"})
DEPENDENCY_READS = 8  # `job(id)` reads in flight at once for one JobContext.dependencies()


class Retry(Exception):
    """Fail this attempt and retry after `after` seconds (counts against maxRetries)."""

    def __init__(self, after: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.after = after


class Discard(Exception):
    """Fail the job for good, whatever retries it has left."""

    def __init__(self, reason: str = "discarded") -> None:
        super().__init__(reason)


class KeyRefused(QueuelogError):
    """The server refused the worker's key; raised by `Worker.run()` once it has stopped.

    `code` is the server's: UNAUTHENTICATED (the key is unknown, mistyped or revoked) or
    FORBIDDEN (the key lacks the WORKER role). `refusal` is the client error it came from.
    Retrying cannot help: the key, or the worker's configuration, must change.
    """

    def __init__(self, refusal: QueuelogError) -> None:
        if isinstance(refusal, Unauthenticated):
            why = "it is unknown, mistyped or revoked"
        else:
            why = "a worker needs a key with the WORKER role"
        super().__init__(f"the server refused this worker's key ({refusal.code}: {refusal.message}): {why}")
        self.code = refusal.code
        self.refusal = refusal


class _WorkerBound:
    """A slot, outside JobContext's dataclass fields (those are what the worker claims), for
    the client and event loop of the worker that runs the job: set by `Worker._start`."""

    __slots__ = ("_worker",)


@dataclass(frozen=True, slots=True)
class JobContext(_WorkerBound):
    """What a handler sees of its job: its fields, and `dependencies()`."""

    id: str
    type: str
    payload: dict[str, Any]
    priority: str
    attempt: int
    retry_count: int
    max_retries: int
    concurrency_key: str | None = None
    # The job's own timeout (None: its type's, if any); the worker stops the handler past it.
    timeout_seconds: int | None = None

    @classmethod
    def from_job(cls, job: Job) -> JobContext:
        return cls(
            job.id,
            job.type,
            job.payload,
            job.priority,
            job.attempt,
            job.retry_count,
            job.max_retries,
            job.concurrency_key,
            job.timeout_seconds,
        )

    @classmethod
    def from_graphql(cls, data: dict[str, Any]) -> JobContext:
        return cls(
            data["id"],
            data["type"],
            data["payload"],
            data["priority"],
            data["attempt"],
            data["retryCount"],
            data["maxRetries"],
            data["concurrencyKey"],
            data["timeoutSeconds"],
        )

    def dependencies(self) -> Any:
        """The jobs this job waits for (its `dependsOn`), as `queuelog.client.Job` objects
        with their `result` (not `error`), in id order; [] for a job without dependencies.

        In an async handler, `await job.dependencies()`; in a sync handler (on its thread),
        `job.dependencies()` returns the list itself. Either way the requests go through the
        worker's client, on the worker's event loop: the worker's key may read these jobs
        while it holds this one.

        Raises NotFound (this job is no longer held by the worker, its lease lost; or a
        dependency no longer exists, deleted by the retention pruner), ServerUnreachable,
        Unauthenticated; RuntimeError for a JobContext that a running Worker did not give.
        """
        binding: tuple[AsyncClient, asyncio.AbstractEventLoop] | None = getattr(self, "_worker", None)
        if binding is None:
            raise RuntimeError("dependencies() reads through a worker: this job was not given by one")
        client, loop = binding
        if loop.is_closed():
            raise RuntimeError("dependencies(): the worker that ran this job has stopped")
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        reading = _read_dependencies(client, self.id)
        if running is loop:  # an async handler
            return reading
        future = asyncio.run_coroutine_threadsafe(reading, loop)
        if running is None:  # a sync handler's thread: wait for the answer here
            return future.result()
        return asyncio.wrap_future(future)  # awaited on some other event loop


async def _read_dependencies(client: AsyncClient, job_id: str) -> list[Job]:
    """`job_id`'s dependsOn, then each of those jobs (DEPENDENCY_READS at a time)."""
    data = await client.execute("query($id: ID!) { job(id: $id) { dependsOn } }", {"id": job_id})
    if not data.get("job"):
        raise NotFound(f"job {job_id} is not visible to this worker (its lease may have been lost)")
    gate = asyncio.Semaphore(DEPENDENCY_READS)

    async def read(dependency: str) -> Job:
        async with gate:
            found = await client.execute(
                f"query($id: ID!) {{ job(id: $id) {{ {WORKER_JOB_FIELDS} }} }}", {"id": dependency}
            )
        if not found.get("job"):
            raise NotFound(f"dependency {dependency} of job {job_id} is not visible to this worker")
        return Job.from_graphql(found["job"])

    return list(await asyncio.gather(*(read(str(d)) for d in data["job"]["dependsOn"])))


@dataclass
class Outcome:
    status: str
    error: str | None = None
    retryable: bool = True
    retry_in: int | None = None
    result: Any = None


STOPPED = Outcome("retrying", "worker stopped before the job finished")
# Reported at the job's deadline, with the server's own error text: whichever of the two
# fails the job first, it fails the same way (retry rules as for failJob).
TIMED_OUT = Outcome("timed out", TIMED_OUT_ERROR)


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


class _Held:
    """A job claimed by this worker and not yet reported."""

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
    )

    def __init__(self, context: JobContext, started: float, interval: float) -> None:
        self.id = context.id
        self.id_json = _json_string(context.id)
        self.type = context.type
        self.attempt = context.attempt
        self.started = started
        self.interval = interval
        self.next_beat = started + interval
        self.beat: asyncio.Task[None] | None = None  # the heartbeat in flight
        self.running: asyncio.Future[Any] | None = None  # the handler, until it returns
        self.deadline: asyncio.TimerHandle | None = None  # when the job passes its timeout
        self.timed_out = False  # reported as timed out: whatever the handler returns is discarded


class _HandlerThreads:
    """Daemon threads for sync handlers, each kept for the next job once it is done.

    Not `asyncio.to_thread` or a ThreadPoolExecutor: their threads are joined when the loop
    and the interpreter shut down, so a handler still stuck after the grace period would
    keep the worker from exiting until it returned. A daemon thread is abandoned instead
    (its job has already been failed as retryable). Starting a thread per job would cost
    more than a short handler itself.
    """

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, handler: Handler, context: JobContext) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._work.put((loop, future, handler, context, contextvars.copy_context()))
        if spawn:
            threading.Thread(target=self._serve, name="queuelog-handler", daemon=True).start()
        return future

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            loop, future, handler, context, ctx = self._work.get()
            me.name = f"queuelog-job-{context.id}"
            try:
                result, exc = ctx.run(handler, context), None
            except BaseException as error:
                result, exc = None, error
            me.name = "queuelog-handler"
            with self._lock:  # idle before the loop hears of it, so the next job reuses this thread
                self._idle += 1
            with contextlib.suppress(RuntimeError):  # the loop is gone: the worker has stopped
                loop.call_soon_threadsafe(_settle, future, result, exc)
            del loop, future, handler, context, ctx, result, exc


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # cancelled: the grace period is over
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _own_job_lines(stream: TextIO) -> bool:
    """Unless the application configured it, print job records as bare JSON lines on `stream`
    (not behind the root logger's text prefix), so log shippers can parse each line whole.
    True when it did (the worker then writes its lines to `stream` itself, a batch at a time)."""
    if job_log.handlers:
        return False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    job_log.addHandler(handler)
    job_log.propagate = False
    return True


def _event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (uvicorn[standard] brings it), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _json_string(text: str) -> str:
    if text.isascii() and text.isalnum():  # ids are digits: nothing to escape
        return f'"{text}"'
    return json.dumps(text)


def _completion_item(held: _Held, result: Any) -> bytes:
    """The job's `CompleteJobInput`, as JSON; TypeError/ValueError if `result` is not JSON."""
    if result is None:
        encoded = "null"
    else:
        encoded = json.dumps(result, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return f'{{"id":{held.id_json},"attempt":{held.attempt},"result":{encoded}}}'.encode()


def _timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


_EPOCH = datetime.fromtimestamp(0, UTC)


def _claimed_at(data: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(data["claimedAt"])
    except (KeyError, TypeError, ValueError):
        return None


def _lease_seconds(data: dict[str, Any], claimed: datetime | None) -> float:
    try:
        expires = datetime.fromisoformat(data["leaseExpiresAt"])
    except (KeyError, TypeError, ValueError):
        return DEFAULT_LEASE_SECONDS
    return (expires - claimed).total_seconds() if claimed is not None else DEFAULT_LEASE_SECONDS


def _text(exc: BaseException) -> str:
    return str(exc).replace("\x00", "")  # NUL cannot be stored (the server refuses it)


def _describe(exc: BaseException) -> str:
    text = _text(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _failure(exc: BaseException) -> Outcome:
    if isinstance(exc, Retry):
        after = None if exc.after is None else max(0, min(86400, round(exc.after)))
        return Outcome("retrying", _describe(exc), retry_in=after)
    if isinstance(exc, Discard):
        return Outcome("discarded", _text(exc) or "discarded", retryable=False)
    return Outcome("retrying", _describe(exc))


class Worker:
    def __init__(
        self,
        url: str,
        key: str | None = None,
        handlers: Mapping[str, Handler] | None = None,
        *,
        concurrency: int = 4,
        grace: float = 30.0,
        client: AsyncClient | None = None,
    ) -> None:
        """`key` defaults to $QUEUELOG_API_KEY (client.MissingKey with neither); `client`, when
        given, is used instead of one made from `url` and `key`."""
        if not handlers:
            raise ValueError("a worker needs at least one handler")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.grace = grace
        self._client = client or AsyncClient(url, key)
        self._is_async = {name: inspect.iscoroutinefunction(h) for name, h in self.handlers.items()}
        self._type_json = {name: json.dumps(name) for name in self.handlers}
        self._threads = _HandlerThreads()
        self._stopping = asyncio.Event()
        # Claimed and not yet reported: the handler runs, or its report is on its way. Up to
        # `concurrency` more may wait for their report while the next ones run.
        self._held: set[_Held] = set()  # not keyed by id: one job's next attempt may come back
        self._max_held = 2 * concurrency
        self._free = concurrency  # handler slots
        self._capacity = asyncio.Event()  # a slot or a held place was given back
        self._has_held = asyncio.Event()
        self._none_held = asyncio.Event()
        self._completions: collections.deque[tuple[_Held, bytes]] = collections.deque()
        self._completions_ready = asyncio.Event()
        # The claim loop waits to carry the completions queued next: the flush loop leaves them.
        self._carrying = False
        self._last_claim_short = False  # the last claim answered fewer jobs than it asked for
        self._background: set[asyncio.Task[Any]] = set()  # failure reports, heartbeats
        self._sweep_tick = SWEEP_TICK_MAX
        # A claim's answer was lost: what it claimed, if anything, is taken over before the next.
        self._claim_unsure = False
        self._claimed_since: datetime | None = None  # claimedAt of the newest claim answered
        self._job_lines: list[str] = []
        self._job_stream: TextIO | None = None  # None: job lines go through `job_log`
        self._json_lines = False  # job lines with level, logger and message (log format "json")
        self._refused: KeyRefused | None = None  # the server refused the key: run() raises it
        # The types' default timeouts (typeControls), read at start and now and then.
        self._type_timeouts: dict[str, int] = {}
        self._type_timeouts_read = asyncio.Event()  # the first read answered (or failed)
        self.active = 0
        self.max_active_seen = 0
        self.processed = 0

    # --- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; `run()` then drains and returns. Safe to call from a signal handler."""
        self._stopping.set()
        self._capacity.set()

    def run_forever(self, log_format: str = "text") -> None:
        """Run until SIGTERM or SIGINT (installs the handlers), then shut down gracefully.

        `log_format`: "text" writes each job's JSON line on stderr; "json" writes them on
        stdout, with `level`, `logger` and `message`, and, when the application has not
        configured logging, sends every other record there too as a JSON object.
        Raises KeyRefused (after stopping) when the server refuses the key.
        """
        if log_format not in logformat.LOG_FORMATS:
            formats = ", ".join(logformat.LOG_FORMATS)
            raise ValueError(f"log_format is one of {formats}, not {echo(log_format)}")
        self._json_lines = log_format == "json"
        stream = sys.stdout if self._json_lines else sys.stderr
        if self._json_lines and not logging.getLogger().handlers:
            logformat.configure("json")
        if _own_job_lines(stream):
            self._job_stream = stream
        with asyncio.Runner(loop_factory=_event_loop_factory()) as runner:
            runner.run(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        await self.run()

    async def run(self) -> None:
        """Claim and run jobs until `stop()`; then drain (see the module docstring).

        Raises KeyRefused, once stopped, when the server refused the key."""
        helpers = [
            asyncio.create_task(self._flush_completions()),
            asyncio.create_task(self._heartbeat_sweep()),
        ]
        try:
            # The types' timeouts first (briefly: the server applies them anyway), so that the
            # first jobs claimed get theirs.
            helpers.append(asyncio.create_task(self._refresh_type_timeouts()))
            first = [
                asyncio.create_task(self._type_timeouts_read.wait()),
                asyncio.create_task(self._stopping.wait()),
            ]
            await asyncio.wait(first, timeout=FIRST_TYPE_TIMEOUTS_WAIT, return_when=asyncio.FIRST_COMPLETED)
            for waiting in first:
                waiting.cancel()
            await self._claim_until_stopped()
            await self._drain()
            if self._held:
                self._none_held.clear()
                await self._none_held.wait()
        finally:
            for task in helpers + list(self._background):
                task.cancel()
            for task in helpers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._write_job_lines()
            await self._client.aclose()
        if self._refused is not None:
            raise self._refused

    def _refuse_key(self, refusal: QueuelogError) -> None:
        """The server refused the key: stop, and have `run()` raise KeyRefused."""
        if self._refused is None:
            self._refused = KeyRefused(refusal)
        self.stop()

    async def _claim_until_stopped(self) -> None:
        backoff = Backoff()
        types = list(self.handlers)
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
                    self._capacity.clear()
                    await self._capacity.wait()
                    continue
                carried = await self._completions_to_carry()
                limit = self._room()  # what the wait for them freed counts too
                if carried and limit > 0:
                    claim = asyncio.create_task(self._complete_and_claim(carried, limit, types))
                elif carried:
                    self._give_back(carried)
                    continue
                else:
                    claim = asyncio.create_task(
                        self._client.claim_data(
                            limit, CLAIM_FIELDS, types=types, wait_seconds=CLAIM_WAIT_SECONDS
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
        if self._claim_unsure:  # the claim cancelled by stop() may have been answered meanwhile
            await self._take_over_when_stopping()

    def _room(self) -> int:
        """How many jobs the next claim may ask for."""
        return min(CLAIM_LIMIT, self._free, self._max_held - len(self._held))

    async def _completions_to_carry(self) -> list[tuple[_Held, bytes]]:
        """The completions the next claim carries: those queued, after waiting up to
        CARRY_WAIT for a running job to finish when the last claim came back short."""
        if not self._completions:
            if not (self._last_claim_short and self.active):
                return []
            self._carrying = True
            self._completions_ready.clear()
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._completions_ready.wait(), CARRY_WAIT)
                await asyncio.sleep(0)  # handlers that finished together queue theirs first
            finally:
                self._carrying = False
        carried = self._completion_batch()
        if self._completions:
            self._completions_ready.set()  # the rest are the flush loop's
        return carried

    def _give_back(self, batch: list[tuple[_Held, bytes]]) -> None:
        """Completions taken to carry but not sent: the flush loop reports them."""
        self._completions.extendleft(reversed(batch))
        self._completions_ready.set()

    async def _complete_and_claim(
        self, batch: list[tuple[_Held, bytes]], limit: int, types: list[str]
    ) -> list[dict[str, Any]]:
        """One completeAndClaimJobs: settles `batch`, returns the jobs claimed. Should the call
        fail, the flush loop reports `batch` (it is safe to repeat) and the claim is handled
        as any failed claim (a lost answer: the jobs it may have claimed are taken over)."""
        items = [item for _, item in batch]
        try:
            rejected, claimed = await self._client.complete_and_claim_data(
                items, limit, CLAIM_FIELDS, types=types
            )
        except PayloadTooLarge:
            self._give_back(batch)  # the flush loop finds the result at fault; nothing was claimed
            return []
        except BaseException:
            self._give_back(batch)
            raise
        await self._settle_completions(batch, set(rejected))
        self._write_job_lines()
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
            self._refuse_key(exc)
        elif isinstance(exc, QueuelogError) and not isinstance(exc, ServerUnreachable):
            # Another refusal (a type no longer allowed) may be fixed by an operator: keep
            # trying, slowly, rather than exiting. The server answered: it claimed nothing.
            log.error("claim refused: %s", exc)
        else:
            self._claim_unsure = True
        return []

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
                self._refuse_key(exc)
            else:
                log.error("looking for a lost claim's jobs refused: %s", exc)
            self._claim_unsure = False
            return
        self._claim_unsure = False
        held = {(h.id, h.attempt) for h in self._held}
        since = self._claimed_since
        lost = [
            data
            for data in running
            if (data["id"], data["attempt"]) not in held
            and data["type"] in self.handlers
            and (since is None or (_claimed_at(data) or _EPOCH) > since)
        ]
        if not lost:
            return
        lost.sort(key=lambda data: _claimed_at(data) or _EPOCH, reverse=True)  # the lost claim's first
        room = max(0, min(self._free, self._max_held - len(self._held)))
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

    async def _drain(self) -> None:
        running = [held.running for held in self._held if held.running is not None]
        if not running:
            return
        why = " (the server refused this worker's key)" if self._refused is not None else ""
        log.info("stopping%s: waiting up to %.0fs for %d running job(s)", why, self.grace, len(running))
        _, pending = await asyncio.wait(running, timeout=self.grace)
        for future in pending:
            future.cancel()  # a sync handler's thread is abandoned
        if pending:
            await asyncio.wait(pending)

    # --- timeouts --------------------------------------------------------------------------

    async def _refresh_type_timeouts(self) -> None:
        """Read the handled types' default timeouts now and every TYPE_TIMEOUTS_REFRESH_SECONDS.

        Off the hot path: a claim never waits for it. A failed read keeps what was known (a
        server that cannot say leaves the timeouts to the server alone).
        """
        while True:
            try:
                controls = await self._client.type_controls()
            except Unauthenticated as exc:
                self._refuse_key(exc)
            except Exception as exc:  # unreachable, refused, an older server: try again later
                log.debug("reading the types' timeouts failed: %s", exc)
            else:
                self._type_timeouts = {
                    c.type: c.timeout_seconds
                    for c in controls
                    if c.type in self.handlers and c.timeout_seconds is not None
                }
            self._type_timeouts_read.set()
            await asyncio.sleep(TYPE_TIMEOUTS_REFRESH_SECONDS)

    def _time_out(self, held: _Held) -> None:
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
        self._spawn(self._report_failure(held, TIMED_OUT))

    def _start(self, jobs: list[dict[str, Any]], *, beat_now: bool = False) -> None:
        """Run claimed jobs; `beat_now`: heartbeat them at the next sweep (taken over, their
        lease has been running for a while)."""
        now = time.monotonic()
        claimed = _claimed_at(jobs[0])
        if claimed is not None and (self._claimed_since is None or claimed > self._claimed_since):
            self._claimed_since = claimed
        # One claim, one lease for all: the server's default (a third of it between heartbeats).
        interval = max(MIN_HEARTBEAT_INTERVAL, _lease_seconds(jobs[0], claimed) / 3)
        self._sweep_tick = min(self._sweep_tick, max(SWEEP_TICK_MIN, interval / 10))
        held_jobs = self._held
        type_timeouts = self._type_timeouts
        loop = asyncio.get_running_loop()
        binding = (self._client, loop)  # what JobContext.dependencies() reads through
        for data in jobs:  # the hot path: per job, one dict read for its timeout, no request
            context = JobContext.from_graphql(data)
            object.__setattr__(context, "_worker", binding)  # frozen: no plain assignment
            held = _Held(context, now, interval)
            if beat_now:
                held.next_beat = now
            held_jobs.add(held)
            self._free -= 1
            self.active += 1
            running = self._launch(context)
            held.running = running
            running.add_done_callback(functools.partial(self._handler_returned, held))
            timeout = context.timeout_seconds or type_timeouts.get(context.type)
            if timeout:
                held.deadline = loop.call_later(timeout, self._time_out, held)
        self.max_active_seen = max(self.max_active_seen, self.active)
        self._has_held.set()

    def _launch(self, context: JobContext) -> asyncio.Future[Any]:
        handler = self.handlers.get(context.type)
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

    def _handler_returned(self, held: _Held, done: asyncio.Future[Any]) -> None:
        if held.timed_out:
            self._timed_out_returned(held, done)
            return
        if done.cancelled():
            outcome = STOPPED
        elif (exc := done.exception()) is not None:
            outcome = _failure(exc)
        else:
            result = done.result()
            if not isinstance(done, asyncio.Task) and inspect.isawaitable(result):
                # A sync handler that returned an awaitable: await it on the loop, in the same
                # slot (and under the same deadline).
                task = asyncio.ensure_future(_await(result))
                held.running = task
                task.add_done_callback(functools.partial(self._handler_returned, held))
                return
            try:
                item = _completion_item(held, result)
            except (TypeError, ValueError, RecursionError) as error:
                outcome = Outcome("failed", f"handler result is not JSON: {error}", retryable=False)
            else:
                outcome = None
                self._completions.append((held, item))
                self._completions_ready.set()
        if held.deadline is not None:
            held.deadline.cancel()
            held.deadline = None
        held.running = None
        self.active -= 1
        self._free += 1
        self._capacity.set()
        if outcome is not None:
            self._spawn(self._report_failure(held, outcome))

    def _timed_out_returned(self, held: _Held, done: asyncio.Future[Any]) -> None:
        """A timed-out job's handler has ended: free its slot and discard what it returned
        or raised (the job has been failed as timed out)."""
        if not done.cancelled():
            result = done.result() if done.exception() is None else None
            if inspect.iscoroutine(result):
                result.close()  # a sync handler's coroutine, never to be run
            log.info("job %s: the handler of a timed-out job has ended; its outcome is discarded", held.id)
        held.running = None
        self.active -= 1
        self._free += 1
        self._capacity.set()

    def _spawn(self, coroutine: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # --- heartbeats ------------------------------------------------------------------------

    async def _heartbeat_sweep(self) -> None:
        """Heartbeat each held job a third of its lease after the claim and after each beat.

        The heartbeat runs until the report is in: a report held up by an unreachable
        server must not let the lease lapse and the job run twice.
        """
        while True:
            if not self._held:
                self._has_held.clear()
                await self._has_held.wait()
            await asyncio.sleep(self._sweep_tick)
            now = time.monotonic()
            for held in self._held:
                if held.next_beat <= now and held.beat is None:
                    held.beat = self._spawn(self._heartbeat(held))

    async def _heartbeat(self, held: _Held) -> None:
        try:
            await self._client.heartbeat(held.id, held.attempt)
        except (Conflict, NotFound):
            log.warning("job %s: lease lost (another worker may hold it now)", held.id)
            held.next_beat = math.inf
        except Unauthenticated as exc:
            self._refuse_key(exc)
            held.next_beat = math.inf
        except Exception as exc:  # unreachable, or anything unexpected: the next one may do
            log.warning("job %s: heartbeat failed (%s); trying again", held.id, exc)
        finally:
            held.beat = None
        held.next_beat = max(held.next_beat, time.monotonic() + held.interval)

    # --- reports ---------------------------------------------------------------------------

    async def _report_failure(self, held: _Held, outcome: Outcome) -> None:
        try:
            status = str(await self._with_retries(lambda: self._fail(held, outcome)))
            if outcome is TIMED_OUT and status == "lost":
                status = TIMED_OUT.status  # the server failed it first, for the same reason
        except QueuelogError as exc:
            if isinstance(exc, Unauthenticated):
                self._refuse_key(exc)
            log.error("job %s: failJob refused: %s", held.id, exc)
            status = "refused"
        except Exception:  # never leave a job held (and heartbeated) for ever
            log.exception("job %s: reporting its failure failed", held.id)
            status = "unreported"
        self._finish(held, status, time.monotonic(), _timestamp())
        self._write_job_lines()

    async def _fail(self, held: _Held, outcome: Outcome) -> str:
        updated = await self._client.fail(
            held.id,
            held.attempt,
            outcome.error or "failed",
            retryable=outcome.retryable,
            retry_in_seconds=outcome.retry_in,
        )
        if outcome is TIMED_OUT:
            return TIMED_OUT.status
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

    async def _flush_completions(self) -> None:
        """Send what has completed in one `completeJobs`; what completes meanwhile goes next."""
        waiting = self._completions
        while True:
            if not waiting or self._carrying:
                self._completions_ready.clear()
                await self._completions_ready.wait()
                continue
            batch = self._completion_batch()
            try:
                await self._send_completions(batch)
            except Exception:  # never leave a job held (and heartbeated) for ever
                log.exception("reporting %d completion(s) failed", len(batch))
                now, ts = time.monotonic(), _timestamp()
                for held, _ in batch:
                    self._finish(held, "unreported", now, ts)
            self._write_job_lines()

    def _completion_batch(self) -> list[tuple[_Held, bytes]]:
        """The queued completions that go in one call, oldest first."""
        waiting = self._completions
        if not waiting:
            return []
        batch = [waiting.popleft()]
        size = len(batch[0][1])
        ids = {batch[0][0].id}
        # Bounded in bytes too: a request over the server's body limit is refused whole. And
        # one attempt of a job a call: the server answers which ids it rejected, not which attempts.
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

    async def _send_completions(self, batch: list[tuple[_Held, bytes]]) -> None:
        items = [item for _, item in batch]
        outcome: list[str] | str
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
            outcome = str(await self._with_retries(lambda: self._fail(held, too_large)))
        except QueuelogError as exc:
            if isinstance(exc, Unauthenticated):
                self._refuse_key(exc)
            log.error("completeJobs refused: %s", exc)
            outcome = "refused"
        now, ts = time.monotonic(), _timestamp()
        if isinstance(outcome, str):
            for held, _ in batch:
                self._finish(held, outcome, now, ts)
            return
        await self._settle_completions(batch, set(outcome))

    async def _settle_completions(self, batch: list[tuple[_Held, bytes]], rejected: set[str]) -> None:
        """Finish the jobs of a completion call the server answered, `rejected` as it said."""
        now, ts = time.monotonic(), _timestamp()
        if rejected:
            rejected -= await self._completed_before(batch, rejected)
            now, ts = time.monotonic(), _timestamp()
        for held, _ in batch:
            self._finish(held, "lost" if held.id in rejected else "completed", now, ts)

    async def _completed_before(self, batch: list[tuple[_Held, bytes]], rejected: set[str]) -> set[str]:
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

    def _finish(self, held: _Held, status: str, now: float, ts: str) -> None:
        """The job's report is in (or given up): it is no longer ours; log its one line."""
        if held not in self._held:
            return
        self._held.remove(held)
        if held.beat is not None:
            held.beat.cancel()
        self.processed += 1
        if not self._held:
            self._none_held.set()
        self._capacity.set()
        job_type = self._type_json.get(held.type) or json.dumps(held.type)
        duration = round((now - held.started) * 1000, 1)
        fields = (
            f'"event": "job", "id": {held.id_json}, "type": {job_type},'
            f' "attempt": {held.attempt}, "outcome": "{status}", "duration_ms": {duration!r}}}'
        )
        if self._json_lines:  # as logformat.JsonFormatter writes a record, with the job's fields
            level = "warning" if status in UNSETTLED_OUTCOMES else "info"
            message = json.dumps(f"job {held.id} {status}")
            self._job_lines.append(
                f'{{"ts": "{ts}", "level": "{level}", "logger": {JOB_LOGGER_JSON},'
                f' "message": {message}, {fields}'
            )
        else:
            self._job_lines.append(f'{{"ts": "{ts}", {fields}')

    def _write_job_lines(self) -> None:
        """Write the job lines gathered since the last call: one write for the lot."""
        lines = self._job_lines
        if not lines:
            return
        self._job_lines = []
        if self._job_stream is None:
            for line in lines:
                job_log.info(line)
            return
        lines.append("")
        try:
            self._job_stream.write("\n".join(lines))
            self._job_stream.flush()
        except (OSError, ValueError) as exc:  # stderr closed: the jobs are reported all the same
            log.debug("job lines not written: %s", exc)
