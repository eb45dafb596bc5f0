"""A long-polling claim is served in the transaction that releases its job.

While a claim waits (`waitSeconds`), the server keeps it parked: the next write batch of
that server process that completes a dependency and so releases a job of its types runs
the claim too, last, in the same transaction. On SQLite and PostgreSQL, against a real
`queuelog serve` over HTTP, proven by the timestamps, which a transaction stamps once: the
released job is claimed at the very moment its dependency finished. A claim waiting for
other types is left waiting, one whose client has gone claims nothing, and an enqueue is
not made to wait for a claim: the claim takes a new job in a transaction of its own.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from conftest import GraphQLResponse, Server, serving

TYPES = [f"pk{i:02d}" for i in range(20)]
_types = iter(TYPES)
_names = itertools.count(1)

ENQUEUE_MANY = """mutation($inputs: [EnqueueJobInput!]!) {
  enqueueJobs(inputs: $inputs) { job { id createdAt } } }"""
CLAIM_WAITING = """mutation($types: [String!], $wait: Int) {
  claimJobs(limit: 5, types: $types, waitSeconds: $wait) { id claimedAt createdAt } }"""
CLAIM = "mutation($types: [String!]) { claimJobs(limit: 5, types: $types) { id attempt } }"
COMPLETE = "mutation($id: ID!) { completeJob(id: $id, attempt: 1) { id finishedAt } }"
JOB = "query($id: ID!) { job(id: $id) { id status attempt claimedAt } }"


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=",".join(TYPES)) as running:
        yield running


def keys(server: Server) -> tuple[str, str]:
    n = next(_names)
    return server.make_key(f"pk-producer-{n}", "producer"), server.make_key(f"pk-worker-{n}", "worker")


class Waiting(threading.Thread):
    """One long-polling claimJobs, sent from a thread; `answer` once it returns."""

    def __init__(self, server: Server, key: str, type: str) -> None:
        super().__init__(daemon=True)
        self.server, self.key, self.type = server, key, type
        self.answer: GraphQLResponse | None = None

    def run(self) -> None:
        self.answer = self.server.gql(CLAIM_WAITING, {"types": [self.type], "wait": 20}, key=self.key)

    def jobs(self) -> list[dict[str, Any]]:
        self.join(30)
        assert self.answer is not None, "the waiting claim never answered"
        return self.answer.ok()["claimJobs"]


def wait_parked(server: Server) -> None:
    """Long enough for a claim sent just now to find nothing and park."""
    time.sleep(0.5)


def chain(server: Server, producer: str, type: str, then: str | None = None) -> tuple[str, str]:
    """A job of `type` and one of `then` (default: `type`) that waits for it."""
    inputs = [{"type": type, "payload": {}}, {"type": then or type, "payload": {}, "dependsOnItems": [0]}]
    first, second = server.gql(ENQUEUE_MANY, {"inputs": inputs}, key=producer).ok()["enqueueJobs"]
    return first["job"]["id"], second["job"]["id"]


def hold(server: Server, worker: str, type: str) -> str:
    (held,) = server.gql(CLAIM, {"types": [type]}, key=worker).ok()["claimJobs"]
    return held["id"]


def test_a_completion_claims_the_dependent_it_released_for_the_waiting_claim(server: Server) -> None:
    type = next(_types)
    producer, worker = keys(server)
    first, second = chain(server, producer, type)
    assert hold(server, worker, type) == first
    waiting = Waiting(server, worker, type)
    waiting.start()
    wait_parked(server)
    finished = server.gql(COMPLETE, {"id": first}, key=worker).ok()["completeJob"]["finishedAt"]
    (claimed,) = waiting.jobs()
    assert claimed["id"] == second
    assert claimed["claimedAt"] == finished  # one transaction: one moment


def test_a_claim_waiting_for_another_type_is_left_waiting(server: Server) -> None:
    held_type, wanted, other = next(_types), next(_types), next(_types)
    producer, worker = keys(server)
    first, other_job = chain(server, producer, held_type, then=other)
    waiting = Waiting(server, worker, wanted)
    waiting.start()
    assert hold(server, worker, held_type) == first
    wait_parked(server)
    server.gql(COMPLETE, {"id": first}, key=worker).ok()
    time.sleep(0.3)
    assert waiting.is_alive() and waiting.answer is None
    assert server.gql(JOB, {"id": other_job}).ok()["job"]["status"] == "PENDING"
    second_first, wanted_job = chain(server, producer, held_type, then=wanted)
    assert hold(server, worker, held_type) == second_first
    finished = server.gql(COMPLETE, {"id": second_first}, key=worker).ok()["completeJob"]["finishedAt"]
    (claimed,) = waiting.jobs()
    assert (claimed["id"], claimed["claimedAt"]) == (wanted_job, finished)


def test_a_parked_claim_whose_client_has_gone_claims_nothing(server: Server) -> None:
    type = next(_types)
    producer, worker = keys(server)
    first, second = chain(server, producer, type)
    assert hold(server, worker, type) == first
    body = {"query": CLAIM_WAITING, "variables": {"types": [type], "wait": 20}}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        httpx.post(server.graphql_url, json=body, headers={"Authorization": f"Bearer {worker}"}, timeout=0.5)
    time.sleep(0.3)
    server.gql(COMPLETE, {"id": first}, key=worker).ok()
    time.sleep(0.3)
    job = server.gql(JOB, {"id": second}).ok()["job"]
    assert (job["status"], job["attempt"], job["claimedAt"]) == ("PENDING", 0, None)


def test_an_enqueue_does_not_wait_for_the_claim_it_wakes(server: Server) -> None:
    type = next(_types)
    producer, worker = keys(server)
    waiting = Waiting(server, worker, type)
    waiting.start()
    wait_parked(server)
    server.gql(ENQUEUE_MANY, {"inputs": [{"type": type, "payload": {}}]}, key=producer).ok()
    (claimed,) = waiting.jobs()
    claimed_at, created_at = (datetime.fromisoformat(claimed[k]) for k in ("claimedAt", "createdAt"))
    assert claimed_at > created_at  # claimed in a transaction of its own
