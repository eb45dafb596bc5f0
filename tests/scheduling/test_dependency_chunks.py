"""Many dependents settled in chunks (API.md section 10, storage/operations/settlements.py), through real
servers on SQLite and PostgreSQL.

A job with DEPENDENTS dependents (enqueued with `enqueueJobs`, 1,000 a call) ends; its
dependents are cancelled (or released) in short transactions after its own. Proven here:
- a cancelled root's dependents are cancelled in several transactions: another connection
  sees some cancelled and some not, and an enqueue and a claim sent meanwhile are answered
  while the cascade is still under way; in the end every dependent is CANCELLED with error
  `dependency <root> CANCELLED` and exactly one CANCELLED event, and the counts are exact;
- a completed root's dependents become claimable in chunks likewise; a dependent that also
  waits for another job stays waiting (never claimable) until that one completes too;
- a server killed (SIGKILL) in the middle of a cascade leaves it to the next server on the
  database, which finishes it: every dependent cancelled once, one event each;
- while a cascade runs, a second dependency of the same dependents completes (a release of
  its own, chunked too): a claim loop sent all along claims none of them, and all end
  CANCELLED;
- a job retried while a cascade is still on its way to it stays retried (the cascade passes
  it by, as it would have had it ended before the retry);
- a job retried while a release is still on its way to it counts that dependency as not done
  until the release reaches it: it waits for its other, failed dependency, and is claimable
  only once that one has been retried and completed;
- a root retried and completed while its cascade is under way releases its new dependent
  only after the cascade has cancelled every old one, none of which is ever claimed.
Each waits for what it observes (counts read from the database), with a generous deadline;
no timing is asserted.
"""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import Server, serving

from queuelog.storage.operations import settlements

DEPENDENTS = 20_000
DEADLINE_SECONDS = 180
TYPE_POOL = [f"c{i:02d}" for i in range(60)]
_fresh_types = iter(TYPE_POOL)
_names = itertools.count(1)

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
CLAIM = "mutation($types: [String!]) { claimJob(types: $types) { id attempt } }"
CLAIM_MANY = "mutation($types: [String!], $limit: Int!) { claimJobs(types: $types, limit: $limit) { id } }"
COMPLETE = "mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt) { status } }"
FAIL = """mutation($id: ID!, $attempt: Int) {
  failJob(id: $id, attempt: $attempt, error: "boom", retryable: false) { status } }"""
CANCEL = "mutation($id: ID!) { cancelJob(id: $id) { status } }"
RETRY = "mutation($id: ID!) { retryJob(id: $id) { status waitingFor } }"
JOB = "query($id: ID!) { job(id: $id) { status waitingFor error events(last: 10) { kind } } }"
TYPE_COUNTS = "{ queueStats { byType { type counts { pending running completed failed cancelled } } } }"


@dataclass
class Queue:
    """One test's keys on a server, and its own job types."""

    server: Server
    producer: str
    worker: str

    def gql(self, query: str, variables: dict[str, Any] | None = None, key: str | None = None) -> Any:
        return self.server.gql(query, variables, key=key).ok()

    def enqueue(self, job_type: str, **fields: Any) -> str:
        answer = self.gql(ENQUEUE, {"input": {"type": job_type, **fields}}, key=self.producer)
        return str(answer["enqueueJob"]["job"]["id"])

    def fill(self, job_type: str, count: int, depends_on: list[str]) -> list[str]:
        """`count` jobs of `job_type` waiting for `depends_on`, 1,000 a call; their ids."""
        made: list[str] = []
        while len(made) < count:
            inputs = [{"type": job_type, "dependsOn": depends_on}] * min(1000, count - len(made))
            answer = self.gql(ENQUEUE_MANY, {"inputs": inputs}, key=self.producer)["enqueueJobs"]
            made += [item["job"]["id"] for item in answer]
        return made

    def claim(self, job_type: str) -> dict[str, Any] | None:
        job: dict[str, Any] | None = self.gql(CLAIM, {"types": [job_type]}, key=self.worker)["claimJob"]
        return job

    def held(self, job_id: str, job_type: str) -> dict[str, Any]:
        job = self.claim(job_type)
        assert job is not None and job["id"] == job_id, job
        return job

    def complete(self, job: dict[str, Any]) -> None:
        answer = self.gql(COMPLETE, {"id": job["id"], "attempt": job["attempt"]}, key=self.worker)
        assert answer["completeJob"]["status"] == "COMPLETED"

    def cancel(self, job_id: str) -> None:
        assert self.gql(CANCEL, {"id": job_id}, key=self.producer)["cancelJob"]["status"] == "CANCELLED"

    def job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self.gql(JOB, {"id": job_id})["job"]
        return job

    def counts(self, job_type: str) -> dict[str, int]:
        for entry in self.gql(TYPE_COUNTS)["queueStats"]["byType"]:
            if entry["type"] == job_type:
                return dict(entry["counts"])
        return {"pending": 0, "running": 0, "completed": 0, "failed": 0, "cancelled": 0}

    def probe(self, job_type: str) -> None:
        """Another client's enqueue, then a worker's claim of what it enqueued."""
        job_id = self.enqueue(job_type)
        assert self.held(job_id, job_type)["id"] == job_id


def fresh_type() -> str:
    return next(_fresh_types)


def count(server: Server, job_type: str, condition: str) -> int:
    (row,) = server.sql(f"SELECT count(*) FROM jobs WHERE type = :t AND {condition}", t=job_type)
    return int(row[0])


CANCELLED = "status = 'cancelled'"
CLAIMABLE = "status = 'pending' AND waiting_for = 0 AND delayed = 0"


def watch(progress: Callable[[], int], total: int, meanwhile: Callable[[], None]) -> list[tuple[int, int]]:
    """Run `meanwhile` again and again until `progress()` reaches `total`; the progress read
    just before and just after each run."""
    seen = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        before = progress()
        if before >= total:
            return seen
        meanwhile()
        seen.append((before, progress()))
        assert time.monotonic() < deadline, f"stuck at {seen[-1]} of {total}"


def answered_midway(seen: list[tuple[int, int]], total: int) -> bool:
    """Whether a request was answered while the settling was under way, before and after it."""
    return any(before > 0 and after < total for before, after in seen)


def wait_for(progress: Callable[[], int], total: int) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while (reached := progress()) < total:
        assert time.monotonic() < deadline, f"stuck at {reached} of {total}"
        time.sleep(0.05)


def cancelled_by(queue: Queue, job_type: str, root: str, status: str, total: int) -> None:
    """Every job of `job_type` CANCELLED by `root` ending `status`, one CANCELLED event each,
    and the counts say so."""
    server = queue.server
    rows = server.sql(
        "SELECT status, error, count(*) FROM jobs WHERE type = :t GROUP BY status, error", t=job_type
    )
    assert rows == [("cancelled", f"dependency {root} {status}", total)], rows
    (events,) = server.sql(
        "SELECT count(*), count(DISTINCT e.job_id) FROM job_events e JOIN jobs j ON j.id = e.job_id"
        " WHERE j.type = :t AND e.kind = 'CANCELLED'",
        t=job_type,
    )
    assert tuple(events) == (total, total)
    assert queue.counts(job_type) == {
        "pending": 0,
        "running": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": total,
    }


def nothing_left_to_settle(server: Server) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while server.sql("SELECT count(*) FROM dependency_settlements")[0][0]:
        assert time.monotonic() < deadline, "settlements left"
        time.sleep(0.05)


def test_a_sweepers_chunks_grow_at_most_twofold_and_shrink_at_most_by_half() -> None:
    target = settlements.CHUNK_SECONDS
    assert settlements.next_chunk_size(1000, target / 100, target) == 2000
    assert settlements.next_chunk_size(1000, target * 100, target) == 500  # one slow chunk
    assert settlements.next_chunk_size(1000, target * 2, target) == 500
    assert settlements.next_chunk_size(1000, target * 1.25, target) == 800
    assert settlements.next_chunk_size(settlements.LARGEST_CHUNK, 0.0, target) == settlements.LARGEST_CHUNK
    smallest = settlements.SMALLEST_CHUNK
    assert settlements.next_chunk_size(smallest, 10.0, target) == smallest


@pytest.fixture(scope="module")
def chunks_server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=",".join(TYPE_POOL)) as running:
        yield running


def keys_on(server: Server) -> Queue:
    n = next(_names)
    return Queue(
        server, server.make_key(f"producer-{n}", "producer"), server.make_key(f"worker-{n}", "worker")
    )


@pytest.fixture
def queue(chunks_server: Server) -> Queue:
    return keys_on(chunks_server)


def test_a_cancelled_roots_dependents_are_cancelled_in_chunks_while_requests_are_answered(
    queue: Queue,
) -> None:
    top, dep, probe = fresh_type(), fresh_type(), fresh_type()
    root = queue.enqueue(top)
    queue.fill(dep, DEPENDENTS, [root])
    queue.cancel(root)
    seen = watch(lambda: count(queue.server, dep, CANCELLED), DEPENDENTS, lambda: queue.probe(probe))
    assert answered_midway(seen, DEPENDENTS), f"the cascade was not seen under way: {seen[:5]}"
    cancelled_by(queue, dep, root, "CANCELLED", DEPENDENTS)
    nothing_left_to_settle(queue.server)


def test_a_completed_roots_dependents_become_claimable_in_chunks_but_none_early(queue: Queue) -> None:
    top, other_t, dep, pair, probe = fresh_type(), fresh_type(), fresh_type(), fresh_type(), fresh_type()
    root, other = queue.enqueue(top), queue.enqueue(other_t)
    queue.fill(dep, DEPENDENTS, [root])
    pairs = queue.fill(pair, 50, [root, other])  # they wait for `other` too

    def probe_and_claim_no_pair() -> None:
        queue.probe(probe)
        assert queue.claim(pair) is None, "a job waiting for `other` was claimed"

    queue.complete(queue.held(root, top))
    seen = watch(lambda: count(queue.server, dep, CLAIMABLE), DEPENDENTS, probe_and_claim_no_pair)
    assert answered_midway(seen, DEPENDENTS), f"the release was not seen under way: {seen[:5]}"
    nothing_left_to_settle(queue.server)
    assert queue.claim(pair) is None
    assert {queue.job(p)["waitingFor"] for p in pairs[:3] + pairs[-3:]} == {1}
    assert count(queue.server, pair, "waiting_for = 1 AND delayed = 2") == 50
    claimed = queue.gql(CLAIM_MANY, {"types": [dep], "limit": 100}, key=queue.worker)["claimJobs"]
    assert len(claimed) == 100
    assert queue.counts(dep)["pending"] == DEPENDENTS - 100

    queue.complete(queue.held(other, other_t))
    claimed = queue.gql(CLAIM_MANY, {"types": [pair], "limit": 100}, key=queue.worker)["claimJobs"]
    assert sorted(job["id"] for job in claimed) == sorted(pairs)


def test_a_cascade_under_way_is_finished_by_the_next_server_after_a_kill(
    start_server: Callable[..., Server],
) -> None:
    first = start_server(job_types=",".join(TYPE_POOL))
    queue = keys_on(first)
    top, dep = fresh_type(), fresh_type()
    root = queue.enqueue(top)
    queue.fill(dep, DEPENDENTS, [root])
    queue.cancel(root)
    deadline = time.monotonic() + DEADLINE_SECONDS
    while count(first, dep, CANCELLED) == 0:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    first.stop(signal.SIGKILL)
    left_at = count(first, dep, CANCELLED)
    assert 0 < left_at < DEPENDENTS, f"the cascade was not under way when the server died: {left_at}"

    second = start_server(
        database_url=first.database_url, admin_key=first.admin_key, job_types=",".join(TYPE_POOL)
    )
    queue = Queue(second, queue.producer, queue.worker)
    wait_for(lambda: count(second, dep, CANCELLED), DEPENDENTS)
    cancelled_by(queue, dep, root, "CANCELLED", DEPENDENTS)
    nothing_left_to_settle(second)


def test_no_dependent_is_claimable_while_a_cascade_and_a_release_of_them_run_at_once(queue: Queue) -> None:
    """Every dependent waits for R and Q. R is cancelled; while its cascade is under way Q
    completes, and its release counts Q done for each dependent not cancelled yet: they
    still wait for R. A claim loop runs throughout and must get none of them."""
    top, second, dep = fresh_type(), fresh_type(), fresh_type()
    r, q = queue.enqueue(top), queue.enqueue(second)
    held_q = queue.held(q, second)
    queue.fill(dep, DEPENDENTS, [r, q])
    queue.cancel(r)
    completed_midway = False

    def complete_q_then_claim() -> None:
        nonlocal completed_midway
        if not completed_midway:
            before = count(queue.server, dep, CANCELLED)
            queue.complete(held_q)
            completed_midway = before > 0 and count(queue.server, dep, CANCELLED) < DEPENDENTS
            assert completed_midway, f"the cascade was not under way when Q completed: {before}"
        assert queue.claim(dep) is None, "a job waiting for a CANCELLED dependency was claimed"

    watch(lambda: count(queue.server, dep, CANCELLED), DEPENDENTS, complete_q_then_claim)
    assert completed_midway
    cancelled_by(queue, dep, r, "CANCELLED", DEPENDENTS)
    nothing_left_to_settle(queue.server)
    assert queue.claim(dep) is None


def test_a_job_retried_before_a_cascade_reaches_it_stays_retried(queue: Queue) -> None:
    """B waits for R1 and R2. R2 is cancelled: B with it. R1 is cancelled: its cascade walks
    DEPENDENTS jobs before B. B retried meanwhile waits again for both, as it would have
    had the cascade ended before the retry: the cascade passes it by."""
    top, small, dep, last = fresh_type(), fresh_type(), fresh_type(), fresh_type()
    r1, r2 = queue.enqueue(top), queue.enqueue(small)
    queue.fill(dep, DEPENDENTS, [r1])
    b = queue.enqueue(last, dependsOn=[r1, r2])
    queue.cancel(r2)
    assert queue.job(b)["error"] == f"dependency {r2} CANCELLED"
    queue.cancel(r1)
    retried = queue.gql(RETRY, {"id": b})["retryJob"]
    reached = count(queue.server, dep, CANCELLED)
    assert reached < DEPENDENTS, "the cascade had ended before the retry"
    assert retried == {"status": "PENDING", "waitingFor": 2}
    wait_for(lambda: count(queue.server, dep, CANCELLED), DEPENDENTS)
    nothing_left_to_settle(queue.server)
    seen = queue.job(b)
    assert (seen["status"], seen["waitingFor"]) == ("PENDING", 2), seen
    assert [e["kind"] for e in seen["events"]] == ["ENQUEUED", "CANCELLED", "RETRIED"]
    assert queue.claim(last) is None
    cancelled_by(queue, dep, r1, "CANCELLED", DEPENDENTS)


def test_a_job_retried_before_a_release_reaches_it_counts_that_dependency_once(queue: Queue) -> None:
    """D waits for P and Q. Q fails: D is cancelled. P completes: its release walks
    DEPENDENTS jobs before D. D retried meanwhile waits for both (the release has not
    counted P for it yet); when the release reaches it, for Q only: never claimable before
    Q has been retried and completed."""
    p_type, q_type, dep, last = fresh_type(), fresh_type(), fresh_type(), fresh_type()
    p, q = queue.enqueue(p_type), queue.enqueue(q_type)
    queue.fill(dep, DEPENDENTS, [p])
    d = queue.enqueue(last, dependsOn=[p, q])
    failed = queue.gql(FAIL, {"id": q, "attempt": queue.held(q, q_type)["attempt"]}, key=queue.worker)
    assert failed["failJob"]["status"] == "FAILED"
    assert queue.job(d)["status"] == "CANCELLED"
    queue.complete(queue.held(p, p_type))
    retried = queue.gql(RETRY, {"id": d})["retryJob"]
    assert count(queue.server, dep, CLAIMABLE) < DEPENDENTS, "the release had ended before the retry"
    assert retried == {"status": "PENDING", "waitingFor": 2}
    wait_for(lambda: count(queue.server, dep, CLAIMABLE), DEPENDENTS)
    nothing_left_to_settle(queue.server)
    assert queue.job(d)["waitingFor"] == 1, "P is counted done once, Q not"
    assert queue.claim(last) is None

    queue.gql(RETRY, {"id": q})
    queue.complete(queue.held(q, q_type))
    assert queue.held(d, last)["id"] == d


def test_a_root_retried_and_completed_during_its_cascade_releases_only_after_it(queue: Queue) -> None:
    """R is cancelled; while its cascade is under way R is retried, gets a new dependent E,
    and completes. The cascade still cancels every dependent R had when it was cancelled (as
    it would have before the retry), and only then does R's completion release what waits
    for it now: E, and none of the others."""
    top, dep, late = fresh_type(), fresh_type(), fresh_type()
    r = queue.enqueue(top)
    queue.fill(dep, DEPENDENTS, [r])
    queue.cancel(r)
    assert queue.gql(RETRY, {"id": r})["retryJob"]["status"] == "PENDING"
    e = queue.enqueue(late, dependsOn=[r])
    queue.complete(queue.held(r, top))
    assert count(queue.server, dep, CANCELLED) < DEPENDENTS, "the cascade had ended before R completed"

    def claim_none_of_them() -> None:
        assert queue.claim(dep) is None, "a dependent of the cancelled R was claimed"

    watch(lambda: count(queue.server, dep, CANCELLED), DEPENDENTS, claim_none_of_them)
    nothing_left_to_settle(queue.server)
    cancelled_by(queue, dep, r, "CANCELLED", DEPENDENTS)
    assert queue.held(e, late)["id"] == e
