"""V-05 (ownership): callers act only on the jobs that are theirs.

Attacked: worker B heartbeating, completing and failing a job held by worker A; worker A
reporting with a stale or future `attempt`; producer B reading, listing, counting, cancelling
and subscribing to producer A's job; a worker reading jobs it does not hold (beyond the jobs
a job it holds depends on: section 10); completeJobs
mixing the caller's own jobs with foreign, unclaimed and repeated ids; roles reaching for
operations they never have (worker cancel, producer retry, viewer cancel).

Proven: NOT_FOUND, worded as for a job that does not exist, for reports on a job the caller
does not hold and never held (job unchanged: status, worker, attempt, lease, result, error);
CONFLICT for the holder's reports with a wrong attempt; NOT_FOUND / null / absent for jobs a
caller may not see,
foreign items of completeJobs in `rejected` and unchanged while the caller's own ones apply,
FORBIDDEN for role violations; the rightful holder can still finish the job afterwards.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Server
from websockets.sync.client import ClientConnection, connect

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
CLAIM = "mutation { claimJob { id attempt workerId } }"
FULL = "id status workerId attempt leaseExpiresAt result error finishedAt retryCount"
JOB_AS_ADMIN = f"query($id: ID!) {{ job(id: $id) {{ {FULL} }} }}"
JOB = "query($id: ID!) { job(id: $id) { id status } }"


def report(call: str) -> str:
    """A worker report on job $id with fencing token $a (null: no attempt check)."""
    return f"mutation($id: ID!, $a: Int) {{ {call} {{ id }} }}"


REPORTS: dict[str, str] = {
    "heartbeat": report("heartbeatJob(id: $id, attempt: $a, leaseSeconds: 3600)"),
    "complete": report("completeJob(id: $id, attempt: $a, result: {stolen: true})"),
    "fail-retryable": report('failJob(id: $id, attempt: $a, error: "x")'),
    "fail-final": report('failJob(id: $id, attempt: $a, error: "x", retryable: false)'),
}
COMPLETE_MANY = (
    "mutation($items: [CompleteJobInput!]!) "
    "{ completeJobs(items: $items) { completed { id result } rejected } }"
)


def enqueue(server: Server, key: str | None = None) -> str:
    return server.gql(ENQUEUE, {"input": {"type": "email"}}, key=key).ok()["enqueueJob"]["job"]["id"]


def admin_view(server: Server, job_id: str) -> dict[str, Any]:
    return server.gql(JOB_AS_ADMIN, {"id": job_id}).ok()["job"]


def claim(server: Server, key: str) -> dict[str, Any]:
    claimed = server.gql(CLAIM, key=key).ok()["claimJob"]
    assert claimed is not None, "nothing to claim"
    return claimed


@pytest.fixture(autouse=True)
def empty_queue(server: Server) -> None:
    """Cancel every PENDING job left by earlier tests, so a claim can only get this test's job."""
    while nodes := server.gql("{ jobs(status: PENDING, first: 100) { nodes { id } } }").ok()["jobs"]["nodes"]:
        for node in nodes:
            server.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": node["id"]}).ok()


@pytest.fixture
def workers(server: Server, unique: Any) -> tuple[str, str]:
    return server.make_key(unique("v05-worker-a"), "worker"), server.make_key(
        unique("v05-worker-b"), "worker"
    )


@pytest.fixture
def producers(server: Server, unique: Any) -> tuple[str, str]:
    return server.make_key(unique("v05-producer-a"), "producer"), server.make_key(
        unique("v05-producer-b"), "producer"
    )


@pytest.mark.parametrize("report", REPORTS.values(), ids=REPORTS.keys())
def test_another_worker_cannot_report_on_a_held_job(
    server: Server, workers: tuple[str, str], report: str
) -> None:
    worker_a, worker_b = workers
    job_id = enqueue(server)
    held = claim(server, worker_a)
    before = admin_view(server, job_id)
    for attempt in (None, held["attempt"]):  # with and without the (correct) fencing token
        response = server.gql(report, {"id": job_id, "a": attempt}, key=worker_b)
        assert response.data is None and response.codes == ["NOT_FOUND"], response.body
        assert response.errors[0]["message"] == f"job {job_id} not found", response.body
        assert admin_view(server, job_id) == before
    # The rightful holder is unaffected and can still finish it.
    done = server.gql(
        "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a) { status workerId } }",
        {"id": job_id, "a": held["attempt"]},
        key=worker_a,
    ).ok()["completeJob"]
    assert done == {"status": "COMPLETED", "workerId": held["workerId"]}


@pytest.mark.parametrize("offset", [-1, 1, 1000], ids=["stale", "next", "far-future"])
@pytest.mark.parametrize("report", REPORTS.values(), ids=REPORTS.keys())
def test_the_holder_with_a_wrong_attempt_gets_conflict(
    server: Server, workers: tuple[str, str], report: str, offset: int
) -> None:
    worker_a, _ = workers
    job_id = enqueue(server)
    held = claim(server, worker_a)
    before = admin_view(server, job_id)
    response = server.gql(report, {"id": job_id, "a": held["attempt"] + offset}, key=worker_a)
    assert response.data is None and response.codes == ["CONFLICT"], response.body
    assert admin_view(server, job_id) == before


def test_reports_on_a_job_that_is_not_running_get_not_found(server: Server, workers: tuple[str, str]) -> None:
    worker_a, _ = workers
    job_id = enqueue(server)  # PENDING, held by nobody: no worker may see it
    before = admin_view(server, job_id)
    for report in REPORTS.values():
        response = server.gql(report, {"id": job_id, "a": None}, key=worker_a)
        assert response.data is None and response.codes == ["NOT_FOUND"], response.body
    assert admin_view(server, job_id) == before


def test_a_producer_cannot_see_or_cancel_another_producers_job(
    server: Server, producers: tuple[str, str]
) -> None:
    producer_a, producer_b = producers
    job_id = enqueue(server, producer_a)
    assert server.gql(JOB, {"id": job_id}, key=producer_b).ok()["job"] is None
    listed = server.gql("{ jobs(first: 100) { totalCount nodes { id } } }", key=producer_b).ok()["jobs"]
    assert listed == {"totalCount": 0, "nodes": []}
    stats = server.gql("{ queueStats { counts { pending } byType { type } } }", key=producer_b).ok()
    assert stats["queueStats"] == {"counts": {"pending": 0}, "byType": []}
    response = server.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": job_id}, key=producer_b)
    assert response.data is None and response.codes == ["NOT_FOUND"], response.body
    assert admin_view(server, job_id)["status"] == "PENDING"
    # Not-visible and non-existent look the same: the answer reveals nothing.
    missing = server.gql('mutation { cancelJob(id: "999999999") { id } }', key=producer_b)
    assert missing.errors[0]["message"].replace("999999999", job_id) == response.errors[0]["message"]
    # The owner sees and cancels it (positive control).
    assert server.gql(JOB, {"id": job_id}, key=producer_a).ok()["job"] == {"id": job_id, "status": "PENDING"}
    cancelled = server.gql(
        "mutation($id: ID!) { cancelJob(id: $id) { status } }", {"id": job_id}, key=producer_a
    )
    assert cancelled.ok()["cancelJob"]["status"] == "CANCELLED"


def test_a_worker_sees_only_the_jobs_it_holds(server: Server, workers: tuple[str, str]) -> None:
    worker_a, worker_b = workers
    held_id = enqueue(server)
    claim(server, worker_a)
    done_id = enqueue(server)
    claim(server, worker_a)
    server.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": done_id}, key=worker_a).ok()
    pending_id = enqueue(server)
    for job_id in (held_id, done_id, pending_id):
        assert server.gql(JOB, {"id": job_id}, key=worker_b).ok()["job"] is None, job_id
    listed = server.gql("{ jobs(first: 100) { totalCount nodes { id } } }", key=worker_b).ok()["jobs"]
    assert listed == {"totalCount": 0, "nodes": []}
    counts = server.gql("{ queueStats { counts { pending running completed } } }", key=worker_b).ok()
    assert counts["queueStats"]["counts"] == {"pending": 0, "running": 0, "completed": 0}
    # Worker A sees what it holds or finished, never the unclaimed job (positive control).
    mine = server.gql("{ jobs(first: 100) { nodes { id } } }", key=worker_a).ok()["jobs"]["nodes"]
    assert {n["id"] for n in mine} == {held_id, done_id}
    assert server.gql(JOB, {"id": pending_id}, key=worker_a).ok()["job"] is None


def test_a_worker_reads_what_its_held_job_depends_on_and_nothing_more(
    server: Server, workers: tuple[str, str]
) -> None:
    """Section 10 widens what a worker sees by exactly one rule: the jobs a job it holds
    depends on (their `result`, not their `error`). Attacked: the other worker, the same worker
    before and after it holds the dependent, a job the dependency itself depends on (two
    steps up), a job that depends on the held one (downstream), and `jobs` / `queueStats`."""
    worker_a, worker_b = workers
    grand = enqueue(server)
    claim(server, worker_b)
    server.gql(
        "mutation($id: ID!) { completeJob(id: $id, result: {secret: 1}) { id } }", {"id": grand}, key=worker_b
    ).ok()
    dependency = server.gql(ENQUEUE, {"input": {"type": "email", "dependsOn": [grand]}}).ok()["enqueueJob"][
        "job"
    ]["id"]
    claim(server, worker_b)
    server.gql(
        "mutation($id: ID!) { completeJob(id: $id, result: {step: 1}) { id } }",
        {"id": dependency},
        key=worker_b,
    ).ok()
    held = server.gql(ENQUEUE, {"input": {"type": "email", "dependsOn": [dependency]}}).ok()["enqueueJob"][
        "job"
    ]["id"]
    downstream = server.gql(ENQUEUE, {"input": {"type": "email", "dependsOn": [held]}}).ok()["enqueueJob"][
        "job"
    ]["id"]
    read = "query($id: ID!) { job(id: $id) { id result } }"
    assert server.gql(read, {"id": dependency}, key=worker_a).ok()["job"] is None  # not held yet
    assert claim(server, worker_a)["id"] == held
    assert server.gql(read, {"id": dependency}, key=worker_a).ok()["job"] == {
        "id": dependency,
        "result": {"step": 1},
    }
    error = server.gql("query($id: ID!) { job(id: $id) { error } }", {"id": dependency}, key=worker_a)
    assert error.codes == ["FORBIDDEN"]
    for job_id in (grand, downstream):
        assert server.gql(read, {"id": job_id}, key=worker_a).ok()["job"] is None, job_id
    assert server.gql(read, {"id": dependency}, key=worker_b).ok()["job"] is not None  # it finished it
    listed = server.gql("{ jobs(first: 100) { nodes { id } } }", key=worker_a).ok()["jobs"]["nodes"]
    assert {n["id"] for n in listed} == {held}
    server.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": held}, key=worker_a).ok()
    assert server.gql(read, {"id": dependency}, key=worker_a).ok()["job"] is None  # no longer held


def test_complete_jobs_rejects_foreign_items_and_leaves_them_unchanged(
    server: Server, workers: tuple[str, str]
) -> None:
    worker_a, worker_b = workers
    own_id = enqueue(server)
    claim(server, worker_a)
    foreign_id = enqueue(server)
    claim(server, worker_b)
    unclaimed_id = enqueue(server)
    before = {i: admin_view(server, i) for i in (foreign_id, unclaimed_id)}
    items = [
        {"id": own_id, "result": {"ok": 1}},
        {"id": foreign_id, "result": {"stolen": True}},
        {"id": unclaimed_id, "result": {"stolen": True}},
        {"id": own_id, "result": {"again": True}},
    ]
    outcome = server.gql(
        COMPLETE_MANY,
        {"items": items},
        key=worker_a,
    ).ok()["completeJobs"]
    assert outcome["completed"] == [{"id": own_id, "result": {"ok": 1}}]
    assert sorted(outcome["rejected"]) == sorted([foreign_id, unclaimed_id, own_id])
    assert {i: admin_view(server, i) for i in (foreign_id, unclaimed_id)} == before
    assert admin_view(server, own_id)["result"] == {"ok": 1}


ROLE_VIOLATIONS: dict[str, tuple[str, str]] = {
    "worker-cancels": ("worker", "mutation($id: ID!) { cancelJob(id: $id) { id } }"),
    "viewer-cancels": ("viewer", "mutation($id: ID!) { cancelJob(id: $id) { id } }"),
    "producer-retries": ("producer", "mutation($id: ID!) { retryJob(id: $id) { id } }"),
    "producer-claims": ("producer", "mutation { claimJob { id } }"),
    "producer-completes": ("producer", "mutation($id: ID!) { completeJob(id: $id) { id } }"),
    "viewer-fails": ("viewer", 'mutation($id: ID!) { failJob(id: $id, error: "x") { id } }'),
    "admin-claims": ("admin", "mutation { claimJob { id } }"),
}


@pytest.mark.parametrize(("role", "query"), ROLE_VIOLATIONS.values(), ids=ROLE_VIOLATIONS.keys())
def test_role_checks_come_first(server: Server, unique: Any, role: str, query: str) -> None:
    key = server.admin_key if role == "admin" else server.make_key(unique(f"v05-{role}"), role)
    job_id = enqueue(server, key if role == "producer" else None)
    before = admin_view(server, job_id)
    response = server.gql(query, {"id": job_id} if "$id" in query else {}, key=key)
    assert not any((response.data or {}).values()), response.body  # null root field (claimJob is nullable)
    assert response.codes == ["FORBIDDEN"], response.body
    assert admin_view(server, job_id) == before


@contextlib.contextmanager
def subscribed(server: Server, key: str, query: str, variables: dict[str, Any]) -> Iterator[ClientConnection]:
    """A graphql-transport-ws connection with one subscription started, ready to read."""
    with connect(server.ws_url, subprotocols=["graphql-transport-ws"], open_timeout=10) as ws:
        ws.send(json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {key}"}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
        ws.send(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query, "variables": variables}})
        )
        yield ws


def test_a_producer_cannot_subscribe_to_another_producers_job(
    server: Server, producers: tuple[str, str]
) -> None:
    producer_a, producer_b = producers
    job_id = enqueue(server, producer_a)
    query = "subscription($id: ID!) { jobUpdated(id: $id) { id payload } }"
    with subscribed(server, producer_b, query, {"id": job_id}) as ws:
        reply = json.loads(ws.recv(timeout=10))
    assert reply["type"] in ("error", "next"), reply
    errors = reply["payload"] if reply["type"] == "error" else reply["payload"].get("errors")
    assert errors and [e["extensions"]["code"] for e in errors] == ["NOT_FOUND"], reply
    if reply["type"] == "next":
        assert not (reply["payload"].get("data") or {}).get("jobUpdated"), reply


def test_job_events_deliver_only_the_callers_jobs(server: Server, producers: tuple[str, str]) -> None:
    producer_a, producer_b = producers
    foreign: set[str] = set()
    own: set[str] = set()
    received: list[dict[str, Any]] = []
    with subscribed(server, producer_b, "subscription { jobEvents { kind job { id } } }", {}) as ws:
        # The subscription starts asynchronously: enqueue pairs until B's own events arrive.
        deadline = time.monotonic() + 15
        while len(received) < 3 and time.monotonic() < deadline:
            foreign.add(enqueue(server, producer_a))
            own.add(enqueue(server, producer_b))
            with contextlib.suppress(TimeoutError):
                while True:
                    reply = json.loads(ws.recv(timeout=0.3))
                    assert reply["type"] == "next", reply
                    received.append(reply["payload"]["data"]["jobEvents"])
    assert received, "no event arrived for the subscriber's own jobs"
    ids = {event["job"]["id"] for event in received}
    assert ids <= own and not ids & foreign, (ids, own, foreign)
