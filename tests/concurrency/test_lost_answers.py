"""Answers the worker never gets: a real server applies a `claimJobs` or `completeJobs`, and
the answer is lost on the way back. A proxy between an in-process `Worker` and a real server
forwards everything, except that it reads one chosen answer whole from the server (so the
server has committed it) and then closes or resets the worker's connection instead of
passing it on, or holds it until the worker gives up on it.

The rule (queuelog.sdk.plain_http.PlainHTTP, queuelog.sdk.worker.producer): a claim is never
sent again; the worker takes over what a claim with a lost answer claimed before it claims
again (or, when stopping, runs it within the grace period). A completion may be sent again:
its repeat is rejected and the worker finds the jobs COMPLETED at its attempt.

Proven, on SQLite and PostgreSQL, with leases far longer than each test (a lease expiry
cannot be what saves a job): every job of a lost first claim, and of a lost later claim,
runs exactly once, on its first attempt, and ends COMPLETED, with one "taking over" line
naming exactly as many jobs as the lost answer held; a job held under the worker's name
since before its first answered claim is not taken over; the jobs of a claim whose answer
is still on its way when the worker stops are run and completed before it returns, the
others left PENDING; a completion whose answer was lost is logged "completed", not "lost".
The same for a `completeAndClaimJobs` (completions and a claim in one call, which a worker
sends for chains of dependent jobs): its completions are reported again, its claimed jobs
taken over, each job still runs once and ends COMPLETED, logged "completed".
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator

import pytest
from conftest import Server, serving

from queuelog.client import AsyncClient
from queuelog.worker import JobContext, Worker

JOB_TYPES = [f"lost_{n}" for n in range(24)]
CONCURRENCY = 8
TIMEOUT = 30.0
ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
JOBS = "query($type: String!) { jobs(type: $type, first: 100) { nodes { id status attempt workerId } } }"
CLAIM = "mutation($types: [String!]) { claimJobs(limit: 1, types: $types) { id attempt } }"
_types = iter(JOB_TYPES)
_names = itertools.count(1)


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=",".join(JOB_TYPES)) as running:  # 300 s leases
        yield running


class Proxy:
    """Forwards HTTP/1.1 between the worker and `port`, but for the `drop_at`-th request
    whose bytes contain `marker`: its answer is read whole from the server, kept in
    `dropped`, and then the worker's connection is closed ("close"), reset ("reset"), or
    left waiting with nothing ("hold")."""

    def __init__(self, port: int, marker: bytes, drop_at: int, how: str) -> None:
        self.port, self.marker, self.drop_at, self.how = port, marker, drop_at, how
        self.marked = 0
        self.dropped: list[bytes] = []
        self.answer_dropped = asyncio.Event()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self._server.close()
        for writer in self._open:
            writer.transport.abort()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _connection(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._handlers.add(me)
        self._open.add(client_w)
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.port)
        doomed = asyncio.Event()

        async def upstream() -> None:
            while data := await client_r.read(65536):
                if self.marker in data:
                    self.marked += 1
                    if self.marked == self.drop_at:
                        doomed.set()
                server_w.write(data)
                await server_w.drain()
            server_w.transport.abort()  # the worker went away: so does its request (a long poll)

        async def downstream() -> None:
            while data := await server_r.read(65536):
                if not doomed.is_set():
                    client_w.write(data)
                    await client_w.drain()
                    continue
                while b"\r\n\r\n" not in data:
                    data += await server_r.read(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body += await server_r.readexactly(length - len(body))
                self.dropped.append(body)
                self.answer_dropped.set()
                if self.how == "reset":
                    sock = client_w.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client_w.transport.abort()
                elif self.how == "close":
                    client_w.close()
                return  # "hold": the worker's side stays open, silent, until it goes away

        try:
            await asyncio.gather(upstream(), downstream())  # until the worker closes its side
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            server_w.transport.abort()
            client_w.transport.abort()
            self._open.discard(client_w)


def fresh_worker(server: Server) -> tuple[str, str, str]:
    """A job type no other test enqueues, and a worker key of its own: (type, name, key)."""
    type = next(_types)
    name = f"lost-{next(_names)}"
    return type, name, server.make_key(name, "worker")


def proxy_to(server: Server, operation: bytes, drop_at: int, how: str) -> Proxy:
    return Proxy(int(server.url.rsplit(":", 1)[1]), operation, drop_at, how)


def enqueue(server: Server, type: str, count: int) -> list[str]:
    inputs = [{"type": type, "payload": {"n": n}} for n in range(count)]
    return [e["job"]["id"] for e in server.gql(ENQUEUE_MANY, {"inputs": inputs}).ok()["enqueueJobs"]]


def states(server: Server, type: str) -> dict[str, tuple[str, int, str | None]]:
    nodes = server.gql(JOBS, {"type": type}).ok()["jobs"]["nodes"]
    return {n["id"]: (n["status"], n["attempt"], n["workerId"]) for n in nodes}


def claimed_ids(answer: bytes) -> list[str]:
    return [job["id"] for job in json.loads(answer)["data"]["claimJobs"]]


def run_worker(
    server: Server,
    proxy: Proxy,
    key: str,
    type: str,
    scenario: Callable[[Worker], Awaitable[None]],
) -> list[tuple[str, int]]:
    """The worker, through the proxy, while `scenario` plays; then stopped. The (id, attempt)
    of every job its handler ran."""
    ran: list[tuple[str, int]] = []

    async def handler(job: JobContext) -> dict[str, int]:
        ran.append((job.id, job.attempt))
        return {"n": len(ran)}

    async def main() -> None:
        port = await proxy.start()
        client = AsyncClient(f"http://127.0.0.1:{port}", key, timeout=TIMEOUT)
        worker = Worker("unused", key, {type: handler}, concurrency=CONCURRENCY, grace=10, client=client)
        running = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(scenario(worker), TIMEOUT)
        finally:
            worker.stop()
            await asyncio.wait_for(running, TIMEOUT)
            await asyncio.wait_for(proxy.close(), TIMEOUT)

    asyncio.run(main())
    return ran


async def until_done(server: Server, type: str, count: int) -> None:
    while True:
        found = await asyncio.to_thread(states, server, type)
        if sum(status == "COMPLETED" for status, _, _ in found.values()) == count:
            return
        await asyncio.sleep(0.05)


async def until_reported(server: Server, worker: Worker, type: str, count: int) -> None:
    """Until `count` jobs of `type` are COMPLETED and the worker has logged each."""
    await until_done(server, type, count)
    while worker.processed < count:
        await asyncio.sleep(0.01)


def taken_over(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("taking over")]


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("drop_at", [1, 2])
def test_the_jobs_of_a_claim_whose_answer_was_lost_run_once(
    server: Server, caplog: pytest.LogCaptureFixture, how: str, drop_at: int
) -> None:
    """The first claim (on a new connection) or the second (on a kept-alive one, which the
    hand-written client before aiohttp sent again). A job held under the worker's name since
    before it started (a previous run's) is not the lost claim's: after an answered claim it
    was claimed too early; before one, the free slots go to the most recently claimed jobs."""
    type, name, key = fresh_worker(server)
    [stale] = enqueue(server, type, 1)
    assert [j["id"] for j in server.gql(CLAIM, {"types": [type]}, key=key).ok()["claimJobs"]] == [stale]
    ids = enqueue(server, type, 3 * CONCURRENCY)
    proxy = proxy_to(server, b"claimJobs", drop_at, how)
    caplog.set_level(logging.WARNING, logger="queuelog.worker")

    async def scenario(worker: Worker) -> None:
        await until_done(server, type, len(ids))

    ran = run_worker(server, proxy, key, type, scenario)
    [answer] = proxy.dropped
    lost = claimed_ids(answer)
    assert lost and set(lost) <= set(ids)
    assert sorted(ran) == sorted((id, 1) for id in ids)  # each once, on its first attempt
    assert taken_over(caplog) == [f"taking over {len(lost)} job(s) claimed by a claim whose answer was lost"]
    if drop_at == 1:
        # Every free slot went to the lost claim: the stale job is the one left, being the oldest.
        assert len(lost) == CONCURRENCY
        assert f"{CONCURRENCY + 1} job(s) RUNNING under this worker's name and not held here" in caplog.text
    found = states(server, type)
    assert {id: found[id] for id in ids} == {id: ("COMPLETED", 1, name) for id in ids}
    assert found[stale] == ("RUNNING", 1, name)  # left to its lease


def test_a_claim_answered_while_the_worker_stops_is_run_before_it_returns(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    type, name, key = fresh_worker(server)
    ids = enqueue(server, type, 3 * CONCURRENCY)
    proxy = proxy_to(server, b"claimJobs", 1, "hold")
    caplog.set_level(logging.WARNING, logger="queuelog.worker")

    async def scenario(worker: Worker) -> None:
        await proxy.answer_dropped.wait()  # the server has claimed; the worker still waits

    ran = run_worker(server, proxy, key, type, scenario)
    lost = claimed_ids(proxy.dropped[0])
    assert len(lost) == CONCURRENCY
    assert sorted(ran) == sorted((id, 1) for id in lost)
    assert taken_over(caplog) == [f"taking over {len(lost)} job(s) claimed by a claim whose answer was lost"]
    found = states(server, type)
    assert {id: found[id] for id in lost} == {id: ("COMPLETED", 1, name) for id in lost}
    assert {id: found[id] for id in ids if id not in lost} == {
        id: ("PENDING", 0, None) for id in ids if id not in lost
    }


def test_a_completion_whose_answer_was_lost_is_logged_completed(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    type, name, key = fresh_worker(server)
    ids = enqueue(server, type, 3 * CONCURRENCY)
    proxy = proxy_to(server, b"completeJobs", 1, "close")
    caplog.set_level(logging.INFO, logger="queuelog.worker.jobs")

    async def scenario(worker: Worker) -> None:
        await until_reported(server, worker, type, len(ids))

    ran = run_worker(server, proxy, key, type, scenario)
    assert len(proxy.dropped) == 1
    assert sorted(ran) == sorted((id, 1) for id in ids)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "queuelog.worker.jobs"]
    assert sorted((x["id"], x["outcome"]) for x in lines) == sorted((id, "completed") for id in ids)
    assert set(states(server, type).values()) == {("COMPLETED", 1, name)}


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_complete_and_claim_whose_answer_was_lost_loses_no_job(
    server: Server, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """Chains fewer than the slots make the worker carry completions in its claims; the
    second such call's answer is lost after the server applied it."""
    type, name, key = fresh_worker(server)
    chains, length = 3, 8
    inputs = [
        {"type": type, "payload": {"c": c, "k": k}, **({"dependsOnItems": [c * length + k - 1]} if k else {})}
        for c in range(chains)
        for k in range(length)
    ]
    ids = [e["job"]["id"] for e in server.gql(ENQUEUE_MANY, {"inputs": inputs}).ok()["enqueueJobs"]]
    proxy = proxy_to(server, b"completeAndClaimJobs", 2, how)
    caplog.set_level(logging.INFO, logger="queuelog.worker")

    async def scenario(worker: Worker) -> None:
        await until_reported(server, worker, type, len(ids))

    ran = run_worker(server, proxy, key, type, scenario)
    [answer] = proxy.dropped
    lost = [job["id"] for job in json.loads(answer)["data"]["completeAndClaimJobs"]["claimed"]]
    assert sorted(ran) == sorted((id, 1) for id in ids)  # each once, on its first attempt
    if lost:
        assert taken_over(caplog) == [
            f"taking over {len(lost)} job(s) claimed by a claim whose answer was lost"
        ]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "queuelog.worker.jobs"]
    assert sorted((x["id"], x["outcome"]) for x in lines) == sorted((id, "completed") for id in ids)
    assert set(states(server, type).values()) == {("COMPLETED", 1, name)}
