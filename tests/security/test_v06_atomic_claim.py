"""V-06 (atomic claim): under concurrent claims no job is handed out twice.

Attacked: 8 worker keys x 3 threads each (24 concurrent HTTP clients released together) racing
claimJob and claimJobs(limit 1..5) over 200 PENDING jobs until the queue is empty.

Proven: every job is claimed exactly once: no id is returned twice, 200 ids are returned in all
(exactly the enqueued ones), all 200 jobs are RUNNING with attempt 1 and the workerId of the key
whose claim returned them (checked through GraphQL and in the database), and each job has
exactly one CLAIMED event. A claim never fails (no errors under contention). Kept modest: the
wider concurrency suite lives elsewhere.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from conftest import Server

JOBS = 200
WORKER_KEYS = 8
THREADS_PER_KEY = 3
DEADLINE_SECONDS = 45
CLAIM_ONE = "mutation { claimJob { id attempt workerId status } }"
CLAIM_MANY = "mutation($n: Int!) { claimJobs(limit: $n) { id attempt workerId status } }"


class Claimer(threading.Thread):
    """Claims until the queue answers empty; records what it got and any error."""

    def __init__(self, server: Server, name: str, key: str, start: threading.Barrier, seed: int) -> None:
        super().__init__(daemon=True)
        self.server, self.worker, self.key, self.start_line, self.seed = server, name, key, start, seed
        self.claimed: list[dict[str, Any]] = []
        self.errors: list[Any] = []

    def run(self) -> None:
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {self.key}"}) as client:
            self.start_line.wait(timeout=30)
            for round_no in range(JOBS + 1):
                limit = (self.seed + round_no) % 6  # 0: claimJob, 1..5: claimJobs(limit)
                if limit == 0:
                    body = {"query": CLAIM_ONE}
                else:
                    body = {"query": CLAIM_MANY, "variables": {"n": limit}}
                try:
                    reply = client.post(self.server.graphql_url, json=body).json()
                except (httpx.HTTPError, ValueError) as exc:
                    self.errors.append(repr(exc))
                    return
                if reply.get("errors"):
                    self.errors.append(reply["errors"])
                    return
                got = reply["data"]["claimJob"] if limit == 0 else reply["data"]["claimJobs"]
                got = ([got] if got else []) if limit == 0 else got
                if not got:
                    return
                self.claimed += got


@pytest.fixture
def racing_server(start_server: Callable[..., Server]) -> tuple[Server, list[str], dict[str, str]]:
    server = start_server()
    inputs = [{"type": "noop", "payload": {"n": i}} for i in range(JOBS)]
    data = server.gql(
        "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }",
        {"inputs": inputs},
    ).ok()
    job_ids = [item["job"]["id"] for item in data["enqueueJobs"]]
    keys = {f"v06-worker-{i}": server.make_key(f"v06-worker-{i}", "worker") for i in range(WORKER_KEYS)}
    return server, job_ids, keys


def test_concurrent_claims_hand_out_every_job_exactly_once(
    racing_server: tuple[Server, list[str], dict[str, str]],
) -> None:
    server, job_ids, keys = racing_server
    assert len(set(job_ids)) == JOBS
    start = threading.Barrier(WORKER_KEYS * THREADS_PER_KEY)
    claimers = [
        Claimer(server, name, key, start, seed=n * THREADS_PER_KEY + t)
        for n, (name, key) in enumerate(keys.items())
        for t in range(THREADS_PER_KEY)
    ]
    for claimer in claimers:
        claimer.start()
    for claimer in claimers:
        claimer.join(timeout=DEADLINE_SECONDS)
    assert not any(c.is_alive() for c in claimers), "claimers did not finish in time"
    assert not [e for c in claimers for e in c.errors], [e for c in claimers for e in c.errors]

    returned = [job["id"] for c in claimers for job in c.claimed]
    duplicates = [job_id for job_id, n in Counter(returned).items() if n > 1]
    assert not duplicates, f"jobs handed out more than once: {duplicates}"
    assert len(returned) == JOBS and set(returned) == set(job_ids)

    holder = {job["id"]: c.worker for c in claimers for job in c.claimed}
    for c in claimers:
        for job in c.claimed:
            assert job == {"id": job["id"], "attempt": 1, "workerId": c.worker, "status": "RUNNING"}, job

    counts = server.gql("{ queueStats { counts { pending running } } }").ok()["queueStats"]["counts"]
    assert counts == {"pending": 0, "running": JOBS}
    rows = server.sql("SELECT id, status, attempt, worker_id FROM jobs")
    claimed_events = Counter(
        job_id for (job_id,) in server.sql("SELECT job_id FROM job_events WHERE kind = 'CLAIMED'")
    )
    assert len(rows) == JOBS
    for job_id, status, attempt, worker_id in rows:
        assert (status, attempt, worker_id) == ("running", 1, holder[str(job_id)]), job_id
    assert claimed_events == Counter({int(job_id): 1 for job_id in job_ids})
