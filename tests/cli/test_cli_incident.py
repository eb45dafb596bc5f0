"""`queuelog types add|remove`, `queuelog schedules run` and `queuelog jobs cancel` (API.md
section 12, issue 33 item 8), run as real subprocesses on the database of a real server, on
SQLite and PostgreSQL.

Proven:
- `types add NAME` is obeyed by the running server at once: its next enqueue of NAME is
  accepted and `typeControls` lists it, and `types list` shows it with no --job-types given;
  `types add` again changes nothing and says so; `types remove NAME` makes the server refuse
  NAME at its next enqueue while its jobs stay; removing a type of --job-types is refused;
- `schedules run NAME` enqueues the schedule's job now, keyed `NAME@manual-<unique>`, also
  while the schedule is paused, which it stays (next and last run unchanged); a schedule whose
  type only the server's QUEUELOG_JOB_TYPES allows needs --job-types (as the server has them);
- `jobs cancel ID` cancels a PENDING job: the API answers it CANCELLED, with its CANCELLED event;
  on a RUNNING job it requests the cancellation (`cancelRequested`), with the grace given by
  --cancel-grace-seconds, after which the server ends the job CANCELLED;
- `jobs run-now ID` makes a delayed PENDING job due now: the next claim takes it;
- each goes through the queue's rules and logs one line naming the actor `cli:<os user>`;
- every misuse (a malformed or unknown id, a finished job, an unknown schedule, a bad type
  name, a missing argument) is one `queuelog: error: ...` line on stderr, nothing on stdout, a
  non-zero exit, no traceback.
"""

from __future__ import annotations

import getpass
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, run_queuelog, serving

JOB_TYPES = "i_env,i_sched,i_later,i_busy"
ACTOR = f"cli:{getpass.getuser()}"
CLI_TIMEOUT = 60.0
LOG_LINE = re.compile(r"^\S+ \S+ INFO queuelog\.(queue|cli): (.*)$")
ENQUEUE = "mutation($type: String!) { enqueueJob(input: {type: $type}) { job { id type } } }"
CONTROLS = "{ typeControls { type } }"
SCHEDULE_FIELDS = "name paused nextRunAt lastRunAt lastJobId"
PUT = f"mutation($input: ScheduleInput!) {{ putSchedule(input: $input) {{ {SCHEDULE_FIELDS} }} }}"
PAUSE = (
    "mutation($name: String!) { pauseSchedule(name: $name) { name paused nextRunAt lastRunAt lastJobId } }"
)
SCHEDULES = "{ schedules { name paused nextRunAt lastRunAt lastJobId } }"
JOB = """query($id: ID!) {
  job(id: $id) { id type status idempotencyKey scheduleName runAt cancelRequested
    events { kind status } } }"""
ENQUEUE_LATER = """mutation($type: String!) {
  enqueueJob(input: {type: $type, runAt: "2999-01-01T00:00:00Z"}) { job { id } } }"""
CLAIM = "mutation($type: String!) { claimJobs(limit: 10, types: [$type]) { id attempt } }"
COMPLETE = "mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt) { status } }"
Result = subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=JOB_TYPES) as running:
        yield running


def cli_many(calls: Sequence[Sequence[str]], server: Server, cwd: Path) -> list[Result]:
    """Independent `queuelog ...` calls on the server's database, at once (each CLI start is
    slow under load)."""

    def one(args: Sequence[str]) -> Result:
        return run_queuelog(*args, "--database-url", server.database_url, cwd=cwd, timeout=CLI_TIMEOUT)

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(one, calls))


def succeeded(result: Result) -> list[str]:
    """The messages of its log lines; any other stderr line, or a failure, fails."""
    assert result.returncode == 0, result
    lines = [LOG_LINE.match(line) for line in result.stderr.splitlines()]
    assert all(lines), result.stderr
    return [line.group(2) for line in lines if line]


def failed(result: Result, fragment: str) -> None:
    assert result.returncode != 0, result
    assert not result.stdout, result
    assert result.stderr.startswith("queuelog: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert fragment in result.stderr, (fragment, result.stderr)


def enqueue(server: Server, job_type: str) -> dict[str, Any]:
    response = server.gql(ENQUEUE, {"type": job_type})
    return {"errors": response.codes} if response.errors else response.data["enqueueJob"]["job"]


def test_types_added_and_removed_by_the_cli_are_obeyed_by_the_server_at_once(
    server: Server, tmp_path: Path
) -> None:
    assert enqueue(server, "i.added") == {"errors": ["BAD_USER_INPUT"]}
    added, bad_name = cli_many([["types", "add", "i.added"], ["types", "add", "i added"]], server, tmp_path)
    assert succeeded(added) == [f"job type 'i.added' added by {ACTOR}"]
    assert "added job type 'i.added'" in added.stdout
    failed(bad_name, "type: a job type is 1 to 100 characters")
    assert enqueue(server, "i.added")["type"] == "i.added"
    assert "i.added" in [c["type"] for c in server.gql(CONTROLS).ok()["typeControls"]]

    again, listed, env_type = cli_many(
        [
            ["types", "add", "i.added"],
            ["types", "list"],
            ["types", "remove", "i_env", "--job-types", JOB_TYPES],
        ],
        server,
        tmp_path,
    )
    succeeded(again)
    assert "was added already; nothing changed" in again.stdout
    assert [line.split()[0] for line in succeeded_lines(listed)] == ["TYPE", "i.added"]
    failed(env_type, "QUEUELOG_JOB_TYPES")

    (removed,) = cli_many([["types", "remove", "i.added"]], server, tmp_path)
    assert succeeded(removed) == [f"job type 'i.added' removed by {ACTOR}"]
    assert enqueue(server, "i.added") == {"errors": ["BAD_USER_INPUT"]}
    assert server.sql("SELECT count(*) FROM jobs WHERE type = 'i.added'") == [(1,)]


def succeeded_lines(result: Result) -> list[str]:
    assert succeeded(result) == []
    return result.stdout.splitlines()


def test_schedules_run_enqueues_now_and_leaves_the_schedule_as_it_was(server: Server, tmp_path: Path) -> None:
    made = server.gql(PUT, {"input": {"name": "i-nightly", "type": "i_sched", "cron": "0 3 * * *"}}).ok()
    paused = server.gql(PAUSE, {"name": "i-nightly"}).ok()["pauseSchedule"]
    assert made["putSchedule"]["lastJobId"] is None and paused["paused"] is True

    needs_types, ran, missing = cli_many(
        [
            ["schedules", "run", "i-nightly"],
            ["schedules", "run", "i-nightly", "--job-types", JOB_TYPES],
            ["schedules", "run", "i-missing", "--job-types", JOB_TYPES],
        ],
        server,
        tmp_path,
    )
    failed(needs_types, "pass --job-types a,b")
    failed(missing, "schedule 'i-missing' not found")
    (line,) = succeeded(ran)
    found = re.fullmatch(rf"schedule 'i-nightly' run now by {re.escape(ACTOR)}: job (\d+)", line)
    assert found is not None, line
    job = server.gql(JOB, {"id": found[1]}).ok()["job"]
    assert job["type"] == "i_sched" and job["status"] == "PENDING" and job["scheduleName"] == "i-nightly"
    assert re.fullmatch(r"i-nightly@manual-[0-9a-f]{32}", job["idempotencyKey"]), job
    assert job["events"] == [{"kind": "ENQUEUED", "status": "PENDING"}]
    assert f"enqueued job {found[1]} (i_sched)" in ran.stdout
    (now,) = [s for s in server.gql(SCHEDULES).ok()["schedules"] if s["name"] == "i-nightly"]
    assert now == paused


def test_jobs_cancel_cancels_a_pending_job_and_misuse_is_one_line(server: Server, tmp_path: Path) -> None:
    done = enqueue(server, "i_env")["id"]
    worker = server.make_key("incident-worker", "worker")
    (claimed,) = [
        j for j in server.gql(CLAIM, {"type": "i_env"}, key=worker).ok()["claimJobs"] if j["id"] == done
    ]
    server.gql(COMPLETE, {"id": done, "attempt": claimed["attempt"]}, key=worker).ok()
    pending = enqueue(server, "i_env")["id"]
    calls = [
        ["jobs", "cancel", pending],
        ["jobs", "cancel", done],
        ["jobs", "cancel", "987654321"],
        ["jobs", "cancel", "abc"],
        ["jobs", "cancel", "0"],
        ["jobs", "cancel", "-1"],
        ["jobs", "cancel"],
        ["jobs"],
    ]
    cancelled, finished, unknown, letters, zero, negative, no_id, no_action = cli_many(
        calls, server, tmp_path
    )
    assert succeeded(cancelled) == [f"job {pending} (i_env) cancel by {ACTOR}: CANCELLED"]
    assert cancelled.stdout == f"cancelled job {pending} (i_env)\n"
    job = server.gql(JOB, {"id": pending}).ok()["job"]
    assert job["status"] == "CANCELLED"
    assert job["events"][-1] == {"kind": "CANCELLED", "status": "CANCELLED"}
    failed(finished, f"job {done} is COMPLETED")
    failed(unknown, "job 987654321 not found")
    for result, text in ((letters, "'abc'"), (zero, "'0'"), (negative, "-1")):
        failed(result, "invalid job id")
        assert text in result.stderr
    failed(no_id, "ID")
    failed(no_action, "ACTION")


def test_jobs_run_now_and_cancel_of_a_running_job(server: Server, tmp_path: Path) -> None:
    later = server.gql(ENQUEUE_LATER, {"type": "i_later"}).ok()["enqueueJob"]["job"]["id"]
    worker = server.make_key("incident-runner", "worker")
    assert server.gql(CLAIM, {"type": "i_later"}, key=worker).ok()["claimJobs"] == []
    running = enqueue(server, "i_busy")["id"]
    (held,) = server.gql(CLAIM, {"type": "i_busy"}, key=worker).ok()["claimJobs"]
    assert held["id"] == running
    done = enqueue(server, "i_busy")["id"]
    (finished,) = server.gql(CLAIM, {"type": "i_busy"}, key=worker).ok()["claimJobs"]
    server.gql(COMPLETE, {"id": done, "attempt": finished["attempt"]}, key=worker).ok()

    ran, cancelled, ran_done, bad_grace, ran_unknown = cli_many(
        [
            ["jobs", "run-now", later],
            ["jobs", "cancel", running, "--cancel-grace-seconds", "1"],
            ["jobs", "run-now", done],
            ["jobs", "cancel", running, "--cancel-grace-seconds", "0"],
            ["jobs", "run-now", "987654321"],
        ],
        server,
        tmp_path,
    )
    assert succeeded(ran) == [f"job {later} (i_later) run now by {ACTOR}"]
    assert ran.stdout.startswith(f"job {later} (i_later) is due now")
    assert [job["id"] for job in server.gql(CLAIM, {"type": "i_later"}, key=worker).ok()["claimJobs"]] == [
        later
    ]

    assert succeeded(cancelled) == [f"job {running} (i_busy) cancel by {ACTOR}: RUNNING"]
    assert cancelled.stdout.startswith(f"cancel requested for job {running} (i_busy), RUNNING")
    assert server.gql(JOB, {"id": running}).ok()["job"]["cancelRequested"] is True
    deadline = time.monotonic() + 15  # the grace is 1 s (the default, 30): the server ends the job
    while server.gql(JOB, {"id": running}).ok()["job"]["status"] != "CANCELLED":
        assert time.monotonic() < deadline, "the grace given by the CLI never ended the job"
        time.sleep(0.1)

    failed(ran_done, f"job {done} is COMPLETED")
    failed(bad_grace, "QUEUELOG_CANCEL_GRACE_SECONDS must be between 1 and 86400")
    failed(ran_unknown, "job 987654321 not found")
