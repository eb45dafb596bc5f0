"""Durability: `kill -9` the server and restart it on the same database (SQLite or PostgreSQL).

Attacked: the promise that an acknowledged write is a committed write (WAL with
synchronous=NORMAL survives a process crash). Proven: every enqueue the server answered
with a job, while several clients were enqueueing at the moment of the crash, is still
there with its payload after a restart (for one server process and for `--workers 2`);
completed jobs keep their status, result and worker; a RUNNING job keeps its holder and
lease across the crash, and one whose short lease ran out while the server was down is
sent back to PENDING by the restarted server's own expiry loop, with no request needed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from conftest import Server

ENQUEUERS = 4
ACKS_BEFORE_CRASH = 60
DEADLINE = 20.0

JOB_FIELDS = "id status payload result workerId attempt retryCount leaseExpiresAt finishedAt"
ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id payload } } }"
ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
CLAIM_MANY = f"""mutation($limit: Int!, $lease: Int) {{
  claimJobs(limit: $limit, leaseSeconds: $lease) {{ {JOB_FIELDS} }}
}}"""
COMPLETE = f"""mutation($id: ID!, $attempt: Int, $result: JSON) {{
  completeJob(id: $id, attempt: $attempt, result: $result) {{ {JOB_FIELDS} }}
}}"""
JOB = f"query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} error }} }}"
TOTAL = "{ jobs(first: 1) { totalCount } }"
STATS = "{ queueStats { counts { pending running completed failed cancelled } } }"


def ok(server: Server, query: str, variables: dict[str, Any] | None = None, key: str | None = None) -> Any:
    return server.gql(query, variables, key=key).ok()


def crash(server: Server) -> None:
    """kill -9 the server and every process it started (uvicorn's workers share its group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    server.stop(signal.SIGKILL)
    assert server.process.returncode == -signal.SIGKILL


def restart(start_server: Callable[..., Server], old: Server, **settings: Any) -> Server:
    """A new server on the old database; its admin key is the old one (no new key is printed)."""
    return start_server(database_url=old.database_url, admin_key=old.admin_key, **settings)


def jobs_by_id(server: Server, ids: list[str]) -> dict[str, dict[str, Any] | None]:
    """job(id) for every id, 25 aliased look-ups per request (within the alias limit)."""
    found: dict[str, dict[str, Any] | None] = {}
    for start in range(0, len(ids), 25):
        chunk = ids[start : start + 25]
        params = ", ".join(f"$i{n}: ID!" for n in range(len(chunk)))
        fields = " ".join(f"j{n}: job(id: $i{n}) {{ id status payload }}" for n in range(len(chunk)))
        data = ok(server, f"query({params}) {{ {fields} }}", {f"i{n}": i for n, i in enumerate(chunk)})
        found.update({i: data[f"j{n}"] for n, i in enumerate(chunk)})
    return found


# --- acknowledged enqueues survive a crash ----------------------------------------------------


def enqueue_until_stopped(
    url: str, key: str, thread: int, stop: threading.Event, acked: list[tuple[str, dict[str, Any]]]
) -> int:
    """Enqueue in a loop, recording each job the server acknowledged; returns how many were sent."""
    sent = 0
    with httpx.Client(timeout=5) as client:
        while not stop.is_set():
            payload = {"thread": thread, "seq": sent, "text": f"durable-{thread}-{sent}"}
            sent += 1
            try:
                response = client.post(
                    url,
                    json={"query": ENQUEUE, "variables": {"input": {"type": "email", "payload": payload}}},
                    headers={"Authorization": f"Bearer {key}"},
                )
                body = response.json()
            except (httpx.HTTPError, ValueError):
                return sent  # the server is gone; this request may or may not have been committed
            job = ((body.get("data") or {}).get("enqueueJob") or {}).get("job")
            if response.status_code == 200 and not body.get("errors") and job:
                acked.append((job["id"], job["payload"]))
    return sent


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-processes"])
def test_every_acknowledged_enqueue_survives_kill_9(
    start_server: Callable[..., Server], unique: Callable[[str], str], workers: int
) -> None:
    old = start_server(workers=workers)
    producer = old.make_key(unique("producer"), "PRODUCER")
    acked: list[tuple[str, dict[str, Any]]] = []
    stop = threading.Event()
    with ThreadPoolExecutor(ENQUEUERS) as pool:
        try:
            futures = [
                pool.submit(enqueue_until_stopped, old.graphql_url, producer, n, stop, acked)
                for n in range(ENQUEUERS)
            ]
            deadline = time.monotonic() + DEADLINE
            while len(acked) < ACKS_BEFORE_CRASH and time.monotonic() < deadline:
                assert not any(f.done() for f in futures), [f.result() for f in futures if f.done()]
                time.sleep(0.02)
            assert len(acked) >= ACKS_BEFORE_CRASH, f"only {len(acked)} enqueues acknowledged in {DEADLINE}s"
            crash(old)  # while all enqueuers are mid-loop
        finally:
            stop.set()
        sent = sum(f.result(timeout=30) for f in futures)

    new = restart(start_server, old)
    ids = [job_id for job_id, _ in acked]
    assert len(set(ids)) == len(ids), "two acknowledged enqueues returned one id"
    found = jobs_by_id(new, ids)
    missing = [job_id for job_id in ids if found[job_id] is None]
    assert not missing, f"{len(missing)} of {len(ids)} acknowledged jobs lost by the crash: {missing[:10]}"
    for job_id, payload in acked:
        assert found[job_id] == {"id": job_id, "status": "PENDING", "payload": payload}

    total = ok(new, TOTAL)["jobs"]["totalCount"]
    assert len(acked) <= total <= sent, "unacknowledged jobs may exist, but never more than were sent"
    # The restarted server takes new work under the old keys and never reuses a committed id.
    (after,) = ok(new, ENQUEUE_MANY, {"inputs": [{"type": "email"}]}, key=producer)["enqueueJobs"]
    assert after["job"]["id"] not in set(ids)


# --- finished and running jobs survive a crash ------------------------------------------------


def enqueue_and_claim(server: Server, worker: str, n: int, lease: int | None = None) -> list[dict[str, Any]]:
    inputs = [{"type": "report", "payload": {"n": i}} for i in range(n)]
    ok(server, ENQUEUE_MANY, {"inputs": inputs})
    claimed = ok(server, CLAIM_MANY, {"limit": n, "lease": lease}, key=worker)["claimJobs"]
    assert len(claimed) == n and all(j["status"] == "RUNNING" for j in claimed), claimed
    return claimed


def test_completed_running_and_expired_jobs_survive_kill_9(
    start_server: Callable[..., Server], unique: Callable[[str], str]
) -> None:
    """One crash for both: the jobs held with a long lease and the finished ones come back as
    they were, and the one whose 1 s lease ran out while the server was down is handled by
    the restarted server's expiry loop (each restart costs seconds of a busy machine)."""
    old = start_server()
    worker_name = unique("worker")
    worker = old.make_key(worker_name, "WORKER")
    claimed = enqueue_and_claim(old, worker, 5)
    finished, running = claimed[:3], claimed[3:]
    before: dict[str, dict[str, Any]] = {}
    for job in finished:
        variables = {"id": job["id"], "attempt": job["attempt"], "result": {"sum": int(job["id"]) * 2}}
        before[job["id"]] = ok(old, COMPLETE, variables, key=worker)["completeJob"]
    before.update({job["id"]: job for job in running})
    (expiring,) = enqueue_and_claim(old, worker, 1, lease=1)  # last, just before the crash
    crash(old)

    # retry_base_seconds=0: the expired attempt is retried at once, so the job is claimable again.
    new = restart(start_server, old, retry_base_seconds=0)
    for job_id, was in before.items():
        now = ok(new, JOB, {"id": job_id})["job"]
        assert {k: now[k] for k in was} == was, f"job {job_id} changed across the crash"
    for job_id in (j["id"] for j in finished):
        assert before[job_id]["status"] == "COMPLETED" and before[job_id]["finishedAt"] is not None
        assert (
            before[job_id]["result"] == {"sum": int(job_id) * 2} and before[job_id]["workerId"] == worker_name
        )

    deadline = time.monotonic() + 10
    while True:
        now = ok(new, JOB, {"id": expiring["id"]})["job"]  # a read: it never expires leases itself
        if now["status"] != "RUNNING" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert now["status"] == "PENDING", f"the expired lease was not handled without a request: {now}"
    assert (now["retryCount"], now["attempt"], now["workerId"], now["leaseExpiresAt"]) == (1, 1, None, None)
    assert now["error"] == "lease expired"
    counts = ok(new, STATS)["queueStats"]["counts"]
    assert counts == {"pending": 1, "running": 2, "completed": 3, "failed": 0, "cancelled": 0}

    # The holder (its key survived too) can still finish what it held before the crash.
    for job in running:
        done = ok(new, COMPLETE, {"id": job["id"], "attempt": job["attempt"]}, key=worker)["completeJob"]
        assert done["status"] == "COMPLETED" and done["workerId"] == worker_name
    # And the expired job goes to the next claim, as its second attempt.
    other_name = unique("worker")
    other = new.make_key(other_name, "WORKER")
    (again,) = ok(new, CLAIM_MANY, {"limit": 1}, key=other)["claimJobs"]
    assert (again["id"], again["attempt"], again["workerId"]) == (expiring["id"], 2, other_name)
