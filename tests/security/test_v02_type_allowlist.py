"""V-02 (job type allowlist): only types named in QUEUELOG_JOB_TYPES, or added at runtime by an
ADMIN (API.md section 12), can be enqueued.

Attacked: enqueueJob with types outside the allowlist (near misses: case, whitespace, zero-width
characters, a comma list, over-long names), as ADMIN and as PRODUCER; a server started with an
empty allowlist; enqueueJobs batches that hide one bad type among good ones. The runtime
allowlist: PRODUCER, WORKER and VIEWER keys calling addJobType and removeJobType; addJobType
with the near misses above as names; enqueues of a type once it is removed, and of near misses
of an added type.

Proven: BAD_USER_INPUT and nothing stored (checked in the database and through the `jobs`
query); with an empty allowlist every enqueue is refused with a message naming
QUEUELOG_JOB_TYPES; a batch with one bad type is refused whole (all or nothing). Only an
ADMIN changes the allowlist (FORBIDDEN, the job_types table unchanged, the type still refused or
still accepted); a name outside 1..100 of A-Z a-z 0-9 _ . : - is BAD_USER_INPUT and adds
nothing; a removed type is refused again, alone or in a batch, while its jobs stay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import Server

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { created job { id type } } }"
ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id type } } }"

# The conftest default allowlist is email,report,resize,noop.
NOT_ALLOWED: dict[str, str] = {
    "unknown": "bogus",
    "upper-case": "EMAIL",
    "title-case": "Email",
    "leading-space": " email",
    "trailing-space": "email ",
    "zero-width-space": "email\u200b",
    "nul-suffix": "email\x00",
    "prefix": "emai",
    "superstring": "emails",
    "comma-list": "email,report",
    "empty": "",
    "homoglyph": "\u0435mail",  # Cyrillic e
    "over-long": "email" * 100,
}


def stored_jobs(server: Server) -> int:
    return server.sql("SELECT count(*) FROM jobs")[0][0]


def listed_jobs(server: Server) -> int:
    return server.gql("{ jobs { totalCount } }").ok()["jobs"]["totalCount"]


@pytest.fixture(scope="module")
def callers(server: Server) -> dict[str, str]:
    return {"admin": server.admin_key, "producer": server.make_key("v02-producer", "producer")}


@pytest.mark.parametrize("role", ["admin", "producer"])
@pytest.mark.parametrize("job_type", NOT_ALLOWED.values(), ids=NOT_ALLOWED.keys())
def test_enqueue_of_a_type_outside_the_allowlist_is_refused(
    server: Server, callers: dict[str, str], role: str, job_type: str
) -> None:
    before = stored_jobs(server)
    response = server.gql(ENQUEUE, {"input": {"type": job_type, "payload": {}}}, key=callers[role])
    assert response.status == 200
    assert response.data is None, response.body
    assert response.codes == ["BAD_USER_INPUT"], response.body
    assert stored_jobs(server) == before
    assert listed_jobs(server) == before


def test_enqueue_of_an_allowed_type_works_positive_control(server: Server, callers: dict[str, str]) -> None:
    before = stored_jobs(server)
    for job_type in ("email", "report", "resize", "noop"):
        data = server.gql(ENQUEUE, {"input": {"type": job_type}}, key=callers["producer"]).ok()
        assert data["enqueueJob"]["job"]["type"] == job_type
    assert stored_jobs(server) == before + 4


@pytest.mark.parametrize("bad_at", [0, 2, 4], ids=["first", "middle", "last"])
def test_a_batch_with_one_bad_type_is_refused_whole(
    server: Server, callers: dict[str, str], bad_at: int
) -> None:
    inputs: list[dict[str, Any]] = [{"type": t} for t in ("email", "report", "resize", "noop")]
    inputs.insert(bad_at, {"type": "bogus"})
    before = stored_jobs(server)
    response = server.gql(ENQUEUE_MANY, {"inputs": inputs}, key=callers["producer"])
    assert response.data is None, response.body
    assert response.codes == ["BAD_USER_INPUT"], response.body
    assert stored_jobs(server) == before, "part of a refused batch was stored"
    assert listed_jobs(server) == before


def test_a_good_batch_is_stored_whole_positive_control(server: Server, callers: dict[str, str]) -> None:
    before = stored_jobs(server)
    inputs = [{"type": t} for t in ("email", "report", "resize")]
    data = server.gql(ENQUEUE_MANY, {"inputs": inputs}, key=callers["producer"]).ok()
    assert [item["job"]["type"] for item in data["enqueueJobs"]] == ["email", "report", "resize"]
    assert stored_jobs(server) == before + 3


def test_an_empty_allowlist_refuses_every_enqueue(start_server: Callable[..., Server]) -> None:
    empty = start_server(job_types="")
    producer = empty.make_key("v02-empty-producer", "producer")
    attempts: list[tuple[str, dict[str, Any], str]] = [
        (ENQUEUE, {"input": {"type": "email"}}, empty.admin_key),
        (ENQUEUE, {"input": {"type": "email"}}, producer),
        (ENQUEUE, {"input": {"type": "anything"}}, producer),
        (ENQUEUE, {"input": {"type": ""}}, empty.admin_key),
        (ENQUEUE_MANY, {"inputs": [{"type": "email"}, {"type": "report"}]}, empty.admin_key),
    ]
    for query, variables, key in attempts:
        response = empty.gql(query, variables, key=key)
        assert response.data is None, (variables, response.body)
        assert response.codes == ["BAD_USER_INPUT"], (variables, response.body)
        assert "QUEUELOG_JOB_TYPES" in response.errors[0]["message"], response.body
    assert stored_jobs(empty) == 0
    assert empty.gql("{ jobs { totalCount } }").ok()["jobs"]["totalCount"] == 0


# --- the allowlist at runtime (addJobType, removeJobType) -----------------------------------------

ADD = "mutation($type: String!) { addJobType(type: $type) { type } }"
REMOVE = "mutation($type: String!) { removeJobType(type: $type) }"
# Names addJobType must refuse: every near miss above that is not a plain name.
PLAIN_NAMES = ("unknown", "upper-case", "title-case", "prefix", "superstring")
BAD_NAMES = {what: name for what, name in NOT_ALLOWED.items() if what not in PLAIN_NAMES}


def added_types(server: Server) -> list[str]:
    return [name for (name,) in server.sql("SELECT name FROM job_types ORDER BY name")]


def enqueue_refused(server: Server, job_type: str, key: str) -> None:
    response = server.gql(ENQUEUE, {"input": {"type": job_type}}, key=key)
    assert response.data is None and response.codes == ["BAD_USER_INPUT"], (job_type, response.body)


@pytest.fixture(scope="module")
def others(server: Server) -> dict[str, str]:
    return {role: server.make_key(f"v02-runtime-{role}", role) for role in ("producer", "worker", "viewer")}


def test_only_an_admin_changes_the_allowlist(server: Server, others: dict[str, str]) -> None:
    before = added_types(server)
    for role, key in others.items():
        response = server.gql(ADD, {"type": f"v02.sneaky-{role}"}, key=key)
        assert response.data is None and response.codes == ["FORBIDDEN"], (role, response.body)
        enqueue_refused(server, f"v02.sneaky-{role}", others["producer"])
    assert added_types(server) == before

    server.gql(ADD, {"type": "v02.kept"}).ok()
    for role, key in others.items():
        response = server.gql(REMOVE, {"type": "v02.kept"}, key=key)
        assert response.data is None and response.codes == ["FORBIDDEN"], (role, response.body)
    data = server.gql(ENQUEUE, {"input": {"type": "v02.kept"}}, key=others["producer"]).ok()
    assert data["enqueueJob"]["job"]["type"] == "v02.kept"
    assert "v02.kept" in added_types(server)


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_add_job_type_refuses_names_outside_the_rule(server: Server, name: str) -> None:
    before = added_types(server)
    response = server.gql(ADD, {"type": name})
    assert response.data is None and response.codes == ["BAD_USER_INPUT"], response.body
    assert "type" in response.errors[0]["message"]
    assert added_types(server) == before
    enqueue_refused(server, name, server.admin_key)


def test_a_removed_type_is_refused_again_and_near_misses_of_an_added_one_always(
    server: Server, callers: dict[str, str]
) -> None:
    server.gql(ADD, {"type": "v02.removed"}).ok()
    for near in ("V02.REMOVED", "v02.removed ", "v02.remove", "v02.removed\u200b", "v02"):
        enqueue_refused(server, near, callers["producer"])
    kept = server.gql(ENQUEUE, {"input": {"type": "v02.removed"}}, key=callers["producer"]).ok()
    assert server.gql(REMOVE, {"type": "v02.removed"}).ok() == {"removeJobType": True}

    before = stored_jobs(server)
    for key in callers.values():
        enqueue_refused(server, "v02.removed", key)
    response = server.gql(ENQUEUE_MANY, {"inputs": [{"type": "email"}, {"type": "v02.removed"}]})
    assert response.data is None and response.codes == ["BAD_USER_INPUT"], response.body
    assert stored_jobs(server) == before
    job = server.gql(
        "query($id: ID!) { job(id: $id) { type status } }", {"id": kept["enqueueJob"]["job"]["id"]}
    )
    assert job.ok()["job"] == {"type": "v02.removed", "status": "PENDING"}
