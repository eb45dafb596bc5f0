"""The `queuelog worker` command against a real server, run as a real subprocess.

Handler modules are written into the test's directory and imported by the worker with
`--handlers mymod:ATTR` (cwd is that directory); handlers append what they do to
`records.jsonl` there, so every claim in the tests is observed from outside the worker.

Proven: a handler that raises goes through its retries to FAILED; `Discard` fails at once;
`Retry(after=)` postpones; the return value of sync and async handlers becomes `result`;
SIGTERM stops claiming, lets short jobs finish, fails long ones as retryable within
`--grace` (sync handlers too) and exits 0 with nothing left RUNNING; a `kill -9`'d worker's
job is taken over by another worker once its lease expires; `--concurrency` is an exact
bound; a server restart under a running worker loses and duplicates nothing; a result over
the size limit fails that job alone; each job is one JSON log line; and misuse of the
command is one line on stderr with a non-zero exit. A burst of quick jobs, and the jobs failed
by a SIGTERM, get exactly one log line each (written out before the worker exits); a
handler running past its lease, sync or async, has its lease extended by heartbeats and
completes on its first attempt. One server (lease 2 s, so every job
longer than that also proves the heartbeat; failed attempts retried at once) serves most of
the module, each test with job types of its own so that no worker claims another test's
leftovers; a second one with long leases is frozen (SIGSTOP) to make completions pile up.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, serving, start_queuelog
from server_zygote import ForkedProcess

LEASE_SECONDS = 2
WAIT = 60.0  # bound for anything the tests wait for (a worker process starting, under load); past it, hung
JOB_FIELDS = "id type status attempt retryCount workerId runAt updatedAt result error"
ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
JOB = f"query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} }} }}"
JOBS = f"query($type: String) {{ jobs(type: $type, first: 100) {{ nodes {{ {JOB_FIELDS} }} }} }}"

HANDLERS_MODULE = """
import asyncio
import json
import os
import threading
import time
from pathlib import Path

from queuelog.worker import Discard, Retry

RECORDS = Path(__file__).resolve().with_name("records.jsonl")


def record(job, kind, **extra):
    line = {"kind": kind, "id": job.id, "type": job.type, "attempt": job.attempt, "t": time.time()}
    fd = os.open(RECORDS, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, (json.dumps({**line, **extra}) + "\\n").encode())
    finally:
        os.close(fd)


def echo(job):
    return {
        "id": job.id, "type": job.type, "payload": job.payload, "priority": job.priority,
        "attempt": job.attempt, "retry_count": job.retry_count, "max_retries": job.max_retries,
        "in_thread": threading.current_thread() is not threading.main_thread(),
    }


def echo_sync(job):
    record(job, "start")
    return None if job.payload.get("none") else echo(job)


async def echo_async(job):
    record(job, "start")
    await asyncio.sleep(0.01)
    return echo(job)


def boom(job):
    record(job, "start")
    raise ValueError(f"boom on attempt {job.attempt}")


def discard(job):
    record(job, "start")
    raise Discard("no recipient")


class UpstreamDown(ConnectionError):
    pass


def leaky(job):
    raise UpstreamDown(
        f"attempt {job.attempt}: no answer from postgresql://app:hunter2@db.internal/prod"
        " (config in /srv/app/secrets/settings.yaml)"
    )


def later(job):
    record(job, "start")
    raise Retry(after=60)


def sleep_sync(job):
    record(job, "start")
    time.sleep(job.payload["seconds"])
    record(job, "end")
    return {"slept": job.payload["seconds"]}


async def sleep_async(job):
    record(job, "start")
    await asyncio.sleep(job.payload["seconds"])
    record(job, "end")
    return {"slept": job.payload["seconds"]}


def hang_on_first_attempt(job):
    record(job, "start")
    if job.attempt == 1:
        time.sleep(60)
    return {"attempt": job.attempt}


def span(job):
    started = time.time()
    time.sleep(0.3)
    record(job, "span", start=started, end=time.time())


def flaky(job):
    record(job, "start")
    if job.attempt == 1:
        raise RuntimeError("first attempt fails")
    return {"ok": True}


def done(job):
    record(job, "done")
    return {"n": job.payload.get("n")}


def sized(job):
    record(job, "waiting")
    while not RECORDS.with_name("go").exists():
        time.sleep(0.01)
    record(job, "returning")
    return {"blob": "x" * job.payload["size"]}


ECHOING = {"w_echo_sync": echo_sync, "w_echo_async": echo_async}
FAILING = {"w_boom": boom}
LEAKING = {"w_leak": leaky, "w_leak_ok": done}
DISCARDING = {"w_discard": discard}
POSTPONING = {"w_later": later}
LONG = {"w_long_sync": sleep_sync, "w_long_async": sleep_async}
SHORT = {"w_short": sleep_sync}
KILLABLE = {"w_kill": hang_on_first_attempt}
SPANS = {"w_span": span}
LOGGED = {"w_log_ok": done, "w_log_flaky": flaky, "w_log_discard": discard}
SIZED = {"w_sized": sized}
RESTART = {"noop": done, "report": sleep_sync}


async def quick(job):
    return None


BURST = {"w_burst": quick, "w_burst_long": sleep_async}
BEATING = {"w_beat_sync": sleep_sync, "w_beat_async": sleep_async}
NOT_A_DICT = [boom]
NOT_CALLABLE = {"w_boom": 42}
"""
JOB_TYPES = (
    "w_echo_sync,w_echo_async,w_boom,w_discard,w_later,w_long_sync,w_long_async,w_short,w_kill,"
    "w_span,w_log_ok,w_log_flaky,w_log_discard,w_burst,w_burst_long,"
    "w_beat_sync,w_beat_async,w_leak,w_leak_ok"
)


# --- processes -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's server: short leases, failed attempts retried at once."""
    with serving(
        backend, tmp_path_factory, job_types=JOB_TYPES, lease_seconds=LEASE_SECONDS, retry_base_seconds=0
    ) as running:
        yield running


@pytest.fixture(scope="module")
def patient_server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with long leases, for tests that freeze it (SIGSTOP) for a moment."""
    with serving(backend, tmp_path_factory, job_types="w_sized", lease_seconds=120) as running:
        yield running


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes] | ForkedProcess
    log_path: Path
    name: str

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def job_lines(self) -> list[dict[str, Any]]:
        """The log lines that are, as a whole, a JSON object."""
        lines = []
        for line in self.log().splitlines():
            try:
                parsed = json.loads(line)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                lines.append(parsed)
        return lines

    def lines_for(self, job_id: str) -> list[dict[str, Any]]:
        return [x for x in self.job_lines() if x.get("id") == job_id]

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_exit(self, timeout: float = WAIT) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker still running {timeout}s later:\n{self.log()}")


def worker_command(url: str, key: str, handlers: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "queuelog",
        "worker",
        "--url",
        url,
        "--key",
        key,
        "--handlers",
        handlers,
        *extra,
    ]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "mymod.py").write_text(HANDLERS_MODULE)
    return tmp_path


@pytest.fixture
def start_worker(workdir: Path, unique: Callable[[str], str]) -> Iterator[Callable[..., WorkerProcess]]:
    """start_worker(server, "mymod:ATTR", *flags, name=None) -> a running `queuelog worker`."""
    started: list[WorkerProcess] = []

    def start(server: Server, handlers: str, *extra: str, name: str | None = None) -> WorkerProcess:
        name = name or unique("worker")
        key = server.make_key(name, "worker")
        log_path = workdir / f"{name}.log"
        command = worker_command(server.url, key, handlers, *extra)
        process = start_queuelog(command, env=clean_env(), cwd=workdir, log_path=log_path)
        worker = WorkerProcess(process, log_path, name)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.alive():
            worker.process.kill()
            worker.process.wait()


# --- helpers ---------------------------------------------------------------------------------


def enqueue(server: Server, type: str, payload: dict[str, Any] | None = None, **fields: Any) -> str:
    return enqueue_many(server, [{"type": type, "payload": payload or {}, **fields}])[0]


def enqueue_many(server: Server, inputs: list[dict[str, Any]]) -> list[str]:
    return [e["job"]["id"] for e in server.gql(ENQUEUE_MANY, {"inputs": inputs}).ok()["enqueueJobs"]]


def get_job(server: Server, job_id: str) -> dict[str, Any]:
    return server.gql(JOB, {"id": job_id}).ok()["job"]


def jobs_of_type(server: Server, type: str) -> list[dict[str, Any]]:
    return server.gql(JOBS, {"type": type}).ok()["jobs"]["nodes"]


def wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll until `condition()` is truthy; return its value, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def wait_status(server: Server, job_id: str, *statuses: str, timeout: float = WAIT) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = get_job(server, job_id)
        return job if job["status"] in statuses else None

    return wait_for(reached, f"job {job_id} to be {'/'.join(statuses)}", timeout)


def records(workdir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    path = workdir / "records.jsonl"
    if not path.exists():
        return []
    complete_lines = path.read_text().split("\n")[:-1]  # a line still being written has no "\n" yet
    entries = [json.loads(line) for line in complete_lines if line]
    return [e for e in entries if kind is None or e["kind"] == kind]


def started(workdir: Path, job_id: str, attempt: int = 1) -> bool:
    return any(r["id"] == job_id and r["attempt"] == attempt for r in records(workdir, "start"))


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end at t closes before a start at t opens)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


# --- outcomes of one job ---------------------------------------------------------------------


def test_failing_handler_goes_through_its_retries_to_failed(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    job_id = enqueue(server, "w_boom", maxRetries=2)
    worker = start_worker(server, "mymod:FAILING")
    job = wait_status(server, job_id, "FAILED")
    assert (job["attempt"], job["retryCount"]) == (3, 2)
    assert "ValueError" in job["error"] and "boom on attempt 3" in job["error"], job["error"]
    assert [r["attempt"] for r in records(workdir, "start")] == [1, 2, 3]
    lines = wait_for(lambda: len(worker.lines_for(job_id)) >= 3 and worker.lines_for(job_id), "3 log lines")
    assert [(x["attempt"], x["outcome"]) for x in lines] == [(1, "retrying"), (2, "retrying"), (3, "failed")]


def test_a_failed_attempts_line_says_why_sanitised_as_the_stored_error(
    server: Server, start_worker: Callable[..., WorkerProcess]
) -> None:
    failing = enqueue(server, "w_leak", maxRetries=1)
    fine = enqueue(server, "w_leak_ok")
    worker = start_worker(server, "mymod:LEAKING")
    wait_status(server, failing, "FAILED")
    stored = server.gql(
        "query($id: ID!) { job(id: $id) { error attempts { attempt error } } }", {"id": failing}
    ).ok()["job"]
    lines = wait_for(lambda: len(worker.lines_for(failing)) >= 2 and worker.lines_for(failing), "2 log lines")
    assert [(x["attempt"], x["outcome"]) for x in lines] == [(1, "retrying"), (2, "failed")]
    assert [x["error"] for x in lines] == [a["error"] for a in stored["attempts"]], (lines, stored)
    assert lines[-1]["error"] == stored["error"]
    for line in lines:
        error = line["error"]
        why = f"UpstreamDown: attempt {line['attempt']}: no answer from postgresql://"
        assert error.startswith(why), error
        assert "hunter2" not in error and "/srv/app" not in error and "<path>" in error, error
    (completed,) = wait_for(lambda: worker.lines_for(fine), "the completed job's line")
    assert completed["outcome"] == "completed" and "error" not in completed, completed


def test_discard_fails_the_job_at_once(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    job_id = enqueue(server, "w_discard", maxRetries=5)
    start_worker(server, "mymod:DISCARDING")
    job = wait_status(server, job_id, "FAILED")
    assert (job["attempt"], job["retryCount"]) == (1, 0)
    assert "no recipient" in job["error"]
    assert len(records(workdir, "start")) == 1


def test_retry_after_postpones_the_job(server: Server, start_worker: Callable[..., WorkerProcess]) -> None:
    job_id = enqueue(server, "w_later", maxRetries=3)
    start_worker(server, "mymod:POSTPONING")
    job = wait_for(
        lambda: (j := get_job(server, job_id))["attempt"] == 1 and j["status"] == "PENDING" and j,
        "the job to be sent back to PENDING",
    )
    assert job["retryCount"] == 1
    delay = (datetime.fromisoformat(job["runAt"]) - datetime.fromisoformat(job["updatedAt"])).total_seconds()
    assert 59 <= delay <= 61, job
    assert job["workerId"] is None


def test_return_values_become_results(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    payload = {"x": [1, "two"], "zoë": None}
    sync_id, async_id, none_id = enqueue_many(
        server,
        [
            {"type": "w_echo_sync", "payload": payload, "priority": "HIGH", "maxRetries": 5},
            {"type": "w_echo_async", "payload": payload, "priority": "CRITICAL", "maxRetries": 0},
            {"type": "w_echo_sync", "payload": {"none": True}},
        ],
    )
    worker = start_worker(server, "mymod:ECHOING")
    results = {job_id: wait_status(server, job_id, "COMPLETED")["result"] for job_id in (sync_id, async_id)}
    common = {"payload": payload, "attempt": 1, "retry_count": 0}
    assert results[sync_id] == {
        **common,
        "id": sync_id,
        "type": "w_echo_sync",
        "priority": "HIGH",
        "max_retries": 5,
        "in_thread": True,
    }
    assert results[async_id] == {
        **common,
        "id": async_id,
        "type": "w_echo_async",
        "priority": "CRITICAL",
        "max_retries": 0,
        "in_thread": False,
    }
    none_job = wait_status(server, none_id, "COMPLETED")
    assert none_job["result"] is None
    assert none_job["workerId"] == worker.name


@pytest.mark.parametrize(
    "sizes, statuses",
    [
        # The server's result limit is 65536 bytes: the one result over it fails its job only.
        pytest.param(
            [10, 70_000, 20, 30], ["COMPLETED", "FAILED", "COMPLETED", "COMPLETED"], id="one-too-large"
        ),
        # 24 x 60 kB: in one completeJobs call they would pass the 1 MiB request body limit.
        pytest.param([60_000] * 24, ["COMPLETED"] * 24, id="together-over-the-body-limit"),
    ],
)
def test_completions_piled_up_while_the_server_stalls(
    patient_server: Server,
    workdir: Path,
    start_worker: Callable[..., WorkerProcess],
    sizes: list[int],
    statuses: list[str],
) -> None:
    server = patient_server
    ids = enqueue_many(server, [{"type": "w_sized", "payload": {"size": s}} for s in sizes])
    start_worker(server, "mymod:SIZED", "--concurrency", str(len(sizes)))
    wait_for(lambda: len(records(workdir, "waiting")) == len(sizes), "every handler to start")
    # Freeze the server while every handler returns, so all completions queue up in the
    # worker and go out together when it thaws.
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        (workdir / "go").touch()
        wait_for(lambda: len(records(workdir, "returning")) == len(sizes), "every handler to return")
        time.sleep(0.5)  # for the worker's event loop to queue every completion
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    finished = [wait_status(server, i, "COMPLETED", "FAILED") for i in ids]
    assert [(j["status"], j["attempt"]) for j in finished] == [(s, 1) for s in statuses], finished
    for job, size in zip(finished, sizes, strict=True):
        if job["status"] == "FAILED":
            assert "result" in job["error"] and "65536" in job["error"], job["error"]
        else:
            assert job["result"] == {"blob": "x" * size}


# --- shutdown --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_sigterm_fails_a_long_job_as_retryable_and_exits(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess], kind: str
) -> None:
    job_type = f"w_long_{kind}"
    job_id = enqueue(server, job_type, {"seconds": 30})
    worker = start_worker(server, "mymod:LONG", "--grace", "1")
    wait_for(lambda: started(workdir, job_id), "the handler to start")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=20) == 0, worker.log()  # well before the 30 s job would end
    job = get_job(server, job_id)
    assert (job["status"], job["attempt"], job["retryCount"], job["workerId"]) == ("PENDING", 1, 1, None)
    assert "worker stopped" in job["error"]
    assert not records(workdir, "end")
    assert [j["status"] for j in jobs_of_type(server, job_type) if j["status"] == "RUNNING"] == []


def test_sigterm_lets_a_short_job_finish_and_claims_nothing_more(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    job_id = enqueue(server, "w_short", {"seconds": 2.5})
    worker = start_worker(server, "mymod:SHORT", "--grace", "20", "--concurrency", "2")
    wait_for(lambda: started(workdir, job_id), "the handler to start")
    worker.process.send_signal(signal.SIGTERM)
    wait_for(lambda: "stopping" in worker.log(), "the worker to stop claiming")
    late = enqueue_many(server, [{"type": "w_short", "payload": {"seconds": 0}} for _ in range(3)])
    assert worker.alive(), "the worker exited before the late jobs were enqueued: nothing was tested"
    assert worker.wait_exit() == 0, worker.log()

    job = get_job(server, job_id)
    assert (job["status"], job["attempt"], job["result"]) == ("COMPLETED", 1, {"slept": 2.5})
    assert [(get_job(server, i)["status"], get_job(server, i)["attempt"]) for i in late] == [
        ("PENDING", 0)
    ] * 3
    assert [r["id"] for r in records(workdir, "start")] == [job_id]


# --- crashes and outages ---------------------------------------------------------------------


def test_killed_workers_job_is_taken_over_after_its_lease(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    job_id = enqueue(server, "w_kill", maxRetries=3)
    first = start_worker(server, "mymod:KILLABLE")
    wait_for(lambda: started(workdir, job_id), "the first worker to start the job")
    assert get_job(server, job_id)["workerId"] == first.name
    first.process.kill()
    first.process.wait()
    second = start_worker(server, "mymod:KILLABLE")
    job = wait_status(server, job_id, "COMPLETED")
    assert (job["attempt"], job["retryCount"], job["workerId"]) == (2, 1, second.name)
    assert job["result"] == {"attempt": 2}
    assert [r["attempt"] for r in records(workdir, "start")] == [1, 2]


def test_server_restart_loses_and_repeats_nothing(
    start_server: Callable[..., Server], workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    first = start_server(job_types="noop,report")
    port = int(first.url.rsplit(":", 1)[1])
    # While the slow job runs, the worker's other slots wait in claims: the stopping server
    # answers them at once (empty) instead of holding its shutdown or cancelling them.
    worker = start_worker(first, "mymod:RESTART", "--concurrency", "4")
    before = enqueue_many(first, [{"type": "noop", "payload": {"n": n}} for n in range(3)])
    slow = enqueue(first, "report", {"seconds": 1.5})
    wait_for(lambda: started(workdir, slow), "the slow job to start")
    first.stop()
    second = start_server(
        database_url=first.database_url, port=port, admin_key=first.admin_key, job_types="noop,report"
    )
    after = enqueue_many(second, [{"type": "noop", "payload": {"n": n}} for n in range(3, 6)])

    every = [*before, slow, *after]
    for job_id in every:
        job = wait_status(second, job_id, "COMPLETED", "FAILED", timeout=30)
        assert (job["status"], job["attempt"]) == ("COMPLETED", 1), job
    finished = sorted((r["id"], r["attempt"]) for r in records(workdir) if r["kind"] in ("done", "end"))
    assert finished == sorted((job_id, 1) for job_id in every)
    assert worker.alive(), worker.log()
    assert "Traceback" not in worker.log(), worker.log()
    for sign_of_a_bug in ("Traceback", "ERROR", "CancelledError"):
        assert sign_of_a_bug not in first.log(), first.log()


# --- concurrency and logs --------------------------------------------------------------------


def test_concurrency_is_an_exact_bound(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    ids = enqueue_many(server, [{"type": "w_span"} for _ in range(12)])
    start_worker(server, "mymod:SPANS", "--concurrency", "3")
    for job_id in ids:
        wait_status(server, job_id, "COMPLETED")
    spans = records(workdir, "span")
    assert sorted(r["id"] for r in spans) == sorted(ids)
    assert max_overlap([(r["start"], r["end"]) for r in spans]) == 3


def test_one_json_log_line_per_job(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    ok, flaky, discarded = enqueue_many(
        server, [{"type": t} for t in ("w_log_ok", "w_log_flaky", "w_log_discard")]
    )
    worker = start_worker(server, "mymod:LOGGED")
    for job_id in (ok, flaky, discarded):
        wait_status(server, job_id, "COMPLETED", "FAILED")
    expected = {
        ok: [(1, "completed")],
        flaky: [(1, "retrying"), (2, "completed")],
        discarded: [(1, "discarded")],
    }
    types = {ok: "w_log_ok", flaky: "w_log_flaky", discarded: "w_log_discard"}

    def logged() -> list[dict[str, Any]] | None:
        lines = [x for x in worker.job_lines() if x.get("id") in expected]
        return lines if len(lines) >= 4 else None

    lines = wait_for(logged, "the job log lines")
    for job_id, want in expected.items():
        mine = [x for x in lines if x["id"] == job_id]
        assert [(x["attempt"], x["outcome"]) for x in mine] == want, lines
        for line in mine:
            assert line["type"] == types[job_id]
            assert isinstance(line["duration_ms"], int | float) and line["duration_ms"] >= 0
            assert isinstance(line["attempt"], int)


def test_every_job_gets_one_log_line_after_a_burst_and_after_sigterm(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    quick_ids = enqueue_many(server, [{"type": "w_burst"} for _ in range(400)])
    worker = start_worker(server, "mymod:BURST", "--concurrency", "16", "--grace", "1")

    def burst_lines() -> list[dict[str, Any]] | None:
        lines = [x for x in worker.job_lines() if x.get("type") == "w_burst"]
        return lines if len(lines) >= len(quick_ids) else None

    lines = wait_for(burst_lines, "a log line for each of the 400 quick jobs")
    assert sorted(x["id"] for x in lines) == sorted(quick_ids)  # exactly one each
    assert {(x["event"], x["attempt"], x["outcome"]) for x in lines} == {("job", 1, "completed")}

    long_ids = enqueue_many(server, [{"type": "w_burst_long", "payload": {"seconds": 30}} for _ in range(5)])
    wait_for(lambda: all(started(workdir, i) for i in long_ids), "the long handlers to start")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log()
    lines = worker.job_lines()
    stopped = [x for x in lines if x["id"] in long_ids]
    assert sorted(x["id"] for x in stopped) == sorted(long_ids)
    assert {x["outcome"] for x in stopped} == {"retrying"}
    assert len(lines) == len(quick_ids) + len(long_ids), worker.log()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handler_running_past_its_lease_is_heartbeated(
    server: Server, workdir: Path, start_worker: Callable[..., WorkerProcess], kind: str
) -> None:
    seconds = 2.5 * LEASE_SECONDS
    job_id = enqueue(server, f"w_beat_{kind}", {"seconds": seconds})
    start_worker(server, "mymod:BEATING")
    wait_for(lambda: started(workdir, job_id), "the handler to start")
    lease = "query($id: ID!) { job(id: $id) { status claimedAt leaseExpiresAt } }"
    first = server.gql(lease, {"id": job_id}).ok()["job"]

    def extended() -> dict[str, Any] | None:
        later = server.gql(lease, {"id": job_id}).ok()["job"]
        assert later["status"] == "RUNNING" and later["claimedAt"] == first["claimedAt"], later
        expires = datetime.fromisoformat(later["leaseExpiresAt"])
        return later if expires > datetime.fromisoformat(first["leaseExpiresAt"]) else None

    wait_for(extended, "a heartbeat to extend the lease")
    job = wait_status(server, job_id, "COMPLETED", "FAILED", "PENDING")
    assert (job["status"], job["attempt"], job["retryCount"]) == ("COMPLETED", 1, 0), job
    assert job["result"] == {"slept": seconds}
    assert [r["attempt"] for r in records(workdir, "start") if r["id"] == job_id] == [1]


# --- misuse ----------------------------------------------------------------------------------

BROKEN_MODULE = "raise RuntimeError('configuration missing')\n"
UNREACHABLE = "http://127.0.0.1:9"
SOME_KEY = "ql_" + "x" * 40
# (id, --handlers, other flags, a word the one-line message must contain)
MISUSE = [
    ("missing-module", "nosuchmodule:HANDLERS", [], "nosuchmodule"),
    ("missing-attr", "mymod:NOPE", [], "mymod:NOPE"),
    ("attr-not-a-dict", "mymod:NOT_A_DICT", [], "dict"),
    ("handler-not-callable", "mymod:NOT_CALLABLE", [], "not callable"),
    ("no-attr", "mymod", [], "module:attr"),
    ("module-raises", "broken:HANDLERS", [], "configuration missing"),
    ("concurrency-0", "mymod:FAILING", ["--concurrency", "0"], "concurrency"),
    ("concurrency-not-int", "mymod:FAILING", ["--concurrency", "many"], "concurrency"),
    ("grace-negative", "mymod:FAILING", ["--grace", "-1"], "grace"),
]
MISSING_FLAGS = ["--handlers"]


def misuse_command(case: str) -> list[str]:
    if case.startswith("without"):
        command = worker_command(UNREACHABLE, SOME_KEY, "mymod:FAILING")
        at = command.index(case.removeprefix("without"))
        return command[:at] + command[at + 2 :]
    _, handlers, extra, _ = next(m for m in MISUSE if m[0] == case)
    return worker_command(UNREACHABLE, SOME_KEY, handlers, *extra)


def run_misuse(workdir: Path) -> dict[str, tuple[int, str, str]]:
    """Every misuse case, run at once (each is a Python start-up): {case: (status, out, err)}."""
    (workdir / "mymod.py").write_text(HANDLERS_MODULE)
    (workdir / "broken.py").write_text(BROKEN_MODULE)
    cases = [m[0] for m in MISUSE] + [f"without{flag}" for flag in MISSING_FLAGS]
    running = {
        case: subprocess.Popen(
            misuse_command(case),
            cwd=workdir,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case in cases
    }
    runs = {}
    for case, process in running.items():
        try:
            out, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # it started working instead of refusing
            process.kill()
            out, err = process.communicate()
        runs[case] = (process.returncode, out, err)
    return runs


def misuse_is_one_line_and_a_non_zero_exit(run: tuple[int, str, str], expected: str) -> None:
    status, out, err = run
    assert status != 0, (status, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in out + err
    assert expected in lines[0], lines[0]


def missing_required_flag(run: tuple[int, str, str], flag: str) -> None:
    status, out, err = run
    assert status != 0
    assert len(err.strip().splitlines()) == 1 and flag in err, err
    assert "Traceback" not in out + err


def test_misuse_is_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    """Every misuse case (MISUSE, and each required flag left out), one test: as one test per
    case of a module fixture, every pytest -n process that drew a case ran all ten CLI calls
    again. Each failing case is named; all are reported together."""
    runs = run_misuse(tmp_path)
    failures = []
    checks = [
        (case, functools.partial(misuse_is_one_line_and_a_non_zero_exit, runs[case], expected))
        for case, _, _, expected in MISUSE
    ]
    checks += [
        (f"without {flag}", functools.partial(missing_required_flag, runs[f"without{flag}"], flag))
        for flag in MISSING_FLAGS
    ]
    for case, check in checks:
        try:
            check()
        except AssertionError as failure:
            failures.append(f"--- {case} ---\n{failure}")
    assert not failures, f"{len(failures)} of {len(checks)} misuse cases failed:\n" + "\n".join(failures)
