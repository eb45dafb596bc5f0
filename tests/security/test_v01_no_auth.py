"""V-01 (no authentication): nothing runs without a valid, unrevoked API key.

Attacked: every query, mutation, subscription and introspection operation over HTTP with no
key, malformed `Authorization` headers, garbage keys, near-miss copies of a real key, a key
smuggled in a cookie or the URL, and a revoked key; websocket (`graphql-transport-ws`)
connections whose `connection_init` carries no, a bad or a revoked key; the key store itself.

Proven: HTTP 401 with a GraphQL body (`data: null`, code UNAUTHENTICATED) and no side
effect; websocket connections closed with 4403 before any operation runs; revocation (library
call and CLI) takes effect on the very next request; the database holds only hashes of keys
(the plaintext appears in no table, nor in the SQLite files); keys carry at least 128 random bits.
"""

from __future__ import annotations

import base64
import json
import os
import re
import string
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Server
from sqlalchemy import inspect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from queuelog.keys import revoke_key
from queuelog.storage.engine import create_sync_engine

WS_PROTOCOL = "graphql-transport-ws"
WS_FORBIDDEN = 4403
WS_UNAUTHORIZED = 4401

# Every root operation (plus introspection); $id is a real PENDING job so that a bypass would
# visibly change it.
OPERATIONS: dict[str, str] = {
    "me": "{ me { name roles } }",
    "job": "query($id: ID!) { job(id: $id) { id payload } }",
    "jobs": "{ jobs { totalCount nodes { id } } }",
    "queueStats": "{ queueStats { counts { pending } } }",
    "introspection-schema": "{ __schema { queryType { name } mutationType { name } } }",
    "introspection-type": '{ __type(name: "Job") { fields { name } } }',
    "typename": "{ __typename }",
    "enqueueJob": 'mutation { enqueueJob(input: {type: "email"}) { job { id } } }',
    "enqueueJobs": 'mutation { enqueueJobs(inputs: [{type: "email"}]) { job { id } } }',
    "claimJob": "mutation { claimJob { id } }",
    "claimJobs": "mutation { claimJobs(limit: 5) { id } }",
    "heartbeatJob": "mutation($id: ID!) { heartbeatJob(id: $id) { id } }",
    "completeJob": "mutation($id: ID!) { completeJob(id: $id) { id } }",
    "completeJobs": "mutation($id: ID!) { completeJobs(items: [{id: $id}]) { rejected } }",
    "failJob": 'mutation($id: ID!) { failJob(id: $id, error: "x", retryable: false) { id } }',
    "cancelJob": "mutation($id: ID!) { cancelJob(id: $id) { id status } }",
    "retryJob": "mutation($id: ID!) { retryJob(id: $id) { id } }",
    "subscription-jobEvents": "subscription { jobEvents { kind } }",
    "subscription-jobUpdated": "subscription($id: ID!) { jobUpdated(id: $id) { id } }",
}

# How a caller without a valid key might present itself: extra request headers and query string.
Credentials = Callable[[Server, str], tuple[dict[str, str], str]]
CREDENTIALS: dict[str, Credentials] = {
    "no-header": lambda s, revoked: ({}, ""),
    "empty-header": lambda s, revoked: ({"Authorization": ""}, ""),
    "bearer-without-key": lambda s, revoked: ({"Authorization": "Bearer"}, ""),
    "garbage-key": lambda s, revoked: ({"Authorization": "Bearer garbage"}, ""),
    "lookalike-key": lambda s, revoked: ({"Authorization": "Bearer ql_" + "A" * 43}, ""),
    "real-key-plus-char": lambda s, revoked: ({"Authorization": f"Bearer {s.admin_key}x"}, ""),
    "real-key-truncated": lambda s, revoked: ({"Authorization": f"Bearer {s.admin_key[:-1]}"}, ""),
    "real-key-no-scheme": lambda s, revoked: ({"Authorization": s.admin_key}, ""),
    "real-key-basic-scheme": lambda s, revoked: (
        {"Authorization": "Basic " + base64.b64encode(f"admin:{s.admin_key}".encode()).decode()},
        "",
    ),
    "real-key-in-cookie": lambda s, revoked: ({"Cookie": f"authorization=Bearer {s.admin_key}"}, ""),
    "real-key-in-url": lambda s, revoked: ({}, f"?access_token={s.admin_key}&key={s.admin_key}"),
    "oversized-key": lambda s, revoked: ({"Authorization": "Bearer " + "k" * 8000}, ""),
    "revoked-key": lambda s, revoked: ({"Authorization": f"Bearer {revoked}"}, ""),
}


def job_rows(server: Server) -> list[tuple[Any, ...]]:
    return server.sql("SELECT id, status, worker_id, attempt, error FROM jobs ORDER BY id")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    return subprocess.run(
        [sys.executable, "-m", "queuelog", *args], capture_output=True, text=True, env=env, timeout=60
    )


def cli_create_key(server: Server, name: str, role: str) -> str:
    """`queuelog keys create`; the key is alone on the last line of stdout."""
    created = cli("keys", "create", "--name", name, "--role", role, "--database-url", server.database_url)
    assert created.returncode == 0, created.stderr
    return created.stdout.strip().splitlines()[-1]


def assert_unauthenticated(response: httpx.Response) -> None:
    assert response.status_code == 401, (response.status_code, response.text)
    body = response.json()
    assert body["data"] is None, body
    assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAUTHENTICATED"], body


def ws_attempt(
    server: Server, init_payload: Any, then_run: str | None = None
) -> tuple[list[Any], int | None]:
    """Open a websocket, send connection_init (and optionally an operation right after it).

    Returns the messages received and the close code (None if the server kept it open).
    """
    received: list[Any] = []
    try:
        with connect(server.ws_url, subprotocols=[WS_PROTOCOL], open_timeout=10) as ws:
            init: dict[str, Any] = {"type": "connection_init"}
            if init_payload is not None:
                init["payload"] = init_payload
            ws.send(json.dumps(init))
            if then_run is not None:
                ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": then_run}}))
            while True:
                received.append(json.loads(ws.recv(timeout=10)))
                if received[-1].get("type") in ("connection_ack", "next", "error", "complete"):
                    return received, None
    except ConnectionClosed as closed:
        return received, closed.rcvd.code if closed.rcvd is not None else None


@pytest.fixture(scope="module")
def anonymous() -> Iterator[httpx.Client]:
    """A client of its own (no admin key, no cookies carried between requests)."""
    with httpx.Client(timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def revoked_key(server: Server) -> str:
    key = server.make_key("v01-revoked", "admin")
    assert server.gql("{ me { name } }", key=key).ok()["me"]["name"] == "v01-revoked"
    engine = create_sync_engine(server.database_url)
    try:
        revoke_key(engine, "v01-revoked")
    finally:
        engine.dispose()
    return key


@pytest.fixture(scope="module")
def target_job(server: Server) -> str:
    """A PENDING job that a bypassed cancel/claim/fail would change."""
    data = server.gql('mutation { enqueueJob(input: {type: "email", payload: {v: 1}}) { job { id } } }').ok()
    return data["enqueueJob"]["job"]["id"]


@pytest.fixture
def unchanged_jobs(server: Server, target_job: str) -> Iterator[None]:
    before = job_rows(server)
    yield
    assert job_rows(server) == before, "a refused request changed the jobs table"


@pytest.mark.usefixtures("unchanged_jobs")
@pytest.mark.parametrize("credentials", CREDENTIALS.values(), ids=CREDENTIALS.keys())
@pytest.mark.parametrize("operation", OPERATIONS.values(), ids=OPERATIONS.keys())
def test_every_operation_without_a_valid_key_is_401(
    server: Server,
    anonymous: httpx.Client,
    revoked_key: str,
    target_job: str,
    operation: str,
    credentials: Credentials,
) -> None:
    headers, query_string = credentials(server, revoked_key)
    anonymous.cookies.clear()
    response = anonymous.post(
        server.graphql_url + query_string,
        json={"query": operation, "variables": {"id": target_job} if "$id" in operation else {}},
        headers=headers,
    )
    assert_unauthenticated(response)
    assert "errors" in response.json() and "__schema" not in response.text


def test_a_valid_key_is_accepted_positive_control(server: Server, target_job: str) -> None:
    data = server.gql("query($id: ID!) { job(id: $id) { id status } }", {"id": target_job}).ok()
    assert data["job"] == {"id": target_job, "status": "PENDING"}


def test_revocation_through_the_library_applies_to_the_next_request(server: Server, unique: Any) -> None:
    name, other = unique("v01-producer"), unique("v01-producer")
    key, other_key = server.make_key(name, "producer"), server.make_key(other, "producer")
    assert server.gql("{ me { name } }", key=key).ok()["me"]["name"] == name
    engine = create_sync_engine(server.database_url)
    try:
        revoke_key(engine, name)
    finally:
        engine.dispose()
    before = job_rows(server)
    response = server.client.post(
        server.graphql_url,
        json={"query": 'mutation { enqueueJob(input: {type: "email"}) { job { id } } }'},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert_unauthenticated(response)
    assert job_rows(server) == before
    assert server.gql("{ me { name } }", key=other_key).ok()["me"]["name"] == other


def test_revocation_through_the_cli_applies_to_the_next_request(server: Server, unique: Any) -> None:
    name = unique("v01-worker")
    key = server.make_key(name, "worker")
    assert server.gql("{ me { name } }", key=key).ok()["me"]["name"] == name
    done = cli("keys", "revoke", name, "--database-url", server.database_url)
    assert done.returncode == 0, done.stderr
    response = server.client.post(
        server.graphql_url, json={"query": "{ me { name } }"}, headers={"Authorization": f"Bearer {key}"}
    )
    assert_unauthenticated(response)
    revoked_at = server.sql("SELECT revoked_at FROM api_keys WHERE name = :name", name=name)
    assert revoked_at and revoked_at[0][0] is not None


WS_INIT_PAYLOADS: dict[str, Callable[[Server, str], Any]] = {
    "no-payload": lambda s, revoked: None,
    "empty-payload": lambda s, revoked: {},
    "garbage-key": lambda s, revoked: {"authorization": "Bearer garbage"},
    "key-without-scheme": lambda s, revoked: {"authorization": s.admin_key},
    "key-under-other-name": lambda s, revoked: {"token": s.admin_key, "key": f"Bearer {s.admin_key}"},
    "non-string-authorization": lambda s, revoked: {"authorization": [f"Bearer {s.admin_key}"]},
    "revoked-key": lambda s, revoked: {"authorization": f"Bearer {revoked}"},
}


@pytest.mark.usefixtures("unchanged_jobs")
@pytest.mark.parametrize("payload", WS_INIT_PAYLOADS.values(), ids=WS_INIT_PAYLOADS.keys())
def test_websocket_without_a_valid_key_is_closed_4403(
    server: Server, revoked_key: str, payload: Callable[[Server, str], Any]
) -> None:
    # The operation is sent right behind connection_init: it must not run.
    received, code = ws_attempt(
        server, payload(server, revoked_key), 'mutation { enqueueJob(input: {type: "email"}) { job { id } } }'
    )
    assert code == WS_FORBIDDEN, (code, received)
    assert not any(m.get("type") in ("connection_ack", "next") for m in received), received


@pytest.mark.usefixtures("unchanged_jobs")
def test_websocket_subscribe_before_connection_init_is_closed_4401(server: Server) -> None:
    query = "subscription { jobEvents { kind } }"
    with (
        pytest.raises(ConnectionClosed) as closed,
        connect(server.ws_url, subprotocols=[WS_PROTOCOL], open_timeout=10) as ws,
    ):
        ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
        ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == WS_UNAUTHORIZED


def test_websocket_with_a_valid_key_is_acknowledged_positive_control(server: Server) -> None:
    received, code = ws_attempt(server, {"authorization": f"Bearer {server.admin_key}"})
    assert code is None and received[-1]["type"] == "connection_ack", received


def test_keys_are_stored_only_as_hashes(server: Server, unique: Any) -> None:
    made = [server.make_key(unique("v01-hash"), role) for role in ("admin", "producer", "worker", "viewer")]
    plaintexts = [server.admin_key, *made, cli_create_key(server, unique("v01-cli"), "worker")]
    for key in plaintexts:  # all of them work, so they are real keys
        assert server.gql("{ me { name } }", key=key).ok()["me"]["name"]
    tables = inspect(server.engine).get_table_names()
    assert "api_keys" in tables, tables
    cells = {t: [str(cell) for row in server.sql(f"SELECT * FROM {t}") for cell in row] for t in tables}
    # On SQLite, every file it may keep data in (main file, WAL, rollback journal) as well.
    raw = b""
    if server.backend == "sqlite":
        path = Path(server.database_url.removeprefix("sqlite:///"))
        raw = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
        assert raw, "no database file found"
    for key in plaintexts:
        secret = key.removeprefix("ql_")
        for table, values in cells.items():
            assert not any(secret[:16] in cell for cell in values), f"a plaintext key is stored in {table}"
        assert secret.encode() not in raw, "plaintext key present in the database files"
        assert secret[:16].encode() not in raw, "a prefix of the plaintext key is stored"
    hashes = [row[0] for row in server.sql("SELECT key_hash FROM api_keys")]
    assert len(set(hashes)) == len(hashes) and all(h and h not in plaintexts for h in hashes)


def entropy_bits(key: str) -> int:
    """Random bits in a key: its body is base64url (6 bits a character) or hex (4 bits)."""
    assert key.startswith("ql_"), key
    body = key.removeprefix("ql_")
    assert re.fullmatch(r"[A-Za-z0-9_-]+", body), key
    bits_per_char = 4 if all(c in string.hexdigits for c in body) else 6
    return len(body) * bits_per_char


def test_generated_keys_have_at_least_128_random_bits(server: Server, unique: Any) -> None:
    keys = [server.admin_key] + [server.make_key(unique("v01-bits"), "viewer") for _ in range(5)]
    keys += [cli_create_key(server, unique("v01-bits"), "viewer") for _ in range(2)]
    for key in keys:
        assert entropy_bits(key) >= 128, f"{key!r} carries fewer than 128 bits"
    assert len(set(keys)) == len(keys)
    # Random, not sequential: no two keys share even their first 8 random characters.
    assert len({k.removeprefix("ql_")[:8] for k in keys}) == len(keys)
