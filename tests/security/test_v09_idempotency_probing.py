"""V-09 (idempotency probing): an idempotency key reveals nothing across producers.

Attacked: producer B replaying producer A's idempotency key (with A's exact input, or with
other payload, priority, type, retries) to learn whether A used it or to obtain A's job;
producer A re-sending a key with changed input; malformed keys (empty, 256 characters, control
and invisible characters); concurrent enqueues with one key.

Proven: B always gets a NEW job of its own (created: true, another id, B's payload) and never a
CONFLICT that would betray A's key, and cannot read A's job; A's retry with equal input returns
the same job with created: false; any change of type, payload, priority or maxRetries under the
same key is CONFLICT (nothing stored, A's job unchanged, its payload not echoed); malformed
keys are BAD_USER_INPUT and store nothing; keys of 1 and 255 printable characters work;
concurrent enqueues with one key create exactly one job per producer.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from conftest import Server

ENQUEUE = (
    "mutation($input: EnqueueJobInput!) "
    "{ enqueueJob(input: $input) { created job { id type payload priority maxRetries idempotencyKey } } }"
)
SECRET = "a-payload-only-producer-a-knows"


def stored_jobs(server: Server) -> int:
    return server.sql("SELECT count(*) FROM jobs")[0][0]


def enqueue(server: Server, key: str, **fields: Any) -> Any:
    return server.gql(ENQUEUE, {"input": {"type": "email", **fields}}, key=key)


@pytest.fixture
def producers(server: Server, unique: Any) -> tuple[str, str]:
    return server.make_key(unique("v09-producer-a"), "producer"), server.make_key(
        unique("v09-producer-b"), "producer"
    )


@pytest.fixture
def original(server: Server, producers: tuple[str, str], unique: Any) -> dict[str, Any]:
    """Producer A's job under a fresh idempotency key."""
    fields = {
        "idempotencyKey": unique("v09-key"),
        "payload": {"secret": SECRET},
        "priority": "MEDIUM",
        "maxRetries": 5,
    }
    outcome = enqueue(server, producers[0], **fields).ok()["enqueueJob"]
    assert outcome["created"] is True
    return {"fields": fields, "job": outcome["job"]}


REPLAYS: dict[str, dict[str, Any]] = {
    "same-input": {},
    "other-payload": {"payload": {"b": 1}},
    "other-priority": {"priority": "LOW"},
    "other-type": {"type": "report"},
    "other-max-retries": {"maxRetries": 0},
}


@pytest.mark.parametrize("changes", REPLAYS.values(), ids=REPLAYS.keys())
def test_another_producer_with_the_same_key_gets_a_new_job_and_learns_nothing(
    server: Server, producers: tuple[str, str], original: dict[str, Any], changes: dict[str, Any]
) -> None:
    _, producer_b = producers
    fields = {**original["fields"], **changes}
    before = stored_jobs(server)
    outcome = enqueue(server, producer_b, **fields).ok()["enqueueJob"]
    assert outcome["created"] is True, "B was handed an existing job"
    job = outcome["job"]
    assert job["id"] != original["job"]["id"]
    assert job["payload"] == fields["payload"]
    assert (job["type"], job["priority"]) == (fields.get("type", "email"), fields["priority"])
    assert stored_jobs(server) == before + 1
    if "payload" in changes:  # B never sent A's secret, so it must not get it back
        assert SECRET not in str(outcome)
    # B's own replay is idempotent for B (and still not A's job).
    again = enqueue(server, producer_b, **fields).ok()["enqueueJob"]
    assert (again["created"], again["job"]["id"]) == (False, job["id"])
    hidden = server.gql(
        "query($id: ID!) { job(id: $id) { id } }", {"id": original["job"]["id"]}, key=producer_b
    )
    assert hidden.ok()["job"] is None


def test_the_same_producer_with_the_same_input_gets_the_same_job(
    server: Server, producers: tuple[str, str], original: dict[str, Any]
) -> None:
    before = stored_jobs(server)
    for _ in range(3):
        outcome = enqueue(server, producers[0], **original["fields"]).ok()["enqueueJob"]
        assert outcome == {"created": False, "job": original["job"]}
    assert stored_jobs(server) == before


CHANGED_INPUTS: dict[str, dict[str, Any]] = {
    "payload": {"payload": {"secret": SECRET, "extra": 1}},
    "empty-payload": {"payload": {}},
    "priority": {"priority": "LOW"},
    "max-retries": {"maxRetries": 6},
    "type": {"type": "report"},
}


@pytest.mark.parametrize("changes", CHANGED_INPUTS.values(), ids=CHANGED_INPUTS.keys())
def test_the_same_producer_with_other_input_gets_conflict(
    server: Server, producers: tuple[str, str], original: dict[str, Any], changes: dict[str, Any]
) -> None:
    before = stored_jobs(server)
    response = enqueue(server, producers[0], **{**original["fields"], **changes})
    assert response.data is None and response.codes == ["CONFLICT"], response.body
    assert SECRET not in str(response.body), "the conflict echoed the original payload"
    assert stored_jobs(server) == before
    job = server.gql(
        "query($id: ID!) { job(id: $id) { id type payload priority maxRetries idempotencyKey } }",
        {"id": original["job"]["id"]},
    ).ok()["job"]
    assert job == original["job"]


INVALID_KEYS: dict[str, str] = {
    "empty": "",
    "256-chars": "k" * 256,
    "newline": "a\nb",
    "only-newline": "\n",
    "tab": "a\tb",
    "carriage-return": "a\rb",
    "nul": "a\x00b",
    "escape": "a\x1bb",
    "delete": "a\x7fb",
    "line-separator": "a\u2028b",
    "zero-width-space": "a\u200bb",
}


@pytest.mark.parametrize("idempotency_key", INVALID_KEYS.values(), ids=INVALID_KEYS.keys())
def test_invalid_idempotency_keys_are_refused(
    server: Server, producers: tuple[str, str], idempotency_key: str
) -> None:
    before = stored_jobs(server)
    response = enqueue(server, producers[0], idempotencyKey=idempotency_key)
    assert response.data is None and response.codes == ["BAD_USER_INPUT"], response.body
    assert stored_jobs(server) == before


VALID_KEYS: dict[str, str] = {
    "one-char": "k",
    "255-chars": "k" * 255,
    "spaces-and-punctuation": " order #42: résumé/ünïcode ",
    "non-latin": "заказ-42-注文",
}


@pytest.mark.parametrize("idempotency_key", VALID_KEYS.values(), ids=VALID_KEYS.keys())
def test_valid_idempotency_keys_work(server: Server, unique: Any, idempotency_key: str) -> None:
    producer = server.make_key(unique("v09-valid"), "producer")
    first = enqueue(server, producer, idempotencyKey=idempotency_key).ok()["enqueueJob"]
    assert first["created"] is True and first["job"]["idempotencyKey"] == idempotency_key
    again = enqueue(server, producer, idempotencyKey=idempotency_key).ok()["enqueueJob"]
    assert (again["created"], again["job"]["id"]) == (False, first["job"]["id"])


def test_concurrent_enqueues_with_one_key_create_one_job_per_producer(
    server: Server, producers: tuple[str, str], unique: Any
) -> None:
    idempotency_key = unique("v09-race")
    outcomes: list[tuple[str, Any]] = []
    lock = threading.Lock()
    start = threading.Barrier(12)

    def racer(producer: str) -> None:
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {producer}"}) as client:
            start.wait(timeout=30)
            body = {
                "query": ENQUEUE,
                "variables": {"input": {"type": "email", "idempotencyKey": idempotency_key}},
            }
            reply = client.post(server.graphql_url, json=body).json()
        with lock:
            outcomes.append((producer, reply))

    threads = [threading.Thread(target=racer, args=(producers[i % 2],)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == 12 and all("errors" not in reply for _, reply in outcomes), outcomes
    for producer in producers:
        mine = [reply["data"]["enqueueJob"] for p, reply in outcomes if p == producer]
        assert sum(o["created"] for o in mine) == 1, mine
        assert len({o["job"]["id"] for o in mine}) == 1, mine
    ids = {reply["data"]["enqueueJob"]["job"]["id"] for _, reply in outcomes}
    assert len(ids) == 2, "the two producers must hold separate jobs"
    stored = server.sql("SELECT count(*) FROM jobs WHERE idempotency_key = :key", key=idempotency_key)
    assert stored == [(2,)]


# JSON values of different types are different inputs; object key order is not a difference.
PAYLOAD_REPLAYS: list[tuple[Any, Any, bool]] = [
    ({"flag": True}, {"flag": 1}, False),
    ({"flag": 1}, {"flag": True}, False),
    ({"flag": 1}, {"flag": "1"}, False),
    ({"flag": 0}, {"flag": False}, False),
    ({"n": None}, {"n": 0}, False),
    ({"a": [1, 2]}, {"a": [2, 1]}, False),
    ({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"d": 3, "c": 2}, "a": 1}, True),
]


@pytest.mark.parametrize(("first", "replay", "same"), PAYLOAD_REPLAYS)
def test_replayed_payloads_compare_as_json_values(
    server: Server, producers: tuple[str, str], unique: Any, first: Any, replay: Any, same: bool
) -> None:
    key = unique("v09-json")
    created = enqueue(server, producers[0], idempotencyKey=key, payload=first).ok()["enqueueJob"]
    again = enqueue(server, producers[0], idempotencyKey=key, payload=replay)
    if same:
        outcome = again.ok()["enqueueJob"]
        assert outcome["created"] is False and outcome["job"]["id"] == created["job"]["id"]
    else:
        assert again.codes == ["CONFLICT"], again.body
