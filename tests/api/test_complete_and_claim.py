"""`completeAndClaimJobs`: a worker's completions, then its claim, in one transaction.

On SQLite and PostgreSQL, against a real `queuelog serve` over HTTP. Proven: the claim half
takes the job that the completion half released, in the same call (a chain moves one step
per round trip), stamped no earlier than its dependency finished; rejected items are
listed and change nothing while the others apply; with no items it is a plain claim; a
refusal of either half (a limit out of range, an empty type list, too many items, an
oversized result) refuses the whole call and completes nothing; only a WORKER key may call
it, and it claims only for the caller, never completing another worker's job.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from conftest import Server, serving

TYPES = [f"cc{i:02d}" for i in range(20)]
_types = iter(TYPES)
_names = itertools.count(1)

ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
CLAIM = "mutation($types: [String!], $limit: Int!) { claimJobs(types: $types, limit: $limit) { id attempt } }"
COMPLETE_AND_CLAIM = """mutation($items: [CompleteJobInput!]!, $limit: Int!, $types: [String!]) {
  completeAndClaimJobs(items: $items, limit: $limit, types: $types) {
    completed { id status result finishedAt }
    rejected
    claimed { id status attempt workerId claimedAt dependsOn }
  } }"""
JOB = "query($id: ID!) { job(id: $id) { id status attempt workerId result finishedAt claimedAt } }"


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=",".join(TYPES)) as running:
        yield running


def fresh(server: Server) -> tuple[str, str, str]:
    """A type of the test's own, a producer key and a worker key."""
    n = next(_names)
    return (
        next(_types),
        server.make_key(f"cc-producer-{n}", "producer"),
        server.make_key(f"cc-worker-{n}", "worker"),
    )


def enqueue(server: Server, key: str, inputs: list[dict[str, Any]]) -> list[str]:
    return [e["job"]["id"] for e in server.gql(ENQUEUE_MANY, {"inputs": inputs}, key=key).ok()["enqueueJobs"]]


def chain(server: Server, key: str, type: str, length: int) -> list[str]:
    inputs: list[dict[str, Any]] = [{"type": type, "payload": {"step": 0}}]
    inputs += [{"type": type, "payload": {"step": k}, "dependsOnItems": [k - 1]} for k in range(1, length)]
    return enqueue(server, key, inputs)


def claim(server: Server, key: str, type: str, limit: int = 10) -> list[dict[str, Any]]:
    return server.gql(CLAIM, {"types": [type], "limit": limit}, key=key).ok()["claimJobs"]


def job(server: Server, job_id: str) -> dict[str, Any]:
    return server.gql(JOB, {"id": job_id}).ok()["job"]


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_claim_takes_the_job_its_completions_released(server: Server) -> None:
    type, producer, worker = fresh(server)
    first, second, third = chain(server, producer, type, 3)
    assert [j["id"] for j in claim(server, worker, type)] == [first]  # the others wait

    items = [{"id": first, "attempt": 1, "result": {"step": 0}}]
    answer = server.gql(COMPLETE_AND_CLAIM, {"items": items, "limit": 10, "types": [type]}, key=worker).ok()
    payload = answer["completeAndClaimJobs"]
    assert [(j["id"], j["status"], j["result"]) for j in payload["completed"]] == [
        (first, "COMPLETED", {"step": 0})
    ]
    assert payload["rejected"] == []
    (claimed,) = payload["claimed"]
    assert (claimed["id"], claimed["status"], claimed["attempt"], claimed["dependsOn"]) == (
        second,
        "RUNNING",
        1,
        [first],
    )
    assert moment(claimed["claimedAt"]) >= moment(payload["completed"][0]["finishedAt"])
    assert job(server, third)["status"] == "PENDING"  # still waiting for the second

    items = [{"id": second, "attempt": 1}]
    payload = server.gql(COMPLETE_AND_CLAIM, {"items": items, "limit": 1, "types": [type]}, key=worker).ok()
    assert [j["id"] for j in payload["completeAndClaimJobs"]["claimed"]] == [third]


def test_rejected_items_change_nothing_and_the_others_apply(server: Server) -> None:
    type, producer, worker = fresh(server)
    wrong, right, waiting = enqueue(server, producer, [{"type": type, "payload": {"n": n}} for n in range(3)])
    assert [j["id"] for j in claim(server, worker, type, limit=2)] == [wrong, right]
    items = [{"id": wrong, "attempt": 2}, {"id": right, "attempt": 1}, {"id": waiting, "attempt": 1}]
    payload = server.gql(COMPLETE_AND_CLAIM, {"items": items, "limit": 5, "types": [type]}, key=worker).ok()
    result = payload["completeAndClaimJobs"]
    assert sorted(result["rejected"]) == sorted([wrong, waiting])  # another attempt; not RUNNING
    assert [j["id"] for j in result["completed"]] == [right]
    assert [j["id"] for j in result["claimed"]] == [waiting]
    assert (job(server, wrong)["status"], job(server, wrong)["attempt"]) == ("RUNNING", 1)


def test_without_items_it_is_a_claim(server: Server) -> None:
    type, producer, worker = fresh(server)
    ids = enqueue(server, producer, [{"type": type, "payload": {"n": n}} for n in range(3)])
    payload = server.gql(COMPLETE_AND_CLAIM, {"items": [], "limit": 2, "types": [type]}, key=worker).ok()
    result = payload["completeAndClaimJobs"]
    assert (result["completed"], result["rejected"]) == ([], [])
    assert [j["id"] for j in result["claimed"]] == ids[:2]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"limit": 0}, "BAD_USER_INPUT"),
        ({"limit": 101}, "BAD_USER_INPUT"),
        ({"types": []}, "BAD_USER_INPUT"),
        ({"too_many": True}, "BAD_USER_INPUT"),
        ({"result": {"x": "y" * 70_000}}, "PAYLOAD_TOO_LARGE"),
    ],
    ids=["limit-0", "limit-101", "no-types", "101-items", "result-too-large"],
)
def test_a_refusal_of_either_half_refuses_the_whole_call(
    server: Server, change: dict[str, Any], code: str
) -> None:
    type, producer, worker = fresh(server)
    first, second = chain(server, producer, type, 2)
    claim(server, worker, type)
    items: list[dict[str, Any]] = [{"id": first, "attempt": 1, "result": change.get("result", {"ok": True})}]
    if change.get("too_many"):
        items += [{"id": first, "attempt": 1}] * 100
    variables = {"items": items, "limit": change.get("limit", 5), "types": change.get("types", [type])}
    answer = server.gql(COMPLETE_AND_CLAIM, variables, key=worker)
    assert answer.codes == [code], answer.body
    assert answer.data is None
    assert (job(server, first)["status"], job(server, second)["status"]) == ("RUNNING", "PENDING")


def test_only_a_worker_may_call_it_and_only_for_its_own_jobs(server: Server) -> None:
    type, producer, worker = fresh(server)
    other = server.make_key(f"cc-other-{next(_names)}", "worker")
    first, second = chain(server, producer, type, 2)
    claim(server, worker, type)
    items = [{"id": first, "attempt": 1}]
    refused = server.gql(COMPLETE_AND_CLAIM, {"items": items, "limit": 5, "types": [type]}, key=producer)
    assert refused.codes == ["FORBIDDEN"]
    payload = server.gql(COMPLETE_AND_CLAIM, {"items": items, "limit": 5, "types": [type]}, key=other).ok()
    result = payload["completeAndClaimJobs"]
    assert (result["rejected"], result["completed"], result["claimed"]) == ([first], [], [])
    assert (job(server, first)["status"], job(server, second)["status"]) == ("RUNNING", "PENDING")
