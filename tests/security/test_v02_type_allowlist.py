"""V-02 (job type allowlist): only types named in QUEUELOG_JOB_TYPES can be enqueued.

Attacked: enqueueJob with types outside the allowlist (near misses: case, whitespace, zero-width
characters, a comma list, over-long names), as ADMIN and as PRODUCER; a server started with an
empty allowlist; enqueueJobs batches that hide one bad type among good ones.

Proven: BAD_USER_INPUT and nothing stored (checked in the database and through the `jobs`
query); with an empty allowlist every enqueue is refused with a message naming
QUEUELOG_JOB_TYPES; a batch with one bad type is refused whole (all or nothing).
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
