"""Cron schedules (API.md section 10) on one real `queuelog serve`, over real HTTP.

Every test runs on SQLite and on PostgreSQL. The module's server allows many job types; each
test takes types and schedule names of its own and deletes its schedules when it is done,
so tests sharing the server never see each other's ticks. The misfire tests stop and start
servers of their own on fresh databases.

Proven here:
- `putSchedule` creates (defaults: UTC, {}, LOW, 3 retries, RUN_ONCE, ALLOW) and replaces by
  name, echoing every field, with `nextRunAt` the first tick after now in the schedule's time
  zone; `schedules` lists them in name order (ADMIN and VIEWER); `deleteSchedule` is true
  once, false the second time, and leaves the jobs it enqueued;
- a `* * * * * *` schedule enqueues exactly one job per second, from its first `nextRunAt`
  on, none missing, none doubled, each within one second after its tick, with the idempotency
  key `<name>@<tick in UTC>`, `scheduleName`, and the schedule's type, payload, priority and
  maxRetries; overlap ALLOW enqueues every tick while the earlier jobs are still PENDING;
  `lastRunAt` / `lastJobId` name the newest tick and its job;
- `pauseSchedule`: `nextRunAt` null and no job while paused; `resumeSchedule`: the next tick
  after now, the ticks missed while paused are not enqueued; unknown names are NOT_FOUND;
- roles: schedule writes are ADMIN only, `schedules` ADMIN and VIEWER (PRODUCER and WORKER:
  FORBIDDEN, nothing changed); a schedule's jobs are seen by ADMIN, VIEWER and the worker
  holding one, never by a PRODUCER (`jobs` leaves them out, `job(id)` answers as for any
  other producer's job);
- bad input is BAD_USER_INPUT naming the field, with nothing written: unparsable cron, a cron
  that never fires (`0 0 30 2 *`), an unknown time zone, bad names (empty, 101 characters,
  space, '/'), a type not allowlisted, a payload that is not an object, maxRetries 26; a
  leap-day schedule gets the next 29 February as `nextRunAt`;
- overlap SKIP: a schedule every second that nobody works on holds exactly one PENDING job;
  once that job is claimed and completed, the next tick enqueues one again;
- misfire, after the whole deployment stopped (SIGTERM) for about 5 s: SKIP enqueues no tick
  of the downtime, RUN_ONCE exactly one, for the newest missed tick, never a flood; also
  after a downtime longer than 1000 ticks (the schedule's state moved back 20 minutes while
  the server is down, which the test cannot wait for), and on a database where no ticker had
  ever fired (the server stopped before the schedules' first tick); and after weeks down
  with schedules firing every second of a month long past (a million missed ticks each):
  one job for RUN_ONCE, none for SKIP, while the other schedules' ticks stay in time;
- a deployment that is up but whose tick is held up for over a second (another transaction
  holds what the ticker needs) still enqueues that tick, even with misfire SKIP: only ticks
  that passed while no server ran are misfires.

Timings are asserted only where the contract states them (a tick's job within one second).
"""

from __future__ import annotations

import calendar
import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import Databases, GraphQLResponse, Server, launch_server, serving, stored_time
from sqlalchemy import text
from stale_month import first_second_of, last_second_of, stale_month

TYPES = [f"s{i:02d}" for i in range(40)]
JOB_TYPES = ",".join(["noop", *TYPES])
_types = iter(TYPES)
_names = itertools.count(1)

SECOND = timedelta(seconds=1)
LATENESS = timedelta(seconds=1)  # the contract: each tick's job within one second after it
TICK_KEY = re.compile(r"(?P<name>.+)@(?P<tick>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")

SCHEDULE_FIELDS = """name type cron timezone payload priority maxRetries misfire overlap paused
  nextRunAt lastRunAt lastJobId"""
PUT = f"mutation($input: ScheduleInput!) {{ putSchedule(input: $input) {{ {SCHEDULE_FIELDS} }} }}"
DELETE = "mutation($name: String!) { deleteSchedule(name: $name) }"
PAUSE = f"mutation($name: String!) {{ pauseSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}"
RESUME = f"mutation($name: String!) {{ resumeSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}"
SCHEDULES = f"{{ schedules {{ {SCHEDULE_FIELDS} }} }}"
JOB_FIELDS = "id type payload priority maxRetries status idempotencyKey scheduleName createdAt"
JOBS_OF_TYPE = f"""query($type: String!) {{
  jobs(type: $type, first: 100) {{ totalCount nodes {{ {JOB_FIELDS} }} }} }}"""
ALL_JOBS = "{ jobs(first: 100) { totalCount nodes { id scheduleName } } }"
JOB = f"query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} }} }}"
ENQUEUE = "mutation($type: String!) { enqueueJob(input: {type: $type}) { job { id scheduleName } } }"
CLAIM = """mutation($types: [String!]) {
  claimJobs(limit: 100, types: $types, waitSeconds: 0) { id attempt scheduleName idempotencyKey } }"""
COMPLETE = (
    "mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt) { status finishedAt } }"
)

Schedule = dict[str, Any]


# --- helpers ---------------------------------------------------------------------------------


def utc(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), value
    return parsed


def now() -> datetime:
    return datetime.now(UTC)


def whole_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def seconds_from(first: datetime, last: datetime) -> list[datetime]:
    """Every whole second from `first` to `last`, both included."""
    count = int((last - first).total_seconds())
    return [first + i * SECOND for i in range(count + 1)]


def fresh_name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def refused(response: GraphQLResponse, code: str, *words: str) -> None:
    """Refused with `code`, no data, the message naming each of `words`."""
    assert response.codes == [code], response.body
    assert response.data is None, response.body
    for word in words:
        assert word in response.errors[0]["message"], (word, response.body)


def put(server: Server, **fields: Any) -> Schedule:
    return server.gql(PUT, {"input": fields}).ok()["putSchedule"]


def schedules(server: Server, key: str | None = None) -> list[Schedule]:
    return server.gql(SCHEDULES, key=key).ok()["schedules"]


def schedule_named(server: Server, name: str) -> Schedule:
    (found,) = [s for s in schedules(server) if s["name"] == name]
    return found


@dataclass(frozen=True)
class TickJob:
    id: str
    tick: datetime
    created_at: datetime
    status: str


def tick_of(key: str, name: str) -> datetime:
    match = TICK_KEY.fullmatch(key)
    assert match is not None and match["name"] == name, key
    return datetime.strptime(match["tick"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def tick_jobs(server: Server, name: str) -> list[TickJob]:
    """Every job of schedule `name`, read from the database, oldest tick first."""
    rows = server.sql(
        "SELECT id, idempotency_key, created_at, status FROM jobs WHERE schedule_name = :name", name=name
    )
    jobs = []
    for job_id, key, created, status in rows:
        created_at = stored_time(created)
        assert created_at is not None
        jobs.append(TickJob(str(job_id), tick_of(key, name), created_at, status.upper()))
    return sorted(jobs, key=lambda j: (j.tick, int(j.id)))


def assert_once_per_tick(
    jobs: list[TickJob], first: datetime, read_from: datetime, read_to: datetime
) -> None:
    """One job per whole second from `first`: every tick at least a second older than the
    read (`read_from`) is there, none newer than the read's end, none twice, each enqueued
    within a second after its tick."""
    ticks = [j.tick for j in jobs]
    assert len(ticks) == len(set(ticks)), f"ticks enqueued twice: {ticks}"
    assert ticks, "no job at all"
    assert ticks[0] == first, (ticks[0], first)
    assert ticks == seconds_from(first, ticks[-1]), f"ticks missing: {ticks}"
    assert ticks[-1] >= read_from - LATENESS, (ticks[-1], read_from)
    assert ticks[-1] <= read_to, (ticks[-1], read_to)
    for job in jobs:
        assert job.tick <= job.created_at <= job.tick + LATENESS, job


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.1)


def sleep_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - now()).total_seconds()))


def next_local(after: datetime, zone: str, hour: int, minute: int, weekday: int | None) -> datetime:
    """The first local hour:minute in `zone` after `after` (on `weekday`, 0 = Monday), in UTC:
    computed here independently of the server's cron code."""
    local = after.astimezone(ZoneInfo(zone))
    for days in range(0, 9):
        day = local.date() + timedelta(days=days)
        candidate = datetime(day.year, day.month, day.day, hour, minute, tzinfo=ZoneInfo(zone))
        if candidate > after and (weekday is None or candidate.weekday() == weekday):
            return candidate.astimezone(UTC)
    raise AssertionError("no such time within 9 days")


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=JOB_TYPES) as running:
        yield running


@pytest.fixture
def cleanup(server: Server) -> Iterator[list[str]]:
    """Names of schedules to delete after the test (every second ones load the server)."""
    names: list[str] = []
    yield names
    for name in names:
        server.gql(DELETE, {"name": name})


# --- put, replace, list, delete ----------------------------------------------------------------


def test_put_replace_list_and_delete(server: Server, cleanup: list[str]) -> None:
    prefix = fresh_name("crud")
    a, b, c = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    cleanup += [a, b, c]
    job_type = next(_types)

    before = now()
    made_b = put(
        server,
        name=b,
        type=job_type,
        cron="30 9 * * *",
        timezone="Europe/Paris",
        payload={"report": "daily", "n": [1, 2]},
        priority="HIGH",
        maxRetries=7,
        misfire="SKIP",
        overlap="SKIP",
    )
    after = now()
    assert made_b == {
        "name": b,
        "type": job_type,
        "cron": "30 9 * * *",
        "timezone": "Europe/Paris",
        "payload": {"report": "daily", "n": [1, 2]},
        "priority": "HIGH",
        "maxRetries": 7,
        "misfire": "SKIP",
        "overlap": "SKIP",
        "paused": False,
        "nextRunAt": made_b["nextRunAt"],
        "lastRunAt": None,
        "lastJobId": None,
    }
    assert utc(made_b["nextRunAt"]) in {
        next_local(before, "Europe/Paris", 9, 30, None),
        next_local(after, "Europe/Paris", 9, 30, None),
    }

    made_a = put(server, name=a, type=job_type, cron="@yearly")
    assert {
        k: made_a[k] for k in ("timezone", "payload", "priority", "maxRetries", "misfire", "overlap")
    } == {
        "timezone": "UTC",
        "payload": {},
        "priority": "LOW",
        "maxRetries": 3,
        "misfire": "RUN_ONCE",
        "overlap": "ALLOW",
    }
    assert utc(made_a["nextRunAt"]) == datetime(now().year + 1, 1, 1, tzinfo=UTC)
    put(server, name=c, type=job_type, cron="0 0 1 * *")

    listed = schedules(server)
    names = [s["name"] for s in listed]
    assert names == sorted(names)
    assert [n for n in names if n.startswith(prefix)] == [a, b, c]
    assert [s for s in listed if s["name"] == b] == [made_b]

    # Replace b: every field is the new one, nextRunAt by the new expression and zone.
    before = now()
    replaced = put(
        server,
        name=b,
        type=job_type,
        cron="15 8 * * MON",
        timezone="America/New_York",
        payload={"v": 2},
        priority="CRITICAL",
        maxRetries=0,
        misfire="RUN_ONCE",
        overlap="ALLOW",
    )
    after = now()
    assert {k: v for k, v in replaced.items() if k != "nextRunAt"} == {
        "name": b,
        "type": job_type,
        "cron": "15 8 * * MON",
        "timezone": "America/New_York",
        "payload": {"v": 2},
        "priority": "CRITICAL",
        "maxRetries": 0,
        "misfire": "RUN_ONCE",
        "overlap": "ALLOW",
        "paused": False,
        "lastRunAt": None,
        "lastJobId": None,
    }
    assert utc(replaced["nextRunAt"]) in {
        next_local(before, "America/New_York", 8, 15, 0),
        next_local(after, "America/New_York", 8, 15, 0),
    }
    mine = [s for s in schedules(server) if s["name"].startswith(prefix)]
    assert [s["name"] for s in mine] == [a, b, c]
    assert mine[1] == replaced

    # A VIEWER reads the same list.
    viewer = server.make_key(fresh_name("viewer"), "VIEWER")
    assert [s for s in schedules(server, viewer) if s["name"].startswith(prefix)] == mine

    # Delete: true once, then false; the others stay.
    assert server.gql(DELETE, {"name": b}).ok() == {"deleteSchedule": True}
    assert server.gql(DELETE, {"name": b}).ok() == {"deleteSchedule": False}
    assert [s["name"] for s in schedules(server) if s["name"].startswith(prefix)] == [a, c]
    assert server.gql(DELETE, {"name": fresh_name("never-made")}).ok() == {"deleteSchedule": False}


# --- ticks -------------------------------------------------------------------------------------


def test_every_second_one_job_per_tick_with_its_fields_and_delete_keeps_them(
    server: Server, cleanup: list[str]
) -> None:
    """Overlap ALLOW with nobody working: every tick enqueues, earlier jobs still PENDING."""
    name, job_type = fresh_name("every"), next(_types)
    cleanup.append(name)
    payload = {"report": "tick", "nested": {"list": [1, "two", None]}}
    made = put(
        server,
        name=name,
        type=job_type,
        cron="* * * * * *",
        payload=payload,
        priority="HIGH",
        maxRetries=5,
        overlap="ALLOW",
    )
    first = utc(made["nextRunAt"])
    time.sleep(4.2)

    read_from = now()
    schedule = schedule_named(server, name)
    page = server.gql(JOBS_OF_TYPE, {"type": job_type}).ok()["jobs"]
    jobs = tick_jobs(server, name)
    read_to = now()

    assert len(jobs) >= 3
    assert_once_per_tick(jobs, first, read_from, read_to)
    by_id = {n["id"]: n for n in page["nodes"]}
    assert set(by_id) >= {j.id for j in jobs if j.created_at <= read_from}
    for job in jobs:
        node = by_id.get(job.id)
        if node is None:  # enqueued between the two reads
            continue
        assert node == {
            "id": job.id,
            "type": job_type,
            "payload": payload,
            "priority": "HIGH",
            "maxRetries": 5,
            "status": "PENDING",
            "idempotencyKey": f"{name}@{job.tick.strftime('%Y-%m-%dT%H:%M:%SZ')}",
            "scheduleName": name,
            "createdAt": node["createdAt"],
        }
        assert utc(node["createdAt"]) == job.created_at
    # lastRunAt / lastJobId: a tick that enqueued, and its job; nextRunAt after it.
    last_run = utc(schedule["lastRunAt"])
    assert [j.id for j in jobs if j.tick == last_run] == [schedule["lastJobId"]]
    assert utc(schedule["nextRunAt"]) == last_run + SECOND
    assert last_run >= read_from - LATENESS

    # Delete: the jobs stay, no more come.
    assert server.gql(DELETE, {"name": name}).ok() == {"deleteSchedule": True}
    kept = tick_jobs(server, name)
    assert kept[: len(jobs)] == jobs
    time.sleep(1.5)
    assert tick_jobs(server, name) == kept
    assert server.gql(DELETE, {"name": name}).ok() == {"deleteSchedule": False}
    job = server.gql(JOB, {"id": kept[0].id}).ok()["job"]
    assert (job["scheduleName"], job["status"]) == (name, "PENDING")


def test_pause_stops_the_ticks_and_resume_skips_the_ones_missed_meanwhile(
    server: Server, cleanup: list[str]
) -> None:
    name, job_type = fresh_name("pause"), next(_types)
    cleanup.append(name)
    first = utc(put(server, name=name, type=job_type, cron="* * * * * *")["nextRunAt"])
    wait_until(lambda: len(tick_jobs(server, name)) >= 2, 5, "two ticks enqueued")

    paused = server.gql(PAUSE, {"name": name}).ok()["pauseSchedule"]
    paused_at = now()
    assert paused["paused"] is True and paused["nextRunAt"] is None
    assert schedule_named(server, name) == paused
    before_pause = tick_jobs(server, name)
    assert [j.tick for j in before_pause] == seconds_from(first, before_pause[-1].tick)
    time.sleep(2.5)
    assert tick_jobs(server, name) == before_pause, "a job was enqueued while paused"
    assert schedule_named(server, name)["nextRunAt"] is None

    resume_sent = now()
    resumed = server.gql(RESUME, {"name": name}).ok()["resumeSchedule"]
    assert resumed["paused"] is False
    next_run = utc(resumed["nextRunAt"])
    assert resume_sent < next_run <= resume_sent + 2 * SECOND
    wait_until(lambda: len(tick_jobs(server, name)) >= len(before_pause) + 2, 5, "two ticks after resuming")
    jobs = tick_jobs(server, name)
    assert jobs[: len(before_pause)] == before_pause
    after_resume = jobs[len(before_pause) :]
    assert before_pause[-1].tick <= paused_at
    # Nothing for the ticks of the pause; the first after it is the resumed nextRunAt.
    assert after_resume[0].tick == next_run
    assert [j.tick for j in after_resume] == seconds_from(next_run, after_resume[-1].tick)
    for job in after_resume:
        assert job.tick <= job.created_at <= job.tick + LATENESS, job

    for mutation in (PAUSE, RESUME):
        refused(server.gql(mutation, {"name": fresh_name("missing")}), "NOT_FOUND")


# --- roles and visibility --------------------------------------------------------------------


def test_roles_and_who_sees_the_jobs_of_schedules(server: Server, cleanup: list[str]) -> None:
    name, job_type = fresh_name("roles"), next(_types)
    cleanup.append(name)
    put(server, name=name, type=job_type, cron="* * * * * *")
    scheduled = wait_until(lambda: tick_jobs(server, name), 5, "a tick enqueued")[0]
    server.gql(PAUSE, {"name": name}).ok()
    snapshot = schedules(server)
    keys = {
        role: server.make_key(fresh_name(role.lower()), role) for role in ("PRODUCER", "WORKER", "VIEWER")
    }

    writes: list[tuple[str, dict[str, Any]]] = [
        (PUT, {"input": {"name": fresh_name("forbidden"), "type": job_type, "cron": "* * * * *"}}),
        (PUT, {"input": {"name": name, "type": job_type, "cron": "0 0 * * *"}}),
        (DELETE, {"name": name}),
        (PAUSE, {"name": name}),
        (RESUME, {"name": name}),
    ]
    for role in ("PRODUCER", "WORKER", "VIEWER"):
        for document, variables in writes:
            refused(server.gql(document, variables, key=keys[role]), "FORBIDDEN")
    for role in ("PRODUCER", "WORKER"):
        refused(server.gql(SCHEDULES, key=keys[role]), "FORBIDDEN")
    assert schedules(server, keys["VIEWER"]) == snapshot
    assert schedules(server) == snapshot, "a refused write changed something"

    # A PRODUCER never sees a schedule's job: as for another producer's job.
    producer = keys["PRODUCER"]
    own = server.gql(ENQUEUE, {"type": job_type}, key=producer).ok()["enqueueJob"]["job"]
    assert own["scheduleName"] is None
    other_producer = server.make_key(fresh_name("producer"), "PRODUCER")
    others = server.gql(ENQUEUE, {"type": job_type}, key=other_producer).ok()["enqueueJob"]["job"]
    listed = server.gql(JOBS_OF_TYPE, {"type": job_type}, key=producer).ok()["jobs"]
    assert [n["id"] for n in listed["nodes"]] == [own["id"]] and listed["totalCount"] == 1
    assert all(n["scheduleName"] is None for n in server.gql(ALL_JOBS, key=producer).ok()["jobs"]["nodes"])
    invisible = server.gql(JOB, {"id": others["id"]}, key=producer)
    hidden = server.gql(JOB, {"id": scheduled.id}, key=producer)
    assert (hidden.status, hidden.body) == (invisible.status, invisible.body)
    assert hidden.data is None or hidden.data["job"] is None, hidden.body

    # A VIEWER sees it, in `jobs` and `job(id)`.
    viewer = keys["VIEWER"]
    assert server.gql(JOB, {"id": scheduled.id}, key=viewer).ok()["job"]["scheduleName"] == name
    nodes = server.gql(JOBS_OF_TYPE, {"type": job_type}, key=viewer).ok()["jobs"]["nodes"]
    assert scheduled.id in {n["id"] for n in nodes}

    # A worker claims it and then sees it; another worker does not.
    worker = keys["WORKER"]
    assert server.gql(JOB, {"id": scheduled.id}, key=worker).ok()["job"] is None
    claimed = server.gql(CLAIM, {"types": [job_type]}, key=worker).ok()["claimJobs"]
    mine = [j for j in claimed if j["id"] == scheduled.id]
    assert len(mine) == 1 and mine[0]["scheduleName"] == name
    held = server.gql(JOB, {"id": scheduled.id}, key=worker).ok()["job"]
    assert (held["scheduleName"], held["status"]) == (name, "RUNNING")
    stranger = server.make_key(fresh_name("worker"), "WORKER")
    assert server.gql(JOB, {"id": scheduled.id}, key=stranger).ok()["job"] is None


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"cron": "every minute"}, "cron", id="cron-words"),
        pytest.param({"cron": "* * *"}, "cron", id="cron-3-fields"),
        pytest.param({"cron": "61 * * * *"}, "cron", id="cron-minute-61"),
        pytest.param({"cron": "0 0 30 2 *"}, "cron", id="cron-never-fires"),
        pytest.param({"cron": "0 0 31 2 *"}, "cron", id="cron-never-fires-31-feb"),
        pytest.param({"cron": "59 59 23 31 2,4,6,9,11 *"}, "cron", id="cron-never-fires-6-fields"),
        pytest.param({"timezone": "Mars/Olympus_Mons"}, "timezone", id="unknown-timezone"),
        pytest.param({"name": ""}, "name", id="name-empty"),
        pytest.param({"name": "n" * 101}, "name", id="name-101"),
        pytest.param({"name": "two words"}, "name", id="name-space"),
        pytest.param({"name": "a/b"}, "name", id="name-slash"),
        pytest.param({"type": "not-allowlisted"}, "type", id="type"),
        pytest.param({"payload": [1, 2]}, "payload", id="payload-list"),
        pytest.param({"payload": "text"}, "payload", id="payload-string"),
        pytest.param({"maxRetries": 26}, "maxRetries", id="max-retries-26"),
        pytest.param({"maxRetries": -1}, "maxRetries", id="max-retries-negative"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    server: Server, change: dict[str, Any], field: str
) -> None:
    before = schedules(server)
    name = fresh_name("bad")
    fields = {"name": name, "type": "noop", "cron": "* * * * *", **change}
    refused(server.gql(PUT, {"input": fields}), "BAD_USER_INPUT", field)
    after = schedules(server)
    assert after == before
    assert name not in {s["name"] for s in after}
    if field == "name":
        for document in (DELETE, PAUSE, RESUME):
            refused(server.gql(document, {"name": change["name"]}), "BAD_USER_INPUT", "name")


def test_the_longest_name_and_every_name_character_are_accepted(server: Server, cleanup: list[str]) -> None:
    for name in ("n" * 100, f"A-z_0.9-{next(_names)}"):
        cleanup.append(name)
        assert put(server, name=name, type="noop", cron="@yearly")["name"] == name
        assert server.gql(DELETE, {"name": name}).ok() == {"deleteSchedule": True}


def test_a_rarely_firing_schedule_gets_its_next_run_at(server: Server, cleanup: list[str]) -> None:
    """Once in four years (and not in 2100): the next leap day, found without a walk that
    gives up or spins."""
    name = fresh_name("leap")
    cleanup.append(name)
    after = now()
    year = after.year + next(
        n
        for n in range(9)
        if calendar.isleap(after.year + n) and datetime(after.year + n, 2, 29, tzinfo=UTC) > after
    )
    assert utc(put(server, name=name, type="noop", cron="0 0 29 2 *")["nextRunAt"]) == datetime(
        year, 2, 29, tzinfo=UTC
    )


# --- overlap ---------------------------------------------------------------------------------


def test_overlap_skip_holds_one_open_job_until_it_is_done(server: Server, cleanup: list[str]) -> None:
    name, job_type = fresh_name("skip"), next(_types)
    cleanup.append(name)
    first = utc(put(server, name=name, type=job_type, cron="* * * * * *", overlap="SKIP")["nextRunAt"])
    time.sleep(4.2)
    (only,) = tick_jobs(server, name)
    assert (only.tick, only.status) == (first, "PENDING")
    assert schedule_named(server, name)["lastJobId"] == only.id

    worker = server.make_key(fresh_name("worker"), "WORKER")
    (claimed,) = server.gql(CLAIM, {"types": [job_type]}, key=worker).ok()["claimJobs"]
    assert claimed["id"] == only.id
    time.sleep(1.5)  # RUNNING is open too: still no other job
    assert [j.id for j in tick_jobs(server, name)] == [only.id]
    done = server.gql(COMPLETE, {"id": only.id, "attempt": claimed["attempt"]}, key=worker).ok()[
        "completeJob"
    ]
    assert done["status"] == "COMPLETED"
    finished = utc(done["finishedAt"])

    wait_until(lambda: len(tick_jobs(server, name)) >= 2, 4, "a job after the open one was completed")
    time.sleep(2.2)
    jobs = tick_jobs(server, name)
    assert len(jobs) == 2, f"SKIP enqueued while the new job was open: {jobs}"
    second = jobs[1]
    assert second.status == "PENDING"
    assert finished - SECOND <= second.tick <= finished + SECOND, (second, finished)
    assert second.tick <= second.created_at <= second.tick + LATENESS, second
    assert schedule_named(server, name)["lastJobId"] == second.id


# --- misfire ---------------------------------------------------------------------------------


def newest_tick_before(moment: datetime) -> datetime:
    """The newest whole second strictly before `moment`."""
    return whole_second(moment - timedelta(microseconds=1))


def assert_misfires(before: dict[str, list[TickJob]], after: dict[str, list[TickJob]]) -> None:
    """`before`: each schedule's jobs when the deployment stopped; `after`: those enqueued
    since. Schedules named skip* have misfire SKIP, the others RUN_ONCE."""
    # The first firing after the restart handles every schedule at once (all are due).
    fired = min(j.created_at for jobs in after.values() for j in jobs)
    cutoff = fired - timedelta(seconds=1)  # ticks older than this when fired were missed
    newest_missed = newest_tick_before(cutoff)
    for name, jobs in after.items():
        ticks = [j.tick for j in jobs]
        assert (cutoff - before[name][-1].tick).total_seconds() >= 4, "the downtime missed too few ticks"
        assert min(j.created_at for j in jobs) == fired, (name, jobs, fired)
        assert len(ticks) == len(set(ticks)), (name, ticks)
        missed = [t for t in ticks if t < cutoff]
        if name.startswith("skip"):
            assert missed == [], f"{name}: misfire SKIP enqueued ticks of the downtime: {missed}"
            in_time = ticks
        else:
            assert missed == [newest_missed], f"{name}: RUN_ONCE enqueued {missed}, not [{newest_missed}]"
            in_time = ticks[1:]
        # From the restart on: every tick once, the first of them fired at once, each within
        # a second after its tick.
        assert cutoff <= in_time[0] <= fired, (name, in_time[0], fired)
        assert in_time == seconds_from(in_time[0], in_time[-1]), (name, ticks)
        for job in jobs:
            if job.tick >= cutoff:
                assert job.tick <= job.created_at <= job.tick + LATENESS, (name, job)


def ticking_until_stopped(server: Server, names: list[str]) -> tuple[datetime, dict[str, list[TickJob]]]:
    """Put `* * * * * *` schedules (skip*: misfire SKIP, else RUN_ONCE), let each enqueue two
    ticks, stop the server (SIGTERM); when it stopped, and each schedule's jobs."""
    for name in names:
        misfire = "SKIP" if name.startswith("skip") else "RUN_ONCE"
        put(server, name=name, type="noop", cron="* * * * * *", misfire=misfire)
    wait_until(lambda: all(len(tick_jobs(server, n)) >= 2 for n in names), 5, "two ticks of each schedule")
    server.stop(signal.SIGTERM)
    stopped = now()
    before = {n: tick_jobs(server, n) for n in names}
    for name, jobs in before.items():
        ticks = [j.tick for j in jobs]
        assert ticks == seconds_from(ticks[0], ticks[-1]), (name, ticks)
    return stopped, before


def enqueued_since(
    server: Server, stopped: datetime, before: dict[str, list[TickJob]]
) -> dict[str, list[TickJob]]:
    wait_until(
        lambda: all(len(tick_jobs(server, n)) >= len(jobs) + 3 for n, jobs in before.items()),
        8,
        "three jobs of each schedule after the restart",
    )
    return {n: [j for j in tick_jobs(server, n) if j.created_at > stopped] for n in before}


def test_misfire_after_the_deployment_was_down(start_server: Callable[..., Server]) -> None:
    """The only server stops (SIGTERM) for ~5 s. The `-long` schedules also have their state
    moved back 20 minutes while it is down, as a downtime of 1200 ticks leaves it."""
    first_server = start_server(job_types=JOB_TYPES)
    stopped, before = ticking_until_stopped(first_server, ["skip", "once", "skip-long", "once-long"])
    for name in ("skip-long", "once-long"):
        ((next_run,),) = first_server.sql("SELECT next_run_at FROM schedules WHERE name = :n", n=name)
        was = stored_time(next_run)
        assert was is not None
        moved = was - timedelta(minutes=20)
        first_server.sql(
            "UPDATE schedules SET next_run_at = :t WHERE name = :n", t=first_server.timestamp(moved), n=name
        )
    first_server.stop()  # disposes the engine the statements above opened
    sleep_until(stopped + timedelta(seconds=5))

    restarted_at = now()
    second_server = start_server(
        database_url=first_server.database_url, admin_key=first_server.admin_key, job_types=JOB_TYPES
    )
    after = enqueued_since(second_server, stopped, before)
    assert min(j.created_at for jobs in after.values() for j in jobs) >= restarted_at
    assert_misfires(before, after)


def test_misfire_after_weeks_down_is_caught_up_at_once(start_server: Callable[..., Server]) -> None:
    """Schedules firing every second of the month before last, on a deployment whose stored
    state says it has been down since that month's 10th (their next ticks then, the schedule
    clock silent since): a million and more missed ticks each. On restart the server
    answers /healthz; RUN_ONCE enqueues one job, for the month's last second (in its time
    zone), SKIP none, exactly once, and each moves on to the month next year. The
    every-second schedules beside them keep every tick in time: a catch-up that walked the
    missed ticks held the write transaction, and every tick, for 10 s."""
    year, month = stale_month(now())
    every_second = f"* * * * {month} *"
    month_schedules = {
        "month-once": ("UTC", "RUN_ONCE"),
        "month-paris": ("Europe/Paris", "RUN_ONCE"),
        "month-skip": ("UTC", "SKIP"),
    }
    first_server = start_server(job_types=JOB_TYPES)
    for name, (zone, misfire) in month_schedules.items():
        put(first_server, name=name, type="noop", cron=every_second, timezone=zone, misfire=misfire)
    stopped, before = ticking_until_stopped(first_server, ["skip", "once"])
    down_since = datetime(year, month, 10, tzinfo=UTC)
    first_server.sql(
        "UPDATE schedules SET next_run_at = :t WHERE name IN :names",
        t=first_server.timestamp(down_since),
        names=list(month_schedules),
    )
    first_server.sql("UPDATE schedule_clock SET alive_at = :t", t=first_server.timestamp(down_since))
    first_server.stop()  # disposes the engine the statements above opened
    sleep_until(stopped + timedelta(seconds=5))

    second_server = start_server(
        database_url=first_server.database_url, admin_key=first_server.admin_key, job_types=JOB_TYPES
    )
    assert second_server.client.get(f"{second_server.url}/healthz").json() == {"status": "ok"}
    after = enqueued_since(second_server, stopped, before)
    assert_misfires(before, after)
    fired = min(j.created_at for jobs in after.values() for j in jobs)
    for name, (zone, misfire) in month_schedules.items():
        jobs = tick_jobs(second_server, name)
        newest_missed = last_second_of(year, month, zone)
        assert [j.tick for j in jobs] == ([newest_missed] if misfire == "RUN_ONCE" else []), (name, jobs)
        assert all(j.created_at == fired for j in jobs), (name, jobs, fired)
        schedule = schedule_named(second_server, name)
        assert utc(schedule["nextRunAt"]) == first_second_of(year + 1, month, zone), schedule
        last_run = None if schedule["lastRunAt"] is None else utc(schedule["lastRunAt"])
        assert last_run == (newest_missed if misfire == "RUN_ONCE" else None), schedule
    assert second_server.client.get(f"{second_server.url}/healthz").json() == {"status": "ok"}


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_misfire_after_the_queue_was_copied_to_postgresql(databases: Databases, tmp_path: Path) -> None:
    """A SQLite deployment stops, `queuelog copy-database` moves it to PostgreSQL, servers
    start there ~5 s later: a database on which no ticker has run yet."""
    (tmp_path / "sqlite").mkdir()
    (tmp_path / "postgresql").mkdir()
    old = launch_server(tmp_path / "sqlite", job_types=JOB_TYPES)
    try:
        stopped, before = ticking_until_stopped(old, ["skip", "once"])
    finally:
        old.stop()
    target = databases.fresh(migrated=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    copied = subprocess.run(
        [sys.executable, "-m", "queuelog", "copy-database", "--from", old.database_url, "--to", target],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert copied.returncode == 0, copied.stdout + copied.stderr
    sleep_until(stopped + timedelta(seconds=5))

    new = launch_server(
        tmp_path / "postgresql", database_url=target, admin_key=old.admin_key, job_types=JOB_TYPES
    )
    try:
        assert_misfires(before, enqueued_since(new, stopped, before))
    finally:
        new.stop()


# --- a slow deployment is not a stopped one ------------------------------------------------------


@contextlib.contextmanager
def holding_up_the_ticker(server: Server) -> Iterator[None]:
    """What every firing waits for, held by another transaction: on SQLite the write lock, on
    PostgreSQL the schedule clock's row."""
    with server.engine.begin() as connection:
        connection.execute(
            text(
                "SELECT alive_at FROM schedule_clock WHERE id = 1"
                + (" FOR UPDATE" if server.backend == "postgresql" else "")
            )
        )
        yield


def test_a_tick_held_up_while_servers_run_is_still_enqueued(server: Server, cleanup: list[str]) -> None:
    """Misfire SKIP, every 5 s: the firing of one tick waits 1.3 s for another transaction."""
    name, job_type = fresh_name("slow"), next(_types)
    cleanup.append(name)
    first = utc(put(server, name=name, type=job_type, cron="*/5 * * * * *", misfire="SKIP")["nextRunAt"])
    target = first if (first - now()).total_seconds() >= 1.5 else first + 5 * SECOND
    sleep_until(target - timedelta(milliseconds=100))
    with holding_up_the_ticker(server):
        sleep_until(target + timedelta(milliseconds=1300))
    wait_until(
        lambda: target in {j.tick for j in tick_jobs(server, name)}, 3, f"the job of the tick {target}"
    )
    jobs = tick_jobs(server, name)
    assert [j.tick for j in jobs] == ([first] if target == first else [first, target]), jobs


def test_a_database_stall_longer_than_the_down_threshold_loses_no_tick(
    server: Server, cleanup: list[str]
) -> None:
    """Misfire SKIP, every second: every firing waits 4 s for another transaction, longer than
    the 3 s after which a silent schedule clock means "no server ran". The server ran
    throughout, so none of the ticks of those 4 s is missed."""
    name, job_type = fresh_name("stall"), next(_types)
    cleanup.append(name)
    first = utc(put(server, name=name, type=job_type, cron="* * * * * *", misfire="SKIP")["nextRunAt"])
    sleep_until(first + timedelta(milliseconds=1500))
    with holding_up_the_ticker(server):
        time.sleep(4.0)
    last = first + 6 * SECOND
    wait_until(lambda: last in {j.tick for j in tick_jobs(server, name)}, 5, f"the job of the tick {last}")
    ticks = [j.tick for j in tick_jobs(server, name)]
    assert ticks[:7] == [first + n * SECOND for n in range(7)], ticks
