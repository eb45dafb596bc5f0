"""A write that stalls holds back nothing but itself, against real `queuelog serve` processes.

The stall is forced, never hoped for (tests/stalls.py): on PostgreSQL a trigger makes the
chosen transaction wait for an advisory lock the test holds; on SQLite the test holds the
writers' file lock. The test goes on only once the server's transaction is seen waiting.

Proven here:
- on PostgreSQL, a batch stalled in its COMMIT holds back no answer of the batches after it:
  each is answered once its own COMMIT is done (a client that timed out meanwhile and sent a
  committed enqueue again would make a duplicate). Its events still reach subscribers in
  commit order. (On SQLite one batch runs at a time: a stalled one holds the writer itself.)
- a waiting claim sent over a websocket (graphql-transport-ws) claims nothing when its
  operation ends while its batch is stalled, on both databases: whether the client stops the
  operation (`complete`) or closes the socket, the job stays PENDING, its attempt unspent,
  instead of RUNNING for a worker that will never hear of it until its lease expires.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from conftest import GraphQLResponse, Server
from stalls import (
    FileLockHold,
    held,
    install_stall,
    lock_file_of,
    until_flock_waited,
    until_released,
    until_waiting,
)
from websockets.asyncio.client import connect

PROTOCOL = "graphql-transport-ws"
STALL_LOCK = 4242
ENQUEUE = "mutation($type: String!) { enqueueJob(input: {type: $type}) { job { id } } }"
WAITING_CLAIM = """mutation($types: [String!]) {
  claimJobs(limit: 1, types: $types, waitSeconds: 20) { id } }"""
ME = "{ me { name } }"
JOB = "query($id: ID!) { job(id: $id) { status attempt workerId } }"
ANSWER_DEADLINE = 15.0  # an answer that has not come by then is held back (it takes milliseconds)


class Sent(threading.Thread):
    """One GraphQL request sent from a thread; `answer` once it returns."""

    def __init__(self, server: Server, query: str, variables: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.server, self.query, self.variables = server, query, variables
        self.answer: GraphQLResponse | None = None
        self.start()

    def run(self) -> None:
        self.answer = self.server.gql(self.query, self.variables)

    def result(self) -> Any:
        self.join(ANSWER_DEADLINE)
        assert self.answer is not None, "no answer"
        return self.answer.ok()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_batch_stalled_in_its_commit_holds_back_no_other_batchs_answer(
    start_server: Callable[..., Server],
) -> None:
    server = start_server()
    url = server.database_url
    install_stall(
        url,
        name="stall_report_commits",
        table="job_events",
        condition="(SELECT type FROM jobs WHERE id = NEW.job_id) = 'report'",
        lock=STALL_LOCK,
        at_commit=True,
    )
    heard: list[str] = []
    with held(url, STALL_LOCK) as hold:
        listening = Listening(server, heard)
        stalled = Sent(server, ENQUEUE, {"type": "report"})
        until_waiting(url, STALL_LOCK)  # its batch has begun its COMMIT, and waits in it

        answered = []
        for _ in range(3):  # each in a batch of its own: every one must be answered
            try:
                answer = httpx.post(
                    server.graphql_url,
                    json={"query": ENQUEUE, "variables": {"type": "email"}},
                    headers={"Authorization": f"Bearer {server.admin_key}"},
                    timeout=ANSWER_DEADLINE,
                )
            except httpx.ReadTimeout:
                pytest.fail(f"no answer in {ANSWER_DEADLINE:.0f} s: held back by the stalled batch")
            answered.append(answer.json()["data"]["enqueueJob"]["job"]["id"])
        assert stalled.is_alive() and stalled.answer is None  # still stalled: nothing held it up
        stored = server.sql("SELECT id, type FROM jobs WHERE type <> 'noop' ORDER BY id")
        assert [(str(i), t) for i, t in stored] == [(i, "email") for i in answered]  # committed
        hold.release()
        report = stalled.result()["enqueueJob"]["job"]["id"]
    listening.until(set(answered) | {report})
    # Events reach subscribers in the order the COMMITs began: the stalled batch's first.
    assert heard == [report, *answered], heard


class Listening(threading.Thread):
    """A jobEvents subscriber on `server` (from a thread), collecting ENQUEUED job ids."""

    def __init__(self, server: Server, heard: list[str]) -> None:
        super().__init__(daemon=True)
        self.server, self.heard = server, heard
        self.live = threading.Event()
        self.wanted: set[str] | None = None
        self.start()
        assert self.live.wait(30), "the subscription never became live"

    def run(self) -> None:
        asyncio.run(self._listen())

    async def _listen(self) -> None:
        async with connect(self.server.ws_url, subprotocols=[PROTOCOL], proxy=None) as ws:  # type: ignore[list-item]
            await ws.send(json.dumps({"type": "connection_init", "payload": bearer(self.server.admin_key)}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            query = "subscription { jobEvents { kind job { id type } } }"
            await ws.send(json.dumps({"id": "e", "type": "subscribe", "payload": {"query": query}}))
            # The subscription is live once an event made after it arrives.
            sentinel = await asyncio.to_thread(self.server.gql, ENQUEUE, {"type": "noop"})
            sentinel_id = sentinel.ok()["enqueueJob"]["job"]["id"]
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 30))["payload"]["data"]["jobEvents"]
                if event["job"]["id"] == sentinel_id:
                    break
            self.live.set()
            deadline = asyncio.get_running_loop().time() + 60
            while self.wanted is None or not self.wanted <= set(self.heard):
                assert asyncio.get_running_loop().time() < deadline, self.heard
                try:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 0.2))
                except TimeoutError:
                    continue  # look at `wanted` again
                event = message["payload"]["data"]["jobEvents"]
                if event["kind"] == "ENQUEUED" and event["job"]["type"] != "noop":
                    self.heard.append(event["job"]["id"])

    def until(self, wanted: set[str]) -> None:
        self.wanted = wanted
        self.join(30)
        assert wanted <= set(self.heard), (wanted, self.heard)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.mark.parametrize("ending", ["complete", "close"])
def test_a_waiting_claim_over_a_websocket_that_ends_while_its_batch_is_stalled_claims_nothing(
    start_server: Callable[..., Server], backend: str, ending: str
) -> None:
    """The claim finds a job at once, so it is written in the next batch; that batch is stalled
    before the claim's statements run. The operation ends: the client sends `complete` for it
    (then a `me` on the same socket: once that answers, the server has handled the
    `complete`, which it takes in order) or closes the socket (then a `me` over a new socket,
    which takes the server far longer than taking the close). Then the stall is released."""
    server = start_server(env={"QUEUELOG_LEASE_CHECK_SECONDS": "3600"}, prune_interval_seconds=3600)
    url = server.database_url
    worker = server.make_key("ws-worker", "WORKER")
    job_id = server.gql(ENQUEUE, {"type": "report"}).ok()["enqueueJob"]["job"]["id"]

    async def scenario() -> None:
        async with connect(server.ws_url, subprotocols=[PROTOCOL], proxy=None) as ws:  # type: ignore[list-item]
            await ws.send(json.dumps({"type": "connection_init", "payload": bearer(worker)}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            await ws.send(
                json.dumps(
                    {
                        "id": "claim",
                        "type": "subscribe",
                        "payload": {"query": WAITING_CLAIM, "variables": {"types": ["report"]}},
                    }
                )
            )
            await asyncio.to_thread(stall_seen)
            if ending == "complete":
                await ws.send(json.dumps({"id": "claim", "type": "complete"}))
                await ws.send(json.dumps({"id": "me", "type": "subscribe", "payload": {"query": ME}}))
                message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                assert message["id"] == "me" and message["type"] == "next", message
        if ending == "close":
            async with connect(server.ws_url, subprotocols=[PROTOCOL], proxy=None) as other:  # type: ignore[list-item]
                await other.send(json.dumps({"type": "connection_init", "payload": bearer(worker)}))
                assert json.loads(await other.recv())["type"] == "connection_ack"
                await other.send(json.dumps({"id": "me", "type": "subscribe", "payload": {"query": ME}}))
                assert json.loads(await asyncio.wait_for(other.recv(), 30))["type"] == "next"

    if backend == "postgresql":
        install_stall(
            url,
            name="stall_report_claims",
            table="jobs",
            condition="NEW.status = 'running' AND NEW.type = 'report'",
            lock=STALL_LOCK,
        )
        with held(url, STALL_LOCK) as hold:

            def stall_seen() -> None:
                until_waiting(url, STALL_LOCK)

            asyncio.run(asyncio.wait_for(scenario(), 60))
            hold.release()
        until_released(url, STALL_LOCK)  # the stalled transaction has ended
    else:
        with FileLockHold(url) as file_lock:

            def stall_seen() -> None:
                until_flock_waited(lock_file_of(url))

            asyncio.run(asyncio.wait_for(scenario(), 60))
            file_lock.release()
        # One batch at a time: a write after the stalled one is answered once that has committed.
        server.gql(ENQUEUE, {"type": "noop"}).ok()
    job = server.gql(JOB, {"id": job_id}).ok()["job"]
    assert job == {"status": "PENDING", "attempt": 0, "workerId": None}, job
