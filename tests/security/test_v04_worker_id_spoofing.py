"""V-04 (worker id spoofing): a job's workerId is the claiming key's name and nothing else.

Attacked: a worker claiming with identity headers (`X-Worker-Id`, `X-Forwarded-User`, ...),
with a `workerId` argument on every worker mutation or input, with `workerId` in unused
variables, the request's `extensions` and the JSON body, and over a websocket whose
`connection_init` names another worker; a producer pre-assigning a worker at enqueue; a second
key created under an existing worker's name; a worker using another worker's name in a header
to report on that worker's job.

Proven: the claimed job's workerId (in the response, through ADMIN and in the database) is the
key's name; unknown arguments and input fields are GraphQL validation errors (BAD_USER_INPUT,
data null) that change nothing; a duplicate key name is refused; a spoofed header gives no
access to another worker's job (NOT_FOUND, as for a job that does not exist; job unchanged).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from conftest import Server
from websockets.sync.client import connect

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
CLAIM = "mutation { claimJob { id status workerId attempt } }"
JOB = "query($id: ID!) { job(id: $id) { id status workerId attempt leaseExpiresAt result } }"
VICTIM = "v04-victim-worker"

SPOOF_HEADERS: dict[str, dict[str, str]] = {
    "none": {},
    "x-worker-id": {"X-Worker-Id": VICTIM},
    "x-forwarded-user": {"X-Forwarded-User": VICTIM},
    "x-remote-user": {"X-Remote-User": VICTIM},
    "x-queuelog-worker": {"X-Queuelog-Worker": VICTIM, "X-Queuelog-Worker-Id": VICTIM},
    "worker-id": {"Worker-Id": VICTIM, "From": VICTIM},
}


def stored_worker_id(server: Server, job_id: str) -> str | None:
    return server.sql("SELECT worker_id FROM jobs WHERE id = :id", id=int(job_id))[0][0]


def post(server: Server, key: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    response = server.client.post(
        server.graphql_url, json=body, headers={"Authorization": f"Bearer {key}", **(headers or {})}
    )
    assert response.status_code == 200, response.text
    return response.json()


def enqueue(server: Server) -> str:
    return server.gql(ENQUEUE, {"input": {"type": "email"}}).ok()["enqueueJob"]["job"]["id"]


def admin_view(server: Server, job_id: str) -> dict[str, Any]:
    return server.gql(JOB, {"id": job_id}).ok()["job"]


@pytest.fixture(autouse=True)
def empty_queue(server: Server) -> None:
    """Cancel every PENDING job left by earlier tests, so a claim can only get this test's job."""
    while nodes := server.gql("{ jobs(status: PENDING, first: 100) { nodes { id } } }").ok()["jobs"]["nodes"]:
        for node in nodes:
            server.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": node["id"]}).ok()


@pytest.fixture(scope="module")
def victim_key(server: Server) -> str:
    return server.make_key(VICTIM, "worker")


@pytest.mark.parametrize("headers", SPOOF_HEADERS.values(), ids=SPOOF_HEADERS.keys())
def test_claimed_job_carries_the_key_name_whatever_the_headers(
    server: Server, victim_key: str, unique: Any, headers: dict[str, str]
) -> None:
    name = unique("v04-worker")
    key = server.make_key(name, "worker")
    job_id = enqueue(server)
    body = post(server, key, {"query": CLAIM}, headers)
    assert "errors" not in body, body
    claimed = body["data"]["claimJob"]
    assert claimed["id"] == job_id and claimed["workerId"] == name
    assert admin_view(server, job_id)["workerId"] == name
    assert stored_worker_id(server, job_id) == name


def test_workerid_in_variables_extensions_and_body_is_ignored(server: Server, unique: Any) -> None:
    name = unique("v04-worker")
    key = server.make_key(name, "worker")
    job_id = enqueue(server)
    body = post(
        server,
        key,
        {
            "query": CLAIM,
            "variables": {"workerId": VICTIM, "worker_id": VICTIM},
            "extensions": {"workerId": VICTIM},
            "workerId": VICTIM,
        },
    )
    assert "errors" not in body, body
    assert body["data"]["claimJob"]["workerId"] == name
    assert stored_worker_id(server, job_id) == name


# Worker operations with an extra workerId argument or input field ($id is a job the caller holds).
WITH_WORKER_ARGUMENT: dict[str, str] = {
    "claimJob": f'mutation {{ claimJob(workerId: "{VICTIM}") {{ id }} }}',
    "claimJobs": f'mutation {{ claimJobs(limit: 1, workerId: "{VICTIM}") {{ id }} }}',
    "heartbeatJob": f'mutation($id: ID!) {{ heartbeatJob(id: $id, workerId: "{VICTIM}") {{ id }} }}',
    "completeJob": f'mutation($id: ID!) {{ completeJob(id: $id, workerId: "{VICTIM}") {{ id }} }}',
    "completeJobs": (
        f'mutation($id: ID!) {{ completeJobs(items: [{{id: $id, workerId: "{VICTIM}"}}]) {{ rejected }} }}'
    ),
    "failJob": f'mutation($id: ID!) {{ failJob(id: $id, error: "x", workerId: "{VICTIM}") {{ id }} }}',
    "worker_id-snake-case": f'mutation {{ claimJob(worker_id: "{VICTIM}") {{ id }} }}',
}


@pytest.mark.parametrize("query", WITH_WORKER_ARGUMENT.values(), ids=WITH_WORKER_ARGUMENT.keys())
def test_a_workerid_argument_is_a_validation_error_that_changes_nothing(
    server: Server, unique: Any, query: str
) -> None:
    name = unique("v04-worker")
    key = server.make_key(name, "worker")
    held = enqueue(server)
    assert server.gql(CLAIM, key=key).ok()["claimJob"]["id"] == held
    pending = enqueue(server)
    before = (admin_view(server, held), admin_view(server, pending))
    response = server.gql(query, {"id": held} if "$id" in query else {}, key=key)
    assert response.data is None, response.body
    assert response.codes and set(response.codes) == {"BAD_USER_INPUT"}, response.body
    assert (admin_view(server, held), admin_view(server, pending)) == before
    assert before[1]["status"] == "PENDING" and before[0]["workerId"] == name


def test_a_producer_cannot_preassign_a_worker(server: Server, unique: Any) -> None:
    producer = server.make_key(unique("v04-producer"), "producer")
    response = server.gql(ENQUEUE, {"input": {"type": "email", "workerId": VICTIM}}, key=producer)
    assert response.data is None and response.codes == ["BAD_USER_INPUT"], response.body
    literal = f'mutation {{ enqueueJob(input: {{type: "email", workerId: "{VICTIM}"}}) {{ job {{ id }} }} }}'
    response = server.gql(literal, key=producer)
    assert response.data is None and response.codes == ["BAD_USER_INPUT"], response.body
    assert server.gql("{ jobs(status: PENDING) { totalCount } }").ok()["jobs"]["totalCount"] == 0


def test_websocket_connection_params_cannot_set_the_worker(server: Server, unique: Any) -> None:
    name = unique("v04-worker")
    key = server.make_key(name, "worker")
    job_id = enqueue(server)
    with connect(server.ws_url, subprotocols=["graphql-transport-ws"], open_timeout=10) as ws:
        init = {"authorization": f"Bearer {key}", "workerId": VICTIM, "name": VICTIM, "X-Worker-Id": VICTIM}
        ws.send(json.dumps({"type": "connection_init", "payload": init}))
        assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
        ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": CLAIM}}))
        reply = json.loads(ws.recv(timeout=10))
    assert reply["type"] == "next", reply
    assert reply["payload"]["data"]["claimJob"]["workerId"] == name
    assert stored_worker_id(server, job_id) == name


def test_a_second_key_cannot_take_an_existing_worker_name(server: Server, victim_key: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    done = subprocess.run(
        [sys.executable, "-m", "queuelog", "keys", "create", "--name", VICTIM, "--role", "worker"]
        + ["--database-url", server.database_url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0, done.stdout
    assert "ql_" not in done.stdout, "a key was printed for a duplicate name"
    assert server.sql("SELECT count(*) FROM api_keys WHERE name = :name", name=VICTIM) == [(1,)]
    assert server.gql("{ me { name } }", key=victim_key).ok()["me"]["name"] == VICTIM


def test_a_spoofed_header_gives_no_access_to_another_workers_job(
    server: Server, victim_key: str, unique: Any
) -> None:
    job_id = enqueue(server)
    assert server.gql(CLAIM, key=victim_key).ok()["claimJob"]["workerId"] == VICTIM
    attacker = server.make_key(unique("v04-attacker"), "worker")
    before = admin_view(server, job_id)
    spoof = {"X-Worker-Id": VICTIM, "X-Forwarded-User": VICTIM}
    for query in (
        "mutation($id: ID!) { heartbeatJob(id: $id, leaseSeconds: 3600) { id } }",
        "mutation($id: ID!) { completeJob(id: $id, result: {stolen: true}) { id } }",
        'mutation($id: ID!) { failJob(id: $id, error: "x", retryable: false) { id } }',
    ):
        body = post(server, attacker, {"query": query, "variables": {"id": job_id}}, spoof)
        assert body["data"] is None and [e["extensions"]["code"] for e in body["errors"]] == ["NOT_FOUND"], (
            body
        )
        assert body["errors"][0]["message"] == f"job {job_id} not found", body
    assert admin_view(server, job_id) == before
    seen = post(server, attacker, {"query": JOB, "variables": {"id": job_id}}, spoof)
    assert seen["data"]["job"] is None, "the attacker saw the victim's job"
