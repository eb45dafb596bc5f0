"""Waiting for a job with the Python SDK, and any subscription over the server's websocket,
against real servers (SQLite and PostgreSQL), and across two servers sharing a PostgreSQL
database.

Proven:
- `job.wait(timeout)` on what `enqueue` returns waits with the client that enqueued it:
  blocking on a `Client` (CANCELLED, COMPLETED with the result, the builtin TimeoutError), an
  awaitable on an `AsyncClient`; the job still equals `get`'s Job; a copy keeps its waiter, a
  pickled one loses it and a hand-made one has none (RuntimeError naming `client.wait`);
- `subscribe(query, variables)` yields each result's data (`jobUpdated` from PENDING to
  COMPLETED, sync and async), with `refused` naming the `error` field withheld from a
  PRODUCER key; the server's refusals raise the SDK's errors (NotFound for an unknown job,
  BadInput for an unknown event kind, an unknown field); leaving early (`break`, `aclose()`) closes its
  websocket;
- Ctrl-C inside a blocking `watch` or `wait` raises KeyboardInterrupt in the caller, prints
  nothing else, and leaves the client usable;
- on PostgreSQL, a job enqueued and completed through one server is followed through the
  other: `subscribe` hears its COMPLETED, and `wait` (started before) returns it, result and all.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from concurrency.test_scale_out import Cluster, cluster_starter, fresh_postgres_database
from conftest import Server, serving
from websockets.asyncio.client import ClientConnection
from websockets.protocol import State

from queuelog.client import AsyncClient, Client, Data, EnqueuedJob, Job
from queuelog.errors import BadInput, NotFound, QueuelogError
from queuelog.sdk import websocket
from queuelog.sdk.types import JOB_FIELDS

TIMEOUT = 60.0  # bounds every wait; past it, something hangs
JOB_TYPES = "w_wait,w_sub,w_far"
CLAIM = "mutation($types: [String!]) { claimJobs(limit: 10, types: $types) { id attempt } }"
COMPLETE = "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a, result: {n: 42}) { id } }"
UPDATED = "subscription($id: ID!) { jobUpdated(id: $id) { id status result error } }"


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=JOB_TYPES) as running:
        yield running


@pytest.fixture
def admin(server: Server) -> Iterator[Client]:
    with Client(server.url, server.admin_key) as client:
        yield client


def complete(server: Server, job_type: str, job_id: str, key: str | None = None) -> None:
    """Claim the one pending job of `job_type` (it must be `job_id`) and complete it."""
    key = key or server.make_key(f"waiting-{time.monotonic_ns()}", "worker")
    (claimed,) = server.gql(CLAIM, {"types": [job_type]}, key=key).ok()["claimJobs"]
    assert claimed["id"] == job_id
    server.gql(COMPLETE, {"id": job_id, "a": claimed["attempt"]}, key=key).ok()


@pytest.fixture
def sockets(monkeypatch: pytest.MonkeyPatch) -> list[ClientConnection]:
    """Every websocket the SDK opens during the test, to look at their state after."""
    opened: list[ClientConnection] = []
    real = websocket.connect

    async def recording(*args: Any, **kwargs: Any) -> ClientConnection:
        ws = await real(*args, **kwargs)
        opened.append(ws)
        return ws

    monkeypatch.setattr(websocket, "connect", recording)
    return opened


# --- job.wait ---------------------------------------------------------------------------------------


def test_a_clients_job_waits_blocking(server: Server, admin: Client) -> None:
    job = admin.enqueue("w_wait")
    assert isinstance(job, EnqueuedJob) and job == admin.get(job.id)
    admin.cancel_job(job.id)
    done = job.wait(5)
    assert isinstance(done, Job) and (done.id, done.status) == (job.id, "CANCELLED")

    later = admin.enqueue("w_wait", run_at=datetime.now(UTC) + timedelta(days=1))
    with pytest.raises(TimeoutError, match=later.id):
        later.wait(timeout=0.3)
    admin.run_job_now(later.id)
    complete(server, "w_wait", later.id)
    finished = later.wait(timeout=TIMEOUT)
    assert (finished.status, finished.result) == ("COMPLETED", {"n": 42})

    assert copy.deepcopy(later).wait(5).status == "COMPLETED"  # shares the client
    unpickled = pickle.loads(pickle.dumps(later))
    assert unpickled == later and unpickled.created
    with pytest.raises(RuntimeError, match="client.wait"):
        unpickled.wait(5)
    with pytest.raises(RuntimeError, match="client.wait"):
        EnqueuedJob.from_graphql(admin.execute(f'{{ job(id: "{job.id}") {{ {JOB_FIELDS} }} }}')["job"]).wait()


def test_an_async_clients_job_waits_awaitably(server: Server) -> None:
    async def main() -> tuple[Job, Job]:
        async with AsyncClient(server.url, server.admin_key) as client:
            job = await client.enqueue("w_wait", {"n": 1})
            waiting = job.wait(TIMEOUT)
            assert asyncio.iscoroutine(waiting)
            waited = asyncio.ensure_future(waiting)
            await asyncio.to_thread(complete, server, "w_wait", job.id)
            return await waited, job

    done, job = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert (done.id, done.status, done.result) == (job.id, "COMPLETED", {"n": 42})


# --- subscribe --------------------------------------------------------------------------------------


def test_subscribe_yields_each_result_and_withholds_error_by_execute_rule(
    server: Server, admin: Client, sockets: list[ClientConnection]
) -> None:
    producer_key = server.make_key(f"sub-producer-{time.monotonic_ns()}", "producer")
    with Client(server.url, producer_key) as producer:
        job = producer.enqueue("w_sub")
        seen: list[Data] = []
        for data in producer.subscribe(UPDATED, {"id": job.id}):
            seen.append(data)
            if data["jobUpdated"]["status"] == "PENDING":
                complete(server, "w_sub", job.id)
        assert [d["jobUpdated"]["status"] for d in seen][-1] == "COMPLETED"
        assert seen[0]["jobUpdated"] == {"id": job.id, "status": "PENDING", "result": None, "error": None}
        assert seen[-1]["jobUpdated"]["result"] == {"n": 42}
        assert all(isinstance(d, Data) and d.refused == ("jobUpdated.error",) for d in seen)
        with pytest.raises(BadInput, match="nope"):
            next(producer.subscribe('subscription { jobEvents(kinds: ["nope"]) { kind } }'))
    assert sockets and all(ws.state is State.CLOSED for ws in sockets)

    with pytest.raises(NotFound):
        next(admin.subscribe(UPDATED, {"id": "987654321"}))
    with pytest.raises(QueuelogError):
        next(admin.subscribe("subscription { jobUpdated(id: 1) { noSuchField } }"))
    admin_seen = next(admin.subscribe(UPDATED, {"id": job.id}))
    assert admin_seen.refused == () and admin_seen["jobUpdated"]["status"] == "COMPLETED"


def test_leaving_a_subscription_early_closes_its_websocket(
    admin: Client, server: Server, sockets: list[ClientConnection]
) -> None:
    job = admin.enqueue("w_sub", run_at=datetime.now(UTC) + timedelta(days=1))
    for data in admin.subscribe(UPDATED, {"id": job.id}):
        assert data["jobUpdated"]["status"] == "PENDING"
        break
    (first,) = sockets
    assert first.state is State.CLOSED

    async def main() -> list[str]:
        statuses: list[str] = []
        async with AsyncClient(server.url, server.admin_key) as client:
            updates = client.subscribe(UPDATED, {"id": job.id})
            async for data in updates:
                statuses.append(data["jobUpdated"]["status"])
                break
            assert sockets[1].state is State.OPEN  # a break alone leaves an async generator open
            await updates.aclose()
            assert sockets[1].state is State.CLOSED
            async with contextlib.aclosing(client.subscribe(UPDATED, {"id": job.id})) as again:
                async for data in again:
                    statuses.append(data["jobUpdated"]["status"])
                    break
            assert sockets[2].state is State.CLOSED
        return statuses

    assert asyncio.run(asyncio.wait_for(main(), TIMEOUT)) == ["PENDING", "PENDING"]
    admin.cancel_job(job.id)


# A user's script that follows a job and is interrupted (Ctrl-C), in watch, then in wait, and
# carries on with the same client each time.
INTERRUPTED_SCRIPT = """
import sys
from queuelog.client import Client

url, key, job_id = sys.argv[1:]
with Client(url, key) as client:
    try:
        for job in client.watch(job_id):
            print("watching", job.status, flush=True)
    except KeyboardInterrupt:
        print("interrupted", client.get(job_id).status, flush=True)
    try:
        print("waiting", flush=True)
        client.wait(job_id, 600)
    except KeyboardInterrupt:
        print("interrupted", client.get(job_id).status, flush=True)
print("done", flush=True)
"""


def test_ctrl_c_in_a_blocking_watch_or_wait_leaves_the_client_usable(server: Server, admin: Client) -> None:
    job = admin.enqueue("w_sub", run_at=datetime.now(UTC) + timedelta(days=1))
    script = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_SCRIPT, server.url, server.admin_key, job.id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert script.stdout is not None
        seen = []
        for expected in ("watching PENDING", "interrupted PENDING", "waiting", "interrupted PENDING", "done"):
            if expected.startswith("interrupted"):
                time.sleep(0.3)  # inside the blocking call
                script.send_signal(signal.SIGINT)
            seen.append(script.stdout.readline().strip())
        assert seen == ["watching PENDING", "interrupted PENDING", "waiting", "interrupted PENDING", "done"]
        assert script.wait(TIMEOUT) == 0
        assert script.stderr is not None
        stderr = script.stderr.read()
        assert stderr == "", stderr  # no traceback, no "already running", no "never retrieved"
    finally:
        script.kill()
        admin.cancel_job(job.id)


# --- across two servers on PostgreSQL ---------------------------------------------------------------


@pytest.fixture
def pg_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from fresh_postgres_database(tmp_path_factory)


@pytest.fixture
def start_cluster(
    pg_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Cluster]]:
    yield from cluster_starter(pg_database, tmp_path_factory)


def test_a_job_done_on_one_server_is_waited_for_on_the_other(start_cluster: Callable[..., Cluster]) -> None:
    cluster = start_cluster(2, job_types=JOB_TYPES)
    near, far = cluster.servers
    worker_key = near.make_key("far-worker", "worker")

    async def main() -> tuple[list[str], Job, Job]:
        async with (
            AsyncClient(near.url, cluster.admin_key) as here,
            AsyncClient(far.url, cluster.admin_key) as there,
        ):
            job = await here.enqueue("w_far")
            waited = asyncio.ensure_future(there.wait(job.id, TIMEOUT))
            statuses: list[str] = []
            updates = there.subscribe(UPDATED, {"id": job.id})
            async with contextlib.aclosing(updates):
                async for data in updates:
                    statuses.append(data["jobUpdated"]["status"])
                    if statuses == ["PENDING"]:  # live on the far server: complete on the near one
                        await asyncio.to_thread(complete, near, "w_far", job.id, worker_key)
                    if statuses[-1] == "COMPLETED":
                        break
            return statuses, await waited, await job.wait(TIMEOUT)

    statuses, there_done, here_done = asyncio.run(asyncio.wait_for(main(), TIMEOUT * 2))
    assert statuses[0] == "PENDING" and statuses[-1] == "COMPLETED", statuses
    assert (there_done.status, there_done.result) == ("COMPLETED", {"n": 42})
    assert there_done == here_done
