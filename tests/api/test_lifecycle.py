"""The job lifecycle of API.md section 3, driven over HTTP against real `queuelog serve` processes.

Attacked and proven:
- enqueue defaults and delayed jobs (not claimable before `runAt`, a waiting claim wakes when due);
- claim order (priority DESC, createdAt, id), the `types` filter, batch claims, and what a claim sets;
- heartbeat, complete and the batched `completeJobs` with its `rejected` list;
- fail: explicit delay, exponential back-off with jitter and its cap, non-retryable, exhausted retries;
- lease expiry with no request arriving, the stale holder fenced off by `attempt`, and the race
  between a late completion and the lease rescuer (a completed job is never overwritten);
- cancel and admin retry, pruning of finished jobs, pagination and filters, queue statistics;
- every transition leaves a `job_events` row in the database, in order;
- `/healthz` and the Prometheus `/metrics` text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from conftest import GraphQLResponse, Server, serving, stored_time
from prometheus_client.parser import text_string_to_metric_families

JOB_FIELDS = """
  id type payload priority status retryCount maxRetries attempt idempotencyKey workerId
  claimedAt leaseExpiresAt runAt finishedAt result createdAt updatedAt
"""
ENQUEUE = f"mutation($input: EnqueueJobInput!) {{ enqueueJob(input: $input) {{ job {{ {JOB_FIELDS} }} }} }}"
ENQUEUE_MANY = (
    f"mutation($inputs: [EnqueueJobInput!]!) {{ enqueueJobs(inputs: $inputs) {{ job {{ {JOB_FIELDS} }} }} }}"
)
CLAIM = f"""mutation($types: [String!], $lease: Int, $wait: Int) {{
  claimJob(types: $types, leaseSeconds: $lease, waitSeconds: $wait) {{ {JOB_FIELDS} }} }}"""
CLAIM_MANY = f"""mutation($limit: Int!, $types: [String!], $lease: Int, $wait: Int) {{
  claimJobs(limit: $limit, types: $types, leaseSeconds: $lease, waitSeconds: $wait) {{ {JOB_FIELDS} }} }}"""
HEARTBEAT = f"""mutation($id: ID!, $attempt: Int, $lease: Int) {{
  heartbeatJob(id: $id, attempt: $attempt, leaseSeconds: $lease) {{ {JOB_FIELDS} }} }}"""
COMPLETE = f"""mutation($id: ID!, $result: JSON, $attempt: Int) {{
  completeJob(id: $id, result: $result, attempt: $attempt) {{ {JOB_FIELDS} }} }}"""
COMPLETE_MANY = f"""mutation($items: [CompleteJobInput!]!) {{
  completeJobs(items: $items) {{ completed {{ {JOB_FIELDS} }} rejected }} }}"""
FAIL = f"""mutation($id: ID!, $error: String!, $retryable: Boolean!, $in: Int, $attempt: Int) {{
  failJob(id: $id, error: $error, retryable: $retryable, retryInSeconds: $in, attempt: $attempt) {{
    {JOB_FIELDS} }} }}"""
CANCEL = f"mutation($id: ID!) {{ cancelJob(id: $id) {{ {JOB_FIELDS} }} }}"
RETRY = f"mutation($id: ID!) {{ retryJob(id: $id) {{ {JOB_FIELDS} }} }}"
ADMIN_JOB = f"query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} error }} }}"
JOBS_PAGE = """query($status: JobStatus, $type: String, $first: Int!, $after: String) {
  jobs(status: $status, type: $type, first: $first, after: $after) {
    edges { cursor node { id type status } } nodes { id } pageInfo { hasNextPage endCursor } totalCount } }"""
STATS = """query { queueStats {
  counts { pending running completed failed cancelled }
  byType { type counts { pending running completed failed cancelled } }
  oldestPendingSeconds } }"""

Job = dict[str, Any]


@dataclass(frozen=True)
class Key:
    name: str
    secret: str


# --- helpers ---------------------------------------------------------------------------------------


def new_key(server: Server, unique: Callable[[str], str], role: str, **kwargs: Any) -> Key:
    name = unique(role)
    return Key(name, server.make_key(name, role, **kwargs))


def utc(value: str) -> datetime:
    """Parse a DateTime the server sent, asserting it carries an explicit UTC offset."""
    assert value.endswith(("Z", "+00:00")), f"no explicit UTC offset in {value!r}"
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), value
    return parsed


def now() -> datetime:
    return datetime.now(UTC)


def assert_about_now(value: str, slack: float = 5.0) -> None:
    assert abs((utc(value) - now()).total_seconds()) < slack, f"{value} is not about now ({now()})"


def enqueue(server: Server, key: Key | None = None, **fields: Any) -> Job:
    fields.setdefault("type", "email")
    data = server.gql(ENQUEUE, {"input": fields}, key=key.secret if key else None).ok()
    return data["enqueueJob"]["job"]


def enqueue_many(server: Server, inputs: list[dict[str, Any]], key: Key | None = None) -> list[Job]:
    data = server.gql(ENQUEUE_MANY, {"inputs": inputs}, key=key.secret if key else None).ok()
    return [payload["job"] for payload in data["enqueueJobs"]]


def claim(
    server: Server,
    worker: Key,
    types: list[str] | None = None,
    lease: int | None = None,
    wait: int | None = None,
) -> Job | None:
    variables = {"types": types, "lease": lease, "wait": wait}
    return server.gql(CLAIM, variables, key=worker.secret).ok()["claimJob"]


def claim_many(server: Server, worker: Key, limit: int, **kwargs: Any) -> list[Job]:
    variables = {"limit": limit, "types": kwargs.get("types"), "lease": kwargs.get("lease"), "wait": None}
    return server.gql(CLAIM_MANY, variables, key=worker.secret).ok()["claimJobs"]


def complete(
    server: Server, worker: Key, job_id: str, result: Any = None, attempt: int | None = None
) -> GraphQLResponse:
    return server.gql(COMPLETE, {"id": job_id, "result": result, "attempt": attempt}, key=worker.secret)


def heartbeat(
    server: Server, worker: Key, job_id: str, attempt: int | None = None, lease: int | None = None
) -> GraphQLResponse:
    return server.gql(HEARTBEAT, {"id": job_id, "attempt": attempt, "lease": lease}, key=worker.secret)


def fail(
    server: Server,
    worker: Key,
    job_id: str,
    *,
    error: str = "boom",
    retryable: bool = True,
    retry_in: int | None = None,
    attempt: int | None = None,
) -> GraphQLResponse:
    variables = {"id": job_id, "error": error, "retryable": retryable, "in": retry_in, "attempt": attempt}
    return server.gql(FAIL, variables, key=worker.secret)


def admin_job(server: Server, job_id: str) -> Job | None:
    return server.gql(ADMIN_JOB, {"id": job_id}).ok()["job"]


def cancel_all_pending(server: Server) -> None:
    """Cancel every PENDING job (as admin), so that the next claim sees only the test's own jobs."""
    while True:
        page = server.gql("query { jobs(status: PENDING, first: 100) { nodes { id } } }").ok()
        ids = [node["id"] for node in page["jobs"]["nodes"]]
        if not ids:
            return
        for job_id in ids:
            server.gql(CANCEL, {"id": job_id})


def wait_for(fetch: Callable[[], Any], done: Callable[[Any], bool], timeout: float, what: str) -> Any:
    """Poll `fetch()` until `done(value)`; fail with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}; last seen: {value}"
        time.sleep(0.1)


def retry_delay(job: Job) -> float:
    """Seconds between the failure (updatedAt) and the next run (runAt)."""
    return (utc(job["runAt"]) - utc(job["updatedAt"])).total_seconds()


@pytest.fixture
def idle(server: Server) -> Server:
    """The shared server with no PENDING job left over from other tests."""
    cancel_all_pending(server)
    return server


@pytest.fixture(scope="module")
def eager_retry_server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A second shared server with retry base 0: a failed or expired attempt is due at once."""
    with serving(backend, tmp_path_factory, retry_base_seconds=0) as running:
        yield running


@pytest.fixture
def eager(eager_retry_server: Server) -> Server:
    """The retry-at-once server with no PENDING job left over from other tests."""
    cancel_all_pending(eager_retry_server)
    return eager_retry_server


@pytest.fixture
def worker(server: Server, unique: Callable[[str], str]) -> Key:
    return new_key(server, unique, "worker")


@pytest.fixture
def producer(server: Server, unique: Callable[[str], str]) -> Key:
    return new_key(server, unique, "producer")


# --- enqueue ---------------------------------------------------------------------------------------


def test_enqueue_applies_the_documented_defaults(server: Server, producer: Key) -> None:
    job = enqueue(server, producer, type="email")
    assert job["payload"] == {}
    assert job["priority"] == "LOW"
    assert job["maxRetries"] == 3
    assert job["status"] == "PENDING"
    assert (job["attempt"], job["retryCount"]) == (0, 0)
    for absent in ("idempotencyKey", "workerId", "claimedAt", "leaseExpiresAt", "finishedAt", "result"):
        assert job[absent] is None, absent
    assert_about_now(job["runAt"])
    assert_about_now(job["createdAt"])
    assert_about_now(job["updatedAt"])
    assert utc(job["runAt"]) >= utc(job["createdAt"]) - timedelta(seconds=1)


def test_delayed_job_is_not_claimed_before_it_is_due(idle: Server, worker: Key) -> None:
    run_at = now() + timedelta(seconds=1.5)
    job = enqueue(idle, type="report", runAt=run_at.isoformat())
    assert utc(job["runAt"]) == run_at
    assert claim(idle, worker) is None, "a delayed job was claimed before its runAt"

    claimed = claim(idle, worker, wait=10)  # the long poll wakes when the job becomes due
    assert claimed is not None and claimed["id"] == job["id"]
    assert utc(claimed["claimedAt"]) >= run_at
    assert now() >= run_at


def test_a_mixed_batch_is_stored_field_for_field_in_order(
    server: Server, unique: Callable[[str], str]
) -> None:
    """One enqueueJobs of 40 different inputs (keys and none, delays, priorities, payloads with
    nulls and non-ASCII text): each job comes back as its input asked, ids rising in input
    order, and reads back the same. PostgreSQL inserts them in one statement over arrays."""
    producer = new_key(server, unique, "producer", max_priority="CRITICAL")
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    inputs = [
        {
            "type": ("email", "report")[i % 2],
            "payload": {"i": i, "note": None if i % 3 else "héllo ✓", "list": [i, True, None]},
            "priority": ("LOW", "MEDIUM", "HIGH", "CRITICAL")[i % 4],
            "maxRetries": i % 5,
            **({"idempotencyKey": f"mixed-{i}-{time.monotonic_ns()}"} if i % 2 else {}),
            **({"runAt": later} if i % 7 == 0 else {}),
        }
        for i in range(40)
    ]
    jobs = enqueue_many(server, inputs, producer)
    ids = [int(job["id"]) for job in jobs]
    assert ids == sorted(ids) and len(set(ids)) == 40
    for given, job in zip(inputs, jobs, strict=True):
        assert job["type"] == given["type"]
        assert job["payload"] == given["payload"]
        assert job["priority"] == given["priority"]
        assert job["maxRetries"] == given["maxRetries"]
        assert job["idempotencyKey"] == given.get("idempotencyKey")
        if "runAt" in given:
            assert utc(job["runAt"]) == utc(given["runAt"])
        else:
            assert_about_now(job["runAt"])
        stored = server.gql(ADMIN_JOB, {"id": job["id"]}).ok()["job"]
        assert {k: v for k, v in stored.items() if k != "error"} == job
    replayed = enqueue_many(server, [given for given in inputs if "idempotencyKey" in given], producer)
    assert [job["id"] for job in replayed] == [job["id"] for job in jobs if job["idempotencyKey"]]


# --- claim -----------------------------------------------------------------------------------------

PRIORITIES = ["LOW", "HIGH", "MEDIUM", "HIGH", "CRITICAL", "LOW", "MEDIUM"]
RANK = {"LOW": 0, "MEDIUM": 10, "HIGH": 20, "CRITICAL": 30}


@pytest.mark.parametrize("mode", ["claimJob-one-by-one", "claimJobs-batch"])
def test_claims_follow_priority_then_age_then_id(idle: Server, worker: Key, mode: str) -> None:
    # One enqueueJobs call: every job has the same createdAt, so ties fall to the id.
    jobs = enqueue_many(idle, [{"type": "noop", "priority": p} for p in PRIORITIES])
    assert len({j["createdAt"] for j in jobs}) == 1
    expected = [j["id"] for j in sorted(jobs, key=lambda j: (-RANK[j["priority"]], int(j["id"])))]

    if mode == "claimJob-one-by-one":
        got = [job["id"] for job in iter(lambda: claim(idle, worker), None)]
    else:
        got = [job["id"] for job in claim_many(idle, worker, limit=100)]
    assert got == expected
    assert claim_many(idle, worker, limit=10) == [], "a job was handed out twice"


def test_older_created_at_wins_over_lower_id(idle: Server, worker: Key) -> None:
    first, second = enqueue(idle, type="noop"), enqueue(idle, type="noop")
    assert int(first["id"]) < int(second["id"])
    # Make the lower id the younger job, directly in the database.
    ((second_created,),) = idle.sql("SELECT created_at FROM jobs WHERE id = :id", id=int(second["id"]))
    younger = stored_time(second_created) + timedelta(seconds=1)  # type: ignore[operator]
    idle.sql("UPDATE jobs SET created_at = :t WHERE id = :id", t=idle.timestamp(younger), id=int(first["id"]))
    assert [j["id"] for j in claim_many(idle, worker, limit=5)] == [second["id"], first["id"]]


def test_types_filter_claims_only_those_types(idle: Server, worker: Key) -> None:
    email = enqueue(idle, type="email", priority="MEDIUM")
    report = enqueue(idle, type="report")
    claimed = claim(idle, worker, types=["report", "resize"])
    assert claimed is not None and claimed["id"] == report["id"]
    assert claim(idle, worker, types=["report"]) is None
    assert admin_job(idle, email["id"])["status"] == "PENDING"
    assert [j["id"] for j in claim_many(idle, worker, limit=5, types=["email"])] == [email["id"]]


@pytest.mark.parametrize(
    ("lease", "expected_lease"), [(None, 300), (45, 45)], ids=["server-default", "explicit"]
)
def test_claim_sets_running_holder_attempt_and_lease(
    idle: Server, worker: Key, lease: int | None, expected_lease: int
) -> None:
    job = enqueue(idle, type="resize")
    claimed = claim(idle, worker, lease=lease)
    assert claimed is not None and claimed["id"] == job["id"]
    assert claimed["status"] == "RUNNING"
    assert claimed["workerId"] == worker.name
    assert claimed["attempt"] == job["attempt"] + 1 == 1
    assert_about_now(claimed["claimedAt"])
    lease_length = utc(claimed["leaseExpiresAt"]) - utc(claimed["claimedAt"])
    assert lease_length == timedelta(seconds=expected_lease)
    assert admin_job(idle, job["id"])["leaseExpiresAt"] == claimed["leaseExpiresAt"]


# --- heartbeat and complete ------------------------------------------------------------------------


def test_heartbeat_moves_the_lease_later(idle: Server, worker: Key) -> None:
    enqueue(idle, type="email")
    job = claim(idle, worker, lease=30)
    assert job is not None
    first = heartbeat(idle, worker, job["id"], attempt=1).ok()["heartbeatJob"]  # server default: 300 s
    assert utc(first["leaseExpiresAt"]) > utc(job["leaseExpiresAt"]) + timedelta(seconds=200)
    second = heartbeat(idle, worker, job["id"], lease=900).ok()["heartbeatJob"]
    assert utc(second["leaseExpiresAt"]) > utc(first["leaseExpiresAt"]) + timedelta(seconds=500)
    assert (second["status"], second["attempt"], second["workerId"]) == ("RUNNING", 1, worker.name)
    assert heartbeat(idle, worker, job["id"], attempt=2).codes == ["CONFLICT"]


def test_complete_stores_the_result_and_finishes_the_job(idle: Server, worker: Key) -> None:
    enqueue(idle, type="report")
    job = claim(idle, worker)
    assert job is not None
    result = {"rows": [1, 2, 3], "name": "Zürich ✓", "nested": {"ok": True, "none": None}}
    done = complete(idle, worker, job["id"], result=result, attempt=1).ok()["completeJob"]
    assert done["status"] == "COMPLETED"
    assert done["result"] == result
    assert_about_now(done["finishedAt"])
    assert done["workerId"] == worker.name
    stored = admin_job(idle, job["id"])
    assert (stored["status"], stored["result"], stored["finishedAt"]) == (
        "COMPLETED",
        result,
        done["finishedAt"],
    )
    assert complete(idle, worker, job["id"]).codes == ["CONFLICT"], "a finished job was completed twice"


def test_complete_jobs_applies_good_items_and_rejects_the_rest(
    idle: Server, server: Server, unique: Callable[[str], str]
) -> None:
    mine, other = new_key(server, unique, "worker"), new_key(server, unique, "worker")
    enqueue_many(idle, [{"type": "noop"} for _ in range(4)])
    held = claim_many(idle, mine, limit=3)
    foreign = claim(idle, other)
    assert len(held) == 3 and foreign is not None
    pending = enqueue(idle, type="noop")
    a, b, c = held
    items = [
        {"id": a["id"], "result": {"n": 1}},
        {"id": b["id"], "result": {"n": 2}, "attempt": 1},
        {"id": a["id"], "result": {"n": 99}},  # a repeat of an earlier item
        {"id": foreign["id"], "result": {"n": 3}},  # held by another worker
        {"id": pending["id"]},  # not RUNNING
        {"id": c["id"], "attempt": 7},  # attempt mismatch
    ]
    outcome = idle.gql(COMPLETE_MANY, {"items": items}, key=mine.secret).ok()["completeJobs"]
    assert [(j["id"], j["result"]) for j in outcome["completed"]] == [
        (a["id"], {"n": 1}),
        (b["id"], {"n": 2}),
    ]
    assert outcome["rejected"] == [a["id"], foreign["id"], pending["id"], c["id"]]
    assert admin_job(idle, a["id"])["result"] == {"n": 1}, "the repeated item overwrote the first"
    assert admin_job(idle, foreign["id"])["status"] == "RUNNING"
    assert admin_job(idle, pending["id"])["status"] == "PENDING"
    assert admin_job(idle, c["id"])["status"] == "RUNNING"


def test_complete_jobs_refuses_more_than_100_items_whole(idle: Server, worker: Key) -> None:
    enqueue(idle, type="noop")
    job = claim(idle, worker)
    assert job is not None
    items = [{"id": job["id"]}] + [{"id": str(10_000_000 + i)} for i in range(100)]
    response = idle.gql(COMPLETE_MANY, {"items": items}, key=worker.secret)
    assert response.codes == ["BAD_USER_INPUT"]
    assert admin_job(idle, job["id"])["status"] == "RUNNING"


# --- fail and back-off -----------------------------------------------------------------------------


@pytest.mark.parametrize("retry_in", [0, 120])
def test_retryable_failure_goes_back_to_pending_after_exactly_retry_in_seconds(
    idle: Server, worker: Key, retry_in: int
) -> None:
    enqueue(idle, type="email", maxRetries=3)
    job = claim(idle, worker)
    assert job is not None
    failed = fail(idle, worker, job["id"], error="smtp timeout", retry_in=retry_in, attempt=1).ok()["failJob"]
    assert failed["status"] == "PENDING"
    assert failed["retryCount"] == 1
    assert (failed["workerId"], failed["leaseExpiresAt"], failed["finishedAt"]) == (None, None, None)
    assert retry_delay(failed) == retry_in
    assert admin_job(idle, job["id"])["error"] == "smtp timeout"
    again = claim(idle, worker)
    if retry_in == 0:
        assert again is not None and (again["id"], again["attempt"]) == (job["id"], 2)
    else:
        assert again is None, "a job was claimed before its retry was due"


def test_non_retryable_failure_is_terminal_at_once(idle: Server, worker: Key) -> None:
    enqueue(idle, type="email", maxRetries=5)
    job = claim(idle, worker)
    assert job is not None
    failed = fail(idle, worker, job["id"], error="bad address", retryable=False).ok()["failJob"]
    assert failed["status"] == "FAILED"
    assert failed["retryCount"] == 0
    assert_about_now(failed["finishedAt"])
    assert failed["leaseExpiresAt"] is None
    assert admin_job(idle, job["id"])["error"] == "bad address"
    assert claim(idle, worker) is None


@pytest.mark.parametrize("max_retries", [0, 2])
def test_failure_after_the_last_retry_is_terminal(idle: Server, worker: Key, max_retries: int) -> None:
    enqueue(idle, type="resize", maxRetries=max_retries)
    for used in range(max_retries):
        job = claim(idle, worker)
        assert job is not None and job["retryCount"] == used
        assert fail(idle, worker, job["id"], retry_in=0).ok()["failJob"]["status"] == "PENDING"
    job = claim(idle, worker)
    assert job is not None and job["attempt"] == max_retries + 1
    failed = fail(idle, worker, job["id"], retry_in=0).ok()["failJob"]
    assert (failed["status"], failed["retryCount"]) == ("FAILED", max_retries)
    assert failed["finishedAt"] is not None


@pytest.mark.parametrize(
    ("base", "cap"),
    [(10, 3600), (10, 15)],
    ids=["exponential", "capped-at-15s"],
)
def test_backoff_is_exponential_with_jitter_and_never_exceeds_the_cap(
    start_server: Callable[..., Server], unique: Callable[[str], str], base: int, cap: int
) -> None:
    srv = start_server(retry_base_seconds=base, retry_max_seconds=cap)
    worker = new_key(srv, unique, "worker")
    samples_per_count = 3
    batch = [{"type": "noop", "maxRetries": 5}] * samples_per_count
    targets = {j["id"]: k for k in (0, 1, 2, 3) for j in enqueue_many(srv, batch)}
    delays: dict[int, list[float]] = {k: [] for k in (0, 1, 2, 3)}
    for _ in range(4):
        # Fail with retryInSeconds 0 until a job reaches its target retryCount, then let the server pick.
        for job in claim_many(srv, worker, limit=100):
            if job["retryCount"] < targets[job["id"]]:
                fail(srv, worker, job["id"], retry_in=0).ok()
            else:
                failed = fail(srv, worker, job["id"]).ok()["failJob"]
                assert failed["status"] == "PENDING"
                delays[job["retryCount"]].append(retry_delay(failed))
    for retry_count, seen in delays.items():
        d = min(cap, base * 2**retry_count)
        assert len(seen) == samples_per_count, (retry_count, seen)
        for delay in seen:
            assert 0.75 * d <= delay <= d, (
                f"retryCount {retry_count}: delay {delay} outside [{0.75 * d}, {d}]"
            )
    ratios = {round(delay / min(cap, base * 2**k), 6) for k, seen in delays.items() for delay in seen}
    assert len(ratios) > 1, "no jitter: every delay was the same fraction of d"


def test_zero_retry_base_retries_at_once(eager: Server, unique: Callable[[str], str]) -> None:
    srv = eager
    worker = new_key(srv, unique, "worker")
    enqueue(srv, type="email")
    job = claim(srv, worker)
    assert job is not None
    failed = fail(srv, worker, job["id"]).ok()["failJob"]
    assert failed["status"] == "PENDING" and retry_delay(failed) == 0
    again = claim(srv, worker)
    assert again is not None and (again["id"], again["attempt"], again["retryCount"]) == (job["id"], 2, 1)


# --- leases ----------------------------------------------------------------------------------------


def test_lease_expires_without_any_request(eager: Server, unique: Callable[[str], str]) -> None:
    srv = eager
    worker = new_key(srv, unique, "worker")
    retrying = enqueue(srv, type="email", maxRetries=3)
    last_chance = enqueue(srv, type="email", maxRetries=0)
    held = claim_many(srv, worker, limit=2, lease=1)
    assert {j["id"] for j in held} == {retrying["id"], last_chance["id"]}

    # Only admin reads from here on: no claim runs the expiry for us.
    back = wait_for(
        lambda: admin_job(srv, retrying["id"]), lambda j: j["status"] != "RUNNING", 8, "the lease to expire"
    )
    assert (back["status"], back["retryCount"], back["error"]) == ("PENDING", 1, "lease expired")
    assert (back["workerId"], back["leaseExpiresAt"]) == (None, None)
    gone = wait_for(
        lambda: admin_job(srv, last_chance["id"]), lambda j: j["status"] != "RUNNING", 8, "the last lease"
    )
    assert (gone["status"], gone["retryCount"], gone["error"]) == ("FAILED", 0, "lease expired")
    assert gone["finishedAt"] is not None


STALE_CALLS: list[tuple[str, Callable[[Server, Key, str], GraphQLResponse]]] = [
    ("completeJob(attempt: 1)", lambda s, w, i: complete(s, w, i, result={"stale": True}, attempt=1)),
    ("completeJob()", lambda s, w, i: complete(s, w, i, result={"stale": True})),
    ("heartbeatJob(attempt: 1)", lambda s, w, i: heartbeat(s, w, i, attempt=1)),
    ("heartbeatJob()", lambda s, w, i: heartbeat(s, w, i)),
    ("failJob(attempt: 1)", lambda s, w, i: fail(s, w, i, attempt=1, retryable=False)),
    ("failJob()", lambda s, w, i: fail(s, w, i, retryable=False)),
]


def test_stale_holder_is_fenced_off(eager: Server, unique: Callable[[str], str]) -> None:
    srv = eager
    a, b = new_key(srv, unique, "worker"), new_key(srv, unique, "worker")
    enqueue(srv, type="report", maxRetries=3)
    first = claim(srv, a, lease=1)
    assert first is not None and first["attempt"] == 1
    second = claim(srv, b, wait=10)  # woken once A's lease has expired
    assert second is not None and second["id"] == first["id"]
    assert (second["attempt"], second["workerId"], second["retryCount"]) == (2, b.name, 1)

    for label, call in STALE_CALLS:
        response = call(srv, a, first["id"])
        # No longer A's job (B holds it): exactly as if it did not exist (API.md section 2).
        assert response.codes == ["NOT_FOUND"], f"stale {label}: {response.body}"
        assert response.errors[0]["message"] == f"job {first['id']} not found", response.body
        job = admin_job(srv, first["id"])
        assert (job["status"], job["workerId"], job["attempt"]) == ("RUNNING", b.name, 2), f"after {label}"
        assert job["result"] is None

    done = complete(srv, b, first["id"], result={"by": "B"}, attempt=2).ok()["completeJob"]
    assert (done["status"], done["result"], done["workerId"]) == ("COMPLETED", {"by": "B"}, b.name)


def test_completion_racing_lease_expiry_is_never_overwritten(
    eager: Server, unique: Callable[[str], str]
) -> None:
    srv = eager
    worker = new_key(srv, unique, "worker")
    # 0.5: one completion that a busy machine still gets in before the 1 s lease runs out.
    offsets = [0.5, 0.7, 0.9, 1.1]
    enqueue_many(srv, [{"type": "noop"}] * len(offsets))
    held = claim_many(srv, worker, limit=len(offsets), lease=1)
    claimed_at = time.monotonic()
    assert len(held) == len(offsets)
    accepted: dict[str, dict[str, Any]] = {}
    refused: list[str] = []
    for job, offset in zip(held, offsets, strict=True):
        time.sleep(max(0.0, claimed_at + offset - time.monotonic()))
        result = {"offset": offset}
        response = complete(srv, worker, job["id"], result=result, attempt=1)
        if response.errors:  # expired and back to PENDING: no longer the worker's to see
            assert response.codes == ["NOT_FOUND"], response.body
            refused.append(job["id"])
        else:
            assert response.data["completeJob"]["status"] == "COMPLETED"
            accepted[job["id"]] = result
    assert accepted, "no completion made it in before its lease ran out; the race was not exercised"

    # Watch for well past the expiry checks: a completed job stays completed, result intact.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        for job_id, result in accepted.items():
            job = admin_job(srv, job_id)
            assert (job["status"], job["result"], job["error"]) == ("COMPLETED", result, None), job
        time.sleep(0.2)
    for job_id in refused:  # a refused completion means the rescuer got there first
        job = admin_job(srv, job_id)
        assert job["status"] != "COMPLETED" and job["error"] == "lease expired", job


# --- cancel and retry ------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["own-producer", "admin"])
def test_cancel_pending_job(server: Server, producer: Key, who: str) -> None:
    job = enqueue(server, producer, type="email")
    key = producer.secret if who == "own-producer" else server.admin_key
    cancelled = server.gql(CANCEL, {"id": job["id"]}, key=key).ok()["cancelJob"]
    assert cancelled["status"] == "CANCELLED"
    assert_about_now(cancelled["finishedAt"])
    assert admin_job(server, job["id"])["status"] == "CANCELLED"


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "CANCELLED"])
def test_cancel_of_a_finished_job_conflicts(idle: Server, worker: Key, state: str) -> None:
    """A RUNNING job's cancel is a request (steering/test_cancel_running.py)."""
    job = enqueue(idle, type="noop")
    if state in ("COMPLETED", "FAILED"):
        assert claim(idle, worker) is not None
    if state == "COMPLETED":
        complete(idle, worker, job["id"]).ok()
    if state == "FAILED":
        fail(idle, worker, job["id"], retryable=False).ok()
    if state == "CANCELLED":
        idle.gql(CANCEL, {"id": job["id"]}).ok()
    before = admin_job(idle, job["id"])
    assert before["status"] == state
    assert idle.gql(CANCEL, {"id": job["id"]}).codes == ["CONFLICT"]
    assert admin_job(idle, job["id"]) == before


@pytest.mark.parametrize("terminal", ["FAILED", "CANCELLED"])
def test_admin_retry_brings_a_terminal_job_back(idle: Server, worker: Key, terminal: str) -> None:
    job = enqueue(idle, type="report", maxRetries=1)
    if terminal == "FAILED":
        for _ in range(2):  # one retry, then the terminal failure
            assert claim(idle, worker) is not None
            fail(idle, worker, job["id"], retry_in=0).ok()
    else:
        idle.gql(CANCEL, {"id": job["id"]}).ok()
    stored = admin_job(idle, job["id"])
    assert stored["status"] == terminal
    assert idle.gql(RETRY, {"id": job["id"]}).ok()  # admin

    retried = admin_job(idle, job["id"])
    assert (retried["status"], retried["retryCount"], retried["finishedAt"]) == ("PENDING", 0, None)
    assert_about_now(retried["runAt"])
    again = claim(idle, worker)
    assert again is not None and again["id"] == job["id"]
    assert again["attempt"] == stored["attempt"] + 1
    assert idle.gql(RETRY, {"id": job["id"]}).codes == ["CONFLICT"], "a RUNNING job was retried"


# --- pruning ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pruning_server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that prunes every second what finished over a second ago (one server start
    for both pruning tests: each looks only at its own jobs)."""
    with serving(backend, tmp_path_factory, retention_seconds=1, prune_interval_seconds=1) as running:
        yield running


def test_finished_jobs_are_pruned_and_live_ones_kept(
    pruning_server: Server, unique: Callable[[str], str]
) -> None:
    srv = pruning_server
    worker = new_key(srv, unique, "worker")
    completed, failed, running = enqueue_many(srv, [{"type": "noop"}] * 3)
    for job in claim_many(srv, worker, limit=3):
        if job["id"] == completed["id"]:
            complete(srv, worker, job["id"]).ok()
        elif job["id"] == failed["id"]:
            fail(srv, worker, job["id"], retryable=False).ok()
    cancelled = enqueue(srv, type="email")
    srv.gql(CANCEL, {"id": cancelled["id"]}).ok()
    pending = enqueue(srv, type="email")
    finished = [completed["id"], failed["id"], cancelled["id"]]

    wait_for(
        lambda: [admin_job(srv, i) for i in finished],
        lambda jobs: all(j is None for j in jobs),
        10,
        "the finished jobs to be pruned",
    )
    assert admin_job(srv, pending["id"])["status"] == "PENDING"
    assert admin_job(srv, running["id"])["status"] == "RUNNING"
    orphans = srv.sql("SELECT job_id FROM job_events WHERE job_id IN :ids", ids=[int(i) for i in finished])
    assert orphans == [], "events of pruned jobs were left behind"


def test_ids_of_pruned_jobs_are_never_reused(pruning_server: Server) -> None:
    # The newest job is the one pruned: without AUTOINCREMENT SQLite would hand its id out again.
    srv = pruning_server
    newest = enqueue(srv, type="email")
    srv.gql(CANCEL, {"id": newest["id"]}).ok()
    wait_for(lambda: admin_job(srv, newest["id"]), lambda job: job is None, 10, "the job to be pruned")
    assert int(enqueue(srv, type="email")["id"]) > int(newest["id"])


# --- listing and statistics ------------------------------------------------------------------------

FILTERS = [
    pytest.param(None, None, id="all"),
    pytest.param("CANCELLED", None, id="status=CANCELLED"),
    pytest.param(None, "report", id="type=report"),
    pytest.param("PENDING", "email", id="status=PENDING,type=email"),
    pytest.param("FAILED", None, id="status=FAILED-empty"),
]


@pytest.mark.parametrize(("status", "job_type"), FILTERS)
def test_jobs_pages_walk_everything_newest_first(
    server: Server, producer: Key, status: str | None, job_type: str | None
) -> None:
    types = ["email", "report", "resize"]
    jobs = enqueue_many(server, [{"type": types[i % 3]} for i in range(23)], key=producer)
    for job in jobs[::4]:
        server.gql(CANCEL, {"id": job["id"]}, key=producer.secret).ok()
        job["status"] = "CANCELLED"
    expected = sorted(
        (int(j["id"]) for j in jobs if status in (None, j["status"]) and job_type in (None, j["type"])),
        reverse=True,
    )

    seen: list[int] = []
    after: str | None = None
    for _ in range(10):
        variables = {"status": status, "type": job_type, "first": 5, "after": after}
        page = server.gql(JOBS_PAGE, variables, key=producer.secret).ok()["jobs"]
        assert page["totalCount"] == len(expected)
        assert len(page["edges"]) <= 5
        assert [e["node"]["id"] for e in page["edges"]] == [n["id"] for n in page["nodes"]]
        for edge in page["edges"]:
            assert status in (None, edge["node"]["status"]) and job_type in (None, edge["node"]["type"])
        seen += [int(e["node"]["id"]) for e in page["edges"]]
        if page["edges"]:
            assert page["pageInfo"]["endCursor"] == page["edges"][-1]["cursor"]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    else:
        pytest.fail("pagination never ended")
    assert seen == expected, "pages skipped, repeated or misordered jobs"


def test_queue_stats_count_by_status_and_type(idle: Server, producer: Key, worker: Key) -> None:
    empty = idle.gql(STATS, key=producer.secret).ok()["queueStats"]
    assert empty["counts"] == dict.fromkeys(("pending", "running", "completed", "failed", "cancelled"), 0)
    assert (empty["byType"], empty["oldestPendingSeconds"]) == ([], None)

    enqueue(idle, producer, type="resize", runAt=(now() + timedelta(hours=1)).isoformat())
    delayed_only = idle.gql(STATS, key=producer.secret).ok()["queueStats"]
    assert delayed_only["counts"]["pending"] == 1
    assert delayed_only["oldestPendingSeconds"] is None, "a delayed job counted as waiting"

    enqueue(idle, producer, type="noop")
    email, _ = enqueue(idle, producer, type="email"), enqueue(idle, producer, type="email")
    report = enqueue(idle, producer, type="report")
    idle.gql(CANCEL, {"id": report["id"]}, key=producer.secret).ok()
    assert claim(idle, worker, types=["noop"]) is not None
    claimed = claim(idle, worker, types=["email"])
    assert claimed is not None and claimed["id"] == email["id"]
    complete(idle, worker, email["id"]).ok()
    time.sleep(0.01)  # so that the oldest due job has a measurable age

    stats = idle.gql(STATS, key=producer.secret).ok()["queueStats"]
    zero = dict.fromkeys(("pending", "running", "completed", "failed", "cancelled"), 0)
    assert stats["counts"] == {**zero, "pending": 2, "running": 1, "completed": 1, "cancelled": 1}
    assert stats["byType"] == [
        {"type": "email", "counts": {**zero, "pending": 1, "completed": 1}},
        {"type": "noop", "counts": {**zero, "running": 1}},
        {"type": "report", "counts": {**zero, "cancelled": 1}},
        {"type": "resize", "counts": {**zero, "pending": 1}},
    ]
    assert stats["oldestPendingSeconds"] is not None and 0 < stats["oldestPendingSeconds"] < 120


# --- the event log ---------------------------------------------------------------------------------


def retry_then_complete(srv: Server, worker: Key) -> str:
    job = enqueue(srv, type="email")
    assert claim(srv, worker) is not None
    fail(srv, worker, job["id"], retry_in=0).ok()
    assert claim(srv, worker) is not None
    complete(srv, worker, job["id"]).ok()
    return job["id"]


def cancelled(srv: Server, worker: Key) -> str:
    job = enqueue(srv, type="email")
    srv.gql(CANCEL, {"id": job["id"]}).ok()
    return job["id"]


def failed_for_good(srv: Server, worker: Key) -> str:
    job = enqueue(srv, type="email")
    assert claim(srv, worker) is not None
    fail(srv, worker, job["id"], retryable=False).ok()
    return job["id"]


def lease_expired(srv: Server, worker: Key) -> str:
    job = enqueue(srv, type="email", maxRetries=0)
    assert claim(srv, worker, lease=1) is not None
    wait_for(lambda: admin_job(srv, job["id"]), lambda j: j["status"] == "FAILED", 8, "the lease to expire")
    return job["id"]


def retried(srv: Server, worker: Key) -> str:
    job_id = cancelled(srv, worker)
    srv.gql(RETRY, {"id": job_id}).ok()
    return job_id


EVENT_SCENARIOS = [
    pytest.param(
        retry_then_complete,
        [
            ("ENQUEUED", "pending"),
            ("CLAIMED", "running"),
            ("RETRYING", "pending"),
            ("CLAIMED", "running"),
            ("COMPLETED", "completed"),
        ],
        id="retry-then-complete",
    ),
    pytest.param(cancelled, [("ENQUEUED", "pending"), ("CANCELLED", "cancelled")], id="cancelled"),
    pytest.param(
        failed_for_good, [("ENQUEUED", "pending"), ("CLAIMED", "running"), ("FAILED", "failed")], id="failed"
    ),
    pytest.param(
        lease_expired,
        [("ENQUEUED", "pending"), ("CLAIMED", "running"), ("LEASE_EXPIRED", "failed")],
        id="lease-expired",
    ),
    pytest.param(
        retried, [("ENQUEUED", "pending"), ("CANCELLED", "cancelled"), ("RETRIED", "pending")], id="retried"
    ),
]


@pytest.mark.parametrize(("scenario", "expected"), EVENT_SCENARIOS)
def test_every_transition_records_an_event_row(
    idle: Server, worker: Key, scenario: Callable[[Server, Key], str], expected: list[tuple[str, str]]
) -> None:
    job_id = scenario(idle, worker)
    rows = idle.sql("SELECT kind, status, at FROM job_events WHERE job_id = :id ORDER BY id", id=int(job_id))
    assert [(kind, status) for kind, status, _ in rows] == expected
    times = [stored_time(at) for _, _, at in rows]
    assert times == sorted(times), "event times go backwards"


# --- health and metrics ----------------------------------------------------------------------------


def test_healthz_answers_ok(server: Server) -> None:
    response = httpx.get(f"{server.url}/healthz", timeout=10)
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def metric_samples(server: Server) -> Iterator[tuple[str, str, dict[str, str], float]]:
    response = httpx.get(f"{server.url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            yield family.type, sample.name, sample.labels, sample.value


def sample_value(server: Server, name: str, **labels: str) -> float:
    values = [v for _, n, lab, v in metric_samples(server) if n == name and lab == labels]
    return values[0] if values else 0.0


def test_metrics_count_jobs_and_time_requests(server: Server, producer: Key) -> None:
    before_email = sample_value(server, "queuelog_jobs_enqueued_total", type="email")
    before_report = sample_value(server, "queuelog_jobs_enqueued_total", type="report")
    for _ in range(3):
        enqueue(server, producer, type="email")

    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert re.search(r'^queuelog_jobs_enqueued_total\{type="email"\} ', text, re.MULTILINE), text[:2000]
    assert sample_value(server, "queuelog_jobs_enqueued_total", type="email") == before_email + 3
    assert sample_value(server, "queuelog_jobs_enqueued_total", type="report") == before_report

    # Earlier tests on this server left claims whose leases expire at any moment (RUNNING back
    # to PENDING): compare the gauges with counts read on both sides of them, when those agree.
    for _ in range(20):
        counts = server.gql(STATS).ok()["queueStats"]["counts"]
        samples = list(metric_samples(server))
        if server.gql(STATS).ok()["queueStats"]["counts"] == counts:
            break
    gauges = {lab["status"]: v for kind, n, lab, v in samples if n == "queuelog_jobs" and kind == "gauge"}
    assert gauges == {status: float(count) for status, count in counts.items()}

    histogram = [(n, lab, v) for kind, n, lab, v in samples if kind == "histogram"]
    graphql_post = {"path": "/graphql", "method": "POST"}
    buckets = [v for n, lab, v in histogram if n.endswith("_bucket") and lab.items() >= graphql_post.items()]
    count = [
        v
        for n, lab, v in histogram
        if n == "queuelog_http_request_duration_seconds_count" and lab == graphql_post
    ]
    assert buckets and buckets == sorted(buckets), "histogram buckets are not cumulative"
    assert count and count[0] >= 3 and buckets[-1] == count[0]
