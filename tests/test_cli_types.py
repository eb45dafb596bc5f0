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
- every misuse (a type outside the allowlist, no allowlist, a bad or past --until, an
  unreachable PostgreSQL, a SQLite file that does not exist, a missing TYPE or action) is one
  `queuelog: error: ...` line on stderr, nothing on stdout, a non-zero exit, no traceback; a
  missing SQLite file is not created.
"""

from __future__ import annotations

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

JOB_TYPES = "c_pause,c_wait,c_until,c_list,c_quiet"
CLI_TIMEOUT = 60.0
ENQUEUE = "mutation($type: String!) { enqueueJob(input: {type: $type, payload: {}}) { job { id } } }"
CLAIM = (
    "mutation($type: String!, $wait: Int) { claimJobs(limit: 1, types: [$type], waitSeconds: $wait) { id } }"
)
CONTROLS = "{ typeControls { type paused pausedUntil running } }"
SET_CONTROL = "mutation($input: TypeControlInput!) { setTypeControl(input: $input) { type } }"
Result = subprocess.CompletedProcess[str]


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """`python -m queuelog ARGS` with no QUEUELOG_* variables but those in `env`."""
    return run_queuelog(*args, cwd=cwd, env=env, timeout=CLI_TIMEOUT)


def types_cli(server: Server, *args: str, cwd: Path) -> Result:
    """`queuelog types ARGS` on the server's database and allowlist, which must succeed."""
    result = cli("types", *args, "--database-url", server.database_url, "--job-types", JOB_TYPES, cwd=cwd)
    assert result.returncode == 0 and not result.stderr, result
    return result


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


def test_a_cli_pause_stops_the_servers_claims_and_resume_restores_them(
    server: Server, worker_key: str, tmp_path: Path
) -> None:
    job = enqueue(server, "c_pause")
    paused = types_cli(server, "pause", "c_pause", cwd=tmp_path)
    assert "paused job type 'c_pause'" in paused.stdout and "types resume c_pause" in paused.stdout
    assert api_control(server, "c_pause")["paused"] is True
    assert claim(server, worker_key, "c_pause") == []  # the server's next claim obeys it
    later = enqueue(server, "c_pause")  # enqueues go on
    assert claim(server, worker_key, "c_pause") == []
    row = listing(types_cli(server, "list", cwd=tmp_path))["c_pause"]
    assert row["STATE"] == "PAUSED"
    again = types_cli(server, "pause", "c_pause", cwd=tmp_path)
    assert "already paused" in again.stdout

    resumed = types_cli(server, "resume", "c_pause", cwd=tmp_path)
    assert "resumed job type 'c_pause'" in resumed.stdout
    assert api_control(server, "c_pause")["paused"] is False
    assert claim(server, worker_key, "c_pause") == [job]
    assert claim(server, worker_key, "c_pause") == [later]
    assert listing(types_cli(server, "list", cwd=tmp_path))["c_pause"]["STATE"] == "active"
    noop = types_cli(server, "resume", "c_pause", cwd=tmp_path)
    assert "was not paused" in noop.stdout


def test_a_claim_waiting_for_a_paused_type_takes_its_job_after_a_cli_resume(
    server: Server, worker_key: str, tmp_path: Path
) -> None:
    types_cli(server, "pause", "c_wait", cwd=tmp_path)
    job = enqueue(server, "c_wait")
    got: list[tuple[list[str], float]] = []
    waiting = threading.Thread(
        target=lambda: got.append((claim(server, worker_key, "c_wait", wait=25), time.monotonic()))
    )
    waiting.start()
    time.sleep(1.0)
    assert not got  # paused: the long poll waits
    types_cli(server, "resume", "c_wait", cwd=tmp_path)
    resumed_at = time.monotonic()
    waiting.join(timeout=30)
    ((claimed, answered_at),) = got
    assert claimed == [job]
    assert answered_at - resumed_at < 2.0  # not at the end of its 25 s wait


def test_a_cli_pause_until_ends_by_itself(server: Server, worker_key: str, tmp_path: Path) -> None:
    job = enqueue(server, "c_until")
    later = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    shown = later.strftime("%Y-%m-%dT%H:%M:%SZ")
    paused = types_cli(server, "pause", "c_until", "--until", shown, cwd=tmp_path)
    assert f"until {shown}" in paused.stdout
    assert datetime.fromisoformat(api_control(server, "c_until")["pausedUntil"]) == later
    assert listing(types_cli(server, "list", cwd=tmp_path))["c_until"]["STATE"] == f"PAUSED until {shown}"
    assert claim(server, worker_key, "c_until") == []

    # a new pause replaces the end time; this one ends by itself, with no resume
    soon = datetime.now(UTC) + timedelta(seconds=5)
    types_cli(server, "pause", "c_until", "--until", soon.isoformat(), cwd=tmp_path)
    claimed = claim(server, worker_key, "c_until", wait=20)  # wakes when the pause ends
    assert claimed == [job]
    assert datetime.now(UTC) >= soon - timedelta(milliseconds=50)
    assert listing(types_cli(server, "list", cwd=tmp_path))["c_until"]["STATE"] == "active"


def test_list_shows_running_limits_and_timeouts_from_the_environment(
    server: Server, worker_key: str, tmp_path: Path
) -> None:
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
    env = {"QUEUELOG_DATABASE_URL": server.database_url, "QUEUELOG_JOB_TYPES": JOB_TYPES}
    result = cli("types", "list", cwd=tmp_path, env=env)
    assert result.returncode == 0 and not result.stderr, result
    rows = listing(result)
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
    made = cli("migrate", "--database-url", f"sqlite:///{database}", cwd=tmp_path)
    assert made.returncode == 0, made
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
