"""V-07 (unbounded payloads): every input that costs the server memory or work is bounded.

Attacked, on a server with QUEUELOG_MAX_PAYLOAD_BYTES=1024, QUEUELOG_MAX_BODY_BYTES=65536 and
QUEUELOG_MAX_DEPTH=3 (aliases and tokens at their defaults, 30 and 2000):
payloads and results at and one byte over the limit (ASCII, 2- and 4-byte UTF-8, JSON escapes,
many small keys where the separators matter); payloads that are not JSON objects or not JSON
at all (NaN); request bodies one byte over the limit with Content-Length, chunked without it,
and a 50 MB chunked stream; documents too deep (also through fragments), with too many aliases
or too many tokens.

Proven: the compact UTF-8 serialisation is what counts (exactly at the limit passes and
round-trips, one byte over is PAYLOAD_TOO_LARGE, nothing stored); non-objects are
BAD_USER_INPUT; an oversized result leaves the job RUNNING (a batch with one is refused whole);
oversized bodies get HTTP 413 without the server reading them to the end, and the server stays
healthy; over-limit documents are refused before anything runs (data null, BAD_USER_INPUT,
nothing stored), while documents at the limits and the standard introspection query pass.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import Server, serving
from graphql import Lexer, Source, TokenKind, get_introspection_query

LIMIT = 1024
BODY_LIMIT = 65536
MAX_DEPTH = 3
MAX_ALIASES = 30
MAX_TOKENS = 2000
ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id payload } } }"
CLAIM = 'mutation { claimJob(types: ["resize"]) { id attempt } }'
COMPLETE = "mutation($id: ID!, $r: JSON) { completeJob(id: $id, result: $r) { status result } }"


def compact_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def sized(total: int, filler: str, extra_keys: int = 0) -> dict[str, Any]:
    """An object whose compact UTF-8 form is exactly `total` bytes, padded mostly with `filler`."""
    value: dict[str, Any] = {f"key{i}": [i, None, True] for i in range(extra_keys)}
    value["pad"] = ""
    cost = compact_size({"pad": filler}) - compact_size({"pad": ""})
    count = (total - compact_size(value)) // cost
    value["pad"] = filler * count
    value["pad"] += "a" * (total - compact_size(value))
    assert compact_size(value) == total
    return value


# name -> (filler, extra keys); every one is tried exactly at the limit and one byte over.
SHAPES: dict[str, tuple[str, int]] = {
    "ascii": ("a", 0),
    "two-byte-utf8": ("\u00e9", 0),
    "four-byte-utf8": ("\U0001f600", 0),
    "json-escapes": ('"\\\n', 0),
    "many-keys-compact-separators": ("a", 40),
}
SIZE_CASES = [(name, total) for name in SHAPES for total in (LIMIT, LIMIT + 1)]


def stored_jobs(server: Server) -> int:
    return server.sql("SELECT count(*) FROM jobs")[0][0]


def assert_refused_before_running(response: Any) -> None:
    assert response.status == 200, response.body
    assert response.data is None, response.body
    assert response.codes and set(response.codes) == {"BAD_USER_INPUT"}, response.body


@pytest.fixture(scope="module")
def limited(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(
        backend, tmp_path_factory, max_payload_bytes=LIMIT, max_body_bytes=BODY_LIMIT, max_depth=MAX_DEPTH
    ) as server:
        yield server


@pytest.fixture(scope="module")
def worker(limited: Server) -> str:
    return limited.make_key("v07-worker", "worker")


@pytest.fixture
def held_jobs(limited: Server, worker: str) -> list[dict[str, Any]]:
    """Two `resize` jobs claimed by `worker` (no other test leaves a `resize` job pending)."""
    held = []
    for _ in range(2):
        limited.gql(ENQUEUE, {"input": {"type": "resize"}}).ok()
        held.append(limited.gql(CLAIM, key=worker).ok()["claimJob"])
    return held


def job_state(server: Server, job_id: str) -> dict[str, Any]:
    return server.gql("query($id: ID!) { job(id: $id) { status result } }", {"id": job_id}).ok()["job"]


# --- payload and result sizes ---------------------------------------------------------------


@pytest.mark.parametrize(("shape", "total"), SIZE_CASES, ids=[f"{s}-{t}" for s, t in SIZE_CASES])
def test_payload_size_is_its_compact_utf8_serialisation(limited: Server, shape: str, total: int) -> None:
    payload = sized(total, *SHAPES[shape])
    before = stored_jobs(limited)
    response = limited.gql(ENQUEUE, {"input": {"type": "email", "payload": payload}})
    if total <= LIMIT:
        assert response.ok()["enqueueJob"]["job"]["payload"] == payload, "payload did not round-trip"
        assert stored_jobs(limited) == before + 1
    else:
        assert response.data is None and response.codes == ["PAYLOAD_TOO_LARGE"], response.body
        assert stored_jobs(limited) == before


def test_characters_under_the_limit_but_bytes_over_it_are_refused(limited: Server) -> None:
    payload = {"k": "\U0001f600" * 300}  # 308 characters, 1208 bytes
    before = stored_jobs(limited)
    response = limited.gql(ENQUEUE, {"input": {"type": "email", "payload": payload}})
    assert response.codes == ["PAYLOAD_TOO_LARGE"], response.body
    assert stored_jobs(limited) == before


NOT_OBJECTS: dict[str, tuple[str, dict[str, Any]]] = {
    "empty-list": (ENQUEUE, {"input": {"type": "email", "payload": []}}),
    "list": (ENQUEUE, {"input": {"type": "email", "payload": [{"a": 1}]}}),
    "string": (ENQUEUE, {"input": {"type": "email", "payload": '{"a": 1}'}}),
    "integer": (ENQUEUE, {"input": {"type": "email", "payload": 42}}),
    "float": (ENQUEUE, {"input": {"type": "email", "payload": 1.5}}),
    "boolean": (ENQUEUE, {"input": {"type": "email", "payload": True}}),
    "null": (ENQUEUE, {"input": {"type": "email", "payload": None}}),
    "literal-string": ('mutation { enqueueJob(input: {type: "email", payload: "x"}) { job { id } } }', {}),
    "literal-list": ('mutation { enqueueJob(input: {type: "email", payload: [1, 2]}) { job { id } } }', {}),
    "literal-number": ('mutation { enqueueJob(input: {type: "email", payload: 7}) { job { id } } }', {}),
}


@pytest.mark.parametrize(("query", "variables"), NOT_OBJECTS.values(), ids=NOT_OBJECTS.keys())
def test_a_payload_that_is_not_an_object_is_refused(
    limited: Server, query: str, variables: dict[str, Any]
) -> None:
    before = stored_jobs(limited)
    response = limited.gql(query, variables)
    assert response.data is None, response.body
    assert response.codes == ["BAD_USER_INPUT"], response.body
    assert stored_jobs(limited) == before


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_payload_that_is_not_json_is_refused(limited: Server, constant: str) -> None:
    # Python's json module reads these non-JSON constants; the server must not store them.
    variables = '{"input": {"type": "email", "payload": {"x": ' + constant + "}}}"
    body = '{"query": ' + json.dumps(ENQUEUE) + ', "variables": ' + variables + "}"
    before = stored_jobs(limited)
    response = limited.client.post(
        limited.graphql_url,
        content=body,
        headers={"Authorization": f"Bearer {limited.admin_key}", "Content-Type": "application/json"},
    )
    assert stored_jobs(limited) == before, f"a payload containing {constant} was stored"
    assert constant not in response.text
    if response.status_code == 200:
        codes = [e["extensions"]["code"] for e in response.json()["errors"]]
        assert codes == ["BAD_USER_INPUT"], response.text
    else:
        assert response.status_code == 400, response.text


@pytest.mark.parametrize("total", [LIMIT, LIMIT + 1], ids=["at-limit", "one-over"])
def test_complete_job_result_is_bounded_and_an_oversized_one_changes_nothing(
    limited: Server, worker: str, held_jobs: list[dict[str, Any]], total: int
) -> None:
    job = held_jobs[0]
    result = sized(total, "\u00e9")
    response = limited.gql(COMPLETE, {"id": job["id"], "r": result}, key=worker)
    if total <= LIMIT:
        assert response.ok()["completeJob"] == {"status": "COMPLETED", "result": result}
    else:
        assert response.data is None and response.codes == ["PAYLOAD_TOO_LARGE"], response.body
        assert job_state(limited, job["id"]) == {"status": "RUNNING", "result": None}
    for other in held_jobs:  # leave nothing running for later tests
        limited.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": other["id"]}, key=worker)


def test_complete_jobs_with_one_oversized_result_is_refused_whole(
    limited: Server, worker: str, held_jobs: list[dict[str, Any]]
) -> None:
    items = [
        {"id": held_jobs[0]["id"], "result": {"ok": True}},
        {"id": held_jobs[1]["id"], "result": sized(LIMIT + 1, "a")},
    ]
    response = limited.gql(
        "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) { rejected } }",
        {"items": items},
        key=worker,
    )
    assert response.data is None and response.codes == ["PAYLOAD_TOO_LARGE"], response.body
    for job in held_jobs:
        assert job_state(limited, job["id"]) == {"status": "RUNNING", "result": None}
        limited.gql("mutation($id: ID!) { completeJob(id: $id) { id } }", {"id": job["id"]}, key=worker)


# --- request bodies ------------------------------------------------------------------------


def body_of_size(total: int) -> bytes:
    """A valid request (an enqueue) whose JSON body is exactly `total` bytes."""
    request: dict[str, Any] = {"query": ENQUEUE, "variables": {"input": {"type": "noop"}}, "padding": ""}
    encoded = json.dumps(request, separators=(",", ":")).encode()
    request["padding"] = " " * (total - len(encoded))
    encoded = json.dumps(request, separators=(",", ":")).encode()
    assert len(encoded) == total
    return encoded


def chunks(body: bytes, size: int = 8192) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def post_body(server: Server, content: bytes | Iterator[bytes]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.admin_key}", "Content-Type": "application/json"}
    with httpx.Client(timeout=30) as client:
        return client.post(server.graphql_url, content=content, headers=headers)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("total", [BODY_LIMIT, BODY_LIMIT + 1, 4 * BODY_LIMIT], ids=["at", "one-over", "4x"])
def test_request_body_limit(limited: Server, total: int, chunked: bool) -> None:
    body = body_of_size(total)
    before = stored_jobs(limited)
    response = post_body(limited, chunks(body) if chunked else body)
    assert ("transfer-encoding" in response.request.headers) == chunked
    if total <= BODY_LIMIT:
        assert response.status_code == 200 and "errors" not in response.json(), response.text
        assert stored_jobs(limited) == before + 1
    else:
        assert response.status_code == 413, response.text[:300]
        assert response.json()["data"] is None
        assert stored_jobs(limited) == before, "an oversized request was executed"


def test_a_50mb_chunked_stream_is_refused_without_being_read(limited: Server) -> None:
    total = 50 * 1024 * 1024
    piece = b" " * 65536  # one buffer, reused: the client's memory stays bounded too
    sent = 0

    def stream() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"query": "{ me { name } }", "padding": "'
        while sent < total:
            sent += len(piece)
            yield piece
        yield b'"}'

    try:
        response = post_body(limited, stream())
    except httpx.TransportError:
        pass  # the server answered 413 and closed the connection while we were still sending
    else:
        assert response.status_code == 413, response.text[:300]
    assert sent < 8 * 1024 * 1024, f"the server read {sent} bytes of a refused body"
    assert httpx.get(f"{limited.url}/healthz", timeout=10).status_code == 200
    assert limited.gql("{ me { name } }").ok()["me"]["name"] == "admin"


# --- document limits -------------------------------------------------------------------------

DEPTH_REFUSED: dict[str, str] = {
    "depth-4": "{ jobs { edges { node { id } } } }",
    "depth-4-beside-a-shallow-field": "{ me { name } jobs { edges { node { id } } } }",
    "depth-4-through-fragment": "{ ...Q } fragment Q on Query { jobs { edges { node { id } } } }",
    "depth-4-through-inline-fragments": (
        "{ jobs { ... on JobConnection { edges { node { ... on Job { id } } } } } }"
    ),
    "circular-introspection": (
        "{ __schema { types { fields { type { fields { type { fields { name } } } } } } } }"
    ),
}


@pytest.mark.parametrize("query", DEPTH_REFUSED.values(), ids=DEPTH_REFUSED.keys())
def test_too_deep_documents_are_refused_before_running(limited: Server, query: str) -> None:
    assert_refused_before_running(limited.gql(query))


DEPTH_ALLOWED: dict[str, str] = {
    "depth-3": "{ jobs { nodes { id } } }",
    "depth-3-mutation": 'mutation { enqueueJob(input: {type: "noop"}) { job { id } } }',
    "standard-introspection": get_introspection_query(
        descriptions=True,
        specified_by_url=True,
        directive_is_repeatable=True,
        schema_description=True,
        input_value_deprecation=True,
    ),
}


@pytest.mark.parametrize("query", DEPTH_ALLOWED.values(), ids=DEPTH_ALLOWED.keys())
def test_documents_within_the_depth_limit_run(limited: Server, query: str) -> None:
    assert limited.gql(query).ok()


def aliased_enqueues(count: int) -> str:
    fields = " ".join(f'a{i}: enqueueJob(input: {{type: "noop"}}) {{ job {{ id }} }}' for i in range(count))
    return f"mutation {{ {fields} }}"


def test_too_many_aliases_are_refused_before_running(limited: Server) -> None:
    before = stored_jobs(limited)
    assert_refused_before_running(limited.gql(aliased_enqueues(MAX_ALIASES + 1)))
    assert stored_jobs(limited) == before, "aliased mutations ran although the document was refused"
    many_reads = "{ " + " ".join(f"m{i}: me {{ name }}" for i in range(200)) + " }"
    assert_refused_before_running(limited.gql(many_reads))


def test_aliases_up_to_the_limit_run(limited: Server) -> None:
    before = stored_jobs(limited)
    assert len(limited.gql(aliased_enqueues(MAX_ALIASES)).ok()) == MAX_ALIASES
    assert stored_jobs(limited) == before + MAX_ALIASES


def batch_of_noops(count: int) -> str:
    """enqueueJobs with `count` inputs: about five tokens each, a few bytes each."""
    inputs = " ".join('{type: "noop"}' for _ in range(count))
    return f"mutation {{ enqueueJobs(inputs: [{inputs}]) {{ created }} }}"


def tokens(document: str) -> int:
    lexer = Lexer(Source(document))
    count = 0
    while lexer.advance().kind is not TokenKind.EOF:
        count += 1
    return count


def test_too_many_tokens_are_refused_before_running(limited: Server) -> None:
    query = batch_of_noops(410)
    assert tokens(query) > MAX_TOKENS
    before = stored_jobs(limited)
    assert_refused_before_running(limited.gql(query))
    assert stored_jobs(limited) == before, "the mutation ran although the document was refused"


def test_a_document_under_the_token_limit_runs(limited: Server) -> None:
    query = batch_of_noops(370)
    assert 1800 < tokens(query) <= MAX_TOKENS
    before = stored_jobs(limited)
    assert len(limited.gql(query).ok()["enqueueJobs"]) == 370
    assert stored_jobs(limited) == before + 370


@pytest.mark.parametrize("size", [1_200_000, 2_000_000, 3_500_000], ids=["1.2MB", "2MB", "3.5MB"])
def test_a_moderately_oversized_upload_gets_a_clean_413_not_a_reset(server: Server, size: int) -> None:
    """Up to 4x the (default 1 MiB) limit the server drains the rest before answering, so a
    client still uploading reads the 413 instead of a connection reset (which clients report
    as "server unreachable"). One keep-alive client, as workers use."""
    body = body_of_size(size)
    headers = {"Authorization": f"Bearer {server.admin_key}", "Content-Type": "application/json"}

    async def upload_ten_times() -> list[int | str]:
        statuses: list[int | str] = []
        async with httpx.AsyncClient(timeout=30, headers=headers) as client:
            for _ in range(10):
                try:
                    response = await client.post(server.graphql_url, content=body)
                except httpx.TransportError as error:
                    statuses.append(type(error).__name__)
                    continue
                statuses.append(response.status_code)
                assert response.json()["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
        return statuses

    assert asyncio.run(upload_ten_times()) == [413] * 10
