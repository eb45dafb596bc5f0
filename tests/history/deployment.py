"""The deployment a history runs on: several `queuelog serve` processes on one database.

On PostgreSQL, 2-3 separate servers share the database, the last of them hearing the others
through the job_events tail (`--event-feed poll`, as behind PgBouncer in transaction mode),
the rest by LISTEN/NOTIFY: subscribers on each see what both feeds deliver. On SQLite, one
`queuelog serve --workers 2`: two processes on one file behind one port, each new
connection landing on either of them (`servers == 1`, but the clients' connections spread
over both processes).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from conftest import Server, launch_server, session_pids, stored_time

from queuelog import keys as key_admin
from queuelog.cli import open_migrated
from queuelog.model import Role
from queuelog.storage.postgres.statements.server import LISTEN, LISTENER_CHECKPOINT

# The two statements a PostgreSQL listener's connection runs (storage/postgres/notifications.py): its
# backend is the one whose last query is either of them.
LISTENER_QUERIES = (LISTEN, LISTENER_CHECKPOINT)
SETTINGS: dict[str, Any] = {
    # Retries (failJob without retryInSeconds, lease expiries, timeouts) are due at once: the
    # drain need not wait for back-offs.
    "retry_base_seconds": 0,
}


@dataclass
class Deployment:
    backend: str
    database_url: str
    admin_key: str
    servers: list[Server]
    settings: dict[str, Any]
    directory: Callable[[], Path]

    @property
    def count(self) -> int:
        return len(self.servers)

    def url(self, index: int) -> str:
        return self.servers[index % len(self.servers)].url

    def sql(self, statement: str, **params: Any) -> list[tuple[Any, ...]]:
        return self.servers[0].sql(statement, **params)

    def kill(self, index: int, rng: random.Random) -> str:
        """kill -9 one server process, then bring it back on its port; what was done.

        A separate server (PostgreSQL) is started again. Of SQLite's `--workers 2`, one worker
        process is killed and uvicorn's supervisor starts another."""
        server = self.servers[index]
        if self.backend == "sqlite":
            workers = worker_processes(server)
            if not workers:
                return "no worker process to kill"
            victim = rng.choice(workers)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
            return f"killed worker process {victim} of {server.url}"
        port = int(server.url.rsplit(":", 1)[1])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.process.pid, signal.SIGKILL)
        server.stop()  # reaps the process, closes its client and engine
        self.servers[index] = launch_server(
            self.directory(),
            database_url=self.database_url,
            admin_key=self.admin_key,
            port=port,
            event_feed=event_feed(index, self.count),
            **self.settings,
        )
        return f"killed and restarted server {index} ({server.url})"

    def end_a_listener(self, rng: random.Random) -> str:
        """pg_terminate_backend of one server's LISTEN connection; what was done."""
        rows = self.sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND query IN :queries AND pid <> pg_backend_pid() ORDER BY pid",
            queries=list(LISTENER_QUERIES),
        )
        if not rows:
            return "no listener connection found"
        pid = rng.choice([row[0] for row in rows])
        self.sql("SELECT pg_terminate_backend(:pid)", pid=pid)
        return f"ended listener backend {pid} (one of {len(rows)})"

    def stop(self) -> None:
        with ThreadPoolExecutor(len(self.servers)) as pool:
            list(pool.map(lambda s: s.stop(), self.servers))


def worker_processes(server: Server) -> list[int]:
    """The worker processes of a `--workers N` server (uvicorn's spawned children, not its
    multiprocessing resource tracker)."""
    found = []
    for pid in session_pids(server.process.pid):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return sorted(found)


def start_deployment(
    backend: str, database_url: str, directory: Callable[[], Path], servers: int, job_types: list[str]
) -> Deployment:
    """`servers` separate servers on PostgreSQL, one `--workers 2` server on SQLite."""
    settings = {**SETTINGS, "job_types": ",".join(job_types)}
    if backend == "sqlite":
        server = launch_server(directory(), database_url=database_url, workers=2, **settings)
        return Deployment(backend, database_url, server.admin_key, [server], settings, directory)
    engine = open_migrated(database_url)  # the admin key first, so that no two servers race to make it
    try:
        _, admin_key = key_admin.create_key(engine, "admin", [Role.ADMIN])
    finally:
        engine.dispose()
    with ThreadPoolExecutor(servers) as pool:
        started = list(
            pool.map(
                lambda index: launch_server(
                    directory(),
                    database_url=database_url,
                    admin_key=admin_key,
                    event_feed=event_feed(index, servers),
                    **settings,
                ),
                range(servers),
            )
        )
    return Deployment(backend, database_url, admin_key, started, settings, directory)


def event_feed(index: int, servers: int) -> str:
    """The event feed of PostgreSQL server `index` of `servers`: the last one polls job_events."""
    return "poll" if index == servers - 1 and servers > 1 else "notify"


def epoch(value: int | datetime | None) -> float:
    """A timestamp column's value as seconds since the epoch."""
    moment = stored_time(value)
    assert moment is not None
    return moment.timestamp()


def wait_for(condition: Callable[[], bool], seconds: float, every: float = 0.2) -> bool:
    """Whether `condition()` became true within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()
