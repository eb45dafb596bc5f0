"""One schedule that no longer parses stops only itself; the others keep firing.

A schedule is checked when it is put, but what it names can stop parsing later: a tzdata
upgrade removes its time zone, or a version that reads cron more strictly. The test writes
such values straight into a real server's schedules table (an unknown zone into one, a cron
field out of range into another) while a third schedule ticks every second beside them.
Every test runs on SQLite and on PostgreSQL against a real `queuelog serve`, over HTTP.

Proven here:
- the good schedule keeps enqueueing one job per tick;
- each broken one is stopped (no job after it, `nextRunAt` null while not paused) and
  reported: one log line naming it and why (not one per tick), and
  `queuelog_schedules_broken` counting it on /metrics;
- `resumeSchedule` on a broken one is CONFLICT saying why, with nothing changed; put again
  with a valid time zone, it fires again and is no longer counted.

The schema has no field for a schedule's error, so none is invented: the log line and the
metric report it, and `schedules` shows it running with no next tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from conftest import Server
from prometheus_client.parser import text_string_to_metric_families

JOB_TYPES = "noop,good,zone,cron"
EVERY_SECOND = "* * * * * *"
WAIT = 20.0

SCHEDULE_FIELDS = "name timezone cron paused nextRunAt lastRunAt"
PUT = f"mutation($input: ScheduleInput!) {{ putSchedule(input: $input) {{ {SCHEDULE_FIELDS} }} }}"
RESUME = f"mutation($name: String!) {{ resumeSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}"
SCHEDULES = f"{{ schedules {{ {SCHEDULE_FIELDS} }} }}"


def wait_until(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT:.0f} s: {what}")
        time.sleep(0.1)
    return value


def job_count(server: Server, name: str) -> int:
    ((count,),) = server.sql("SELECT count(*) FROM jobs WHERE schedule_name = :name", name=name)
    return int(count)


def schedule(server: Server, name: str) -> dict[str, Any]:
    (found,) = [s for s in server.gql(SCHEDULES).ok()["schedules"] if s["name"] == name]
    return found


def broken_metric(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "queuelog_schedules_broken":
                return sample.value
    raise AssertionError("no queuelog_schedules_broken in /metrics")


def stopped(server: Server, name: str) -> bool:
    found = schedule(server, name)
    return found["nextRunAt"] is None and found["paused"] is False


def test_a_schedule_that_no_longer_parses_is_stopped_and_reported_and_the_others_fire(
    start_server: Callable[..., Server],
) -> None:
    server = start_server(job_types=JOB_TYPES)
    for name in ("good", "zone", "cron"):
        server.gql(PUT, {"input": {"name": name, "type": name, "cron": EVERY_SECOND}}).ok()
    wait_until(lambda: all(job_count(server, n) >= 1 for n in ("good", "zone", "cron")), "a job of each")

    server.sql("UPDATE schedules SET timezone = 'Mars/Olympus' WHERE name = 'zone'")
    server.sql("UPDATE schedules SET cron = '61 * * * * *' WHERE name = 'cron'")
    good = job_count(server, "good")
    wait_until(lambda: job_count(server, "good") >= good + 3, "three more ticks of the good one")
    assert stopped(server, "zone") and stopped(server, "cron")

    # The good one fires on, and the broken ones enqueue nothing meanwhile.
    counts = {name: job_count(server, name) for name in ("good", "zone", "cron")}
    wait_until(lambda: job_count(server, "good") >= counts["good"] + 2, "two more ticks of the good one")
    assert job_count(server, "zone") == counts["zone"]
    assert job_count(server, "cron") == counts["cron"]
    assert broken_metric(server) == 2

    log = server.log()
    zone_lines = [line for line in log.splitlines() if "schedule 'zone' stopped" in line]
    cron_lines = [line for line in log.splitlines() if "schedule 'cron' stopped" in line]
    assert len(zone_lines) == 1 and "Mars/Olympus" in zone_lines[0], log
    assert len(cron_lines) == 1 and "61" in cron_lines[0], log
    assert "Traceback" not in log, log

    refused = server.gql(RESUME, {"name": "zone"})
    assert refused.codes == ["CONFLICT"], refused.body
    assert "Mars/Olympus" in refused.errors[0]["message"], refused.body
    assert stopped(server, "zone")

    server.gql(PUT, {"input": {"name": "zone", "type": "zone", "cron": EVERY_SECOND, "timezone": "UTC"}}).ok()
    wait_until(lambda: job_count(server, "zone") > counts["zone"], "a tick of the zone schedule, put again")
    assert broken_metric(server) == 1
