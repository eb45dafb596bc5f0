"""Every DateTime input given without an offset is UTC, as the API speaks UTC.

The server runs with TZ set far from UTC (UTC+14), so a time read as the server's local
time would be fourteen hours off and the checks below would see it. Every test runs on
SQLite and on PostgreSQL against a real `queuelog serve`, over HTTP.

Proven here, for each DateTime argument of the schema (`createdBefore` of cancelJobs and
retryJobs, `runAt` of enqueueJob and enqueueJobs, `until` of pauseType): a value without an
offset means the same moment as the same value with `Z`, and is never an internal error.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Databases, Server, launch_server

TYPES = [f"t{i:02d}" for i in range(20)]
_types = iter(TYPES)
_names = itertools.count(1)
FAR_FROM_UTC = "Pacific/Kiritimati"  # UTC+14 all year

ENQUEUE = """mutation($type: String!, $runAt: DateTime) {
  enqueueJob(input: {type: $type, runAt: $runAt}) { job { id runAt createdAt } } }"""
ENQUEUE_MANY = """mutation($inputs: [EnqueueJobInput!]!) {
  enqueueJobs(inputs: $inputs) { job { id runAt } } }"""
CANCEL_JOBS = """mutation($filter: JobFilter!) { cancelJobs(filter: $filter) { count more } }"""
RETRY_JOBS = """mutation($filter: JobFilter!) { retryJobs(filter: $filter) { count more } }"""
PAUSE = """mutation($type: String!, $until: DateTime) {
  pauseType(type: $type, until: $until) { paused pausedUntil } }"""
STATUSES = "query($type: String!) { jobs(type: $type, first: 10) { nodes { id status } } }"


def without_offset(moment: datetime) -> str:
    """`moment` (aware) as UTC wall-clock text with no offset: 2026-01-02T03:04:05.123456."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat()


def utc(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)
    assert parsed.utcoffset() == timedelta(0), text
    return parsed


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    databases = Databases(backend, tmp_path_factory)
    try:
        running = launch_server(
            tmp_path_factory.mktemp("server"),
            database_url=databases.fresh(),
            env={"TZ": FAR_FROM_UTC},
            job_types=",".join(TYPES),
        )
        try:
            yield running
        finally:
            running.stop()
    finally:
        databases.drop_all()


def enqueue(server: Server, job_type: str, run_at: str | None = None) -> dict[str, Any]:
    return server.gql(ENQUEUE, {"type": job_type, "runAt": run_at}).ok()["enqueueJob"]["job"]


def statuses(server: Server, job_type: str) -> dict[str, str]:
    nodes = server.gql(STATUSES, {"type": job_type}).ok()["jobs"]["nodes"]
    return {node["id"]: node["status"] for node in nodes}


def test_created_before_without_an_offset_is_utc_in_cancel_jobs_and_retry_jobs(server: Server) -> None:
    job_type = next(_types)
    first = enqueue(server, job_type)
    second = enqueue(server, job_type)
    cut = without_offset(utc(second["createdAt"]))  # only `first` was created before it

    answer = server.gql(CANCEL_JOBS, {"filter": {"type": job_type, "createdBefore": cut}})
    assert answer.ok()["cancelJobs"] == {"count": 1, "more": False}
    assert statuses(server, job_type) == {first["id"]: "CANCELLED", second["id"]: "PENDING"}

    server.gql(CANCEL_JOBS, {"filter": {"type": job_type}}).ok()
    answer = server.gql(RETRY_JOBS, {"filter": {"type": job_type, "createdBefore": cut}})
    assert answer.ok()["retryJobs"] == {"count": 1, "more": False}
    assert statuses(server, job_type) == {first["id"]: "PENDING", second["id"]: "CANCELLED"}

    # Written in the document rather than as a variable, it means the same.
    literal = f'mutation {{ cancelJobs(filter: {{type: "{job_type}", createdBefore: "{cut}"}}) {{ count }} }}'
    assert server.gql(literal).ok()["cancelJobs"] == {"count": 1}
    assert statuses(server, job_type) == {first["id"]: "CANCELLED", second["id"]: "CANCELLED"}


def test_run_at_without_an_offset_is_utc_in_enqueue_job_and_enqueue_jobs(server: Server) -> None:
    job_type = next(_types)
    when = datetime(2099, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    one = enqueue(server, job_type, without_offset(when))
    assert utc(one["runAt"]) == when
    many = server.gql(ENQUEUE_MANY, {"inputs": [{"type": job_type, "runAt": without_offset(when)}]}).ok()
    assert [utc(job["runAt"]) for job in (j["job"] for j in many["enqueueJobs"])] == [when]


def test_a_pause_until_without_an_offset_is_utc(server: Server) -> None:
    job_type = next(_types)
    until = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0)
    paused = server.gql(PAUSE, {"type": job_type, "until": without_offset(until)}).ok()["pauseType"]
    assert paused["paused"] is True
    assert utc(paused["pausedUntil"]) == until
