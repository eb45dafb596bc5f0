"""Dependencies and schedules through the Python SDK and the worker (API.md sections 10 and 11),
against real servers on SQLite and PostgreSQL.

Proven:
- `enqueue(..., depends_on=...)` takes Job objects, ids, Enqueued objects, one alone or a
  sequence: the job is PENDING with `waiting_for` counting the dependencies not COMPLETED
  (`dependsOn` lists them), on Client and AsyncClient; anything else is a TypeError before
  sending, an id the key cannot see NotFound, a CANCELLED dependency Conflict;
- `enqueue_many` items name earlier items with `depends_on_items` (a 3-step chain, a fan-in,
  mixed with `depends_on`), all or nothing: a forward index is BadInput and enqueues nothing;
- a worker runs a chain and a fan-in in order, each step reading the steps it waits for,
  with their results, through `job.dependencies()` (awaited in async handlers, called
  directly in sync ones; [] for a first step), and the last step's result is derived from
  every earlier one;
- `put_schedule` / `schedules` / `pause_schedule` / `resume_schedule` / `delete_schedule`
  round trip as `Schedule` dataclasses (enums upper-cased, timestamps parsed, `next_run_at`
  None while paused, a put replaces), on Client and AsyncClient; a schedule ticking every
  second enqueues jobs with `schedule_name` set and shows its last run and job; a bad cron
  expression or time zone is BadInput naming the field, a missing schedule NotFound, a
  PRODUCER key Forbidden (a VIEWER may list).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import pytest
from conftest import Server, serving

from queuelog.client import AsyncClient, Client, EnqueueItem, Job, Schedule
from queuelog.errors import BadInput, Conflict, Forbidden, NotFound
from queuelog.worker import JobContext, Worker

T = TypeVar("T")
TIMEOUT = 30.0  # bounds every wait; past it, something hangs
JOB_TYPES = "s_deps,s_many,s_first,s_second,s_third,s_part,s_join,s_sched,s_tick"
DEPENDS_ON = "query($id: ID!) { job(id: $id) { dependsOn } }"
CLAIM = "mutation($types: [String!]) { claimJobs(limit: 10, types: $types) { id attempt } }"
COMPLETE = "mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt) { id } }"


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=JOB_TYPES) as running:
        yield running


@pytest.fixture
def admin(server: Server) -> Iterator[Client]:
    with Client(server.url, server.admin_key) as client:
        yield client


@pytest.fixture
def producer(server: Server) -> Iterator[Client]:
    key = server.make_key(f"sdk-deps-producer-{time.monotonic_ns()}", "PRODUCER")
    with Client(server.url, key) as client:
        yield client


def worker_key(server: Server) -> str:
    return server.make_key(f"sdk-deps-worker-{time.monotonic_ns()}", "worker")


def depends_on(server: Server, job_id: str) -> list[str]:
    return server.gql(DEPENDS_ON, {"id": job_id}, key=server.admin_key).ok()["job"]["dependsOn"]


def complete_all(server: Server, job_type: str) -> list[str]:
    """Claim and complete what is claimable of `job_type`, by hand; the ids completed."""
    key = worker_key(server)
    claimed = server.gql(CLAIM, {"types": [job_type]}, key=key).ok()["claimJobs"]
    for job in claimed:
        server.gql(COMPLETE, {"id": job["id"], "attempt": job["attempt"]}, key=key).ok()
    return [job["id"] for job in claimed]


def waiting(client: Client, *jobs: Job) -> list[int]:
    return [client.get(job.id).waiting_for for job in jobs]  # type: ignore[union-attr]


# --- dependencies ----------------------------------------------------------------------------


def test_enqueue_depends_on_jobs_and_ids(server: Server, producer: Client) -> None:
    a = producer.enqueue("s_deps")
    b = producer.enqueue("s_deps")
    c = producer.enqueue("s_deps", depends_on=[a, b.id])  # a Job and an id
    assert (c.status, c.waiting_for) == ("PENDING", 2)
    assert sorted(depends_on(server, c.id), key=int) == sorted([a.id, b.id], key=int)
    d = producer.enqueue("s_deps", depends_on=a.id)  # one id alone
    e = producer.enqueue("s_deps", depends_on=c)  # one Job alone
    assert (d.waiting_for, e.waiting_for) == (1, 1)
    assert depends_on(server, d.id) == [a.id] and depends_on(server, e.id) == [c.id]
    plain = producer.enqueue("s_deps")
    assert plain.waiting_for == 0 and depends_on(server, plain.id) == []

    assert sorted(complete_all(server, "s_deps"), key=int) == sorted([a.id, b.id, plain.id], key=int)
    assert waiting(producer, c, d, e) == [0, 0, 1]  # c and d released; e still waits for c
    done = producer.enqueue("s_deps", depends_on=[a])  # a COMPLETED dependency counts as done
    assert done.waiting_for == 0

    async def through_async() -> Job:
        async with AsyncClient(server.url, server.admin_key) as client:
            return await client.enqueue("s_deps", depends_on=(c, e.id))

    assert asyncio.run(through_async()).waiting_for == 2


def test_enqueue_depends_on_refusals(server: Server, admin: Client, producer: Client) -> None:
    with pytest.raises(TypeError, match="depends_on"):
        producer.enqueue("s_deps", depends_on=[7])  # type: ignore[list-item]
    with pytest.raises(NotFound):
        producer.enqueue("s_deps", depends_on=["987654321"])
    theirs = admin.enqueue("s_deps")
    with pytest.raises(NotFound):  # another key's job is not visible to a PRODUCER
        producer.enqueue("s_deps", depends_on=[theirs])
    cancelled = producer.cancel(producer.enqueue("s_deps").id)
    with pytest.raises(Conflict):
        producer.enqueue("s_deps", depends_on=[cancelled])


def test_enqueue_many_items_name_earlier_items(server: Server, producer: Client) -> None:
    chain = producer.enqueue_many(
        [
            {"type": "s_many", "payload": {"step": 1}},
            {"type": "s_many", "payload": {"step": 2}, "depends_on_items": [0]},
            {"type": "s_many", "payload": {"step": 3}, "depends_on_items": 1},  # one index alone
        ]
    )
    first, second, third = (e.job for e in chain)
    assert all(e.created for e in chain)
    assert [j.payload["step"] for j in (first, second, third)] == [1, 2, 3]
    assert [j.waiting_for for j in (first, second, third)] == [0, 1, 1]
    assert depends_on(server, second.id) == [first.id] and depends_on(server, third.id) == [second.id]

    items: list[EnqueueItem] = [
        {"type": "s_many"},
        {"type": "s_many"},
        {"type": "s_many", "depends_on_items": [0, 1]},
        # depends_on and depends_on_items together: an earlier job and an earlier item
        {"type": "s_many", "depends_on": [third], "depends_on_items": [2]},
    ]
    left, right, join, last = (e.job for e in producer.enqueue_many(items))
    assert [j.waiting_for for j in (left, right, join, last)] == [0, 0, 2, 2]
    assert sorted(depends_on(server, join.id), key=int) == sorted([left.id, right.id], key=int)
    assert sorted(depends_on(server, last.id), key=int) == sorted([third.id, join.id], key=int)
    after = producer.enqueue("s_many", depends_on=producer.enqueue_many([{"type": "s_many"}] * 2))
    assert after.waiting_for == 2  # Enqueued objects name their jobs

    before = sum(1 for _ in producer.list(type="s_many"))
    with pytest.raises(BadInput, match="dependsOnItems"):
        producer.enqueue_many([{"type": "s_many", "depends_on_items": [1]}, {"type": "s_many"}])
    with pytest.raises(TypeError):
        producer.enqueue_many([{"type": "s_many", "depends_on_itemz": [0]}])
    assert sum(1 for _ in producer.list(type="s_many")) == before  # all or nothing

    complete_all(server, "s_many")  # first, left, right and the two unnamed
    assert waiting(producer, second, third, join, last) == [0, 1, 0, 2]


# --- the worker reads its dependencies -------------------------------------------------------


def run_worker(
    server: Server,
    handlers: dict[str, Callable[[JobContext], Any]],
    scenario: Callable[[], Awaitable[T]],
) -> T:
    """Run an in-process worker while `scenario` plays; then stop it and wait for it."""

    async def main() -> T:
        worker = Worker(server.url, worker_key(server), handlers, concurrency=4, grace=5)
        running = asyncio.create_task(worker.run())
        try:
            return await scenario()
        finally:
            worker.stop()
            await asyncio.wait_for(running, TIMEOUT)

    return asyncio.run(main())


async def settled(server: Server, job_id: str) -> Job:
    """The job once it has finished (COMPLETED, FAILED or CANCELLED)."""
    async with AsyncClient(server.url, server.admin_key) as client:
        deadline = time.monotonic() + TIMEOUT
        while True:
            job = await client.get(job_id)
            if job is not None and job.status in ("COMPLETED", "FAILED", "CANCELLED"):
                return job
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} still {job and job.status} after {TIMEOUT}s")
            await asyncio.sleep(0.05)


def test_each_step_reads_the_results_of_the_steps_it_waits_for(server: Server, producer: Client) -> None:
    seen: dict[str, list[Job]] = {}

    async def first(job: JobContext) -> dict[str, Any]:
        seen[job.id] = await job.dependencies()
        return {"n": job.payload["n"], "deps": len(seen[job.id])}

    async def second(job: JobContext) -> dict[str, Any]:  # async: awaits
        (previous,) = seen[job.id] = await job.dependencies()
        return {"n": previous.result["n"] * 10}

    def third(job: JobContext) -> dict[str, Any]:  # sync, on a thread: called directly
        (previous,) = seen[job.id] = job.dependencies()
        return {"n": previous.result["n"] + 1, "after": previous.id}

    def part(job: JobContext) -> int:
        seen[job.id] = job.dependencies()
        return int(job.payload["n"]) ** 2

    async def join(job: JobContext) -> dict[str, Any]:
        parts = seen[job.id] = await job.dependencies()
        return {"sum": sum(p.result for p in parts), "statuses": sorted({p.status for p in parts})}

    chain = producer.enqueue_many(
        [
            {"type": "s_first", "payload": {"n": 2}},
            {"type": "s_second", "depends_on_items": [0]},
            {"type": "s_third", "depends_on_items": [1]},
        ]
    )
    fan_in = producer.enqueue_many(
        [
            {"type": "s_part", "payload": {"n": 3}},
            {"type": "s_part", "payload": {"n": 4}},
            {"type": "s_join", "depends_on_items": [0, 1]},
        ]
    )
    ids = [e.job.id for e in chain + fan_in]
    assert [e.job.waiting_for for e in chain + fan_in] == [0, 1, 1, 0, 0, 2]

    async def scenario() -> list[Job]:
        return [await settled(server, ids[2]), await settled(server, ids[5])]

    handlers = {"s_first": first, "s_second": second, "s_third": third, "s_part": part, "s_join": join}
    last, joined = run_worker(server, handlers, scenario)  # type: ignore[arg-type]
    assert (last.status, last.result) == ("COMPLETED", {"n": 21, "after": ids[1]})
    assert (joined.status, joined.result) == ("COMPLETED", {"sum": 25, "statuses": ["COMPLETED"]})
    assert seen[ids[0]] == [] and seen[ids[3]] == [] and seen[ids[4]] == []  # no dependencies
    assert [j.id for j in seen[ids[1]]] == [ids[0]] and seen[ids[1]][0].result == {"n": 2, "deps": 0}
    assert [j.id for j in seen[ids[2]]] == [ids[1]] and seen[ids[2]][0].result == {"n": 20}
    assert sorted(j.id for j in seen[ids[5]]) == sorted(ids[3:5]) and all(
        j.status == "COMPLETED" and j.error is None for j in seen[ids[5]]
    )


def test_dependencies_needs_a_job_given_by_a_worker() -> None:
    context = JobContext("1", "s_first", {}, "LOW", 1, 0, 3)
    with pytest.raises(RuntimeError, match="worker"):
        context.dependencies()


# --- schedules -------------------------------------------------------------------------------


def test_schedule_round_trip(admin: Client) -> None:
    made = admin.put_schedule(
        "sdk-nightly",
        "s_sched",
        "0 3 * * *",
        timezone="Europe/Paris",
        payload={"report": "daily"},
        priority="high",
        max_retries=5,
        misfire="skip",
        overlap="SKIP",
    )
    assert isinstance(made, Schedule)
    assert (made.name, made.type, made.cron, made.timezone, made.payload) == (
        "sdk-nightly",
        "s_sched",
        "0 3 * * *",
        "Europe/Paris",
        {"report": "daily"},
    )
    assert (made.priority, made.max_retries, made.misfire, made.overlap, made.paused) == (
        "HIGH",
        5,
        "SKIP",
        "SKIP",
        False,
    )
    assert (made.last_run_at, made.last_job_id) == (None, None)
    assert isinstance(made.next_run_at, datetime) and made.next_run_at.tzinfo is not None
    local = made.next_run_at.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute, local.second) == (3, 0, 0)
    assert made in admin.schedules()

    paused = admin.pause_schedule("sdk-nightly")
    assert paused.paused and paused.next_run_at is None
    assert [s for s in admin.schedules() if s.name == "sdk-nightly"] == [paused]
    resumed = admin.resume_schedule("sdk-nightly")
    assert not resumed.paused and resumed.next_run_at == made.next_run_at

    replaced = admin.put_schedule("sdk-nightly", "s_sched", "30 4 * * MON")  # the defaults again
    assert (replaced.cron, replaced.timezone, replaced.payload, replaced.priority) == (
        "30 4 * * MON",
        "UTC",
        {},
        "LOW",
    )
    assert (replaced.max_retries, replaced.misfire, replaced.overlap) == (3, "RUN_ONCE", "ALLOW")
    assert replaced.next_run_at is not None and replaced.next_run_at.weekday() == 0
    assert [s.name for s in admin.schedules()].count("sdk-nightly") == 1

    assert admin.delete_schedule("sdk-nightly") is True
    assert admin.delete_schedule("sdk-nightly") is False
    assert "sdk-nightly" not in [s.name for s in admin.schedules()]
    with pytest.raises(NotFound):
        admin.pause_schedule("sdk-nightly")
    with pytest.raises(NotFound):
        admin.resume_schedule("sdk-nightly")


def test_schedules_through_the_async_client(server: Server) -> None:
    async def scenario() -> tuple[Schedule, list[Schedule], Schedule, bool]:
        async with AsyncClient(server.url, server.admin_key) as client:
            made = await client.put_schedule("sdk-async", "s_sched", "@hourly", payload={"a": 1})
            listed = await client.schedules()
            paused = await client.pause_schedule("sdk-async")
            return made, listed, paused, await client.delete_schedule("sdk-async")

    made, listed, paused, deleted = asyncio.run(scenario())
    assert (made.cron, made.payload, made.paused) == ("@hourly", {"a": 1}, False)
    assert made.next_run_at is not None and made.next_run_at.minute == 0
    assert made in listed and paused.paused and deleted


def test_a_schedule_enqueues_jobs_that_name_it(admin: Client) -> None:
    admin.put_schedule("sdk-tick", "s_tick", "* * * * * *", payload={"from": "tick"})  # every second
    try:
        deadline = time.monotonic() + TIMEOUT
        while not any(True for _ in admin.list(type="s_tick")):
            assert time.monotonic() < deadline, "no job from a schedule ticking every second"
            time.sleep(0.1)
        stopped = admin.pause_schedule("sdk-tick")
    finally:
        admin.delete_schedule("sdk-tick")
    jobs = list(admin.list(type="s_tick"))
    assert {(j.schedule_name, j.type) for j in jobs} == {("sdk-tick", "s_tick")}
    assert all(
        j.payload == {"from": "tick"} and (j.idempotency_key or "").startswith("sdk-tick@") for j in jobs
    )
    assert stopped.last_run_at is not None and stopped.last_job_id in {j.id for j in jobs}


def test_schedule_refusals_are_the_sdks_errors(server: Server, admin: Client, producer: Client) -> None:
    with pytest.raises(BadInput, match="cron"):
        admin.put_schedule("sdk-bad", "s_sched", "61 * * * *")
    with pytest.raises(BadInput, match="cron"):
        admin.put_schedule("sdk-bad", "s_sched", "not a cron")
    with pytest.raises(BadInput, match="timezone"):
        admin.put_schedule("sdk-bad", "s_sched", "0 3 * * *", timezone="Mars/Olympus")
    with pytest.raises(BadInput, match="name"):
        admin.put_schedule("no spaces allowed", "s_sched", "0 3 * * *")
    with pytest.raises(BadInput):
        admin.put_schedule("sdk-bad", "no_such_type", "0 3 * * *")
    assert "sdk-bad" not in [s.name for s in admin.schedules()]
    with pytest.raises(Forbidden):
        producer.put_schedule("sdk-bad", "s_sched", "0 3 * * *")
    with pytest.raises(Forbidden):
        producer.schedules()
    admin.put_schedule("sdk-seen", "s_sched", "0 3 * * *")
    try:
        viewer_key = server.make_key(f"sdk-deps-viewer-{time.monotonic_ns()}", "VIEWER")
        with Client(server.url, viewer_key) as viewer:
            assert "sdk-seen" in [s.name for s in viewer.schedules()]
            with pytest.raises(Forbidden):
                viewer.delete_schedule("sdk-seen")
    finally:
        assert admin.delete_schedule("sdk-seen")
