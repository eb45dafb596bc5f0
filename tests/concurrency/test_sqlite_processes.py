"""Separate `queuelog serve` processes on one SQLite file, as a process manager starts them.

Three servers, each its own `queuelog serve` (no `--workers`), default settings
(QUEUELOG_EVENT_FEED=auto), on one file; spoken to over real HTTP and websockets.

Proven here (issue 15 item 7: a subscriber on one server heard nothing the others did):
- a jobEvents subscriber on server 1 hears every transition of jobs enqueued on server 2 and
  claimed and completed on server 3, exactly once each and in order, and server 1's own
  transitions exactly once (its event tail skips its own events);
- a jobUpdated subscriber on server 1 follows a job through servers 2 and 3 to its terminal
  state, then ends;
- a claim waiting on server 1 is answered with a job enqueued on server 2.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Server, launch_server
from socket_kit import Socket, open_socket

from queuelog import keys as key_admin
from queuelog.cli import open_migrated
from queuelog.model import Role

DEADLINE = 10.0  # generous: the tail polls every 50 ms
WATCHED_JOBS = 12

ME = "{ me { name } }"
ENQUEUE = "mutation($t: String!) { enqueueJob(input: {type: $t}) { job { id } } }"
ENQUEUE_MANY = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { job { id } } }"
CLAIM = """mutation($limit: Int!, $types: [String!], $wait: Int) {
  claimJobs(limit: $limit, types: $types, waitSeconds: $wait) { id attempt } }"""
COMPLETE = "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a, result: {ok: true}) { status } }"
COMPLETE_MANY = "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) { completed { id } } }"
JOB_EVENTS = "subscription { jobEvents { kind job { id status } } }"
JOB_UPDATED = "subscription($id: ID!) { jobUpdated(id: $id) { id status } }"


def three_servers(tmp_path: Path) -> tuple[list[Server], dict[Role, str]]:
    """Migrate and make the keys first, then start three servers at once on one file."""
    url = f"sqlite:///{tmp_path / 'queuelog.db'}"
    engine = open_migrated(url)
    try:
        keys = {role: key_admin.create_key(engine, role.value.lower(), [role])[1] for role in Role}
    finally:
        engine.dispose()
    directories = [tmp_path / name for name in ("one", "two", "three")]
    for directory in directories:
        directory.mkdir()
    with ThreadPoolExecutor(3) as pool:
        launched = pool.map(
            lambda d: launch_server(d, database_url=url, admin_key=keys[Role.ADMIN]), directories
        )
        return list(launched), keys


async def until_live(socket: Socket, make_event: Callable[[], Awaitable[str]]) -> set[str]:
    """Make events (each returns its job's id) until one of them arrives on subscription
    "events": it is then live. The ids of those sentinel jobs."""
    sentinels: set[str] = set()
    for _ in range(20):
        sentinels.add(await make_event())
        try:
            while (await socket.data("events", 0.5))["jobEvents"]["job"]["id"] not in sentinels:
                pass
            return sentinels
        except TimeoutError:
            continue
    pytest.fail("the subscription never delivered a sentinel made on another server")


def test_three_processes_on_one_sqlite_file_hear_each_other(tmp_path: Path) -> None:
    servers, keys = three_servers(tmp_path)
    one, two, three = servers
    latencies: list[float] = []

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=60) as http:

            async def gql(server: Server, role: Role, query: str, **variables: Any) -> Any:
                response = await http.post(
                    server.graphql_url,
                    json={"query": query, "variables": variables},
                    headers={"Authorization": f"Bearer {keys[role]}"},
                )
                body = response.json()
                assert response.status_code == 200 and "errors" not in body, body
                return body["data"]

            async def enqueue(server: Server, job_type: str) -> str:
                return (await gql(server, Role.PRODUCER, ENQUEUE, t=job_type))["enqueueJob"]["job"]["id"]

            async def claim(server: Server, job_type: str, limit: int) -> list[str]:
                answer = await gql(server, Role.WORKER, CLAIM, limit=limit, types=[job_type])
                return [job["id"] for job in answer["claimJobs"]]

            async with open_socket(one, keys[Role.VIEWER]) as socket:
                await socket.subscribe("events", JOB_EVENTS)
                sentinels = await until_live(socket, lambda: enqueue(two, "noop"))

                # Enqueued on 2 (singly and in one batch), claimed and completed on 3.
                watched = [await enqueue(two, "resize") for _ in range(WATCHED_JOBS // 2)]
                inputs = [{"type": "resize"} for _ in range(WATCHED_JOBS - len(watched))]
                batch = await gql(two, Role.PRODUCER, ENQUEUE_MANY, i=inputs)
                watched += [item["job"]["id"] for item in batch["enqueueJobs"]]
                followed = watched[0]
                await socket.subscribe("job", JOB_UPDATED, {"id": followed})
                assert (await socket.data("job", DEADLINE))["jobUpdated"] == {
                    "id": followed,
                    "status": "PENDING",
                }
                claimed = await claim(three, "resize", WATCHED_JOBS // 2)
                claimed += await claim(three, "resize", WATCHED_JOBS)
                assert sorted(claimed, key=int) == sorted(watched, key=int)
                for job_id in claimed[: WATCHED_JOBS // 2]:
                    await gql(three, Role.WORKER, COMPLETE, id=job_id, a=1)
                items = [{"id": job_id, "attempt": 1} for job_id in claimed[WATCHED_JOBS // 2 :]]
                await gql(three, Role.WORKER, COMPLETE_MANY, items=items)

                # Server 1's own job, start to end: published once, not again by its tail.
                own = await enqueue(one, "report")
                assert await claim(one, "report", 1) == [own]
                await gql(one, Role.WORKER, COMPLETE, id=own, a=1)

                # The last event of all, from server 2: once it is here, every earlier one is.
                last = await enqueue(two, "noop")
                heard: list[tuple[str, str]] = []
                while True:
                    event = (await socket.data("events", DEADLINE))["jobEvents"]
                    if event["job"]["id"] == last:
                        break
                    if event["job"]["id"] not in sentinels:
                        heard.append((event["job"]["id"], event["kind"]))

                kinds = ["ENQUEUED", "CLAIMED", "COMPLETED"]
                for job_id in [*watched, own]:
                    assert [kind for heard_id, kind in heard if heard_id == job_id] == kinds, job_id
                assert Counter(job_id for job_id, _ in heard) == {job_id: 3 for job_id in [*watched, own]}

                # jobUpdated may merge changes; it ends on the terminal state.
                states = []
                while (message := await socket.message_for("job", DEADLINE))["type"] == "next":
                    states.append(message["payload"]["data"]["jobUpdated"]["status"])
                assert message == {"id": "job", "type": "complete"}
                assert states[-1] == "COMPLETED" and set(states) <= {"RUNNING", "COMPLETED"}, states

            # A claim waiting on 1 for a type nobody has enqueued yet, answered by 2's enqueue.
            for _ in range(3):
                waiting = asyncio.create_task(gql(one, Role.WORKER, CLAIM, limit=1, types=["email"], wait=20))
                await gql(one, Role.VIEWER, ME)  # server 1 took a request sent after the claim
                assert not waiting.done()
                sent = time.monotonic()
                new_id = await enqueue(two, "email")
                answer = await asyncio.wait_for(waiting, DEADLINE)
                latencies.append(time.monotonic() - sent)
                assert [job["id"] for job in answer["claimJobs"]] == [new_id]

    try:
        asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        for server in servers:
            server.stop()
    print(
        f"enqueue on 2 -> waiting claim on 1 answered: {', '.join(f'{s * 1000:.0f} ms' for s in latencies)}"
    )
