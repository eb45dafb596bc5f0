"""What /metrics says about a running server: latency per GraphQL operation, queue lag per type,
jobs per type and status, whether the database answers (docs/monitoring.md).

Each test starts a real `queuelog serve` and speaks HTTP to it. Latency is labelled by
operation the same way whichever path answers (the compiled plans or Strawberry, through the
short lane or through Starlette); a client cannot grow the number of series past a bound.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Databases, Server, postgres_admin
from prometheus_client.parser import text_string_to_metric_families

from queuelog.graphql_api import root_fields, schema
from queuelog.metrics import MAX_CHOSEN_OPERATIONS, OTHER

ENQUEUE = """mutation($type: String!, $runAt: DateTime) {
  enqueueJob(input: {type: $type, runAt: $runAt}) { job { id } } }"""
CLAIM = """mutation($types: [String!], $wait: Int) {
  claimJobs(limit: 10, types: $types, waitSeconds: $wait) { id attempt } }"""
COMPLETE = """mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt) { id } }"""
NAMED = """query Dashboard { queueStats { oldestPendingSeconds } }"""
TWO_FIELDS = """{ queueStats { counts { pending } } me { name } }"""
STATS = """{ queueStats { oldestPendingSeconds byType { type counts {
  pending running completed failed cancelled } } } }"""
PAUSE = """mutation($type: String!) { pauseType(type: $type) { paused } }"""
OPERATION_COUNT = "queuelog_graphql_request_duration_seconds_count"
OPERATION_SUM = "queuelog_graphql_request_duration_seconds_sum"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def scrape(server: Server) -> list[Sample]:
    response = httpx.get(f"{server.url}/metrics", timeout=30)
    assert response.status_code == 200, response.text[:500]
    return [
        Sample(s.name, s.labels, s.value)
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    ]


def by_label(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    return {s.labels[label]: s.value for s in samples if s.name == name}


def post(server: Server, query: str, key: str, *, origin: bool = False, **body: Any) -> dict[str, Any]:
    """POST /graphql; with `origin`, as a browser does, so it goes through Starlette's stack."""
    headers = {"Authorization": f"Bearer {key}"}
    if origin:
        headers["Origin"] = "http://elsewhere.example"
    response = server.client.post(server.graphql_url, json={"query": query, **body}, headers=headers)
    answer: dict[str, Any] = response.json()
    assert response.status_code == 200 and "errors" not in answer, answer
    return answer["data"]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "strawberry"])
def test_each_operation_has_its_own_latency_series(
    start_server: Callable[..., Server], compiled: bool
) -> None:
    server = start_server(compiled=compiled)
    producer = server.make_key("ops-producer", "PRODUCER")
    worker = server.make_key("ops-worker", "WORKER")

    # A long-poll claim that waits for an enqueue, as a worker's does.
    claimed: list[dict[str, Any]] = []
    waiting = threading.Thread(
        target=lambda: claimed.extend(
            post(server, CLAIM, worker, variables={"types": ["email"], "wait": 30})["claimJobs"]
        )
    )
    waiting.start()
    for n in range(3):
        post(server, ENQUEUE, producer, origin=n == 2, variables={"type": "email"})
    waiting.join(60)
    assert not waiting.is_alive() and claimed
    # And one that finds nothing: the server holds it for its whole second.
    assert post(server, CLAIM, worker, variables={"types": ["report"], "wait": 1})["claimJobs"] == []
    claimed += post(server, CLAIM, worker, origin=True, variables={"types": ["email"]})["claimJobs"]
    assert len(claimed) == 3
    for job in claimed:
        post(server, COMPLETE, worker, variables={"id": job["id"], "attempt": job["attempt"]})
    post(server, NAMED, server.admin_key, operationName="Dashboard")
    post(server, NAMED, server.admin_key)  # the name in the document counts as given
    post(server, TWO_FIELDS, server.admin_key, origin=True)
    refused = server.client.post(server.graphql_url, json={"query": "{ me { name } }"})
    assert refused.status_code == 401

    samples = scrape(server)
    counts = by_label(samples, OPERATION_COUNT, "operation")
    assert counts == {
        "enqueueJob": 3,
        "claimJobs": 3,
        "completeJob": 3,
        "Dashboard": 2,
        "me,queueStats": 1,
        OTHER: 1,
    }, counts
    # The waits are in claimJobs' series alone.
    sums = by_label(samples, OPERATION_SUM, "operation")
    assert sums["claimJobs"] >= 1.0, sums
    assert sums["claimJobs"] > sums["enqueueJob"] + sums["completeJob"], sums
    # Every POST /graphql is in one operation's series: they split the path's.
    posts = [
        s.value
        for s in samples
        if s.name == "queuelog_http_request_duration_seconds_count"
        and s.labels == {"path": "/graphql", "method": "POST"}
    ]
    assert posts == [sum(counts.values())], (posts, counts)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_clients_cannot_grow_the_operation_labels_past_the_bound(start_server: Callable[..., Server]) -> None:
    server = start_server()
    key = server.admin_key
    chosen = MAX_CHOSEN_OPERATIONS + 10
    for n in range(chosen):
        post(server, f"query Op{n} {{ me {{ name }} }}", key)
    long_name = "A" * 65
    post(server, f"query {long_name} {{ me {{ name }} }}", key)
    # Past the bound, the schema's own fields still have their labels.
    post(server, "{ me { name } }", key)
    post(server, "{ typeControls { type } }", key)

    counts = by_label(scrape(server), OPERATION_COUNT, "operation")
    assert counts.pop(OTHER) == chosen - MAX_CHOSEN_OPERATIONS + 1, counts
    assert counts.pop("me") == 1 and counts.pop("typeControls") == 1, counts
    assert sorted(counts) == sorted(f"Op{n}" for n in range(MAX_CHOSEN_OPERATIONS)), counts
    assert "me" in root_fields(schema) and "claimJobs" in root_fields(schema)


def test_unusual_methods_share_one_series(server: Server) -> None:
    for method in ("BREW", "PROPFIND", "WHEN"):
        server.client.request(method, f"{server.url}/healthz")
    methods = {
        s.labels["method"]
        for s in scrape(server)
        if s.name == "queuelog_http_request_duration_seconds_count" and s.labels["path"] == "/healthz"
    }
    assert OTHER in methods and not methods & {"BREW", "PROPFIND", "WHEN"}, methods


# --- queue lag and jobs per type ------------------------------------------------------------------


def test_each_types_lag_is_queue_stats_figure_for_that_type(start_server: Callable[..., Server]) -> None:
    """email: due an hour ago; report: ten minutes ago and later; resize: due long ago but
    paused; noop: only a job due tomorrow. queueStats counts the oldest claimable job of all;
    each type's gauge counts that type's, paused and not-yet-due types at 0."""
    server = start_server(job_types="email,report,resize,noop,unused")
    producer = server.make_key("lag-producer", "PRODUCER")
    now = datetime.now(UTC)

    def enqueue(job_type: str, due: timedelta) -> None:
        post(server, ENQUEUE, producer, variables={"type": job_type, "runAt": (now + due).isoformat()})

    enqueue("email", -timedelta(hours=1))
    enqueue("email", -timedelta(minutes=1))
    enqueue("report", -timedelta(minutes=10))
    enqueue("report", timedelta(0))
    enqueue("resize", -timedelta(days=2))
    enqueue("noop", timedelta(days=1))
    post(server, PAUSE, server.admin_key, variables={"type": "resize"})

    before = post(server, STATS, server.admin_key)["queueStats"]
    samples = scrape(server)
    after = post(server, STATS, server.admin_key)["queueStats"]

    lag = by_label(samples, "queuelog_type_oldest_pending_seconds", "type")
    # Lags only grow while nothing is claimed: the scrape's lies between the two reads.
    assert before["oldestPendingSeconds"] <= lag["email"] <= after["oldestPendingSeconds"], (
        before,
        lag,
        after,
    )
    assert 3600 <= lag["email"] < 3600 + 600, lag
    assert 600 <= lag["report"] < 1200, lag
    assert lag["resize"] == 0 and lag["noop"] == 0 and lag["unused"] == 0, lag
    (overall,) = [s.value for s in samples if s.name == "queuelog_oldest_pending_seconds"]
    assert overall == max(lag.values())

    jobs = {
        (s.labels["type"], s.labels["status"]): s.value for s in samples if s.name == "queuelog_type_jobs"
    }
    expected = {(e["type"], status): float(n) for e in after["byType"] for status, n in e["counts"].items()}
    assert {k: v for k, v in jobs.items() if k[0] != "unused"} == expected, jobs
    assert {v for (t, _), v in jobs.items() if t == "unused"} == {0.0}, jobs
    assert [s.value for s in samples if s.name == "queuelog_database_up"] == [1.0]


# --- per-type series from the start ------------------------------------------------------------------

MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"
TYPES = ("email", "report", "resize", "noop")  # conftest's default allowlist
STATUSES = ("pending", "running", "completed", "failed", "cancelled")
ENQUEUE_ONE = """mutation($type: String!, $maxRetries: Int!) {
  enqueueJob(input: {type: $type, maxRetries: $maxRetries}) { job { id } } }"""
CLAIM_ONE = """mutation($types: [String!]!, $lease: Int) {
  claimJob(types: $types, leaseSeconds: $lease) { id attempt } }"""
FAIL_NOW = """mutation($id: ID!, $attempt: Int!) {
  failJob(id: $id, attempt: $attempt, error: "boom", retryInSeconds: 0) { status } }"""
JOB_STATUS = """query($id: ID!) { job(id: $id) { status } }"""


def documented_per_type_series() -> set[str]:
    """The sample names docs/monitoring.md lists with a `type` label, but for the limits that
    have a sample "only where one is set"."""
    names = set()
    for row in MONITORING.read_text().splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if len(cells) == 5 and "`type`" in cells[2] and "only where" not in cells[3]:
            (name,) = re.findall(r"`(queuelog_\w+)`", cells[0])
            names.add(name)
    return names


def per_type(samples: list[Sample]) -> dict[tuple[str, str], float]:
    """(sample name, type) -> value; queuelog_type_jobs summed over its statuses."""
    found: dict[tuple[str, str], float] = {}
    for sample in samples:
        if "type" in sample.labels and not sample.name.endswith("_created"):
            key = (sample.name, sample.labels["type"])
            found[key] = found.get(key, 0.0) + sample.value
    return found


def test_every_per_type_series_is_0_from_the_start_and_counts_from_there(
    start_server: Callable[..., Server],
) -> None:
    server = start_server()
    names = documented_per_type_series()
    assert "queuelog_jobs_failed_total" in names and "queuelog_claims_held_back_total" in names, names
    fresh = scrape(server)
    assert per_type(fresh) == {(name, t): 0.0 for name in names for t in TYPES}
    statuses = {(s.labels["type"], s.labels["status"]) for s in fresh if s.name == "queuelog_type_jobs"}
    assert statuses == {(t, status) for t in TYPES for status in STATUSES}

    # report: one failed attempt sent back, then completed; one job whose lease expires on its
    # last attempt. resize: paused, so a claim is held back. email and noop: nothing.
    worker = server.make_key("per-type-worker", "WORKER")
    retried = post(server, ENQUEUE_ONE, server.admin_key, variables={"type": "report", "maxRetries": 1})
    claimed = post(server, CLAIM_ONE, worker, variables={"types": ["report"]})["claimJob"]
    assert claimed["id"] == retried["enqueueJob"]["job"]["id"]
    post(server, FAIL_NOW, worker, variables={"id": claimed["id"], "attempt": claimed["attempt"]})
    again = post(server, CLAIM_ONE, worker, variables={"types": ["report"]})["claimJob"]
    post(server, COMPLETE, worker, variables={"id": again["id"], "attempt": again["attempt"]})
    post(server, ENQUEUE_ONE, server.admin_key, variables={"type": "report", "maxRetries": 0})
    expiring = post(server, CLAIM_ONE, worker, variables={"types": ["report"], "lease": 1})["claimJob"]
    post(server, PAUSE, server.admin_key, variables={"type": "resize"})
    post(server, ENQUEUE_ONE, server.admin_key, variables={"type": "resize", "maxRetries": 0})
    assert post(server, CLAIM_ONE, worker, variables={"types": ["resize"]})["claimJob"] is None
    deadline = time.monotonic() + 60
    while (
        post(server, JOB_STATUS, server.admin_key, variables={"id": expiring["id"]})["job"]["status"]
        != "FAILED"
    ):
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.2)

    expected = {(name, t): 0.0 for name in names for t in TYPES}
    expected.update(
        {
            ("queuelog_jobs_enqueued_total", "report"): 2,
            ("queuelog_jobs_claimed_total", "report"): 3,
            ("queuelog_jobs_retried_total", "report"): 1,
            ("queuelog_jobs_completed_total", "report"): 1,
            ("queuelog_jobs_lease_expired_total", "report"): 1,
            ("queuelog_jobs_failed_total", "report"): 1,
            ("queuelog_type_jobs", "report"): 2,  # one COMPLETED, one FAILED
            ("queuelog_jobs_enqueued_total", "resize"): 1,
            ("queuelog_claims_held_back_total", "resize"): 1,
            ("queuelog_type_jobs", "resize"): 1,
            ("queuelog_type_paused", "resize"): 1,
        }
    )
    assert per_type(scrape(server)) == expected


# --- the database going away ------------------------------------------------------------------------


class Refusal:
    """Makes a PostgreSQL database take no connections and drop the ones it has, as when
    PostgreSQL goes away, and lets them in again (always, at the end of the test)."""

    def __init__(self) -> None:
        self.refused: set[str] = set()

    def refuse(self, name: str) -> None:
        self.refused.add(name)
        postgres_admin(
            f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false',
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            " AND pid <> pg_backend_pid()",
        )

    def allow(self, name: str) -> None:
        postgres_admin(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
        self.refused.discard(name)


@pytest.fixture
def refusal() -> Iterator[Refusal]:
    made = Refusal()
    yield made
    for name in list(made.refused):
        made.allow(name)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_metrics_say_when_the_database_is_unavailable(
    start_server: Callable[..., Server], databases: Databases, refusal: Refusal
) -> None:
    url = databases.fresh()
    name = url.rsplit("/", 1)[1]
    server = start_server(database_url=url)
    post(server, ENQUEUE, server.admin_key, variables={"type": "email"})

    refusal.refuse(name)
    assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 503
    down = scrape(server)
    assert [s.value for s in down if s.name == "queuelog_database_up"] == [0.0]
    # This process's own counters are still there; what only the database knows is not.
    assert by_label(down, "queuelog_jobs_enqueued_total", "type") == {
        "email": 1.0,
        "report": 0.0,
        "resize": 0.0,
        "noop": 0.0,
    }
    read = {
        "queuelog_jobs",
        "queuelog_type_jobs",
        "queuelog_type_oldest_pending_seconds",
        "queuelog_type_paused",
    }
    assert not [s for s in down if s.name in read], [s for s in down if s.name in read]
    (lag,) = [s.value for s in down if s.name == "queuelog_oldest_pending_seconds"]
    assert math.isnan(lag)  # unknown, rather than a lag of 0 or a stale one
    assert "Traceback" not in server.log()

    refusal.allow(name)
    again = scrape(server)
    assert [s.value for s in again if s.name == "queuelog_database_up"] == [1.0]
    assert by_label(again, "queuelog_jobs", "status")["pending"] == 1.0


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_reads_after_postgresql_dropped_every_idle_connection_answer_without_an_outage(
    start_server: Callable[..., Server], databases: Databases
) -> None:
    """A restart or a network cut ends the server's idle connections; the database is back
    by the next request. A kept reader connection tells it is dead only when used: the read
    runs again on a new one instead of answering "the database is unavailable"."""
    url = databases.fresh()
    name = url.rsplit("/", 1)[1]
    server = start_server(database_url=url)
    post(server, ENQUEUE, server.admin_key, variables={"type": "email"})
    for _ in range(16):  # every reader thread opens its connection
        post(server, STATS, server.admin_key)
    postgres_admin(
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        " AND pid <> pg_backend_pid()"
    )
    for _ in range(16):  # post() asserts a 200 without errors
        by_type = post(server, STATS, server.admin_key)["queueStats"]["byType"]
        assert [e["counts"]["pending"] for e in by_type if e["type"] == "email"] == [1]
    assert "unavailable for a read" not in server.log()
