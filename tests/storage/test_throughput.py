"""QueueStats.throughput: jobs finished per minute, from job_minutes (the dashboard's sparkline).

Every transition to COMPLETED or FAILED adds to its minute's row in the commit that makes
it, once per scope that counts the job (as job_counts does), so the figures are exact and
read without counting jobs. Sums over a few minutes keep the tests away from minute
boundaries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import Server
from sqlalchemy import text

OLD_ROW = text(
    "INSERT INTO job_minutes (scope, name, minute, status, n) VALUES ('*', '', :m, 'completed', 7)"
)
THROUGHPUT = "query($m: Int!) { queueStats { throughput(minutes: $m) { at completed failed } } }"


def throughput(server: Server, key: str | None = None, minutes: int = 3) -> list[dict[str, Any]]:
    return server.gql(THROUGHPUT, {"m": minutes}, key=key).ok()["queueStats"]["throughput"]


def finished(server: Server, key: str | None = None) -> tuple[int, int]:
    """(completed, failed) over the last three minutes, as `key` sees them."""
    minutes = throughput(server, key)
    return sum(m["completed"] for m in minutes), sum(m["failed"] for m in minutes)


def enqueue(server: Server, key: str, count: int) -> list[str]:
    document = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { job { id } } }"
    inputs = [{"type": "email", "payload": {"n": n}, "maxRetries": 1} for n in range(count)]
    return [p["job"]["id"] for p in server.gql(document, {"i": inputs}, key=key).ok()["enqueueJobs"]]


def work(server: Server, worker: str, complete: int, fail_final: int, fail_retry: int) -> None:
    """Claim every due job, complete some, fail some for good and some for a retry."""
    claimed = server.gql("mutation { claimJobs(limit: 100) { id attempt } }", key=worker).ok()["claimJobs"]
    assert len(claimed) == complete + fail_final + fail_retry, claimed
    items = [{"id": j["id"], "attempt": j["attempt"]} for j in claimed[:complete]]
    done = "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) { rejected } }"
    assert server.gql(done, {"items": items}, key=worker).ok()["completeJobs"]["rejected"] == []
    fail = (
        "mutation($id: ID!, $a: Int, $r: Boolean!) "
        '{ failJob(id: $id, attempt: $a, error: "no", retryable: $r, retryInSeconds: 3600) { status } }'
    )
    for index, job in enumerate(claimed[complete:]):
        retryable = index >= fail_final
        status = server.gql(fail, {"id": job["id"], "a": job["attempt"], "r": retryable}, key=worker).ok()
        assert status["failJob"]["status"] == ("PENDING" if retryable else "FAILED")


def test_finished_jobs_are_counted_in_their_minute_for_each_scope(
    start_server: Callable[..., Server],
) -> None:
    server = start_server()
    alice = server.make_key("alice", "producer")
    bob = server.make_key("bob", "producer")
    worker = server.make_key("worker", "worker")
    viewer = server.make_key("viewer", "viewer")
    assert finished(server) == (0, 0)

    enqueue(server, alice, 5)
    enqueue(server, bob, 2)
    work(server, worker, complete=4, fail_final=2, fail_retry=1)  # claims oldest first: alice's 5, then bob's

    assert finished(server) == (4, 2), "ADMIN: every job"
    assert finished(server, viewer) == (4, 2)
    assert finished(server, worker) == (4, 2), "the worker: the jobs it finished"
    assert finished(server, alice) == (4, 1), "alice: her own jobs only"
    assert finished(server, bob) == (0, 1)


def test_minutes_are_consecutive_oldest_first_and_end_with_the_current_one(server: Server) -> None:
    before = datetime.now(UTC)
    minutes = throughput(server, minutes=30)
    after = datetime.now(UTC)
    starts = [datetime.fromisoformat(m["at"]) for m in minutes]
    assert len(starts) == 30
    assert all(b - a == timedelta(minutes=1) for a, b in zip(starts, starts[1:], strict=False))
    assert all(s.second == 0 and s.microsecond == 0 for s in starts)
    assert before - timedelta(minutes=1) < starts[-1] <= after


def test_minutes_out_of_range_are_bad_input(server: Server) -> None:
    for minutes in (0, -5, 1441):
        answer = server.gql(THROUGHPUT, {"m": minutes})
        assert answer.codes == ["BAD_USER_INPUT"], answer.body
    assert len(throughput(server, minutes=1440)) == 1440


def test_minutes_older_than_a_day_are_pruned(start_server: Callable[..., Server]) -> None:
    server = start_server()
    database_url = server.database_url
    now_minute = int(time.time()) // 60
    with server.engine.begin() as connection:
        for age in (30, 24 * 60 + 5):
            connection.execute(OLD_ROW, {"m": now_minute - age})
    server.stop()
    again = start_server(database_url=database_url, admin_key=server.admin_key)  # it prunes at start-up
    deadline = time.monotonic() + 30  # only bounds the wait: the prune is done in moments
    while time.monotonic() < deadline:
        with again.engine.connect() as connection:
            minutes = sorted(m for (m,) in connection.execute(text("SELECT minute FROM job_minutes")))
        if minutes == [now_minute - 30]:
            break
        time.sleep(0.1)
    assert minutes == [now_minute - 30]
    assert sum(m["completed"] for m in throughput(again, minutes=60)) == 7
