"""Every BAD_USER_INPUT / PAYLOAD_TOO_LARGE case of the contract, over real HTTP.

Attacked: enqueue inputs (type allowlist, payload shape and size, maxRetries, idempotency
keys, runAt, enums), paging (first, cursors), claims (limit, leaseSeconds, waitSeconds),
worker reports (retryInSeconds, oversized results, completeJobs refused whole), job ids on
every operation that takes one, wrong variable types, unknown fields, and the HTTP layer
(GET never runs an operation, batching and non-JSON bodies are refused, the body limit).

Proven for each refusal: the contract's code, a message naming the problem (no traceback,
SQL, file path or "Did you mean"), and nothing written: the admin's view of the queue
(totals, per-status counts, and the watched jobs in full) is identical before and after.
Each limit is also probed from the inside (0 and 25 retries, first 1 and 100, ...), so a
refusal is known to come from the bound and not from a broken call.

A due LOW "bait" job stays PENDING in the queue all along: a claim wrongly accepted
would take it. Jobs a test must hold are CRITICAL, so claims take them before the bait.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

Server = Any  # conftest.Server
Vars = Callable[[list[str]], dict[str, Any]]

FUTURE = "2999-01-01T00:00:00Z"
MAX_PAYLOAD = 65536  # QUEUELOG_MAX_PAYLOAD_BYTES default
JOB_FIELDS = "id status attempt workerId retryCount runAt updatedAt leaseExpiresAt finishedAt result"
FORBIDDEN_IN_MESSAGES = ("Traceback", 'File "', "sqlalchemy", "SELECT ", "INSERT ", "/work/", "Did you mean")

ENQUEUE = "mutation($i: EnqueueJobInput!) { enqueueJob(input: $i) { created job { id } } }"
ENQUEUE_MANY = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { created job { id } } }"
JOBS = "query($first: Int!, $after: String) { jobs(first: $first, after: $after) { totalCount } }"
CLAIM = "mutation($l: Int, $w: Int) { claimJob(leaseSeconds: $l, waitSeconds: $w) { id } }"
CLAIM_MANY = (
    "mutation($n: Int!, $l: Int, $w: Int) { claimJobs(limit: $n, leaseSeconds: $l, waitSeconds: $w) { id } }"
)
HEARTBEAT = (
    "mutation($id: ID!, $l: Int) { heartbeatJob(id: $id, leaseSeconds: $l) { id status leaseExpiresAt } }"
)
FAIL = 'mutation($id: ID!, $r: Int) { failJob(id: $id, error: "x", retryInSeconds: $r) { id status } }'
COMPLETE = "mutation($id: ID!, $result: JSON) { completeJob(id: $id, result: $result) { id status } }"
COMPLETE_MANY = (
    "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) { completed { id } rejected } }"
)


def const(variables: dict[str, Any]) -> Vars:
    return lambda _held: variables


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def big_string(size: int, char: str = "x") -> str:
    return char * size


def payload_of_size(size: int, char: str = "é") -> dict[str, str]:
    """A payload whose compact UTF-8 serialisation is exactly `size` bytes (`{"a":"..."}`)."""
    width = len(char.encode())
    body = size - len('{"a":""}')
    assert body % width == 0
    return {"a": char * (body // width)}


# --- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys(server: Server) -> dict[str, str]:
    return {
        "admin": server.admin_key,
        "producer": server.make_key("bi-producer", "producer"),
        "worker": server.make_key("bi-worker", "worker"),
        "viewer": server.make_key("bi-viewer", "viewer"),
    }


@pytest.fixture(scope="module")
def bait(server: Server, keys: dict[str, str]) -> str:
    """A due LOW job nobody claims: a claim that should have been refused would take it."""
    data = server.gql(ENQUEUE, {"i": {"type": "email"}}, key=keys["producer"]).ok()
    return data["enqueueJob"]["job"]["id"]


def hold(server: Server, keys: dict[str, str], count: int) -> list[str]:
    """`count` jobs RUNNING and held by bi-worker (CRITICAL, so they are claimed before the bait)."""
    if count == 0:
        return []
    inputs = [{"type": "noop", "priority": "CRITICAL"} for _ in range(count)]
    made = [o["job"]["id"] for o in server.gql(ENQUEUE_MANY, {"i": inputs}).ok()["enqueueJobs"]]
    claimed = server.gql(
        "mutation($n: Int!) { claimJobs(limit: $n) { id } }", {"n": count}, key=keys["worker"]
    ).ok()["claimJobs"]
    assert sorted(j["id"] for j in claimed) == sorted(made)
    return made


def settle(server: Server, keys: dict[str, str], job_id: str) -> None:
    """Make a job terminal, so that a short lease never sends it back into later claims."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = snapshot(server, [job_id])["j0"]["status"]
        if status in ("COMPLETED", "FAILED", "CANCELLED"):
            return
        if status == "RUNNING":
            server.gql(COMPLETE, {"id": job_id}, key=keys["worker"])
        else:  # PENDING: its lease expired first, or a retry sent it back
            server.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": job_id})
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not settle")


def snapshot(server: Server, watched: list[str]) -> dict[str, Any]:
    """The admin's view: totals, per-status counts and each watched job in full."""
    aliases = " ".join(f'j{i}: job(id: "{job_id}") {{ {JOB_FIELDS} }}' for i, job_id in enumerate(watched))
    query = (
        "{ jobs(first: 1) { totalCount } "
        "queueStats { counts { pending running completed failed cancelled } } " + aliases + " }"
    )
    return server.gql(query).ok()


def assert_clean(response: Any) -> None:
    text = json.dumps(response.body)
    for bad in FORBIDDEN_IN_MESSAGES:
        assert bad not in text, f"{bad!r} leaked into {text[:500]}"
    for error in response.errors:
        assert set(error.get("extensions", {})) == {"code"}, error


@dataclass(frozen=True)
class Case:
    role: str
    document: str
    variables: Vars
    code: str
    fragment: str  # the message must name the problem
    held: int = 0  # jobs bi-worker must hold; their ids are passed to `variables`
    extra: dict[str, Any] = field(default_factory=dict)


def check_refused(server: Server, keys: dict[str, str], bait: str, case: Case) -> None:
    held = hold(server, keys, case.held)
    watched = [bait, *held]
    before = snapshot(server, watched)
    response = server.gql(case.document, case.variables(held), key=keys[case.role])
    assert response.status == 200, response.body
    assert response.codes and set(response.codes) == {case.code}, response.body
    messages = " | ".join(e["message"] for e in response.errors)
    assert case.fragment.lower() in messages.lower(), messages
    assert_clean(response)
    after = snapshot(server, watched)
    assert after == before, f"a refused call changed the queue:\n{before}\n{after}"


def cases(*items: tuple[str, Case]) -> list[Any]:
    return [pytest.param(case, id=name) for name, case in items]


# --- enqueue -------------------------------------------------------------------------------


def enq(job_input: dict[str, Any], code: str, fragment: str) -> Case:
    return Case("producer", ENQUEUE, const({"i": job_input}), code, fragment)


ENQUEUE_CASES = cases(
    ("type-not-allowed", enq({"type": "launch-missiles"}, "BAD_USER_INPUT", "not allowed")),
    ("type-empty", enq({"type": ""}, "BAD_USER_INPUT", "not allowed")),
    ("type-case-differs", enq({"type": "EMAIL"}, "BAD_USER_INPUT", "not allowed")),
    ("payload-array", enq({"type": "noop", "payload": [1, 2]}, "BAD_USER_INPUT", "JSON object")),
    ("payload-string", enq({"type": "noop", "payload": "hello"}, "BAD_USER_INPUT", "JSON object")),
    ("payload-number", enq({"type": "noop", "payload": 5}, "BAD_USER_INPUT", "JSON object")),
    ("payload-bool", enq({"type": "noop", "payload": True}, "BAD_USER_INPUT", "JSON object")),
    ("payload-null", enq({"type": "noop", "payload": None}, "BAD_USER_INPUT", "JSON!")),
    ("max-retries-minus-1", enq({"type": "noop", "maxRetries": -1}, "BAD_USER_INPUT", "maxRetries")),
    ("max-retries-26", enq({"type": "noop", "maxRetries": 26}, "BAD_USER_INPUT", "maxRetries")),
    ("max-retries-2^31", enq({"type": "noop", "maxRetries": 2**31}, "BAD_USER_INPUT", "maxRetries")),
    ("max-retries-string", enq({"type": "noop", "maxRetries": "three"}, "BAD_USER_INPUT", "maxRetries")),
    ("max-retries-float", enq({"type": "noop", "maxRetries": 2.5}, "BAD_USER_INPUT", "maxRetries")),
    ("idem-empty", enq({"type": "noop", "idempotencyKey": ""}, "BAD_USER_INPUT", "idempotencyKey")),
    ("idem-256", enq({"type": "noop", "idempotencyKey": "k" * 256}, "BAD_USER_INPUT", "idempotencyKey")),
    ("idem-newline", enq({"type": "noop", "idempotencyKey": "a\nb"}, "BAD_USER_INPUT", "idempotencyKey")),
    ("idem-nul", enq({"type": "noop", "idempotencyKey": "a\x00b"}, "BAD_USER_INPUT", "idempotencyKey")),
    ("idem-tab", enq({"type": "noop", "idempotencyKey": "\tkey"}, "BAD_USER_INPUT", "idempotencyKey")),
    ("idem-escape", enq({"type": "noop", "idempotencyKey": "k\x1b[31m"}, "BAD_USER_INPUT", "idempotencyKey")),
    ("idem-del", enq({"type": "noop", "idempotencyKey": "k\x7f"}, "BAD_USER_INPUT", "idempotencyKey")),
    ("idem-number", enq({"type": "noop", "idempotencyKey": 12}, "BAD_USER_INPUT", "idempotencyKey")),
    ("run-at-garbage", enq({"type": "noop", "runAt": "not-a-date"}, "BAD_USER_INPUT", "DateTime")),
    ("run-at-month-13", enq({"type": "noop", "runAt": "2030-13-45T00:00:00Z"}, "BAD_USER_INPUT", "DateTime")),
    ("run-at-empty", enq({"type": "noop", "runAt": ""}, "BAD_USER_INPUT", "DateTime")),
    ("run-at-number", enq({"type": "noop", "runAt": 1700000000}, "BAD_USER_INPUT", "runAt")),
    ("priority-unknown", enq({"type": "noop", "priority": "URGENT"}, "BAD_USER_INPUT", "URGENT")),
    ("priority-lowercase", enq({"type": "noop", "priority": "low"}, "BAD_USER_INPUT", "'low'")),
    ("priority-number", enq({"type": "noop", "priority": 10}, "BAD_USER_INPUT", "priority")),
    ("type-number", enq({"type": 5}, "BAD_USER_INPUT", "String")),
    ("type-missing", enq({"payload": {}}, "BAD_USER_INPUT", "type")),
    ("unknown-input-field", enq({"type": "noop", "typo": 1}, "BAD_USER_INPUT", "typo")),
    (
        "payload-over-limit-by-1",
        enq(
            {"type": "noop", "payload": payload_of_size(MAX_PAYLOAD + 1, "x")}, "PAYLOAD_TOO_LARGE", "payload"
        ),
    ),
    (
        "payload-over-limit-non-ascii",
        enq(
            {"type": "noop", "payload": {"a": "é" * ((MAX_PAYLOAD - 8) // 2), "b": 1}},
            "PAYLOAD_TOO_LARGE",
            "payload",
        ),
    ),
    ("input-not-an-object", Case("producer", ENQUEUE, const({"i": "noop"}), "BAD_USER_INPUT", "object")),
    (
        "inline-runat-garbage",
        Case(
            "producer",
            'mutation { enqueueJob(input: {type: "noop", runAt: "yesterday"}) { created } }',
            const({}),
            "BAD_USER_INPUT",
            "DateTime",
        ),
    ),
    (
        "inline-priority-unknown",
        Case(
            "producer",
            'mutation { enqueueJob(input: {type: "noop", priority: URGENT}) { created } }',
            const({}),
            "BAD_USER_INPUT",
            "URGENT",
        ),
    ),
    (
        "inline-payload-list",
        Case(
            "producer",
            'mutation { enqueueJob(input: {type: "noop", payload: [1]}) { created } }',
            const({}),
            "BAD_USER_INPUT",
            "JSON object",
        ),
    ),
    # enqueueJobs is all or nothing: one bad input refuses the whole call.
    (
        "batch-1001",
        Case("producer", ENQUEUE_MANY, const({"i": [{"type": "noop"}] * 1001}), "BAD_USER_INPUT", "1000"),
    ),
    (
        "batch-one-bad-type",
        Case(
            "producer",
            ENQUEUE_MANY,
            const({"i": [{"type": "noop"}, {"type": "email"}, {"type": "nope"}, {"type": "noop"}]}),
            "BAD_USER_INPUT",
            "not allowed",
        ),
    ),
    (
        "batch-one-bad-retries",
        Case(
            "producer",
            ENQUEUE_MANY,
            const({"i": [{"type": "noop"}, {"type": "noop", "maxRetries": 26}]}),
            "BAD_USER_INPUT",
            "maxRetries",
        ),
    ),
    (
        "batch-one-bad-idem",
        Case(
            "producer",
            ENQUEUE_MANY,
            const({"i": [{"type": "noop", "idempotencyKey": "ok"}, {"type": "noop", "idempotencyKey": ""}]}),
            "BAD_USER_INPUT",
            "idempotencyKey",
        ),
    ),
    (
        "batch-one-oversized",
        Case(
            "producer",
            ENQUEUE_MANY,
            const({"i": [{"type": "noop"}, {"type": "noop", "payload": payload_of_size(MAX_PAYLOAD + 2)}]}),
            "PAYLOAD_TOO_LARGE",
            "payload",
        ),
    ),
)


@pytest.mark.parametrize("case", ENQUEUE_CASES)
def test_enqueue_refused(server: Server, keys: dict[str, str], bait: str, case: Case) -> None:
    check_refused(server, keys, bait, case)


@pytest.mark.parametrize(
    "job_input",
    [
        pytest.param({"type": "noop", "maxRetries": 0}, id="max-retries-0"),
        pytest.param({"type": "noop", "maxRetries": 25}, id="max-retries-25"),
        pytest.param({"type": "noop", "idempotencyKey": "k" * 255}, id="idem-255"),
        pytest.param({"type": "noop", "idempotencyKey": "x"}, id="idem-1"),
        pytest.param({"type": "noop", "idempotencyKey": "clé ключ ✓ #1"}, id="idem-unicode-printable"),
        pytest.param({"type": "noop", "payload": payload_of_size(MAX_PAYLOAD)}, id="payload-at-limit-utf8"),
        pytest.param({"type": "noop", "payload": payload_of_size(MAX_PAYLOAD, "x")}, id="payload-at-limit"),
        pytest.param({"type": "noop", "payload": {}}, id="payload-empty-object"),
        pytest.param({"type": "noop", "runAt": "2999-01-01T00:00:00+02:00"}, id="run-at-offset"),
    ],
)
def test_enqueue_limits_from_inside(
    server: Server, keys: dict[str, str], unique: Callable[[str], str], job_input: dict[str, Any]
) -> None:
    job_input = {**job_input, "runAt": job_input.get("runAt", FUTURE)}
    producer = server.make_key(unique("producer"), "producer")  # fresh: idempotency keys never collide
    before = snapshot(server, [])["jobs"]["totalCount"]
    data = server.gql(ENQUEUE, {"i": job_input}, key=producer).ok()
    assert data["enqueueJob"]["created"] is True
    assert snapshot(server, [])["jobs"]["totalCount"] == before + 1


def test_enqueue_jobs_1000_is_accepted(server: Server, keys: dict[str, str]) -> None:
    before = snapshot(server, [])["jobs"]["totalCount"]
    data = server.gql(
        ENQUEUE_MANY, {"i": [{"type": "noop", "runAt": FUTURE}] * 1000}, key=keys["producer"]
    ).ok()
    assert len(data["enqueueJobs"]) == 1000 and all(o["created"] for o in data["enqueueJobs"])
    assert len({o["job"]["id"] for o in data["enqueueJobs"]}) == 1000
    assert snapshot(server, [])["jobs"]["totalCount"] == before + 1000


# --- reading: first, cursors, enums --------------------------------------------------------


def page(first: Any, after: Any = None, fragment: str = "first") -> Case:
    return Case("viewer", JOBS, const({"first": first, "after": after}), "BAD_USER_INPUT", fragment)


READ_CASES = cases(
    ("first-0", page(0)),
    ("first-101", page(101)),
    ("first-minus-5", page(-5)),
    ("first-2^40", page(2**40)),
    ("first-string", page("ten")),
    ("first-float", page(1.5)),
    ("cursor-garbage", page(10, "!!!not a cursor!!!", "cursor")),
    ("cursor-b64-garbage", page(10, b64("garbage"), "cursor")),
    ("cursor-negative", page(10, b64("job:-1"), "cursor")),
    ("cursor-zero", page(10, b64("job:0"), "cursor")),
    ("cursor-float", page(10, b64("job:1.5"), "cursor")),
    ("cursor-letters", page(10, b64("job:abc"), "cursor")),
    ("cursor-empty-id", page(10, b64("job:"), "cursor")),
    ("cursor-huge", page(10, b64("job:99999999999999999999"), "cursor")),
    ("cursor-2^63", page(10, b64("job:9223372036854775808"), "cursor")),
    ("cursor-sql", page(10, b64("job:1 OR 1=1"), "cursor")),
    ("cursor-not-b64", page(10, "job:5", "cursor")),
    ("cursor-empty", page(10, "", "cursor")),
    ("cursor-binary", page(10, base64.urlsafe_b64encode(b"\xff\xfe\x00").decode(), "cursor")),
    ("cursor-number", page(10, 5, "String")),
    (
        "status-unknown",
        Case("viewer", "{ jobs(status: DONE) { totalCount } }", const({}), "BAD_USER_INPUT", "DONE"),
    ),
    (
        "status-unknown-variable",
        Case(
            "viewer",
            "query($s: JobStatus) { jobs(status: $s) { totalCount } }",
            const({"s": "pending"}),
            "BAD_USER_INPUT",
            "pending",
        ),
    ),
    (
        "required-variable-missing",
        Case(
            "viewer",
            "query($first: Int!) { jobs(first: $first) { totalCount } }",
            const({}),
            "BAD_USER_INPUT",
            "$first",
        ),
    ),
)


@pytest.mark.parametrize("case", READ_CASES)
def test_reading_refused(server: Server, keys: dict[str, str], bait: str, case: Case) -> None:
    check_refused(server, keys, bait, case)


@pytest.mark.parametrize("first", [1, 100])
def test_first_limits_from_inside(server: Server, keys: dict[str, str], bait: str, first: int) -> None:
    data = server.gql(
        "query($f: Int!) { jobs(first: $f) { totalCount nodes { id } pageInfo { endCursor hasNextPage } } }",
        {"f": first},
        key=keys["viewer"],
    ).ok()["jobs"]
    assert len(data["nodes"]) == min(first, data["totalCount"])
    # A cursor the server made is accepted and continues the list.
    after = server.gql(JOBS, {"first": 1, "after": data["pageInfo"]["endCursor"]}, key=keys["viewer"])
    assert after.ok()["jobs"]["totalCount"] == data["totalCount"]


def test_largest_valid_id_is_not_found_not_an_error(server: Server, keys: dict[str, str]) -> None:
    response = server.gql('{ job(id: "9223372036854775807") { id } }', key=keys["viewer"])
    assert response.ok() == {"job": None}
    cancel = server.gql('mutation { cancelJob(id: "9223372036854775807") { id } }')
    assert cancel.codes == ["NOT_FOUND"]


# --- claims and worker reports -------------------------------------------------------------


def worker(
    document: str, variables: Vars, fragment: str, held: int = 0, code: str = "BAD_USER_INPUT"
) -> Case:
    return Case("worker", document, variables, code, fragment, held=held)


WORKER_CASES = cases(
    ("claim-lease-0", worker(CLAIM, const({"l": 0}), "leaseSeconds")),
    ("claim-lease-86401", worker(CLAIM, const({"l": 86401}), "leaseSeconds")),
    ("claim-lease-negative", worker(CLAIM, const({"l": -60}), "leaseSeconds")),
    ("claim-wait-minus-1", worker(CLAIM, const({"w": -1}), "waitSeconds")),
    ("claim-wait-31", worker(CLAIM, const({"w": 31}), "waitSeconds")),
    ("claim-lease-float", worker(CLAIM, const({"l": 1.5}), "$l")),
    ("claims-limit-0", worker(CLAIM_MANY, const({"n": 0}), "limit")),
    ("claims-limit-101", worker(CLAIM_MANY, const({"n": 101}), "limit")),
    ("claims-limit-negative", worker(CLAIM_MANY, const({"n": -1}), "limit")),
    ("claims-limit-string", worker(CLAIM_MANY, const({"n": "5"}), "$n")),
    ("claims-lease-0", worker(CLAIM_MANY, const({"n": 1, "l": 0}), "leaseSeconds")),
    ("claims-lease-86401", worker(CLAIM_MANY, const({"n": 1, "l": 86401}), "leaseSeconds")),
    ("claims-wait-minus-1", worker(CLAIM_MANY, const({"n": 1, "w": -1}), "waitSeconds")),
    ("claims-wait-31", worker(CLAIM_MANY, const({"n": 1, "w": 31}), "waitSeconds")),
    (
        "claim-types-not-strings",
        worker("mutation($t: [String!]) { claimJob(types: $t) { id } }", const({"t": [5]}), "$t"),
    ),
    ("heartbeat-lease-0", worker(HEARTBEAT, lambda h: {"id": h[0], "l": 0}, "leaseSeconds", held=1)),
    ("heartbeat-lease-86401", worker(HEARTBEAT, lambda h: {"id": h[0], "l": 86401}, "leaseSeconds", held=1)),
    ("fail-retry-in-minus-1", worker(FAIL, lambda h: {"id": h[0], "r": -1}, "retryInSeconds", held=1)),
    ("fail-retry-in-86401", worker(FAIL, lambda h: {"id": h[0], "r": 86401}, "retryInSeconds", held=1)),
    (
        "fail-retryable-not-bool",
        worker(
            'mutation($id: ID!, $r: Boolean!) { failJob(id: $id, error: "x", retryable: $r) { id } }',
            lambda h: {"id": h[0], "r": "yes"},
            "$r",
            held=1,
        ),
    ),
    (
        "fail-error-null",
        worker(
            "mutation($id: ID!, $e: String!) { failJob(id: $id, error: $e) { id } }",
            lambda h: {"id": h[0], "e": None},
            "$e",
            held=1,
        ),
    ),
    (
        "complete-result-over-limit",
        worker(
            COMPLETE,
            lambda h: {"id": h[0], "result": payload_of_size(MAX_PAYLOAD + 1, "x")},
            "result",
            held=1,
            code="PAYLOAD_TOO_LARGE",
        ),
    ),
    (
        "complete-result-over-limit-utf8",
        worker(
            COMPLETE,
            lambda h: {"id": h[0], "result": ["€" * (MAX_PAYLOAD // 3)]},
            "result",
            held=1,
            code="PAYLOAD_TOO_LARGE",
        ),
    ),
    # completeJobs: a malformed call is refused whole, and nothing is completed.
    (
        "complete-many-101",
        worker(
            COMPLETE_MANY,
            lambda h: {
                "items": [{"id": h[0]}, {"id": h[1]}] + [{"id": str(900_000_000 + i)} for i in range(99)]
            },
            "100",
            held=2,
        ),
    ),
    (
        "complete-many-bad-id",
        worker(
            COMPLETE_MANY, lambda h: {"items": [{"id": h[0]}, {"id": "abc"}, {"id": h[1]}]}, "job id", held=2
        ),
    ),
    (
        "complete-many-bad-id-last",
        worker(
            COMPLETE_MANY, lambda h: {"items": [{"id": h[0]}, {"id": h[1]}, {"id": "-3"}]}, "job id", held=2
        ),
    ),
    (
        "complete-many-oversized-result",
        worker(
            COMPLETE_MANY,
            lambda h: {
                "items": [
                    {"id": h[0], "result": {"ok": True}},
                    {"id": h[1], "result": payload_of_size(MAX_PAYLOAD + 2)},
                ]
            },
            "result",
            held=2,
            code="PAYLOAD_TOO_LARGE",
        ),
    ),
    (
        "complete-many-attempt-string",
        worker(COMPLETE_MANY, lambda h: {"items": [{"id": h[0], "attempt": "one"}]}, "attempt", held=1),
    ),
)


@pytest.mark.parametrize("case", WORKER_CASES)
def test_worker_input_refused(server: Server, keys: dict[str, str], bait: str, case: Case) -> None:
    check_refused(server, keys, bait, case)


@pytest.mark.parametrize(
    ("document", "make_vars", "pick", "status"),
    [
        pytest.param(
            HEARTBEAT, lambda j: {"id": j, "l": 1}, "heartbeatJob", "RUNNING", id="heartbeat-lease-1"
        ),
        pytest.param(
            HEARTBEAT, lambda j: {"id": j, "l": 86400}, "heartbeatJob", "RUNNING", id="heartbeat-lease-86400"
        ),
        pytest.param(FAIL, lambda j: {"id": j, "r": 86400}, "failJob", "PENDING", id="fail-retry-in-86400"),
        pytest.param(
            COMPLETE,
            lambda j: {"id": j, "result": payload_of_size(MAX_PAYLOAD)},
            "completeJob",
            "COMPLETED",
            id="complete-result-at-limit",
        ),
    ],
)
def test_worker_limits_from_inside(
    server: Server,
    keys: dict[str, str],
    document: str,
    make_vars: Callable[[str], dict[str, Any]],
    pick: str,
    status: str,
) -> None:
    (job_id,) = hold(server, keys, 1)
    variables = make_vars(job_id)
    data = server.gql(document, variables, key=keys["worker"]).ok()[pick]
    assert data["id"] == job_id and data["status"] == status
    if pick == "heartbeatJob":
        expires = datetime.fromisoformat(data["leaseExpiresAt"])
        assert abs((expires - datetime.now(UTC)).total_seconds() - variables["l"]) < 60
    settle(server, keys, job_id)


def test_retry_in_zero_is_accepted(server: Server, keys: dict[str, str]) -> None:
    (job_id,) = hold(server, keys, 1)
    failed = server.gql(FAIL, {"id": job_id, "r": 0}, key=keys["worker"]).ok()["failJob"]
    assert failed == {"id": job_id, "status": "PENDING"}
    # It is CRITICAL and due again: take it out of the bait's way.
    assert server.gql("mutation { claimJob { id } }", key=keys["worker"]).ok()["claimJob"] == {"id": job_id}


@pytest.mark.parametrize(
    ("limit", "lease", "wait"),
    [
        pytest.param(1, 1, 0, id="limit-1-lease-1-wait-0"),
        pytest.param(100, 86400, 30, id="limit-100-lease-86400-wait-30"),
    ],
)
def test_claim_limits_from_inside(
    server: Server, keys: dict[str, str], bait: str, limit: int, lease: int, wait: int
) -> None:
    made = server.gql(ENQUEUE, {"i": {"type": "resize", "priority": "CRITICAL"}}).ok()["enqueueJob"]["job"][
        "id"
    ]
    claimed = server.gql(
        "mutation($n: Int!, $l: Int, $w: Int) "
        '{ claimJobs(limit: $n, leaseSeconds: $l, waitSeconds: $w, types: ["resize"]) { id } }',
        {"n": limit, "l": lease, "w": wait},
        key=keys["worker"],
    ).ok()["claimJobs"]
    assert claimed == [{"id": made}]
    assert snapshot(server, [bait])["j0"]["status"] == "PENDING"
    settle(server, keys, made)


def test_complete_many_100_is_accepted(server: Server, keys: dict[str, str]) -> None:
    held = hold(server, keys, 2)
    missing = [str(800_000_000 + i) for i in range(98)]
    items = [{"id": held[0]}, {"id": held[1]}] + [{"id": m} for m in missing]
    data = server.gql(COMPLETE_MANY, {"items": items}, key=keys["worker"]).ok()["completeJobs"]
    assert sorted(j["id"] for j in data["completed"]) == sorted(held)
    assert data["rejected"] == missing


# --- job ids, on every operation that takes one --------------------------------------------

ID_OPERATIONS = {
    "job": ("viewer", "query($id: ID!) { job(id: $id) { id } }"),
    "cancelJob": ("admin", "mutation($id: ID!) { cancelJob(id: $id) { id } }"),
    "retryJob": ("admin", "mutation($id: ID!) { retryJob(id: $id) { id } }"),
    "heartbeatJob": ("worker", "mutation($id: ID!) { heartbeatJob(id: $id) { id } }"),
    "completeJob": ("worker", "mutation($id: ID!) { completeJob(id: $id) { id } }"),
    "failJob": ("worker", 'mutation($id: ID!) { failJob(id: $id, error: "x") { id } }'),
    "completeJobs": ("worker", "mutation($id: ID!) { completeJobs(items: [{id: $id}]) { rejected } }"),
}
BAD_IDS: list[tuple[str, Any, str]] = [
    ("abc", "abc", "job id"),
    ("minus-1", "-1", "job id"),
    ("zero", "0", "job id"),
    ("decimal", "1.5", "job id"),
    ("empty", "", "job id"),
    ("leading-space", " 1", "job id"),
    ("trailing-space", "1 ", "job id"),
    ("plus", "+1", "job id"),
    ("exponent", "1e3", "job id"),
    ("hex", "0x1F", "job id"),
    ("arabic-digit", "\u0663", "job id"),
    ("20-digits", "99999999999999999999", "job id"),
    ("2^63", "9223372036854775808", "job id"),
    ("sql", "1 OR 1=1", "job id"),
    ("int-10^30", 10**30, "job id"),
    ("int-minus-1", -1, "job id"),
    ("int-zero", 0, "job id"),
    ("float", 1.5, "$id"),
    ("bool", True, "$id"),
    ("object", {"id": 1}, "$id"),
    ("null", None, "$id"),
]


def id_cases() -> list[Any]:
    out = []
    for op, (role, document) in ID_OPERATIONS.items():
        for name, value, fragment in BAD_IDS:
            case = Case(role, document, const({"id": value}), "BAD_USER_INPUT", fragment)
            out.append(pytest.param(case, id=f"{op}-{name}"))
    return out


@pytest.mark.parametrize("case", id_cases())
def test_bad_job_id_refused(server: Server, keys: dict[str, str], bait: str, case: Case) -> None:
    check_refused(server, keys, bait, case)


# --- document-level refusals: unknown fields, no suggestions -------------------------------


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        pytest.param("{ jobz { totalCount } }", "jobz", id="unknown-root-field"),
        pytest.param("{ jobs { totalCont } }", "totalCont", id="unknown-nested-field"),
        pytest.param('{ job(id: "1") { staus } }', "staus", id="unknown-job-field"),
        pytest.param("{ jobs(frist: 1) { totalCount } }", "frist", id="unknown-argument"),
        pytest.param("{ jobs(status: PENDIN) { totalCount } }", "PENDIN", id="unknown-enum-value"),
        pytest.param(
            'mutation { enqueueJb(input: {type: "noop"}) { created } }', "enqueueJb", id="unknown-mutation"
        ),
        pytest.param(
            'mutation { enqueueJob(input: {typ: "noop"}) { created } }', "typ", id="unknown-input-field"
        ),
        pytest.param("{ me { nam } }", "nam", id="unknown-principal-field"),
        pytest.param("{ jobs { totalCount }", "Syntax Error", id="syntax-error"),
    ],
)
def test_unknown_names_refused_without_suggestions(
    server: Server, keys: dict[str, str], bait: str, document: str, fragment: str
) -> None:
    response = server.gql(document, key=keys["producer"])
    assert response.status == 200 and response.data is None, response.body
    assert response.codes and set(response.codes) == {"BAD_USER_INPUT"}, response.body
    assert fragment in " ".join(e["message"] for e in response.errors)
    assert "did you mean" not in json.dumps(response.body).lower()
    assert_clean(response)


# --- the HTTP layer ------------------------------------------------------------------------

MUTATION = 'mutation { enqueueJob(input: {type: "noop"}) { job { id } } }'


def total(server: Server) -> int:
    return snapshot(server, [])["jobs"]["totalCount"]


@pytest.mark.parametrize("accept", ["application/json", "text/html", "*/*"])
@pytest.mark.parametrize(
    "query", [MUTATION, "{ me { name } }", "mutation { claimJob { id } }"], ids=["enqueue", "me", "claim"]
)
def test_get_never_runs_an_operation(
    server: Server, keys: dict[str, str], bait: str, accept: str, query: str
) -> None:
    key = keys["worker"] if "claim" in query else keys["producer"]
    before = snapshot(server, [bait])
    response = httpx.get(
        server.graphql_url,
        params={"query": query},
        headers={"Authorization": f"Bearer {key}", "Accept": accept},
        timeout=30,
    )
    assert '"data"' not in response.text, response.text[:300]
    assert "bi-producer" not in response.text and "bi-worker" not in response.text
    if response.status_code == 200:  # the GraphiQL page, never a result
        assert response.headers["content-type"].startswith("text/html")
    assert snapshot(server, [bait]) == before


def post_raw(server: Server, key: str, body: bytes, content_type: str = "application/json") -> httpx.Response:
    return httpx.post(
        server.graphql_url,
        content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": content_type},
        timeout=30,
    )


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(json.dumps([{"query": MUTATION}]).encode(), id="array-of-one"),
        pytest.param(json.dumps([{"query": MUTATION}, {"query": MUTATION}]).encode(), id="array-of-two"),
        pytest.param(b"[]", id="empty-array"),
    ],
)
def test_batching_is_refused(server: Server, keys: dict[str, str], body: bytes) -> None:
    before = total(server)
    response = post_raw(server, keys["producer"], body)
    assert response.status_code == 400, response.text[:300]
    assert "Traceback" not in response.text
    assert total(server) == before, "a batched request ran"


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        pytest.param(b"not json", "application/json", id="text"),
        pytest.param(b'{"query": "{ me { name } }"', "application/json", id="truncated"),
        pytest.param(b'{"query": "{ me { name } }"} trailing', "application/json", id="trailing-garbage"),
        pytest.param(b"\xff\xfe\x00", "application/json", id="binary"),
        pytest.param(b"", "application/json", id="empty"),
        pytest.param(b'"just a string"', "application/json", id="json-string"),
        pytest.param(b"null", "application/json", id="json-null"),
        pytest.param(b"42", "application/json", id="json-number"),
        pytest.param(b'{"query": 5}', "application/json", id="query-not-a-string"),
        pytest.param(
            b'{"query": "{ me { name } }", "variables": [1]}', "application/json", id="variables-list"
        ),
        pytest.param(b"{}", "application/json", id="no-query"),
        pytest.param(MUTATION.encode(), "text/plain", id="not-json-content-type"),
    ],
)
def test_unparseable_body_is_400(
    server: Server, keys: dict[str, str], body: bytes, content_type: str
) -> None:
    before = total(server)
    response = post_raw(server, keys["producer"], body, content_type)
    assert response.status_code == 400, (response.status_code, response.text[:300])
    assert "Traceback" not in response.text and 'File "' not in response.text
    assert total(server) == before


def test_body_over_the_limit_is_413(server: Server, keys: dict[str, str]) -> None:
    before = total(server)
    padding = "x" * 1_100_000  # over the default QUEUELOG_MAX_BODY_BYTES (1048576)
    body = json.dumps({"query": MUTATION, "variables": {"pad": padding}}).encode()
    response = post_raw(server, keys["producer"], body)
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
    assert total(server) == before
