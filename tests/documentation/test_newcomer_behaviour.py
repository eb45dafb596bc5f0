"""What newcomers and operators run into first, each on the real thing: `queuelog worker` and
`queuelog serve` as processes, the clients against a real server.

Proven:
- a worker whose key the server refuses (mistyped, a PRODUCER key, revoked while it runs,
  by `queuelog keys revoke`) says so in one `queuelog: error:` line and exits 78, and
  `Worker.run()` raises KeyRefused; a server that cannot be reached is still retried (the
  worker is still running seconds later, and SIGTERM stops it with 0);
- `run_at` takes ISO-8601 strings with an offset or Z and aware datetimes, in `Client` and
  `AsyncClient`, in `enqueue` and `enqueue_many`; a naive datetime, a string without an
  offset, a string that is no time and a number are refused before anything is sent;
- `queuelog serve` stopped by SIGTERM or SIGINT exits 0, alone and with `--workers 2`;
- boolean settings take true/false, 1/0, yes/no, on/off in any case, as flag values
  (`--graphiql false`) and as variables, `--help` lists the forms, and anything else is
  refused in one line;
- `keys list` shows "-" as the max priority of keys that cannot enqueue (WORKER, VIEWER);
- `--log-format json` (flag or QUEUELOG_LOG_FORMAT): every line a real server (one process
  or two) and a real worker write is a JSON object with ts, level, logger and message; the
  worker's job lines carry the job's fields, and its refused key ends in a JSON error line;
- `copy-database` reports the id the target gives next, after idempotent replays made gaps.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import (
    POSTGRES_URL,
    Server,
    free_port,
    launch_server,
    postgres_admin,
    require_backend,
    run_queuelog,
    serving,
)

from queuelog import keys as key_admin
from queuelog.cli import EXIT_KEY_REFUSED, build_parser
from queuelog.client import AsyncClient, Client
from queuelog.errors import QueuelogError
from queuelog.logformat import JsonFormatter
from queuelog.model import Priority, Role
from queuelog.settings import FALSE_WORDS, TRUE_WORDS, Settings, SettingsError
from queuelog.storage.engine import create_sync_engine
from queuelog.worker import KeyRefused, Worker

WAIT = 60.0  # bounds what the tests wait for; past it, something hangs
JOB_TYPES = "n_quick,n_gate,n_flaky,n_discard"
ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { created job { id } } }"
JOB = "query($id: ID!) { job(id: $id) { id status attempt } }"
TRACEBACK = "Traceback (most recent call last)"
HANDLERS = """
import os
import time
from pathlib import Path

from queuelog.worker import Discard

HERE = Path(__file__).resolve().parent


def quick(job):
    return {"ok": True}


def gate(job):
    (HERE / f"started-{job.id}").touch()
    while not (HERE / "go").exists():
        time.sleep(0.01)
    return {"gated": True}


def flaky(job):
    if job.attempt == 1:
        raise RuntimeError("first attempt fails")
    return {"attempt": job.attempt}


def discard(job):
    raise Discard("no recipient")


HANDLERS = {"n_quick": quick, "n_gate": gate, "n_flaky": flaky, "n_discard": discard}
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env.update(extra)
    return env


def queuelog(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m queuelog ARGS` with no QUEUELOG_* variables but those in `env`."""
    return run_queuelog(*args, cwd=cwd, env=env, timeout=WAIT)


def wait_for(condition: Callable[[], Any], what: str, within: float = WAIT) -> Any:
    deadline = time.monotonic() + within
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        time.sleep(0.05)
    return value


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, job_types=JOB_TYPES, retry_base_seconds=0) as running:
        yield running


# --- the worker's key ------------------------------------------------------------------------


@dataclass
class WorkerRun:
    process: subprocess.Popen[bytes]
    out: Path
    err: Path

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"worker still running after {WAIT}s:\n{self.stderr()}{self.stdout()}")


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerRun]]:
    """start_worker(url, key, *flags, env=None): `queuelog worker --handlers handlers:HANDLERS`."""
    (tmp_path / "handlers.py").write_text(HANDLERS)
    started: list[WorkerRun] = []

    def start(url: str, key: str, *flags: str, env: dict[str, str] | None = None) -> WorkerRun:
        n = len(started)
        out, err = tmp_path / f"worker-{n}.out", tmp_path / f"worker-{n}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "queuelog", "worker", "--url", url, "--key", key]
                + ["--handlers", "handlers:HANDLERS", *flags],
                stdout=stdout,
                stderr=stderr,
                cwd=tmp_path,
                env=env or clean_env(),
                start_new_session=True,
            )
        run = WorkerRun(process, out, err)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()


def refusal_line(run: WorkerRun) -> str:
    """The one line saying the key was refused: exit status 78, no traceback, no retrying."""
    status = run.wait()
    err = run.stderr()
    assert status == EXIT_KEY_REFUSED == 78, (status, err)
    assert TRACEBACK not in err + run.stdout(), err
    errors = [line for line in err.splitlines() if line.startswith("queuelog: error:")]
    assert len(errors) == 1, err
    assert "refused" in errors[0] and "retrying" not in err, err
    return errors[0]


def test_a_mistyped_key_and_a_producer_key_end_the_worker_with_78(
    server: Server, start_worker: Callable[..., WorkerRun], unique: Callable[[str], str]
) -> None:
    producer = server.make_key(unique("producer"), "producer")
    mistyped = start_worker(server.url, "ql_" + "x" * 43)
    not_a_worker = start_worker(server.url, producer)
    line = refusal_line(mistyped)
    assert "UNAUTHENTICATED" in line and "QUEUELOG_API_KEY" in line, line
    line = refusal_line(not_a_worker)
    assert "FORBIDDEN" in line and "WORKER role" in line, line
    assert len(not_a_worker.stderr().splitlines()) == 2, "the start-up line, then the refusal"


def test_a_key_revoked_while_the_worker_runs_ends_it_after_its_job(
    server: Server, start_worker: Callable[..., WorkerRun], unique: Callable[[str], str], tmp_path: Path
) -> None:
    name = unique("worker")
    worker = start_worker(server.url, server.make_key(name, "worker"), "--grace", "30")
    job_id = server.gql(ENQUEUE, {"input": {"type": "n_gate"}}).ok()["enqueueJob"]["job"]["id"]
    wait_for(lambda: (tmp_path / f"started-{job_id}").exists(), "the handler to start")

    revoked = queuelog("keys", "revoke", name, "--database-url", server.database_url, cwd=tmp_path)
    assert revoked.returncode == 0, revoked.stderr
    # No other request follows the revoke: the waiting claim itself must notice it (on
    # PostgreSQL its wait reads the keys generation afresh at each recheck).
    # Sooner than the claim's own wait (20 s) runs out: the revoke ends it.
    wait_for(lambda: "refused this worker's key" in worker.stderr(), "the worker to notice the revoke", 15)
    assert worker.process.poll() is None, "the running job gets its grace period"
    (tmp_path / "go").touch()
    line = refusal_line(worker)
    assert "UNAUTHENTICATED" in line, line
    # Its completion was refused (the key is revoked), and said so; the job waits for its lease.
    assert server.gql(JOB, {"id": job_id}).ok()["job"]["status"] == "RUNNING"
    job_lines = [json.loads(x) for x in worker.stderr().splitlines() if x.startswith("{")]
    assert [(x["id"], x["outcome"]) for x in job_lines] == [(job_id, "refused")], worker.stderr()


def test_an_unreachable_server_is_retried_not_a_reason_to_exit(
    start_worker: Callable[..., WorkerRun],
) -> None:
    worker = start_worker(f"http://127.0.0.1:{free_port()}", "ql_" + "x" * 43)
    with pytest.raises(subprocess.TimeoutExpired):
        worker.process.wait(timeout=4)
    assert "retrying in" in worker.stderr(), worker.stderr()
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.stderr()
    assert TRACEBACK not in worker.stderr()


def test_the_sdk_raises_key_refused_after_stopping(server: Server, unique: Callable[[str], str]) -> None:
    async def run(key: str) -> KeyRefused:
        worker = Worker(server.url, key, {"n_quick": lambda job: None})
        with pytest.raises(KeyRefused) as raised:
            await asyncio.wait_for(worker.run(), WAIT)
        return raised.value

    refused = asyncio.run(run("ql_" + "y" * 43))
    assert isinstance(refused, QueuelogError) and refused.code == "UNAUTHENTICATED", refused
    refused = asyncio.run(run(server.make_key(unique("viewer"), "viewer")))
    assert refused.code == "FORBIDDEN" and "WORKER role" in str(refused), refused


# --- run_at --------------------------------------------------------------------------------------

NEW_YEAR = datetime(2030, 1, 1, tzinfo=UTC)
ACCEPTED_RUN_AT: list[Any] = [
    "2030-01-01T00:00:00Z",
    "2030-01-01T00:00:00+00:00",
    "2030-01-01T02:00:00+02:00",
    "2029-12-31T19:00:00.000-05:00",
    NEW_YEAR,
    datetime(2030, 1, 1, 9, tzinfo=timezone(timedelta(hours=9))),
]
REFUSED_RUN_AT: list[tuple[Any, type[Exception], str]] = [
    (datetime(2030, 1, 1), ValueError, "naive"),
    ("2030-01-01T00:00:00", ValueError, "offset"),
    ("2030-01-01", ValueError, "offset"),
    ("next tuesday", ValueError, "ISO-8601"),
    (1893456000, TypeError, "int"),
]


class AsyncAsSync:
    """An AsyncClient's coroutines, run on an event loop of the test's own."""

    def __init__(self, url: str, key: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._make(url, key))

    @staticmethod
    async def _make(url: str, key: str) -> AsyncClient:
        return AsyncClient(url, key)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)
        return lambda *args, **kwargs: self.loop.run_until_complete(method(*args, **kwargs))

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture(params=["Client", "AsyncClient"])
def producer(request: pytest.FixtureRequest, server: Server, unique: Callable[[str], str]) -> Iterator[Any]:
    key = server.make_key(unique("producer"), "producer")
    client: Any = Client(server.url, key) if request.param == "Client" else AsyncAsSync(server.url, key)
    yield client
    client.close()


def test_run_at_takes_iso_strings_with_an_offset_and_aware_datetimes(producer: Any) -> None:
    for run_at in ACCEPTED_RUN_AT:
        job = producer.enqueue("n_quick", run_at=run_at)
        assert job.run_at == NEW_YEAR, (run_at, job.run_at)
    made = producer.enqueue_many([{"type": "n_quick", "run_at": run_at} for run_at in ACCEPTED_RUN_AT])
    assert [e.job.run_at for e in made] == [NEW_YEAR] * len(ACCEPTED_RUN_AT)


def test_run_at_without_an_offset_is_refused_before_sending(producer: Any) -> None:
    for run_at, error, fragment in REFUSED_RUN_AT:
        with pytest.raises(error, match=fragment):
            producer.enqueue("n_quick", run_at=run_at)
        with pytest.raises(error, match=fragment):
            producer.enqueue_many([{"type": "n_quick"}, {"type": "n_quick", "run_at": run_at}])
    assert producer.stats().counts["pending"] == 0, "a refused run_at enqueued something"


# --- serve's exit status on a graceful stop ----------------------------------------------------


def stop_by_signal(server: Server, sig: int) -> None:
    """`sig` ends the server with status 0 and no traceback."""
    try:
        assert server.gql("{ me { name } }").ok() == {"me": {"name": "admin"}}
        server.process.send_signal(sig)
        status = server.process.wait(timeout=WAIT)
    finally:
        server.stop()
    assert status == 0, server.log()
    assert TRACEBACK not in server.log()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_stopped_by_a_signal_exits_0(tmp_path: Path, sig: int) -> None:
    """With `--workers 2`; the one-process server is stopped by both signals in
    test_serve_takes_boolean_words_as_flags_and_variables, on the servers it starts anyway
    (two server starts fewer)."""
    stop_by_signal(launch_server(tmp_path, workers=2), sig)


# --- boolean settings ----------------------------------------------------------------------------

BOOLEAN_SPELLINGS = [
    *(word.upper() for word in TRUE_WORDS),
    *(word.title() for word in FALSE_WORDS),
    *TRUE_WORDS,
    *FALSE_WORDS,
]


@pytest.mark.parametrize("spelling", BOOLEAN_SPELLINGS)
def test_every_boolean_spelling_as_a_flag_and_a_variable(spelling: str) -> None:
    expected = spelling.lower() in TRUE_WORDS
    args = build_parser().parse_args(["serve", "--graphiql", spelling, "--dashboard", f" {spelling} "])
    assert (args.graphiql, args.dashboard) == (expected, expected)
    settings = Settings.from_env({"QUEUELOG_GRAPHIQL": spelling, "QUEUELOG_COMPILED": spelling})
    assert (settings.graphiql, settings.compiled) == (expected, expected)


def test_boolean_flags_alone_and_negated() -> None:
    parse = build_parser().parse_args
    assert parse(["serve", "--graphiql", "--port", "1"]).graphiql is True
    assert parse(["serve", "--no-graphiql"]).graphiql is False
    assert parse(["serve"]).graphiql is None  # not given: the variable, else the default


def test_boolean_forms_are_listed_and_others_refused(tmp_path: Path) -> None:
    shown = queuelog("serve", "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    help_text = " ".join(shown.stdout.split())
    assert "--graphiql [BOOL]" in help_text and "--no-graphiql" in help_text
    assert "true/false, 1/0, yes/no or on/off (any case)" in help_text
    database = f"sqlite:///{tmp_path / 'q.db'}"
    cases: list[tuple[list[str], dict[str, str], int, str]] = [
        (["--graphiql", "maybe"], {}, 2, "'maybe' is not a boolean: use true/false, 1/0, yes/no or on/off"),
        ([], {"QUEUELOG_DASHBOARD": "sometimes"}, 1, "QUEUELOG_DASHBOARD must be a boolean"),
    ]
    with ThreadPoolExecutor(len(cases)) as pool:  # independent CLI runs, at once
        results = list(
            pool.map(
                lambda case: queuelog(
                    "serve", "--database-url", database, *case[0], cwd=tmp_path, env=case[1]
                ),
                cases,
            )
        )
    for (_, _, status, fragment), result in zip(cases, results, strict=True):
        assert result.returncode == status, result.stderr
        assert result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr
        assert TRACEBACK not in result.stderr


def pages(server: Server) -> tuple[bool, bool]:
    """(GraphiQL served at GET /graphql, the dashboard served at GET /)."""
    html = {"Accept": "text/html"}
    graphiql = httpx.get(server.graphql_url, headers=html)
    dashboard = httpx.get(f"{server.url}/", headers=html)
    return (
        graphiql.status_code == 200 and "graphiql" in graphiql.text.lower(),
        dashboard.status_code == 200,
    )


def test_serve_takes_boolean_words_as_flags_and_variables(tmp_path: Path) -> None:
    """Both servers start at once; then one is stopped by SIGTERM and the other by SIGINT,
    each of which must end it with status 0 (see test_serve_stopped_by_a_signal_exits_0)."""
    (tmp_path / "flags").mkdir()
    (tmp_path / "env").mkdir()
    with ThreadPoolExecutor(2) as pool:
        starting = [
            pool.submit(launch_server, tmp_path / "flags", graphiql="false", dashboard="Yes"),
            pool.submit(
                launch_server, tmp_path / "env", env={"QUEUELOG_GRAPHIQL": "ON", "QUEUELOG_DASHBOARD": "0"}
            ),
        ]
        started = [future.exception() or future.result() for future in starting]
    flags, env = started
    try:
        assert isinstance(flags, Server) and isinstance(env, Server), started
        assert pages(flags) == (False, True)
        assert pages(env) == (True, False)
        stop_by_signal(flags, signal.SIGTERM)
        stop_by_signal(env, signal.SIGINT)
    finally:
        for server in started:
            if isinstance(server, Server):
                server.stop()


# --- keys list -------------------------------------------------------------------------------------


def test_keys_that_cannot_enqueue_list_no_max_priority(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'keys.db'}"
    worker = queuelog(
        "keys", "create", "--name", "w", "--role", "worker", "--database-url", database, cwd=tmp_path
    )
    assert worker.returncode == 0 and "max priority" not in worker.stdout, worker.stdout + worker.stderr
    engine = create_sync_engine(database)  # migrated by `keys create`
    try:
        for name, roles, priority in [
            ("v", [Role.VIEWER], Priority.HIGH),
            ("p", [Role.PRODUCER], Priority.HIGH),
            ("pw", [Role.PRODUCER, Role.WORKER], Priority.LOW),
            ("a", [Role.ADMIN], None),
        ]:
            key_admin.create_key(engine, name, roles, priority)
    finally:
        engine.dispose()
    listing = queuelog("keys", "list", "--database-url", database, cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    rows = {line.split()[0]: line.split()[2] for line in listing.stdout.splitlines()[1:]}
    assert rows == {"w": "-", "v": "-", "p": "HIGH", "pw": "LOW", "a": "CRITICAL"}, listing.stdout


# --- log formats -------------------------------------------------------------------------------------


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of `text` as a JSON object with ts, level, logger and message (fails otherwise)."""
    parsed = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}\nin:\n{text}")
        assert isinstance(entry, dict), line
        assert {"ts", "level", "logger", "message"} <= entry.keys(), line
        assert datetime.fromisoformat(entry["ts"]).tzinfo is not None, line
        assert entry["level"] in ("debug", "info", "warning", "error", "critical"), line
        parsed.append(entry)
    return parsed


@pytest.mark.parametrize("how", ["flag", "variable, two processes"])
def test_a_json_logging_server_writes_only_json_lines(tmp_path: Path, how: str) -> None:
    if how == "flag":
        server = launch_server(tmp_path, log_format="json", log_level="info")
    else:
        server = launch_server(tmp_path, workers=2, log_level="info", env={"QUEUELOG_LOG_FORMAT": "JSON"})
    try:
        assert server.gql("{ me { name } }").ok()
        assert server.gql("{ me { name } }", key="ql_nonsense").status == 401
        refused = server.gql(ENQUEUE, {"input": {"type": "not-allowed"}})
        assert refused.codes == ["BAD_USER_INPUT"], refused.body
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=WAIT) == 0
    finally:
        server.stop()
    lines = json_lines(server.log())
    by_logger = {entry["logger"] for entry in lines}
    assert {"queuelog.serve", "uvicorn.error", "uvicorn.access"} <= by_logger, by_logger
    (bootstrap,) = [entry for entry in lines if "admin_key" in entry]
    assert bootstrap["admin_key"] == server.admin_key
    posts = [entry for entry in lines if entry["logger"] == "uvicorn.access" and entry["method"] == "POST"]
    assert sorted(entry["status"] for entry in posts) == [200, 200, 401], posts
    assert not [entry for entry in lines if "exception" in entry], "a traceback, though nothing failed"
    assert sum("not-allowed" in line for line in server.log().splitlines()) <= 1


def test_a_json_logging_worker_writes_only_json_lines_on_stdout(
    server: Server, start_worker: Callable[..., WorkerRun], unique: Callable[[str], str]
) -> None:
    ids = [
        server.gql(ENQUEUE, {"input": {"type": job_type}}).ok()["enqueueJob"]["job"]["id"]
        for job_type in ("n_quick", "n_flaky", "n_discard")
    ]
    worker = start_worker(server.url, server.make_key(unique("worker"), "worker"), "--log-format", "json")

    def job_lines() -> list[dict[str, Any]] | None:
        lines = [entry for entry in json_lines(worker.stdout()) if entry.get("event") == "job"]
        return lines if len(lines) >= 4 else None

    lines = wait_for(job_lines, "a line for each attempt")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.stdout()
    assert worker.stderr() == ""
    everything = json_lines(worker.stdout())
    assert any(entry["message"].startswith("queuelog worker: ") for entry in everything)
    assert sorted((x["id"], x["attempt"], x["outcome"]) for x in lines) == sorted(
        [
            (ids[0], 1, "completed"),
            (ids[1], 1, "retrying"),
            (ids[1], 2, "completed"),
            (ids[2], 1, "discarded"),
        ]
    )
    for line in lines:
        assert line["logger"] == "queuelog.worker.jobs" and line["level"] == "info", line
        assert line["message"] == f"job {line['id']} {line['outcome']}", line
        assert line["type"] in ("n_quick", "n_flaky", "n_discard") and line["duration_ms"] >= 0, line


def test_a_json_logging_worker_ends_a_refused_key_with_a_json_line(
    server: Server, start_worker: Callable[..., WorkerRun]
) -> None:
    worker = start_worker(server.url, "ql_" + "z" * 43, env=clean_env(QUEUELOG_LOG_FORMAT="json"))
    assert worker.wait() == EXIT_KEY_REFUSED
    assert worker.stderr() == ""
    lines = json_lines(worker.stdout())
    assert [entry["level"] for entry in lines] == ["info", "error"], lines
    assert "UNAUTHENTICATED" in lines[-1]["message"], lines[-1]


def test_the_json_formatter_keeps_a_traceback_and_extra_fields_on_one_line() -> None:
    import logging

    try:
        raise RuntimeError("a bug\non two lines")
    except RuntimeError:
        record = logging.getLogger("queuelog.test").makeRecord(
            "queuelog.test", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info(),
            extra={"job_id": 7},
        )  # fmt: skip
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"], entry["job_id"]) == (
        "error",
        "queuelog.test",
        "failed here",
        7,
    )
    assert entry["exception"].startswith(TRACEBACK) and "a bug\non two lines" in entry["exception"]


def test_a_bad_log_format_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="QUEUELOG_LOG_FORMAT"):
        Settings.from_env({"QUEUELOG_LOG_FORMAT": "xml"})
    result = queuelog(
        "worker", "--url", "http://127.0.0.1:9", "--key", "k", "--handlers", "x:Y", cwd=tmp_path,
        env={"QUEUELOG_LOG_FORMAT": "yaml"},
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "QUEUELOG_LOG_FORMAT" in result.stderr and "'yaml'" in result.stderr


# --- copy-database's next id ---------------------------------------------------------------------


@pytest.fixture
def postgres_database() -> Iterator[str]:
    require_backend("postgresql")
    name = f"queuelog_newcomer_{os.getpid()}_{time.monotonic_ns()}"
    postgres_admin(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_copy_reports_the_id_the_next_job_gets_after_idempotent_replays(
    tmp_path: Path, postgres_database: str
) -> None:
    source = launch_server(tmp_path, database_url=f"sqlite:///{tmp_path / 'old.db'}", job_types=JOB_TYPES)
    try:
        producer = source.make_key("p", "producer")
        welcome = {"input": {"type": "n_quick", "idempotencyKey": "welcome-1"}}
        first = source.gql(ENQUEUE, welcome, key=producer).ok()["enqueueJob"]
        for _ in range(3):  # each replay returns the same job, and on SQLite consumes an id
            again = source.gql(ENQUEUE, welcome, key=producer).ok()["enqueueJob"]
            assert again == {"created": False, "job": first["job"]}
        admin = source.admin_key
    finally:
        source.stop()

    copied = queuelog("copy-database", "--from", source.database_url, "--to", postgres_database, cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    found = re.search(r"new jobs start at id (\d+)$", copied.stdout.rstrip())
    assert found, copied.stdout
    next_id = int(found.group(1))
    assert next_id > int(first["job"]["id"]) + 1, "the replays' ids were not counted as given out"

    home = tmp_path / "new"
    home.mkdir()
    target = launch_server(home, database_url=postgres_database, admin_key=admin, job_types=JOB_TYPES)
    try:
        made = target.gql(ENQUEUE, {"input": {"type": "n_quick"}}, key=producer).ok()["enqueueJob"]
    finally:
        target.stop()
    assert int(made["job"]["id"]) == next_id
