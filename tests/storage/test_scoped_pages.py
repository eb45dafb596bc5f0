"""Pages of a caller who sees only some jobs (a producer's own, a worker's own), filtered.

list_jobs answers them by walking either the caller's index or the filter's, whichever the
counters say holds fewer rows (storage/operations/read_plans.py). Both walks must give the same exact
pages and totals; these tests make each walk happen and check the pages against what the
test itself enqueued. Each asserts first, through the planner and the counts its server
holds, that the walk it names is the one list_jobs takes (tests/unit/test_read_plans.py tests
the planner's choices on their own).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, sqlite_plan

from queuelog.model import JobStatus
from queuelog.storage.operations.read_plans import Walk, plan_list
from queuelog.storage.schema import counters
from queuelog.storage.sqlite.statements import SqliteStatements

PAGE = """query($status: JobStatus, $type: String, $after: String) {
  jobs(status: $status, type: $type, first: 4, after: $after) {
    totalCount nodes { id status type } pageInfo { hasNextPage endCursor } } }"""


def enqueue_many(server: Server, key: str, types: list[str]) -> list[str]:
    document = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { job { id } } }"
    inputs = [{"type": t, "payload": {"n": n}} for n, t in enumerate(types)]
    return [p["job"]["id"] for p in server.gql(document, {"i": inputs}, key=key).ok()["enqueueJobs"]]


def every_page(server: Server, key: str, **variables: Any) -> tuple[list[str], int]:
    """All ids, page after page (4 at a time), and the totalCount each page agreed on."""
    ids: list[str] = []
    totals = set()
    after = None
    while True:
        jobs = server.gql(PAGE, {**variables, "after": after}, key=key).ok()["jobs"]
        ids += [n["id"] for n in jobs["nodes"]]
        totals.add(jobs["totalCount"])
        if not jobs["pageInfo"]["hasNextPage"]:
            break
        after = jobs["pageInfo"]["endCursor"]
    assert len(totals) == 1, totals
    return ids, totals.pop()


def walk_of(
    server: Server, name: str, role: str, status: str | None = None, job_type: str | None = None
) -> Walk:
    """The walk list_jobs takes for this caller and filter, given the counters as they are."""
    rows = server.sql(
        "SELECT scope, name, type, status, SUM(n) FROM job_counts GROUP BY scope, name, type, status"
    )
    scope = counters.PRODUCER if role == "producer" else counters.WORKER
    mine = counters.by_type(rows, [(scope, name, 1)])  # type: ignore[arg-type]
    everyones = counters.by_type(rows, [(counters.ALL, "", 1)])  # type: ignore[arg-type]
    wanted = JobStatus[status] if status is not None else None
    return plan_list(mine, everyones, role == "producer", role == "worker", wanted, job_type).walk


def newest_first(ids: list[str]) -> list[str]:
    return sorted(ids, key=int, reverse=True)


def test_a_small_and_a_big_producer_see_exactly_their_filtered_jobs(
    server: Server, unique: Callable[[str], str]
) -> None:
    small_name, big_name = unique("small"), unique("big")
    small = server.make_key(small_name, "producer")
    big = server.make_key(big_name, "producer")
    small_ids = enqueue_many(server, small, ["email", "report", "email"])
    big_types = ["email", "report", "resize"] * 12
    big_ids = enqueue_many(server, big, big_types)
    cancelled = small_ids[0]
    server.gql(f'mutation {{ cancelJob(id: "{cancelled}") {{ status }} }}', key=small).ok()

    # small: 3 jobs, fewer than any filter's -> its own index
    assert walk_of(server, small_name, "producer", "PENDING") is Walk.SCOPE
    assert walk_of(server, small_name, "producer", job_type="email") is Walk.SCOPE
    assert every_page(server, small, status="PENDING") == (newest_first(small_ids[1:]), 2)
    assert every_page(server, small, status="CANCELLED") == ([cancelled], 1)
    assert every_page(server, small, status="FAILED") == ([], 0)
    assert every_page(server, small, type="email") == (newest_first([small_ids[0], small_ids[2]]), 2)
    assert every_page(server, small, status="PENDING", type="email") == ([small_ids[2]], 1)
    # big: 36 jobs, more than PENDING "report" has -> the filter's index
    assert walk_of(server, big_name, "producer", "PENDING", "report") is Walk.FILTER
    reports = [i for i, t in zip(big_ids, big_types, strict=True) if t == "report"]
    assert every_page(server, big, status="PENDING", type="report") == (newest_first(reports), 12)
    assert every_page(server, big, type="resize")[1] == 12
    assert every_page(server, big, status="CANCELLED") == ([], 0)


def test_a_worker_sees_exactly_the_jobs_it_holds_or_finished(
    server: Server, unique: Callable[[str], str]
) -> None:
    producer = server.make_key(unique("producer"), "producer")
    worker = server.make_key(unique("worker"), "worker")
    job_type = unique("kind").replace("-", "_")
    enqueue_many(server, producer, ["email"] * 5)  # others' work, never this worker's
    claim = 'mutation { claimJobs(limit: 3, types: ["email"]) { id attempt } }'
    claimed = server.gql(claim, key=worker).ok()["claimJobs"]
    assert len(claimed) == 3
    done = claimed[0]
    complete = "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a) { status } }"
    server.gql(complete, {"id": done["id"], "a": done["attempt"]}, key=worker).ok()
    running = newest_first([c["id"] for c in claimed[1:]])
    assert every_page(server, worker, status="RUNNING") == (running, 2)
    assert every_page(server, worker, status="COMPLETED") == ([done["id"]], 1)
    assert every_page(server, worker, status="PENDING") == ([], 0)
    assert every_page(server, worker, type=job_type) == ([], 0)
    assert every_page(server, worker, type="email")[1] == 3


@pytest.mark.parametrize(
    ("sql", "index"),
    [
        (SqliteStatements.scope_page(False, ("pending",), False), "ix_jobs_creator_status"),
        (SqliteStatements.list_jobs(True, False, ("pending",), False, False), "ix_jobs_status"),
    ],
    ids=["own", "filter"],
)
def test_sqlite_walks_the_index_list_jobs_chose(tmp_path: Path, sql: str, index: str) -> None:
    params = {"name": "p", "status": "pending", "type": None, "after": 2**62, "limit": 26}
    shown = sqlite_plan(tmp_path, sql, params)
    assert f"USING INDEX {index}" in shown and "TEMP B-TREE" not in shown, shown


OLDEST = "{ queueStats { oldestPendingSeconds counts { pending } } }"


def test_a_producers_oldest_pending_job_through_either_index(start_server: Callable[..., Server]) -> None:
    """On a fresh queue: "small" has 2 of the queue's 7 pending jobs (answered through its
    own PENDING jobs), "big" 5 of the 6 pending emails (through the head of every due email,
    which is its own at once). Either way only due PENDING jobs count, and a producer with
    none is answered from the counters alone."""
    server = start_server()
    small = server.make_key("small", "producer")
    big = server.make_key("big", "producer")
    started = time.monotonic()
    [first, later] = enqueue_many(server, small, ["email", "report"])
    big_ids = enqueue_many(server, big, ["email"] * 30)
    for job_id in big_ids[:25]:
        server.gql(f'mutation {{ cancelJob(id: "{job_id}") {{ status }} }}', key=big).ok()
    time.sleep(0.3)
    for key in (small, big):  # read_plans.plan_oldest_pending: AMONG_OWN, OWN_AMONG_PENDING
        stats = server.gql(OLDEST, key=key).ok()["queueStats"]
        assert 0.3 <= stats["oldestPendingSeconds"] <= time.monotonic() - started + 0.05, stats

    for job_id in (first, later):
        server.gql(f'mutation {{ cancelJob(id: "{job_id}") {{ status }} }}', key=small).ok()
    assert server.gql(OLDEST, key=small).ok()["queueStats"] == {
        "oldestPendingSeconds": None,
        "counts": {"pending": 0},
    }
    delayed = {"input": {"type": "email", "runAt": "2999-01-01T00:00:00Z"}}
    document = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
    server.gql(document, delayed, key=small).ok()
    stats = server.gql(OLDEST, key=small).ok()["queueStats"]
    assert stats == {"oldestPendingSeconds": None, "counts": {"pending": 1}}, "not due: not waiting"


def test_a_type_filter_read_status_by_status_gives_the_same_exact_pages(
    start_server: Callable[..., Server],
) -> None:
    """On a fresh queue, so that the counters make list_jobs read a type filter in one part
    per status (each status's newest, merged): the pages must be those of one walk."""
    server = start_server()
    producer = server.make_key("mixed", "producer")
    worker = server.make_key("worker", "worker")
    types = ["email", "report"] * 12
    ids = enqueue_many(server, producer, types)
    reports = [i for i, t in zip(ids, types, strict=True) if t == "report"]
    for job_id in reports[1::3]:
        server.gql(f'mutation {{ cancelJob(id: "{job_id}") {{ status }} }}', key=producer).ok()
    # mixed: 24 jobs, 12 reports (8 PENDING, 4 CANCELLED): 2 rows per match on its own
    # index, 1 on each status of the type's
    assert walk_of(server, "mixed", "producer", job_type="report") is Walk.FILTER_BY_STATUS
    assert every_page(server, producer, type="report") == (newest_first(reports), 12)

    claim = "mutation($t: [String!]) { claimJobs(limit: 100, types: $t) { id attempt } }"
    emails = server.gql(claim, {"t": ["email"]}, key=worker).ok()["claimJobs"]
    server.gql(claim, {"t": ["report"]}, key=worker).ok()
    complete = "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a) { status } }"
    for job in emails[::2]:
        server.gql(complete, {"id": job["id"], "a": job["attempt"]}, key=worker).ok()
    # the worker: 12 emails (6 RUNNING, 6 COMPLETED) of its 20 jobs
    assert walk_of(server, "worker", "worker", job_type="email") is Walk.FILTER_BY_STATUS
    assert every_page(server, worker, type="email") == (newest_first([j["id"] for j in emails]), 12)
    assert every_page(server, worker, type="email", status="COMPLETED")[1] == 6
