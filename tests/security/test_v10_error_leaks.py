"""V-10 (error leaks): failure texts and server errors reveal no secrets or internals.

Attacked, on a server with QUEUELOG_MAX_ERROR_CHARS=200: workers failing jobs with realistic
leaky errors (a Python traceback with file paths, a DSN with a password, `password=` pairs,
`Authorization: Bearer` headers, URL credentials, a queuelog key, 5000-character texts);
non-admin callers (the producer, a viewer, the worker itself) reading `Job.error` over HTTP and
websocket; malformed requests of every kind (bodies that are not GraphQL requests, bad ids,
cursors, numbers, dates that overflow, lone surrogates, JSON nested 100 000 deep, 5000-digit
numbers, invalid UTF-8); typos that invite "Did you mean" suggestions; documents with ten
repeats of one problem or 50 distinct problems.

Proven: the stored error (read as ADMIN and in the database) holds none of the secrets or
paths, keeps the exception line and is at most 200 characters; anyone else gets `error: null`
plus FORBIDDEN at the field's path; no response contains a traceback, SQL, a file path or a
driver name, no request gets a 500, every error carries exactly one contract code and nothing
else in `extensions`; validation errors never suggest names; a repeated problem is reported
once and a refused document gets at most 20 errors.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import Server, serving
from websockets.sync.client import connect

from queuelog.schema.extensions import INTERNAL_MESSAGE

MAX_ERROR_CHARS = 200
CONTRACT_CODES = {
    "UNAUTHENTICATED",
    "FORBIDDEN",
    "BAD_USER_INPUT",
    "PAYLOAD_TOO_LARGE",
    "NOT_FOUND",
    "CONFLICT",
    "INTERNAL_SERVER_ERROR",
}
# Nothing of the server's insides may appear in any response.
INTERNALS = [
    "Traceback",
    "sqlalchemy",
    "SELECT ",
    "INSERT ",
    "UPDATE jobs",
    "/work/",
    'File "',
    "site-packages",
    "sqlite3",
    "psycopg",
    "queuelog/",
    '.py"',
    "RecursionError",
    "AttributeError",
    "KeyError",
]
ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
FAIL = (
    "mutation($id: ID!, $e: String!, $r: Boolean!) { failJob(id: $id, error: $e, retryable: $r) { status } }"
)
QL_KEY = "ql_" + "Zx9" * 14 + "Q"

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/worker/handlers.py", line 42, in handle
    conn = psycopg.connect("postgresql://app:s3cret@db.internal/prod")
  File "/opt/venv/lib/python3.11/site-packages/psycopg/connection.py", line 119, in connect
    raise last_ex.with_traceback(None)
psycopg.OperationalError: connection failed: password=hunter2 rejected"""

LEAKY_ERRORS: dict[str, tuple[str, list[str], str | None]] = {
    # name: (error text, fragments that must not be stored, a fragment that must be kept)
    "python-traceback": (
        TRACEBACK,
        ["s3cret", "hunter2", "/srv/app", "/opt/venv", "handlers.py", "site-packages", 'File "', "Traceback"],
        "OperationalError",
    ),
    "dsn": (
        "could not connect to postgresql://app:s3cret@db/prod: timeout",
        ["s3cret", "app:s3cret"],
        "timeout",
    ),
    "libpq-conninfo": (
        "login failed: host=db user=app password=hunter2 dbname=prod",
        ["hunter2"],
        "login failed",
    ),
    "authorization-header": (
        "upstream said 401; request had Authorization: Bearer "
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl",
        ["eyJhbGciOiJIUzI1NiJ9", "c2lnbmF0dXJl", "eyJzdWIiOiJ4In0"],
        "upstream said 401",
    ),
    "bearer-token": (
        "retry with Bearer abcdef0123456789abcdef0123",
        ["abcdef0123456789abcdef0123"],
        "retry with",
    ),
    "url-credentials": ("GET https://deploy:tok3n@api.example.com/v1 failed", ["tok3n", "deploy:"], "failed"),
    "token-and-secret-pairs": ("config: token=tkn-8a7b6c secret: shh-42", ["tkn-8a7b6c", "shh-42"], "config"),
    "absolute-path": (
        "cannot open /etc/app/secrets.yaml: permission denied",
        ["/etc/app", "secrets.yaml"],
        "denied",
    ),
    "queuelog-key": (f"worker key {QL_KEY} was rejected", [QL_KEY, QL_KEY[3:20]], "was rejected"),
    "everything-and-long": (
        TRACEBACK + "\n" + "context: " + "x" * 3000 + " password=hunter2",
        ["s3cret", "hunter2", "/srv/app", 'File "'],
        None,
    ),
}


def assert_no_internals(text: str) -> None:
    leaked = [fragment for fragment in INTERNALS if fragment in text]
    assert not leaked, f"response leaks {leaked}: {text[:500]}"


def assert_clean_errors(body: dict[str, Any]) -> None:
    """Every error has exactly one extension, a contract code; no tracing or exception data."""
    assert not {"tracing", "exception", "ftv1"} & set(body.get("extensions") or {}), body
    for error in body.get("errors") or []:
        assert set(error.get("extensions", {})) == {"code"}, error
        assert error["extensions"]["code"] in CONTRACT_CODES, error


@pytest.fixture(scope="module")
def leaky(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, max_error_chars=MAX_ERROR_CHARS) as server:
        yield server


@pytest.fixture(scope="module")
def keys(leaky: Server) -> dict[str, str]:
    return {
        "admin": leaky.admin_key,
        "producer": leaky.make_key("v10-producer", "producer"),
        "viewer": leaky.make_key("v10-viewer", "viewer"),
        "worker": leaky.make_key("v10-worker", "worker"),
    }


def run_and_fail(server: Server, keys: dict[str, str], error: str, retryable: bool = False) -> str:
    """A producer's job, claimed by the worker and failed with `error`; returns the job id."""
    job_id = server.gql(ENQUEUE, {"input": {"type": "email"}}, key=keys["producer"]).ok()["enqueueJob"][
        "job"
    ]["id"]
    claimed = server.gql('mutation { claimJob(types: ["email"]) { id } }', key=keys["worker"]).ok()[
        "claimJob"
    ]
    assert claimed["id"] == job_id, "another job was pending"
    server.gql(FAIL, {"id": job_id, "e": error, "r": retryable}, key=keys["worker"]).ok()
    return job_id


@pytest.mark.parametrize("retryable", [False, True], ids=["final", "retryable"])
@pytest.mark.parametrize(("error", "secrets", "kept"), LEAKY_ERRORS.values(), ids=LEAKY_ERRORS.keys())
def test_stored_errors_are_sanitised_and_bounded(
    leaky: Server, keys: dict[str, str], error: str, secrets: list[str], kept: str | None, retryable: bool
) -> None:
    job_id = run_and_fail(leaky, keys, error, retryable)
    job = leaky.gql("query($id: ID!) { job(id: $id) { status error } }", {"id": job_id}).ok()["job"]
    assert job["status"] == ("PENDING" if retryable else "FAILED")
    stored = job["error"]
    assert stored and len(stored) <= MAX_ERROR_CHARS, stored
    for secret in secrets:
        assert secret not in stored, f"{secret!r} survived in {stored!r}"
    if kept is not None:
        assert kept in stored, f"the useful part {kept!r} was lost: {stored!r}"
    ((in_database,),) = leaky.sql("SELECT error FROM jobs WHERE id = :id", id=int(job_id))
    assert in_database == stored, "the raw text is stored and only the answer is cleaned"
    if retryable:  # leave nothing pending for the next test's claim
        leaky.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": job_id}).ok()


@pytest.fixture(scope="module")
def failed_job(leaky: Server, keys: dict[str, str]) -> str:
    return run_and_fail(leaky, keys, TRACEBACK)


def forbidden_paths(body: dict[str, Any]) -> list[list[Any]]:
    assert {e["extensions"]["code"] for e in body["errors"]} == {"FORBIDDEN"}, body
    for error in body["errors"]:
        assert "hunter2" not in error["message"] and "OperationalError" not in error["message"]
    return [e["path"] for e in body["errors"]]


@pytest.mark.parametrize("reader", ["producer", "viewer", "worker"])
def test_non_admins_get_null_and_forbidden_for_job_error(
    leaky: Server, keys: dict[str, str], failed_job: str, reader: str
) -> None:
    one = leaky.gql(
        "query($id: ID!) { job(id: $id) { id status error } }", {"id": failed_job}, key=keys[reader]
    )
    assert one.data == {"job": {"id": failed_job, "status": "FAILED", "error": None}}, one.body
    assert forbidden_paths(one.body) == [["job", "error"]]
    listed = leaky.gql("{ jobs(first: 100) { nodes { id error } } }", key=keys[reader])
    nodes = listed.data["jobs"]["nodes"]
    index = [n["id"] for n in nodes].index(failed_job)
    assert all(n["error"] is None for n in nodes)
    assert ["jobs", "nodes", index, "error"] in forbidden_paths(listed.body)


def test_admin_reads_the_sanitised_error_positive_control(leaky: Server, failed_job: str) -> None:
    error = leaky.gql("query($id: ID!) { job(id: $id) { error } }", {"id": failed_job}).ok()["job"]["error"]
    assert error and "OperationalError" in error


def test_the_failing_worker_cannot_read_back_the_error_it_sent(leaky: Server, keys: dict[str, str]) -> None:
    job_id = leaky.gql(ENQUEUE, {"input": {"type": "email"}}, key=keys["producer"]).ok()["enqueueJob"]["job"][
        "id"
    ]
    leaky.gql('mutation { claimJob(types: ["email"]) { id } }', key=keys["worker"]).ok()
    response = leaky.gql(
        "mutation($id: ID!, $e: String!) { failJob(id: $id, error: $e, retryable: false) { status error } }",
        {"id": job_id, "e": "password=hunter2"},
        key=keys["worker"],
    )
    assert response.data == {"failJob": {"status": "FAILED", "error": None}}, response.body
    assert forbidden_paths(response.body) == [["failJob", "error"]]


def test_subscriptions_withhold_job_error_from_non_admins(
    leaky: Server, keys: dict[str, str], failed_job: str
) -> None:
    with connect(leaky.ws_url, subprotocols=["graphql-transport-ws"], open_timeout=10) as ws:
        ws.send(
            json.dumps(
                {"type": "connection_init", "payload": {"authorization": f"Bearer {keys['producer']}"}}
            )
        )
        assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
        query = "subscription($id: ID!) { jobUpdated(id: $id) { id status error } }"
        ws.send(
            json.dumps(
                {"id": "1", "type": "subscribe", "payload": {"query": query, "variables": {"id": failed_job}}}
            )
        )
        reply = json.loads(ws.recv(timeout=10))
    assert reply["type"] == "next", reply
    assert reply["payload"]["data"] == {"jobUpdated": {"id": failed_job, "status": "FAILED", "error": None}}
    assert forbidden_paths(reply["payload"]) == [["jobUpdated", "error"]]
    assert_clean_errors(reply["payload"])


# --- malformed requests ----------------------------------------------------------------------


def cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def gql_body(query: str, variables: dict[str, Any] | None = None) -> bytes:
    # ensure_ascii keeps lone surrogates as \\ud800 escapes, as a hostile client may send them.
    return json.dumps({"query": query, "variables": variables or {}}).encode()


JOB_BY_ID = "query($id: ID!) { job(id: $id) { id } }"
PAGE = "query($c: String, $n: Int!) { jobs(after: $c, first: $n) { totalCount } }"
ENQUEUE_LITERAL = 'mutation {{ enqueueJob(input: {{type: "email", {}}}) {{ job {{ id }} }} }}'
COMPLETE_MANY = "mutation($i: [CompleteJobInput!]!) { completeJobs(items: $i) { rejected } }"
DEEP = 100_000
NESTED = b'{"query": "{ me { name } }", "variables": {"x": ' + b"[" * DEEP + b"]" * DEEP + b"}}"
HUGE_NUMBER = b'{"query": "{ me { name } }", "variables": {"n": 1' + b"0" * 5000 + b"}}"


def enqueue_body(**fields: Any) -> bytes:
    return gql_body(ENQUEUE, {"input": {"type": "email", **fields}})


MALFORMED: dict[str, tuple[str, bytes]] = {
    # name: (key to send it with, raw body)
    "body-string": ("admin", b'"{ me { name } }"'),
    "body-number": ("admin", b"42"),
    "body-null": ("admin", b"null"),
    "body-true": ("admin", b"true"),
    "body-batch": ("admin", b'[{"query": "{ me { name } }"}, {"query": "{ me { name } }"}]'),
    "body-empty-array": ("admin", b"[]"),
    "body-not-json": ("admin", b"{ me { name } }"),
    "body-invalid-utf8": ("admin", b'{"query": "{ me { name \xff\xfe } }"}'),
    "body-deeply-nested": ("admin", NESTED),
    "body-5000-digit-number": ("admin", HUGE_NUMBER),
    "query-not-a-string": ("admin", b'{"query": 1}'),
    "query-missing": ("admin", b'{"variables": {}}'),
    "query-empty": ("admin", b'{"query": ""}'),
    "variables-list": ("admin", b'{"query": "{ me { name } }", "variables": [1]}'),
    "extensions-string": ("admin", b'{"query": "{ me { name } }", "extensions": "x"}'),
    "operation-name-unknown": ("admin", b'{"query": "{ me { name } }", "operationName": "Nope"}'),
    "operation-name-number": ("admin", b'{"query": "{ me { name } }", "operationName": 5}'),
    "query-nul-character": ("admin", gql_body("{ me { name } }\u0000")),
    "query-syntax-error": ("admin", gql_body("{ me { name }")),
    "query-lone-surrogate": ("admin", gql_body('{ job(id: "\ud800") { id } }')),
    "id-empty": ("admin", gql_body(JOB_BY_ID, {"id": ""})),
    "id-negative": ("admin", gql_body(JOB_BY_ID, {"id": "-1"})),
    "id-zero": ("admin", gql_body(JOB_BY_ID, {"id": "0"})),
    "id-exponent": ("admin", gql_body(JOB_BY_ID, {"id": "1e3"})),
    "id-huge": ("admin", gql_body(JOB_BY_ID, {"id": "9" * 40})),
    "id-fullwidth-digits": ("admin", gql_body(JOB_BY_ID, {"id": "\uff11\uff12"})),
    "id-padded": ("admin", gql_body(JOB_BY_ID, {"id": " 1"})),
    "id-float-type": ("admin", gql_body(JOB_BY_ID, {"id": 1.5})),
    "cursor-garbage": ("admin", gql_body(PAGE, {"c": "!!!", "n": 5})),
    "cursor-negative": ("admin", gql_body(PAGE, {"c": cursor("job:-1"), "n": 5})),
    "cursor-huge": ("admin", gql_body(PAGE, {"c": cursor("job:" + "9" * 30), "n": 5})),
    "first-zero": ("admin", gql_body(PAGE, {"n": 0})),
    "first-too-big": ("admin", gql_body(PAGE, {"n": 101})),
    "first-int-overflow": ("admin", gql_body(PAGE, {"n": 2**31})),
    "max-retries-negative": ("admin", gql_body(ENQUEUE_LITERAL.format("maxRetries: -1"))),
    "max-retries-too-big": ("admin", gql_body(ENQUEUE_LITERAL.format("maxRetries: 26"))),
    "run-at-garbage": ("admin", gql_body(ENQUEUE_LITERAL.format('runAt: "yesterday"'))),
    "run-at-before-year-1-in-utc": ("admin", enqueue_body(runAt="0001-01-01T00:00:00+14:00")),
    "run-at-after-year-9999-in-utc": ("admin", enqueue_body(runAt="9999-12-31T23:59:59-14:00")),
    "payload-lone-surrogate-key": ("admin", enqueue_body(payload={"\ud800": 1})),
    "type-lone-surrogate": ("admin", gql_body(ENQUEUE, {"input": {"type": "\udfff"}})),
    "idempotency-lone-surrogate": ("admin", enqueue_body(idempotencyKey="\ud800")),
    "claim-limit-zero": ("worker", gql_body("mutation { claimJobs(limit: 0) { id } }")),
    "claim-wait-too-long": ("worker", gql_body("mutation { claimJob(waitSeconds: 31) { id } }")),
    "claim-lease-zero": ("worker", gql_body("mutation { claimJob(leaseSeconds: 0) { id } }")),
    "claim-types-empty": ("worker", gql_body("mutation { claimJob(types: []) { id } }")),
    "fail-lone-surrogate": ("worker", gql_body('mutation { failJob(id: "1", error: "\ud800") { id } }')),
    "fail-retry-negative": (
        "worker",
        gql_body('mutation { failJob(id: "1", error: "", retryInSeconds: -1) { id } }'),
    ),
    "complete-too-many": ("worker", gql_body(COMPLETE_MANY, {"i": [{"id": str(n)} for n in range(1, 102)]})),
    "subscription-over-http": ("admin", gql_body("subscription { jobEvents { kind } }")),
}


@pytest.mark.parametrize(("who", "body"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_requests_never_leak_or_crash(
    leaky: Server, keys: dict[str, str], who: str, body: bytes
) -> None:
    response = leaky.client.post(
        leaky.graphql_url,
        content=body,
        headers={"Authorization": f"Bearer {keys[who]}", "Content-Type": "application/json"},
    )
    assert response.status_code in (200, 400), (response.status_code, response.text[:300])
    assert_no_internals(response.text)
    if response.headers.get("content-type", "").startswith("application/json"):
        parsed = response.json()
        if isinstance(parsed, dict):
            assert_clean_errors(parsed)
            if response.status_code == 200:
                assert parsed.get("errors"), "a malformed request was accepted"
    assert httpx.get(f"{leaky.url}/healthz", timeout=10).status_code == 200


def test_a_time_that_cannot_be_utc_is_bad_input_without_internals(leaky: Server) -> None:
    # 0001-01-01 at +14:00 is a valid DateTime that cannot be converted to UTC.
    response = leaky.gql(ENQUEUE_LITERAL.format('runAt: "0001-01-01T00:00:00+14:00"'))
    assert response.data is None and response.errors, response.body
    assert_clean_errors(response.body)
    assert_no_internals(json.dumps(response.body))
    assert response.codes == ["BAD_USER_INPUT"]
    for error in response.errors:
        assert "overflow" not in error["message"].lower()


def test_an_unexpected_error_is_generic_and_logged(start_server: Any) -> None:
    # A database error the server never expects: its events table has gone.
    server = start_server()
    server.sql("DROP TABLE job_events")
    response = server.gql(ENQUEUE_LITERAL.format("payload: {}"))
    assert response.data is None and response.errors, response.body
    assert_clean_errors(response.body)
    assert_no_internals(json.dumps(response.body))
    assert response.codes == ["INTERNAL_SERVER_ERROR"]
    assert response.errors[0]["message"] == INTERNAL_MESSAGE
    assert "job_events" not in json.dumps(response.body)
    assert "Traceback" in server.log() and "job_events" in server.log(), "details go to the server log"
    assert server.gql("{ jobs { totalCount } }").ok()["jobs"]["totalCount"] == 0, "nothing half written"


def test_a_subscription_over_http_is_refused_as_bad_input(leaky: Server) -> None:
    response = leaky.gql("subscription { jobEvents { kind } }")
    assert response.codes == ["BAD_USER_INPUT"], response.body
    assert "websocket" in response.errors[0]["message"]


def test_several_operations_without_a_name_run_nothing(leaky: Server) -> None:
    before = leaky.gql("{ jobs { totalCount } }").ok()["jobs"]["totalCount"]
    document = (
        ENQUEUE_LITERAL.format("payload: {}").replace("mutation", "mutation M", 1)
        + " query Q { me { name } }"
    )
    response = leaky.gql(document)
    assert response.codes == ["BAD_USER_INPUT"], response.body
    assert leaky.gql("{ jobs { totalCount } }").ok()["jobs"]["totalCount"] == before


def test_no_tracing_on_request(leaky: Server) -> None:
    response = leaky.client.post(
        leaky.graphql_url,
        json={"query": "{ me { name } jobs { totalCount } }"},
        headers={"Authorization": f"Bearer {leaky.admin_key}", "apollo-federation-include-trace": "ftv1"},
    )
    body = response.json()
    assert set(body) == {"data"}, body
    failing = leaky.gql('{ job(id: "x") { id } }')
    assert set(failing.body) <= {"data", "errors"} and failing.errors
    assert_clean_errors(failing.body)


# --- validation errors -----------------------------------------------------------------------

TYPOS: dict[str, tuple[str, dict[str, Any]]] = {
    "field": ("{ jbos { totalCount } }", {}),
    "nested-field": ('{ job(id: "1") { stauts } }', {}),
    "argument": ("{ jobs(frist: 1) { totalCount } }", {}),
    "enum-literal": ("{ jobs(status: PENDIN) { totalCount } }", {}),
    "enum-variable": ("query($s: JobStatus) { jobs(status: $s) { totalCount } }", {"s": "PENDIN"}),
    "input-field-literal": ('mutation { enqueueJob(input: {typ: "email"}) { job { id } } }', {}),
    "input-field-variable": (ENQUEUE, {"input": {"typ": "email"}}),
    "type-name": ("query($s: JobStatuss) { jobs(status: $s) { totalCount } }", {}),
    "directive": ("{ me { name @skipp(if: true) } }", {}),
    "fragment-type": ("{ ...F } fragment F on Quer { me { name } }", {}),
    "nested-object-field": ("{ queueStats { count { pending } } }", {}),
}


@pytest.mark.parametrize(("query", "variables"), TYPOS.values(), ids=TYPOS.keys())
def test_validation_errors_make_no_suggestions(leaky: Server, query: str, variables: dict[str, Any]) -> None:
    response = leaky.gql(query, variables)
    assert response.data is None and response.errors, response.body
    assert set(response.codes) == {"BAD_USER_INPUT"}, response.body
    assert "did you mean" not in json.dumps(response.body).lower(), response.body


REPEATS: dict[str, str] = {
    "unknown-directive": "{ me { name " + "@nope " * 10 + "} }",
    "unknown-field": "{ me { " + "nope " * 10 + "} }",
}


@pytest.mark.parametrize("query", REPEATS.values(), ids=REPEATS.keys())
def test_a_repeated_problem_is_reported_once(leaky: Server, query: str) -> None:
    response = leaky.gql(query)
    assert response.data is None, response.body
    assert len(response.errors) == 1, response.body


def test_a_refused_document_gets_at_most_20_errors(leaky: Server) -> None:
    query = "{ " + " ".join(f"missing{i}" for i in range(50)) + " }"
    response = leaky.gql(query)
    assert response.data is None
    assert 1 <= len(response.errors) <= 20, len(response.errors)
    assert set(response.codes) == {"BAD_USER_INPUT"}
