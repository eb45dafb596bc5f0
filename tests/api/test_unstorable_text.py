"""Text a database cannot store is refused alike on every backend, over real HTTP.

PostgreSQL's text columns cannot hold NUL (U+0000), and no database stores a lone surrogate
(it has no UTF-8 form). The contract's rule: such input is refused with BAD_USER_INPUT on
SQLite and PostgreSQL alike, never answered with INTERNAL_SERVER_ERROR on one of them.

Attacked, with NUL and with a lone surrogate: a job type (alone and hidden in an
`enqueueJobs` batch), an idempotency key, the `jobs(type:)` filter, `claimJob(types:)` and
`claimJobs(types:)`, and failJob's `error` (NUL only: a lone surrogate there is replaced by
the sanitiser, like on every backend); JSON payloads and results holding NUL (which JSON
stores as the escape `\\u0000`) and lone surrogates.

Proven: every refusal is BAD_USER_INPUT (no data) with a message naming the field,
and changes nothing (no job stored, a due job stays PENDING, a held job stays RUNNING at the
same attempt); payloads and results with NUL in keys and values are stored and round-trip
exactly (through GraphQL and as JSON text in the database), and an idempotent replay of one
finds its job.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from conftest import GraphQLResponse, Server

NUL = "\x00"
SURROGATE = "\ud800"
ENQUEUE = (
    "mutation($i: EnqueueJobInput!) { enqueueJob(input: $i) { created job { id type payload status } } }"
)
ENQUEUE_MANY = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { job { id } } }"
JOB = "query($id: ID!) { job(id: $id) { id status attempt payload result error workerId } }"
CLAIM = "mutation($t: [String!]) { claimJob(types: $t) { id attempt } }"
CLAIM_MANY = "mutation($t: [String!]) { claimJobs(limit: 5, types: $t) { id } }"
COMPLETE = "mutation($id: ID!, $r: JSON) { completeJob(id: $id, result: $r) { status result } }"
COMPLETE_MANY = (
    "mutation($items: [CompleteJobInput!]!) {"
    " completeJobs(items: $items) { completed { id result } rejected } }"
)
FAIL = "mutation($id: ID!, $e: String!) { failJob(id: $id, error: $e, retryable: false) { status } }"
LIST = "query($t: String) { jobs(type: $t, first: 10) { totalCount nodes { id } } }"


def post(server: Server, query: str, variables: dict[str, Any], key: str | None = None) -> GraphQLResponse:
    """POST with the JSON written as ASCII: lone surrogates travel as `\\ud800` escapes, as a
    hostile client may send them (httpx's `json=` cannot encode them at all)."""
    body = json.dumps({"query": query, "variables": variables}).encode()
    response = server.client.post(
        server.graphql_url,
        content=body,
        headers={"Authorization": f"Bearer {key or server.admin_key}", "Content-Type": "application/json"},
    )
    return GraphQLResponse(response.status_code, response.json())


def assert_bad_input(response: GraphQLResponse, field: str) -> None:
    assert response.status == 200, response.body
    assert response.data is None or all(v is None for v in response.data.values()), response.body
    assert response.codes == ["BAD_USER_INPUT"], response.body
    assert field in response.errors[0]["message"], response.body


def stored_jobs(server: Server) -> int:
    return server.sql("SELECT count(*) FROM jobs")[0][0]


@pytest.fixture
def worker(server: Server, unique: Callable[[str], str]) -> str:
    return server.make_key(unique("text-worker"), "worker")


@pytest.fixture
def producer(server: Server, unique: Callable[[str], str]) -> str:
    return server.make_key(unique("text-producer"), "producer")


def held_job(server: Server, worker: str, job_type: str = "resize") -> dict[str, Any]:
    """A new job of `job_type` (no other test leaves one PENDING), claimed by `worker`."""
    job_id = post(server, ENQUEUE, {"i": {"type": job_type}}).ok()["enqueueJob"]["job"]["id"]
    claimed = post(server, CLAIM, {"t": [job_type]}, worker).ok()["claimJob"]
    assert claimed is not None and claimed["id"] == job_id, claimed
    return claimed


BAD_TEXT = [pytest.param(NUL, id="nul"), pytest.param(SURROGATE, id="lone-surrogate")]


# --- refused -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_TEXT)
@pytest.mark.parametrize("where", ["suffix", "inside", "alone"])
def test_a_job_type_that_cannot_be_stored_is_refused(
    server: Server, producer: str, bad: str, where: str
) -> None:
    job_type = {"suffix": "email" + bad, "inside": "em" + bad + "ail", "alone": bad}[where]
    before = stored_jobs(server)
    assert_bad_input(post(server, ENQUEUE, {"i": {"type": job_type}}, producer), "type")
    batch = [{"type": "email"}, {"type": job_type}, {"type": "report"}]
    assert_bad_input(post(server, ENQUEUE_MANY, {"i": batch}, producer), "type")
    assert stored_jobs(server) == before, "a refused enqueue stored a job"


@pytest.mark.parametrize("bad", BAD_TEXT)
def test_an_idempotency_key_that_cannot_be_stored_is_refused(server: Server, producer: str, bad: str) -> None:
    before = stored_jobs(server)
    response = post(server, ENQUEUE, {"i": {"type": "email", "idempotencyKey": f"key{bad}1"}}, producer)
    assert_bad_input(response, "idempotencyKey")
    assert stored_jobs(server) == before


@pytest.mark.parametrize("bad", BAD_TEXT)
def test_a_type_filter_that_cannot_be_stored_is_refused(server: Server, bad: str) -> None:
    post(server, ENQUEUE, {"i": {"type": "email"}}).ok()
    assert_bad_input(post(server, LIST, {"t": "email" + bad}), "type")
    assert post(server, LIST, {"t": "email"}).ok()["jobs"]["totalCount"] >= 1  # positive control


@pytest.mark.parametrize("bad", BAD_TEXT)
@pytest.mark.parametrize("claim", [CLAIM, CLAIM_MANY], ids=["claimJob", "claimJobs"])
def test_claim_types_that_cannot_be_stored_are_refused(
    server: Server, worker: str, bad: str, claim: str
) -> None:
    job_id = post(server, ENQUEUE, {"i": {"type": "noop", "priority": "CRITICAL"}}).ok()["enqueueJob"]["job"][
        "id"
    ]
    assert_bad_input(post(server, claim, {"t": ["noop", "noop" + bad]}, worker), "types")
    assert_bad_input(post(server, claim, {"t": [bad]}, worker), "types")
    assert post(server, JOB, {"id": job_id}).ok()["job"]["status"] == "PENDING", (
        "a refused claim took the job"
    )
    post(server, "mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": job_id}).ok()


@pytest.mark.parametrize("error", ["boom\x00", "\x00", "a\x00b\x00c"], ids=["suffix", "alone", "twice"])
def test_a_failure_error_holding_nul_is_refused(server: Server, worker: str, error: str) -> None:
    job = held_job(server, worker)
    assert_bad_input(post(server, FAIL, {"id": job["id"], "e": error}, worker), "error")
    seen = post(server, JOB, {"id": job["id"]}).ok()["job"]
    assert (seen["status"], seen["attempt"], seen["error"]) == ("RUNNING", job["attempt"], None)
    # The same report without the NUL is accepted (the refusal came from the NUL alone).
    failed = post(server, FAIL, {"id": job["id"], "e": error.replace(NUL, "") or "x"}, worker).ok()
    assert failed["failJob"]["status"] == "FAILED"


def test_a_lone_surrogate_in_a_failure_error_is_sanitised_alike(server: Server, worker: str) -> None:
    job = held_job(server, worker)
    failed = post(server, FAIL, {"id": job["id"], "e": f"bad {SURROGATE} byte"}, worker).ok()["failJob"]
    assert failed == {"status": "FAILED"}
    assert post(server, JOB, {"id": job["id"]}).ok()["job"]["error"] == "bad ? byte"
    stored = server.sql("SELECT error FROM jobs WHERE id = :id", id=int(job["id"]))
    assert stored == [("bad ? byte",)]


@pytest.mark.parametrize(
    "payload",
    [{"a": SURROGATE}, {SURROGATE: 1}, {"a": [{"b": "x" + SURROGATE}]}],
    ids=["value", "key", "nested"],
)
def test_json_holding_a_lone_surrogate_is_refused(
    server: Server, producer: str, worker: str, payload: dict[str, Any]
) -> None:
    before = stored_jobs(server)
    assert_bad_input(post(server, ENQUEUE, {"i": {"type": "email", "payload": payload}}, producer), "payload")
    assert stored_jobs(server) == before
    job = held_job(server, worker)
    assert_bad_input(post(server, COMPLETE, {"id": job["id"], "r": payload}, worker), "result")
    items = [{"id": job["id"], "result": payload}]
    assert_bad_input(post(server, COMPLETE_MANY, {"items": items}, worker), "result")
    seen = post(server, JOB, {"id": job["id"]}).ok()["job"]
    assert (seen["status"], seen["result"]) == ("RUNNING", None)
    post(server, COMPLETE, {"id": job["id"], "r": None}, worker).ok()


# --- stored: JSON holds NUL as an escape ---------------------------------------------------

NUL_DOCUMENTS = [
    pytest.param({"a": NUL}, id="value"),
    pytest.param({NUL: "key", "k\x00ey": [NUL, "x\x00y"]}, id="keys-and-list"),
    pytest.param({"deep": {"er": [{"text": "before\x00after", "n": 1}]}}, id="nested"),
]


@pytest.mark.parametrize("payload", NUL_DOCUMENTS)
def test_a_payload_holding_nul_round_trips(
    server: Server, producer: str, unique: Callable[[str], str], payload: dict[str, Any]
) -> None:
    key = unique("nul-payload")
    created = post(
        server, ENQUEUE, {"i": {"type": "email", "payload": payload, "idempotencyKey": key}}, producer
    )
    job = created.ok()["enqueueJob"]["job"]
    assert job["payload"] == payload
    assert post(server, JOB, {"id": job["id"]}).ok()["job"]["payload"] == payload
    ((stored,),) = server.sql("SELECT payload FROM jobs WHERE id = :id", id=int(job["id"]))
    assert NUL not in stored and "\\u0000" in stored, stored
    assert json.loads(stored) == payload
    replay = post(
        server, ENQUEUE, {"i": {"type": "email", "payload": payload, "idempotencyKey": key}}, producer
    )
    assert replay.ok()["enqueueJob"]["created"] is False
    assert replay.ok()["enqueueJob"]["job"]["id"] == job["id"]
    post(server, "mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": job["id"]}).ok()


@pytest.mark.parametrize("result", NUL_DOCUMENTS)
@pytest.mark.parametrize("how", ["completeJob", "completeJobs"])
def test_a_result_holding_nul_round_trips(
    server: Server, worker: str, result: dict[str, Any], how: str
) -> None:
    job = held_job(server, worker)
    if how == "completeJob":
        done = post(server, COMPLETE, {"id": job["id"], "r": result}, worker).ok()["completeJob"]
        assert done == {"status": "COMPLETED", "result": result}
    else:
        items = [{"id": job["id"], "result": result}]
        done = post(server, COMPLETE_MANY, {"items": items}, worker).ok()["completeJobs"]
        assert done == {"completed": [{"id": job["id"], "result": result}], "rejected": []}
    assert post(server, JOB, {"id": job["id"]}).ok()["job"]["result"] == result
    ((stored,),) = server.sql("SELECT result FROM jobs WHERE id = :id", id=int(job["id"]))
    assert NUL not in stored and json.loads(stored) == result
