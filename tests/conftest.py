"""Shared fixtures: real `queuelog serve` processes on real databases, spoken to over HTTP.

Every test that uses `server` or `start_server` runs once per backend (`backend`): a fresh
SQLite file, and a fresh PostgreSQL database created for it and dropped after. PostgreSQL
comes from QUEUELOG_TEST_POSTGRES_URL (default: the local server's `test` database); when
it does not answer, those runs skip and say why, unless QUEUELOG_TEST_REQUIRE_POSTGRES=1
(CI), where they fail. QUEUELOG_TEST_BACKENDS=sqlite (or postgresql) runs only one.

`start_server(**settings)` starts one (settings are `queuelog serve` flags, e.g.
`job_types="email,report"`, `lease_seconds=2`) and returns a `Server` with its URL, the
bootstrap admin key and `make_key()` for keys of other roles. `server` is a ready-made
module-scoped one for tests that need nothing special.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from queuelog import keys as key_admin
from queuelog.storage.engine import create_sync_engine

DEFAULT_JOB_TYPES = "email,report,resize,noop"
POSTGRES_URL = os.environ.get("QUEUELOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("QUEUELOG_TEST_REQUIRE_POSTGRES") == "1"
BACKENDS = [b for b in os.environ.get("QUEUELOG_TEST_BACKENDS", "sqlite").split(",") if b]
STARTUP_TIMEOUT = 30.0
KEY_PATTERN = re.compile(r"ql_[A-Za-z0-9_-]{20,}")


_names = iter(range(1, 1_000_000))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@dataclass
class Server:
    url: str
    database_url: str
    admin_key: str
    process: subprocess.Popen[bytes]
    log_path: Path
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))

    @property
    def graphql_url(self) -> str:
        return f"{self.url}/graphql"

    @property
    def ws_url(self) -> str:
        return self.graphql_url.replace("http://", "ws://")

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

    def make_key(self, name: str, *roles: str, max_priority: str | None = None) -> str:
        """Create a key directly in the server's database (as `queuelog keys create` does)."""
        from queuelog.keys import parse_priority, parse_role

        engine = create_sync_engine(self.database_url)
        try:
            _, plaintext = key_admin.create_key(
                engine,
                name,
                [parse_role(r) for r in roles],
                parse_priority(max_priority) if max_priority else None,
            )
        finally:
            engine.dispose()
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
    """Start `queuelog serve` and wait until /healthz answers."""
    settings.setdefault("job_types", DEFAULT_JOB_TYPES)
    database_url = database_url or f"sqlite:///{tmp_path / 'queuelog.db'}"
    port = port or free_port()
    log_path = tmp_path / f"server-{port}.log"
    process_env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    process_env.update(env or {})
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            serve_command(port, database_url, workers, **settings),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=process_env,
            cwd=tmp_path,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"server did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    if admin_key is None:
        found = KEY_PATTERN.search(log_path.read_text())
        if found is None:
            raise RuntimeError("no bootstrap key printed; pass admin_key= for an existing database")
        admin_key = found.group(0)
    return Server(url, database_url, admin_key, process, log_path)


class Databases:
    """Fresh databases of one backend: SQLite files, or PostgreSQL databases dropped at the end."""

    def __init__(self, backend: str, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.backend = backend
        self._tmp = tmp_path_factory
        self._created: list[str] = []

    def fresh(self) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{self._tmp.mktemp('db') / 'queuelog.db'}"
        name = f"queuelog_test_{os.getpid()}_{next(_names)}"
        postgres_admin(f'CREATE DATABASE "{name}"')
        self._created.append(name)
        return POSTGRES_URL.rsplit("/", 1)[0] + "/" + name

    def drop_all(self) -> None:
        for name in self._created:
            postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._created.clear()


def postgres_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as connection:
        connection.execute(sql)  # type: ignore[arg-type]


def postgres_unreachable() -> str | None:
    """Why PostgreSQL cannot be used for tests, or None when it answers."""
    try:
        postgres_admin("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {POSTGRES_URL} does not answer ({type(exc).__name__})"
    return None


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The database every server of this test runs on: "sqlite" or "postgresql"."""
    if request.param == "postgresql":
        reason = postgres_unreachable()
        if reason is not None:
            if REQUIRE_POSTGRES:
                pytest.fail(reason + " and QUEUELOG_TEST_REQUIRE_POSTGRES=1")
            pytest.skip(reason)
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


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A default server shared by the tests of one module (make fresh keys per test)."""
    made = Databases(backend, tmp_path_factory)
    running = launch_server(tmp_path_factory.mktemp("server"), database_url=made.fresh())
    yield running
    running.stop()
    made.drop_all()


@pytest.fixture
def unique() -> Callable[[str], str]:
    """unique("producer") -> "producer-17": key names that never collide within a run."""
    return lambda prefix: f"{prefix}-{next(_names)}"
