"""Dependencies between jobs (API.md section 10) through the public API over real HTTP.

Every test runs on SQLite and on PostgreSQL against a real `queuelog serve`. The servers of
this module allow many job types; each test takes types of its own (`Deps.type`) and only
ever claims those, so tests sharing a server never see each other's jobs.

Proven here:
- a job with dependencies is PENDING with `waitingFor` > 0 (`dependsOn` lists them) and is
  never claimed before every one is COMPLETED, whatever its priority: a chain of 3 runs in
  order, a chain of 1,000 enqueued in one `enqueueJobs` (`dependsOnItems`) is drained one job
  at a time, each claim returning exactly the next; a diamond's join counts 2 -> 1 -> 0;
- the completion of the last dependency makes the job claimable by the very next request,
  and wakes a claim that is long-polling for its type; a released job with a later `runAt`
  still waits for it; dependents enqueued while their dependency completes are all released;
- a 1,000-job fan-out / fan-in graph goes in with one call, all or nothing: the same call
  with one bad item at its end writes no job and no edge;
- a dependency already COMPLETED counts as done (claimable at once); one FAILED or CANCELLED
  makes the enqueue CONFLICT, nothing written;
- refused input: malformed ids, `dependsOnItems` on enqueueJob, forward / self / negative
  indexes, over 100 dependencies (BAD_USER_INPUT naming the field); an unknown id and
  another producer's job give the same NOT_FOUND; nothing is written by any of them;
- a dependency that ends FAILED (not retryable, out of retries, timed out) or CANCELLED
  (cancelJob, cancelJobs) cancels everything downstream, a few in the same transaction: one
  CANCELLED event each, error `dependency <root id> <STATUS>`, at the root's own moment,
  counts exact; a chain 999 jobs deep the same way, its first links in the failure's own
  transaction and the rest in chunks after it (many dependents: test_dependency_chunks.py);
- `retryJob` / `retryJobs` on a job cancelled that way: PENDING again, waiting for the
  dependencies still not COMPLETED, released when the retried root completes;
- idempotent replays compare `dependsOn` as a set;
- the worker holding a RUNNING job reads the jobs it depends on (with `result`, not
  `error`), and nothing else; not before it holds the job, nor after;
- `oldestPendingSeconds` leaves waiting jobs out, and counts a released one from its release.
- a retried job none of whose dependencies is still open reads `waitingFor: 0`; a producer's
  `oldestPendingSeconds` leaves its waiting jobs out when read among its own jobs too;
- races between transactions on PostgreSQL, each interleaving forced with a lock held by the
  test: a dependent enqueued while a cascade cancels its dependency is cancelled too (or the
  enqueue is a CONFLICT, in the other order); a job retried while its dependency completes
  is released (or counts it done, in the other order), by `retryJob` and `retryJobs`;
- the retention pruner keeps a FAILED job that a retried dependent waits for, and prunes it
  once nothing does.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from conftest import GraphQLResponse, Server, http_client, serving

from queuelog.storage.postgres.connection import conninfo
from queuelog.storage.postgres.database import COUNTER_SHARDS

# Each test takes fresh types from this pool.
TYPE_POOL = [f"d{i:03d}" for i in range(300)]
ALLOWLIST = ["noop", *TYPE_POOL]
_fresh_types = iter(TYPE_POOL)
_names = itertools.count(1)

JOB_FIELDS = "id type status priority attempt waitingFor dependsOn finishedAt"
ENQUEUE = f"""mutation($input: EnqueueJobInput!) {{
  enqueueJob(input: $input) {{ created job {{ {JOB_FIELDS} }} }} }}"""
ENQUEUE_MANY = f"""mutation($inputs: [EnqueueJobInput!]!) {{
  enqueueJobs(inputs: $inputs) {{ created job {{ {JOB_FIELDS} }} }} }}"""
# Large calls select no list field (an unsized list costs one per allowlisted type).
ENQUEUE_MANY_SHORT = """mutation($inputs: [EnqueueJobInput!]!) {
  enqueueJobs(inputs: $inputs) { job { id waitingFor } } }"""
CLAIM = f"""mutation($limit: Int!, $types: [String!], $wait: Int) {{
  claimJobs(limit: $limit, types: $types, waitSeconds: $wait) {{ {JOB_FIELDS} }} }}"""
CLAIM_SHORT = """mutation($limit: Int!, $types: [String!]) {
  claimJobs(limit: $limit, types: $types) { id attempt waitingFor } }"""
# One request: complete the held job, then claim the next (mutations run in order).
COMPLETE_THEN_CLAIM = """mutation($id: ID!, $types: [String!]) {
  completeJob(id: $id) { id status }
  claimJob(types: $types) { id attempt waitingFor } }"""
COMPLETE = f"""mutation($id: ID!, $result: JSON, $attempt: Int) {{
  completeJob(id: $id, result: $result, attempt: $attempt) {{ {JOB_FIELDS} }} }}"""
COMPLETE_MANY = """mutation($items: [CompleteJobInput!]!) {
  completeJobs(items: $items) { completed { id } rejected } }"""
FAIL = f"""mutation($id: ID!, $retryable: Boolean!, $attempt: Int) {{
  failJob(id: $id, error: "boom", retryable: $retryable, retryInSeconds: 0, attempt: $attempt) {{
    {JOB_FIELDS} }} }}"""
CANCEL = f"mutation($id: ID!) {{ cancelJob(id: $id) {{ {JOB_FIELDS} }} }}"
RETRY = f"mutation($id: ID!) {{ retryJob(id: $id) {{ {JOB_FIELDS} }} }}"
CANCEL_JOBS = """mutation($filter: JobFilter!) { cancelJobs(filter: $filter, limit: 1000) { count more } }"""
RETRY_JOBS = """mutation($filter: JobFilter!) { retryJobs(filter: $filter, limit: 1000) { count more } }"""
ADMIN_JOB = f"""query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} error result
  events(last: 100) {{ kind status at }} }} }}"""
READ_JOB = "query($id: ID!) { job(id: $id) { id status result } }"
READ_ERROR = "query($id: ID!) { job(id: $id) { id error } }"
STATS = "{ queueStats { oldestPendingSeconds } }"
TYPE_COUNTS = "{ queueStats { byType { type counts { pending running completed failed cancelled } } } }"

Job = dict[str, Any]


# --- helpers ---------------------------------------------------------------------------------


def ids(jobs: list[Job]) -> list[str]:
    return [j["id"] for j in jobs]


def refused(response: GraphQLResponse, code: str, *words: str) -> None:
    """The operation was refused with `code`, its message naming each of `words`."""
    assert response.codes == [code], response.body
    assert response.data is None, response.body
    message = response.errors[0]["message"]
    for word in words:
        assert word in message, (word, message)


@dataclass
class Deps:
    """One test's view of the module's server: its own keys and its own job types."""

    server: Server
    producer: str
    worker: str
    taken: list[str] = field(default_factory=list)

    def type(self) -> str:
        """A job type no other test uses."""
        job_type = next(_fresh_types)
        self.taken.append(job_type)
        return job_type

    def gql(self, query: str, variables: dict[str, Any] | None = None, key: str | None = None) -> Any:
        return self.server.gql(query, variables, key=key).ok()

    # enqueue

    def try_enqueue(self, job_type: str, key: str | None = None, **fields: Any) -> GraphQLResponse:
        return self.server.gql(ENQUEUE, {"input": {"type": job_type, **fields}}, key=key or self.producer)

    def enqueue(self, job_type: str, key: str | None = None, **fields: Any) -> Job:
        return self.try_enqueue(job_type, key, **fields).ok()["enqueueJob"]["job"]

    def try_enqueue_many(self, inputs: list[dict[str, Any]], key: str | None = None) -> GraphQLResponse:
        return self.server.gql(ENQUEUE_MANY, {"inputs": inputs}, key=key or self.producer)

    def enqueue_many(self, inputs: list[dict[str, Any]], key: str | None = None) -> list[Job]:
        return [item["job"] for item in self.try_enqueue_many(inputs, key).ok()["enqueueJobs"]]

    # work

    def claim(self, types: list[str], limit: int = 100, key: str | None = None) -> list[Job]:
        return self.gql(CLAIM, {"limit": limit, "types": types}, key=key or self.worker)["claimJobs"]

    def claim_one(self, job_type: str, key: str | None = None) -> Job:
        (job,) = self.claim([job_type], key=key)
        return job

    def complete(self, job: Job, result: Any = None, key: str | None = None) -> Job:
        variables = {"id": job["id"], "result": result, "attempt": job["attempt"]}
        return self.gql(COMPLETE, variables, key=key or self.worker)["completeJob"]

    def run(self, job_type: str, result: Any = None) -> Job:
        """Claim the type's one claimable job and complete it."""
        return self.complete(self.claim_one(job_type), result)

    def fail(self, job: Job, retryable: bool = False) -> Job:
        variables = {"id": job["id"], "retryable": retryable, "attempt": job["attempt"]}
        return self.gql(FAIL, variables, key=self.worker)["failJob"]

    # admin

    def job(self, job_id: str) -> Job:
        return self.gql(ADMIN_JOB, {"id": job_id})["job"]

    def statuses(self, jobs: list[Job]) -> list[str]:
        return [self.job(j["id"])["status"] for j in jobs]

    def cancel(self, job_id: str, key: str | None = None) -> Job:
        return self.gql(CANCEL, {"id": job_id}, key=key)["cancelJob"]

    def retry(self, job_id: str) -> Job:
        return self.gql(RETRY, {"id": job_id})["retryJob"]

    def counts(self, job_type: str) -> dict[str, int]:
        for entry in self.gql(TYPE_COUNTS)["queueStats"]["byType"]:
            if entry["type"] == job_type:
                return dict(entry["counts"])
        return {"pending": 0, "running": 0, "completed": 0, "failed": 0, "cancelled": 0}

    def stored(self) -> tuple[int, int]:
        """How many jobs of this test's types the database holds, and how many edges in all."""
        (jobs,) = self.server.sql("SELECT count(*) FROM jobs WHERE type IN :types", types=self.taken)
        (edges,) = self.server.sql("SELECT count(*) FROM job_dependencies")
        return jobs[0], edges[0]


def cascaded(deps: Deps, job: Job, root: Job, status: str) -> None:
    """`job` was cancelled by its dependency `root` ending `status`, in root's transaction."""
    seen = deps.job(job["id"])
    assert seen["status"] == "CANCELLED", seen
    assert seen["error"] == f"dependency {root['id']} {status}", seen
    assert [e["kind"] for e in seen["events"]] == ["ENQUEUED", "CANCELLED"], seen["events"]
    ended = deps.job(root["id"])
    assert ended["status"] == status
    assert seen["finishedAt"] == ended["finishedAt"], (seen, ended)
    assert seen["events"][-1]["at"] == ended["events"][-1]["at"], (seen["events"], ended["events"])


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `call` on a thread; the dict gets its `result` (or `error`) and the `at` it returned."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # reported by the test
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deps_server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # The pruner runs every second; it only ever meets the jobs a test dates back on purpose.
    with serving(
        backend, tmp_path_factory, job_types=",".join(ALLOWLIST), prune_interval_seconds=1
    ) as running:
        yield running


@pytest.fixture
def deps(deps_server: Server) -> Deps:
    n = next(_names)
    return Deps(
        deps_server,
        producer=deps_server.make_key(f"producer-{n}", "producer", max_priority="HIGH"),
        worker=deps_server.make_key(f"worker-{n}", "worker"),
    )


# --- waiting and release ---------------------------------------------------------------------


def test_a_chain_of_three_runs_strictly_in_order_whatever_the_priorities(deps: Deps) -> None:
    t = deps.type()
    a = deps.enqueue(t, priority="LOW")
    b = deps.enqueue(t, priority="MEDIUM", dependsOn=[a["id"]])
    c = deps.enqueue(t, priority="HIGH", dependsOn=[b["id"]])
    assert (a["waitingFor"], a["dependsOn"]) == (0, [])
    assert (b["status"], b["waitingFor"], b["dependsOn"]) == ("PENDING", 1, [a["id"]])
    assert (c["status"], c["waitingFor"], c["dependsOn"]) == ("PENDING", 1, [b["id"]])

    for current, following in ((a, b), (b, c), (c, None)):
        claimed = deps.claim([t])
        assert ids(claimed) == [current["id"]], "only the head of the chain is claimable"
        assert deps.claim([t]) == []
        deps.complete(claimed[0])
        if following is not None:
            assert deps.job(following["id"])["waitingFor"] == 0
    assert deps.statuses([a, b, c]) == ["COMPLETED"] * 3


def test_a_chain_of_a_thousand_in_one_call_is_drained_one_job_at_a_time(deps: Deps) -> None:
    t = deps.type()
    inputs = [{"type": t, "dependsOnItems": [i - 1] if i else []} for i in range(1000)]
    data = deps.gql(ENQUEUE_MANY_SHORT, {"inputs": inputs}, key=deps.producer)["enqueueJobs"]
    chain = [item["job"] for item in data]
    assert [j["waitingFor"] for j in chain] == [0] + [1] * 999
    assert deps.job(chain[500]["id"])["dependsOn"] == [chain[499]["id"]]

    held = deps.gql(CLAIM_SHORT, {"limit": 100, "types": [t]}, key=deps.worker)["claimJobs"]
    assert ids(held) == [chain[0]["id"]]
    for n in range(1, 1000):
        if n == 500:  # midway, nothing else is claimable while the head runs
            assert deps.gql(CLAIM_SHORT, {"limit": 100, "types": [t]}, key=deps.worker)["claimJobs"] == []
        data = deps.gql(COMPLETE_THEN_CLAIM, {"id": held[0]["id"], "types": [t]}, key=deps.worker)
        assert data["completeJob"]["status"] == "COMPLETED"
        following = data["claimJob"]
        assert following is not None and following["id"] == chain[n]["id"], (n, following)
        assert following["waitingFor"] == 0
        held = [following]
    deps.complete(held[0])
    assert deps.counts(t) == {"pending": 0, "running": 0, "completed": 1000, "failed": 0, "cancelled": 0}


def test_a_diamond_join_counts_down_and_is_claimable_only_after_both(deps: Deps) -> None:
    top, middle, bottom = deps.type(), deps.type(), deps.type()
    a = deps.enqueue(top)
    b, c = deps.enqueue_many([{"type": middle, "dependsOn": [a["id"]]}] * 2)
    d = deps.enqueue(bottom, dependsOn=[c["id"], b["id"]], priority="HIGH")
    assert sorted(d["dependsOn"]) == sorted([b["id"], c["id"]])
    assert d["waitingFor"] == 2

    deps.run(top)
    assert [deps.job(j["id"])["waitingFor"] for j in (b, c, d)] == [0, 0, 2]
    first, second = deps.claim([middle])
    assert deps.claim([bottom]) == []
    deps.complete(second)
    assert deps.job(d["id"])["waitingFor"] == 1
    assert deps.claim([bottom]) == []
    deps.complete(first)
    assert deps.job(d["id"])["waitingFor"] == 0
    assert ids(deps.claim([bottom])) == [d["id"]]


def test_a_thousand_job_fan_out_and_fan_in_goes_in_whole_or_not_at_all(deps: Deps) -> None:
    root_t, leaf_t, join_t, sink_t = deps.type(), deps.type(), deps.type(), deps.type()
    leaves = range(1, 989)  # 988 leaves, joined 100 at a time (the last join: 88)
    slices = [list(leaves[i : i + 100]) for i in range(0, len(leaves), 100)]
    joins = range(989, 989 + len(slices))
    inputs: list[dict[str, Any]] = [{"type": root_t}]
    inputs += [{"type": leaf_t, "dependsOnItems": [0]} for _ in leaves]
    inputs += [{"type": join_t, "dependsOnItems": part} for part in slices]
    inputs.append({"type": sink_t, "dependsOnItems": list(joins)})
    assert len(inputs) == 1000

    # The same graph with its last item bad: nothing of it is written.
    before = deps.stored()
    for bad, code in (
        ({"type": sink_t, "dependsOnItems": [*joins, 999]}, "BAD_USER_INPUT"),  # itself
        ({"type": sink_t, "dependsOn": ["987654321987"]}, "NOT_FOUND"),  # no such job
    ):
        response = deps.server.gql(ENQUEUE_MANY_SHORT, {"inputs": [*inputs[:999], bad]}, key=deps.producer)
        refused(response, code)
        assert deps.stored() == before

    data = deps.gql(ENQUEUE_MANY_SHORT, {"inputs": inputs}, key=deps.producer)["enqueueJobs"]
    graph = [item["job"] for item in data]
    assert deps.stored() == (before[0] + 1000, before[1] + 988 + 988 + len(slices))
    assert [graph[i]["waitingFor"] for i in (0, 1, 988, 989, 998, 999)] == [0, 1, 1, 100, 88, 10]

    assert deps.claim([leaf_t, join_t, sink_t]) == []
    deps.run(root_t)
    for n, part in enumerate(slices):
        claimed = deps.gql(CLAIM_SHORT, {"limit": 100, "types": [leaf_t]}, key=deps.worker)["claimJobs"]
        assert ids(claimed) == [graph[i]["id"] for i in part]
        assert deps.claim([join_t]) == []
        items = [{"id": j["id"], "attempt": j["attempt"]} for j in claimed]
        outcome = deps.gql(COMPLETE_MANY, {"items": items}, key=deps.worker)["completeJobs"]
        assert (len(outcome["completed"]), outcome["rejected"]) == (len(part), [])
        assert ids(deps.claim([join_t])) == [graph[joins[n]]["id"]], "the join of this slice, only"
    assert deps.claim([leaf_t]) == []
    held = [deps.job(graph[i]["id"]) for i in joins]
    assert {j["status"] for j in held} == {"RUNNING"}
    for n, join in enumerate(held):
        assert deps.claim([sink_t]) == []
        deps.complete(join)
        assert deps.job(graph[999]["id"])["waitingFor"] == len(held) - n - 1
    assert ids(deps.claim([sink_t])) == [graph[999]["id"]]


def test_a_dependency_already_completed_counts_as_done(deps: Deps) -> None:
    t, u = deps.type(), deps.type()
    done = deps.enqueue(t)
    deps.run(t)
    open_one = deps.enqueue(t)
    free = deps.enqueue(u, dependsOn=[done["id"]])
    assert (free["status"], free["waitingFor"], free["dependsOn"]) == ("PENDING", 0, [done["id"]])
    half = deps.enqueue(u, dependsOn=[done["id"], open_one["id"]])
    assert half["waitingFor"] == 1
    assert ids(deps.claim([u])) == [free["id"]]
    assert deps.claim([u]) == []
    deps.run(t)
    assert ids(deps.claim([u])) == [half["id"]]


@pytest.mark.parametrize("ending", ["FAILED", "CANCELLED"])
def test_a_dependency_that_failed_or_was_cancelled_makes_enqueues_conflict(deps: Deps, ending: str) -> None:
    t, u = deps.type(), deps.type()
    ended, fine = deps.enqueue(t), deps.enqueue(u)
    if ending == "FAILED":
        deps.fail(deps.claim_one(t))
    else:
        deps.cancel(ended["id"], key=deps.producer)
    before = deps.stored()
    refused(deps.try_enqueue(u, dependsOn=[fine["id"], ended["id"]]), "CONFLICT", ended["id"], ending)
    response = deps.try_enqueue_many([{"type": u}, {"type": u, "dependsOn": [ended["id"]]}])
    refused(response, "CONFLICT", ended["id"])
    assert deps.stored() == before
    assert deps.counts(u)["pending"] == 1


def test_the_last_dependency_completing_wakes_a_long_polling_claim(deps: Deps) -> None:
    t, u = deps.type(), deps.type()
    first = deps.enqueue(t)
    waiting = deps.enqueue(u, dependsOn=[first["id"]])
    held = deps.claim_one(t)

    def poll() -> list[Job]:
        with httpx.Client(timeout=35) as client:
            response = client.post(
                deps.server.graphql_url,
                json={"query": CLAIM, "variables": {"limit": 1, "types": [u], "wait": 5}},
                headers={"Authorization": f"Bearer {deps.worker}"},
            )
        body = response.json()
        assert not body.get("errors"), body
        return body["data"]["claimJobs"]

    thread, outcome = in_background(poll)
    time.sleep(0.3)  # the claim is waiting
    assert "at" not in outcome, "the claim returned while its only job still waits"
    completed_at = time.monotonic()
    deps.complete(held)
    thread.join(10)
    assert "error" not in outcome, outcome
    assert ids(outcome["result"]) == [waiting["id"]]
    assert outcome["at"] - completed_at < 2.0, "the waiting claim did not wake"


def test_dependents_enqueued_while_their_dependency_completes_are_all_released(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    a = deps.enqueue(top)
    held = deps.claim_one(top)
    made: list[Job] = []
    start = threading.Barrier(5)

    def enqueue_some() -> None:
        with httpx.Client(timeout=30) as client:
            start.wait()
            for _ in range(25):
                response = client.post(
                    deps.server.graphql_url,
                    json={"query": ENQUEUE, "variables": {"input": {"type": rest, "dependsOn": [a["id"]]}}},
                    headers={"Authorization": f"Bearer {deps.producer}"},
                )
                made.append(response.json()["data"]["enqueueJob"]["job"])

    threads = [threading.Thread(target=enqueue_some) for _ in range(4)]
    for thread in threads:
        thread.start()
    start.wait()
    time.sleep(0.05)  # some enqueue before the completion, some with it, some after
    deps.complete(held)
    for thread in threads:
        thread.join(30)
    assert len(made) == 100
    assert {j["waitingFor"] for j in made} <= {0, 1}
    claimed = deps.claim([rest], limit=100)
    assert sorted(ids(claimed), key=int) == sorted(ids(made), key=int), "none is left waiting"


# --- failure cascades --------------------------------------------------------------------------


def test_a_failed_root_cancels_a_diamond_in_its_own_transaction(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    a = deps.enqueue(top)
    b, c, d = deps.enqueue_many(
        [
            {"type": rest, "dependsOn": [a["id"]]},
            {"type": rest, "dependsOn": [a["id"]]},
            {"type": rest, "dependsOnItems": [0, 1]},
        ]
    )
    unrelated = deps.enqueue(rest)
    failed = deps.fail(deps.claim_one(top), retryable=False)
    assert failed["status"] == "FAILED"
    for job in (b, c, d):
        cascaded(deps, job, a, "FAILED")
    assert deps.job(unrelated["id"])["status"] == "PENDING"
    assert deps.counts(rest) == {"pending": 1, "running": 0, "completed": 0, "failed": 0, "cancelled": 3}
    assert ids(deps.claim([rest])) == [unrelated["id"]]


def test_running_out_of_retries_cancels_a_three_level_chain(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    a = deps.enqueue(top, maxRetries=1)
    b, c = deps.enqueue_many([{"type": rest, "dependsOn": [a["id"]]}, {"type": rest, "dependsOnItems": [0]}])
    retrying = deps.fail(deps.claim_one(top), retryable=True)
    assert retrying["status"] == "PENDING", "one retry left: not an end"
    assert deps.statuses([b, c]) == ["PENDING", "PENDING"]
    assert deps.job(b["id"])["waitingFor"] == 1
    assert deps.fail(deps.claim_one(top), retryable=True)["status"] == "FAILED"
    cascaded(deps, b, a, "FAILED")
    cascaded(deps, c, a, "FAILED")
    assert deps.claim([rest]) == []


def test_cancelling_a_waiting_middle_job_cancels_what_waits_for_it(deps: Deps) -> None:
    t = deps.type()
    a, b, c = deps.enqueue_many(
        [{"type": t}, {"type": t, "dependsOnItems": [0]}, {"type": t, "dependsOnItems": [1]}]
    )
    cancelled = deps.cancel(b["id"], key=deps.producer)
    assert cancelled["status"] == "CANCELLED"
    assert deps.job(b["id"])["error"] is None
    cascaded(deps, c, b, "CANCELLED")
    assert deps.job(a["id"])["status"] == "PENDING"
    deps.run(t)
    assert deps.claim([t]) == []
    assert deps.statuses([a, b, c]) == ["COMPLETED", "CANCELLED", "CANCELLED"]


def test_cancel_jobs_on_a_root_cancels_its_dependents_too(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    a = deps.enqueue(top)
    b, c = deps.enqueue_many([{"type": rest, "dependsOn": [a["id"]]}, {"type": rest, "dependsOnItems": [0]}])
    result = deps.gql(CANCEL_JOBS, {"filter": {"status": "PENDING", "type": top}})["cancelJobs"]
    assert result == {"count": 1, "more": False}
    cascaded(deps, b, a, "CANCELLED")
    cascaded(deps, c, a, "CANCELLED")


def test_a_failed_head_cancels_a_chain_of_a_thousand(deps: Deps) -> None:
    t = deps.type()
    inputs = [{"type": t, "dependsOnItems": [i - 1] if i else []} for i in range(1000)]
    chain = [item["job"] for item in deps.gql(ENQUEUE_MANY_SHORT, {"inputs": inputs})["enqueueJobs"]]
    deps.fail(deps.claim_one(t))
    cascaded(deps, chain[1], chain[0], "FAILED")  # in the failure's own transaction
    deadline = time.monotonic() + 60
    while deps.counts(t)["cancelled"] < 999:  # the rest in chunks after it
        assert time.monotonic() < deadline, deps.counts(t)
        time.sleep(0.05)
    assert deps.counts(t) == {"pending": 0, "running": 0, "completed": 0, "failed": 1, "cancelled": 999}
    rows = deps.server.sql(
        "SELECT j.error, count(*) FROM job_events e JOIN jobs j ON j.id = e.job_id"
        " WHERE j.type = :t AND e.kind = 'CANCELLED' GROUP BY j.error",
        t=t,
    )
    assert rows == [(f"dependency {chain[0]['id']} FAILED", 999)]
    last = deps.job(chain[999]["id"])
    assert (last["status"], last["error"]) == ("CANCELLED", f"dependency {chain[0]['id']} FAILED")
    assert [e["kind"] for e in last["events"]] == ["ENQUEUED", "CANCELLED"]


def test_a_root_failed_by_its_timeout_cancels_its_dependents(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    roots = deps.enqueue_many([{"type": top, "maxRetries": 0, "timeoutSeconds": 1}] * 2)
    waiting = deps.enqueue_many([{"type": rest, "dependsOn": [r["id"]]} for r in roots])
    deps.claim([top])
    deadline = time.monotonic() + 10
    while deps.statuses(roots) != ["FAILED", "FAILED"]:
        assert time.monotonic() < deadline, "the roots did not time out"
        time.sleep(0.1)
    for root, job in zip(roots, waiting, strict=True):
        assert deps.job(root["id"])["error"] == "timed out"
        cascaded(deps, job, root, "FAILED")


# --- retrying a cascade ----------------------------------------------------------------------


def test_retry_job_waits_again_for_what_is_not_completed(deps: Deps) -> None:
    top, side, rest = deps.type(), deps.type(), deps.type()
    a, s = deps.enqueue(top), deps.enqueue(side)
    c = deps.enqueue(rest, dependsOn=[a["id"], s["id"]])
    d = deps.enqueue(rest, dependsOn=[c["id"]])
    deps.run(side)
    assert deps.job(c["id"])["waitingFor"] == 1
    deps.fail(deps.claim_one(top))
    cascaded(deps, c, a, "FAILED")
    cascaded(deps, d, a, "FAILED")

    retried = deps.retry(c["id"])
    assert (retried["status"], retried["waitingFor"]) == ("PENDING", 1), "s is done, a is not"
    assert sorted(retried["dependsOn"]) == sorted([a["id"], s["id"]])
    assert deps.claim([rest]) == []
    assert deps.retry(d["id"])["waitingFor"] == 1

    deps.retry(a["id"])
    deps.run(top)
    assert deps.job(c["id"])["waitingFor"] == 0
    assert ids(deps.claim([rest])) == [c["id"]]
    assert deps.claim([rest]) == []


def test_retry_jobs_puts_a_cascade_back_to_wait(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    a = deps.enqueue(top)
    jobs = deps.enqueue_many(
        [
            {"type": rest, "dependsOn": [a["id"]]},
            {"type": rest, "dependsOn": [a["id"]]},
            {"type": rest, "dependsOnItems": [0, 1]},
        ]
    )
    deps.fail(deps.claim_one(top))
    result = deps.gql(RETRY_JOBS, {"filter": {"status": "CANCELLED", "type": rest}})["retryJobs"]
    assert result == {"count": 3, "more": False}
    again = [deps.job(j["id"]) for j in jobs]
    assert [(j["status"], j["waitingFor"]) for j in again] == [("PENDING", 1), ("PENDING", 1), ("PENDING", 2)]
    assert [e["kind"] for e in again[2]["events"]] == ["ENQUEUED", "CANCELLED", "RETRIED"]
    assert deps.claim([rest]) == []

    deps.retry(a["id"])
    deps.run(top)
    claimed = deps.claim([rest])
    assert sorted(ids(claimed)) == sorted(ids(jobs[:2]))
    deps.complete(claimed[0])
    assert deps.job(jobs[2]["id"])["waitingFor"] == 1
    deps.complete(claimed[1])
    assert ids(deps.claim([rest])) == [jobs[2]["id"]]


def test_retrying_a_cascaded_job_whose_dependencies_all_completed_since(deps: Deps) -> None:
    top, rest, other = deps.type(), deps.type(), deps.type()
    a = deps.enqueue(top)
    b = deps.enqueue(rest, dependsOn=[a["id"]])
    c = deps.enqueue(other, dependsOn=[a["id"]])
    deps.fail(deps.claim_one(top))
    cascaded(deps, b, a, "FAILED")
    deps.retry(a["id"])
    deps.run(top)
    assert deps.statuses([b, c]) == ["CANCELLED", "CANCELLED"], "a cancelled job stays so"
    retried = deps.retry(b["id"])
    assert deps.gql(RETRY_JOBS, {"filter": {"status": "CANCELLED", "type": other}})["retryJobs"]["count"] == 1
    # Both are claimable at once (nothing is left to wait for) ...
    assert ids(deps.claim([rest, other])) == [b["id"], c["id"]]
    # ... and say so.
    assert (retried["status"], retried["waitingFor"]) == ("PENDING", 0)
    assert [deps.job(j["id"])["waitingFor"] for j in (b, c)] == [0, 0]


# --- races between servers' transactions (PostgreSQL), forced ----------------------------------
#
# Each test holds a counter row in a transaction of its own (`counters_held`), so that a
# server's write batch stops at its counters, just before COMMIT, with every row lock it took
# still held. The concurrent request is then sent, and let go once it is known to be waiting
# on that batch, or done (`waiting_on`): the interleaving is the same on every run.


@contextlib.contextmanager
def counters_held(server: Server, job_type: str, status: str) -> Iterator[int]:
    """Hold the counter rows of `job_type` in `status` (every shard) in an open transaction,
    rolled back at the end: a batch that moves a job of that type into that status waits for
    it. Yields this transaction's backend pid."""
    import psycopg

    with psycopg.connect(conninfo(server.database_url)) as connection:
        try:
            connection.execute(
                "INSERT INTO job_counts (scope, name, type, status, shard, n)"
                " SELECT '*', '', %s, %s, shard, 0 FROM generate_series(0, %s) AS shard"
                " ON CONFLICT (scope, name, type, status, shard) DO UPDATE SET n = job_counts.n",
                (job_type, status, COUNTER_SHARDS - 1),
            )
            row = connection.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            yield row[0]
        finally:
            connection.rollback()


def waiting_on(server: Server, pid: int, done: Callable[[], bool] | None = None) -> int | None:
    """The pid of the backend that waits for a lock `pid` holds, once there is one; None if
    `done()` came true first (what was sent needed nothing `pid` holds, and has committed).
    Its answer may come later: a server answers its batches in the order they began to
    commit."""
    deadline = time.monotonic() + 30
    while True:
        rows = server.sql("SELECT pid FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))", pid=pid)
        if rows:
            return int(rows[0][0])
        if done is not None and done():
            return None
        assert time.monotonic() < deadline, f"nothing came to wait for backend {pid}"
        time.sleep(0.01)


def stored_status(deps: Deps, job: Job) -> str:
    """The job's status as committed in the database."""
    (row,) = deps.server.sql("SELECT status FROM jobs WHERE id = :id", id=int(job["id"]))
    return str(row[0])


def posted(server: Server, query: str, variables: dict[str, Any], key: str) -> Callable[[], GraphQLResponse]:
    """A request to send from another thread, on a connection of its own."""

    def send() -> GraphQLResponse:
        with http_client(60) as client:
            response = client.post(
                server.graphql_url,
                json={"query": query, "variables": variables},
                headers={"Authorization": f"Bearer {key}"},
            )
            return GraphQLResponse(response.status_code, response.json())

    return send


def finished(thread: threading.Thread, outcome: dict[str, Any]) -> GraphQLResponse:
    thread.join(30)
    assert not thread.is_alive(), "the request never came back"
    assert "error" not in outcome, outcome
    response: GraphQLResponse = outcome["result"]
    return response


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_dependent_enqueued_while_its_dependency_is_cancelled_by_a_cascade_is_cancelled_too(
    deps: Deps,
) -> None:
    """D1 waits for R. An enqueue of D2 waiting for D1 has locked D1 (and not committed yet)
    when R fails on another connection: the cascade's snapshot cannot see D2, and its
    UPDATE of D1 waits for the enqueue. Once the enqueue commits, D1 is cancelled, and D2
    must be too: it was enqueued before D1 ended (else the enqueue would have been a
    CONFLICT), so nothing may leave it waiting for a CANCELLED job."""
    top, mid, rest = deps.type(), deps.type(), deps.type()
    r = deps.enqueue(top)
    d1 = deps.enqueue(mid, dependsOn=[r["id"]])
    held = deps.claim_one(top)
    with counters_held(deps.server, rest, "pending") as holder:
        enqueue = posted(
            deps.server, ENQUEUE, {"input": {"type": rest, "dependsOn": [d1["id"]]}}, deps.producer
        )
        enqueuing = in_background(enqueue)
        enqueuer = waiting_on(deps.server, holder)  # D1 locked, D2 written, not committed
        assert enqueuer is not None
        variables = {"id": held["id"], "retryable": False, "attempt": held["attempt"]}
        failing = in_background(posted(deps.server, FAIL, variables, deps.worker))
        assert waiting_on(deps.server, enqueuer) is not None  # the cascade waits for D1
    d2 = finished(*enqueuing).ok()["enqueueJob"]["job"]
    assert finished(*failing).ok()["failJob"]["status"] == "FAILED"
    cascaded(deps, d1, r, "FAILED")
    cascaded(deps, d2, r, "FAILED")
    assert deps.counts(rest) == {"pending": 0, "running": 0, "completed": 0, "failed": 0, "cancelled": 1}


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_an_enqueue_that_waits_for_a_cascade_to_commit_is_a_conflict(deps: Deps) -> None:
    """The other order: the cascade has cancelled D1 (not committed yet) when an enqueue
    waiting for D1 comes; it waits for the cascade and then refuses (CONFLICT)."""
    top, mid, rest = deps.type(), deps.type(), deps.type()
    r = deps.enqueue(top)
    d1 = deps.enqueue(mid, dependsOn=[r["id"]])
    held = deps.claim_one(top)
    with counters_held(deps.server, mid, "cancelled") as holder:
        variables = {"id": held["id"], "retryable": False, "attempt": held["attempt"]}
        failing = in_background(posted(deps.server, FAIL, variables, deps.worker))
        failer = waiting_on(deps.server, holder)  # D1 cancelled, not committed
        assert failer is not None
        enqueue = posted(
            deps.server, ENQUEUE, {"input": {"type": rest, "dependsOn": [d1["id"]]}}, deps.producer
        )
        enqueuing = in_background(enqueue)
        assert waiting_on(deps.server, failer) is not None  # the enqueue waits for D1
    assert finished(*failing).ok()["failJob"]["status"] == "FAILED"
    refused(finished(*enqueuing), "CONFLICT", d1["id"], "CANCELLED")
    cascaded(deps, d1, r, "FAILED")
    assert deps.counts(rest)["pending"] == 0


def cancelled_by_its_failed_dependency(deps: Deps) -> tuple[str, str, Job, Job]:
    """(its type, the dependency's type, the dependency P RUNNING again, D): D was cancelled
    when P failed; P has been retried and claimed since."""
    top, rest = deps.type(), deps.type()
    p = deps.enqueue(top)
    d = deps.enqueue(rest, dependsOn=[p["id"]])
    deps.fail(deps.claim_one(top))
    cascaded(deps, d, p, "FAILED")
    deps.retry(p["id"])
    return rest, top, deps.claim_one(top), d


def retry_request(deps: Deps, d: Job, job_type: str, bulk: bool) -> Callable[[], GraphQLResponse]:
    if bulk:
        return posted(
            deps.server,
            RETRY_JOBS,
            {"filter": {"status": "CANCELLED", "type": job_type}},
            deps.server.admin_key,
        )
    return posted(deps.server, RETRY, {"id": d["id"]}, deps.server.admin_key)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("bulk", [False, True], ids=["retryJob", "retryJobs"])
def test_a_job_retried_while_its_dependency_completes_is_released(deps: Deps, bulk: bool) -> None:
    """retryJob(s) on D has counted its dependency P as not COMPLETED (and not committed)
    when P completes on another connection: the completion must wait for the retry and then
    release D, or D waits for a COMPLETED job forever."""
    rest, top, p, d = cancelled_by_its_failed_dependency(deps)
    with counters_held(deps.server, rest, "pending") as holder:
        retrying = in_background(retry_request(deps, d, rest, bulk))
        retrier = waiting_on(deps.server, holder)  # D waits again, not committed
        assert retrier is not None
        variables = {"id": p["id"], "result": None, "attempt": p["attempt"]}
        completing = in_background(posted(deps.server, COMPLETE, variables, deps.worker))
        # It waits for the retry, or has committed without it.
        waiting_on(deps.server, retrier, done=lambda: stored_status(deps, p) == "completed")
    finished(*retrying).ok()
    assert finished(*completing).ok()["completeJob"]["status"] == "COMPLETED"
    assert deps.job(d["id"])["waitingFor"] == 0
    assert ids(deps.claim([rest])) == [d["id"]], "released by its dependency's completion"


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("bulk", [False, True], ids=["retryJob", "retryJobs"])
def test_a_job_retried_while_its_dependency_is_completing_counts_it_done(deps: Deps, bulk: bool) -> None:
    """The other order: P's completion has released its dependents (D, still CANCELLED, was
    not one) and not committed when retryJob(s) on D comes: the retry must wait for it and
    count P as COMPLETED."""
    rest, top, p, d = cancelled_by_its_failed_dependency(deps)
    with counters_held(deps.server, top, "completed") as holder:
        variables = {"id": p["id"], "result": None, "attempt": p["attempt"]}
        completing = in_background(posted(deps.server, COMPLETE, variables, deps.worker))
        completer = waiting_on(deps.server, holder)  # P completed, not committed
        assert completer is not None
        retrying = in_background(retry_request(deps, d, rest, bulk))
        # It waits for P, or has committed without it.
        waiting_on(deps.server, completer, done=lambda: stored_status(deps, d) == "pending")
    assert finished(*completing).ok()["completeJob"]["status"] == "COMPLETED"
    finished(*retrying).ok()
    assert deps.job(d["id"])["waitingFor"] == 0
    assert ids(deps.claim([rest])) == [d["id"]], "nothing left to wait for"


# --- retention -----------------------------------------------------------------------------------


def pruned(deps: Deps, job: Job) -> bool:
    return deps.gql("query($id: ID!) { job(id: $id) { id } }", {"id": job["id"]})["job"] is None


def dated_back(deps: Deps, job: Job, days: float) -> None:
    """Make `job` look finished `days` ago, past the retention."""
    moment = datetime.now(UTC) - timedelta(days=days)
    deps.server.sql(
        "UPDATE jobs SET finished_at = :t WHERE id = :id", t=deps.server.timestamp(moment), id=int(job["id"])
    )


def wait_pruned(deps: Deps, job: Job) -> None:
    deadline = time.monotonic() + 30
    while not pruned(deps, job):
        assert time.monotonic() < deadline, f"job {job['id']} was never pruned"
        time.sleep(0.1)


def test_the_pruner_keeps_a_failed_dependency_that_a_retried_job_waits_for(deps: Deps) -> None:
    """A retried dependent waits again for its FAILED dependency P (API.md section 10): P
    must outlive the retention as long as it does, or the dependent waits forever."""
    top, rest, other = deps.type(), deps.type(), deps.type()
    p = deps.enqueue(top)
    d = deps.enqueue(rest, dependsOn=[p["id"]])
    deps.fail(deps.claim_one(top))
    cascaded(deps, d, p, "FAILED")
    assert deps.retry(d["id"])["waitingFor"] == 1
    # A job finished after P, both past the retention: once the pruner has taken it, it has
    # passed P too.
    marker = deps.enqueue(other)
    deps.cancel(marker["id"], key=deps.producer)
    dated_back(deps, p, days=30)
    dated_back(deps, marker, days=29)
    wait_pruned(deps, marker)
    assert deps.job(p["id"])["status"] == "FAILED", "d still waits for it"
    assert deps.job(d["id"])["waitingFor"] == 1
    # Once nothing waits for it, it goes.
    deps.cancel(d["id"], key=deps.producer)
    wait_pruned(deps, p)
    assert deps.job(d["id"])["status"] == "CANCELLED", "finished now: within the retention"


def test_a_released_job_whose_run_at_is_later_waits_for_it(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    a = deps.enqueue(top)
    in_an_hour = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    b = deps.enqueue(rest, dependsOn=[a["id"]], runAt=in_an_hour)
    deps.run(top)
    assert deps.job(b["id"])["waitingFor"] == 0
    assert deps.claim([rest]) == [], "released, but not due for an hour"


# --- refused input ---------------------------------------------------------------------------


def test_bad_dependencies_are_refused_and_write_nothing(deps: Deps) -> None:
    t = deps.type()
    existing = deps.enqueue_many([{"type": t}] * 101)
    other_producer = deps.server.make_key(f"other-{next(_names)}", "producer")
    theirs = deps.enqueue(t, key=other_producer)
    before = deps.stored()

    for bad in ("abc", "0", "-3", "1.5", "", " 7"):
        refused(deps.try_enqueue(t, dependsOn=[bad]), "BAD_USER_INPUT", "dependsOn")
    refused(deps.try_enqueue(t, dependsOnItems=[0]), "BAD_USER_INPUT", "dependsOnItems")
    for items in ([1], [-1], [5], [0, 2]):  # at input 1 only 0 is earlier
        response = deps.try_enqueue_many([{"type": t}, {"type": t, "dependsOnItems": items}])
        refused(response, "BAD_USER_INPUT", "dependsOnItems")
    refused(deps.try_enqueue_many([{"type": t, "dependsOnItems": [0]}]), "BAD_USER_INPUT", "dependsOnItems")
    all_ids = ids(existing)
    refused(deps.try_enqueue(t, dependsOn=all_ids), "BAD_USER_INPUT", "dependsOn", "100")
    response = deps.try_enqueue_many(
        [{"type": t}, {"type": t, "dependsOn": all_ids[:100], "dependsOnItems": [0]}]
    )
    refused(response, "BAD_USER_INPUT", "100")
    assert deps.stored() == before

    unknown = str(int(theirs["id"]) + 10_000_000)
    missing = deps.try_enqueue(t, dependsOn=[existing[0]["id"], unknown])
    hidden = deps.try_enqueue(t, dependsOn=[existing[0]["id"], theirs["id"]])
    refused(missing, "NOT_FOUND")
    assert json.dumps(hidden.body).replace(theirs["id"], "<id>") == json.dumps(missing.body).replace(
        unknown, "<id>"
    ), "another producer's job must look exactly like one that does not exist"
    refused(deps.try_enqueue_many([{"type": t}, {"type": t, "dependsOn": [theirs["id"]]}]), "NOT_FOUND")
    assert deps.stored() == before

    # Exactly 100 is fine, and an admin may wait for anyone's job.
    assert deps.enqueue(t, dependsOn=all_ids[:100])["waitingFor"] == 100
    assert deps.enqueue(t, key=deps.server.admin_key, dependsOn=[theirs["id"]])["waitingFor"] == 1


# --- idempotency -----------------------------------------------------------------------------


def test_an_idempotent_replay_compares_the_dependencies_as_a_set(deps: Deps) -> None:
    t = deps.type()
    a, b, c = deps.enqueue_many([{"type": t}] * 3)
    key = f"k-{next(_names)}"
    response = deps.try_enqueue(t, idempotencyKey=key, dependsOn=[a["id"], b["id"]])
    first = response.ok()["enqueueJob"]
    assert first["created"] is True
    again = deps.try_enqueue(t, idempotencyKey=key, dependsOn=[b["id"], a["id"]]).ok()["enqueueJob"]
    assert (again["created"], again["job"]["id"]) == (False, first["job"]["id"])
    for other in ([a["id"]], [a["id"], b["id"], c["id"]], [a["id"], c["id"]], []):
        refused(deps.try_enqueue(t, idempotencyKey=key, dependsOn=other), "CONFLICT")

    # Within enqueueJobs: an earlier item named by its index or by its id is the same job.
    k1, k2 = f"k-{next(_names)}", f"k-{next(_names)}"
    made = deps.try_enqueue_many(
        [{"type": t, "idempotencyKey": k1}, {"type": t, "idempotencyKey": k2, "dependsOnItems": [0]}]
    ).ok()["enqueueJobs"]
    head = made[0]["job"]["id"]
    for second in ({"dependsOnItems": [0]}, {"dependsOn": [head]}):
        replay = deps.try_enqueue_many(
            [{"type": t, "idempotencyKey": k1}, {"type": t, "idempotencyKey": k2, **second}]
        ).ok()["enqueueJobs"]
        assert [(r["created"], r["job"]["id"]) for r in replay] == [(False, j["job"]["id"]) for j in made]
    refused(deps.try_enqueue(t, idempotencyKey=k2, dependsOn=[a["id"]]), "CONFLICT")


# --- the holder reads its dependencies ---------------------------------------------------------


def test_the_holder_reads_its_jobs_dependencies_and_nothing_else(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    first_worker = deps.server.make_key(f"first-{next(_names)}", "worker")
    a = deps.enqueue(top)
    unrelated = deps.enqueue(deps.type())
    b = deps.enqueue(rest, dependsOn=[a["id"]])
    deps.complete(deps.claim_one(top, key=first_worker), result={"rows": 42}, key=first_worker)

    def read(job_id: str) -> Any:
        return deps.gql(READ_JOB, {"id": job_id}, key=deps.worker)["job"]

    assert read(a["id"]) is None, "not before it holds the dependent"
    held = deps.claim_one(rest)
    assert held["id"] == b["id"]
    assert read(a["id"]) == {"id": a["id"], "status": "COMPLETED", "result": {"rows": 42}}
    assert deps.server.gql(READ_ERROR, {"id": a["id"]}, key=deps.worker).codes == ["FORBIDDEN"]
    assert read(unrelated["id"]) is None
    other_worker = deps.server.make_key(f"other-{next(_names)}", "worker")
    assert deps.gql(READ_JOB, {"id": a["id"]}, key=other_worker)["job"] is None

    deps.complete(held)
    assert read(a["id"]) is None, "not once it no longer holds the dependent"
    assert read(b["id"])["status"] == "COMPLETED", "its own job it still sees"


# --- queue lag -------------------------------------------------------------------------------


def test_oldest_pending_seconds_leaves_out_waiting_jobs(deps: Deps) -> None:
    top, rest = deps.type(), deps.type()
    a = deps.enqueue(top)
    held = deps.claim_one(top)
    day_ago = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    b = deps.enqueue(rest, dependsOn=[a["id"]], runAt=day_ago)

    def lag() -> float | None:
        return deps.gql(STATS)["queueStats"]["oldestPendingSeconds"]

    before = lag()
    assert before is None or before < 3600, "a job waiting since a day ago does not count"
    deps.complete(held)
    released = lag()
    assert released is not None and released < 3600, "due from its release, not from its runAt"
    assert ids(deps.claim([rest])) == [b["id"]]


def test_a_producers_oldest_pending_seconds_leaves_out_its_waiting_jobs(deps: Deps) -> None:
    top, rest, later = deps.type(), deps.type(), deps.type()
    # Others' pending jobs outnumber this producer's jobs: its lag is read among its own.
    in_an_hour = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    deps.enqueue_many([{"type": later, "runAt": in_an_hour}] * 5, key=deps.server.admin_key)
    a = deps.enqueue(top)
    held = deps.claim_one(top)
    day_ago = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    deps.enqueue(rest, dependsOn=[a["id"]], runAt=day_ago)

    def lag() -> float | None:
        return deps.gql(STATS, key=deps.producer)["queueStats"]["oldestPendingSeconds"]

    assert lag() is None, "its only pending job waits"
    deps.complete(held)
    released = lag()
    assert released is not None and released < 60, "due from its release, not from its runAt"
