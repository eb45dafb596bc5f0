"""Job.events: a job's recorded transitions, as job_events keeps them (the dashboard's timeline).

A superset of the contract: every transition already writes a job_events row (the feed
subscriptions read); this field reads them back for one job, newest `last`, oldest first.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from conftest import Server, sqlite_plan

from queuelog.storage.sqlite.statements import SqliteStatements

EVENTS = "events { kind status at }"
JOB_EVENTS = "query($id: ID!, $last: Int!) { job(id: $id) { status events(last: $last) { kind status at } } }"


def enqueue(server: Server, key: str, **fields: Any) -> str:
    job = {"type": "email", "payload": {"to": "a@example.com"}, **fields}
    document = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
    return server.gql(document, {"input": job}, key=key).ok()["enqueueJob"]["job"]["id"]


def claim(server: Server, key: str) -> dict[str, Any]:
    document = f'mutation {{ claimJob(types: ["email"]) {{ id attempt {EVENTS} }} }}'
    claimed = server.gql(document, key=key).ok()["claimJob"]
    assert claimed is not None
    return claimed


def history(server: Server, job_id: str, last: int = 50, key: str | None = None) -> list[dict[str, Any]]:
    job = server.gql(JOB_EVENTS, {"id": job_id, "last": last}, key=key).ok()["job"]
    assert job is not None
    return job["events"]


def drain(server: Server, worker: str) -> None:
    """Complete every due email job, so that the next claim takes the job a test enqueues."""
    document = 'mutation { claimJobs(limit: 100, types: ["email"]) { id attempt } }'
    complete = "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) { rejected } }"
    while claimed := server.gql(document, key=worker).ok()["claimJobs"]:
        items = [{"id": j["id"], "attempt": j["attempt"]} for j in claimed]
        assert server.gql(complete, {"items": items}, key=worker).ok()["completeJobs"]["rejected"] == []


def test_every_transition_is_recorded_in_order(server: Server, unique: Callable[[str], str]) -> None:
    producer = server.make_key(unique("producer"), "producer")
    worker = server.make_key(unique("worker"), "worker")
    drain(server, worker)
    job_id = enqueue(server, producer, maxRetries=1)

    first = claim(server, worker)
    assert first["id"] == job_id
    assert [e["kind"] for e in first["events"]] == ["ENQUEUED", "CLAIMED"], "the worker sees the claim"
    fail = 'mutation($id: ID!) { failJob(id: $id, error: "boom", retryInSeconds: 0) { status } }'
    assert server.gql(fail, {"id": job_id}, key=worker).ok()["failJob"]["status"] == "PENDING"
    second = claim(server, worker)
    assert (second["id"], second["attempt"]) == (job_id, 2)
    done = "mutation($id: ID!) { completeJob(id: $id, result: {ok: true}) { status } }"
    assert server.gql(done, {"id": job_id}, key=worker).ok()["completeJob"]["status"] == "COMPLETED"

    events = history(server, job_id, key=producer)
    assert [(e["kind"], e["status"]) for e in events] == [
        ("ENQUEUED", "PENDING"),
        ("CLAIMED", "RUNNING"),
        ("RETRYING", "PENDING"),
        ("CLAIMED", "RUNNING"),
        ("COMPLETED", "COMPLETED"),
    ]
    times = [datetime.fromisoformat(e["at"]) for e in events]
    assert times == sorted(times) and all(t.utcoffset() is not None and not t.utcoffset() for t in times)

    newest = [e["kind"] for e in history(server, job_id, last=2)]
    assert newest == ["CLAIMED", "COMPLETED"], "the newest two, oldest first"


def test_cancel_and_admin_retry_are_recorded(server: Server) -> None:
    job_id = enqueue(server, server.admin_key)
    server.gql(f'mutation {{ cancelJob(id: "{job_id}") {{ status }} }}').ok()
    retried = server.gql(f'mutation {{ retryJob(id: "{job_id}") {{ status {EVENTS} }} }}').ok()["retryJob"]
    assert [(e["kind"], e["status"]) for e in retried["events"]] == [
        ("ENQUEUED", "PENDING"),
        ("CANCELLED", "CANCELLED"),
        ("RETRIED", "PENDING"),
    ]


def test_last_out_of_range_is_bad_input_and_nothing_else_is_lost(server: Server) -> None:
    job_id = enqueue(server, server.admin_key)
    for last in (0, -1, 101):
        answer = server.gql(JOB_EVENTS, {"id": job_id, "last": last})
        assert answer.codes == ["BAD_USER_INPUT"], answer.body
        assert answer.data == {"job": None} or answer.data is None, "the non-null list nulls its job"
    assert [e["kind"] for e in history(server, job_id, last=100)] == ["ENQUEUED"]


def test_events_follow_the_jobs_visibility(server: Server, unique: Callable[[str], str]) -> None:
    owner = server.make_key(unique("producer"), "producer")
    stranger = server.make_key(unique("producer"), "producer")
    viewer = server.make_key(unique("viewer"), "viewer")
    job_id = enqueue(server, owner)
    assert server.gql(JOB_EVENTS, {"id": job_id, "last": 10}, key=stranger).ok() == {"job": None}
    assert [e["kind"] for e in history(server, job_id, key=viewer)] == ["ENQUEUED"]
    listed = "query { jobs(first: 5) { nodes { id events(last: 1) { kind } } } }"
    nodes = server.gql(listed, key=owner).ok()["jobs"]["nodes"]
    assert {n["id"]: n["events"] for n in nodes}[job_id] == [{"kind": "ENQUEUED"}]


def test_sqlite_reads_a_jobs_events_through_the_jobs_index(tmp_path: Path) -> None:
    shown = sqlite_plan(tmp_path, SqliteStatements.EVENTS_OF_JOBS, {"ids": "[1, 2, 3]", "limit": 50})
    assert "USING INDEX ix_job_events_job (job_id=?)" in shown or "USING COVERING INDEX" in shown, shown
    assert "SCAN job_events" not in shown, shown
