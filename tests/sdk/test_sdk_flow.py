"""Flow control through the Python SDK and the worker (API.md sections 9 and 11), against real
servers on SQLite and PostgreSQL.

Proven:
- `Client`/`AsyncClient.pause_type`, `resume_type`, `set_type_control` and `type_controls`
  read and write the server's controls as dataclasses (a pause stops claims, `until` ends it
  by itself, a naive `until` is UTC; a rate limit given as a RateLimit or a 2- or 3-tuple;
  `set_type_control` changes only the limits it is given, and None clears one); the server's
  refusals come back as the SDK's error classes (an unknown type or a number out of range
  BadInput, a WORKER key Forbidden) and a malformed rate limit is a TypeError before anything
  is sent;
- `cancel_jobs`/`retry_jobs` call again while the server says `more` and return the total
  (in one call, and in chunks smaller than the backlog), go by every filter field, and a
  PRODUCER's cancel touches only its own jobs;
- the worker hands its handler the job's concurrencyKey and timeoutSeconds; a job past its
  timeout (its own, or its type's default read at the worker's start) has its async handler
  cancelled (the handler sees CancelledError) and ends FAILED with error "timed out" after
  its retries, each attempt cancelled; an async handler that swallows the cancellation, and
  a sync handler (which cannot be stopped), have their results discarded: the job stays
  FAILED "timed out" with no result, and the worker logs the job "timed out", never
  "completed"; a slot stays taken until a timed-out sync handler returns (the concurrency
  bound holds); and when only the server knew the timeout (set after the worker started),
  the worker's late completion is rejected and logged "lost", not "completed".
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

import pytest
from conftest import Server, serving

from queuelog.client import AsyncClient, Client, RateLimit, TypeControl
from queuelog.errors import BadInput, Forbidden
from queuelog.worker import JobContext, Worker

T = TypeVar("T")
TIMEOUT = 60.0  # bounds every wait; past it, something hangs
JOB_TYPES = (
    "f_pause,f_until,f_naive,f_limits,f_bulk,f_chunks,f_mine,f_async,f_default,f_swallow,f_sync,f_stale,"
    "f_fields,f_slot"
)
CLAIM = "mutation($types: [String!]) { claimJobs(limit: 10, types: $types) { id } }"


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Failed attempts retried at once, so a job's retries run within a test."""
    with serving(backend, tmp_path_factory, job_types=JOB_TYPES, retry_base_seconds=0) as running:
        yield running


@pytest.fixture
def admin(server: Server) -> Iterator[Client]:
    with Client(server.url, server.admin_key) as client:
        yield client


def worker_key(server: Server) -> str:
    return server.make_key(f"sdk-flow-{time.monotonic_ns()}", "worker")


def claim(server: Server, key: str, job_type: str) -> list[str]:
    return [j["id"] for j in server.gql(CLAIM, {"types": [job_type]}, key=key).ok()["claimJobs"]]


def control_of(client: Client, job_type: str) -> TypeControl:
    (control,) = [c for c in client.type_controls() if c.type == job_type]
    return control


def wait_for(condition: Callable[[], T], what: str, timeout: float = TIMEOUT) -> T:
    deadline = time.monotonic() + timeout
    while not (outcome := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {timeout}s for {what}")
        time.sleep(0.05)
    return outcome


# --- type controls ---------------------------------------------------------------------------


def test_pause_and_resume_through_the_sdk(server: Server, admin: Client) -> None:
    key = worker_key(server)
    job = admin.enqueue("f_pause")
    paused = admin.pause_type("f_pause")
    assert isinstance(paused, TypeControl)
    assert (paused.type, paused.paused, paused.paused_until) == ("f_pause", True, None)
    assert control_of(admin, "f_pause").paused
    assert admin.enqueue("f_pause").status == "PENDING"  # enqueues go on
    assert claim(server, key, "f_pause") == []
    resumed = admin.resume_type("f_pause")
    assert (resumed.paused, resumed.paused_until) == (False, None)
    assert job.id in claim(server, key, "f_pause")


def test_a_pause_until_ends_by_itself(server: Server, admin: Client) -> None:
    key = worker_key(server)
    job = admin.enqueue("f_until")
    until = datetime.now(UTC) + timedelta(seconds=2)
    control = admin.pause_type("f_until", until.astimezone(timezone(timedelta(hours=-5))))
    assert control.paused and control.paused_until is not None
    assert abs((control.paused_until - until).total_seconds()) < 0.01
    assert claim(server, key, "f_until") == []
    wait_for(lambda: claim(server, key, "f_until") == [job.id], "the pause to end by itself", timeout=10)
    assert datetime.now(UTC) >= until - timedelta(milliseconds=50)


def test_async_client_sets_and_clears_limits(server: Server) -> None:
    async def scenario() -> list[TypeControl]:
        async with AsyncClient(server.url, server.admin_key) as client:
            seen = [
                await client.set_type_control(
                    "f_limits", max_running=5, max_running_per_key=2, rate_limit=(100, 60), timeout_seconds=30
                ),
                await client.set_type_control("f_limits", rate_limit=(7, 10, True)),
                await client.set_type_control("f_limits", rate_limit=RateLimit(3, 5)),
            ]
            (listed,) = [c for c in await client.type_controls() if c.type == "f_limits"]
            seen.append(listed)
            seen.append(await client.set_type_control("f_limits"))  # nothing given: nothing changes
            seen.append(await client.set_type_control("f_limits", max_running=None, timeout_seconds=None))
            seen.append(await client.set_type_control("f_limits", max_running_per_key=None, rate_limit=None))
            return seen

    first, second, third, listed, untouched, partly, cleared = asyncio.run(scenario())
    assert first == TypeControl("f_limits", False, None, 5, 2, RateLimit(100, 60, False), 30, 0)
    # a limit left out stays as it was
    assert second == TypeControl("f_limits", False, None, 5, 2, RateLimit(7, 10, True), 30, 0)
    assert third.rate_limit == RateLimit(3, 5, False) and listed == third and untouched == third
    assert partly == TypeControl("f_limits", False, None, None, 2, RateLimit(3, 5, False), None, 0)
    assert cleared == TypeControl("f_limits", False, None, None, None, None, None, 0)


def test_the_sync_client_leaves_out_what_it_is_not_given(admin: Client) -> None:
    admin.set_type_control("f_limits", max_running=4, timeout_seconds=20)
    changed = admin.set_type_control("f_limits", rate_limit=(2, 1))
    assert (changed.max_running, changed.timeout_seconds, changed.rate_limit) == (4, 20, RateLimit(2, 1))
    cleared = admin.set_type_control("f_limits", max_running=None, timeout_seconds=None, rate_limit=None)
    assert (cleared.max_running, cleared.timeout_seconds, cleared.rate_limit) == (None, None, None)


def test_refusals_are_the_sdks_errors(server: Server, admin: Client) -> None:
    with pytest.raises(BadInput, match="not allowed"):
        admin.pause_type("no_such_type")
    with pytest.raises(BadInput, match="not allowed"):
        admin.resume_type("no_such_type")
    with pytest.raises(BadInput, match="maxRunning"):
        admin.set_type_control("f_limits", max_running=0)
    with pytest.raises(BadInput, match="periodSeconds"):
        admin.set_type_control("f_limits", rate_limit=(1, 86401))
    with pytest.raises(TypeError, match="rate_limit"):
        admin.set_type_control("f_limits", rate_limit=(1,))  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="status or a type"):
        admin.cancel_jobs()
    with pytest.raises(BadInput, match="limit"):
        admin.cancel_jobs(type="f_limits", chunk=0)
    with Client(server.url, worker_key(server)) as worker:
        assert {c.type for c in worker.type_controls()} == set(JOB_TYPES.split(","))  # anyone may read
        with pytest.raises(Forbidden):
            worker.pause_type("f_limits")
        with pytest.raises(Forbidden):
            worker.set_type_control("f_limits", max_running=1)
        with pytest.raises(Forbidden):
            worker.retry_jobs(type="f_limits")


# --- bulk actions ----------------------------------------------------------------------------


def statuses(admin: Client, job_type: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in admin.list(type=job_type):
        counts[job.status] = counts.get(job.status, 0) + 1
    return counts


def test_cancel_and_retry_in_one_call_each(admin: Client) -> None:
    admin.enqueue_many([{"type": "f_bulk", "concurrency_key": "a" if n % 2 else "b"} for n in range(12)])
    cutoff = datetime.now(UTC)
    time.sleep(0.01)
    admin.enqueue_many([{"type": "f_bulk", "concurrency_key": "a"} for _ in range(3)])
    # every filter field applies: key "a" and created before the cutoff are 6 of the 15
    assert admin.cancel_jobs(status="pending", type="f_bulk", concurrency_key="a", created_before=cutoff) == 6
    assert statuses(admin, "f_bulk") == {"PENDING": 9, "CANCELLED": 6}
    assert admin.cancel_jobs(type="f_bulk") == 9
    assert admin.retry_jobs(status="CANCELLED", type="f_bulk", concurrency_key="b") == 6
    assert statuses(admin, "f_bulk") == {"PENDING": 6, "CANCELLED": 9}
    assert admin.retry_jobs(type="f_bulk") == 9
    assert admin.cancel_jobs(type="f_bulk", chunk=10000) == 15
    assert admin.cancel_jobs(type="f_bulk") == 0  # nothing left that matches


def test_cancel_and_retry_loop_over_chunks_until_nothing_more(server: Server, admin: Client) -> None:
    admin.enqueue_many([{"type": "f_chunks"} for _ in range(25)])
    assert admin.cancel_jobs(type="f_chunks", status="PENDING", chunk=10) == 25  # 10 + 10 + 5
    assert statuses(admin, "f_chunks") == {"CANCELLED": 25}

    async def retried() -> int:
        async with AsyncClient(server.url, server.admin_key) as client:
            return await client.retry_jobs(type="f_chunks", chunk=7)  # 7 + 7 + 7 + 4

    assert asyncio.run(retried()) == 25
    assert statuses(admin, "f_chunks") == {"PENDING": 25}


def test_a_producers_cancel_touches_only_its_own_jobs(server: Server, admin: Client) -> None:
    producer_key = server.make_key(f"sdk-flow-producer-{time.monotonic_ns()}", "producer")
    theirs = [admin.enqueue("f_mine").id for _ in range(3)]
    with Client(server.url, producer_key) as producer:
        mine = [producer.enqueue("f_mine").id for _ in range(4)]
        assert producer.cancel_jobs(type="f_mine") == 4
    assert {admin.get(i).status for i in mine} == {"CANCELLED"}  # type: ignore[union-attr]
    assert {admin.get(i).status for i in theirs} == {"PENDING"}  # type: ignore[union-attr]
    viewer_key = server.make_key(f"sdk-flow-viewer-{time.monotonic_ns()}", "viewer")
    with Client(server.url, viewer_key) as viewer, pytest.raises(Forbidden):
        viewer.cancel_jobs(type="f_mine")


# --- the worker and timeouts -----------------------------------------------------------------


def run_worker(
    server: Server,
    handlers: dict[str, Callable[[JobContext], Any]],
    scenario: Callable[[Worker], Awaitable[T]],
    *,
    concurrency: int = 2,
) -> T:
    """Run an in-process worker while `scenario` plays; then stop it and wait for it."""

    async def main() -> T:
        worker = Worker(server.url, worker_key(server), handlers, concurrency=concurrency, grace=5)
        running = asyncio.create_task(worker.run())
        try:
            return await scenario(worker)
        finally:
            worker.stop()
            await asyncio.wait_for(running, TIMEOUT)

    return asyncio.run(main())


async def settled(server: Server, job_id: str, *statuses: str) -> Any:
    """The job (read by ADMIN, error included) once it is in one of `statuses`."""
    async with AsyncClient(server.url, server.admin_key) as client:
        deadline = time.monotonic() + TIMEOUT
        while True:
            job = await client.get(job_id)
            if job is not None and job.status in statuses:
                return job
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} still {job and job.status} after {TIMEOUT}s")
            await asyncio.sleep(0.05)


def job_lines(caplog: pytest.LogCaptureFixture, job_id: str) -> list[dict[str, Any]]:
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "queuelog.worker.jobs"]
    return [line for line in lines if line["id"] == job_id]


def test_the_handler_sees_the_jobs_key_and_timeout(server: Server, admin: Client) -> None:
    seen: list[JobContext] = []

    async def handler(job: JobContext) -> None:
        seen.append(job)

    job = admin.enqueue("f_fields", concurrency_key="tenant-7", timeout_seconds=600)

    async def scenario(worker: Worker) -> Any:
        return await settled(server, job.id, "COMPLETED")

    run_worker(server, {"f_fields": handler}, scenario)
    (context,) = seen
    assert (context.id, context.concurrency_key, context.timeout_seconds) == (job.id, "tenant-7", 600)


def test_an_async_handler_past_its_timeout_is_cancelled_on_every_attempt(
    server: Server, admin: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queuelog.worker.jobs")
    events: list[tuple[int, str, float]] = []

    async def handler(job: JobContext) -> str:
        started = time.monotonic()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append((job.attempt, "cancelled", time.monotonic() - started))
            raise
        events.append((job.attempt, "finished", time.monotonic() - started))
        return "too late"

    job = admin.enqueue("f_async", timeout_seconds=1, max_retries=1)

    async def scenario(worker: Worker) -> Any:
        return await settled(server, job.id, "FAILED")

    failed = run_worker(server, {"f_async": handler}, scenario)
    assert (failed.error, failed.attempt, failed.retry_count, failed.result) == ("timed out", 2, 1, None)
    assert [(attempt, what) for attempt, what, _ in events] == [(1, "cancelled"), (2, "cancelled")]
    assert all(0.9 <= elapsed < 3 for _, _, elapsed in events), events
    assert [line["outcome"] for line in job_lines(caplog, job.id)] == ["timed out", "timed out"]


def test_a_types_default_timeout_read_at_start_cancels_the_handler(server: Server, admin: Client) -> None:
    admin.set_type_control("f_default", timeout_seconds=1)
    cancelled_after: list[float] = []

    async def handler(job: JobContext) -> None:
        assert job.timeout_seconds is None  # the job sets none: the type's applies
        started = time.monotonic()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled_after.append(time.monotonic() - started)
            raise

    job = admin.enqueue("f_default", max_retries=0)

    async def scenario(worker: Worker) -> Any:
        return await settled(server, job.id, "FAILED")

    try:
        failed = run_worker(server, {"f_default": handler}, scenario)
    finally:
        admin.set_type_control("f_default")
    assert failed.error == "timed out"
    # by the worker at the deadline (not by its shutdown, 5 s of grace after the job failed)
    assert len(cancelled_after) == 1 and 0.9 <= cancelled_after[0] < 3, cancelled_after


def test_an_async_handler_that_swallows_the_cancellation_has_its_result_discarded(
    server: Server, admin: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queuelog.worker.jobs")
    returned = threading.Event()

    async def handler(job: JobContext) -> dict[str, bool]:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)  # goes on regardless, then returns a result
        returned.set()
        return {"stale": True}

    job = admin.enqueue("f_swallow", timeout_seconds=1, max_retries=0)

    async def scenario(worker: Worker) -> Any:
        failed = await settled(server, job.id, "FAILED")
        await asyncio.to_thread(returned.wait, TIMEOUT)
        await asyncio.sleep(0.5)  # a completion, if one were sent, would be in by now
        return failed

    run_worker(server, {"f_swallow": handler}, scenario)
    after = admin.get(job.id)
    assert after is not None and (after.status, after.error, after.result) == ("FAILED", "timed out", None)
    assert [line["outcome"] for line in job_lines(caplog, job.id)] == ["timed out"]


def test_a_sync_handlers_result_past_the_timeout_is_discarded_and_its_slot_held(
    server: Server, admin: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queuelog.worker.jobs")
    spans: list[tuple[str, float, float]] = []

    def handler(job: JobContext) -> dict[str, str]:
        started = time.monotonic()
        time.sleep(job.payload["seconds"])
        spans.append((job.id, started, time.monotonic()))
        return {"done": job.id}

    slow = admin.enqueue("f_sync", {"seconds": 2.5}, timeout_seconds=1, max_retries=0)

    async def scenario(worker: Worker) -> Any:
        failed = await settled(server, slow.id, "FAILED")
        quick = await asyncio.to_thread(admin.enqueue, "f_sync", {"seconds": 0})
        done = await settled(server, quick.id, "COMPLETED")
        return failed, done

    failed, done = run_worker(server, {"f_sync": handler}, scenario, concurrency=1)
    assert (failed.error, failed.result) == ("timed out", None)
    assert done.result == {"done": done.id}
    after = admin.get(slow.id)
    assert after is not None and (after.status, after.result) == ("FAILED", None)
    (slow_span,) = [s for s in spans if s[0] == slow.id]
    (quick_span,) = [s for s in spans if s[0] == done.id]
    assert quick_span[1] >= slow_span[2]  # concurrency 1: the quick job waited for the thread
    assert [line["outcome"] for line in job_lines(caplog, slow.id)] == ["timed out"]


def test_a_completion_after_the_server_timed_the_job_out_is_not_a_success(
    server: Server, admin: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """The timeout is set after the worker read the types' timeouts: only the server knows it."""
    caplog.set_level(logging.INFO, logger="queuelog.worker.jobs")

    async def handler(job: JobContext) -> dict[str, bool]:
        await asyncio.sleep(3.5)  # the server fails the job within 2 s (1 s + its 1 s check)
        return {"stale": True}

    async def scenario(worker: Worker) -> Any:
        await asyncio.sleep(0.5)  # the worker has read the types' timeouts: none
        await asyncio.to_thread(admin.set_type_control, "f_stale", timeout_seconds=1)
        job = await asyncio.to_thread(admin.enqueue, "f_stale", None, max_retries=0)
        failed = await settled(server, job.id, "FAILED")
        deadline = time.monotonic() + TIMEOUT
        while not job_lines(caplog, job.id) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return failed

    try:
        failed = run_worker(server, {"f_stale": handler}, scenario)
    finally:
        admin.set_type_control("f_stale")
    assert (failed.error, failed.result) == ("timed out", None)
    after = admin.get(failed.id)
    assert after is not None and (after.status, after.result) == ("FAILED", None)
    assert [line["outcome"] for line in job_lines(caplog, failed.id)] == ["lost"]


def test_naive_moments_are_refused_before_anything_is_sent(admin: Client) -> None:
    """A naive `until` or `created_before` names a different moment in each time zone: the
    SDK refuses it, as it refuses a naive `run_at`, and the server sees nothing."""
    admin.enqueue("f_naive")
    naive = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=1)
    with pytest.raises(ValueError, match="until .* naive"):
        admin.pause_type("f_naive", naive)
    with pytest.raises(ValueError, match="until .* no UTC offset"):
        admin.pause_type("f_naive", naive.isoformat())
    assert not control_of(admin, "f_naive").paused
    with pytest.raises(ValueError, match="created_before .* naive"):
        admin.cancel_jobs(type="f_naive", created_before=naive)
    with pytest.raises(ValueError, match="created_before .* naive"):
        admin.retry_jobs(type="f_naive", created_before=naive)
    assert statuses(admin, "f_naive") == {"PENDING": 1}
    # the same moment with its offset is taken, as a string too
    assert admin.cancel_jobs(type="f_naive", created_before=naive.isoformat() + "Z") == 1
    control = admin.pause_type("f_naive", naive.isoformat() + "+00:00")
    assert control.paused_until == naive.replace(tzinfo=UTC)
