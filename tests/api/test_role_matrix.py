"""The role matrix of API.md section 2, against a real server over HTTP.

Attacked: every query and mutation (subscriptions are covered elsewhere) called by every
role. Proven:
- an operation a role may never do answers FORBIDDEN whatever the job (pending, running,
  failed, missing), and nothing in the queue changes;
- an operation a role may do succeeds, and keys with several roles get the union;
- visibility: a PRODUCER sees only the jobs it enqueued, a WORKER only the jobs whose
  `workerId` is its name, ADMIN and VIEWER everything (`job(id)`, `jobs`, `totalCount`,
  `queueStats`);
- `cancelJob` / `retryJob` state rules (NOT_FOUND for invisible jobs, CONFLICT for wrong
  states; a RUNNING job's cancel is a request, the job stays RUNNING), `Job.error` ADMIN only,
  `me` with its default `maxPriority`.

Discipline for the shared server: no test leaves a *due* PENDING job behind (jobs that
must stay PENDING are dated far in the future), so every claim takes exactly the job the
test just made due.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

ADMIN, PRODUCER, WORKER, VIEWER = "ADMIN", "PRODUCER", "WORKER", "VIEWER"
ROLES = (ADMIN, PRODUCER, WORKER, VIEWER)
FUTURE = "2999-01-01T00:00:00Z"  # jobs dated here stay PENDING and are never claimed
MISSING_ID = "987654321"

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { created job { id status } } }"
CLAIM = "mutation { claimJob { id status workerId attempt } }"
JOB_STATE = """
query($id: ID!) {
  job(id: $id) { id status workerId attempt retryCount runAt updatedAt leaseExpiresAt finishedAt result }
}"""
SNAPSHOT = """
query($id: ID!) {
  job(id: $id) { id status workerId attempt retryCount runAt updatedAt leaseExpiresAt finishedAt result }
  jobs(first: 1) { totalCount }
  queueStats { counts { pending running completed failed cancelled } }
}"""
VISIBLE = """
query($id: ID!) {
  job(id: $id) { id }
  jobs(first: 100) { totalCount nodes { id } }
  queueStats { counts { pending running completed failed cancelled } byType { type } }
}"""

Server = Any  # conftest.Server; the fixture's type is not importable from a test module


# --- helpers -------------------------------------------------------------------------------


def enqueue(server: Server, key: str, *, due: bool = False, job_type: str = "noop", **extra: Any) -> str:
    """Enqueue one job as `key`; unless `due`, it is dated far in the future."""
    job_input: dict[str, Any] = {"type": job_type, **extra}
    if not due:
        job_input["runAt"] = FUTURE
    data = server.gql(ENQUEUE, {"input": job_input}, key=key).ok()
    assert data["enqueueJob"]["created"] is True
    return data["enqueueJob"]["job"]["id"]


def claim(server: Server, worker_key: str, expected_id: str) -> dict[str, Any]:
    """Claim as `worker_key`, asserting it is the job the test just made due."""
    claimed = server.gql(CLAIM, key=worker_key).ok()["claimJob"]
    assert claimed is not None and claimed["id"] == expected_id, (expected_id, claimed)
    return claimed


def running_job(server: Server, producer_key: str, worker_key: str, **extra: Any) -> str:
    job_id = enqueue(server, producer_key, due=True, **extra)
    claim(server, worker_key, job_id)
    return job_id


def failed_job(server: Server, producer_key: str, worker_key: str, error: str = "boom") -> str:
    job_id = running_job(server, producer_key, worker_key)
    data = server.gql(
        "mutation($id: ID!, $e: String!) { failJob(id: $id, error: $e, retryable: false) { status } }",
        {"id": job_id, "e": error},
        key=worker_key,
    ).ok()
    assert data["failJob"]["status"] == "FAILED"
    return job_id


def completed_job(server: Server, producer_key: str, worker_key: str) -> str:
    job_id = running_job(server, producer_key, worker_key)
    data = server.gql(
        "mutation($id: ID!) { completeJob(id: $id, result: {done: true}) { status } }",
        {"id": job_id},
        key=worker_key,
    ).ok()
    assert data["completeJob"]["status"] == "COMPLETED"
    return job_id


def cancelled_job(server: Server, producer_key: str) -> str:
    job_id = enqueue(server, producer_key)
    data = server.gql(
        "mutation($id: ID!) { cancelJob(id: $id) { status } }", {"id": job_id}, key=producer_key
    )
    assert data.ok()["cancelJob"]["status"] == "CANCELLED"
    return job_id


def job_state(server: Server, job_id: str) -> dict[str, Any] | None:
    return server.gql(JOB_STATE, {"id": job_id}).ok()["job"]


def snapshot(server: Server, job_id: str) -> dict[str, Any]:
    """What the admin sees: one job in full, the total and the per-status counts."""
    return server.gql(SNAPSHOT, {"id": job_id}).ok()


def visible(server: Server, key: str, job_id: str = MISSING_ID) -> dict[str, Any]:
    return server.gql(VISIBLE, {"id": job_id}, key=key).ok()


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys(server: Server) -> dict[str, str]:
    """One key per role (the admin is the bootstrap key, named "admin")."""
    return {
        ADMIN: server.admin_key,
        PRODUCER: server.make_key("rm-producer", "producer"),
        WORKER: server.make_key("rm-worker", "worker"),
        VIEWER: server.make_key("rm-viewer", "viewer"),
    }


@pytest.fixture(scope="module")
def targets(server: Server, keys: dict[str, str]) -> dict[str, str]:
    """Jobs in each interesting state, owned by rm-producer and worked by rm-worker."""
    return {
        "pending": enqueue(server, keys[PRODUCER]),
        "running": running_job(server, keys[PRODUCER], keys[WORKER]),
        "failed": failed_job(server, keys[PRODUCER], keys[WORKER]),
        "missing": MISSING_ID,
    }


# --- the table -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    name: str
    document: str
    allowed: frozenset[str]
    takes_id: bool = False

    def variables(self, job_id: str) -> dict[str, Any]:
        return {"id": job_id} if self.takes_id else {}


EVERYONE = frozenset(ROLES)
OPS = [
    Op("me", "query { me { name } }", EVERYONE),
    Op("job", "query($id: ID!) { job(id: $id) { id } }", EVERYONE, takes_id=True),
    Op("jobs", "query { jobs { totalCount } }", EVERYONE),
    Op("queueStats", "query { queueStats { counts { pending } } }", EVERYONE),
    Op(
        "enqueueJob",
        f'mutation {{ enqueueJob(input: {{type: "noop", runAt: "{FUTURE}"}}) {{ job {{ id }} }} }}',
        frozenset({ADMIN, PRODUCER}),
    ),
    Op(
        "enqueueJobs",
        f'mutation {{ enqueueJobs(inputs: [{{type: "noop", runAt: "{FUTURE}"}}]) {{ job {{ id }} }} }}',
        frozenset({ADMIN, PRODUCER}),
    ),
    Op("claimJob", "mutation { claimJob { id } }", frozenset({WORKER})),
    Op("claimJobs", "mutation { claimJobs(limit: 5) { id } }", frozenset({WORKER})),
    Op(
        "heartbeatJob",
        "mutation($id: ID!) { heartbeatJob(id: $id, leaseSeconds: 600) { id } }",
        frozenset({WORKER}),
        takes_id=True,
    ),
    Op(
        "completeJob",
        "mutation($id: ID!) { completeJob(id: $id, result: {x: 1}) { id } }",
        frozenset({WORKER}),
        takes_id=True,
    ),
    Op(
        "completeJobs",
        "mutation($id: ID!) { completeJobs(items: [{id: $id}]) { completed { id } rejected } }",
        frozenset({WORKER}),
        takes_id=True,
    ),
    Op(
        "failJob",
        'mutation($id: ID!) { failJob(id: $id, error: "x", retryable: false) { id } }',
        frozenset({WORKER}),
        takes_id=True,
    ),
    Op("cancelJob", "mutation($id: ID!) { cancelJob(id: $id) { id } }", frozenset({ADMIN, PRODUCER}), True),
    Op("retryJob", "mutation($id: ID!) { retryJob(id: $id) { id } }", frozenset({ADMIN}), takes_id=True),
]
OPS_BY_NAME = {op.name: op for op in OPS}
TARGETS = ("pending", "running", "failed", "missing")


def forbidden_cases() -> list[Any]:
    cases = []
    for role in ROLES:
        for op in OPS:
            if role in op.allowed:
                continue
            for target in TARGETS if op.takes_id else ("pending",):
                label = f"{role}-{op.name}" + (f"-{target}" if op.takes_id else "")
                cases.append(pytest.param(role, op, target, id=label))
    return cases


def test_the_table_forbids_what_api_md_forbids() -> None:
    """A guard on the table itself: the never-allowed cells of API.md's matrix."""
    never = {(role, op.name) for op in OPS for role in ROLES if role not in op.allowed}
    work = ["claimJob", "claimJobs", "heartbeatJob", "completeJob", "completeJobs", "failJob"]
    expected = (
        {(ADMIN, name) for name in work}
        | {(PRODUCER, name) for name in [*work, "retryJob"]}
        | {(WORKER, name) for name in ["enqueueJob", "enqueueJobs", "cancelJob", "retryJob"]}
        | {(VIEWER, name) for name in [*work, "enqueueJob", "enqueueJobs", "cancelJob", "retryJob"]}
    )
    assert never == expected


@pytest.mark.parametrize(("role", "op", "target"), forbidden_cases())
def test_role_may_never(
    server: Server, keys: dict[str, str], targets: dict[str, str], role: str, op: Op, target: str
) -> None:
    job_id = targets[target]
    before = snapshot(server, job_id)
    response = server.gql(op.document, op.variables(job_id), key=keys[role])
    assert response.status == 200
    assert response.codes == ["FORBIDDEN"], response.body
    assert not (response.data or {}).get(op.name), response.body
    assert "roles" in response.errors[0]["message"], response.errors[0]["message"]
    assert snapshot(server, job_id) == before, "a FORBIDDEN call changed the queue"


@pytest.mark.parametrize("role", [ADMIN, PRODUCER, VIEWER])
def test_forbidden_claim_leaves_a_due_job_alone(server: Server, keys: dict[str, str], role: str) -> None:
    job_id = enqueue(server, keys[PRODUCER], due=True)
    for op in ("claimJob", "claimJobs"):
        response = server.gql(OPS_BY_NAME[op].document, key=keys[role])
        assert response.codes == ["FORBIDDEN"], response.body
    state = job_state(server, job_id)
    assert state is not None and state["status"] == "PENDING" and state["attempt"] == 0
    claim(server, keys[WORKER], job_id)  # leave nothing due behind


ROLE_COMBOS = [
    (PRODUCER, WORKER),
    (VIEWER, WORKER),
    (ADMIN, WORKER),
    (VIEWER, PRODUCER),
    (ADMIN, VIEWER),
]


def union_cases() -> list[Any]:
    return [pytest.param(combo, op, id=f"{'+'.join(combo)}-{op.name}") for combo in ROLE_COMBOS for op in OPS]


@pytest.mark.parametrize(("combo", "op"), union_cases())
def test_several_roles_get_the_union(
    server: Server, unique: Callable[[str], str], combo: Any, op: Op
) -> None:
    key = server.make_key(unique("union"), *[r.lower() for r in combo])
    response = server.gql(op.document, op.variables(MISSING_ID), key=key)
    may = any(role in op.allowed for role in combo)
    if may:
        assert "FORBIDDEN" not in response.codes, response.body
        # Id-taking operations on a missing job get past the role check and then find nothing.
        if op.takes_id and op.name not in ("job", "completeJobs"):
            assert response.codes == ["NOT_FOUND"], response.body
        elif op.name == "completeJobs":
            assert response.ok()["completeJobs"] == {"completed": [], "rejected": [MISSING_ID]}
        elif op.name in ("job", "claimJob"):  # nothing to find: nothing is due, the id is missing
            assert response.ok()[op.name] is None
        else:
            assert response.ok()[op.name] is not None
    else:
        assert response.codes == ["FORBIDDEN"], response.body


# --- me ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("roles", "max_priority", "expected_priority"),
    [
        pytest.param(("producer",), None, "MEDIUM", id="producer-default-medium"),
        pytest.param(("worker",), None, "MEDIUM", id="worker-default-medium"),
        pytest.param(("viewer",), None, "MEDIUM", id="viewer-default-medium"),
        pytest.param(("admin",), None, "CRITICAL", id="admin-default-critical"),
        pytest.param(("producer",), "high", "HIGH", id="producer-high"),
        pytest.param(("producer", "worker"), None, "MEDIUM", id="producer+worker"),
        pytest.param(("viewer", "admin"), None, "CRITICAL", id="viewer+admin"),
    ],
)
def test_me(
    server: Server,
    unique: Callable[[str], str],
    roles: tuple[str, ...],
    max_priority: str | None,
    expected_priority: str,
) -> None:
    name = unique("me")
    key = server.make_key(name, *roles, max_priority=max_priority)
    me = server.gql("{ me { name roles maxPriority } }", key=key).ok()["me"]
    assert me["name"] == name
    assert sorted(me["roles"]) == sorted(r.upper() for r in roles)
    assert me["maxPriority"] == expected_priority


def test_me_of_the_bootstrap_admin(server: Server) -> None:
    me = server.gql("{ me { name roles maxPriority } }").ok()["me"]
    assert me == {"name": "admin", "roles": ["ADMIN"], "maxPriority": "CRITICAL"}


# --- reads and visibility ------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_may_read(
    server: Server, keys: dict[str, str], targets: dict[str, str], role: str
) -> None:
    # Each role's own visible job: the producer's pending one, the worker's running one.
    job_id = targets["running"] if role == WORKER else targets["pending"]
    data = visible(server, keys[role], job_id)
    assert data["job"] == {"id": job_id}
    assert job_id in {n["id"] for n in data["jobs"]["nodes"]} or data["jobs"]["totalCount"] > 100
    assert data["jobs"]["totalCount"] >= 1
    assert sum(data["queueStats"]["counts"].values()) == data["jobs"]["totalCount"]


def test_producer_sees_only_jobs_it_enqueued(server: Server, unique: Callable[[str], str]) -> None:
    a_key = server.make_key(unique("prod-a"), "producer")
    b_key = server.make_key(unique("prod-b"), "producer")
    a_jobs = {enqueue(server, a_key, job_type="email") for _ in range(2)}
    b_jobs = {enqueue(server, b_key, job_type="report") for _ in range(3)}

    for key, own, other, own_type in ((a_key, a_jobs, b_jobs, "email"), (b_key, b_jobs, a_jobs, "report")):
        some_other = next(iter(other))
        data = visible(server, key, some_other)
        assert data["job"] is None, "a producer read another producer's job"
        assert {n["id"] for n in data["jobs"]["nodes"]} == own
        assert data["jobs"]["totalCount"] == len(own)
        assert data["queueStats"]["counts"] == {
            "pending": len(own),
            "running": 0,
            "completed": 0,
            "failed": 0,
            "cancelled": 0,
        }
        assert [t["type"] for t in data["queueStats"]["byType"]] == [own_type]
        for mine in own:
            assert visible(server, key, mine)["job"] == {"id": mine}
        filtered = server.gql(
            "query($t: String) { jobs(type: $t, status: PENDING) { totalCount } }",
            {"t": "report" if own_type == "email" else "email"},
            key=key,
        ).ok()
        assert filtered["jobs"]["totalCount"] == 0


def test_worker_sees_only_jobs_it_holds_or_finished(server: Server, unique: Callable[[str], str]) -> None:
    producer = server.make_key(unique("prod"), "producer")
    w1_name, w2_name = unique("w1"), unique("w2")
    w1 = server.make_key(w1_name, "worker")
    w2 = server.make_key(w2_name, "worker")
    pending = enqueue(server, producer)
    held = running_job(server, producer, w1)

    data = visible(server, w1, held)
    assert data["job"] == {"id": held}
    assert [n["id"] for n in data["jobs"]["nodes"]] == [held]
    assert data["queueStats"]["counts"]["running"] == 1
    assert sum(data["queueStats"]["counts"].values()) == 1
    assert visible(server, w1, pending)["job"] is None, "a worker saw a PENDING job it does not hold"

    other = visible(server, w2, held)
    assert other["job"] is None, "a worker saw a job held by another worker"
    assert other["jobs"] == {"totalCount": 0, "nodes": []}
    assert sum(other["queueStats"]["counts"].values()) == 0
    assert other["queueStats"]["byType"] == []

    # Finished by w1: workerId stays w1, so w1 still sees it.
    server.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": held}, key=w1).ok()
    assert visible(server, w1, held)["queueStats"]["counts"]["completed"] == 1
    assert visible(server, w2, held)["job"] is None

    # Sent back to PENDING by a retryable failure: workerId is cleared, so w1 no longer sees it.
    retried = running_job(server, producer, w1, maxRetries=2)
    failed = server.gql(
        'mutation($id: ID!) { failJob(id: $id, error: "x", retryInSeconds: 86400) { status workerId } }',
        {"id": retried},
        key=w1,
    ).ok()["failJob"]
    assert failed == {"status": "PENDING", "workerId": None}
    assert visible(server, w1, retried)["job"] is None


@pytest.mark.parametrize("role", [ADMIN, VIEWER])
def test_admin_and_viewer_see_everything(
    server: Server, keys: dict[str, str], unique: Callable[[str], str], role: str
) -> None:
    producer = server.make_key(unique("prod"), "producer")
    theirs = enqueue(server, producer)
    everything = visible(server, keys[ADMIN], theirs)
    data = visible(server, keys[role], theirs)
    assert data["job"] == {"id": theirs}
    assert data["jobs"]["totalCount"] == everything["jobs"]["totalCount"]
    assert data["queueStats"] == everything["queueStats"]
    assert sum(data["queueStats"]["counts"].values()) == data["jobs"]["totalCount"]


def test_producer_worker_key_sees_the_union(server: Server, unique: Callable[[str], str]) -> None:
    other_producer = server.make_key(unique("prod"), "producer")
    both = server.make_key(unique("prodworker"), "producer", "worker")
    mine = enqueue(server, both)
    held = running_job(server, other_producer, both)
    hidden = enqueue(server, other_producer)

    data = visible(server, both, hidden)
    assert data["job"] is None
    assert {n["id"] for n in data["jobs"]["nodes"]} == {mine, held}
    assert data["jobs"]["totalCount"] == 2
    assert data["queueStats"]["counts"]["pending"] == 1
    assert data["queueStats"]["counts"]["running"] == 1
    # As its producer side it may cancel its own job; as a worker it completes the held one.
    server.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": mine}, key=both).ok()
    server.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": held}, key=both).ok()
    assert visible(server, both)["queueStats"]["counts"]["completed"] == 1


def test_viewer_worker_key_sees_everything_and_may_claim(
    server: Server, keys: dict[str, str], unique: Callable[[str], str]
) -> None:
    both = server.make_key(unique("viewworker"), "viewer", "worker")
    pending = enqueue(server, keys[PRODUCER])
    assert visible(server, both, pending)["job"] == {"id": pending}
    assert visible(server, both)["jobs"]["totalCount"] == visible(server, keys[ADMIN])["jobs"]["totalCount"]
    held = running_job(server, keys[PRODUCER], both)
    server.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": held}, key=both).ok()


# --- allowed mutations succeed -------------------------------------------------------------


@pytest.mark.parametrize(
    ("roles", "max_priority", "priority", "code"),
    [
        pytest.param(("admin",), None, "CRITICAL", None, id="admin-critical"),
        pytest.param(("producer",), None, "LOW", None, id="producer-low"),
        pytest.param(("producer",), None, "MEDIUM", None, id="producer-medium"),
        pytest.param(("producer",), None, "HIGH", "FORBIDDEN", id="producer-high-over-max"),
        pytest.param(("producer",), None, "CRITICAL", "FORBIDDEN", id="producer-critical-over-max"),
        pytest.param(("producer",), "high", "HIGH", None, id="producer-max-high-high"),
        pytest.param(("producer",), "high", "CRITICAL", "FORBIDDEN", id="producer-max-high-critical"),
        pytest.param(("producer",), "critical", "CRITICAL", None, id="producer-max-critical"),
    ],
)
@pytest.mark.parametrize("batch", [False, True], ids=["enqueueJob", "enqueueJobs"])
def test_enqueue_up_to_max_priority(
    server: Server,
    unique: Callable[[str], str],
    roles: tuple[str, ...],
    max_priority: str | None,
    priority: str,
    code: str | None,
    batch: bool,
) -> None:
    key = server.make_key(unique("enq"), *roles, max_priority=max_priority)
    job_input = {"type": "noop", "priority": priority, "runAt": FUTURE}
    before = visible(server, server.admin_key)["jobs"]["totalCount"]
    if batch:
        response = server.gql(
            "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { created job { id priority } } }",
            {"i": [{"type": "noop", "runAt": FUTURE}, job_input]},
            key=key,
        )
    else:
        response = server.gql(
            "mutation($i: EnqueueJobInput!) { enqueueJob(input: $i) { created job { id priority } } }",
            {"i": job_input},
            key=key,
        )
    after = visible(server, server.admin_key)["jobs"]["totalCount"]
    if code is not None:
        assert response.codes == [code], response.body
        assert priority in response.errors[0]["message"]
        assert after == before, "a refused enqueue wrote jobs"
        return
    data = response.ok()
    outcomes = data["enqueueJobs"] if batch else [data["enqueueJob"]]
    assert all(o["created"] for o in outcomes)
    assert outcomes[-1]["job"]["priority"] == priority
    assert after == before + len(outcomes)
    for outcome in outcomes:
        assert visible(server, key, outcome["job"]["id"])["job"] == {"id": outcome["job"]["id"]}


@dataclass(frozen=True)
class WorkerCall:
    document: str
    pick: Callable[[Any], dict[str, Any]]
    status: str
    needs_held_job: bool = True


WORKER_CALLS = {
    "claimJob": WorkerCall(
        "mutation { claimJob { id status workerId } }", lambda d: d["claimJob"], "RUNNING", False
    ),
    "claimJobs": WorkerCall(
        "mutation { claimJobs(limit: 10) { id status workerId } }",
        lambda d: _only(d["claimJobs"]),
        "RUNNING",
        False,
    ),
    "heartbeatJob": WorkerCall(
        "mutation($id: ID!) { heartbeatJob(id: $id, leaseSeconds: 900) { id status workerId } }",
        lambda d: d["heartbeatJob"],
        "RUNNING",
    ),
    "completeJob": WorkerCall(
        "mutation($id: ID!) { completeJob(id: $id, result: {n: 1}) { id status workerId result } }",
        lambda d: d["completeJob"],
        "COMPLETED",
    ),
    "completeJobs": WorkerCall(
        "mutation($id: ID!) { completeJobs(items: [{id: $id, result: {n: 1}}]) "
        "{ completed { id status workerId result } rejected } }",
        lambda d: _only(d["completeJobs"]["completed"]) if not d["completeJobs"]["rejected"] else {},
        "COMPLETED",
    ),
    "failJob": WorkerCall(
        'mutation($id: ID!) { failJob(id: $id, error: "nope", retryable: false) { id status workerId } }',
        lambda d: d["failJob"],
        "FAILED",
    ),
}


def _only(items: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(items) == 1, items
    return items[0]


@pytest.mark.parametrize("name", list(WORKER_CALLS))
def test_worker_operations_succeed(
    server: Server, keys: dict[str, str], unique: Callable[[str], str], name: str
) -> None:
    call = WORKER_CALLS[name]
    worker_name = unique("worker")
    worker = server.make_key(worker_name, "worker")
    if call.needs_held_job:
        job_id = running_job(server, keys[PRODUCER], worker)
    else:
        job_id = enqueue(server, keys[PRODUCER], due=True)
    data = server.gql(call.document, {"id": job_id} if call.needs_held_job else {}, key=worker).ok()
    job = call.pick(data)
    assert job["id"] == job_id and job["status"] == call.status and job["workerId"] == worker_name
    assert job_state(server, job_id)["status"] == call.status  # type: ignore[index]
    if call.status == "COMPLETED":
        assert job["result"] == {"n": 1}
    if call.status == "RUNNING":  # leave nothing RUNNING for later claims to trip on
        server.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": job_id}, key=worker).ok()


# --- cancelJob -----------------------------------------------------------------------------

CANCEL = "mutation($id: ID!) { cancelJob(id: $id) { id status finishedAt cancelRequested } }"


@pytest.mark.parametrize(
    ("canceller", "owner", "state", "code"),
    [
        pytest.param(ADMIN, "p1", "pending", None, id="admin-any-pending"),
        pytest.param(PRODUCER, "p1", "pending", None, id="producer-own-pending"),
        pytest.param(PRODUCER, "p2", "pending", "NOT_FOUND", id="producer-others-pending"),
        pytest.param(PRODUCER, "p2", "running", "NOT_FOUND", id="producer-others-running"),
        pytest.param(PRODUCER, "p1", "missing", "NOT_FOUND", id="producer-missing"),
        pytest.param(ADMIN, "p1", "missing", "NOT_FOUND", id="admin-missing"),
        pytest.param(ADMIN, "p1", "running", None, id="admin-running"),
        pytest.param(ADMIN, "p1", "completed", "CONFLICT", id="admin-completed"),
        pytest.param(ADMIN, "p1", "failed", "CONFLICT", id="admin-failed"),
        pytest.param(ADMIN, "p1", "cancelled", "CONFLICT", id="admin-cancelled"),
        pytest.param(PRODUCER, "p1", "running", None, id="producer-own-running"),
        pytest.param(PRODUCER, "p1", "completed", "CONFLICT", id="producer-own-completed"),
        pytest.param(PRODUCER, "p1", "failed", "CONFLICT", id="producer-own-failed"),
        pytest.param(PRODUCER, "p1", "cancelled", "CONFLICT", id="producer-own-cancelled"),
    ],
)
def test_cancel_job(
    server: Server,
    unique: Callable[[str], str],
    canceller: str,
    owner: str,
    state: str,
    code: str | None,
) -> None:
    producers = {
        "p1": server.make_key(unique("p1"), "producer"),
        "p2": server.make_key(unique("p2"), "producer"),
    }
    worker = server.make_key(unique("worker"), "worker")
    job_id = make_job(server, state, producers[owner], worker)
    key = server.admin_key if canceller == ADMIN else producers["p1"]
    before = snapshot(server, job_id)
    response = server.gql(CANCEL, {"id": job_id}, key=key)
    if code is not None:
        assert response.codes == [code], response.body
        assert response.data is None
        assert snapshot(server, job_id) == before, "a refused cancel changed the queue"
        return
    cancelled = response.ok()["cancelJob"]
    if state == "running":  # a request: the holder is told, the job stays RUNNING (API.md 12)
        assert cancelled["id"] == job_id and cancelled["status"] == "RUNNING"
        assert cancelled["cancelRequested"] is True and cancelled["finishedAt"] is None
        assert job_state(server, job_id)["status"] == "RUNNING"  # type: ignore[index]
        return
    assert cancelled["id"] == job_id and cancelled["status"] == "CANCELLED"
    assert cancelled["finishedAt"] is not None and cancelled["cancelRequested"] is False
    assert job_state(server, job_id)["status"] == "CANCELLED"  # type: ignore[index]


def make_job(server: Server, state: str, producer: str, worker: str, **extra: Any) -> str:
    makers: dict[str, Callable[[], str]] = {
        "pending": lambda: enqueue(server, producer, **extra),
        "running": lambda: running_job(server, producer, worker, **extra),
        "completed": lambda: completed_job(server, producer, worker),
        "failed": lambda: failed_job(server, producer, worker),
        "cancelled": lambda: cancelled_job(server, producer),
        "missing": lambda: MISSING_ID,
    }
    return makers[state]()


# --- retryJob ------------------------------------------------------------------------------

RETRY = "mutation($id: ID!) { retryJob(id: $id) { id status retryCount runAt workerId finishedAt } }"


@pytest.mark.parametrize(
    ("state", "code"),
    [
        pytest.param("failed", None, id="failed"),
        pytest.param("cancelled", None, id="cancelled"),
        pytest.param("pending", "CONFLICT", id="pending"),
        pytest.param("running", "CONFLICT", id="running"),
        pytest.param("completed", "CONFLICT", id="completed"),
        pytest.param("missing", "NOT_FOUND", id="missing"),
    ],
)
def test_retry_job(
    server: Server, keys: dict[str, str], unique: Callable[[str], str], state: str, code: str | None
) -> None:
    worker = server.make_key(unique("worker"), "worker")
    job_id = make_job(server, state, keys[PRODUCER], worker)
    before = snapshot(server, job_id)
    response = server.gql(RETRY, {"id": job_id})
    if code is not None:
        assert response.codes == [code], response.body
        assert snapshot(server, job_id) == before, "a refused retry changed the queue"
        return
    retried = response.ok()["retryJob"]
    assert retried["status"] == "PENDING" and retried["retryCount"] == 0
    assert retried["workerId"] is None and retried["finishedAt"] is None
    run_at = datetime.fromisoformat(retried["runAt"])
    assert abs(run_at - datetime.now(UTC)) < timedelta(minutes=1), "retryJob must set runAt = now"
    # It is due again: a worker takes exactly this job (and clears it out of the way).
    claim(server, worker, job_id)
    server.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": job_id}, key=worker).ok()


def test_retry_job_resets_retry_count(
    server: Server, keys: dict[str, str], unique: Callable[[str], str]
) -> None:
    worker = server.make_key(unique("worker"), "worker")
    job_id = running_job(server, keys[PRODUCER], worker, maxRetries=1)
    again = server.gql(
        'mutation($id: ID!) { failJob(id: $id, error: "x", retryInSeconds: 0) { status retryCount } }',
        {"id": job_id},
        key=worker,
    ).ok()["failJob"]
    assert again == {"status": "PENDING", "retryCount": 1}
    claim(server, worker, job_id)
    final = server.gql(
        'mutation($id: ID!) { failJob(id: $id, error: "x") { status retryCount } }',
        {"id": job_id},
        key=worker,
    ).ok()["failJob"]
    assert final == {"status": "FAILED", "retryCount": 1}
    retried = server.gql(RETRY, {"id": job_id}).ok()["retryJob"]
    assert retried["status"] == "PENDING" and retried["retryCount"] == 0
    server.gql(CANCEL, {"id": job_id}).ok()  # nothing due left behind


# --- Job.error -----------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_job_error_is_admin_only(
    server: Server, keys: dict[str, str], unique: Callable[[str], str], role: str
) -> None:
    producer = server.make_key(unique("prod"), "producer")
    worker = server.make_key(unique("worker"), "worker")
    job_id = failed_job(server, producer, worker, error="disk full on shard 7")
    key = {ADMIN: keys[ADMIN], PRODUCER: producer, WORKER: worker, VIEWER: keys[VIEWER]}[role]
    response = server.gql("query($id: ID!) { job(id: $id) { id status error } }", {"id": job_id}, key=key)
    if role == ADMIN:
        assert response.ok()["job"] == {"id": job_id, "status": "FAILED", "error": "disk full on shard 7"}
        return
    # The job itself is visible to each of these callers; only the field is refused.
    assert response.data == {"job": {"id": job_id, "status": "FAILED", "error": None}}, response.body
    assert response.codes == ["FORBIDDEN"]
    assert response.errors[0]["path"] == ["job", "error"]
    assert "disk full" not in str(response.body)
