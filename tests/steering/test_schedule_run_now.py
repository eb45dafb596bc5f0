"""`runScheduleNow` (API.md section 12) on one real `queuelog serve`, over real HTTP, on SQLite
and PostgreSQL.

Proven:
- it enqueues the schedule's job at once (type, payload, priority, maxRetries, scheduleName),
  PENDING and due now, with idempotency key `<name>@manual-<unique>`, a new job and key at
  each call; one ENQUEUED event each, and queueStats counts them as the table does;
- also while the schedule is paused, and for overlap SKIP while the schedule's last tick job
  is still PENDING;
- the schedule is unaffected: `nextRunAt`, `lastRunAt`, `lastJobId` and `paused` stay as they
  were (a paused one stays paused; resumed, its next tick is the cron's); with ticks every
  second and overlap SKIP, the manual job never becomes the schedule's last job, and once the
  tick job is done the ticks go on, each keyed `<name>@<tick>`;
- ADMIN only: PRODUCER, WORKER and VIEWER get FORBIDDEN and nothing is enqueued; an unknown
  schedule is NOT_FOUND, a malformed name BAD_USER_INPUT; a schedule whose type was added at
  runtime and then removed is refused (BAD_USER_INPUT) as any enqueue of that type.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import GraphQLResponse, Server, serving

TYPES = [f"rn{i:02d}" for i in range(12)]
_types = iter(TYPES)
_names = itertools.count(1)
MANUAL_KEY = re.compile(r"(?P<name>.+)@manual-(?P<unique>[0-9a-f]{32})")
TICK_KEY = re.compile(r"(?P<name>.+)@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

SCHEDULE_FIELDS = "name type paused nextRunAt lastRunAt lastJobId overlap"
PUT = f"mutation($input: ScheduleInput!) {{ putSchedule(input: $input) {{ {SCHEDULE_FIELDS} }} }}"
PAUSE = f"mutation($name: String!) {{ pauseSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}"
RESUME = f"mutation($name: String!) {{ resumeSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}"
DELETE = "mutation($name: String!) { deleteSchedule(name: $name) }"
SCHEDULES = f"{{ schedules {{ {SCHEDULE_FIELDS} }} }}"
JOB_FIELDS = "id type payload priority maxRetries status idempotencyKey scheduleName runAt createdAt"
RUN_NOW = f"mutation($name: String!) {{ runScheduleNow(name: $name) {{ {JOB_FIELDS} }} }}"
EVENTS = "query($id: ID!) { job(id: $id) { events { kind status } } }"
CLAIM = "mutation($type: String!) { claimJobs(limit: 100, types: [$type]) { id attempt idempotencyKey } }"
COMPLETE = "mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt) { status } }"
STATS = "{ queueStats { byType { type counts { pending running completed failed cancelled } } } }"
ADD_TYPE = "mutation($type: String!) { addJobType(type: $type) { type } }"
REMOVE_TYPE = "mutation($type: String!) { removeJobType(type: $type) }"

Schedule = dict[str, Any]


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=",".join(TYPES)) as running:
        yield running


@pytest.fixture
def cleanup(server: Server) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        server.gql(DELETE, {"name": name})


def fresh_name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def put(server: Server, cleanup: list[str], **fields: Any) -> Schedule:
    cleanup.append(fields["name"])
    return server.gql(PUT, {"input": fields}).ok()["putSchedule"]


def schedule_named(server: Server, name: str) -> Schedule:
    (found,) = [s for s in server.gql(SCHEDULES).ok()["schedules"] if s["name"] == name]
    return found


def run_now(server: Server, name: str, key: str | None = None) -> GraphQLResponse:
    return server.gql(RUN_NOW, {"name": name}, key=key)


def refused(response: GraphQLResponse, code: str, *words: str) -> None:
    assert response.data is None, response.body
    assert response.codes == [code], response.body
    for word in words:
        assert word in response.errors[0]["message"], (word, response.body)


def jobs_of(server: Server, name: str) -> list[tuple[str, str, str]]:
    """(id, idempotency key, status) of every job of the schedule, by id."""
    rows = server.sql(
        "SELECT id, idempotency_key, status FROM jobs WHERE schedule_name = :name ORDER BY id", name=name
    )
    return [(str(job_id), key, status) for job_id, key, status in rows]


def stats_match_table(server: Server) -> None:
    rows = server.sql("SELECT type, status, count(*) FROM jobs GROUP BY type, status")
    table: dict[str, dict[str, int]] = {}
    for job_type, status, n in rows:
        table.setdefault(job_type, {})[status] = n
    stats = server.gql(STATS).ok()["queueStats"]["byType"]
    counted = {s["type"]: {k: v for k, v in s["counts"].items() if v} for s in stats}
    assert {t: c for t, c in counted.items() if c} == table


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.1)


def test_a_paused_schedule_runs_now_and_its_ticks_are_untouched(server: Server, cleanup: list[str]) -> None:
    name, job_type = fresh_name("paused"), next(_types)
    put(
        server,
        cleanup,
        name=name,
        type=job_type,
        cron="0 3 1 1 *",
        payload={"report": "yearly", "n": [1, 2]},
        priority="HIGH",
        maxRetries=7,
        overlap="SKIP",
    )
    paused = server.gql(PAUSE, {"name": name}).ok()["pauseSchedule"]
    assert paused["paused"] is True and paused["nextRunAt"] is None

    before = datetime.now(UTC) - timedelta(seconds=1)
    first = run_now(server, name).ok()["runScheduleNow"]
    second = run_now(server, name).ok()["runScheduleNow"]
    for job in (first, second):
        key = MANUAL_KEY.fullmatch(job["idempotencyKey"])
        assert key is not None and key["name"] == name, job
        assert {k: v for k, v in job.items() if k not in ("id", "idempotencyKey", "runAt", "createdAt")} == {
            "type": job_type,
            "payload": {"report": "yearly", "n": [1, 2]},
            "priority": "HIGH",
            "maxRetries": 7,
            "status": "PENDING",
            "scheduleName": name,
        }
        assert before <= datetime.fromisoformat(job["runAt"]) <= datetime.now(UTC) + timedelta(seconds=1)
        events = server.gql(EVENTS, {"id": job["id"]}).ok()["job"]["events"]
        assert events == [{"kind": "ENQUEUED", "status": "PENDING"}]
    assert first["id"] != second["id"] and first["idempotencyKey"] != second["idempotencyKey"]
    assert [job_id for job_id, _, _ in jobs_of(server, name)] == [first["id"], second["id"]]

    assert schedule_named(server, name) == paused
    resumed = server.gql(RESUME, {"name": name}).ok()["resumeSchedule"]
    next_year = datetime.now(UTC).year + 1
    assert datetime.fromisoformat(resumed["nextRunAt"]) == datetime(next_year, 1, 1, 3, tzinfo=UTC)
    assert (resumed["lastRunAt"], resumed["lastJobId"]) == (None, None)
    assert f"schedule '{name}' run now by admin: job {first['id']}" in server.log()
    stats_match_table(server)


def test_a_running_schedule_keeps_its_next_tick(server: Server, cleanup: list[str]) -> None:
    name, job_type = fresh_name("running"), next(_types)
    made = put(server, cleanup, name=name, type=job_type, cron="@yearly")
    job = run_now(server, name).ok()["runScheduleNow"]
    assert job["status"] == "PENDING" and job["scheduleName"] == name
    assert schedule_named(server, name) == made


def test_overlap_skip_runs_now_beside_a_pending_tick_job_and_ticks_go_on(
    server: Server, cleanup: list[str]
) -> None:
    name, job_type = fresh_name("skip"), next(_types)
    put(server, cleanup, name=name, type=job_type, cron="* * * * * *", overlap="SKIP")
    (tick_id, tick_key, _) = wait_until(lambda: jobs_of(server, name), 10, "the first tick's job")[0]
    assert TICK_KEY.fullmatch(tick_key), tick_key

    manual = run_now(server, name).ok()["runScheduleNow"]
    assert MANUAL_KEY.fullmatch(manual["idempotencyKey"])
    assert schedule_named(server, name)["lastJobId"] == tick_id
    # SKIP holds on the tick's job alone: still exactly one tick job, PENDING.
    assert [(j, s) for j, k, s in jobs_of(server, name) if TICK_KEY.fullmatch(k)] == [(tick_id, "pending")]

    worker = server.make_key(fresh_name("rn-worker"), "worker")
    claimed = {job["id"]: job for job in server.gql(CLAIM, {"type": job_type}, key=worker).ok()["claimJobs"]}
    assert set(claimed) == {tick_id, manual["id"]}
    # The manual job done while the tick job runs: SKIP still waits for the tick job.
    server.gql(COMPLETE, {"id": manual["id"], "attempt": claimed[manual["id"]]["attempt"]}, key=worker).ok()
    server.gql(COMPLETE, {"id": tick_id, "attempt": claimed[tick_id]["attempt"]}, key=worker).ok()

    def next_tick_job() -> list[str]:
        return [j for j, k, s in jobs_of(server, name) if TICK_KEY.fullmatch(k) and j != tick_id]

    (next_id,) = wait_until(next_tick_job, 10, "a tick's job once the last one completed")
    assert int(next_id) > int(manual["id"])
    wait_until(
        lambda: schedule_named(server, name)["lastJobId"] == next_id, 10, "lastJobId the new tick's job"
    )
    server.gql(PAUSE, {"name": name}).ok()
    stats_match_table(server)


def test_only_an_admin_runs_a_schedule_and_names_are_checked(server: Server, cleanup: list[str]) -> None:
    name, job_type = fresh_name("roles"), next(_types)
    made = put(server, cleanup, name=name, type=job_type, cron="@yearly")
    for role in ("producer", "worker", "viewer"):
        key = server.make_key(fresh_name(f"rn-{role}"), role)
        refused(run_now(server, name, key), "FORBIDDEN")
    assert jobs_of(server, name) == []
    refused(run_now(server, fresh_name("missing")), "NOT_FOUND", "not found")
    for bad in ("", "a b", "a/b", "x" * 101):
        refused(run_now(server, bad), "BAD_USER_INPUT", "name")
    assert jobs_of(server, name) == []
    assert schedule_named(server, name) == made


def test_a_schedule_of_a_removed_type_is_refused_as_any_enqueue(server: Server, cleanup: list[str]) -> None:
    name, job_type = fresh_name("removed"), f"added.{next(_names)}"
    server.gql(ADD_TYPE, {"type": job_type}).ok()
    put(server, cleanup, name=name, type=job_type, cron="@yearly")
    assert run_now(server, name).ok()["runScheduleNow"]["type"] == job_type
    assert server.gql(REMOVE_TYPE, {"type": job_type}).ok() == {"removeJobType": True}
    refused(run_now(server, name), "BAD_USER_INPUT", "is not allowed")
    assert len(jobs_of(server, name)) == 1
