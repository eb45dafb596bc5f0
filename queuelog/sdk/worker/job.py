"""What a handler sees and may raise: `JobContext`, `Retry`, `Discard`, `Snooze` and
`JobCancelled`."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from queuelog.errors import NotFound
from queuelog.sdk.types import WORKER_JOB_FIELDS, Job
from queuelog.sdk.worker_calls import WorkerCalls

Handler = Callable[["JobContext"], Any]
DEPENDENCY_READS = 8  # `job(id)` reads in flight at once for one JobContext.dependencies()
MAX_SNOOZE_SECONDS = 86400
MAX_PROGRESS_MESSAGE = 200


class Retry(Exception):
    """Fail this attempt and retry after `after` seconds (counts against maxRetries)."""

    def __init__(self, after: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.after = after


class Discard(Exception):
    """Fail the job for good, whatever retries it has left."""

    def __init__(self, reason: str = "discarded") -> None:
        super().__init__(reason)


class Snooze(Exception):
    """Put the job back to PENDING, due again in `seconds` (1..86400), using no retry: for a
    handler waiting on something outside ("the export is not ready yet"). ValueError for
    seconds out of range."""

    def __init__(self, seconds: int) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise ValueError(f"Snooze takes whole seconds (an int), not {type(seconds).__name__}")
        if not 1 <= seconds <= MAX_SNOOZE_SECONDS:
            raise ValueError(f"Snooze seconds must be between 1 and {MAX_SNOOZE_SECONDS}, not {seconds}")
        super().__init__(f"snoozed for {seconds}s")
        self.seconds = seconds


class JobCancelled(Exception):
    """Raised by `job.raise_if_cancelled()` once the job's cancellation was requested; the
    worker then reports the attempt, which the server ends CANCELLED."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id}: cancellation requested")


class HeldState(Protocol):
    """What JobContext reads of the worker's record of its job (held.Held)."""

    cancel_requested: bool


class ProgressSink(Protocol):
    """Where report_progress hands a checked report (progress.ProgressReports)."""

    def report(self, held: Any, fraction: float, message: str | None) -> None: ...


class _WorkerBound:
    """Slots, outside JobContext's dataclass fields (those are what the worker claims), for
    the worker that runs the job: `_worker` (its client, event loop and progress sink, shared
    by its jobs) and `_held` (its record of this job). Set by the executor."""

    __slots__ = ("_worker", "_held")


@dataclass(frozen=True, slots=True)
class JobContext(_WorkerBound):
    """What a handler sees of its job: its fields, `dependencies()`, `cancel_requested`,
    `raise_if_cancelled()` and `report_progress()`."""

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

    @property
    def cancel_requested(self) -> bool:
        """True once the job's cancellation was requested (cancelJob while it runs). An async
        handler is cancelled outright; a sync one should stop (`raise_if_cancelled`)."""
        held: HeldState | None = getattr(self, "_held", None)
        return held is not None and held.cancel_requested

    def raise_if_cancelled(self) -> None:
        """Raise JobCancelled once the job's cancellation was requested; for sync handlers, at
        the points where stopping is safe."""
        if self.cancel_requested:
            raise JobCancelled(self.id)

    def report_progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the job is (0..1) and, optionally, what it is doing (at most 200
        characters), for `jobUpdated` subscribers. Returns at once, from a sync or an async
        handler: the worker sends the latest report at most 4 times a second, and the last
        one before the attempt's outcome. ValueError for a value out of range. A JobContext
        that no worker gave (a test's) checks the values and sends nothing."""
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise ValueError(f"progress is a number from 0 to 1, not {type(fraction).__name__}")
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            raise ValueError(f"progress must be between 0 and 1, not {fraction!r}")
        if message is not None:
            if not isinstance(message, str):
                raise ValueError(f"a progress message is a string, not {type(message).__name__}")
            if len(message) > MAX_PROGRESS_MESSAGE:
                raise ValueError(
                    f"a progress message has at most {MAX_PROGRESS_MESSAGE} characters, not {len(message)}"
                )
        binding: tuple[WorkerCalls, asyncio.AbstractEventLoop, ProgressSink] | None = getattr(
            self, "_worker", None
        )
        held = getattr(self, "_held", None)
        if binding is not None and held is not None:
            binding[2].report(held, float(fraction), message)

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
        binding: tuple[WorkerCalls, asyncio.AbstractEventLoop, ProgressSink] | None = getattr(
            self, "_worker", None
        )
        if binding is None:
            raise RuntimeError("dependencies() reads through a worker: this job was not given by one")
        client, loop, _ = binding
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


async def _read_dependencies(client: WorkerCalls, job_id: str) -> list[Job]:
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
