"""Keys that look like nothing, and keys that look alike: `" "` was accepted as a concurrency
key, and "é" typed as one code point and as "e" + U+0301 were two keys.

Attacked, on real servers (SQLite and PostgreSQL): concurrency keys and idempotency keys of
spaces only in `enqueueJob`, `enqueueJobs` and the `cancelJobs`/`retryJobs` filters; the same
key in NFC and in decomposed form (NFD) at enqueue, in `enqueueJobs`, as an idempotency replay,
as the key a `maxRunningPerKey` limit counts, and as a bulk filter; schedule names of spaces and
with "é" in `putSchedule`, `pauseSchedule`, `resumeSchedule`, `deleteSchedule`; the same through
`queuelog.testing.LocalQueue`.

Proven: a key of spaces only is BAD_USER_INPUT and nothing is enqueued; a key is stored and
answered NFC-normalised, so the two spellings are one key: a replay finds the first job
(created false), a limit of one RUNNING per key holds across both spellings, a filter in one
spelling reaches jobs enqueued in the other. Schedule names are letters, digits, '-', '_' and
'.' only, so neither applies to them: both kinds of name are refused. LocalQueue (the real
server in process) behaves the same.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Server, serving

from queuelog.errors import BadInput
from queuelog.testing import LocalQueue

JOB_TYPES = "k_plain,k_limit,k_bulk"
ENQUEUE = (
    "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input)"
    " { created job { id idempotencyKey concurrencyKey } } }"
)
ENQUEUE_MANY = (
    "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id concurrencyKey } } }"
)
CANCEL_MATCHING = "mutation($f: JobFilter!) { cancelJobs(filter: $f) { count } }"
RETRY_MATCHING = "mutation($f: JobFilter!) { retryJobs(filter: $f) { count } }"
NFC = "caf\u00e9 r\u00e9sum\u00e9"
NFD = unicodedata.normalize("NFD", NFC)
BLANKS = [" ", "   "]


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=JOB_TYPES) as running:
        yield running


def job_count(server: Server) -> int:
    return server.sql("SELECT count(*) FROM jobs")[0][0]


def refused(response: Any, field: str) -> None:
    assert response.data is None and response.codes == ["BAD_USER_INPUT"], response.body
    assert field in response.errors[0]["message"], response.body


def test_the_two_spellings_differ_but_are_one_key() -> None:
    assert NFC != NFD and len(NFD) == len(NFC) + 3  # the premise of this file


@pytest.mark.parametrize("blank", BLANKS, ids=["one-space", "three-spaces"])
def test_a_key_of_spaces_only_is_refused(server: Server, blank: str) -> None:
    before = job_count(server)
    for field in ("concurrencyKey", "idempotencyKey"):
        refused(server.gql(ENQUEUE, {"input": {"type": "k_plain", field: blank}}), field)
        items = [{"type": "k_plain"}, {"type": "k_plain", field: blank}]
        refused(server.gql(ENQUEUE_MANY, {"inputs": items}), field)
    for query in (CANCEL_MATCHING, RETRY_MATCHING):
        refused(server.gql(query, {"f": {"type": "k_plain", "concurrencyKey": blank}}), "concurrencyKey")
    assert job_count(server) == before
    # Spaces inside a key are fine (positive control).
    spaced = server.gql(ENQUEUE, {"input": {"type": "k_plain", "concurrencyKey": " a b "}}).ok()
    assert spaced["enqueueJob"]["job"]["concurrencyKey"] == " a b "


def test_an_idempotency_key_is_one_key_however_it_is_spelled(server: Server) -> None:
    first = server.gql(ENQUEUE, {"input": {"type": "k_plain", "idempotencyKey": NFD}}).ok()["enqueueJob"]
    assert first["created"] is True and first["job"]["idempotencyKey"] == NFC
    again = server.gql(ENQUEUE, {"input": {"type": "k_plain", "idempotencyKey": NFC}}).ok()["enqueueJob"]
    assert again["created"] is False and again["job"]["id"] == first["job"]["id"]
    replay = server.gql(ENQUEUE, {"input": {"type": "k_plain", "idempotencyKey": NFD}}).ok()["enqueueJob"]
    assert replay["created"] is False and replay["job"]["id"] == first["job"]["id"]
    stored = server.sql("SELECT idempotency_key FROM jobs WHERE id = :id", id=int(first["job"]["id"]))
    assert stored == [(NFC,)]


def test_a_concurrency_key_is_stored_and_answered_in_nfc(server: Server) -> None:
    one = server.gql(ENQUEUE, {"input": {"type": "k_plain", "concurrencyKey": NFD}}).ok()["enqueueJob"]["job"]
    many = server.gql(
        ENQUEUE_MANY,
        {"inputs": [{"type": "k_plain", "concurrencyKey": NFD}, {"type": "k_plain", "concurrencyKey": NFC}]},
    ).ok()["enqueueJobs"]
    ids = [int(one["id"])] + [int(item["job"]["id"]) for item in many]
    assert [one["concurrencyKey"]] + [item["job"]["concurrencyKey"] for item in many] == [NFC] * 3
    assert server.sql("SELECT DISTINCT concurrency_key FROM jobs WHERE id IN :ids", ids=ids) == [(NFC,)]


def test_a_limit_per_key_counts_both_spellings_as_one_key(server: Server) -> None:
    limits = 'mutation { setTypeControl(input: {type: "k_limit", maxRunningPerKey: 1}) { type } }'
    server.gql(limits).ok()
    worker = server.make_key("lookalike-worker", "worker")
    for key in (NFC, NFD):
        server.gql(ENQUEUE, {"input": {"type": "k_limit", "concurrencyKey": key}}).ok()
    claim = 'mutation { claimJobs(limit: 2, types: ["k_limit"]) { id concurrencyKey } }'
    claimed = server.gql(claim, key=worker).ok()["claimJobs"]
    assert len(claimed) == 1 and claimed[0]["concurrencyKey"] == NFC, claimed
    assert server.gql(claim, key=worker).ok()["claimJobs"] == []  # the other waits for the slot


def test_a_filter_reaches_the_jobs_of_either_spelling(server: Server) -> None:
    for key in (NFC, NFD, NFC):
        server.gql(ENQUEUE, {"input": {"type": "k_bulk", "concurrencyKey": key}}).ok()
    server.gql(ENQUEUE, {"input": {"type": "k_bulk", "concurrencyKey": "other"}}).ok()
    cancelled = server.gql(CANCEL_MATCHING, {"f": {"type": "k_bulk", "concurrencyKey": NFD}}).ok()
    assert cancelled["cancelJobs"]["count"] == 3
    retried = server.gql(RETRY_MATCHING, {"f": {"status": "CANCELLED", "concurrencyKey": NFD}}).ok()
    assert retried["retryJobs"]["count"] == 3


SCHEDULE_CALLS = {
    "putSchedule": (
        "mutation($n: String!)"
        ' { putSchedule(input: {name: $n, type: "k_plain", cron: "* * * * *"}) { name } }'
    ),
    "pauseSchedule": "mutation($n: String!) { pauseSchedule(name: $n) { name } }",
    "resumeSchedule": "mutation($n: String!) { resumeSchedule(name: $n) { name } }",
    "deleteSchedule": "mutation($n: String!) { deleteSchedule(name: $n) }",
}


@pytest.mark.parametrize(
    "name", [" ", "   ", "caf\u00e9", "cafe\u0301"], ids=["space", "spaces", "nfc", "nfd"]
)
def test_schedule_names_hold_neither_spaces_nor_lookalikes(server: Server, name: str) -> None:
    for call, query in SCHEDULE_CALLS.items():
        response = server.gql(query, {"n": name})
        assert response.codes == ["BAD_USER_INPUT"], (call, response.body)
        assert "schedule name" in response.errors[0]["message"], (call, response.body)
    assert server.gql("{ schedules { name } }").ok()["schedules"] == []


def test_local_queue_normalises_and_refuses_as_the_server_does() -> None:
    with LocalQueue({"k_plain": lambda job: None}) as q:
        job = q.enqueue("k_plain", concurrency_key=NFD, idempotency_key=NFD)
        assert (job.concurrency_key, job.idempotency_key) == (NFC, NFC)
        assert q.enqueue("k_plain", concurrency_key=NFC, idempotency_key=NFC).id == job.id
        for field in ("concurrency_key", "idempotency_key"):
            with pytest.raises(BadInput, match="only spaces"):
                q.enqueue("k_plain", **{field: " "})
