"""Shared fixtures: real `queuelog serve` processes on real databases, spoken to over HTTP.

Every test that uses `server`, `start_server` or `databases` runs once per backend
(`backend`): on a fresh SQLite file, and on a fresh PostgreSQL database (a copy of a template
migrated once per session, dropped when the session ends). PostgreSQL comes from
QUEUELOG_TEST_POSTGRES_URL (default: the local server's `test` database); when it does not
answer, those runs skip and say why, unless QUEUELOG_TEST_REQUIRE_POSTGRES=1 (CI), where they
fail. QUEUELOG_TEST_BACKENDS (default "sqlite,postgresql") chooses: `sqlite` or `postgresql`
runs only one.

Servers, CLI runs (`run_queuelog`) and the SDK's worker processes are forks of a process
that imported queuelog once (server_zygote.py), which saves each about half a second of CPU;
QUEUELOG_TEST_FORK_SERVERS=0 starts each from a fresh interpreter instead.

`start_server(**settings)` starts one (settings are `queuelog serve` flags, e.g.
`job_types="email,report"`, `lease_seconds=2`) and returns a `Server` with its URL, the
bootstrap admin key and `make_key()` for keys of other roles. `server` is a ready-made
module-scoped one for tests that need nothing special; `serving(backend, ...)` makes other
module-scoped ones.

Tests look into a server's database with `Server.sql(text, **params)` (SQLAlchemy `text()`,
`:name` parameters, committed), the same statement on both backends. What differs is
wrapped: `Server.timestamp(datetime)` is the value to write into a timestamp column
(integer microseconds since the epoch on SQLite, a `timestamptz` on PostgreSQL), and
`stored_time(value)` reads one back as an aware datetime.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_zygote import ForkedProcess, Zygote
from sqlalchemy import Connection, Engine, bindparam, text

from queuelog import keys as key_admin
from queuelog.storage.engine import create_sync_engine, dialect_of
from queuelog.storage.schema.types import from_micros, to_micros

DEFAULT_JOB_TYPES = "email,report,resize,noop"
POSTGRES_URL = os.environ.get("QUEUELOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("QUEUELOG_TEST_REQUIRE_POSTGRES") == "1"
BACKENDS = [b for b in os.environ.get("QUEUELOG_TEST_BACKENDS", "sqlite,postgresql").split(",") if b]
# Several servers start at once on a busy 2-core CI machine (-n 6): 30 s is reported to be
# too little there. A server that exits is noticed at once; only a hung start waits this long.
STARTUP_TIMEOUT = 90.0
KEY_PATTERN = re.compile(r"ql_[A-Za-z0-9_-]{20,}")
# None: every process starts from a fresh interpreter (the module's docstring says why not).
SERVER_ZYGOTE = Zygote() if os.environ.get("QUEUELOG_TEST_FORK_SERVERS", "1") != "0" else None

# One SQL statement run by a test beside a server: `run("SELECT ... WHERE id = :id", id=1)`.
SqlRunner = Callable[..., list[tuple[Any, ...]]]

_names = iter(range(1, 1_000_000))


def run_queuelog(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `python -m queuelog ARGS` with no QUEUELOG_* variables but those in `env`; a run
    that outlasts `timeout` fails the test, naming the command."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    clean.update(env or {})
    try:
        if SERVER_ZYGOTE is not None and SERVER_ZYGOTE.can_fork(clean):
            return SERVER_ZYGOTE.run(list(args), env=clean, cwd=cwd, timeout=timeout)
        return subprocess.run(
            [sys.executable, "-m", "queuelog", *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=clean,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"`queuelog {' '.join(args)}` still running after {timeout}s") from exc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listens_on(process: subprocess.Popen[bytes] | ForkedProcess, port: int) -> bool:
    """Whether `process` or a process of its session holds the listening socket on `port`.

    free_port() releases its port before the server binds it, so another test's server can
    take it meanwhile; its /healthz would then answer for this one (seen in CI)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in session_pids(process.pid):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                        return True
    return False


def session_pids(session: int) -> list[int]:
    """The processes of the session `session` leads (a server and its `--workers`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[3]) == session:
                    pids.append(int(entry))
    return pids


def backend_of(database_url: str) -> str:
    """ "sqlite" or "postgresql"."""
    return dialect_of(database_url)


def stored_time(value: int | datetime | None) -> datetime | None:
    """A timestamp column as read by `Server.sql`, as an aware UTC datetime (SQLite stores
    integer microseconds since the epoch, PostgreSQL a timestamptz)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return from_micros(int(value))


def timestamp_value(backend: str, moment: datetime) -> int | datetime:
    """The value to bind for a timestamp column of a `backend` database (see Server.timestamp)."""
    assert moment.tzinfo is not None, "timestamps are aware (UTC)"
    return moment if backend == "postgresql" else to_micros(moment)


def _run(connection: Connection, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """`statement` with `params`; a list or tuple value is expanded (`WHERE id IN :ids`)."""
    clause = text(statement)
    lists = [name for name, value in params.items() if isinstance(value, list | tuple)]
    if lists:
        clause = clause.bindparams(*(bindparam(name, expanding=True) for name in lists))
    result = connection.execute(clause, params)
    return [tuple(row) for row in result] if result.returns_rows else []


@dataclass
class GraphQLResponse:
    status: int
    body: dict[str, Any]

    @property
    def data(self) -> Any:
        return self.body.get("data")

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.body.get("errors") or []

    @property
    def codes(self) -> list[str]:
        return [e.get("extensions", {}).get("code") for e in self.errors]

    def ok(self) -> Any:
        """The data, asserting there were no errors."""
        assert self.status == 200 and not self.errors, (self.status, self.body)
        return self.data


def http_client(timeout: float) -> httpx.Client:
    """An httpx client that drops an idle connection before the server does.

    uvicorn closes a connection idle for 5 s, and httpx keeps one for 5 s: a request sent
    on it at that moment meets a closed socket (`RemoteProtocolError: Server disconnected`),
    which a loaded CI machine made happen. Expiring ours after 1 s leaves no such moment.
    """
    return httpx.Client(timeout=timeout, limits=httpx.Limits(keepalive_expiry=1.0))


@dataclass
class Server:
    url: str
    database_url: str
    admin_key: str
    process: subprocess.Popen[bytes] | ForkedProcess
    log_path: Path
    client: httpx.Client = field(default_factory=lambda: http_client(60))
    _engine: Engine | None = field(default=None, repr=False)

    @property
    def graphql_url(self) -> str:
        return f"{self.url}/graphql"

    @property
    def ws_url(self) -> str:
        return self.graphql_url.replace("http://", "ws://")

    @property
    def backend(self) -> str:
        return backend_of(self.database_url)

    def gql(
        self, query: str, variables: dict[str, Any] | None = None, key: str | None = None
    ) -> GraphQLResponse:
        """POST a GraphQL operation with `key` (default: the admin key; "" for none)."""
        key = self.admin_key if key is None else key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = self.client.post(
            self.graphql_url, json={"query": query, "variables": variables or {}}, headers=headers
        )
        try:
            body = response.json()
        except ValueError:
            body = {"raw": response.text}
        return GraphQLResponse(response.status_code, body)

    @property
    def engine(self) -> Engine:
        """An engine on the server's database, as the CLI opens it (on SQLite its writes
        queue on the servers' write lock)."""
        if self._engine is None:
            self._engine = create_sync_engine(self.database_url)
        return self._engine

    def sql(self, statement: str, **params: Any) -> list[tuple[Any, ...]]:
        """Run one statement (`:name` parameters; a list value for `IN :name`) on the server's
        database and commit it; the rows it returns, as tuples ([] when it returns none)."""
        with self.engine.begin() as connection:
            return _run(connection, statement, params)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[SqlRunner]:
        """Run several statements that all see one state of the database: REPEATABLE READ on
        PostgreSQL; on SQLite the transaction holds the write lock throughout."""
        engine = self.engine
        if self.backend == "postgresql":
            engine = engine.execution_options(isolation_level="REPEATABLE READ")  # type: ignore[assignment]
        with engine.begin() as connection:
            yield lambda statement, **params: _run(connection, statement, params)

    def timestamp(self, moment: datetime) -> int | datetime:
        """The value to bind for a timestamp column: `server.sql("... SET run_at = :t",
        t=server.timestamp(when))`."""
        return timestamp_value(self.backend, moment)

    def make_key(self, name: str, *roles: str, max_priority: str | None = None) -> str:
        """Create a key directly in the server's database (as `queuelog keys create` does)."""
        from queuelog.keys import parse_priority, parse_role

        _, plaintext = key_admin.create_key(
            self.engine,
            name,
            [parse_role(r) for r in roles],
            parse_priority(max_priority) if max_priority else None,
        )
        return plaintext

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.client.close()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def migrate(url: str) -> str:
    """Bring the database at `url` to the current schema in this process (no CLI start);
    returns `url`."""
    from queuelog.storage.migrate import upgrade_to_head

    engine = create_sync_engine(url)
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()
    return url


def sqlite_plan(tmp_path: Path, sql: str, params: dict[str, Any]) -> str:
    """EXPLAIN QUERY PLAN of a statement on a freshly migrated SQLite file, one line."""
    import sqlite3

    database = tmp_path / "plan.db"
    migrate(f"sqlite:///{database}")
    with contextlib.closing(sqlite3.connect(database)) as connection:
        rows = connection.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return " | ".join(row[-1] for row in rows)


def serve_command(port: int, database_url: str, workers: int = 1, **settings: Any) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "queuelog",
        "serve",
        "--port",
        str(port),
        "--database-url",
        database_url,
        "--log-level",
        "warning",
    ]
    if workers != 1:
        command += ["--workers", str(workers)]
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            command.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            command += [flag, str(value)]
    return command


def start_queuelog(
    command: list[str], *, env: dict[str, str], cwd: Path, log_path: Path, forkable: bool = True
) -> subprocess.Popen[bytes] | ForkedProcess:
    """Start `python -m queuelog ...` (`command` as serve_command makes it) in a session of its
    own, its output into `log_path`: forked from the zygote where it can be (not `forkable`:
    a server with --workers > 1, whose worker processes are spawned from a fresh interpreter)."""
    if SERVER_ZYGOTE is not None and forkable and SERVER_ZYGOTE.can_fork(env):
        return SERVER_ZYGOTE.spawn(command[3:], env=env, cwd=cwd, log_path=log_path)
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )


def launch_server(
    tmp_path: Path,
    *,
    database_url: str | None = None,
    workers: int = 1,
    port: int | None = None,
    env: dict[str, str] | None = None,
    admin_key: str | None = None,
    **settings: Any,
) -> Server:
    """Start `queuelog serve` and wait until it answers /healthz on its own port.

    A port from free_port() that another test's server took meanwhile is tried again with
    another port; a port the caller chose is not."""
    settings.setdefault("job_types", DEFAULT_JOB_TYPES)
    database_url = database_url or f"sqlite:///{tmp_path / 'queuelog.db'}"
    process_env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    process_env.update(env or {})
    for _ in range(3):
        chosen = port or free_port()
        log_path = tmp_path / f"server-{chosen}.log"
        command = serve_command(chosen, database_url, workers, **settings)
        process = start_queuelog(
            command, env=process_env, cwd=tmp_path, log_path=log_path, forkable=workers == 1
        )
        serving = wait_until_serving(process, chosen, log_path)
        found = KEY_PATTERN.search(log_path.read_text())
        admin_key = admin_key or (found.group(0) if found else None)
        if serving:
            break
        if port is not None or "address already in use" not in log_path.read_text():
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()}")
    else:
        raise RuntimeError(f"no free port after three tries:\n{log_path.read_text()}")
    if admin_key is None:
        raise RuntimeError("no bootstrap key printed; pass admin_key= for an existing database")
    return Server(f"http://127.0.0.1:{chosen}", database_url, admin_key, process, log_path)


def wait_until_serving(process: subprocess.Popen[bytes] | ForkedProcess, port: int, log_path: Path) -> bool:
    """True once `process` answers /healthz on `port`; False if it exited first."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while process.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            healthy = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            if healthy and listens_on(process, port):
                return True
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"server did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    return False


class PostgresDatabases:
    """The PostgreSQL databases of this test session.

    A fresh database is a copy of a template migrated once per session (`CREATE DATABASE ...
    TEMPLATE`: a fraction of a second, where migrating each one took seconds), or an empty
    one when a test migrates it itself. Its commits do not wait for the WAL to reach the disk
    (synchronous_commit off, what SQLite's synchronous=NORMAL does for queuelog): nothing a
    test does crashes PostgreSQL itself, and an fsync per commit made the PostgreSQL half of
    the suite a third slower. Databases are dropped on a background thread once their test
    is done (each DROP DATABASE waits for a checkpoint), and the rest when the session ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._template: str | None = None
        self._drops: queue.Queue[str | None] = queue.Queue()
        self._dropper: threading.Thread | None = None
        self._failures: list[str] = []

    def url(self, name: str) -> str:
        return POSTGRES_URL.rsplit("/", 1)[0] + "/" + name

    def create(self, *, migrated: bool = True) -> str:
        name = f"queuelog_test_{os.getpid()}_{next(_names)}"
        template = f' TEMPLATE "{self.template()}"' if migrated else ""
        postgres_admin(
            f'CREATE DATABASE "{name}"{template}', f'ALTER DATABASE "{name}" SET synchronous_commit = off'
        )
        return name

    def template(self) -> str:
        with self._lock:
            if self._template is None:
                from queuelog.storage.migrate import upgrade_to_head

                name = f"queuelog_template_{os.getpid()}"
                postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                postgres_admin(f'CREATE DATABASE "{name}"')
                engine = create_sync_engine(self.url(name))
                try:
                    upgrade_to_head(engine)
                finally:
                    engine.dispose()
                self._template = name
            return self._template

    def drop_later(self, name: str) -> None:
        with self._lock:
            if self._dropper is None:
                self._dropper = threading.Thread(target=self._drop_queued, name="drop-databases", daemon=True)
                self._dropper.start()
        self._drops.put(name)

    def _drop_queued(self) -> None:
        while (name := self._drops.get()) is not None:
            try:
                postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as exc:  # reported at the end of the session
                self._failures.append(f"{name}: {type(exc).__name__}: {exc}")

    def finish(self) -> list[str]:
        """Drop what is left (the template too); the databases that could not be dropped."""
        if self._dropper is not None:
            self._drops.put(None)
            self._dropper.join()
        if self._template is not None:
            with contextlib.suppress(Exception):
                postgres_admin(f'DROP DATABASE IF EXISTS "{self._template}" WITH (FORCE)')
        return self._failures


POSTGRES = PostgresDatabases()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    left = POSTGRES.finish()
    if left:
        print(f"\nconftest: {len(left)} test databases were not dropped: {left[:3]}", file=sys.stderr)


class Databases:
    """Fresh databases of one backend: SQLite files, or PostgreSQL databases dropped after."""

    def __init__(self, backend: str, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.backend = backend
        self._tmp = tmp_path_factory
        self._created: list[str] = []

    def fresh(self, *, migrated: bool = True) -> str:
        """The URL of a new database: at the current schema, or (`migrated=False`) empty.
        SQLite files always start empty (a server migrates its own)."""
        if self.backend == "sqlite":
            return f"sqlite:///{self._tmp.mktemp('db') / 'queuelog.db'}"
        name = POSTGRES.create(migrated=migrated)
        self._created.append(name)
        return POSTGRES.url(name)

    def migrated(self) -> str:
        """The URL of a new database at the current schema, SQLite files included."""
        return migrate(self.fresh())

    def drop_all(self) -> None:
        for name in self._created:
            POSTGRES.drop_later(name)
        self._created.clear()


def postgres_admin(*statements: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as connection:
        for sql in statements:
            connection.execute(sql)  # type: ignore[arg-type]


_unreachable: dict[str, str | None] = {}


def postgres_unreachable() -> str | None:
    """Why PostgreSQL cannot be used for tests, or None when it answers (asked once)."""
    if "reason" not in _unreachable:
        try:
            postgres_admin("SELECT 1")
        except Exception as exc:
            _unreachable["reason"] = f"PostgreSQL at {POSTGRES_URL} does not answer ({type(exc).__name__})"
        else:
            _unreachable["reason"] = None
    return _unreachable["reason"]


def require_backend(backend: str) -> None:
    """Skip (or, with QUEUELOG_TEST_REQUIRE_POSTGRES=1, fail) when PostgreSQL does not answer."""
    if backend == "postgresql":
        reason = postgres_unreachable()
        if reason is not None:
            if REQUIRE_POSTGRES:
                pytest.fail(reason + " and QUEUELOG_TEST_REQUIRE_POSTGRES=1")
            pytest.skip(reason)


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The database every server of this test runs on: "sqlite" or "postgresql"."""
    require_backend(request.param)
    return request.param


@pytest.fixture
def databases(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    made = Databases(backend, tmp_path_factory)
    yield made
    made.drop_all()


@pytest.fixture
def start_server(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(**kwargs: Any) -> Server:
        kwargs.setdefault("database_url", databases.fresh())
        server = launch_server(tmp_path_factory.mktemp("server"), **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@contextlib.contextmanager
def serving(backend: str, tmp_path_factory: pytest.TempPathFactory, **settings: Any) -> Iterator[Server]:
    """A server on a fresh database of `backend`, for module-scoped fixtures:
    `with serving(backend, tmp_path_factory, lease_seconds=2) as server: yield server`."""
    made = Databases(backend, tmp_path_factory)
    try:
        running = launch_server(tmp_path_factory.mktemp("server"), database_url=made.fresh(), **settings)
        try:
            yield running
        finally:
            running.stop()
    finally:
        made.drop_all()


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A default server shared by the tests of one module (make fresh keys per test)."""
    with serving(backend, tmp_path_factory) as running:
        yield running


@pytest.fixture
def unique() -> Callable[[str], str]:
    """unique("producer") -> "producer-17": key names that never collide within a run."""
    return lambda prefix: f"{prefix}-{next(_names)}"
