"""`queuelog types list|pause|resume` (API.md section 11), run as real subprocesses on the
database of a real server, on SQLite and PostgreSQL.

Proven:
- a pause written by the CLI (no server involved) is obeyed by the running server at its
  next claim: claims return nothing of the type while enqueues go on; `resume` brings the
  job back to the next claim, and a claim already long-polling for the type takes it within
  a second or two of the CLI's exit; the API's `typeControls` shows what the CLI wrote;
- `pause --until` ends by itself, on the server, with no resume; the listing shows the end
  time (UTC, as --until takes it) and then `active`;
- `list` shows every allowlisted type with its state, RUNNING count, limits, rate limit and
  timeout, the database URL and the allowlist also taken from QUEUELOG_DATABASE_URL and
  QUEUELOG_JOB_TYPES;
- `pause`/`resume` say what they did, also when there was nothing to do;
- they pass the API's rules, as the API's pauseType does: each logs the queue's line, naming
  the CLI's actor `cli:<os user>` where the server's names the key; an unknown type is refused
  with the API's own message;
- every misuse (a type outside the allowlist, no allowlist, a bad or past --until, an
  unreachable PostgreSQL, a SQLite file that does not exist, a missing TYPE or action) is one
  `queuelog: error: ...` line on stderr, nothing on stdout, a non-zero exit, no traceback; a
  missing SQLite file is not created.
"""

from __future__ import annotations

import getpass
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, run_queuelog, serving

from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head

JOB_TYPES = "c_pause,c_wait,c_until,c_list,c_quiet,c_rules"
ACTOR = f"cli:{getpass.getuser()}"
CLI_TIMEOUT = 60.0
ENQUEUE = "mutation($type: String!) { enqueueJob(input: {type: $type, payload: {}}) { job { id } } }"
CLAIM = (
    "mutation($type: String!, $wait: Int) { claimJobs(limit: 1, types: [$type], waitSeconds: $wait) { id } }"
)
CONTROLS = "{ typeControls { type paused pausedUntil running } }"
PAUSE = "mutation($type: String!) { pauseType(type: $type) { type paused } }"
QUEUE_LOG_LINE = re.compile(r"^\S+ \S+ INFO queuelog\.queue: (.*)$")
SET_CONTROL = "mutation($input: TypeControlInput!) { setTypeControl(input: $input) { type } }"
Result = subprocess.CompletedProcess[str]


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """`python -m queuelog ARGS` with no QUEUELOG_* variables but those in `env`."""
    return run_queuelog(*args, cwd=cwd, env=env, timeout=CLI_TIMEOUT)


def types_cli_many(
    calls: Sequence[Sequence[str]],
    cwd: Path,
    env: dict[str, str] | None = None,
    done_at: dict[int, float] | None = None,
) -> list[Result]:
    """Independent `queuelog types ...` calls at once, each of which must succeed; `done_at`
    gets the moment each one ended, by its index."""

    def one(index: int) -> Result:
        result = cli("types", *calls[index], cwd=cwd, env=env)
        if done_at is not None:
            done_at[index] = time.monotonic()
        return result

    with ThreadPoolExecutor(len(calls)) as pool:
        results = list(pool.map(one, range(len(calls))))
    for args, result in zip(calls, results, strict=True):
        assert result.returncode == 0, (args, result)
        # The queue's one log line of the write, as the server logs it for pauseType.
        assert len(queue_log(result)) == (0 if args[0] == "list" else 1), (args, result)
    return results


def queue_log(result: Result) -> list[str]:
    """The messages of the queue's log lines on stderr; any other stderr line fails."""
    lines = [QUEUE_LOG_LINE.match(line) for line in result.stderr.splitlines()]
    assert all(lines), result.stderr
    return [line.group(1) for line in lines if line]


def listing(result: Result) -> dict[str, dict[str, str]]:
    """`types list` output as {type: {column: value}}: columns are split at the header's starts."""
    header, *rows = result.stdout.splitlines()
    names = ["TYPE", "STATE", "RUNNING", "MAX RUNNING", "PER KEY", "RATE LIMIT", "TIMEOUT"]
    starts = [header.index(name) for name in names]
    assert starts == sorted(starts), header
    parsed = {}
    for row in rows:
        cells = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        parsed[cells[0]] = dict(zip(names, cells, strict=True))
    return parsed


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=JOB_TYPES) as running:
        yield running


@pytest.fixture
def worker_key(server: Server) -> str:
    return server.make_key(f"cli-types-{time.monotonic_ns()}", "worker")


def enqueue(server: Server, job_type: str) -> str:
    return str(server.gql(ENQUEUE, {"type": job_type}).ok()["enqueueJob"]["job"]["id"])


def claim(server: Server, key: str, job_type: str, wait: int = 0) -> list[str]:
    answer = server.gql(CLAIM, {"type": job_type, "wait": wait}, key=key).ok()
    return [job["id"] for job in answer["claimJobs"]]


def api_control(server: Server, job_type: str) -> dict[str, Any]:
    (control,) = [c for c in server.gql(CONTROLS).ok()["typeControls"] if c["type"] == job_type]
    return control


def test_cli_pauses_and_resumes_are_obeyed_by_the_running_server(
    server: Server, worker_key: str, tmp_path: Path
) -> None:
    """Four stories in one test, so that their CLI calls run side by side (10 calls in 4
    rounds, where 14 ran one after another: under CI load each call takes 5-10 s):
    c_pause is paused and resumed; a claim long-polling for c_wait takes its job when the CLI
    resumes it; `pause --until` on c_until ends by itself; `list` (from the environment)
    shows c_list's RUNNING count and limits and every allowlisted type."""
    base = ["--database-url", server.database_url, "--job-types", JOB_TYPES]
    env = {"QUEUELOG_DATABASE_URL": server.database_url, "QUEUELOG_JOB_TYPES": JOB_TYPES}

    # Round 1: pause c_pause; pause c_until for an hour; pause c_wait.
    job = enqueue(server, "c_pause")
    job_until = enqueue(server, "c_until")
    later = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    shown = later.strftime("%Y-%m-%dT%H:%M:%SZ")
    paused, paused_until, _ = types_cli_many(
        [
            ["pause", "c_pause", *base],
            ["pause", "c_until", "--until", shown, *base],
            ["pause", "c_wait", *base],
        ],
        cwd=tmp_path,
    )
    assert "paused job type 'c_pause'" in paused.stdout and "types resume c_pause" in paused.stdout
    assert queue_log(paused) == [f"type 'c_pause' paused by {ACTOR}"]
    assert api_control(server, "c_pause")["paused"] is True
    assert claim(server, worker_key, "c_pause") == []  # the server's next claim obeys it
    later_job = enqueue(server, "c_pause")  # enqueues go on
    assert claim(server, worker_key, "c_pause") == []
    assert f"until {shown}" in paused_until.stdout
    assert queue_log(paused_until) == [f"type 'c_until' paused by {ACTOR} until {later.isoformat()}"]
    assert datetime.fromisoformat(api_control(server, "c_until")["pausedUntil"]) == later
    assert claim(server, worker_key, "c_until") == []
    job_wait = enqueue(server, "c_wait")
    # c_list: limits set through the API, two of its jobs RUNNING.
    limits = {
        "type": "c_list",
        "maxRunning": 5,
        "maxRunningPerKey": 2,
        "rateLimit": {"limit": 100, "periodSeconds": 60, "perKey": True},
        "timeoutSeconds": 300,
    }
    server.gql(SET_CONTROL, {"input": limits}).ok()
    for _ in range(3):
        enqueue(server, "c_list")
    assert len(claim(server, worker_key, "c_list")) == 1
    assert len(claim(server, worker_key, "c_list")) == 1

    # Round 2: `list`, its database and allowlist from the environment; pause c_pause again.
    listed, again = types_cli_many([["list"], ["pause", "c_pause", *base]], cwd=tmp_path, env=env)
    rows = listing(listed)
    assert list(rows) == sorted(JOB_TYPES.split(","))  # every allowlisted type, in type order
    assert rows["c_list"] == {
        "TYPE": "c_list",
        "STATE": "active",
        "RUNNING": "2",
        "MAX RUNNING": "5",
        "PER KEY": "2",
        "RATE LIMIT": "100/60s per key",
        "TIMEOUT": "300s",
    }
    assert rows["c_quiet"] == {
        "TYPE": "c_quiet",
        "STATE": "active",
        "RUNNING": "0",
        "MAX RUNNING": "-",
        "PER KEY": "-",
        "RATE LIMIT": "-",
        "TIMEOUT": "-",
    }
    assert rows["c_pause"]["STATE"] == "PAUSED"
    assert rows["c_until"]["STATE"] == f"PAUSED until {shown}"
    assert rows["c_wait"]["STATE"] == "PAUSED"
    assert "already paused" in again.stdout

    # A claim long-polls for the paused c_wait, with a job waiting, until round 3 resumes it.
    # (Started only now: on a loaded CI machine, with the CLI calls of round 2 in its wait,
    # its 25 s ran out before the resume.)
    got: list[tuple[list[str], float]] = []
    waiting = threading.Thread(
        target=lambda: got.append((claim(server, worker_key, "c_wait", wait=30), time.monotonic()))
    )
    waiting_since = time.monotonic()
    waiting.start()
    time.sleep(1.0)
    assert not got  # paused: the long poll waits

    # Round 3: resume c_pause and c_wait; a new pause of c_until replaces the end time, and
    # this one ends by itself, with no resume.
    soon = datetime.now(UTC) + timedelta(seconds=5)
    calls = [["resume", "c_pause", *base], ["resume", "c_wait", *base]]
    calls.append(["pause", "c_until", "--until", soon.isoformat(), *base])
    done_at: dict[int, float] = {}
    resumed, _, _ = types_cli_many(calls, cwd=tmp_path, done_at=done_at)
    assert "resumed job type 'c_pause'" in resumed.stdout
    assert queue_log(resumed) == [f"type 'c_pause' resumed by {ACTOR}"]
    assert api_control(server, "c_pause")["paused"] is False
    assert claim(server, worker_key, "c_pause") == [job]
    assert claim(server, worker_key, "c_pause") == [later_job]
    waiting.join(timeout=35)
    ((claimed, answered_at),) = got
    assert claimed == [job_wait], (
        f"the long poll answered {claimed} {answered_at - waiting_since:.1f} s after it began, "
        f"{answered_at - done_at[1]:.1f} s after the resume answered"
    )
    assert answered_at - done_at[1] < 2.0  # not at the end of its 30 s wait
    claimed = claim(server, worker_key, "c_until", wait=20)  # wakes when the pause ends
    assert claimed == [job_until]
    assert datetime.now(UTC) >= soon - timedelta(milliseconds=50)

    # Round 4: both show as active; resuming c_pause again changes nothing.
    listed, noop = types_cli_many([["list", *base], ["resume", "c_pause", *base]], cwd=tmp_path)
    rows = listing(listed)
    assert rows["c_pause"]["STATE"] == "active" and rows["c_until"]["STATE"] == "active"
    assert "was not paused" in noop.stdout


def test_cli_writes_pass_the_rules_the_api_does(server: Server, worker_key: str, tmp_path: Path) -> None:
    """The CLI pauses through the queue's own pauseType: the same log line as the server's
    (its actor in place of the key's name), a type outside the allowlist refused with the
    API's message, and the paused type's jobs refused to the next claim."""
    base = ["--database-url", server.database_url, "--job-types", JOB_TYPES]
    enqueue(server, "c_rules")
    with ThreadPoolExecutor(2) as pool:
        paused, unknown = pool.map(
            lambda args: cli("types", *args, *base, cwd=tmp_path),
            [["pause", "c_rules"], ["pause", "c_nope"]],
        )
    assert paused.returncode == 0, paused
    assert queue_log(paused) == [f"type 'c_rules' paused by {ACTOR}"]
    assert claim(server, worker_key, "c_rules") == []

    server.gql(PAUSE, {"type": "c_rules"}).ok()
    assert "type 'c_rules' paused by admin" in server.log()  # the line the CLI logged, by its key
    (api_error,) = server.gql(PAUSE, {"type": "c_nope"}).errors
    assert api_error["extensions"]["code"] == "BAD_USER_INPUT"
    assert unknown.returncode == 1 and not unknown.stdout, unknown
    assert unknown.stderr == f"queuelog: error: {api_error['message']}\n"


# --- misuse: one line on stderr, a non-zero exit (no server needed) ---------------------------

PAST = "2001-02-03T04:05:06Z"
MISUSE: list[tuple[str, list[str], str]] = [
    ("unknown type", ["pause", "nope", "--job-types", "a,b"], "job type 'nope' is not allowed"),
    ("unknown type on resume", ["resume", "nope", "--job-types", "a,b"], "job type 'nope' is not allowed"),
    ("no allowlist", ["list"], "no job types"),
    ("no allowlist on pause", ["pause", "a"], "no job types"),
    ("bad until", ["pause", "a", "--until", "tomorrow", "--job-types", "a"], "ISO-8601"),
    ("past until", ["pause", "a", "--until", PAST, "--job-types", "a"], "not in the future"),
    ("missing type", ["pause", "--job-types", "a"], "TYPE"),
    ("missing action", [], "ACTION"),
    ("unknown action", ["stop", "a"], "invalid choice"),
]


def misuse_runs(tmp_path: Path) -> dict[str, Result]:
    database = tmp_path / "queuelog.db"
    # Migrated here, not by a `queuelog migrate` run (one CLI start fewer; test_cli.py
    # proves `migrate`).
    engine = create_sync_engine(f"sqlite:///{database}")
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()
    calls: list[tuple[str, Sequence[str]]] = [
        (name, ["types", *args, "--database-url", f"sqlite:///{database}"] if args else ["types"])
        for name, args, _ in MISUSE
    ]
    calls += [
        (
            "missing sqlite file",
            ["types", "list", "--job-types", "a", "--database-url", "sqlite:///absent.db"],
        ),
        (
            "unreachable postgresql",
            [
                "types",
                "pause",
                "a",
                "--job-types",
                "a",
                "--database-url",
                "postgresql://u:secret@127.0.0.1:1/x",
            ],
        ),
        ("not a database url", ["types", "list", "--job-types", "a", "--database-url", "nonsense"]),
    ]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda call: cli(*call[1], cwd=tmp_path), calls))
    return {name: result for (name, _), result in zip(calls, results, strict=True)}


def test_misuse_is_one_line_on_stderr_and_a_non_zero_exit(tmp_path: Path) -> None:
    runs = misuse_runs(tmp_path)
    expected = {name: fragment for name, _, fragment in MISUSE} | {
        "missing sqlite file": "no database at sqlite:///absent.db",
        "unreachable postgresql": "cannot open the database",
        "not a database url": "not a database URL",
    }
    for name, result in runs.items():
        lines = result.stderr.splitlines()
        assert result.returncode != 0 and len(lines) == 1, (name, result)
        assert lines[0].startswith("queuelog: error: ") and expected[name] in lines[0], (name, lines)
        assert not result.stdout and "Traceback" not in result.stderr, (name, result)
        assert "secret" not in result.stderr, (name, result)
    assert not (tmp_path / "absent.db").exists()  # a mistyped path is not created
