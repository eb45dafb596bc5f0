"""A write that stalls, against real `queuelog serve` processes.

The stall is forced, never hoped for (tests/stalls.py): on PostgreSQL a trigger makes the
chosen transaction wait for an advisory lock the test holds; on SQLite the test holds the
writers' file lock. The test goes on only once the server's transaction is seen waiting.

Proven here:
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
