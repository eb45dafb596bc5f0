"""Events made by other server processes reach this one's subscribers (storage/feeds/tail.py).

Attacked and proven:
- the event tail delivers every other process's event exactly once and none of its own, on a
  real database, with the job's status as of the event; ids that commit out of order (as on
  PostgreSQL, simulated here with explicit ids on SQLite) are held as holes and delivered
  when they appear;
- on SQLite the tail reads no row while only its own process writes (PRAGMA data_version),
  and reads exactly the other connection's rows once one commits; a backlog longer than one
  read, and a read that failed, are read to the end though data_version does not move again;
- `serve --workers 3` on one SQLite file: a subscriber on one process sees every job enqueued
  over many connections, whichever process took them;
- two servers on one PostgreSQL database with QUEUELOG_EVENT_FEED=poll (the PgBouncer
  fallback): a subscriber on one sees jobs enqueued on the other.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from conftest import Databases, Server, launch_server
from websockets.asyncio.client import ClientConnection, connect

from queuelog.model import EventKind, JobEvent, JobStatus, NewJob, Priority
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.feeds import tail as event_tail
from queuelog.storage.feeds.tail import EventTail
from queuelog.storage.group_commit import OwnEvents
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.operations import batch, claims, enqueue
from queuelog.storage.postgres.database import PostgresDatabase
from queuelog.storage.postgres.notifications import Checkpoints
from queuelog.storage.sqlite.database import SqliteDatabase
from queuelog.storage.statements import EVENT_TAIL_BATCH

ENQUEUE = 'mutation { enqueueJob(input: {type: "email"}) { job { id } } }'
SUBSCRIBE = "subscription { jobEvents { kind job { id status } } }"
DEADLINE = 10.0


def migrated(path: Path) -> str:
    url = f"sqlite:///{path}"
    engine = create_sync_engine(url)
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()
    return url


def insert_job_and_event(
    db: SqliteDatabase, event_id: int, job_id: int, kind: str = "ENQUEUED", status: str = "pending"
) -> None:
    """Write as another process would: a job and its event row, with a chosen event id."""
    now = 1_700_000_000_000_000
    connection = db._writer
    connection.execute("BEGIN IMMEDIATE")
    connection.execute(
        "INSERT OR IGNORE INTO jobs (id, type, payload, priority, status, retry_count, max_retries,"
        " attempt, run_at, created_by, created_at, updated_at)"
        " VALUES (?, 'email', '{}', 10, 'pending', 0, 3, 0, ?, 'p', ?, ?)",
        (job_id, now, now, now),
    )
    connection.execute(
        "INSERT INTO job_events (id, job_id, kind, status, at) VALUES (?, ?, ?, ?, ?)",
        (event_id, job_id, kind, status, now),
    )
    connection.execute("COMMIT")


def test_the_tail_delivers_others_events_once_skips_its_own_and_fills_holes(tmp_path: Path) -> None:
    async def scenario() -> None:
        delivered: list[tuple[EventKind, int]] = []
        statuses: list[JobStatus] = []

        def deliver(events: Sequence[JobEvent]) -> None:
            delivered.extend((e.kind, e.job.id) for e in events)
            statuses.extend(e.job.status for e in events)

        db = SqliteDatabase(migrated(tmp_path / "q.db"), lambda events: None, batch)
        own = OwnEvents()
        tail = EventTail(db, own, deliver)
        insert_job_and_event(db, 1, 1)  # before the tail starts: history, not delivered
        await tail.start()
        await tail.close()  # drive poll() by hand below

        insert_job_and_event(db, 2, 2)
        insert_job_and_event(db, 3, 3)
        own.add([3])  # this process's own event
        await tail.poll()
        assert delivered == [(EventKind.ENQUEUED, 2)]

        # Id 5 commits before id 4 (PostgreSQL sequences do this): 4 is a hole, read again.
        # Its job is PENDING when read back, but was RUNNING as of the event: that is delivered.
        insert_job_and_event(db, 5, 5, "CLAIMED", "running")
        await tail.poll()
        assert delivered[1:] == [(EventKind.CLAIMED, 5)]
        assert statuses[-1] is JobStatus.RUNNING
        insert_job_and_event(db, 4, 4)
        insert_job_and_event(db, 6, 6)
        await tail.poll()
        assert sorted(delivered[2:]) == [(EventKind.ENQUEUED, 4), (EventKind.ENQUEUED, 6)]
        await tail.poll()  # nothing new: nothing delivered twice
        assert len(delivered) == 4
        await db.close()

    asyncio.run(scenario())


def test_the_sqlite_tail_reads_no_rows_while_only_its_own_process_writes(tmp_path: Path) -> None:
    """With `others_wrote` (PRAGMA data_version), the tail moves past this process's events
    without reading them, and reads only once another connection has committed."""

    async def scenario() -> None:
        delivered: list[tuple[EventKind, int]] = []
        url = migrated(tmp_path / "q.db")
        db = SqliteDatabase(url, lambda events: None, batch)
        other = SqliteDatabase(url, lambda events: None, batch)  # another process, to SQLite
        db.own_events = own = OwnEvents()
        tail = EventTail(
            db,
            own,
            lambda events: delivered.extend((e.kind, e.job.id) for e in events),
            None,
            db.others_wrote,
        )
        await tail.start()
        await tail.close()  # drive poll() by hand below
        job = NewJob("email", {}, Priority.LOW, 3, None, None, payload_json="{}")

        async def write_own() -> int:
            (outcome,) = await db.write(lambda tx: enqueue.enqueue(tx, [job], "p"))
            return outcome.job.id

        await tail.poll()  # the first look always reads
        for _ in range(3):
            await write_own()
            assert await tail.poll() == 0  # no row read
        assert delivered == []

        insert_job_and_event(other, 4, 100)
        assert await tail.poll() == 1  # only the other's row: its own three were passed over
        assert delivered == [(EventKind.ENQUEUED, 100)]
        await write_own()
        assert await tail.poll() == 0

        insert_job_and_event(other, 6, 101)
        mine = await write_own()  # event 7
        assert await tail.poll() == 2  # both read; its own skipped
        assert delivered[1:] == [(EventKind.ENQUEUED, 101)]
        assert mine not in [job_id for _, job_id in delivered]
        await db.close()
        await other.close()

    asyncio.run(scenario())


async def stopped_tail_beside_another_writer(
    tmp_path: Path,
) -> tuple[SqliteDatabase, SqliteDatabase, EventTail, list[int]]:
    """This process's database with a tail polled by hand (its loop stopped, its start read
    done), another process's database on the same file, and the delivered job ids."""
    delivered: list[int] = []
    url = migrated(tmp_path / "q.db")
    db = SqliteDatabase(url, lambda events: None, batch)
    other = SqliteDatabase(url, lambda events: None, batch)
    db.own_events = own = OwnEvents()
    tail = EventTail(
        db, own, lambda events: delivered.extend(e.job.id for e in events), None, db.others_wrote
    )
    await tail.start()
    await tail.close()
    await tail.poll()
    return db, other, tail, delivered


def test_the_sqlite_tail_reads_a_backlog_longer_than_one_batch_to_its_end(tmp_path: Path) -> None:
    """Another process commits more events than one read takes, then this one writes: the
    tail reads on to the last of them (data_version no longer moves once it has looked)."""

    async def scenario() -> None:
        db, other, tail, delivered = await stopped_tail_beside_another_writer(tmp_path)

        count = EVENT_TAIL_BATCH + 3
        now = 1_700_000_000_000_000
        connection = other._writer
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany(
            "INSERT INTO jobs (id, type, payload, priority, status, retry_count, max_retries,"
            " attempt, run_at, created_by, created_at, updated_at)"
            " VALUES (?, 'email', '{}', 10, 'pending', 0, 3, 0, ?, 'p', ?, ?)",
            [(i, now, now, now) for i in range(1, count + 1)],
        )
        connection.executemany(
            "INSERT INTO job_events (id, job_id, kind, status, at) VALUES (?, ?, 'ENQUEUED', 'pending', ?)",
            [(i, i, now) for i in range(1, count + 1)],
        )
        connection.execute("COMMIT")
        job = NewJob("email", {}, Priority.LOW, 3, None, None, payload_json="{}")
        (mine,) = await db.write(lambda tx: enqueue.enqueue(tx, [job], "p"))

        assert await tail.poll() == EVENT_TAIL_BATCH
        while await tail.poll():
            pass
        assert delivered == list(range(1, count + 1))
        assert mine.job.id not in delivered
        await db.close()
        await other.close()

    asyncio.run(scenario())


def test_an_event_read_back_after_its_job_changed_carries_the_newest_state_apart(tmp_path: Path) -> None:
    """Another process enqueues a job and claims it before this tail reads either event: the
    ENQUEUED event is delivered with the status as of the event (PENDING) but its `latest` is
    the job as read back (RUNNING, one revision later): never a job that was RUNNING in all
    but its status. The CLAIMED event is exact."""

    async def scenario() -> None:
        delivered: list[JobEvent] = []
        url = migrated(tmp_path / "q.db")
        db = SqliteDatabase(url, lambda events: None, batch)
        other = SqliteDatabase(url, lambda events: None, batch)
        db.own_events = own = OwnEvents()
        tail = EventTail(db, own, delivered.extend, None, db.others_wrote)
        await tail.start()
        await tail.close()
        job = NewJob("email", {}, Priority.LOW, 3, None, None, payload_json="{}")
        (outcome,) = await other.write(lambda tx: enqueue.enqueue(tx, [job], "p"))
        claimed = await other.write(lambda tx: claims.claim(tx, "w", ["email"], 1, 60, lambda *_: None).jobs)
        assert [j.id for j in claimed] == [outcome.job.id]
        await tail.poll()
        enqueued, claim = delivered
        assert (enqueued.kind, enqueued.job.status) == (EventKind.ENQUEUED, JobStatus.PENDING)
        assert enqueued.latest is not None
        assert (enqueued.latest.status, enqueued.latest.revision) == (JobStatus.RUNNING, 1)
        assert (enqueued.newest.worker_id, claim.newest.worker_id) == ("w", "w")
        assert (claim.kind, claim.job.status, claim.latest) == (EventKind.CLAIMED, JobStatus.RUNNING, None)
        await db.close()
        await other.close()

    asyncio.run(scenario())


def test_the_sqlite_tail_reads_again_after_a_failed_read(tmp_path: Path) -> None:
    """A read that fails after data_version has moved is tried again at the next poll, though
    data_version does not move again."""

    async def scenario() -> None:
        db, other, tail, delivered = await stopped_tail_beside_another_writer(tmp_path)
        insert_job_and_event(other, 1, 1)

        read = db.read

        async def failing_read(function: Callable[..., Any], *args: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

        db.read = failing_read  # type: ignore[method-assign]
        with pytest.raises(sqlite3.OperationalError):
            await tail.poll()
        db.read = read  # type: ignore[method-assign]
        assert await tail.poll() == 1
        assert delivered == [1]
        await db.close()
        await other.close()

    asyncio.run(scenario())


def insert_pg_job_and_event(connection: psycopg.Connection[Any]) -> int:
    """Write as another server would: a job and its event row (the id from the sequence).
    The job's id, once `connection` commits."""
    row = connection.execute(
        "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt,"
        " run_at, created_by, created_at, updated_at)"
        " VALUES ('email', '{}', 10, 'pending', 0, 3, 0, now(), 'p', now(), now()) RETURNING id"
    ).fetchone()
    assert row is not None
    connection.execute(
        "INSERT INTO job_events (job_id, kind, status, at) VALUES (%s, 'ENQUEUED', 'pending', now())",
        (row[0],),
    )
    return int(row[0])


async def hand_driven_pg_tail(url: str) -> tuple[PostgresDatabase, EventTail, list[int]]:
    """A PostgreSQL event tail whose polls the test makes, and the job ids it delivers."""
    delivered: list[int] = []
    db = PostgresDatabase(url, lambda events: None, batch)
    db.own_events = own = OwnEvents()
    tail = EventTail(db, own, lambda events: delivered.extend(e.job.id for e in events))
    await tail.start()
    await tail.close()  # polls are the test's own
    return db, tail, delivered


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_postgresql_tail_delivers_an_event_committed_long_after_its_id_was_taken(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction takes an event id and commits only after a higher id has been read, and
    after HOLE_SECONDS (shortened here): the tail must still deliver its event. It was read
    again for HOLE_SECONDS, then given up as rolled back."""
    monkeypatch.setattr(event_tail, "HOLE_SECONDS", 0.1)
    url = databases.fresh()

    async def scenario() -> None:
        db, tail, delivered = await hand_driven_pg_tail(url)
        with psycopg.connect(url) as slow, psycopg.connect(url, autocommit=True) as quick:
            late = insert_pg_job_and_event(slow)  # not committed: its event id is taken
            early = insert_pg_job_and_event(quick)  # a higher id, committed
            await tail.poll()
            assert delivered == [early]
            await asyncio.sleep(0.2)  # longer than HOLE_SECONDS
            await tail.poll()
            slow.commit()
            await tail.poll()
            assert delivered == [early, late]
            await tail.poll()
            assert delivered == [early, late]  # once
        await db.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_postgresql_tail_waits_for_a_hole_whose_transaction_began_after_the_newest_commit(
    databases: Databases,
) -> None:
    """The hole's transaction took its transaction id after the one that commits the higher
    event id took its own: so it runs above the snapshot's xmax, which is one past the newest
    transaction that ended, not the next id. The tail gave that hole up at once (xmin = xmax,
    nothing listed as running) and never delivered its event; it must wait for it."""
    url = databases.fresh()

    async def scenario() -> None:
        db, tail, delivered = await hand_driven_pg_tail(url)
        with psycopg.connect(url) as quick, psycopg.connect(url) as slow:
            quick.execute("SELECT pg_current_xact_id()")  # quick's transaction id first
            late = insert_pg_job_and_event(slow)  # a later transaction id, the lower event id
            early = insert_pg_job_and_event(quick)  # the higher event id, committed first
            quick.commit()
            await tail.poll()
            assert delivered == [early]
            await tail.poll()  # slow still runs: its id is still a hole
            slow.commit()
            await tail.poll()
            assert delivered == [early, late]
        await db.close()

    asyncio.run(scenario())


def test_a_listener_checkpoint_is_safe_once_every_transaction_running_then_has_ended() -> None:
    """(newest id, xmin, next transaction id) per checkpoint. A checkpoint's newest id becomes
    the safe point once a checkpoint's xmin has passed its next transaction id, as told by the
    checkpoint after that one
    (so that the notifications of transactions that ended just before have arrived)."""
    checkpoints = Checkpoints()
    checkpoints.add(10, 100, 105)
    checkpoints.safe = 10  # the first connection: what committed before is history
    checkpoints.add(20, 103, 110)  # 103 < 105: transactions running at the first still run
    checkpoints.add(30, 105, 112)  # they have ended (105 >= 105), but this one only tells it
    assert checkpoints.safe == 10
    checkpoints.add(40, 112, 115)  # the previous one's xmin (105) confirms the first
    assert checkpoints.safe == 10
    checkpoints.add(50, 120, 121)  # 112 confirms the second (110) and the third (112)
    assert checkpoints.safe == 30
    checkpoints.add(60, 121, 125)  # 120 confirms the fourth (115)
    assert checkpoints.safe == 40


def test_own_event_ids_are_forgotten_once_passed() -> None:
    own = OwnEvents()
    own.add([1, 2, 3, 7, 8])
    assert 2 in own and 7 in own and 5 not in own
    own.forget_through(3)
    assert 2 not in own and 8 in own
    own.withdraw([8])
    assert 8 not in own and 7 in own


async def watch_until(
    server: Server, wanted: set[str], send: Callable[[], Any], sentinel: Callable[[], Awaitable[list[str]]]
) -> set[str]:
    """Subscribe to jobEvents on `server`; once it is live (a `sentinel` job's event has
    arrived), run `send`, and collect the ids of ENQUEUED events until every wanted id
    arrived (or the deadline passes)."""
    seen: set[str] = set()
    async with connect(server.ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await ws.send(
            json.dumps(
                {"type": "connection_init", "payload": {"authorization": f"Bearer {server.admin_key}"}}
            )
        )
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": SUBSCRIBE}}))
        await until_live(ws, sentinel)
        ids = await send()
        wanted.update(ids)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while not wanted <= seen and loop.time() < deadline:
            message = json.loads(await asyncio.wait_for(ws.recv(), deadline - loop.time()))
            if message["type"] == "next":
                event = message["payload"]["data"]["jobEvents"]
                if event["kind"] == "ENQUEUED":
                    seen.add(event["job"]["id"])
    return seen


async def until_live(ws: ClientConnection, sentinel: Callable[[], Awaitable[list[str]]]) -> None:
    """Enqueue sentinel jobs until one's event arrives: the subscription is then live."""
    sentinels: set[str] = set()
    for _ in range(20):
        sentinels.update(await sentinel())
        try:
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
                if (
                    message["type"] == "next"
                    and message["payload"]["data"]["jobEvents"]["job"]["id"] in sentinels
                ):
                    return
        except TimeoutError:
            continue
    pytest.fail("the subscription never delivered a sentinel job's event")


async def enqueue_over_fresh_connections(server: Server, count: int) -> list[str]:
    """Each enqueue on its own connection, so that the kernel spreads them over processes."""
    ids = []
    for _ in range(count):
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {server.admin_key}"}) as client:
            response = await client.post(server.graphql_url, json={"query": ENQUEUE})
            ids.append(response.json()["data"]["enqueueJob"]["job"]["id"])
    return ids


def test_workers_on_one_sqlite_file_hear_each_others_events(tmp_path: Path) -> None:
    server = launch_server(tmp_path, workers=3)
    try:
        wanted: set[str] = set()
        seen = asyncio.run(
            watch_until(
                server,
                wanted,
                lambda: enqueue_over_fresh_connections(server, 30),
                lambda: enqueue_over_fresh_connections(server, 1),
            )
        )
        assert len(wanted) == 30
        assert wanted <= seen, f"missing events for jobs {sorted(wanted - seen)}"
    finally:
        server.stop()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_polling_feed_carries_events_between_postgresql_servers(
    databases: Databases, tmp_path: Path
) -> None:
    url = databases.fresh()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = launch_server(tmp_path / "a", database_url=url, event_feed="poll")
    second = launch_server(tmp_path / "b", database_url=url, event_feed="poll", admin_key=first.admin_key)
    try:
        wanted: set[str] = set()
        seen = asyncio.run(
            watch_until(
                first,
                wanted,
                lambda: enqueue_over_fresh_connections(second, 20),
                lambda: enqueue_over_fresh_connections(second, 1),
            )
        )
        assert len(wanted) == 20
        assert wanted <= seen, f"missing events for jobs {sorted(wanted - seen)}"
    finally:
        first.stop()
        second.stop()


def test_own_events_hold_every_id_while_writer_threads_add_and_the_tail_reads() -> None:
    """Writer threads add ids while the tail, on the loop's thread, looks them up and forgets
    old runs; unguarded, the lookup raised `deque mutated during iteration` and the tail
    lost that read's events."""
    own = OwnEvents()
    ids = itertools.count(1)
    take = threading.Lock()
    added: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            with take:  # ids from one sequence, as the database hands them out
                batch = [next(ids) for _ in range(3)]
            own.add(batch)
            added.extend(batch)

    def tail() -> None:
        while not stop.is_set():
            try:
                _ = 10**12 in own
                own.forget_through(0)
            except Exception as exc:  # noqa: BLE001 - any error here is the failure
                errors.append(exc)

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    threads = [threading.Thread(target=writer) for _ in range(4)] + [threading.Thread(target=tail)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(old_interval)
    assert errors == []
    assert added and all(event_id in own for event_id in added[-1000:])
    assert own.last == max(added)
