"""Each tick of a schedule enqueues exactly one job, however many servers run and whichever
of them dies (API.md section 10): the proof, on both databases.

- PostgreSQL: three `queuelog serve` processes on one fresh database, none special;
- SQLite: one `queuelog serve --workers 3` (three server processes on one file).

A `* * * * * *` schedule runs for 60 s. About halfway, a few milliseconds after a tick (when
some process is likely firing it), one server process is killed with SIGKILL: on PostgreSQL
one of the three servers, started again 3 s later on its port and database; on SQLite one
of the three worker processes, which the supervisor may start again or not. Then the schedule
is paused and every job with its scheduleName is read from the database: there must be
exactly one job per whole second from the schedule's first nextRunAt to the last tick before
the pause (none missing, none doubled), each created within one second after its tick (the
contract's bound), with the idempotency key `<name>@<tick>`; and none after the pause.

Figures (ticks expected, enqueued, duplicated, missing, late beyond 1 s, max lateness) are
printed and recorded in the scale-out figures file (test_scale_out.record_figures).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, launch_server, stored_time

from concurrency.test_scale_out import Cluster, cluster_starter, fresh_postgres_database, record_figures, sql

RUN_SECONDS = 60  # as issue 17 asks: a schedule every second for 60 s
KILL_AFTER_SECONDS = 28  # after the first tick: in the middle
KILL_PAST_TICK = timedelta(milliseconds=3)  # a firing is likely under way then
DOWN_SECONDS = 3
LATENESS = timedelta(seconds=1)  # the contract: a tick's job within one second after it
SECOND = timedelta(seconds=1)
NAME = "every-second"

PUT = """mutation($input: ScheduleInput!) { putSchedule(input: $input) { name nextRunAt } }"""
PAUSE = "mutation($name: String!) { pauseSchedule(name: $name) { paused nextRunAt lastRunAt } }"
JOBS_SQL = (
    "SELECT idempotency_key, created_at, type, status, schedule_name FROM jobs"
    " WHERE schedule_name = 'every-second'"
)


def now() -> datetime:
    return datetime.now(UTC)


def sleep_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - now()).total_seconds()))


def utc(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), value
    return parsed


@dataclass(frozen=True)
class Run:
    first: datetime  # the schedule's first nextRunAt
    killed_at: datetime
    pause_sent: datetime
    paused_at: datetime  # the pause's answer arrived


@dataclass(frozen=True)
class Figures:
    expected: int
    enqueued: int
    duplicated: int
    missing: int
    late: int
    max_lateness: timedelta
    last: datetime

    def notes(self, what: str) -> str:
        return (
            f"{what}; ticks expected {self.expected}, enqueued {self.enqueued}, duplicated "
            f"{self.duplicated}, missing {self.missing}, late >1 s {self.late}, max lateness "
            f"{self.max_lateness.total_seconds() * 1000:.0f} ms"
        )


def run_schedule(put_on: Server, pause_on: Callable[[], Server], kill: Callable[[], None]) -> Run:
    """Put the schedule, kill a process KILL_AFTER_SECONDS later (`kill` also starts it
    again, or not), pause it RUN_SECONDS after its first tick."""
    first = utc(
        put_on.gql(PUT, {"input": {"name": NAME, "type": "noop", "cron": "* * * * * *"}}).ok()["putSchedule"][
            "nextRunAt"
        ]
    )
    sleep_until(first + KILL_AFTER_SECONDS * SECOND + KILL_PAST_TICK)
    killed_at = now()
    kill()
    sleep_until(first + RUN_SECONDS * SECOND)
    pause_sent = now()
    paused = pause_on().gql(PAUSE, {"name": NAME}).ok()["pauseSchedule"]
    paused_at = now()
    assert paused["paused"] is True and paused["nextRunAt"] is None
    return Run(first, killed_at, pause_sent, paused_at)


def check_ticks(rows: list[tuple[Any, ...]], run: Run) -> Figures:
    """One job per second from the first tick to the last before the pause, each within a
    second after its tick; the figures."""
    ticks: list[datetime] = []
    lateness: list[timedelta] = []
    for key, created, job_type, status, schedule_name in rows:
        assert (job_type, schedule_name) == ("noop", NAME), (key, job_type, schedule_name)
        assert status.upper() == "PENDING", (key, status)  # nobody works on them
        name, _, when = key.partition("@")
        assert name == NAME, key
        tick = datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        created_at = stored_time(created)
        assert created_at is not None
        ticks.append(tick)
        lateness.append(created_at - tick)
    counts = Counter(ticks)
    last = max(ticks)
    expected = [run.first + i * SECOND for i in range(int((last - run.first).total_seconds()) + 1)]
    figures = Figures(
        expected=len(expected),
        enqueued=len(ticks),
        duplicated=sum(n - 1 for n in counts.values()),
        missing=len(set(expected) - set(counts)),
        late=sum(1 for late in lateness if late > LATENESS),
        max_lateness=max(lateness),
        last=last,
    )
    print(f"\nschedule exactly once: {figures}")
    assert min(ticks) == run.first, (min(ticks), run.first)
    assert {t: n for t, n in counts.items() if n > 1} == {}, "ticks enqueued twice"
    assert sorted(set(expected) - set(counts)) == [], "ticks lost"
    assert set(counts) == set(expected)
    # The last tick: every tick a second older than the pause is there, none after it. Ticks
    # are whole seconds: the newest one a second older than the pause is that instant's second
    # (a tick due 2 ms before the pause may still be on its way, as the contract allows).
    newest_due = (run.pause_sent - LATENESS).replace(microsecond=0)
    assert newest_due <= last <= run.paused_at, (last, run)
    assert len(expected) >= RUN_SECONDS - 1
    assert min(lateness) >= timedelta(0), "a job enqueued before its tick"
    assert figures.late == 0, f"{figures.late} ticks enqueued more than 1 s late (max {figures.max_lateness})"
    return figures


# --- PostgreSQL: three servers, one killed and started again ---------------------------------------


@pytest.fixture
def pg_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from fresh_postgres_database(tmp_path_factory)


@pytest.fixture
def start_cluster(
    pg_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Cluster]]:
    yield from cluster_starter(pg_database, tmp_path_factory)


def test_three_postgresql_servers_one_killed_enqueue_each_tick_exactly_once(
    start_cluster: Callable[..., Cluster],
) -> None:
    cluster = start_cluster(3, job_types="noop")

    def kill_and_restart() -> None:
        cluster.kill(1)
        time.sleep(DOWN_SECONDS)
        cluster.restart(1)

    run = run_schedule(cluster.servers[0], lambda: cluster.servers[2], kill_and_restart)
    rows = sql(cluster.database_url, JOBS_SQL)
    figures = check_ticks(rows, run)
    time.sleep(1.5)
    assert len(sql(cluster.database_url, JOBS_SQL)) == len(rows), "a tick enqueued while paused"
    record_figures(
        "schedule 1/s, 3 PostgreSQL servers, one SIGKILLed",
        jobs=figures.enqueued,
        seconds=(figures.last - run.first).total_seconds() + 1,
        runs=0,
        duplicates=figures.duplicated,
        lost=figures.missing,
        notes=figures.notes(
            f"killed {(run.killed_at - run.first).total_seconds():.3f} s in, back {DOWN_SECONDS} s later"
        ),
    )


# --- SQLite: serve --workers 3, one worker process killed ------------------------------------------


def worker_processes(server: Server) -> list[int]:
    """The server processes `--workers` started (children running multiprocessing's spawn_main)."""
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = []
    for child in children:
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
        except FileNotFoundError:  # gone meanwhile
            continue
    return found


def test_sqlite_serve_workers_3_one_worker_killed_enqueue_each_tick_exactly_once(tmp_path: Path) -> None:
    server = launch_server(tmp_path, workers=3, job_types="noop")
    try:
        workers_before = worker_processes(server)
        assert len(workers_before) == 3, workers_before
        victim: list[int] = []

        def kill_one_worker() -> None:
            victim.append(workers_before[1])
            os.kill(workers_before[1], signal.SIGKILL)

        run = run_schedule(server, lambda: server, kill_one_worker)
        rows = server.sql(JOBS_SQL)
        figures = check_ticks(rows, run)
        assert server.process.poll() is None, "the supervisor died"
        workers_after = worker_processes(server)
        assert victim[0] not in workers_after
        time.sleep(1.5)
        assert len(server.sql(JOBS_SQL)) == len(rows), "a tick enqueued while paused"
        replaced = (
            "started again" if len(workers_after) == 3 else f"not started again ({len(workers_after)} left)"
        )
        record_figures(
            "schedule 1/s, SQLite serve --workers 3, one worker SIGKILLed",
            jobs=figures.enqueued,
            seconds=(figures.last - run.first).total_seconds() + 1,
            runs=0,
            duplicates=figures.duplicated,
            lost=figures.missing,
            notes=figures.notes(f"killed {(run.killed_at - run.first).total_seconds():.3f} s in, {replaced}"),
        )
    finally:
        server.stop()
