"""updateJob and runJobNow (API.md section 12), against real servers over HTTP, on SQLite and
PostgreSQL.

Proven here:
- bad input for each field of UpdateJobInput is BAD_USER_INPUT naming it (a null runAt,
  priority or maxRetries; maxRetries out of 0..25; an expiresAt not later than now or than
  the job's runAt; a runAt past the job's expiry), a priority above the key's maxPriority is
  FORBIDDEN; and the job stays as it was;
- a field left out stays as it is, `expiresAt: null` clears the expiry; each call records
  one UPDATED event;
- runAt and the job's readiness stay in step: a due job moved later is not claimed, a
  delayed job run now is claimed at once; runJobNow leaves a job waiting for a dependency
  waiting and a paused type's job unclaimed;
- only a PENDING job can be changed: CONFLICT otherwise, nothing changed;
- ADMIN changes any job, a PRODUCER its own (another's is NOT_FOUND, as a missing one);
  WORKER and VIEWER are FORBIDDEN;
- a replayed enqueue is compared with what the job was enqueued as, so an edit never turns
  it into CONFLICT (and a replay of the edited values is one);
- on two servers sharing the database, updates racing many workers' claims: each claim
  sees the job wholly as enqueued or wholly as updated, an update that answered was seen
  by the claim, one UPDATED event per answered update, one COMPLETED per job, and
  queueStats matches the table.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Databases, Server, http_client, serving
from steering_kit import (
    CLAIM,
    COMPLETE,
    ENQUEUE_MANY,
    FAIL,
    PAUSE,
    RESUME,
    TYPES,
    UPDATE,
    Kit,
    Pair,
    counts_match_the_table,
    events_of,
    from_now,
    iso,
    pairs,
    parse,
    refused,
    wait_until,
)

EDITABLE = ("status", "priority", "maxRetries", "runAt", "expiresAt", "waitingFor")


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=",".join(TYPES)) as running:
        yield running


@pytest.fixture
def kit(server: Server) -> Kit:
    return Kit.on(server)


@pytest.fixture
def pair(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from pairs(databases, tmp_path_factory)


def snapshot(kit: Kit, job_id: str) -> dict[str, Any]:
    job = kit.job(job_id)
    return {name: job[name] for name in EDITABLE} | {"kinds": [e["kind"] for e in job["events"]]}


def delayed_flag(kit: Kit, job_id: str) -> int:
    ((delayed,),) = kit.server.sql("SELECT delayed FROM jobs WHERE id = :id", id=int(job_id))
    return int(delayed)


# --- bad input -----------------------------------------------------------------------------------


def test_bad_input_for_each_field_is_refused_naming_it(kit: Kit) -> None:
    job_type = kit.type()
    run_at = datetime.now(UTC) + timedelta(hours=1)
    job = kit.enqueue(job_type, runAt=iso(run_at), expiresAt=iso(run_at + timedelta(hours=1)))
    before = snapshot(kit, job["id"])
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"runAt": None}, "BAD_USER_INPUT", "runAt"),
        ({"priority": None}, "BAD_USER_INPUT", "priority"),
        ({"maxRetries": None}, "BAD_USER_INPUT", "maxRetries"),
        ({"maxRetries": 26}, "BAD_USER_INPUT", "maxRetries"),
        ({"maxRetries": -1}, "BAD_USER_INPUT", "maxRetries"),
        ({"expiresAt": from_now(-60)}, "BAD_USER_INPUT", "expiresAt"),
        ({"expiresAt": iso(run_at - timedelta(minutes=1))}, "BAD_USER_INPUT", "expiresAt"),  # the job's runAt
        ({"expiresAt": iso(run_at)}, "BAD_USER_INPUT", "expiresAt"),
        ({"runAt": from_now(3 * 3600), "expiresAt": from_now(2 * 3600)}, "BAD_USER_INPUT", "expiresAt"),
        ({"runAt": iso(run_at + timedelta(hours=2))}, "BAD_USER_INPUT", "runAt"),  # past the job's expiry
        ({"priority": "HIGH"}, "FORBIDDEN", "priority"),  # the producer's maxPriority is MEDIUM
    ]
    for fields, code, word in cases:
        refused(kit.try_update(job["id"], **fields), code, word)
    refused(kit.try_update(job["id"], priority="URGENT"), "BAD_USER_INPUT", "priority")  # not a JobPriority
    assert snapshot(kit, job["id"]) == before
    # the bounds from the inside
    ok = kit.try_update(job["id"], maxRetries=25, expiresAt=iso(run_at + timedelta(milliseconds=1))).ok()
    assert ok["updateJob"]["maxRetries"] == 25
    assert kit.try_update(job["id"], maxRetries=0, priority="MEDIUM").ok()["updateJob"]["maxRetries"] == 0


# --- what an update changes ----------------------------------------------------------------------


def test_fields_left_out_stay_and_a_null_expiry_clears_it_one_event_each(kit: Kit) -> None:
    job_type = kit.type()
    job = kit.enqueue(job_type, runAt=from_now(3600), expiresAt=from_now(7200), maxRetries=3)
    steps: list[dict[str, Any]] = [
        {"priority": "MEDIUM"},
        {"maxRetries": 5},
        {"expiresAt": None},
        {"expiresAt": from_now(3 * 3600)},
        {"runAt": from_now(1800)},
        {},
    ]
    expected = {name: job[name] for name in ("priority", "maxRetries", "runAt", "expiresAt")}
    for fields in steps:
        answered = kit.try_update(job["id"], **fields).ok()["updateJob"]
        for name, value in fields.items():
            expected[name] = value
        for name, value in expected.items():
            if name in ("runAt", "expiresAt") and value is not None:
                assert parse(answered[name]) == parse(value), (name, answered[name], value)
            else:
                assert answered[name] == value, (name, answered, fields)
        assert answered["status"] == "PENDING"
    assert kit.kinds(job["id"]) == ["ENQUEUED"] + ["UPDATED"] * len(steps)
    assert all(e["status"] == "PENDING" for e in kit.job(job["id"])["events"])


def test_run_at_and_readiness_stay_in_step(kit: Kit) -> None:
    job_type = kit.type()
    due = kit.enqueue(job_type)
    later = kit.try_update(due["id"], runAt=from_now(3600)).ok()["updateJob"]
    assert delayed_flag(kit, due["id"]) == 1
    assert kit.claim(job_type, limit=10) == []  # moved later: no longer due
    now = kit.try_run_now(due["id"]).ok()["runJobNow"]
    assert parse(now["runAt"]) < parse(later["runAt"]) and parse(now["runAt"]) <= datetime.now(UTC)
    assert delayed_flag(kit, due["id"]) == 0
    assert [job["id"] for job in kit.claim(job_type, limit=10)] == [due["id"]]
    # a delayed job made due by an update of runAt, then a due one moved within the due
    delayed = kit.enqueue(job_type, runAt=from_now(3600))
    assert kit.claim(job_type) == []
    kit.try_update(delayed["id"], runAt=from_now(-60)).ok()
    assert delayed_flag(kit, delayed["id"]) == 0
    assert [job["id"] for job in kit.claim(job_type)] == [delayed["id"]]


def test_run_now_keeps_a_job_waiting_for_its_dependency_and_its_pause(kit: Kit) -> None:
    job_type, paused_type = kit.type(), kit.type()
    blocker = kit.enqueue(job_type, runAt=from_now(3600))
    waiting = kit.enqueue(job_type, dependsOn=[blocker["id"]], runAt=from_now(7200))
    ran = kit.try_run_now(waiting["id"]).ok()["runJobNow"]
    assert (ran["status"], ran["waitingFor"]) == ("PENDING", 1)
    assert delayed_flag(kit, waiting["id"]) == 2
    assert kit.claim(job_type, limit=10) == []
    kit.try_run_now(blocker["id"]).ok()
    (first,) = kit.claim(job_type, limit=10)
    assert first["id"] == blocker["id"]
    kit.complete(first)
    assert [job["id"] for job in kit.claim(job_type, limit=10)] == [waiting["id"]]

    kit.gql(PAUSE, {"type": paused_type}, key=kit.admin)
    held = kit.enqueue(paused_type, runAt=from_now(3600))
    kit.try_run_now(held["id"]).ok()
    assert kit.claim(paused_type) == []
    kit.gql(RESUME, {"type": paused_type}, key=kit.admin)
    assert [job["id"] for job in kit.claim(paused_type)] == [held["id"]]


def test_only_a_pending_job_can_be_changed(kit: Kit) -> None:
    job_type = kit.type()
    running, completed, failed, cancelled = (kit.enqueue(job_type) for _ in range(4))
    held = {job["id"]: job for job in kit.claim(job_type, limit=3)}
    kit.complete(held[completed["id"]])
    kit.gql(FAIL, {"id": failed["id"], "attempt": 1, "retryable": False}, key=kit.worker)
    kit.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": cancelled["id"]}, key=kit.producer)
    for job, status in (
        (running, "RUNNING"),
        (completed, "COMPLETED"),
        (failed, "FAILED"),
        (cancelled, "CANCELLED"),
    ):
        before = snapshot(kit, job["id"])
        assert before["status"] == status
        refused(kit.try_update(job["id"], maxRetries=1), "CONFLICT", status)
        refused(kit.try_run_now(job["id"]), "CONFLICT", status)
        refused(kit.try_update(job["id"], maxRetries=1, key=kit.admin), "CONFLICT", status)
        assert snapshot(kit, job["id"]) == before


def test_who_may_change_a_job(kit: Kit) -> None:
    job_type = kit.type()
    job = kit.enqueue(job_type, runAt=from_now(3600))
    other = kit.key("PRODUCER")
    worker = kit.key("WORKER")
    viewer = kit.key("VIEWER")
    before = snapshot(kit, job["id"])
    refused(kit.try_update(job["id"], maxRetries=1, key=other), "NOT_FOUND")
    refused(kit.try_run_now(job["id"], key=other), "NOT_FOUND")
    refused(kit.try_update("987654321", maxRetries=1, key=other), "NOT_FOUND", "job 987654321 not found")
    refused(kit.try_update(job["id"], maxRetries=1, key=other), "NOT_FOUND", f"job {job['id']} not found")
    for key in (worker, viewer):
        refused(kit.try_update(job["id"], maxRetries=1, key=key), "FORBIDDEN")
        refused(kit.try_run_now(job["id"], key=key), "FORBIDDEN")
    assert snapshot(kit, job["id"]) == before
    assert kit.try_update(job["id"], maxRetries=2).ok()["updateJob"]["maxRetries"] == 2  # its producer
    assert (
        kit.try_update(job["id"], priority="CRITICAL", key=kit.admin).ok()["updateJob"]["priority"]
        == "CRITICAL"
    )
    high = kit.key("PRODUCER", max_priority="HIGH")
    own = kit.enqueue(job_type, key=high, runAt=from_now(3600))
    assert kit.try_update(own["id"], priority="HIGH", key=high).ok()["updateJob"]["priority"] == "HIGH"
    refused(kit.try_update(own["id"], priority="CRITICAL", key=high), "FORBIDDEN", "priority")


def test_an_edit_never_turns_a_replay_into_a_conflict(kit: Kit) -> None:
    job_type = kit.type()
    original = {
        "idempotencyKey": "nightly",
        "maxRetries": 3,
        "runAt": from_now(3600),
        "expiresAt": from_now(7200),
    }
    job = kit.enqueue(job_type, **original)
    kit.try_update(job["id"], priority="MEDIUM", maxRetries=5, expiresAt=from_now(9000)).ok()
    kit.try_run_now(job["id"]).ok()
    replay = kit.try_enqueue(job_type, **original).ok()["enqueueJob"]
    assert (replay["created"], replay["job"]["id"], replay["job"]["maxRetries"]) == (False, job["id"], 5)
    edited = kit.job(job["id"])
    refused(
        kit.try_enqueue(
            job_type, **original | {"priority": "MEDIUM", "maxRetries": 5, "expiresAt": edited["expiresAt"]}
        ),
        "CONFLICT",
    )
    kit.try_update(job["id"], expiresAt=None, maxRetries=1).ok()  # a second edit keeps the first's record
    batch = kit.server.gql(
        ENQUEUE_MANY, {"inputs": [{"type": job_type, **original}, {"type": job_type}]}, key=kit.producer
    ).ok()["enqueueJobs"]
    assert [(item["created"], item["job"]["id"] == job["id"]) for item in batch] == [
        (False, True),
        (True, False),
    ]
    plain = kit.enqueue(job_type, runAt=from_now(3600))
    kit.try_update(plain["id"], maxRetries=1).ok()
    rows = kit.server.sql(
        "SELECT id, enqueued_as FROM jobs WHERE id IN :ids", ids=[int(job["id"]), int(plain["id"])]
    )
    kept = {str(job_id): value for job_id, value in rows}
    assert kept[plain["id"]] is None  # no key, nothing to replay: nothing kept
    assert kept[job["id"]] is not None


# --- an update racing claims on two servers ---------------------------------------------------


def test_updates_racing_claims_on_two_servers_are_all_or_nothing(pair: Pair) -> None:
    """200 jobs (LOW, maxRetries 3) become due together; 8 workers on two servers claim and
    complete them one by one while two producers' threads, one per server, update each to
    MEDIUM and maxRetries 7."""
    kits = [Kit.on(server) for server in pair.servers]
    job_type = kits[0].type()
    producer = pair.key("PRODUCER")
    worker = pair.key("WORKER")
    due = datetime.now(UTC) + timedelta(seconds=2)
    inputs = [{"type": job_type, "runAt": iso(due), "maxRetries": 3} for _ in range(200)]
    made = pair.first.gql(ENQUEUE_MANY, {"inputs": inputs}, key=producer).ok()["enqueueJobs"]
    ids = [item["job"]["id"] for item in made]
    claimed: dict[str, list[dict[str, Any]]] = {}
    updates: dict[str, str] = {}  # job id -> "updated" or the refusal's code
    errors: list[BaseException] = []
    lock = threading.Lock()

    def post(http: Any, server: Server, key: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        response = http.post(
            server.graphql_url,
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {key}"},
        )
        body: dict[str, Any] = response.json()
        return body

    def work(server: Server) -> None:
        try:
            with http_client(60) as http:
                while True:
                    body = post(http, server, worker, CLAIM, {"limit": 1, "types": [job_type], "wait": 1})
                    jobs = body["data"]["claimJobs"]
                    if not jobs:
                        if datetime.now(UTC) > due + timedelta(seconds=2):
                            return
                        continue
                    (job,) = jobs
                    with lock:
                        claimed.setdefault(job["id"], []).append(job)
                    done = post(http, server, worker, COMPLETE, {"id": job["id"], "attempt": job["attempt"]})
                    assert done["data"]["completeJob"]["status"] == "COMPLETED", done
        except BaseException as exc:
            errors.append(exc)

    def update(server: Server, order: list[str]) -> None:
        try:
            with http_client(60) as http:
                threading.Event().wait(max((due - datetime.now(UTC)).total_seconds(), 0))
                for job_id in order:
                    variables = {"id": job_id, "input": {"priority": "MEDIUM", "maxRetries": 7}}
                    body = post(http, server, producer, UPDATE, variables)
                    outcome = "updated" if body.get("data") else body["errors"][0]["extensions"]["code"]
                    with lock:
                        updates[job_id] = outcome
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(pair.servers[i % 2],)) for i in range(8)]
    shuffled = random.sample(ids, len(ids))  # each job updated once, half of them through each server
    threads += [
        threading.Thread(target=update, args=(server, shuffled[i::2]))
        for i, server in enumerate(pair.servers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert not errors, errors
    assert sorted(claimed) == sorted(ids) and all(len(seen) == 1 for seen in claimed.values())
    events = events_of(pair.first, ids)
    answered = Counter(updates.values())
    for job_id in ids:
        (seen,) = claimed[job_id]
        values = (seen["priority"], seen["maxRetries"])
        assert values in (("LOW", 3), ("MEDIUM", 7)), (job_id, values)  # never a mix
        kinds = [kind for kind, _ in events[job_id]]
        if updates[job_id] == "updated":
            assert values == ("MEDIUM", 7), (job_id, seen)
            assert kinds == ["ENQUEUED", "UPDATED", "CLAIMED", "COMPLETED"], kinds
        else:
            assert updates[job_id] == "CONFLICT", (job_id, updates[job_id])
            assert values == ("LOW", 3), (job_id, seen)
            assert kinds == ["ENQUEUED", "CLAIMED", "COMPLETED"], kinds
    wait_until(
        lambda: counts_match_the_table(pair.first, [job_type])[job_type]["completed"] == len(ids), "all done"
    )
    print(f"\n{answered['updated']} updated before their claim, {answered['CONFLICT']} refused")
