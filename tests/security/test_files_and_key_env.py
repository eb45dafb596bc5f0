"""Issue 14, part 3: SQLite files only their owner can read, and API keys kept out of `ps`.

Attacked: a SQLite database, its -wal and -shm (and the write lock beside them) as `queuelog
serve` creates them under umask 022 and 000; the same files as the app's own connection
(storage/sqlite/database.py) and the CLI's engine (storage/engine.py) create them, from relative and
absolute URLs; a database an older version left 0644 (with its -wal and -shm), opened by
`queuelog migrate`, by the app's connection and by `queuelog copy-database` as its source; a
`queuelog worker` started with its key in QUEUELOG_API_KEY; the example producer and worker
the same way; `Client`, `AsyncClient` and `Worker` built with no key argument.

Proven: every one of those files is 0600, whatever the umask, and a looser one is tightened
on open with one warning line naming it; in-memory databases still open and leave no file;
`queuelog worker` and the SDK take the key from QUEUELOG_API_KEY (an explicit key wins), the
worker claims and completes a job with it and its command line (/proc/PID/cmdline) holds no
key; with no key at all the worker exits non-zero with one stderr line naming the variable
and no traceback, and the SDK raises a ValueError naming it at construction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import (
    KEY_PATTERN,
    POSTGRES,
    STARTUP_TIMEOUT,
    Server,
    free_port,
    launch_server,
    require_backend,
    serve_command,
)

KEY_VARIABLE = "QUEUELOG_API_KEY"
OWNER_ONLY = 0o600
CLI_TIMEOUT = 60
WAIT = 60.0  # only bounds waits: a busy machine may take a while
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
JOB = "query($id: ID!) { job(id: $id) { status result workerId } }"
HANDLERS_MODULE = """
def double(job):
    return {"doubled": job.payload["n"] * 2}


HANDLERS = {"keyenv": double}
"""
# Opens a database the way the app does (storage/sqlite/database.py) or the CLI does (engine.py),
# writes to it and, with the connection still open (so the -wal and -shm exist), prints the
# mode of every file beside it as JSON.
OPEN_AND_WRITE = """
import json, os, sys
from pathlib import Path

opener, url = sys.argv[1], sys.argv[2]
if opener == "app":
    from queuelog.storage.sqlite.connection import connect, database_path

    connection = connect(database_path(url))
    connection.execute("CREATE TABLE IF NOT EXISTS t (x)")
    connection.execute("INSERT INTO t VALUES (1)")
else:
    from queuelog.storage.engine import create_sync_engine

    engine = create_sync_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x)")
        connection.exec_driver_sql("INSERT INTO t VALUES (1)")
database = Path(url.removeprefix("sqlite:///"))
print(json.dumps({p.name: p.stat().st_mode & 0o777 for p in database.parent.glob(database.name + "*")}))
"""


# --- processes -------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    return {**env, **extra}


def under_umask(umask: int, command: list[str]) -> list[str]:
    """`command`, run by a shell that first sets `umask` (the test process's stays as it is)."""
    return ["sh", "-c", f'umask {umask:03o} && exec "$@"', "sh", *command]


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=CLI_TIMEOUT
    )


def queuelog(*args: str, cwd: Path, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    return run(under_umask(umask, [sys.executable, "-m", "queuelog", *args]), cwd)


def serve_under_umask(home: Path, database_url: str, umask: int) -> Server:
    """`queuelog serve` on `database_url`, started with `umask`, once /healthz answers."""
    port = free_port()
    log_path = home / f"server-{port}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            under_umask(umask, serve_command(port, database_url, job_types="keyenv")),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=home,
            start_new_session=True,
        )
    server = Server(f"http://127.0.0.1:{port}", database_url, "", process, log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not _healthy(server.url):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"server did not start:\n{server.log()}")
        time.sleep(0.05)
    found = KEY_PATTERN.search(server.log())
    assert found, server.log()
    server.admin_key = found.group(0)
    return server


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# --- files -----------------------------------------------------------------------------------


def modes_beside(database: Path) -> dict[str, int]:
    """The permission bits of the database and every file SQLite or queuelog keeps beside it."""
    return {p.name: p.stat().st_mode & 0o777 for p in database.parent.glob(database.name + "*")}


def assert_owner_only(modes: dict[str, int], database: str) -> None:
    expected = {database, f"{database}-wal", f"{database}-shm"}
    assert expected <= set(modes), f"-wal and -shm should exist while a connection is open: {modes}"
    loose = {name: f"{mode:04o}" for name, mode in modes.items() if mode != OWNER_ONLY}
    assert not loose, f"readable or writable by others than the owner: {loose}"


@contextlib.contextmanager
def left_by_an_older_version(database: Path) -> Iterator[None]:
    """The database, its -wal and its -shm made 0644 (as queuelog made them under umask 022),
    held open meanwhile (an older server still running) so that the -wal and -shm stay."""
    with closing(sqlite3.connect(database, isolation_level=None)) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE IF NOT EXISTS older (x)")
        connection.execute("INSERT INTO older VALUES (1)")
        for name in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
            os.chmod(name, 0o644)
        assert set(modes_beside(database).values()) == {0o644}
        yield


def assert_one_warning(stderr: str, database: Path) -> None:
    lines = [line for line in stderr.splitlines() if "0600" in line]
    assert len(lines) == 1, f"want one line about the tightened files:\n{stderr}"
    assert str(database) in lines[0] and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-022", "umask-000"])
def test_serve_creates_the_database_wal_and_shm_owner_only(tmp_path: Path, umask: int) -> None:
    database = tmp_path / "fresh.db"
    server = serve_under_umask(tmp_path, f"sqlite:///{database}", umask)
    try:
        job = server.gql(ENQUEUE, {"input": {"type": "keyenv", "payload": {"n": 1}}}).ok()
        assert job["enqueueJob"]["job"]["id"]
        modes = modes_beside(database)
    finally:
        server.stop()
    assert_owner_only(modes, database.name)


@pytest.mark.parametrize("opener", ["app", "engine"])
@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_every_opener_creates_owner_only_files(tmp_path: Path, opener: str, form: str) -> None:
    url = "sqlite:///made.db" if form == "relative" else f"sqlite:///{tmp_path / 'made.db'}"
    result = run(under_umask(0o000, [sys.executable, "-c", OPEN_AND_WRITE, opener, url]), tmp_path)
    assert result.returncode == 0, result.stderr
    assert_owner_only(json.loads(result.stdout), "made.db")
    assert result.stderr == "", "a file it created itself is no reason for a warning"


@pytest.mark.parametrize("cli", [True, False], ids=["cli-engine", "app-connection"])
def test_a_database_left_0644_is_tightened_on_open_with_one_warning(tmp_path: Path, cli: bool) -> None:
    database = tmp_path / "older.db"
    url = f"sqlite:///{database}"
    with left_by_an_older_version(database):
        if cli:
            result = queuelog("migrate", "--database-url", url, cwd=tmp_path)
        else:
            result = run([sys.executable, "-c", OPEN_AND_WRITE, "app", url], tmp_path)
        assert result.returncode == 0, result.stderr
        assert_owner_only(modes_beside(database), database.name)
    assert_one_warning(result.stderr, database)
    again = queuelog("migrate", "--database-url", url, cwd=tmp_path)
    assert again.returncode == 0 and again.stderr == "", "warned again about files already 0600"


def create_worker_key(database: Path, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    """`queuelog keys create` of a WORKER key named w, in the database's directory."""
    url = f"sqlite:///{database}"
    return queuelog(
        "keys",
        "create",
        "--name",
        "w",
        "--role",
        "worker",
        "--database-url",
        url,
        cwd=database.parent,
        umask=umask,
    )


def test_keys_create_makes_an_owner_only_database(tmp_path: Path) -> None:
    database = tmp_path / "keys.db"
    result = create_worker_key(database, umask=0o000)
    assert result.returncode == 0, result.stderr
    assert modes_beside(database) == {"keys.db": OWNER_ONLY}


def test_copy_database_tightens_its_sqlite_source(tmp_path: Path) -> None:
    """The target is always PostgreSQL (a SQLite one is refused: tests/storage/test_copy_to_postgres.py);
    the source is the SQLite file copy-database touches."""
    require_backend("postgresql")
    database = tmp_path / "source.db"
    made = create_worker_key(database)
    assert made.returncode == 0, made.stderr
    name = POSTGRES.create()
    try:
        with left_by_an_older_version(database):
            result = queuelog(
                "copy-database", "--from", f"sqlite:///{database}", "--to", POSTGRES.url(name), cwd=tmp_path
            )
            assert result.returncode == 0 and result.stdout.startswith("copied 0 jobs"), result.stderr
            assert_owner_only(modes_beside(database), database.name)
    finally:
        POSTGRES.drop_later(name)
    assert_one_warning(result.stderr, database)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///rel.db", "rel.db"),
        ("sqlite:////abs/dir/q.db", "/abs/dir/q.db"),
        ("sqlite:///file:dir/q.db?uri=true", "dir/q.db"),
        ("sqlite://", None),
        ("sqlite:///:memory:", None),
        ("sqlite:///file:shared?mode=memory&cache=shared&uri=true", None),
    ],
)
def test_the_file_protected_is_the_one_the_url_names(url: str, path: str | None) -> None:
    """Memory databases (which queuelog's server refuses anyway) have no file to protect."""
    from queuelog.storage.engine import sqlite_file

    assert sqlite_file(url) == path


# --- the key in the environment ----------------------------------------------------------------


@pytest.fixture(scope="module")
def key_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = launch_server(tmp_path_factory.mktemp("key-env"), job_types="keyenv,email,report")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def new_key(key_server: Server, unique: Callable[[str], str]) -> Callable[[str], tuple[str, str]]:
    """new_key("worker") -> (name, key)."""

    def make(role: str) -> tuple[str, str]:
        name = unique(f"keyenv-{role}")
        return name, key_server.make_key(name, role)

    return make


def worker_command(url: str, handlers: str) -> list[str]:
    return [sys.executable, "-m", "queuelog", "worker", "--url", url, "--handlers", handlers]


def wait_for_job(server: Server, job_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while (job := server.gql(JOB, {"id": job_id}).ok()["job"])["status"] != status:
        assert time.monotonic() < deadline, f"job {job_id} still {job['status']}, not {status}"
        time.sleep(0.05)
    return job


def stop(process: subprocess.Popen[Any]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc/PID/cmdline")
def test_worker_takes_its_key_from_the_environment_and_ps_shows_none(
    key_server: Server, new_key: Callable[[str], tuple[str, str]], tmp_path: Path
) -> None:
    name, key = new_key("worker")
    (tmp_path / "keyenvmod.py").write_text(HANDLERS_MODULE)
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log_file:
        worker = subprocess.Popen(
            worker_command(key_server.url, "keyenvmod:HANDLERS"),
            cwd=tmp_path,
            env=clean_env(QUEUELOG_API_KEY=key),
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    try:
        enqueued = key_server.gql(ENQUEUE, {"input": {"type": "keyenv", "payload": {"n": 21}}}).ok()
        job = wait_for_job(key_server, enqueued["enqueueJob"]["job"]["id"], "COMPLETED")
        assert job["result"] == {"doubled": 42} and job["workerId"] == name, job
        command_line = Path(f"/proc/{worker.pid}/cmdline").read_bytes()
        assert b"worker" in command_line and key.encode() not in command_line
        assert not KEY_PATTERN.search(command_line.decode(errors="replace")), command_line
    finally:
        status = stop(worker)
    assert status == 0, log_path.read_text()
    assert key not in log_path.read_text()


def test_an_explicit_key_flag_still_works_and_wins(
    key_server: Server, new_key: Callable[[str], tuple[str, str]], tmp_path: Path
) -> None:
    name, key = new_key("worker")
    (tmp_path / "keyenvmod.py").write_text(HANDLERS_MODULE)
    worker = subprocess.Popen(
        [*worker_command(key_server.url, "keyenvmod:HANDLERS"), "--key", key],
        cwd=tmp_path,
        env=clean_env(QUEUELOG_API_KEY="ql_" + "0" * 43),  # not a key: --key must be the one used
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        enqueued = key_server.gql(ENQUEUE, {"input": {"type": "keyenv", "payload": {"n": 1}}}).ok()
        job = wait_for_job(key_server, enqueued["enqueueJob"]["job"]["id"], "COMPLETED")
        assert job["workerId"] == name
    finally:
        assert stop(worker) == 0


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_worker_without_any_key_says_so_in_one_line(tmp_path: Path, value: str | None) -> None:
    (tmp_path / "keyenvmod.py").write_text(HANDLERS_MODULE)
    env = clean_env() if value is None else clean_env(QUEUELOG_API_KEY=value)
    result = run(worker_command("http://127.0.0.1:9", "keyenvmod:HANDLERS"), tmp_path, env)
    everything = result.stdout + result.stderr
    assert result.returncode not in (0, None) and "Traceback" not in everything, everything
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("queuelog: error:"), result.stderr
    assert KEY_VARIABLE in lines[0] and "--key" in lines[0]


def test_worker_help_points_to_the_variable(tmp_path: Path) -> None:
    result = run([sys.executable, "-m", "queuelog", "worker", "--help"], tmp_path)
    assert result.returncode == 0 and KEY_VARIABLE in result.stdout, result.stdout


def test_the_examples_run_with_keys_from_the_environment(
    key_server: Server, new_key: Callable[[str], tuple[str, str]]
) -> None:
    _, worker_key = new_key("worker")
    _, producer_key = new_key("producer")
    worker = subprocess.Popen(
        worker_command(key_server.url, "handlers:HANDLERS"),
        cwd=EXAMPLES,
        env=clean_env(QUEUELOG_API_KEY=worker_key),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        producer = run(
            [sys.executable, str(EXAMPLES / "producer.py"), key_server.url],
            EXAMPLES,
            clean_env(QUEUELOG_API_KEY=producer_key),
        )
    finally:
        status = stop(worker)
    assert producer.returncode == 0, producer.stderr
    lines = producer.stdout.strip().splitlines()
    assert len(lines) == 4 and all(" COMPLETED " in line for line in lines), producer.stdout
    assert status == 0


# --- the SDK ---------------------------------------------------------------------------------


def test_clients_take_the_key_from_the_environment(
    key_server: Server, new_key: Callable[[str], tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from queuelog.client import AsyncClient, Client

    name, key = new_key("producer")
    monkeypatch.setenv(KEY_VARIABLE, key)
    with Client(key_server.url) as queue:
        job = queue.enqueue("keyenv", {"n": 3})
        assert queue.get(job.id).status == "PENDING"

    async def through_async() -> str:
        async with AsyncClient(key_server.url) as client:
            return (await client.enqueue("keyenv", {"n": 4})).status

    assert asyncio.run(through_async()) == "PENDING"
    created_by = key_server.sql("SELECT created_by FROM jobs WHERE id = :id", id=int(job.id))
    assert created_by == [(name,)]


def test_an_explicit_key_wins_over_the_environment(
    key_server: Server, new_key: Callable[[str], tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from queuelog.client import Client

    _, key = new_key("producer")
    monkeypatch.setenv(KEY_VARIABLE, "ql_" + "0" * 43)
    with Client(key_server.url, key) as queue:  # the positional form of before
        assert queue.enqueue("keyenv", {"n": 5}).status == "PENDING"


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
@pytest.mark.parametrize("kind", ["Client", "AsyncClient", "Worker"])
def test_no_key_anywhere_is_a_clear_error_at_construction(
    monkeypatch: pytest.MonkeyPatch, kind: str, value: str | None
) -> None:
    from queuelog import client, worker

    if value is None:
        monkeypatch.delenv(KEY_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(KEY_VARIABLE, value)
    make: dict[str, Callable[[], object]] = {
        "Client": lambda: client.Client("http://127.0.0.1:9"),
        "AsyncClient": lambda: client.AsyncClient("http://127.0.0.1:9"),
        "Worker": lambda: worker.Worker("http://127.0.0.1:9", handlers={"keyenv": lambda job: None}),
    }
    threads = threading.active_count()
    with pytest.raises(ValueError, match=KEY_VARIABLE):
        make[kind]()
    assert threading.active_count() == threads, "a refused Client left its loop thread running"
