"""queuelog servers behind PgBouncer, as the README's "PgBouncer" section says they run.

Each test starts its own `pgbouncer` (Debian's package: `apt-get install -y pgbouncer`) on a
free loopback port, in front of the test cluster's PostgreSQL, and two `queuelog serve`
processes that reach one fresh database only through it. Without pgbouncer the tests skip
and say so (CI does not install it).

- session pooling, with the default event feed (LISTEN/NOTIFY through the pooler): a jobEvents
  subscriber on server 1 follows a job that server 2 enqueues, has claimed and completed; a
  claim waiting on server 1 gets the job enqueued on server 2; every job of a batch is claimed
  once. The pool must hold every connection the servers keep (up to nine or ten each,
  README "What each replica does in the background"): it is sized so here;
- transaction pooling, with `--event-feed poll` and PgBouncer 1.21+ (`max_prepared_statements`,
  for psycopg's prepared statements): the same. With an older PgBouncer (Debian 12 has 1.18)
  this one skips, saying so: psycopg prepares a statement it has run five times on its
  connection, and another client then meets "prepared statement _pg3_N does not exist" or
  "already exists" on the server connection it is given.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from concurrency.test_scale_out import (
    CLAIM,
    COMPLETE,
    ENQUEUE,
    ENQUEUE_MANY,
    EVENT_DEADLINE,
    JOB_EVENTS,
    WAKE_DEADLINE,
    Cluster,
    fresh_postgres_database,
    graphql,
    make_keys,
    run,
    until_live,
)
from conftest import POSTGRES_URL, free_port
from socket_kit import open_socket

from queuelog.model import Role

PGBOUNCER = shutil.which("pgbouncer")
pytestmark = pytest.mark.skipif(
    PGBOUNCER is None, reason="pgbouncer is not installed (apt-get install -y pgbouncer); CI does not need it"
)
PREPARED_STATEMENTS_VERSION = (1, 21)  # the first PgBouncer with max_prepared_statements
BATCH = 60


def pgbouncer_version() -> tuple[int, int]:
    assert PGBOUNCER is not None
    out = subprocess.run([PGBOUNCER, "--version"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"PgBouncer (\d+)\.(\d+)", out)
    assert found is not None, out
    return int(found.group(1)), int(found.group(2))


def bouncer_config(mode: str, port: int) -> str:
    """A pgbouncer.ini in front of the test cluster: every database, as the test URL's user."""
    target = urlsplit(POSTGRES_URL)
    host, port_number = target.hostname or "127.0.0.1", target.port or 5432
    server = f"host={host} port={port_number} user={target.username or 'postgres'}"
    if target.password:
        server += f" password={target.password}"
    lines = [
        "[databases]",
        f"* = {server}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = any",  # the user the [databases] line names, whatever the client says
        f"pool_mode = {mode}",
        "max_client_conn = 200",
        "default_pool_size = 30",  # two servers keep up to ten connections each (session mode)
        "query_wait_timeout = 20",
        "ignore_startup_parameters = extra_float_digits,options",
    ]
    if mode == "transaction" and pgbouncer_version() >= PREPARED_STATEMENTS_VERSION:
        lines.append("max_prepared_statements = 200")
    return "\n".join(lines) + "\n"


def start_bouncer(directory: Path, mode: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    """pgbouncer in the foreground, logging to a file; (process, port, log)."""
    assert PGBOUNCER is not None
    port = free_port()
    config = directory / f"pgbouncer-{mode}.ini"
    config.write_text(bouncer_config(mode, port))  # read before it leaves root for nobody
    log = directory / f"pgbouncer-{mode}.log"
    command = [PGBOUNCER, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(config)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 10
    while "listening on" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"pgbouncer did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    return process, port, log


@pytest.fixture
def pg_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from fresh_postgres_database(tmp_path_factory)


@pytest.fixture
def behind_bouncer(
    pg_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., tuple[Cluster, Path]]]:
    """behind_bouncer(mode, **serve_flags): two servers on this test's database, reaching it
    only through a pgbouncer of that pool mode (migrated and keyed directly, as an operator
    runs `queuelog migrate` against PostgreSQL itself)."""
    started: list[tuple[Cluster, subprocess.Popen[bytes]]] = []

    def start(mode: str, **settings: object) -> tuple[Cluster, Path]:
        bouncer, port, log = start_bouncer(tmp_path_factory.mktemp("pgbouncer"), mode)
        cluster = Cluster.start(pg_database, tmp_path_factory, count=0, **settings)
        started.append((cluster, bouncer))
        through = urlsplit(pg_database)._replace(netloc=f"postgres@127.0.0.1:{port}").geturl()
        cluster.launch([through, through])
        return cluster, log

    try:
        yield start
    finally:
        for cluster, bouncer in started:
            cluster.stop()
            bouncer.terminate()
            bouncer.wait(timeout=10)


def events_and_claims_cross_servers(cluster: Cluster) -> None:
    """What scale-out promises, through whatever sits between the servers and PostgreSQL:
    a subscriber on server 1 hears of a job that lives on server 2; a claim waiting on 1 gets
    a job enqueued on 2; a batch enqueued on both is claimed once, job by job, by both."""
    one, two = cluster.servers
    (producer,) = make_keys(cluster.database_url, Role.PRODUCER, ["producer"])
    (viewer,) = make_keys(cluster.database_url, Role.VIEWER, ["viewer"])
    (worker,) = make_keys(cluster.database_url, Role.WORKER, ["worker"])

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=60) as http:

            async def enqueue(job_type: str) -> str:
                answer = await graphql(http, two, producer.secret, ENQUEUE, {"input": {"type": job_type}})
                return str(answer.ok()["enqueueJob"]["job"]["id"])

            async with open_socket(one, viewer.secret) as socket:
                await socket.subscribe("events", JOB_EVENTS)
                await until_live(socket, "events", lambda: enqueue("noop"))
                job_id = await enqueue("resize")
                event = await socket.event_of("events", job_id, EVENT_DEADLINE)
                assert (event["kind"], event["job"]["status"]) == ("ENQUEUED", "PENDING"), event
                claimed = await graphql(http, two, worker.secret, CLAIM, {"limit": 1, "types": ["resize"]})
                assert [j["id"] for j in claimed.ok()["claimJobs"]] == [job_id]
                event = await socket.event_of("events", job_id, EVENT_DEADLINE)
                assert (event["kind"], event["job"]["workerId"]) == ("CLAIMED", "worker"), event
                done = await graphql(http, two, worker.secret, COMPLETE, {"id": job_id, "attempt": 1})
                assert done.ok()["completeJob"]["status"] == "COMPLETED"
                event = await socket.event_of("events", job_id, EVENT_DEADLINE)
                assert (event["kind"], event["job"]["status"]) == ("COMPLETED", "COMPLETED"), event

            waiting = asyncio.create_task(
                graphql(http, one, worker.secret, CLAIM, {"limit": 1, "types": ["email"], "wait": 20})
            )
            await asyncio.sleep(0.5)
            assert not waiting.done(), waiting.result().body
            new_id = await enqueue("email")
            answer = await asyncio.wait_for(waiting, WAKE_DEADLINE)
            assert [j["id"] for j in answer.ok()["claimJobs"]] == [new_id]

            # Enough of every statement, on every connection, for psycopg to prepare them.
            inputs = [{"type": "report", "payload": {"n": i}} for i in range(BATCH)]
            made = await asyncio.gather(
                *(
                    graphql(http, server, producer.secret, ENQUEUE_MANY, {"inputs": inputs[i::2]})
                    for i, server in enumerate((one, two))
                )
            )
            ids = {job["job"]["id"] for answer in made for job in answer.ok()["enqueueJobs"]}
            assert len(ids) == BATCH
            claimed_ids: list[str] = []
            for _ in range(BATCH):
                batch = await asyncio.gather(
                    *(
                        graphql(http, server, worker.secret, CLAIM, {"limit": 3, "types": ["report"]})
                        for server in (one, two)
                    )
                )
                found = [job["id"] for answer in batch for job in answer.ok()["claimJobs"]]
                if not found:
                    break
                claimed_ids.extend(found)
            assert sorted(claimed_ids) == sorted(ids)

    run(scenario())


def test_session_pooling_with_listen_notify(behind_bouncer: Callable[..., tuple[Cluster, Path]]) -> None:
    cluster, log = behind_bouncer("session")
    events_and_claims_cross_servers(cluster)
    for server in cluster.servers:
        assert "Traceback" not in server.log(), server.log()[-3000:]
    assert "new connection to server" in log.read_text(errors="replace")  # it went through the pooler


def test_transaction_pooling_with_the_polling_feed(
    behind_bouncer: Callable[..., tuple[Cluster, Path]],
) -> None:
    if pgbouncer_version() < PREPARED_STATEMENTS_VERSION:
        found = ".".join(map(str, pgbouncer_version()))
        pytest.skip(
            f"PgBouncer {found} here: transaction pooling needs 1.21+ (max_prepared_statements) for"
            " psycopg's prepared statements (README, PgBouncer)"
        )
    cluster, log = behind_bouncer("transaction", event_feed="poll")
    events_and_claims_cross_servers(cluster)
    for server in cluster.servers:
        assert "Traceback" not in server.log(), server.log()[-3000:]
    assert "new connection to server" in log.read_text(errors="replace")
