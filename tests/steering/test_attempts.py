"""Job.attempts (API.md section 12): every claim of a job, oldest first, with its outcome and
its own error under Job.error's permission, read from the events already written.

Each test drives one job through real claims, reports, expired leases and timeouts on a
real server (SQLite and PostgreSQL), then reads its attempts as each role would, and what
the events table holds for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import Server, serving

from queuelog import model
from queuelog.storage.operations import attempts as derivation
from queuelog.storage.operations.attempts import AttemptEvent, event_columns

ATTEMPTS = "attempts(last: $last) { attempt workerId claimedAt finishedAt outcome error }"
JOB_ATTEMPTS = f"query($id: ID!, $last: Int! = 50) {{ job(id: $id) {{ status attempt {ATTEMPTS} }} }}"
ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
CLAIM = (
    "mutation($types: [String!], $lease: Int) { claimJob(types: $types, leaseSeconds: $lease)"
    " { id attempt claimedAt } }"
)
FAIL = (
    "mutation($id: ID!, $attempt: Int!, $error: String!, $retryable: Boolean!) {"
    " failJob(id: $id, attempt: $attempt, error: $error, retryable: $retryable, retryInSeconds: 0)"
    " { status } }"
)
COMPLETE = "mutation($id: ID!, $attempt: Int!) { completeJob(id: $id, attempt: $attempt) { status } }"
RETRY = "mutation($id: ID!) { retryJob(id: $id) { status } }"


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, retry_base_seconds=0, retry_max_seconds=0) as running:
        yield running


@pytest.fixture
def keys(server: Server, unique: Callable[[str], str]) -> dict[str, str]:
    return {
        "producer": server.make_key(unique("producer"), "producer"),
        "worker": server.make_key(unique("worker"), "worker"),
        "other": server.make_key(unique("other-worker"), "worker"),
        "viewer": server.make_key(unique("viewer"), "viewer"),
        "admin": server.admin_key,
    }


def enqueue(server: Server, key: str, job_type: str, **fields: Any) -> str:
    job = {"type": job_type, "payload": {}, **fields}
    return server.gql(ENQUEUE, {"input": job}, key=key).ok()["enqueueJob"]["job"]["id"]


def claim(server: Server, key: str, job_type: str, job_id: str, lease: int = 60) -> dict[str, Any]:
    """Claim the job `job_id` (the only due job of `job_type` in these tests)."""
    claimed = server.gql(CLAIM, {"types": [job_type], "lease": lease}, key=key).ok()["claimJob"]
    assert claimed is not None and claimed["id"] == job_id, claimed
    return claimed


def claim_when_due(server: Server, key: str, job_type: str, job_id: str, lease: int = 60) -> dict[str, Any]:
    """Claim the job again once it is due (a retry without back-off, an expired lease)."""
    deadline = time.monotonic() + 15
    while True:
        claimed = server.gql(CLAIM, {"types": [job_type], "lease": lease}, key=key).ok()["claimJob"]
        if claimed is not None:
            assert claimed["id"] == job_id, claimed
            return claimed
        assert time.monotonic() < deadline, "the job never became due again"
        time.sleep(0.2)


def attempts_of(server: Server, job_id: str, key: str, last: int = 50) -> tuple[dict[str, Any], Any]:
    response = server.gql(JOB_ATTEMPTS, {"id": job_id, "last": last}, key=key)
    assert response.status == 200, response.body
    return response.data["job"], response.errors


def drain(server: Server, key: str, job_type: str) -> None:
    """Leave no due job of `job_type`, so that each test's claims take its own job."""
    document = "mutation($t: [String!]) { claimJobs(limit: 100, types: $t) { id attempt } }"
    while claimed := server.gql(document, {"t": [job_type]}, key=key).ok()["claimJobs"]:
        for job in claimed:
            server.gql(COMPLETE, {"id": job["id"], "attempt": job["attempt"]}, key=key).ok()


def test_every_claim_is_listed_with_how_it_ended(server: Server, keys: dict[str, str]) -> None:
    """A failure with a retry, an expired lease, a final failure, then an ADMIN retry and a
    completion: five attempts, oldest first, each with its worker, times, outcome and error."""
    worker, other = keys["worker"], keys["other"]
    drain(server, worker, "email")
    job_id = enqueue(server, keys["producer"], "email", maxRetries=2)

    first = claim(server, worker, "email", job_id)
    server.gql(FAIL, {"id": job_id, "attempt": 1, "error": "boom", "retryable": True}, key=worker).ok()
    claim_when_due(server, other, "email", job_id, lease=1)  # attempt 2: its lease runs out
    time.sleep(1.3)
    third = claim_when_due(server, worker, "email", job_id)
    assert third["attempt"] == 3
    running, errors = attempts_of(server, job_id, keys["admin"])
    assert not errors
    assert [(a["attempt"], a["outcome"]) for a in running["attempts"]] == [
        (1, "RETRIED"),
        (2, "LEASE_EXPIRED"),
        (3, "RUNNING"),
    ]
    assert running["attempts"][2]["finishedAt"] is None and running["attempts"][2]["error"] is None

    final = {"id": job_id, "attempt": 3, "error": "gave up: password=hunter2", "retryable": False}
    assert server.gql(FAIL, final, key=worker).ok()["failJob"]["status"] == "FAILED"
    assert server.gql(RETRY, {"id": job_id}).ok()["retryJob"]["status"] == "PENDING"
    fourth = claim_when_due(server, worker, "email", job_id)
    server.gql(COMPLETE, {"id": job_id, "attempt": fourth["attempt"]}, key=worker).ok()

    job, errors = attempts_of(server, job_id, keys["admin"])
    assert not errors
    attempts = job["attempts"]
    assert [(a["attempt"], a["outcome"], a["error"]) for a in attempts] == [
        (1, "RETRIED", "boom"),
        (2, "LEASE_EXPIRED", "lease expired"),
        (3, "FAILED", "gave up: password=<redacted>"),  # sanitised, as Job.error
        (4, "COMPLETED", None),
    ]
    workers = [a["workerId"] for a in attempts]
    assert workers[0] == workers[2] == workers[3] and workers[1] != workers[0], workers
    assert job["attempt"] == attempts[-1]["attempt"] == 4
    assert attempts[0]["claimedAt"] == first["claimedAt"] and attempts[2]["claimedAt"] == third["claimedAt"]
    for attempt in attempts:
        claimed_at, finished_at = (datetime.fromisoformat(attempt[k]) for k in ("claimedAt", "finishedAt"))
        assert claimed_at <= finished_at
    times = [datetime.fromisoformat(a["claimedAt"]) for a in attempts]
    assert times == sorted(times)

    newest, _ = attempts_of(server, job_id, keys["admin"], last=2)
    assert [a["attempt"] for a in newest["attempts"]] == [3, 4], "the newest `last`, oldest first"


def test_an_attempt_that_runs_out_of_time_is_timed_out(server: Server, keys: dict[str, str]) -> None:
    """A timeout records RETRYING (or FAILED) with error `timed out`, as a failJob would: that
    error tells the attempt TIMED_OUT."""
    worker = keys["worker"]
    drain(server, worker, "report")
    job_id = enqueue(server, keys["producer"], "report", maxRetries=1, timeoutSeconds=1)
    claim(server, worker, "report", job_id)
    time.sleep(1.3)
    second = claim_when_due(server, worker, "report", job_id)  # the claim times the first out
    assert second["attempt"] == 2
    time.sleep(1.3)
    drain(server, worker, "report")  # its claim times the second out: no retry left
    job, errors = attempts_of(server, job_id, keys["admin"])
    assert not errors and job["status"] == "FAILED"
    assert [(a["outcome"], a["error"]) for a in job["attempts"]] == [
        ("TIMED_OUT", "timed out"),
        ("TIMED_OUT", "timed out"),
    ]


@pytest.mark.parametrize("role", ["producer", "worker", "viewer"])
def test_only_admin_reads_an_attempts_error(server: Server, keys: dict[str, str], role: str) -> None:
    """Others get every attempt, with null errors and FORBIDDEN at each error's path."""
    worker = keys["worker"]
    drain(server, worker, "resize")
    job_id = enqueue(server, keys["producer"], "resize", maxRetries=1)
    claim(server, worker, "resize", job_id)
    server.gql(FAIL, {"id": job_id, "attempt": 1, "error": "boom", "retryable": True}, key=worker).ok()
    claim_when_due(server, worker, "resize", job_id)
    server.gql(FAIL, {"id": job_id, "attempt": 2, "error": "boom", "retryable": True}, key=worker).ok()

    job, errors = attempts_of(server, job_id, keys[role])
    assert [(a["outcome"], a["error"]) for a in job["attempts"]] == [("RETRIED", None), ("FAILED", None)]
    assert [(e["extensions"]["code"], e["path"]) for e in errors] == [
        ("FORBIDDEN", ["job", "attempts", 0, "error"]),
        ("FORBIDDEN", ["job", "attempts", 1, "error"]),
    ]
    admin, errors = attempts_of(server, job_id, keys["admin"])
    assert not errors and [a["error"] for a in admin["attempts"]] == ["boom", "boom"]


def test_a_job_the_caller_does_not_see_shows_nothing(server: Server, keys: dict[str, str]) -> None:
    worker = keys["worker"]
    drain(server, worker, "noop")
    job_id = enqueue(server, keys["producer"], "noop")
    claim(server, worker, "noop", job_id)
    job, errors = attempts_of(server, job_id, keys["other"])
    assert job is None and not errors
    job, _ = attempts_of(server, job_id, keys["producer"])
    assert [a["outcome"] for a in job["attempts"]] == ["RUNNING"]


@pytest.mark.parametrize("last", [0, 101])
def test_last_out_of_range_is_bad_input(server: Server, keys: dict[str, str], last: int) -> None:
    job_id = enqueue(server, keys["producer"], "noop")
    response = server.gql(JOB_ATTEMPTS, {"id": job_id, "last": last})
    assert response.codes == ["BAD_USER_INPUT"] and "last" in response.errors[0]["message"], response.body


def test_a_claim_writes_its_attempt_on_its_event_and_nothing_else(
    server: Server, keys: dict[str, str]
) -> None:
    """No write of its own: the CLAIMED event carries the attempt and worker, the ending
    event the attempt and error; the other events carry none."""
    worker = keys["worker"]
    drain(server, worker, "noop")
    job_id = enqueue(server, keys["producer"], "noop", maxRetries=1)
    claim(server, worker, "noop", job_id)
    server.gql(FAIL, {"id": job_id, "attempt": 1, "error": "boom", "retryable": True}, key=worker).ok()
    rows = server.sql(
        "SELECT kind, attempt, worker_id, error FROM job_events WHERE job_id = :id ORDER BY id",
        id=int(job_id),
    )
    holder = attempts_of(server, job_id, keys["admin"])[0]["attempts"][0]["workerId"]
    assert rows == [
        ("ENQUEUED", None, None, None),
        ("CLAIMED", 1, holder, None),
        ("RETRYING", 1, None, "boom"),
    ]


def test_attempts_go_with_the_job_when_it_is_pruned(
    backend: str, tmp_path_factory: pytest.TempPathFactory, unique: Callable[[str], str]
) -> None:
    with serving(backend, tmp_path_factory, retention_seconds=0, prune_interval_seconds=1) as server:
        worker = server.make_key(unique("worker"), "worker")
        job_id = enqueue(server, server.admin_key, "email")
        claimed = claim(server, worker, "email", job_id)
        # While it runs nothing prunes it (once it has finished, the next pass may at once).
        assert server.sql("SELECT count(*) FROM job_events WHERE job_id = :id", id=int(job_id)) == [(2,)]
        server.gql(COMPLETE, {"id": job_id, "attempt": claimed["attempt"]}, key=worker).ok()
        deadline = time.monotonic() + 15
        while server.sql("SELECT count(*) FROM jobs WHERE id = :id", id=int(job_id)) != [(0,)]:
            assert time.monotonic() < deadline, "the job was never pruned"
            time.sleep(0.2)
        assert server.sql("SELECT count(*) FROM job_events WHERE job_id = :id", id=int(job_id)) == [(0,)]


# --- the derivation itself, for the kinds other features write ---------------------------------


def _job(**fields: Any) -> model.Job:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    values: dict[str, Any] = {
        "id": 1, "type": "email", "payload": {}, "priority": model.Priority.LOW,
        "status": model.JobStatus.RUNNING, "retry_count": 0, "max_retries": 3, "attempt": 1,
        "idempotency_key": None, "worker_id": "w", "claimed_at": now, "lease_expires_at": now,
        "run_at": now, "finished_at": None, "result": None, "error": None, "created_by": "p",
        "created_at": now, "updated_at": now,
    }  # fmt: skip
    values.update(fields)
    return model.Job(**values)


def test_which_events_carry_an_attempt() -> None:
    """The claim (attempt, worker) and the end of an attempt (attempt, error); a CANCELLED
    event ends one only when the job still names its worker (cancelled while RUNNING)."""
    Kind, Status = model.EventKind, model.JobStatus
    running = _job()
    assert event_columns(Kind.CLAIMED, running) == (1, "w", None)
    assert event_columns(Kind.COMPLETED, _job(status=Status.COMPLETED, error="old")) == (1, None, None)
    assert event_columns(Kind.SNOOZED, _job(status=Status.PENDING, worker_id=None)) == (1, None, None)
    retried = _job(status=Status.PENDING, worker_id=None, error="boom")
    assert event_columns(Kind.RETRYING, retried) == (1, None, "boom")
    cancelled_running = _job(status=Status.CANCELLED, error="cancelled while running")
    assert event_columns(Kind.CANCELLED, cancelled_running) == (1, None, "cancelled while running")
    for kind in (Kind.CANCELLED, Kind.EXPIRED, Kind.ENQUEUED, Kind.RETRIED, Kind.PROGRESS, Kind.UPDATED):
        assert event_columns(kind, _job(status=Status.CANCELLED, worker_id=None)) == (None, None, None), kind


def test_outcomes_of_the_ends_other_features_record() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)

    def claim(n: int) -> AttemptEvent:
        return AttemptEvent(model.EventKind.CLAIMED, at, n, "w", None)

    def end(kind: model.EventKind, n: int, error: str | None = None) -> AttemptEvent:
        return AttemptEvent(kind, at, n, None, error)

    events = [
        claim(1), end(model.EventKind.SNOOZED, 1),
        claim(2), end(model.EventKind.RETRYING, 2, "timed out"),
        claim(3), end(model.EventKind.CANCELLED, 3, "cancelled while running"),
    ]  # fmt: skip
    job = _job(status=model.JobStatus.CANCELLED, attempt=3)
    outcomes = [(a.attempt, a.outcome.value) for a in derivation.attempts_of(job, events, 50)]
    assert outcomes == [(1, "SNOOZED"), (2, "TIMED_OUT"), (3, "CANCELLED")]
    assert [a.attempt for a in derivation.attempts_of(job, events, 2)] == [2, 3]


def test_an_end_written_without_its_attempt_is_told_from_the_job() -> None:
    """A claim whose end a server before migration 0015 wrote (no attempt on it): the job's
    last attempt ended as the job did, an earlier one in a retry."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    events = [AttemptEvent(model.EventKind.CLAIMED, at, n, "w", None) for n in (1, 2)]
    job = _job(status=model.JobStatus.FAILED, attempt=2, finished_at=at, error="boom")
    found = [(a.outcome.value, a.error) for a in derivation.attempts_of(job, events, 50)]
    assert found == [("RETRIED", None), ("FAILED", "boom")]
    assert derivation.attempts_of(_job(attempt=2), events, 50)[-1].outcome.value == "RUNNING"
