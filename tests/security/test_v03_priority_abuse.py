"""V-03 (priority abuse): a key cannot enqueue above its maxPriority.

Attacked: a PRODUCER (default maxPriority MEDIUM) enqueuing HIGH and CRITICAL; keys created
with `queuelog keys create --max-priority high|low`; a PRODUCER+WORKER key; smuggling the
priority in a batch, behind an idempotency key already used at a low priority, or as a raw
number / lower-case string instead of the enum; WORKER and VIEWER keys enqueuing at all.

Proven: FORBIDDEN (or BAD_USER_INPUT for values that are not a JobPriority) and nothing stored;
priorities up to the key's maximum are accepted (positive controls); ADMIN may use CRITICAL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from conftest import Server

PRIORITIES = ["LOW", "MEDIUM", "HIGH", "CRITICAL"]
ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { created job { id priority } } }"
ENQUEUE_MANY = (
    "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id priority } } }"
)


def stored_jobs(server: Server) -> int:
    return server.sql("SELECT count(*) FROM jobs")[0][0]


def cli_create_key(server: Server, name: str, *args: str) -> str:
    """`queuelog keys create`; the key is alone on the last line of stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    command = [sys.executable, "-m", "queuelog", "keys", "create", "--name", name, *args]
    done = subprocess.run(
        [*command, "--database-url", server.database_url], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def keys(server: Server) -> dict[str, str]:
    return {
        "producer": server.make_key("v03-producer", "producer"),
        "producer-cli-high": cli_create_key(
            server, "v03-high", "--role", "producer", "--max-priority", "high"
        ),
        "producer-cli-low": cli_create_key(server, "v03-low", "--role", "PRODUCER", "--max-priority", "LOW"),
        "producer+worker": server.make_key("v03-producer-worker", "producer", "worker"),
        "admin": server.admin_key,
        "worker": server.make_key("v03-worker", "worker"),
        "viewer": server.make_key("v03-viewer", "viewer"),
    }


# key -> the highest priority it may use (None: may not enqueue at all)
MAXIMUM = {
    "producer": "MEDIUM",
    "producer-cli-high": "HIGH",
    "producer-cli-low": "LOW",
    "producer+worker": "MEDIUM",
    "admin": "CRITICAL",
    "worker": None,
    "viewer": None,
}
CASES = [(key, priority) for key in MAXIMUM for priority in PRIORITIES]


def allowed(key: str, priority: str) -> bool:
    maximum = MAXIMUM[key]
    return maximum is not None and PRIORITIES.index(priority) <= PRIORITIES.index(maximum)


@pytest.mark.parametrize("key_name", [k for k in MAXIMUM if MAXIMUM[k] is not None])
def test_me_reports_the_maximum(server: Server, keys: dict[str, str], key_name: str) -> None:
    assert (
        server.gql("{ me { maxPriority } }", key=keys[key_name]).ok()["me"]["maxPriority"]
        == MAXIMUM[key_name]
    )


@pytest.mark.parametrize(("key_name", "priority"), CASES, ids=[f"{k}-{p}" for k, p in CASES])
def test_enqueue_priority_is_capped_by_the_key(
    server: Server, keys: dict[str, str], key_name: str, priority: str
) -> None:
    before = stored_jobs(server)
    response = server.gql(ENQUEUE, {"input": {"type": "email", "priority": priority}}, key=keys[key_name])
    if allowed(key_name, priority):
        assert response.ok()["enqueueJob"]["job"]["priority"] == priority
        assert stored_jobs(server) == before + 1
    else:
        assert response.data is None, response.body
        assert response.codes == ["FORBIDDEN"], response.body
        assert stored_jobs(server) == before


@pytest.mark.parametrize("literal", ["HIGH", "CRITICAL"])
def test_priority_in_a_query_literal_is_capped_too(
    server: Server, keys: dict[str, str], literal: str
) -> None:
    before = stored_jobs(server)
    query = f'mutation {{ enqueueJob(input: {{type: "email", priority: {literal}}}) {{ job {{ id }} }} }}'
    response = server.gql(query, key=keys["producer"])
    assert response.data is None and response.codes == ["FORBIDDEN"], response.body
    assert stored_jobs(server) == before


BATCHES: dict[str, list[str]] = {
    "critical-last": ["LOW", "LOW", "CRITICAL"],
    "high-first": ["HIGH", "LOW", "MEDIUM"],
    "all-high": ["HIGH", "HIGH"],
}


@pytest.mark.parametrize("priorities", BATCHES.values(), ids=BATCHES.keys())
def test_a_priority_smuggled_in_a_batch_refuses_the_whole_batch(
    server: Server, keys: dict[str, str], priorities: list[str]
) -> None:
    before = stored_jobs(server)
    inputs = [{"type": "email", "priority": p} for p in priorities]
    response = server.gql(ENQUEUE_MANY, {"inputs": inputs}, key=keys["producer"])
    assert response.data is None, response.body
    assert response.codes == ["FORBIDDEN"], response.body
    assert stored_jobs(server) == before, "part of a refused batch was stored"


def test_a_priority_smuggled_behind_a_used_idempotency_key_is_refused(
    server: Server, keys: dict[str, str], unique: Any
) -> None:
    idempotency_key = unique("v03-idem")
    low = {"type": "email", "priority": "LOW", "idempotencyKey": idempotency_key}
    first = server.gql(ENQUEUE, {"input": low}, key=keys["producer"]).ok()["enqueueJob"]
    before = stored_jobs(server)
    response = server.gql(ENQUEUE, {"input": {**low, "priority": "CRITICAL"}}, key=keys["producer"])
    assert response.data is None and response.codes == ["FORBIDDEN"], response.body
    assert stored_jobs(server) == before
    job = server.gql("query($id: ID!) { job(id: $id) { priority } }", {"id": first["job"]["id"]}).ok()["job"]
    assert job["priority"] == "LOW"


NOT_A_PRIORITY: dict[str, tuple[str, dict[str, Any]]] = {
    "number-variable": (ENQUEUE, {"input": {"type": "email", "priority": 30}}),
    "lower-case-variable": (ENQUEUE, {"input": {"type": "email", "priority": "critical"}}),
    "unknown-name-variable": (ENQUEUE, {"input": {"type": "email", "priority": "URGENT"}}),
    "number-literal": ('mutation { enqueueJob(input: {type: "email", priority: 30}) { job { id } } }', {}),
    "string-literal": (
        'mutation { enqueueJob(input: {type: "email", priority: "CRITICAL"}) { job { id } } }',
        {},
    ),
}


@pytest.mark.parametrize(("query", "variables"), NOT_A_PRIORITY.values(), ids=NOT_A_PRIORITY.keys())
def test_a_priority_that_is_not_the_enum_is_refused(
    server: Server, keys: dict[str, str], query: str, variables: dict[str, Any]
) -> None:
    before = stored_jobs(server)
    response = server.gql(query, variables, key=keys["producer"])
    assert response.data is None, response.body
    assert response.codes and set(response.codes) <= {"BAD_USER_INPUT"}, response.body
    assert stored_jobs(server) == before
