"""The worker's executor (queuelog/sdk/worker/executor.py) as a unit: claimed jobs in, each
handler's end out, as the completion or the failure it hands to the completer.

Proven: an async handler's return value and a sync handler's (run in a thread of its own,
named after the job) become completion items carrying the job's attempt, as does what a sync
handler returns awaitable; `Retry`, `Discard`, any other exception, a result that is not
JSON and a type without a handler become the failures the docs promise; a slot is taken per
job and given back as its handler ends, while the job stays held until its report is in; a
handler past its job's timeout, or its type's, is cancelled and the job failed as "timed
out", with no completion; and `drain` cancels what outlives the grace period, failed as
"worker stopped". The server's side of all this is tests/sdk/test_worker.py's.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from worker_units import ScriptedClient, claimed, until

from queuelog.sdk.worker.executor import Executor, TypeTimeouts
from queuelog.sdk.worker.held import Held, HeldJobs
from queuelog.sdk.worker.job import Discard, Handler, JobContext, Retry
from queuelog.sdk.worker.outcomes import STOPPED, TIMED_OUT, Outcome
from queuelog.sdk.worker.progress import ProgressReports


class Reports:
    """The completer's side, noted: what each job ended with."""

    def __init__(self) -> None:
        self.completed: dict[str, Any] = {}
        self.failed: dict[str, Outcome] = {}

    def complete(self, held: Held, item: bytes) -> None:
        self.completed[held.id] = json.loads(item)

    def fail(self, held: Held, outcome: Outcome) -> None:
        self.failed[held.id] = outcome


def execute(
    handlers: dict[str, Handler],
    jobs: list[dict[str, Any]],
    *,
    type_timeouts: dict[str, int] | None = None,
    then: Callable[[Executor, HeldJobs, Reports], Awaitable[None]] | None = None,
) -> tuple[Reports, HeldJobs]:
    """Run `jobs` through an executor until every handler has ended (or `then` returns)."""

    async def main() -> tuple[Reports, HeldJobs]:
        client = ScriptedClient()
        held, reports = HeldJobs(concurrency=4), Reports()
        timeouts = TypeTimeouts(client, list(handlers), lambda refusal: None)
        timeouts.seconds = type_timeouts or {}
        progress = ProgressReports(client, lambda refusal: None)
        executor = Executor(client, handlers, held, reports, timeouts, progress)
        executor.run(jobs, 100.0)
        if then is not None:
            await then(executor, held, reports)
        await until(lambda: held.active == 0, "every handler to end")
        return reports, held

    return asyncio.run(main())


def test_what_handlers_return_becomes_a_completion_of_their_attempt() -> None:
    async def on_loop(job: JobContext) -> dict[str, Any]:
        return {"id": job.id, "payload": job.payload}

    def in_thread(job: JobContext) -> str:
        return threading.current_thread().name

    def awaitable(job: JobContext) -> Awaitable[int]:
        async def later() -> int:
            return 7

        return later()

    reports, held = execute(
        {"a": on_loop, "s": in_thread, "w": awaitable},
        [claimed("1", "a", payload={"x": [1]}), claimed("2", "s", attempt=3), claimed("3", "w")],
    )
    assert reports.completed == {
        "1": {"id": "1", "attempt": 1, "result": {"id": "1", "payload": {"x": [1]}}},
        "2": {"id": "2", "attempt": 3, "result": "queuelog-job-2"},
        "3": {"id": "3", "attempt": 1, "result": 7},
    }
    assert reports.failed == {}
    # Every slot is free again, and every job still held: its report is the completer's.
    assert (held.free, held.active, held.max_active_seen, len(held.jobs)) == (4, 0, 3, 3)


def test_what_handlers_raise_becomes_the_failure_the_docs_promise() -> None:
    def raises(exc: BaseException) -> Handler:
        def handler(job: JobContext) -> None:
            raise exc

        return handler

    reports, _ = execute(
        {
            "retry": raises(Retry(after=90000.4)),
            "soon": raises(Retry(after=1.6, reason="busy")),
            "discard": raises(Discard("no recipient")),
            "other": raises(ValueError("bad\x00 input")),
            "object": lambda job: object(),
        },
        [claimed("1", "retry"), claimed("2", "soon"), claimed("3", "discard"), claimed("4", "other")]
        + [claimed("5", "object"), claimed("6", "unhandled")],
    )
    failed = {id: (o.status, o.error, o.retryable, o.retry_in) for id, o in reports.failed.items()}
    assert failed["1"] == ("retrying", "Retry: retry requested", True, 86400)
    assert failed["2"] == ("retrying", "Retry: busy", True, 2)
    assert failed["3"] == ("discarded", "no recipient", False, None)
    assert failed["4"] == ("retrying", "ValueError: bad input", True, None)
    status, error, retryable, _ = failed["5"]
    assert (status, retryable) == ("failed", False) and error.startswith("handler result is not JSON: ")
    assert failed["6"] == ("retrying", "LookupError: no handler for job type 'unhandled'", True, None)
    assert reports.completed == {}


def test_a_handler_past_its_timeout_is_cancelled_and_its_job_failed_as_timed_out() -> None:
    cancelled: list[str] = []

    async def slow(job: JobContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(job.id)
            raise

    # Job 1 sets its own timeout; job 2 has its type's.
    reports, held = execute(
        {"slow": slow, "typed": slow},
        [claimed("1", "slow", timeout=1), claimed("2", "typed")],
        type_timeouts={"typed": 1},
    )
    assert sorted(cancelled) == ["1", "2"]
    assert reports.failed == {"1": TIMED_OUT, "2": TIMED_OUT}
    assert reports.completed == {}
    assert (held.free, held.active) == (4, 0)


def test_drain_cancels_what_outlives_the_grace_period() -> None:
    async def forever(job: JobContext) -> None:
        await asyncio.Event().wait()

    def quick(job: JobContext) -> str:
        return "done"

    async def then(executor: Executor, held: HeldJobs, reports: Reports) -> None:
        await until(lambda: "2" in reports.completed, "the quick job")
        await executor.drain(0.05)

    reports, held = execute(
        {"forever": forever, "quick": quick}, [claimed("1", "forever"), claimed("2", "quick")], then=then
    )
    assert reports.failed == {"1": STOPPED}
    assert reports.completed["2"]["result"] == "done"
