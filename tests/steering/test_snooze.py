"""snoozeJob (API.md section 12), against real servers over HTTP, on SQLite and PostgreSQL.

Proven here:
- seconds outside 1..86400 is BAD_USER_INPUT naming `seconds`, and the job stays as it was;
- fencing as failJob: a wrong attempt or a job no longer RUNNING is CONFLICT, another
  worker's job NOT_FOUND; only the WORKER role may call it;
- a snooze puts the job back to PENDING at now + seconds, worker and lease cleared,
  retryCount unchanged, snoozeCount + 1, one SNOOZED event: it uses no retry (a job snoozed
  twice with one retry allowed still has that retry); it is claimed again once due;
- a job whose cancellation was requested ends CANCELLED (`cancelled while running`) instead;
- on two servers sharing the database, snoozes racing timeouts: each job either was snoozed
  (the snooze answered, SNOOZED, PENDING) or timed out (the snooze CONFLICT, FAILED), never
  both, one event each, and queueStats matches the table.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Databases, Server, serving
from steering_kit import (
    CLAIM,
    FAIL,
    TYPES,
    Kit,
    Pair,
    counts_match_the_table,
    events_of,
    pairs,
    parse,
    refused,
    wait_until,
)

SNOOZE_STATUS = """mutation($id: ID!, $attempt: Int!, $seconds: Int!) {
  snoozeJob(id: $id, attempt: $attempt, seconds: $seconds) { status } }"""
STATE = "id status attempt workerId retryCount snoozeCount runAt leaseExpiresAt"


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


def state(kit: Kit, job_id: str) -> dict[str, object]:
    job = kit.job(job_id)
    return {name: job[name] for name in STATE.split()} | {"events": len(job["events"])}


def test_seconds_out_of_bounds_are_refused_naming_them(kit: Kit) -> None:
    job_type = kit.type()
    kit.enqueue(job_type)
    held = kit.claim_one(job_type)
    before = state(kit, held["id"])
    for seconds in (0, -1, 86401, 10**9):
        refused(kit.try_snooze(held, seconds), "BAD_USER_INPUT", "seconds")
    assert state(kit, held["id"]) == before
    assert kit.try_snooze(held, 86400).ok()["snoozeJob"]["status"] == "PENDING"  # the bound from inside


def test_fencing_and_roles_are_those_of_fail_job(kit: Kit) -> None:
    job_type = kit.type()
    kit.enqueue(job_type)
    held = kit.claim_one(job_type)
    other_worker = kit.key("WORKER")
    before = state(kit, held["id"])
    refused(kit.try_snooze(held, 60, attempt=2), "CONFLICT", "attempt")
    refused(kit.try_snooze(held, 60, key=other_worker), "NOT_FOUND")
    for key in (kit.producer, kit.admin, kit.key("VIEWER")):
        refused(kit.try_snooze(held, 60, key=key), "FORBIDDEN")
    refused(kit.try_snooze({"id": "987654321", "attempt": 1}, 60), "NOT_FOUND")
    assert state(kit, held["id"]) == before
    kit.complete(held)
    refused(kit.try_snooze(held, 60), "CONFLICT", "COMPLETED")


def test_a_snooze_uses_no_retry_and_the_job_runs_again_once_due(kit: Kit) -> None:
    """maxRetries 1: two snoozes, then a failure that still retries, then one that fails."""
    job_type = kit.type()
    job = kit.enqueue(job_type, maxRetries=1)
    held = kit.claim_one(job_type)
    before = datetime.now(UTC)
    snoozed = kit.try_snooze(held, 1).ok()["snoozeJob"]
    assert (snoozed["status"], snoozed["workerId"], snoozed["leaseExpiresAt"]) == ("PENDING", None, None)
    assert (snoozed["retryCount"], snoozed["snoozeCount"], snoozed["attempt"]) == (0, 1, 1)
    assert before + timedelta(seconds=1) <= parse(snoozed["runAt"])
    assert kit.claim(job_type) == []  # not due yet (runAt is a second away)
    again = wait_until(lambda: kit.claim(job_type, wait=2), "claimed again")[0]
    assert (again["id"], again["attempt"], again["snoozeCount"]) == (job["id"], 2, 1)
    kit.try_snooze(again, 1).ok()
    third = wait_until(lambda: kit.claim(job_type, wait=2), "claimed a third time")[0]
    assert (third["attempt"], third["snoozeCount"], third["retryCount"]) == (3, 2, 0)
    failed = kit.gql(FAIL, {"id": job["id"], "attempt": 3, "retryIn": 0}, key=kit.worker)["failJob"]
    assert (failed["status"], failed["retryCount"]) == ("PENDING", 1)  # the one retry was left
    fourth = wait_until(lambda: kit.claim(job_type, wait=2), "claimed a fourth time")[0]
    final = kit.gql(FAIL, {"id": job["id"], "attempt": fourth["attempt"]}, key=kit.worker)["failJob"]
    assert final["status"] == "FAILED"
    assert kit.kinds(job["id"]) == [
        "ENQUEUED",
        "CLAIMED",
        "SNOOZED",
        "CLAIMED",
        "SNOOZED",
        "CLAIMED",
        "RETRYING",
        "CLAIMED",
        "FAILED",
    ]
    snoozed_event = kit.job(job["id"])["events"][2]
    assert snoozed_event["status"] == "PENDING"
    counts_match_the_table(kit.server, [job_type])


def test_a_snooze_after_a_cancel_request_ends_the_job_cancelled(kit: Kit) -> None:
    """The request is set in the table as cancelJob on a RUNNING job sets it."""
    job_type = kit.type()
    job = kit.enqueue(job_type)
    held = kit.claim_one(job_type)
    kit.server.sql(
        "UPDATE jobs SET cancel_requested_at = :at WHERE id = :id",
        at=kit.server.timestamp(datetime.now(UTC)),
        id=int(job["id"]),
    )
    ended = kit.try_snooze(held, 60).ok()["snoozeJob"]
    assert (ended["status"], ended["workerId"], ended["snoozeCount"]) == ("CANCELLED", held["workerId"], 0)
    seen = kit.job(job["id"])
    assert seen["error"] == "cancelled while running" and seen["finishedAt"] is not None
    assert [e["kind"] for e in seen["events"]] == ["ENQUEUED", "CLAIMED", "CANCELLED"]
    refused(kit.try_snooze(held, 60), "CONFLICT", "CANCELLED")
    assert kit.claim(job_type) == []
    counts = counts_match_the_table(kit.server, [job_type])[job_type]
    assert (counts["running"], counts["cancelled"]) == (0, 1)


def test_snoozes_racing_timeouts_on_two_servers_end_each_attempt_once(pair: Pair) -> None:
    """60 jobs with a 1 s timeout and no retry; 10 workers on two servers each hold one,
    then snooze it after 0.7 to 1.5 s, about when the timeout strikes (any server's lease
    check, or a claim's)."""
    kit = Kit.on(pair.first)
    job_type = kit.type()
    ids = [kit.enqueue(job_type, timeoutSeconds=1, maxRetries=0)["id"] for _ in range(60)]
    worker = pair.key("WORKER")
    answers: dict[str, tuple[str, str | None]] = {}  # job id -> (status answered, error code)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(server: Server) -> None:
        try:
            while True:
                jobs = server.gql(CLAIM, {"limit": 1, "types": [job_type]}, key=worker).ok()["claimJobs"]
                if not jobs:
                    return
                (job,) = jobs
                time.sleep(random.uniform(0.7, 1.5))
                variables = {"id": job["id"], "attempt": job["attempt"], "seconds": 3600}
                response = server.gql(SNOOZE_STATUS, variables, key=worker)
                with lock:
                    if response.errors:
                        answers[job["id"]] = ("refused", response.codes[0])
                    else:
                        answers[job["id"]] = (response.data["snoozeJob"]["status"], None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(pair.servers[i % 2],)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert not errors, errors
    assert sorted(answers) == sorted(ids)
    rows = {
        str(job_id): (status, error, snoozes, retries)
        for job_id, status, error, snoozes, retries in pair.first.sql(
            "SELECT id, status, error, snooze_count, retry_count FROM jobs WHERE type = :t", t=job_type
        )
    }
    events = events_of(pair.first, ids)
    snoozed = 0
    for job_id in ids:
        answer = answers[job_id]
        if answer == ("PENDING", None):
            snoozed += 1
            assert rows[job_id] == ("pending", None, 1, 0), (job_id, rows[job_id])
            assert events[job_id] == [("ENQUEUED", "pending"), ("CLAIMED", "running"), ("SNOOZED", "pending")]
        else:
            assert answer == ("refused", "CONFLICT"), (job_id, answer)
            assert rows[job_id] == ("failed", "timed out", 0, 0), (job_id, rows[job_id])
            assert events[job_id] == [("ENQUEUED", "pending"), ("CLAIMED", "running"), ("FAILED", "failed")]
    counts = counts_match_the_table(pair.first, [job_type])[job_type]
    assert (counts["pending"], counts["failed"]) == (snoozed, len(ids) - snoozed)
    print(f"\n{snoozed} snoozed, {len(ids) - snoozed} timed out")
