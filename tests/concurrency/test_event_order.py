"""jobUpdated follows a job in the order its changes were made, across PostgreSQL servers, and
a job's recorded times never run backwards.

Each race is forced, not hoped for: a row lock held by the test (or a trigger waiting for an
advisory lock it holds, tests/stalls.py) keeps a server's transaction waiting at a chosen
point, and a TCP proxy between one server and PostgreSQL (test_chaos.Partition) holds back
what its listener connection receives, or cuts the server off. The test goes on only once
it sees, in pg_stat_activity or pg_locks, that the server's transaction waits, or that the
listener has done what it must.

Proven here, through real `queuelog serve` processes and websocket subscribers:
- a write that waited for a row another server changed meanwhile is ordered after that
  change: three servers, a bulk cancel on A whose transaction began first and waited, a claim
  and a retrying failure on B: the subscriber on C gets the job's CANCELLED state and ends
  (it was dropped as stale: its stamp was the waiting transaction's start, and the
  subscription never ended), and the job's recorded times and events' stamps run forwards;
- an event of another server reaching a subscriber after a newer state of its job never takes
  the subscriber back to that older state (the event's job was read back as it is now, with
  only the status as of the event: RUNNING -> PENDING -> RUNNING);
- a listener whose connection is cut while another server's completion is in flight catches
  up on it once back: the subscriber gets the terminal state (its catch-up started after the
  newest event id it had seen, and a lower id committed later was never read).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from conftest import Server
from socket_kit import Socket, open_socket
from stalls import held, install_stall, until_waiting

from concurrency.test_chaos import Partition, cut_off, reconnect
from concurrency.test_scale_out import (
    Cluster,
    cluster_starter,
    fresh_postgres_database,
    graphql,
    make_keys,
    run,
    sql,
)
from queuelog.model import Role

DEADLINE = 20.0  # for what takes milliseconds: an event, the end of a subscription
STALL_LOCK = 4343
ENQUEUE = "mutation($type: String!) { enqueueJob(input: {type: $type}) { job { id } } }"
CLAIM = "mutation($type: String!) { claimJobs(limit: 1, types: [$type]) { id attempt } }"
FAIL = """mutation($id: ID!) {
  failJob(id: $id, error: "again", retryable: true, retryInSeconds: 0) { status } }"""
COMPLETE = "mutation($id: ID!) { completeJob(id: $id) { status } }"
CANCEL_PENDING = "mutation { cancelJobs(filter: {status: PENDING}, limit: 10) { count } }"
JOB_UPDATED = "subscription($id: ID!) { jobUpdated(id: $id) { status attempt retryCount } }"
JOB_EVENTS = "subscription { jobEvents { kind job { id } } }"


@pytest.fixture
def pg_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from fresh_postgres_database(tmp_path_factory)


@pytest.fixture
def start_cluster(
    pg_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Cluster]]:
    yield from cluster_starter(pg_database, tmp_path_factory)


@pytest.fixture
def partition(pg_database: str) -> Iterator[Partition]:
    parts = urlsplit(pg_database)
    made = Partition(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        yield made
    finally:
        made.close()


def through(partition: Partition, database_url: str) -> str:
    parts = urlsplit(database_url)
    return parts._replace(netloc=f"{parts.username}@127.0.0.1:{partition.listen_port}").geturl()


async def call(http: httpx.AsyncClient, server: Server, key: str, query: str, **variables: Any) -> Any:
    return (await graphql(http, server, key, query, variables)).ok()


async def updates_until_done(socket: Socket, op_id: str) -> list[tuple[str, int, int]]:
    """The jobUpdated states of `op_id` up to its end (fails if it has not ended in DEADLINE)."""
    states = []
    end = time.monotonic() + DEADLINE
    while True:
        try:
            message = await socket.message_for(op_id, max(0.0, end - time.monotonic()))
        except TimeoutError:
            pytest.fail(f"jobUpdated did not end within {DEADLINE:.0f} s; it delivered {states}")
        if message["type"] == "complete":
            return states
        assert message["type"] == "next" and not message["payload"].get("errors"), message
        job = message["payload"]["data"]["jobUpdated"]
        states.append((job["status"], job["attempt"], job["retryCount"]))


def in_order(delivered: list[tuple[str, int, int]], history: list[tuple[str, int, int]]) -> bool:
    """Whether `delivered` is `history` with some states left out (merged), none repeated."""
    position = 0
    for state in delivered:
        try:
            position = history.index(state, position) + 1
        except ValueError:
            return False
    return True


def waiting_queries(database_url: str, like: str) -> int:
    rows = sql(
        database_url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND query LIKE %s",
        [like],
    )
    return int(rows[0][0])


def recorded_times(database_url: str, job_id: str) -> dict[str, Any]:
    (row,) = sql(
        database_url,
        "SELECT created_at, claimed_at, finished_at, updated_at FROM jobs WHERE id = %s",
        [job_id],
    )
    stamps = [
        at for (at,) in sql(database_url, "SELECT at FROM job_events WHERE job_id = %s ORDER BY id", [job_id])
    ]
    return dict(zip(("created", "claimed", "finished", "updated"), row, strict=True)) | {"events": stamps}


def test_a_write_that_waited_for_a_change_made_meanwhile_is_ordered_after_it(
    start_cluster: Callable[..., Cluster], pg_database: str
) -> None:
    """Y then X are PENDING. The test locks Y's row. A's bulk cancel of every PENDING job
    begins (its clock is read then), and waits for Y. Meanwhile B claims X and fails it for a
    retry: X is PENDING again, stamped later. The test lets Y go: A's cancel goes on and
    cancels X, after B's changes, in a transaction that began before them. The subscriber on
    C must get CANCELLED and end; X's times must run forwards."""
    cluster = start_cluster(count=3)
    a, b, c = cluster.servers
    (worker,) = make_keys(pg_database, Role.WORKER, ["worker"])
    admin = cluster.admin_key

    async def scenario() -> tuple[str, list[tuple[str, int, int]]]:
        async with httpx.AsyncClient(timeout=60) as http, open_socket(c, admin) as socket:
            y = (await call(http, a, admin, ENQUEUE, type="report"))["enqueueJob"]["job"]["id"]
            x = (await call(http, a, admin, ENQUEUE, type="email"))["enqueueJob"]["job"]["id"]
            await socket.subscribe("x", JOB_UPDATED, {"id": x})
            assert (await socket.data("x", DEADLINE))["jobUpdated"]["status"] == "PENDING"
            with psycopg.connect(pg_database) as lock_y:
                lock_y.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", [int(y)])
                cancelling = asyncio.ensure_future(call(http, a, admin, CANCEL_PENDING))
                # the bulk's locking read of its chunk (BULK_STATES), in id order: Y first
                like = "SELECT id, status, worker_id FROM jobs WHERE%FOR UPDATE"
                await wait_for(lambda: waiting_queries(pg_database, like) == 1, "A's cancel waits for Y")
                (claimed,) = (await call(http, b, worker.secret, CLAIM, type="email"))["claimJobs"]
                assert claimed["id"] == x
                assert (await call(http, b, worker.secret, FAIL, id=x))["failJob"]["status"] == "PENDING"
                lock_y.rollback()  # lets Y go: A's cancel goes on, to Y, then X
            assert (await cancelling)["cancelJobs"]["count"] == 2
            return x, await updates_until_done(socket, "x")

    x, delivered = run(scenario())
    history = [("PENDING", 0, 0), ("RUNNING", 1, 0), ("PENDING", 1, 1), ("CANCELLED", 1, 1)]
    assert delivered[-1] == ("CANCELLED", 1, 1) and in_order(delivered, history), delivered
    times = recorded_times(pg_database, x)
    assert times["created"] <= times["claimed"] <= times["finished"] == times["updated"], times
    assert times["events"] == sorted(times["events"]), times  # ENQUEUED, CLAIMED, RETRYING, CANCELLED


async def wait_for(check: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not await asyncio.to_thread(check):
        if time.monotonic() > end:
            pytest.fail(f"not within {DEADLINE:.0f} s: {what}")
        await asyncio.sleep(0.02)


def listener_port(database_url: str, partition: Partition) -> int:
    """The port of the proxied server's LISTEN connection: the one of its connections whose
    statements read job_events (the listener's checkpoints) or LISTEN."""
    end = time.monotonic() + DEADLINE
    while True:
        rows = sql(
            database_url,
            "SELECT client_port FROM pg_stat_activity WHERE datname = current_database()"
            " AND client_port = ANY(%s) AND (query LIKE 'LISTEN%%' OR query LIKE '%%job_events%%')",
            [partition.ports()],
        )
        if len(rows) == 1:
            return int(rows[0][0])
        assert time.monotonic() < end, f"no single listener connection through the proxy: {rows}"
        time.sleep(0.05)


def test_an_older_event_of_another_server_never_takes_a_subscriber_back(
    start_cluster: Callable[..., Cluster], pg_database: str, partition: Partition
) -> None:
    """Server C reaches PostgreSQL through the proxy, which holds back what C's listener
    connection receives. A enqueues X: C does not hear of it yet. C's subscriber reads X
    (PENDING), a worker claims X on C (C publishes RUNNING at once). Then the proxy lets the
    listener's notifications through: A's ENQUEUED event arrives, once C's jobEvents
    subscriber has it, the worker completes X. The jobUpdated subscriber must have followed X
    forwards only: PENDING, RUNNING, COMPLETED."""
    cluster = start_cluster(count=0)
    c, a = cluster.launch([through(partition, pg_database), pg_database])
    (worker,) = make_keys(pg_database, Role.WORKER, ["worker"])
    admin = cluster.admin_key

    async def scenario() -> list[tuple[str, int, int]]:
        async with httpx.AsyncClient(timeout=60) as http, open_socket(c, admin) as socket:
            await socket.subscribe("events", JOB_EVENTS)
            sentinel = (await call(http, a, admin, ENQUEUE, type="noop"))["enqueueJob"]["job"]["id"]
            await socket.event_of("events", sentinel, DEADLINE)  # C hears A: its listener is up
            port = await asyncio.to_thread(listener_port, pg_database, partition)
            partition.hold(port)
            try:
                x = (await call(http, a, admin, ENQUEUE, type="email"))["enqueueJob"]["job"]["id"]
                await socket.subscribe("x", JOB_UPDATED, {"id": x})
                assert (await socket.data("x", DEADLINE))["jobUpdated"]["status"] == "PENDING"
                (claimed,) = (await call(http, c, worker.secret, CLAIM, type="email"))["claimJobs"]
                assert claimed["id"] == x
                assert (await socket.event_of("events", x, DEADLINE))["kind"] == "CLAIMED"  # C's own
            finally:
                partition.release(port)
            assert (await socket.event_of("events", x, DEADLINE))["kind"] == "ENQUEUED"  # A's, late
            assert (await call(http, c, worker.secret, COMPLETE, id=x))["completeJob"][
                "status"
            ] == "COMPLETED"
            return await updates_until_done(socket, "x")

    delivered = run(scenario())
    history = [("PENDING", 0, 0), ("RUNNING", 1, 0), ("COMPLETED", 1, 0)]
    assert delivered[-1] == ("COMPLETED", 1, 0) and in_order(delivered, history), delivered


def test_a_listener_cut_off_while_a_completion_is_in_flight_catches_up_on_it(
    start_cluster: Callable[..., Cluster], pg_database: str, partition: Partition
) -> None:
    """Server C reaches PostgreSQL through the proxy; its subscriber follows X, RUNNING. A's
    completion of X is held in its COMMIT (a trigger waits for a lock the test holds): its
    event has an id. A then enqueues another job: a higher id commits, and the test waits
    until C's listener has read the newest id since. C is cut off; the completion commits;
    C comes back. Its subscriber must get COMPLETED and end."""
    cluster = start_cluster(count=0)
    c, a = cluster.launch([through(partition, pg_database), pg_database])
    (worker,) = make_keys(pg_database, Role.WORKER, ["worker"])
    admin = cluster.admin_key
    install_stall(
        pg_database,
        name="stall_completions",
        table="job_events",
        condition="NEW.kind = 'COMPLETED'",
        lock=STALL_LOCK,
        at_commit=True,
    )

    async def scenario() -> list[tuple[str, int, int]]:
        async with httpx.AsyncClient(timeout=60) as http, open_socket(c, admin) as socket:
            x = (await call(http, a, admin, ENQUEUE, type="report"))["enqueueJob"]["job"]["id"]
            (claimed,) = (await call(http, a, worker.secret, CLAIM, type="report"))["claimJobs"]
            assert claimed["id"] == x
            await socket.subscribe("x", JOB_UPDATED, {"id": x})
            assert (await socket.data("x", DEADLINE))["jobUpdated"]["status"] == "RUNNING"
            with held(pg_database, STALL_LOCK) as hold:
                completing = asyncio.ensure_future(call(http, a, worker.secret, COMPLETE, id=x))
                await asyncio.to_thread(until_waiting, pg_database, STALL_LOCK)
                await call(http, a, admin, ENQUEUE, type="noop")
                since = database_now(pg_database)
                port = await asyncio.to_thread(listener_port, pg_database, partition)
                await wait_for(
                    lambda: checkpointed_since(pg_database, port, since), "C's listener reads the newest id"
                )
                await cut_off(http, partition, c)
                hold.release()
                assert (await completing)["completeJob"]["status"] == "COMPLETED"
            await reconnect(http, partition, c)
            return await updates_until_done(socket, "x")

    delivered = run(scenario())
    assert delivered[-1] == ("COMPLETED", 1, 0), delivered


def database_now(database_url: str) -> datetime:
    ((now,),) = sql(database_url, "SELECT clock_timestamp()")
    return now  # type: ignore[no-any-return]


def checkpointed_since(database_url: str, port: int, since: datetime) -> bool:
    """Whether the connection from `port` has run a statement on job_events, started after
    `since`, to its end."""
    rows = sql(
        database_url,
        "SELECT 1 FROM pg_stat_activity WHERE client_port = %s AND state = 'idle'"
        " AND query LIKE '%%job_events%%' AND query_start > %s",
        [port, since],
    )
    return bool(rows)
