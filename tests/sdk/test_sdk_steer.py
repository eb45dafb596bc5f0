"""Steering jobs through the Python SDK (API.md section 12, "Worker SDK"), against real servers
on SQLite and PostgreSQL, with in-process workers.

Proven:
- the worker hears of a cancel request over its websocket, not its heartbeat: with the lease
  at 300 s (a heartbeat every 100 s) and the server's grace at an hour, an async handler is
  cancelled mid-run (it sees CancelledError) and the job ends CANCELLED; a sync handler sees
  `job.cancel_requested` and stops with `raise_if_cancelled()` (CANCELLED too), and one that
  finishes anyway is COMPLETED with its result (a completion before the end wins); the
  worker's log line says "cancelled";
- without a websocket (its URL made unreachable) the worker runs on, hears the request from a
  heartbeat, and logs the outage once;
- `Snooze(seconds)` puts the job back to PENDING with snooze_count 1 and retry_count 0 and it
  runs again; Snooze refuses seconds outside 1..86400 at construction;
- `job.report_progress` from async and sync handlers (thousands of calls, never blocking):
  reports reach `jobUpdated` while the job runs and the last one is stored; bad values are a
  ValueError at the call;
- `wait` (any terminal status; TimeoutError; NotFound), `watch` (sync and async, ending after
  the terminal state; by polling when no websocket opens), `update_job` (a field left out
  stays, `expires_at=None` clears, CONFLICT once RUNNING, ValueError for None), `run_job_now`,
  `cancel_job` on a RUNNING job, `cancel_jobs(include_running=True)`, `run_schedule_now`,
  `add_job_type` / `remove_job_type`, and `enqueue(...).created`;
- one `Client` shared by 32 threads: every enqueue, get and cancel accounted for exactly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from conftest import Server, free_port, serving

from queuelog.client import AsyncClient, Client, EnqueuedJob, Job
from queuelog.errors import BadInput, Conflict, NotFound
from queuelog.sdk import websocket
from queuelog.worker import Handler, JobCancelled, JobContext, Snooze, Worker

T = TypeVar("T")
TIMEOUT = 60.0  # bounds every wait; past it, something hangs
# Well under the heartbeat interval (a third of the 300 s lease) and the server's grace (an hour):
# a job cancelled within this was cancelled through the worker's subscription.
PUSHED = 30.0
JOB_TYPES = (
    "s_async,s_sync,s_late,s_snooze,s_progress,s_progress_sync,s_wait,s_watch,s_update,s_bulk,"
    "s_threads,s_sched,s_fallback"
)
CLAIM = "mutation($types: [String!]) { claimJobs(limit: 10, types: $types) { id attempt } }"


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(
        backend, tmp_path_factory, job_types=JOB_TYPES, lease_seconds=300, cancel_grace_seconds=3600
    ) as running:
        yield running


@pytest.fixture
def admin(server: Server) -> Iterator[Client]:
    with Client(server.url, server.admin_key) as client:
        yield client


def worker_key(server: Server) -> str:
    return server.make_key(f"sdk-steer-{time.monotonic_ns()}", "worker")


def with_worker(
    server: Server,
    handlers: Mapping[str, Handler],
    scenario: Callable[[AsyncClient], Awaitable[T]],
    key: str | None = None,
) -> T:
    """Run an in-process worker while `scenario` plays with an ADMIN AsyncClient; then stop it."""

    async def main() -> T:
        worker = Worker(server.url, key or worker_key(server), handlers, concurrency=4, grace=5)
        running = asyncio.create_task(worker.run())
        try:
            async with AsyncClient(server.url, server.admin_key) as client:
                return await asyncio.wait_for(scenario(client), TIMEOUT)
        finally:
            worker.stop()
            await asyncio.wait_for(running, TIMEOUT)

    return asyncio.run(main())


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting for {what}")
        await asyncio.sleep(0.02)


def job_outcomes(caplog: pytest.LogCaptureFixture, job_id: str) -> list[str]:
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "queuelog.worker.jobs"]
    return [line["outcome"] for line in lines if line["id"] == job_id]


# --- cancelling a running job -----------------------------------------------------------------------


def test_an_async_handler_is_cancelled_mid_run_through_the_subscription(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queuelog.worker.jobs")
    seen: list[str] = []

    async def long_work(job: JobContext) -> str:
        seen.append("started")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    async def scenario(client: AsyncClient) -> Job:
        job = await client.enqueue("s_async")
        await until(lambda: seen == ["started"], "the handler to start")
        asked = await client.cancel_job(job.id)
        assert (asked.status, asked.cancel_requested) == ("RUNNING", True)
        return await client.wait(job.id, timeout=PUSHED)

    done = with_worker(server, {"s_async": long_work}, scenario)
    assert (done.status, done.error, done.result) == ("CANCELLED", "cancelled while running", None)
    assert seen == ["started", "cancelled"]
    assert job_outcomes(caplog, done.id) == ["cancelled"]


def test_a_sync_handler_sees_the_request_and_stops_with_raise_if_cancelled(server: Server) -> None:
    seen: list[Any] = []

    def polling(job: JobContext) -> str:
        seen.append(job.cancel_requested)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                job.raise_if_cancelled()
            except JobCancelled:
                seen.append(job.cancel_requested)
                raise
            time.sleep(0.01)
        return "never"

    async def scenario(client: AsyncClient) -> Job:
        job = await client.enqueue("s_sync")
        await until(lambda: seen == [False], "the handler to start")
        await client.cancel(job.id)  # the old name of cancel_job
        return await client.wait(job.id, timeout=PUSHED)

    done = with_worker(server, {"s_sync": polling}, scenario)
    assert (done.status, done.error) == ("CANCELLED", "cancelled while running")
    assert seen == [False, True]


def test_a_handler_that_finishes_after_the_request_still_completes(server: Server) -> None:
    started = threading.Event()

    def finishes_anyway(job: JobContext) -> dict[str, bool]:
        started.set()
        deadline = time.monotonic() + TIMEOUT
        while not job.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"saw_request": job.cancel_requested}

    async def scenario(client: AsyncClient) -> Job:
        job = await client.enqueue("s_late")
        await until(started.is_set, "the handler to start")
        await client.cancel_job(job.id)
        return await client.wait(job.id, timeout=PUSHED)

    done = with_worker(server, {"s_late": finishes_anyway}, scenario)
    assert (done.status, done.result) == ("COMPLETED", {"saw_request": True})


@pytest.fixture(scope="module")
def short_lease_server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(
        backend, tmp_path_factory, job_types=JOB_TYPES, lease_seconds=3, cancel_grace_seconds=3600
    ) as running:
        yield running


def test_without_a_websocket_the_heartbeat_tells_and_the_worker_runs_on(
    short_lease_server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = short_lease_server
    caplog.set_level(logging.INFO, logger="queuelog.worker")
    nowhere = f"ws://127.0.0.1:{free_port()}/graphql"
    monkeypatch.setattr(websocket, "websocket_url", lambda url: nowhere)
    seen: list[str] = []

    async def long_work(job: JobContext) -> str:
        seen.append(job.id)
        if job.payload.get("quick"):
            return "quick"
        await asyncio.sleep(3600)
        return "never"

    async def scenario(client: AsyncClient) -> tuple[Job, Job]:
        quick = await client.enqueue("s_fallback", {"quick": True})
        assert (await client.wait(quick.id, timeout=TIMEOUT)).status == "COMPLETED"
        job = await client.enqueue("s_fallback")
        await until(lambda: job.id in seen, "the handler to start")
        await client.cancel_job(job.id)
        return quick, await client.wait(job.id, timeout=TIMEOUT)  # polled: no websocket here either

    quick, done = with_worker(server, {"s_fallback": long_work}, scenario)
    assert (done.status, done.error) == ("CANCELLED", "cancelled while running")
    outages = [r for r in caplog.records if r.getMessage().startswith("cancel requests: no websocket")]
    assert len(outages) == 1, [r.getMessage() for r in outages]


# --- snooze -----------------------------------------------------------------------------------------


def test_snooze_puts_the_job_back_without_using_a_retry(server: Server) -> None:
    def snoozy(job: JobContext) -> dict[str, int]:
        if job.attempt == 1:
            raise Snooze(2)
        return {"attempt": job.attempt}

    async def scenario(client: AsyncClient) -> list[Job]:
        job = await client.enqueue("s_snooze")
        return [state async for state in client.watch(job.id)]

    states = with_worker(server, {"s_snooze": snoozy}, scenario)
    snoozed = [s for s in states if s.status == "PENDING" and s.attempt == 1]
    assert snoozed, [(s.status, s.attempt) for s in states]
    assert (snoozed[0].snooze_count, snoozed[0].retry_count, snoozed[0].worker_id) == (1, 0, None)
    assert snoozed[0].run_at > snoozed[0].updated_at
    done = states[-1]
    assert (done.status, done.result, done.attempt) == ("COMPLETED", {"attempt": 2}, 2)
    assert (done.snooze_count, done.retry_count) == (1, 0)


@pytest.mark.parametrize("seconds", [0, -1, 86401, 1.5, True, "10"])
def test_snooze_refuses_seconds_out_of_range(seconds: Any) -> None:
    with pytest.raises(ValueError, match="Snooze"):
        Snooze(seconds)


def test_snooze_takes_the_whole_range() -> None:
    assert (Snooze(1).seconds, Snooze(86400).seconds) == (1, 86400)


# --- progress ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_progress_reaches_job_updated_and_the_last_report_is_stored(server: Server, kind: str) -> None:
    job_type = "s_progress" if kind == "async" else "s_progress_sync"
    release = threading.Event()
    refused: list[str] = []

    def check_refusals(job: JobContext) -> None:
        for bad in ((-0.1, None), (1.5, None), (float("nan"), None), (0.5, "x" * 201)):
            try:
                job.report_progress(*bad)
            except ValueError as exc:
                refused.append(str(exc))

    async def reporting_async(job: JobContext) -> str:
        check_refusals(job)
        for i in range(2000):
            job.report_progress(i / 4000, f"step {i}")
            if i % 100 == 0:
                await asyncio.sleep(0.01)
        while not release.is_set():
            await asyncio.sleep(0.01)
        job.report_progress(1.0, "done")
        return "ok"

    def reporting_sync(job: JobContext) -> str:
        check_refusals(job)
        for i in range(20000):
            job.report_progress(i / 40000, f"step {i}")
        release.wait(TIMEOUT)
        job.report_progress(1.0, "done")
        return "ok"

    async def scenario(client: AsyncClient) -> tuple[list[Job], Job | None]:
        job = await client.enqueue(job_type)
        states: list[Job] = []
        async for state in client.watch(job.id):
            states.append(state)
            if state.status == "RUNNING" and state.progress is not None and state.progress >= 0.49:
                release.set()  # the handler's last reports have been delivered while it runs
        return states, await client.get(job.id)

    handler = reporting_async if kind == "async" else reporting_sync
    states, stored = with_worker(server, {job_type: handler}, scenario)
    running = [s.progress for s in states if s.status == "RUNNING" and s.progress is not None]
    assert running and running == sorted(running), running  # delivered as reported, newest last
    assert stored is not None and (stored.status, stored.result) == ("COMPLETED", "ok")
    assert (stored.progress, stored.progress_message) == (1.0, "done")
    assert len(refused) == 4 and all("progress" in text for text in refused), refused


class CountingClient(AsyncClient):
    """An AsyncClient that notes when each reportProgress goes out, and with what."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(url, key)
        self.progress_sent: list[tuple[float, float, str | None]] = []

    async def execute(
        self, query: str, variables: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        if "reportProgress" in query and variables is not None:
            self.progress_sent.append((time.monotonic(), variables["progress"], variables["message"]))
        return await super().execute(query, variables, timeout=timeout)


def test_progress_goes_out_at_most_every_quarter_second_and_the_last_before_the_outcome(
    server: Server,
) -> None:
    client = CountingClient(server.url, worker_key(server))
    reported = 0

    def busy(job: JobContext) -> str:
        nonlocal reported
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            reported += 1
            job.report_progress(min(reported / 1e7, 0.99))
        job.report_progress(1.0, "last")
        return "ok"

    async def main() -> Job:
        worker = Worker(server.url, handlers={"s_progress_sync": busy}, client=client)
        running = asyncio.create_task(worker.run())
        try:
            async with AsyncClient(server.url, server.admin_key) as admin:
                job = await admin.enqueue("s_progress_sync")
                return await admin.wait(job.id, timeout=TIMEOUT)
        finally:
            worker.stop()
            await asyncio.wait_for(running, TIMEOUT)

    done = asyncio.run(main())
    sent = client.progress_sent
    assert (done.status, done.progress, done.progress_message) == ("COMPLETED", 1.0, "last")
    assert sent[-1][1:] == (1.0, "last") and reported > 10 * len(sent), (reported, len(sent))
    gaps = [later[0] - earlier[0] for earlier, later in zip(sent[:-1], sent[1:-1], strict=False)]
    assert all(gap >= 0.249 for gap in gaps), gaps  # the last one goes out at once, before the outcome


def test_progress_outside_a_worker_checks_the_values_and_sends_nothing() -> None:
    job = JobContext("1", "t", {}, "LOW", 1, 0, 3)
    job.report_progress(0.5, "half")  # no worker: nothing to send, no error
    with pytest.raises(ValueError, match="between 0 and 1"):
        job.report_progress(2)
    with pytest.raises(ValueError, match="200"):
        job.report_progress(0.5, "y" * 201)
    assert job.cancel_requested is False
    job.raise_if_cancelled()


# --- wait and watch ---------------------------------------------------------------------------------


def test_wait_returns_the_terminal_job_whatever_its_status(server: Server, admin: Client) -> None:
    cancelled = admin.enqueue("s_wait")
    admin.cancel_job(cancelled.id)
    assert admin.wait(cancelled.id, 5).status == "CANCELLED"

    pending = admin.enqueue("s_wait", run_at=datetime.now(UTC) + timedelta(days=1))
    with pytest.raises(TimeoutError, match=pending.id):
        admin.wait(pending.id, timeout=0.5)
    with pytest.raises(NotFound):
        admin.wait("987654321", timeout=5)

    async def scenario(client: AsyncClient) -> Job:
        job = await client.enqueue("s_wait", {"n": 2})
        return await client.wait(job.id, timeout=TIMEOUT)

    done = with_worker(server, {"s_wait": lambda job: job.payload["n"] * 21}, scenario)
    assert (done.status, done.result) == ("COMPLETED", 42)


def test_watch_follows_the_job_to_its_end(server: Server, admin: Client) -> None:
    job = admin.enqueue("s_watch", run_at=datetime.now(UTC) + timedelta(days=1))
    states: list[str] = []
    key = worker_key(server)
    for state in admin.watch(job.id):
        states.append(state.status)
        if state.status == "PENDING" and len(states) == 1:
            admin.run_job_now(job.id)
            (claimed,) = server.gql(CLAIM, {"types": ["s_watch"]}, key=key).ok()["claimJobs"]
            server.gql(
                "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a, result: 7) { id } }",
                {"id": claimed["id"], "a": claimed["attempt"]},
                key=key,
            ).ok()
    assert states[0] == "PENDING" and states[-1] == "COMPLETED", states
    assert states.count("COMPLETED") == 1


def test_watch_leaves_early_and_closes(admin: Client) -> None:
    job = admin.enqueue("s_watch", run_at=datetime.now(UTC) + timedelta(days=1))
    for state in admin.watch(job.id):
        assert state.status == "PENDING"
        break
    admin.cancel_job(job.id)
    assert [s.status for s in admin.watch(job.id)] == ["CANCELLED"]


def test_wait_and_watch_poll_when_no_websocket_opens(
    server: Server, admin: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = f"ws://127.0.0.1:{free_port()}/graphql"
    monkeypatch.setattr(websocket, "websocket_url", lambda url: nowhere)
    job = admin.enqueue("s_watch", run_at=datetime.now(UTC) + timedelta(days=1))
    with pytest.raises(TimeoutError):
        admin.wait(job.id, timeout=0.3)
    threading.Timer(0.3, admin.cancel_job, (job.id,)).start()
    states = [s.status for s in admin.watch(job.id)]
    assert states[0] == "PENDING" and states[-1] == "CANCELLED", states
    assert admin.wait(job.id, timeout=5).status == "CANCELLED"


# --- editing, running now, bulk, schedules, types ---------------------------------------------------


def test_update_job_changes_only_what_is_given(server: Server, admin: Client) -> None:
    later = datetime.now(UTC) + timedelta(days=1)
    job = admin.enqueue("s_update", run_at=later, priority="LOW", max_retries=3)
    changed = admin.update_job(job.id, priority="high", max_retries=5)
    assert (changed.priority, changed.max_retries, changed.run_at) == ("HIGH", 5, job.run_at)
    expiring = admin.update_job(job.id, expires_at=later + timedelta(hours=1))
    assert expiring.expires_at == later + timedelta(hours=1) and expiring.priority == "HIGH"
    cleared = admin.update_job(job.id, expires_at=None)
    assert (cleared.expires_at, cleared.priority, cleared.max_retries) == (None, "HIGH", 5)
    with pytest.raises(ValueError, match="priority"):
        admin.update_job(job.id, priority=None)  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        admin.update_job(job.id, expires_at=datetime.now(UTC) - timedelta(hours=1))

    now = admin.run_job_now(job.id)
    assert now.run_at <= datetime.now(UTC) + timedelta(seconds=5) and now.status == "PENDING"
    (claimed,) = server.gql(CLAIM, {"types": ["s_update"]}, key=worker_key(server)).ok()["claimJobs"]
    assert claimed["id"] == job.id
    with pytest.raises(Conflict):
        admin.update_job(job.id, priority="LOW")
    with pytest.raises(Conflict):
        admin.run_job_now(job.id)


def test_enqueue_says_whether_it_created_the_job(admin: Client) -> None:
    first = admin.enqueue("s_update", {"a": 1}, idempotency_key=f"created-{time.monotonic_ns()}")
    again = admin.enqueue("s_update", {"a": 1}, idempotency_key=first.idempotency_key)
    assert isinstance(first, EnqueuedJob) and isinstance(first, Job)
    assert (first.created, again.created, again.id) == (True, False, first.id)
    assert admin.enqueue("s_update").created is True


def test_cancel_jobs_includes_running_ones_when_asked(server: Server, admin: Client) -> None:
    running, pending = admin.enqueue("s_bulk"), admin.enqueue("s_bulk")
    key = worker_key(server)
    server.gql(CLAIM, {"types": ["s_bulk"]}, key=key).ok()  # both: RUNNING
    admin.enqueue("s_bulk")
    assert admin.cancel_jobs(type="s_bulk") == 1  # the PENDING one only
    assert admin.cancel_jobs(type="s_bulk", include_running=True) == 2
    for job_id in (running.id, pending.id):
        job = admin.get(job_id)
        assert job is not None and (job.status, job.cancel_requested) == ("RUNNING", True)
    assert admin.cancel_jobs(type="s_bulk", include_running=True) == 0  # already asked


def test_run_schedule_now_and_job_types_at_runtime(admin: Client) -> None:
    name = f"steer-{time.monotonic_ns()}"
    admin.put_schedule(name, "s_sched", "0 0 1 1 *")
    admin.pause_schedule(name)
    job = admin.run_schedule_now(name)
    assert (job.type, job.schedule_name, job.status) == ("s_sched", name, "PENDING")
    assert job.idempotency_key is not None and job.idempotency_key.startswith(f"{name}@manual-")
    assert admin.run_schedule_now(name).id != job.id
    admin.delete_schedule(name)

    added = f"s_added_{time.monotonic_ns()}"
    with pytest.raises(BadInput):
        admin.enqueue(added)
    assert admin.add_job_type(added).type == added
    assert admin.enqueue(added).type == added
    assert admin.remove_job_type(added) is True
    assert admin.remove_job_type(added) is False
    with pytest.raises(BadInput):
        admin.enqueue(added)


# --- one Client, many threads -----------------------------------------------------------------------


def test_one_client_is_safe_to_share_across_threads(server: Server) -> None:
    threads, rounds = 32, 5
    errors: list[BaseException] = []
    made: dict[tuple[int, int], str] = {}
    lock = threading.Lock()
    with Client(server.url, server.admin_key) as shared:
        start = threading.Barrier(threads)

        def work(t: int) -> None:
            try:
                start.wait()
                for r in range(rounds):
                    job = shared.enqueue("s_threads", {"t": t, "r": r})
                    read = shared.get(job.id)
                    assert read is not None and read.payload == {"t": t, "r": r}
                    assert shared.cancel_job(job.id).status == "CANCELLED"
                    with lock:
                        made[(t, r)] = job.id
            except BaseException as exc:
                errors.append(exc)

        running = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join(TIMEOUT)
        assert errors == []
        assert len(made) == threads * rounds and len(set(made.values())) == threads * rounds
        listed = list(shared.list(type="s_threads"))
    assert sorted((j.payload["t"], j.payload["r"]) for j in listed) == sorted(made)
    assert {j.status for j in listed} == {"CANCELLED"}
    assert {j.id for j in listed} == set(made.values())
