"""What a handler sees and may raise: `JobContext`, `Retry` and `Discard`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queuelog.errors import NotFound
from queuelog.sdk.types import WORKER_JOB_FIELDS, Job
from queuelog.sdk.worker_calls import WorkerCalls

Handler = Callable[["JobContext"], Any]
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


class _WorkerBound:
    """A slot, outside JobContext's dataclass fields (those are what the worker claims), for
    the client and event loop of the worker that runs the job: set by the executor."""

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
        binding: tuple[WorkerCalls, asyncio.AbstractEventLoop] | None = getattr(self, "_worker", None)
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
