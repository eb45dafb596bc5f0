"""expiresAt (API.md section 12), against real servers over HTTP, on SQLite and PostgreSQL.

Proven here:
- an expiresAt not later than runAt, or than now, is BAD_USER_INPUT naming it, for
  enqueueJob and for any item of enqueueJobs (which then stores nothing);
- expiresAt is part of idempotency's equality, and a replay after the job expired answers
  that job (even though its expiresAt has passed by then);
- a job still PENDING at its expiry, whatever it waits for (its retry's run time, the end
  of a snooze, a dependency, a paused type, a type at its maxRunning), becomes CANCELLED
  with error `expired` and one EXPIRED event, its dependents cancelled as for any cancelled
  dependency; it is never claimed;
- a RUNNING job is not interrupted by its expiry;
- /metrics counts expired jobs per type, from 0 for every allowlisted type;
- on two servers sharing the database, an expiry racing many workers' claims: every job
  ends in exactly one terminal state with one event for it, a claimed job was claimed
  before its expiry, and queueStats matches the table.

"Expired" is waited for (generous deadlines); a job that must not expire is checked once
another job with the same expiry has been swept, so the sweep is known to have passed it.
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
    CONTROL,
    ENQUEUE_MANY,
    FAIL,
    PAUSE,
    RESUME,
    TYPES,
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

SOON = 1.5  # seconds: an expiry a test waits for


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


def expired_once(kit: Kit, job_id: str) -> dict[str, Any]:
    """Wait for the job's expiry; it is CANCELLED `expired`, with one EXPIRED event, its last."""
    wait_until(lambda: kit.expired(job_id), f"job {job_id} expired")
    job = kit.job(job_id)
    assert (job["status"], job["error"]) == ("CANCELLED", "expired"), job
    kinds = [event["kind"] for event in job["events"]]
    assert kinds.count("EXPIRED") == 1 and kinds[-1] == "EXPIRED", kinds
    assert job["events"][-1]["status"] == "CANCELLED"
    assert job["finishedAt"] is not None and parse(job["finishedAt"]) >= parse(job["expiresAt"])
    return job


# --- bad input ---------------------------------------------------------------------------------


def test_an_expiry_not_later_than_run_at_or_now_is_refused_naming_it(kit: Kit) -> None:
    job_type = kit.type()
    run_at = datetime.now(UTC) + timedelta(hours=1)
    cases = [
        {"expiresAt": from_now(-60)},  # past, runAt now
        {"expiresAt": iso(run_at), "runAt": iso(run_at)},  # equal to runAt
        {"expiresAt": iso(run_at - timedelta(seconds=1)), "runAt": iso(run_at)},  # before runAt
        {"expiresAt": from_now(-60), "runAt": from_now(-120)},  # later than a past runAt, but past
        {"expiresAt": from_now(-60), "idempotencyKey": "never-made"},  # past, no job to replay
    ]
    for fields in cases:
        refused(kit.try_enqueue(job_type, **fields), "BAD_USER_INPUT", "expiresAt")
    good = {"type": job_type, "expiresAt": from_now(3600)}
    for bad in cases:
        response = kit.server.gql(
            ENQUEUE_MANY, {"inputs": [good, {"type": job_type, **bad}]}, key=kit.producer
        )
        refused(response, "BAD_USER_INPUT", "expiresAt")
    assert kit.server.sql("SELECT count(*) FROM jobs WHERE type = :t", t=job_type) == [(0,)]
    # the bounds from the inside: just after runAt is fine
    job = kit.enqueue(job_type, runAt=iso(run_at), expiresAt=iso(run_at + timedelta(milliseconds=1)))
    assert parse(job["expiresAt"]) == run_at + timedelta(milliseconds=1)


def test_expiry_is_part_of_idempotency_and_a_replay_after_it_answers_the_expired_job(kit: Kit) -> None:
    job_type = kit.type()
    expires = from_now(SOON)
    first = kit.try_enqueue(job_type, idempotencyKey="k1", expiresAt=expires).ok()["enqueueJob"]
    again = kit.try_enqueue(job_type, idempotencyKey="k1", expiresAt=expires).ok()["enqueueJob"]
    assert (first["created"], again["created"]) == (True, False)
    assert again["job"]["id"] == first["job"]["id"]
    refused(kit.try_enqueue(job_type, idempotencyKey="k1", expiresAt=from_now(3600)), "CONFLICT")
    refused(kit.try_enqueue(job_type, idempotencyKey="k1"), "CONFLICT")
    without = kit.enqueue(job_type, idempotencyKey="k2")
    refused(kit.try_enqueue(job_type, idempotencyKey="k2", expiresAt=from_now(3600)), "CONFLICT")
    expired_once(kit, first["job"]["id"])
    # expiresAt has passed: a replay of that input answers the job it made, now CANCELLED
    late = kit.try_enqueue(job_type, idempotencyKey="k1", expiresAt=expires).ok()["enqueueJob"]
    assert (late["created"], late["job"]["id"], late["job"]["status"]) == (
        False,
        first["job"]["id"],
        "CANCELLED",
    )
    batch = kit.server.gql(
        ENQUEUE_MANY,
        {"inputs": [{"type": job_type, "idempotencyKey": "k1", "expiresAt": expires}, {"type": job_type}]},
        key=kit.producer,
    ).ok()["enqueueJobs"]
    assert [(item["created"], item["job"]["status"]) for item in batch] == [
        (False, "CANCELLED"),
        (True, "PENDING"),
    ]
    assert kit.job(without["id"])["status"] == "PENDING"


# --- what a job waits for ------------------------------------------------------------------------


def test_jobs_waiting_for_a_run_time_expire_retried_or_snoozed(kit: Kit) -> None:
    """A retry and a snooze each put the job's runAt past its expiry: it expires while it
    waits, and is never claimed."""
    job_type = kit.type()
    retried = kit.enqueue(job_type, expiresAt=from_now(SOON + 1))
    snoozed = kit.enqueue(job_type, expiresAt=from_now(SOON + 1))
    held = {job["id"]: job for job in kit.claim(job_type, limit=2)}
    assert set(held) == {retried["id"], snoozed["id"]}
    after = kit.gql(FAIL, {"id": retried["id"], "attempt": 1, "retryIn": 3600}, key=kit.worker)["failJob"]
    assert (after["status"], after["retryCount"]) == ("PENDING", 1)
    assert kit.try_snooze(held[snoozed["id"]], 3600).ok()["snoozeJob"]["status"] == "PENDING"
    for job_id, last_wait in ((retried["id"], "RETRYING"), (snoozed["id"], "SNOOZED")):
        job = expired_once(kit, job_id)
        kinds = [event["kind"] for event in job["events"]]
        assert kinds == ["ENQUEUED", "CLAIMED", last_wait, "EXPIRED"], kinds
    assert kit.claim(job_type, limit=10) == []


def test_a_job_waiting_for_a_dependency_expires_and_its_dependents_are_cancelled(kit: Kit) -> None:
    job_type = kit.type()
    blocker = kit.enqueue(job_type, runAt=from_now(86400))
    waiting = kit.enqueue(job_type, dependsOn=[blocker["id"]], expiresAt=from_now(SOON))
    dependent = kit.enqueue(job_type, dependsOn=[waiting["id"]])
    assert (waiting["waitingFor"], dependent["waitingFor"]) == (1, 1)
    expired_once(kit, waiting["id"])
    cancelled = wait_until(lambda: (j := kit.job(dependent["id"]))["status"] == "CANCELLED" and j, "cascaded")
    assert cancelled["error"] == f"dependency {waiting['id']} CANCELLED", cancelled
    assert [e["kind"] for e in cancelled["events"]] == ["ENQUEUED", "CANCELLED"]
    assert kit.job(blocker["id"])["status"] == "PENDING"
    counts_match_the_table(kit.server, [job_type])


def test_a_paused_types_job_expires_and_is_not_claimed_after_the_resume(kit: Kit) -> None:
    job_type = kit.type()
    kit.gql(PAUSE, {"type": job_type}, key=kit.admin)
    job = kit.enqueue(job_type, expiresAt=from_now(SOON))
    assert kit.claim(job_type) == []
    expired_once(kit, job["id"])
    kit.gql(RESUME, {"type": job_type}, key=kit.admin)
    assert kit.claim(job_type) == []


def test_a_job_held_back_by_max_running_expires_while_the_slot_is_taken(kit: Kit) -> None:
    job_type = kit.type()
    kit.gql(CONTROL, {"input": {"type": job_type, "maxRunning": 1}}, key=kit.admin)
    holder = kit.enqueue(job_type, priority="MEDIUM")
    held = kit.claim_one(job_type)
    assert held["id"] == holder["id"]
    job = kit.enqueue(job_type, expiresAt=from_now(SOON))
    assert kit.claim(job_type) == []  # the slot is taken
    expired_once(kit, job["id"])
    kit.complete(held)
    assert kit.claim(job_type) == []  # the slot is free: nothing left to take
    counts = counts_match_the_table(kit.server, [job_type])[job_type]
    assert (counts["completed"], counts["cancelled"]) == (1, 1)


def test_a_running_job_is_not_interrupted_by_its_expiry(kit: Kit) -> None:
    """`marker` expires at the same moment: once the sweep has cancelled it, the sweep has
    passed `running`'s expiry too."""
    job_type, marker_type = kit.type(), kit.type()
    expires = from_now(SOON)
    running = kit.enqueue(job_type, expiresAt=expires)
    marker = kit.enqueue(marker_type, expiresAt=expires)
    claimed = kit.claim_one(job_type)
    assert claimed["id"] == running["id"]
    expired_once(kit, marker["id"])
    assert kit.job(running["id"])["status"] == "RUNNING"
    assert kit.complete(claimed)["status"] == "COMPLETED"
    assert kit.kinds(running["id"]) == ["ENQUEUED", "CLAIMED", "COMPLETED"]


def test_metrics_count_expired_jobs_per_type_from_zero(kit: Kit) -> None:
    job_type = kit.type()
    untouched = TYPES[-1]
    text = kit.server.client.get(f"{kit.server.url}/metrics").text
    assert f'queuelog_jobs_expired_total{{type="{untouched}"}} 0.0' in text
    assert f'queuelog_jobs_expired_total{{type="{job_type}"}} 0.0' in text
    jobs = [kit.enqueue(job_type, expiresAt=from_now(SOON)) for _ in range(3)]
    for job in jobs:
        expired_once(kit, job["id"])
    text = kit.server.client.get(f"{kit.server.url}/metrics").text
    assert f'queuelog_jobs_expired_total{{type="{job_type}"}} 3.0' in text


# --- an expiry racing claims on two servers -------------------------------------------------


def test_an_expiry_racing_claims_on_two_servers_ends_each_job_once(pair: Pair) -> None:
    """300 jobs become due together, each expiring 1 to 600 ms later, while 8 workers on two
    servers claim them one by one and complete them: a job is either claimed (before its
    expiry) and completed, or expired without a claim; one terminal event each."""
    kits = [Kit.on(server) for server in pair.servers]
    job_type = kits[0].type()
    due = datetime.now(UTC) + timedelta(seconds=2)
    inputs = [
        {
            "type": job_type,
            "runAt": iso(due),
            "expiresAt": iso(due + timedelta(milliseconds=random.randint(1, 600))),
        }
        for _ in range(300)
    ]
    made = kits[0].gql(ENQUEUE_MANY, {"inputs": inputs}, key=kits[0].producer)["enqueueJobs"]
    ids = [item["job"]["id"] for item in made]
    expires = {item["job"]["id"]: parse(item["job"]["expiresAt"]) for item in made}
    worker = pair.key("WORKER")
    claimed: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(server: Server) -> None:
        with http_client(60) as http:
            try:
                while True:
                    body = http.post(
                        server.graphql_url,
                        json={"query": CLAIM, "variables": {"limit": 1, "types": [job_type], "wait": 1}},
                        headers={"Authorization": f"Bearer {worker}"},
                    ).json()
                    jobs = body["data"]["claimJobs"]
                    if not jobs:
                        if datetime.now(UTC) > due + timedelta(seconds=1):
                            return
                        continue
                    (job,) = jobs
                    with lock:
                        claimed.append(job)
                    done = http.post(
                        server.graphql_url,
                        json={"query": COMPLETE, "variables": {"id": job["id"], "attempt": job["attempt"]}},
                        headers={"Authorization": f"Bearer {worker}"},
                    ).json()
                    assert done["data"]["completeJob"]["status"] == "COMPLETED", done
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(pair.servers[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    kit = kits[0]
    wait_until(
        lambda: (
            kit.server.sql(
                "SELECT count(*) FROM jobs WHERE type = :t AND status IN ('pending', 'running')", t=job_type
            )
            == [(0,)]
        ),
        "every job finished",
    )
    taken = Counter(job["id"] for job in claimed)
    assert all(n == 1 for n in taken.values()), taken.most_common(3)
    for job in claimed:
        assert parse(job["claimedAt"]) < expires[job["id"]], job
    rows = {
        str(job_id): (status, error)
        for job_id, status, error in kit.server.sql(
            "SELECT id, status, error FROM jobs WHERE type = :t", t=job_type
        )
    }
    events = events_of(kit.server, ids)
    for job_id in ids:
        if job_id in taken:
            assert rows[job_id] == ("completed", None), (job_id, rows[job_id])
            assert events[job_id] == [
                ("ENQUEUED", "pending"),
                ("CLAIMED", "running"),
                ("COMPLETED", "completed"),
            ]
        else:
            assert rows[job_id] == ("cancelled", "expired"), (job_id, rows[job_id])
            assert events[job_id] == [("ENQUEUED", "pending"), ("EXPIRED", "cancelled")], events[job_id]
    counts = counts_match_the_table(kit.server, [job_type])[job_type]
    assert counts["completed"] + counts["cancelled"] == len(ids)
    print(f"\n{len(taken)} claimed and completed, {len(ids) - len(taken)} expired")
