"""V-08 (SQL injection): every value is bound as a parameter, never spliced into SQL.

Attacked, on a server whose allowlist itself holds injection strings (so they can be job
types): classic payloads (`'; DROP TABLE jobs; --`, `" OR 1=1 --`, UNION SELECTs, stacked
DELETEs, LIKE wildcards) as job type, payload keys and values, idempotency key, result and
failure error; as filters (`jobs(type:)`, `claimJob(types:)`), ids, cursors and bearer keys.

Proven: the strings are stored and returned literally (through GraphQL and in the database);
filters match only the literal value (`jobs(type: "x' OR '1'='1")` finds nothing); malformed
ids and cursors are BAD_USER_INPUT; afterwards every table exists, a SQLite database passes
`PRAGMA integrity_check`, and job and key counts are exactly what was created. An error text
holding NUL (which PostgreSQL cannot store) is refused as BAD_USER_INPUT on every backend.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Server, serving
from sqlalchemy import inspect

from queuelog.sanitize import sanitize_error

INJECTION_TYPES = ["'; DROP TABLE jobs; --", '" OR 1=1 --', "x') OR ('1'='1"]
INJECTIONS: dict[str, str] = {
    "drop-table": "'; DROP TABLE jobs; --",
    "or-true-double-quote": '" OR 1=1 --',
    "or-true-single-quote": "' OR '1'='1",
    "stacked-delete": "1; DELETE FROM api_keys WHERE 1=1; --",
    "bobby-tables": "Robert'); DROP TABLE job_events;--",
    "union-select": "' UNION SELECT key_hash, name FROM api_keys --",
    "like-wildcard": "%' OR 1=1 --",
    "backslash-quote": "\\'; UPDATE jobs SET status='completed'; --",
    "comment-and-null": "x'/**/OR/**/1=1\u0000--",
}
ENQUEUE = (
    "mutation($input: EnqueueJobInput!) "
    "{ enqueueJob(input: $input) { created job { id type payload idempotencyKey } } }"
)
JOB = "query($id: ID!) { job(id: $id) { id type payload idempotencyKey status result error } }"
TABLES = {"jobs", "api_keys", "job_events"}


def assert_database_intact(server: Server, jobs: int, keys: int) -> None:
    tables = set(inspect(server.engine).get_table_names())
    assert tables >= TABLES, f"tables missing: {TABLES - tables}"
    if server.backend == "sqlite":
        assert server.sql("PRAGMA integrity_check") == [("ok",)]
    assert server.sql("SELECT count(*) FROM jobs")[0][0] == jobs
    assert server.sql("SELECT count(*) FROM api_keys")[0][0] == keys
    assert server.gql("{ jobs { totalCount } }").ok()["jobs"]["totalCount"] == jobs


@pytest.fixture(scope="module")
def injected(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=",".join(["email", *INJECTION_TYPES])) as server:
        yield server


@pytest.fixture(scope="module")
def producer(injected: Server) -> str:
    return injected.make_key("v08-producer", "producer")


@pytest.fixture(scope="module")
def worker(injected: Server) -> str:
    return injected.make_key("v08-worker", "worker")


@pytest.fixture
def counts(injected: Server, producer: str, worker: str) -> tuple[int, int]:
    jobs = injected.sql("SELECT count(*) FROM jobs")[0][0]
    keys = injected.sql("SELECT count(*) FROM api_keys")[0][0]
    return jobs, keys


@pytest.fixture
def empty_queue(injected: Server) -> None:
    """Cancel every PENDING job left by earlier tests, so a claim can only get this test's job."""
    while nodes := injected.gql("{ jobs(status: PENDING, first: 100) { nodes { id } } }").ok()["jobs"][
        "nodes"
    ]:
        for node in nodes:
            injected.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": node["id"]}).ok()


@pytest.mark.parametrize("text", INJECTIONS.values(), ids=INJECTIONS.keys())
def test_strings_are_stored_and_returned_literally(
    injected: Server, producer: str, counts: tuple[int, int], text: str
) -> None:
    jobs, keys = counts
    job_type = text if text in INJECTION_TYPES else "email"
    idempotency_key = text.replace("\0", "")  # idempotency keys must be printable
    payload = {"q": text, text: [text], "nested": {"k": text}}
    expected = {"type": job_type, "payload": payload, "idempotencyKey": idempotency_key}
    created = injected.gql(ENQUEUE, {"input": expected}, key=producer).ok()["enqueueJob"]
    assert created["created"] is True
    job = created["job"]
    assert {k: job[k] for k in expected} == expected
    read_back = injected.gql(
        "query($id: ID!) { job(id: $id) { type payload idempotencyKey } }", {"id": job["id"]}, key=producer
    ).ok()["job"]
    assert read_back == expected
    ((stored_type, stored_payload, stored_key),) = injected.sql(
        "SELECT type, payload, idempotency_key FROM jobs WHERE id = :id", id=int(job["id"])
    )
    assert (stored_type, json.loads(stored_payload), stored_key) == (job_type, payload, idempotency_key)
    assert_database_intact(injected, jobs + 1, keys)


@pytest.mark.usefixtures("empty_queue")
@pytest.mark.parametrize("text", INJECTIONS.values(), ids=INJECTIONS.keys())
def test_results_and_errors_are_stored_literally(
    injected: Server, worker: str, counts: tuple[int, int], text: str
) -> None:
    jobs, keys = counts
    assert sanitize_error(text, 2000) in (text, text.replace("\0", "")), (
        "precondition: the sanitiser keeps it"
    )
    for outcome in ("complete", "fail"):
        job_id = injected.gql(ENQUEUE, {"input": {"type": "email"}}).ok()["enqueueJob"]["job"]["id"]
        assert injected.gql("mutation { claimJob { id } }", key=worker).ok()["claimJob"]["id"] == job_id
        if outcome == "complete":
            report = "mutation($id: ID!, $r: JSON) { completeJob(id: $id, result: $r) { status } }"
            injected.gql(report, {"id": job_id, "r": {"r": text}}, key=worker).ok()
        else:
            report = (
                "mutation($id: ID!, $e: String!) { failJob(id: $id, error: $e, retryable: false) { status } }"
            )
            error = text
            if "\0" in error:  # text PostgreSQL cannot store: refused on every backend, nothing changes
                refused = injected.gql(report, {"id": job_id, "e": error}, key=worker)
                assert refused.data is None and refused.codes == ["BAD_USER_INPUT"], refused.body
                assert injected.gql(JOB, {"id": job_id}).ok()["job"]["status"] == "RUNNING"
                error = error.replace("\0", "")
            injected.gql(report, {"id": job_id, "e": error}, key=worker).ok()
        job = injected.gql(JOB, {"id": job_id}).ok()["job"]
        if outcome == "complete":
            assert (job["status"], job["result"]) == ("COMPLETED", {"r": text})
        else:
            assert job["status"] == "FAILED" and job["error"] == sanitize_error(text, 2000)
            stored = injected.sql("SELECT error FROM jobs WHERE id = :id", id=int(job_id))[0][0]
            assert stored == job["error"]
    assert_database_intact(injected, jobs + 2, keys)


FILTERS_MATCHING_NOTHING = [
    "x' OR '1'='1",
    "email' OR '1'='1",
    "' OR 1=1 --",
    "%",
    "email%",
    "_mail",
    "email'; DROP TABLE jobs; --",
]


@pytest.mark.parametrize("job_type", FILTERS_MATCHING_NOTHING)
def test_type_filters_match_only_the_literal_value(
    injected: Server, producer: str, counts: tuple[int, int], job_type: str
) -> None:
    jobs, keys = counts
    injected.gql(ENQUEUE, {"input": {"type": "email"}}, key=producer).ok()
    query = "query($t: String) { jobs(type: $t, first: 100) { totalCount nodes { id } } }"
    assert injected.gql(query, {"t": job_type}).ok()["jobs"] == {"totalCount": 0, "nodes": []}
    literal = f"{{ jobs(type: {json.dumps(job_type)}) {{ totalCount }} }}"
    assert injected.gql(literal).ok()["jobs"]["totalCount"] == 0
    assert_database_intact(injected, jobs + 1, keys)


@pytest.mark.parametrize("job_type", INJECTION_TYPES)
def test_an_injection_type_filter_finds_exactly_its_own_jobs(
    injected: Server, producer: str, job_type: str
) -> None:
    injected.gql(ENQUEUE, {"input": {"type": job_type}}, key=producer).ok()
    expected = injected.sql("SELECT count(*) FROM jobs WHERE type = :type", type=job_type)[0][0]
    query = "query($t: String) { jobs(type: $t, first: 100) { totalCount nodes { type } } }"
    found = injected.gql(query, {"t": job_type}).ok()["jobs"]
    assert found["totalCount"] == expected >= 1
    assert {node["type"] for node in found["nodes"]} == {job_type}


@pytest.mark.usefixtures("empty_queue")
def test_a_claim_type_filter_is_literal(injected: Server, worker: str, counts: tuple[int, int]) -> None:
    jobs, keys = counts
    job_id = injected.gql(ENQUEUE, {"input": {"type": "email"}}).ok()["enqueueJob"]["job"]["id"]
    for types in (["x' OR '1'='1"], ["email' --"], ["') OR 1=1 --"], ["%"]):
        claimed = injected.gql(
            "mutation($t: [String!]) { claimJob(types: $t) { id } }", {"t": types}, key=worker
        ).ok()
        assert claimed["claimJob"] is None, types
    assert injected.gql(JOB, {"id": job_id}).ok()["job"]["status"] == "PENDING"
    assert_database_intact(injected, jobs + 1, keys)


def cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


MALFORMED: dict[str, tuple[str, dict[str, Any]]] = {
    "job-id-or": ("query($id: ID!) { job(id: $id) { id } }", {"id": "1 OR 1=1"}),
    "job-id-stacked": ("query($id: ID!) { job(id: $id) { id } }", {"id": "1; DROP TABLE jobs"}),
    "cancel-id": ("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": "0 OR 1=1"}),
    "retry-id": ("mutation($id: ID!) { retryJob(id: $id) { id } }", {"id": "1' OR '1'='1"}),
    "cursor-or": ("query($c: String) { jobs(after: $c) { totalCount } }", {"c": cursor("job:1 OR 1=1")}),
    "cursor-raw": ("query($c: String) { jobs(after: $c) { totalCount } }", {"c": "' OR 1=1 --"}),
}


@pytest.mark.parametrize(("query", "variables"), MALFORMED.values(), ids=MALFORMED.keys())
def test_injected_ids_and_cursors_are_bad_input(
    injected: Server, counts: tuple[int, int], query: str, variables: dict[str, Any]
) -> None:
    jobs, keys = counts
    response = injected.gql(query, variables)
    assert response.codes == ["BAD_USER_INPUT"], response.body
    assert_database_intact(injected, jobs, keys)


@pytest.mark.parametrize("token", ["' OR '1'='1", "x' OR key_hash LIKE '%", "'; DROP TABLE api_keys; --"])
def test_injected_bearer_keys_are_unauthenticated(
    injected: Server, counts: tuple[int, int], token: str
) -> None:
    jobs, keys = counts
    response = injected.client.post(
        injected.graphql_url, json={"query": "{ me { name } }"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 401, response.text
    assert_database_intact(injected, jobs, keys)
