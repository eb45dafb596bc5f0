"""Probing jobs one may not see through the errors of mutations (API.md sections 2 and 3).

Attacked, on SQLite and PostgreSQL: a worker sending `heartbeatJob`, `completeJob`, `failJob`
(retryable and not), `completeJobs` and `completeAndClaimJobs`, with and without an attempt,
on jobs it cannot see: PENDING and never claimed, PENDING again after another worker's failed
attempt, PENDING after its own earlier attempt was failed and retried, RUNNING by another
worker (also one it held before), COMPLETED and FAILED by another worker, CANCELLED before
any claim; a producer sending `cancelJob`, and `enqueueJob` with `dependsOn`, on another
producer's jobs in each of those states; `retryJob` and `cancelJob` from roles that may never
call them. Each answer is set beside the one for an id that never existed.

Proven: each answer is the never-existing id's, byte for byte once the id is swapped (the
whole error: message, code, path), so nothing tells a job that exists but is not the caller's
from one that does not exist; `rejected` lists only ids. A worker's reports on the jobs it can
see (RUNNING under it with the wrong attempt, COMPLETED or FAILED by it) still answer CONFLICT
saying why. A real `queuelog worker` whose job was taken over by another worker (its lease
expired) gets NOT_FOUND for its heartbeat and completion: it logs one "lease lost" line and the
job "lost", with no traceback, leaves the new holder's attempt alone and keeps serving.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, serving

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
CLAIM = 'mutation { claimJob(types: ["email"]) { id attempt } }'
COMPLETE = "mutation($id: ID!) { completeJob(id: $id) { id } }"
FAIL = (
    "mutation($id: ID!, $retryable: Boolean!, $in: Int)"
    ' { failJob(id: $id, error: "x", retryable: $retryable, retryInSeconds: $in) { status } }'
)
CANCEL = "mutation($id: ID!) { cancelJob(id: $id) { id } }"
ADMIN_JOB = "query($id: ID!) { job(id: $id) { status workerId attempt leaseExpiresAt result error } }"
MISSING = "987654321"
ONE_JOB_REPORTS: dict[str, str] = {
    "heartbeatJob": "mutation($id: ID!, $a: Int) { heartbeatJob(id: $id, attempt: $a) { id } }",
    "completeJob": "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a, result: {x: 1}) { id } }",
    "failJob retryable": 'mutation($id: ID!, $a: Int) { failJob(id: $id, attempt: $a, error: "e") { id } }',
    "failJob final": (
        'mutation($id: ID!, $a: Int) { failJob(id: $id, attempt: $a, error: "e", retryable: false) { id } }'
    ),
}
BATCH_REPORTS: dict[str, str] = {
    "completeJobs": (
        "mutation($id: ID!, $a: Int)"
        " { completeJobs(items: [{id: $id, attempt: $a}]) { completed { id } rejected } }"
    ),
    "completeAndClaimJobs": (
        "mutation($id: ID!, $a: Int) { completeAndClaimJobs(items: [{id: $id, attempt: $a}], limit: 1,"
        ' types: ["nothing-here"]) { completed { id } rejected claimed { id } } }'
    ),
}
HIDDEN_FROM_THE_WORKER = (
    "pending",
    "pending-after-another-workers-attempt",
    "pending-after-its-own-attempt",
    "running-by-another",
    "running-by-another-held-before",
    "completed-by-another",
    "failed-by-another",
    "cancelled",
)


@dataclass
class World:
    server: Server
    worker: str  # the prober
    other_worker: str
    producer: str  # enqueued every job below
    other_producer: str  # the producer prober
    viewer: str
    jobs: dict[str, str]  # state -> id
    own: dict[str, tuple[str, int]]  # the prober's own jobs: state -> (id, attempt)


def gql_ok(server: Server, query: str, variables: dict[str, Any], key: str) -> Any:
    return server.gql(query, variables, key=key).ok()


def enqueue(server: Server, producer: str, job_type: str = "email", **fields: Any) -> str:
    data = gql_ok(server, ENQUEUE, {"input": {"type": job_type, **fields}}, producer)
    return str(data["enqueueJob"]["job"]["id"])


def claim(server: Server, worker: str, expected: str) -> int:
    claimed = gql_ok(server, CLAIM, {}, worker)["claimJob"]
    assert claimed is not None and claimed["id"] == expected, (claimed, expected)
    return int(claimed["attempt"])


def fail(server: Server, worker: str, job_id: str, retryable: bool, retry_in: int | None = None) -> None:
    gql_ok(server, FAIL, {"id": job_id, "retryable": retryable, "in": retry_in}, worker)


@pytest.fixture(scope="module")
def world(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Jobs in every state the prober cannot see, and some it can. Claims take only `email`
    jobs and each follows its job's enqueue, so every claim gets the job it is meant to."""
    with serving(backend, tmp_path_factory, job_types="email,report", retry_base_seconds=3600) as server:
        keys = {
            role: server.make_key(f"probe-{role}", role.split("-")[-1]) for role in ("worker", "other-worker")
        }
        producer = server.make_key("probe-producer", "producer")
        other_producer = server.make_key("probe-other-producer", "producer")
        viewer = server.make_key("probe-viewer", "viewer")
        worker, other = keys["worker"], keys["other-worker"]
        jobs: dict[str, str] = {}
        jobs["pending"] = enqueue(server, producer, "report")
        jobs["pending-after-another-workers-attempt"] = enqueue(server, producer)
        claim(server, other, jobs["pending-after-another-workers-attempt"])
        fail(server, other, jobs["pending-after-another-workers-attempt"], True, 3600)
        jobs["pending-after-its-own-attempt"] = enqueue(server, producer)
        claim(server, worker, jobs["pending-after-its-own-attempt"])
        fail(server, worker, jobs["pending-after-its-own-attempt"], True, 3600)
        jobs["running-by-another"] = enqueue(server, producer)
        claim(server, other, jobs["running-by-another"])
        jobs["running-by-another-held-before"] = enqueue(server, producer)
        claim(server, worker, jobs["running-by-another-held-before"])
        fail(server, worker, jobs["running-by-another-held-before"], True, 0)
        claim(server, other, jobs["running-by-another-held-before"])
        jobs["completed-by-another"] = enqueue(server, producer)
        claim(server, other, jobs["completed-by-another"])
        gql_ok(server, COMPLETE, {"id": jobs["completed-by-another"]}, other)
        jobs["failed-by-another"] = enqueue(server, producer, maxRetries=0)
        claim(server, other, jobs["failed-by-another"])
        fail(server, other, jobs["failed-by-another"], False)
        jobs["cancelled"] = enqueue(server, producer, "report")
        gql_ok(server, CANCEL, {"id": jobs["cancelled"]}, producer)
        own: dict[str, tuple[str, int]] = {}
        for state in ("running", "completed", "failed"):
            job_id = enqueue(server, producer, maxRetries=0)
            own[state] = (job_id, claim(server, worker, job_id))
        gql_ok(server, COMPLETE, {"id": own["completed"][0]}, worker)
        fail(server, worker, own["failed"][0], False)
        expected = {
            "pending": ("PENDING", None),
            "pending-after-another-workers-attempt": ("PENDING", None),
            "pending-after-its-own-attempt": ("PENDING", None),
            "running-by-another": ("RUNNING", "probe-other-worker"),
            "running-by-another-held-before": ("RUNNING", "probe-other-worker"),
            "completed-by-another": ("COMPLETED", "probe-other-worker"),
            "failed-by-another": ("FAILED", "probe-other-worker"),
            "cancelled": ("CANCELLED", None),
        }
        for state, job_id in jobs.items():
            job = gql_ok(server, ADMIN_JOB, {"id": job_id}, server.admin_key)["job"]
            assert (job["status"], job["workerId"]) == expected[state], (state, job)
        yield World(server, worker, other, producer, other_producer, viewer, jobs, own)


def answer(server: Server, query: str, variables: dict[str, Any], key: str, job_id: str) -> dict[str, Any]:
    """The whole response body, with `job_id` written as the never-existing id."""
    body = server.gql(query, variables, key=key).body
    return json.loads(
        json.dumps(body).replace(f'"{job_id}"', f'"{MISSING}"').replace(f"job {job_id} ", f"job {MISSING} ")
    )


def snapshot(world: World) -> dict[str, Any]:
    server = world.server
    return {
        job_id: gql_ok(server, ADMIN_JOB, {"id": job_id}, server.admin_key)["job"]
        for job_id in world.jobs.values()
    }


@pytest.mark.parametrize("report", ONE_JOB_REPORTS.values(), ids=ONE_JOB_REPORTS.keys())
def test_a_worker_cannot_tell_a_job_it_may_not_see_from_a_missing_one(world: World, report: str) -> None:
    server = world.server
    before = snapshot(world)
    for attempt in (None, 1, 2):
        missing = server.gql(report, {"id": MISSING, "a": attempt}, key=world.worker).body
        assert missing["data"] is None and [e["extensions"]["code"] for e in missing["errors"]] == [
            "NOT_FOUND"
        ]
        assert missing["errors"][0]["message"] == f"job {MISSING} not found", missing
        for state in HIDDEN_FROM_THE_WORKER:
            job_id = world.jobs[state]
            probed = answer(server, report, {"id": job_id, "a": attempt}, world.worker, job_id)
            assert probed == missing, (state, attempt, probed)
    assert snapshot(world) == before  # and nothing changed


@pytest.mark.parametrize("report", BATCH_REPORTS.values(), ids=BATCH_REPORTS.keys())
def test_batched_completions_reject_a_hidden_job_as_a_missing_one(world: World, report: str) -> None:
    server = world.server
    before = snapshot(world)
    missing = server.gql(report, {"id": MISSING, "a": None}, key=world.worker).ok()
    (outcome,) = missing.values()
    assert outcome["completed"] == [] and outcome["rejected"] == [MISSING], missing
    for state in HIDDEN_FROM_THE_WORKER:
        job_id = world.jobs[state]
        for attempt in (None, 1):
            probed = answer(server, report, {"id": job_id, "a": attempt}, world.worker, job_id)
            assert probed == {"data": missing}, (state, attempt, probed)
    assert snapshot(world) == before


def test_a_producer_cannot_tell_another_producers_job_from_a_missing_one(world: World) -> None:
    server = world.server
    before = snapshot(world)
    probes = {
        "cancelJob": CANCEL,
        "enqueueJob dependsOn": (
            'mutation($id: ID!) { enqueueJob(input: {type: "email", dependsOn: [$id]}) { job { id } } }'
        ),
    }
    for name, query in probes.items():
        missing = server.gql(query, {"id": MISSING}, key=world.other_producer).body
        assert [e["extensions"]["code"] for e in missing["errors"]] == ["NOT_FOUND"], (name, missing)
        for state, job_id in world.jobs.items():
            assert answer(server, query, {"id": job_id}, world.other_producer, job_id) == missing, (
                name,
                state,
            )
    assert snapshot(world) == before


def test_roles_that_may_never_call_an_operation_learn_nothing_from_it(world: World) -> None:
    server = world.server
    calls = {
        "retryJob": (
            "mutation($id: ID!) { retryJob(id: $id) { id } }",
            (world.worker, world.producer, world.viewer),
        ),
        "cancelJob": (CANCEL, (world.worker, world.viewer)),
        "heartbeatJob": (ONE_JOB_REPORTS["heartbeatJob"], (world.producer, world.viewer, server.admin_key)),
    }
    for name, (query, keys) in calls.items():
        for key in keys:
            missing = server.gql(query, {"id": MISSING}, key=key).body
            assert [e["extensions"]["code"] for e in missing["errors"]] == ["FORBIDDEN"], (name, missing)
            for state, job_id in world.jobs.items():
                assert answer(server, query, {"id": job_id}, key, job_id) == missing, (name, state)


def test_a_worker_still_hears_why_a_report_on_its_own_job_is_refused(world: World) -> None:
    server = world.server
    job_id, attempt = world.own["running"]
    for name, report in ONE_JOB_REPORTS.items():
        refused = server.gql(report, {"id": job_id, "a": attempt + 1}, key=world.worker)
        assert refused.codes == ["CONFLICT"], (name, refused.body)
        assert refused.errors[0]["message"] == f"job {job_id} is at attempt {attempt}, not {attempt + 1}"
    for state, status in (("completed", "COMPLETED"), ("failed", "FAILED")):
        job_id, attempt = world.own[state]
        for name, report in ONE_JOB_REPORTS.items():
            for given in (None, attempt):
                refused = server.gql(report, {"id": job_id, "a": given}, key=world.worker)
                assert refused.codes == ["CONFLICT"], (state, name, refused.body)
                assert refused.errors[0]["message"] == f"job {job_id} is {status}, not RUNNING", refused.body
    job_id, attempt = world.own["running"]
    beat = server.gql(ONE_JOB_REPORTS["heartbeatJob"], {"id": job_id, "a": attempt}, key=world.worker)
    assert beat.ok()["heartbeatJob"] == {"id": job_id}  # the right attempt still applies


# --- the SDK worker whose job was taken over ---------------------------------------------------------


HANDLERS = """
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def slow(job):
    (HERE / f"started-{job.id}").touch()
    while not (HERE / "go").exists():
        time.sleep(0.01)
    return {"late": True}


HANDLERS = {"email": slow}
"""
WAIT = 60.0


def wait_for(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {WAIT}s waiting for {what}")
        time.sleep(0.05)
    return value


def test_a_worker_whose_job_was_taken_over_logs_it_lost_in_one_line(
    start_server: Callable[..., Server], tmp_path: Path
) -> None:
    # A 6 s lease: the worker heartbeats every 2 s.
    server = start_server(job_types="email", lease_seconds=6, retry_base_seconds=0)
    sdk_key = server.make_key("sdk-worker", "worker")
    thief = server.make_key("thief", "worker")
    producer = server.make_key("producer", "producer")
    (tmp_path / "handlers.py").write_text(HANDLERS)
    err = tmp_path / "worker.err"
    with err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "queuelog", "worker", "--url", server.url, "--key", sdk_key]
            + ["--handlers", "handlers:HANDLERS", "--concurrency", "1"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:
        job_id = enqueue(server, producer)
        wait_for(lambda: (tmp_path / f"started-{job_id}").exists(), "the handler to start")

        # The lease runs out (as if the worker had stalled) and the thief claims the job: a
        # heartbeat in between would renew the lease, so try again until the thief has it.
        def stolen() -> bool:
            past = server.timestamp(datetime.now(UTC) - timedelta(seconds=1))
            server.sql(
                "UPDATE jobs SET lease_expires_at = :t WHERE id = :id AND status = 'running'",
                t=past,
                id=int(job_id),
            )
            claimed = gql_ok(server, CLAIM, {}, thief)["claimJob"]
            return claimed is not None and claimed["id"] == job_id

        wait_for(stolen, "the thief to take the job over")
        taken = gql_ok(server, ADMIN_JOB, {"id": job_id}, server.admin_key)["job"]
        assert (taken["status"], taken["workerId"], taken["attempt"]) == ("RUNNING", "thief", 2), taken
        wait_for(lambda: "lease lost" in err.read_text(), "the worker's heartbeat to be refused")
        (tmp_path / "go").touch()
        wait_for(lambda: '"outcome": "lost"' in err.read_text(), "the worker's late completion to be refused")
        assert process.poll() is None, err.read_text()  # it keeps serving
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT) == 0, err.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = err.read_text()
    assert "Traceback" not in log, log
    assert [line for line in log.splitlines() if "lease lost" in line] == [
        line for line in log.splitlines() if f"job {job_id}: lease lost" in line
    ] and log.count("lease lost") == 1, log
    after = gql_ok(server, ADMIN_JOB, {"id": job_id}, server.admin_key)["job"]
    assert (after["status"], after["workerId"], after["attempt"], after["result"]) == (
        "RUNNING",
        "thief",
        2,
        None,
    )
