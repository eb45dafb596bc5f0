"""Chaos on PostgreSQL: three servers, 24 workers, 1,500 jobs, and something goes wrong.

Each scenario drains 1,500 jobs through three `queuelog serve` processes sharing a fresh
PostgreSQL database, with 24 workers (eight per server) and three producers (one per server)
running at once:
- calm: nothing goes wrong (the reference figures);
- a server is killed (SIGKILL) mid-drain and started again on its port: its clients see
  connections refused; half its workers wait for it and come back to it, the other half fail
  over to the other servers; two workers "on its machine" die with it, holding claimed jobs;
  those jobs come back once their (short) lease expires and are done by others;
- PostgreSQL itself stops mid-drain (every connection cut) and starts again: meanwhile every
  server answers /healthz 503 and GraphQL with 503 and a GraphQL error; afterwards every
  server recovers by itself (same processes) and the drain goes on.

And, with one server cut off from PostgreSQL for a moment (its connections go through a TCP
proxy the test cuts and heals: a network partition, or what a restart does to one server):
its websocket subscribers still hear of jobs finished meanwhile on another server (with
LISTEN/NOTIFY and with the job_events tail: SO-4, fixed), an operation sent over a websocket
while the database is unreachable fails alone, leaving the socket open (SO-5, fixed), and an
SDK worker whose jobs finish meanwhile reports them once the database is back.

Whatever happens, at the end: every job whose enqueue was acknowledged exists once and is
COMPLETED exactly once (one COMPLETED event, its own result), no completion was acknowledged
twice, and nothing else is left. A job may be *run* twice (an answer lost to the fault, a
lease that expired): that is counted, not refused. Workers and producers retry whatever
fails (refused connections, 503s, lost answers): enqueues with the same idempotency keys,
completions with the same attempt (the fencing token), so a retry never does anything twice.

Figures (jobs/s, runs, duplicates, lost, what was refused) go to /tmp/chaos_figures.md;
no assertion depends on timing beyond generous deadlines. The PostgreSQL scenario stops and
starts a cluster of its own, made for it with Debian's pg_createcluster (root only) and
dropped after, so nothing else notices; it skips, saying why, when it cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from conftest import Server, free_port
from socket_kit import open_socket
from websockets.exceptions import ConnectionClosed

from concurrency.test_scale_out import (
    SERVERS,
    Cluster,
    JobLines,
    Key,
    capture_job_lines,
    check_drained,
    cluster_starter,
    fresh_postgres_database,
    make_keys,
    record_figures,
    run,
    sql,
    wait_until,
)
from queuelog.client import AsyncClient, ServerError, ServerUnreachable
from queuelog.errors import Conflict
from queuelog.model import Role
from queuelog.worker import JobContext, Worker

# A third of the jobs before the fault (by then every worker has claimed and completed again
# and again), the rest through it and after it. Each producer keeps its last 300 for the
# trickle during the fault and the batches after it: the bulk before (200 a producer, 600 in
# all) must be more than FAULT_AT, or the fault never comes.
CHAOS_JOBS = 1500
WORKERS = 24
LEASE_SECONDS = 3  # short: jobs held by a worker that died come back soon
CLAIM_BATCH = 20
CLAIM_WAIT = 1
BULK_BATCH = 100
TRICKLE_BATCH = 10
FAULT_AT = 500  # acknowledged completions before the fault
assert CHAOS_JOBS - 300 * SERVERS > FAULT_AT, "the bulk enqueued before the fault must outlast it"
DRAIN_DEADLINE = 150.0
RETRIED = (ServerUnreachable, ServerError)  # refused, unreachable, 5xx, INTERNAL_SERVER_ERROR
SERVE_FLAGS: dict[str, Any] = {"lease_seconds": LEASE_SECONDS, "retry_base_seconds": 0}
ENQUEUE_MANY = (
    "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { created job { id } } }"
)


@pytest.fixture
def pg_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from fresh_postgres_database(tmp_path_factory)


@pytest.fixture
def start_cluster(
    pg_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Cluster]]:
    yield from cluster_starter(pg_database, tmp_path_factory)


def describe(exc: Exception) -> str:
    """A short name for a failed request, for the figures."""
    text = str(exc)
    if isinstance(exc, ServerUnreachable):
        if text.startswith("HTTP "):
            return text.split(" from ")[0]
        return "unreachable " + text.split(":")[0]
    return (
        f"{exc.code} {text[:40]}".strip() if isinstance(exc, ServerError | Conflict) else type(exc).__name__
    )


# --- the books ---------------------------------------------------------------------------------


@dataclass
class Ledger:
    """What producers and workers were told, counted on the client side."""

    enqueued: dict[int, str] = field(default_factory=dict)  # job number -> id, once acknowledged
    replays: int = 0  # enqueues sent again (answer lost) that found their job already there
    runs: Counter[str] = field(default_factory=Counter)  # job id -> handler runs
    acked: Counter[str] = field(default_factory=Counter)  # job id -> completions acknowledged
    stale: int = 0  # completions refused because the attempt was no longer the job's
    abandoned: set[str] = field(default_factory=set)  # claimed by workers that then died
    deaths_wanted: int = 0  # armed workers die at their next non-empty claim until this is 0
    refused: Counter[str] = field(default_factory=Counter)  # failed requests, by what failed


class Backoff:
    def __init__(self) -> None:
        self.delay = 0.05

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay * random.uniform(0.5, 1.0))
        self.delay = min(1.0, self.delay * 2)

    def reset(self) -> None:
        self.delay = 0.05


class ChaosWorker:
    """Claims `noop` jobs (claimJobs, long-polling), runs them, reports them (completeJobs
    with the attempt). Any failed request is retried: on the same server ("reconnect") or on
    the next one ("failover")."""

    def __init__(self, key: Key, urls: Sequence[str], home: int, policy: str, ledger: Ledger) -> None:
        self.key = key
        self.urls = urls
        self.home = home
        self.current = home
        self.policy = policy
        self.ledger = ledger
        self.armed = False  # while ledger.deaths_wanted > 0, a claimed batch is abandoned: the worker dies
        self.dead = asyncio.Event()
        self.answered_after: dict[int, float] = {}  # server -> when it last answered
        self._backoff = Backoff()

    async def run(self, stop: asyncio.Event) -> None:
        clients = [AsyncClient(url, self.key.secret, timeout=15) for url in self.urls]
        try:
            while not stop.is_set():
                try:
                    jobs = await clients[self.current].claim_data(
                        CLAIM_BATCH, "id attempt payload", types=["noop"], wait_seconds=CLAIM_WAIT
                    )
                except RETRIED as exc:
                    await self._failed(exc)
                    continue
                self._answered()
                if not jobs:
                    continue
                if self.armed and self.ledger.deaths_wanted > 0:
                    self.ledger.deaths_wanted -= 1
                    self.ledger.abandoned.update(job["id"] for job in jobs)
                    return
                for job in jobs:
                    self.ledger.runs[job["id"]] += 1  # the "handler": its result is the payload's n
                await self._report(clients, jobs, stop)
        finally:
            self.dead.set()
            for client in clients:
                await client.aclose()

    async def _report(
        self, clients: list[AsyncClient], jobs: list[dict[str, Any]], stop: asyncio.Event
    ) -> None:
        items = [
            f'{{"id":"{job["id"]}","attempt":{job["attempt"]},"result":{{"n":{job["payload"]["n"]}}}}}'.encode()
            for job in jobs
        ]
        while True:
            try:
                rejected = set(await clients[self.current].complete_encoded(items))
                break
            except (*RETRIED, Conflict) as exc:
                await self._failed(exc)
                if stop.is_set():  # every job is COMPLETED already: nothing to report any more
                    return
        self._answered()
        for job in jobs:
            if job["id"] in rejected:
                self.ledger.stale += 1
            else:
                self.ledger.acked[job["id"]] += 1

    def _answered(self) -> None:
        self._backoff.reset()
        self.answered_after[self.current] = time.monotonic()

    async def _failed(self, exc: Exception) -> None:
        self.ledger.refused[describe(exc)] += 1
        if self.policy == "failover":
            self.current = (self.current + 1) % len(self.urls)
        await self._backoff.sleep()


async def produce(
    key: Key,
    urls: Sequence[str],
    home: int,
    numbers: Sequence[int],
    ledger: Ledger,
    fault_started: asyncio.Event,
    fault_over: asyncio.Event,
) -> None:
    """Enqueue `numbers` (idempotency key job-<n>): most in bulk at once, then a trickle of
    small batches once the fault starts, and the last 200 after it. Failures are retried
    (same keys, so a lost answer never makes a second job), on the next server."""
    clients = [AsyncClient(url, key.secret, timeout=15) for url in urls]
    current = home
    backoff = Backoff()
    bulk, trickle, after = numbers[:-300], numbers[-300:-200], numbers[-200:]
    try:
        for part, size in ((bulk, BULK_BATCH), (trickle, TRICKLE_BATCH), (after, BULK_BATCH)):
            if part is trickle:
                await fault_started.wait()
            if part is after:
                await fault_over.wait()
            for start in range(0, len(part), size):
                chunk = part[start : start + size]
                inputs = [
                    {"type": "noop", "payload": {"n": n}, "idempotencyKey": f"job-{n}", "maxRetries": 25}
                    for n in chunk
                ]
                while True:
                    try:
                        data = await clients[current].execute(ENQUEUE_MANY, {"inputs": inputs})
                        break
                    except RETRIED as exc:
                        ledger.refused["enqueue: " + describe(exc)] += 1
                        current = (current + 1) % len(urls)
                        await backoff.sleep()
                backoff.reset()
                for n, answer in zip(chunk, data["enqueueJobs"], strict=True):
                    assert ledger.enqueued.setdefault(n, answer["job"]["id"]) == answer["job"]["id"]
                    ledger.replays += not answer["created"]
                if part is trickle and not fault_over.is_set():
                    await asyncio.sleep(0.3)
    finally:
        for client in clients:
            await client.aclose()


# --- one drain, with or without a fault -----------------------------------------------------------


@dataclass
class Drain:
    cluster: Cluster
    database_url: str
    ledger: Ledger
    workers: list[ChaosWorker]
    fault_started: asyncio.Event = field(default_factory=asyncio.Event)  # the trickle starts
    fault_over: asyncio.Event = field(default_factory=asyncio.Event)
    notes: dict[str, Any] = field(default_factory=dict)

    async def acked_at_least(self, count: int) -> None:
        async def enough() -> bool:
            return len(self.ledger.acked) >= count

        await wait_until(enough, DRAIN_DEADLINE, f"{count} completions acknowledged")


Fault = Callable[[Drain], Awaitable[Callable[[], bool]]]


def completed_in_database(database_url: str) -> int | None:
    try:
        return sql(database_url, "SELECT count(*) FROM jobs WHERE status = 'completed'")[0][0]
    except psycopg.Error:
        return None  # PostgreSQL is down: not yet


def drain(cluster: Cluster, database_url: str, fault: Fault | None) -> tuple[Drain, float]:
    """Run producers and workers until every job is COMPLETED in the database (and the fault,
    if any, is over and its own condition holds). Returns the drain and its duration."""
    (producer,) = make_keys(database_url, Role.PRODUCER, ["producer"])
    keys = make_keys(database_url, Role.WORKER, [f"worker-{i:02d}" for i in range(WORKERS)])
    urls = [server.url for server in cluster.servers]
    ledger = Ledger()
    workers = [
        ChaosWorker(key, urls, i % SERVERS, "reconnect" if (i // SERVERS) % 2 else "failover", ledger)
        for i, key in enumerate(keys)
    ]

    async def scenario() -> tuple[Drain, float]:
        state = Drain(cluster, database_url, ledger, workers)
        stop = asyncio.Event()
        started = time.monotonic()
        worker_tasks = [asyncio.create_task(worker.run(stop)) for worker in workers]
        producers = [
            asyncio.create_task(
                produce(
                    producer,
                    urls,
                    s,
                    range(s, CHAOS_JOBS, SERVERS),
                    ledger,
                    state.fault_started,
                    state.fault_over,
                )
            )
            for s in range(SERVERS)
        ]
        if fault is None:
            state.fault_started.set()
            state.fault_over.set()
            fault_task = None
        else:
            fault_task = asyncio.create_task(fault(state))

        async def finished() -> bool:
            for task in [*producers, *worker_tasks, *([fault_task] if fault_task else [])]:
                if task.done() and task.exception() is not None:
                    task.result()  # a producer, worker or the fault failed: show why
            if not all(task.done() for task in producers) or not state.fault_over.is_set():
                return False
            if fault_task is not None and not (fault_task.done() and fault_task.result()()):
                return False
            return await asyncio.to_thread(completed_in_database, database_url) == CHAOS_JOBS

        try:
            await wait_until(finished, DRAIN_DEADLINE, f"{CHAOS_JOBS} jobs COMPLETED")
            elapsed = time.monotonic() - started
        finally:
            stop.set()
            for task in [*producers, *([fault_task] if fault_task else [])]:
                task.cancel()
            await asyncio.wait_for(asyncio.gather(*worker_tasks, return_exceptions=True), 30)
        for task in worker_tasks:
            task.result()
        return state, elapsed

    return run(scenario(), timeout=DRAIN_DEADLINE + 60)


def assert_exactly_once(state: Drain) -> tuple[int, int]:
    """Every acknowledged enqueue is one job, COMPLETED once; returns (duplicates, lost)."""
    ledger, url = state.ledger, state.database_url
    assert len(ledger.enqueued) == CHAOS_JOBS  # every enqueue was acknowledged in the end
    expected = set(ledger.enqueued.values())
    assert len(expected) == CHAOS_JOBS  # one job per idempotency key
    rows = sql(url, "SELECT id, idempotency_key, status FROM jobs")
    assert {str(job_id): key for job_id, key, _ in rows} == {
        i: f"job-{n}" for n, i in ledger.enqueued.items()
    }
    check = check_drained(url)
    lost = len(expected - {str(job_id) for job_id, _, status in rows if status == "completed"})
    duplicates = len(check.completions_per_job_over_one) + sum(1 for n in ledger.acked.values() if n > 1)
    assert check.statuses == {"completed": CHAOS_JOBS}, check.statuses
    assert set(check.completed_events) == expected, "a job without its COMPLETED event"
    assert not check.completions_per_job_over_one, check.completions_per_job_over_one
    assert set(ledger.acked.values()) == {1}, ledger.acked.most_common(3)  # never acknowledged twice
    assert set(ledger.acked) <= expected
    assert check.results_matching_payloads == CHAOS_JOBS  # each job's own result
    assert set(ledger.runs) == expected  # every job ran (and none that was not enqueued)
    assert (duplicates, lost) == (0, 0)
    return duplicates, lost


def figures(scenario: str, state: Drain, elapsed: float, duplicates: int, lost: int) -> None:
    ledger = state.ledger
    runs = sum(ledger.runs.values())
    reruns = sum(
        n for (n,) in sql(state.database_url, "SELECT count(*) FROM job_events WHERE kind = 'LEASE_EXPIRED'")
    )
    notes = [f"{key}: {value}" for key, value in state.notes.items()]
    notes.append(f"lease expiries {reruns}, stale reports {ledger.stale}, enqueue replays {ledger.replays}")
    if ledger.refused:
        notes.append("refused " + ", ".join(f"{what} x{n}" for what, n in ledger.refused.most_common(4)))
    record_figures(
        scenario,
        jobs=CHAOS_JOBS,
        seconds=elapsed,
        runs=runs,
        duplicates=duplicates,
        lost=lost,
        notes="; ".join(notes),
    )


# --- the scenarios -------------------------------------------------------------------------------


def test_calm_drain_of_1500_jobs_through_three_servers_completes_each_once(
    start_cluster: Callable[..., Cluster], pg_database: str
) -> None:
    cluster = start_cluster(**SERVE_FLAGS)
    state, elapsed = drain(cluster, pg_database, fault=None)
    duplicates, lost = assert_exactly_once(state)
    errors = [what for what in state.ledger.refused if "HTTP" in what or "INTERNAL" in what]
    assert not errors, state.ledger.refused  # no server error with nothing going wrong
    figures("chaos: calm", state, elapsed, duplicates, lost)


VICTIM = 1


async def kill_a_server(state: Drain) -> Callable[[], bool]:
    """SIGKILL server 1 (and two workers claiming from it, holding claimed jobs) once a third
    of the jobs are done, then start it again on its port."""
    await state.acked_at_least(FAULT_AT)
    # Any worker on the victim may be one of the two to die: whichever claims first. The
    # trickle starts now, on every server, so the victim has jobs for them however the bulk
    # was shared out.
    mine = [w for w in state.workers if w.home == VICTIM]
    state.ledger.deaths_wanted = 2
    for worker in state.workers:
        worker.armed = worker.current == VICTIM
    state.fault_started.set()

    async def two_died() -> bool:
        return state.ledger.deaths_wanted == 0

    await wait_until(two_died, 30, "two workers on the victim died holding claimed jobs")
    for worker in state.workers:
        worker.armed = False
    doomed = [w for w in state.workers if w.dead.is_set()]
    state.cluster.kill(VICTIM)
    killed = time.monotonic()
    await asyncio.sleep(1.0)  # down for a moment: its clients find the port closed
    await asyncio.to_thread(state.cluster.restart, VICTIM)
    restarted = time.monotonic()
    state.notes["server down"] = f"{restarted - killed:.1f} s"
    state.notes["jobs held by dead workers"] = len(state.ledger.abandoned)
    state.fault_over.set()
    returning = [w for w in mine if w.policy == "reconnect" and w not in doomed]

    def came_back() -> bool:
        """The workers that wait for their server have been answered by it since its restart."""
        return all(w.answered_after.get(VICTIM, 0) > restarted for w in returning)

    return came_back


def test_a_server_killed_mid_drain_loses_nothing_and_completes_each_job_once(
    start_cluster: Callable[..., Cluster], pg_database: str
) -> None:
    cluster = start_cluster(**SERVE_FLAGS)
    victim_process = cluster.servers[VICTIM].process
    state, elapsed = drain(cluster, pg_database, fault=kill_a_server)
    assert victim_process.returncode == -9  # it was killed, not stopped
    assert cluster.servers[VICTIM].process.poll() is None  # and it runs again
    duplicates, lost = assert_exactly_once(state)

    # The jobs the dead workers held came back when their lease expired, and were done by others.
    abandoned = state.ledger.abandoned
    assert abandoned
    rows = sql(
        pg_database,
        "SELECT j.id, j.attempt, count(e.id) FROM jobs j"
        " LEFT JOIN job_events e ON e.job_id = j.id AND e.kind = 'LEASE_EXPIRED'"
        " WHERE j.id = ANY(%s) GROUP BY j.id",
        [[int(i) for i in abandoned]],
    )
    assert len(rows) == len(abandoned)
    for job_id, attempt, expiries in rows:
        assert attempt >= 2 and expiries >= 1, (job_id, attempt, expiries)
    assert any(what.startswith("unreachable") for what in state.ledger.refused), state.ledger.refused
    figures("chaos: a server SIGKILLed and restarted", state, elapsed, duplicates, lost)


# --- PostgreSQL restarting -------------------------------------------------------------------------


@dataclass
class PostgresCluster:
    """A PostgreSQL cluster of this test's own (Debian's pg_createcluster), so that stopping
    it disturbs nothing else: the suite's other PostgreSQL tests run meanwhile (pytest -n)."""

    version: str
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/queuelog_chaos"

    def ctl(self, action: str) -> None:
        command = ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def running(self) -> bool:
        command = ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, "status"]
        return subprocess.run(command, capture_output=True, timeout=60).returncode == 0

    def drop(self) -> None:
        command = ["pg_dropcluster", "--stop", self.version, self.name]
        subprocess.run(command, capture_output=True, timeout=120)


def postgres_version() -> str:
    """The installed PostgreSQL version to make a private cluster with, or why there is none."""
    if shutil.which("pg_createcluster") is None or shutil.which("pg_ctlcluster") is None:
        return "pg_createcluster/pg_ctlcluster not found (Debian's postgresql-common)"
    if os.geteuid() != 0:
        return "making and restarting a PostgreSQL cluster needs root"
    versions = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: int(v.split(".")[0]))
    return versions[-1] if versions else "no PostgreSQL server under /usr/lib/postgresql"


@pytest.fixture
def postgres() -> Iterator[PostgresCluster]:
    """A fresh cluster on a free port, trusting local TCP, with one database; dropped after."""
    version = postgres_version()
    if not version[0].isdigit():
        pytest.skip(f"cannot restart PostgreSQL: {version}")
    cluster = PostgresCluster(version, f"queuelog_chaos_{os.getpid()}", free_port())
    create = ["pg_createcluster", "-p", str(cluster.port), version, cluster.name, "--", "--auth=trust"]
    subprocess.run(create, check=True, capture_output=True, timeout=120)
    try:
        cluster.ctl("start")
        admin = cluster.url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as connection:
            connection.execute("CREATE DATABASE queuelog_chaos")
        yield cluster
    finally:
        cluster.drop()


async def health(http: httpx.AsyncClient, url: str) -> int | None:
    try:
        return (await http.get(f"{url}/healthz", timeout=3)).status_code
    except httpx.HTTPError:
        return None


def restart_postgres(postgres: PostgresCluster) -> Fault:
    async def fault(state: Drain) -> Callable[[], bool]:
        """Stop PostgreSQL once a third of the jobs are done; while it is down, every server
        says so (healthz 503, GraphQL 503 with a GraphQL error); start it again; every server
        comes back by itself."""
        servers = state.cluster.servers
        processes = [server.process for server in servers]
        await state.acked_at_least(FAULT_AT)
        state.fault_started.set()
        async with httpx.AsyncClient() as http:
            await asyncio.to_thread(postgres.ctl, "stop")
            stopped = time.monotonic()
            try:

                async def all_unhealthy() -> bool:
                    return [await health(http, s.url) for s in servers] == [503] * SERVERS

                await wait_until(all_unhealthy, 30, "/healthz 503 on every server while PostgreSQL is down")
                for server in servers:
                    answer = await http.post(
                        server.graphql_url,
                        json={"query": "{ me { name } }"},
                        headers={"Authorization": f"Bearer {state.cluster.admin_key}"},
                        timeout=10,
                    )
                    assert answer.status_code == 503, (answer.status_code, answer.text)  # SO-2, fixed
                    assert answer.json()["data"] is None and answer.json()["errors"], answer.text
                await asyncio.sleep(1.0)  # down a little longer: everyone keeps retrying
            finally:
                await asyncio.to_thread(postgres.ctl, "start")
            started = time.monotonic()

            async def all_healthy() -> bool:
                return [await health(http, s.url) for s in servers] == [200] * SERVERS

            await wait_until(all_healthy, 60, "every server healthy again without a restart")
            recovered = time.monotonic()
        assert [server.process for server in servers] == processes
        assert all(process.poll() is None for process in processes)
        state.notes["PostgreSQL down"] = f"{started - stopped:.1f} s"
        state.notes["servers healthy"] = f"{recovered - started:.1f} s after its start"
        state.fault_over.set()

        def every_worker_served_again() -> bool:
            return all(max(w.answered_after.values(), default=0) > started for w in state.workers)

        return every_worker_served_again

    return fault


def test_drain_while_postgresql_restarts_loses_nothing(
    postgres: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with contextlib.contextmanager(cluster_starter)(postgres.url, tmp_path_factory) as start_cluster:
        cluster = start_cluster(**SERVE_FLAGS)
        # Flow control through the restart (issue 16): a limit that never binds puts every
        # claim of the drain on the controlled path (its advisory lock), and a pause holds.
        first = cluster.servers[0]
        first.gql(SET_CONTROL, {"input": {"type": "noop", "maxRunning": 100000}}).ok()
        first.gql(PAUSE, {"type": "report"}).ok()
        state, elapsed = drain(cluster, postgres.url, fault=restart_postgres(postgres))
        duplicates, lost = assert_exactly_once(state)
        for server in cluster.servers:
            controls = {c["type"]: c for c in server.gql(TYPE_CONTROLS).ok()["typeControls"]}
            assert controls["report"]["paused"] and controls["noop"]["maxRunning"] == 100000, controls
        first.gql(ENQUEUE_REPORT).ok()
        worker = first.make_key("after-restart", "WORKER")
        assert first.gql(CLAIM_REPORT, key=worker).ok()["claimJob"] is None  # still paused
    assert state.ledger.refused  # the outage was seen, and got through
    figures("chaos: PostgreSQL stopped and started", state, elapsed, duplicates, lost)


SET_CONTROL = "mutation($input: TypeControlInput!) { setTypeControl(input: $input) { type } }"
PAUSE = "mutation($type: String!) { pauseType(type: $type) { paused } }"
TYPE_CONTROLS = "{ typeControls { type paused maxRunning } }"
ENQUEUE_REPORT = 'mutation { enqueueJob(input: {type: "report"}) { job { id } } }'
CLAIM_REPORT = 'mutation { claimJob(types: ["report"]) { id } }'


# --- a server cut off from PostgreSQL for a moment ------------------------------------------------


class Partition:
    """A TCP proxy between one server and PostgreSQL, on a thread of its own: `cut()` drops
    every connection through it and refuses new ones (a network partition between that
    server and the database), `heal()` lets connections through again. `hold(port)` keeps
    back what PostgreSQL sends on one connection (named by the port it comes from, as
    pg_stat_activity.client_port shows it) until `release(port)`."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.open = True
        self._streams: set[asyncio.StreamWriter] = set()
        self._gates: dict[int, asyncio.Event] = {}  # upstream local port -> set while flowing
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="partition", daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.listen_port: int = self._server.sockets[0].getsockname()[1]

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        pair = {writer, upstream_writer}
        self._streams |= pair
        port = upstream_writer.get_extra_info("sockname")[1]
        gate = self._gates[port] = asyncio.Event()
        gate.set()

        async def pipe(
            source: asyncio.StreamReader, target: asyncio.StreamWriter, gate: asyncio.Event | None
        ) -> None:
            try:
                while data := await source.read(65536):
                    if gate is not None:
                        await gate.wait()
                    target.write(data)
                    await target.drain()
            except (OSError, RuntimeError):
                pass
            finally:
                for stream in pair:
                    stream.transport.abort()

        await asyncio.gather(pipe(reader, upstream_writer, None), pipe(upstream_reader, writer, gate))
        self._streams -= pair
        self._gates.pop(port, None)

    async def _ports(self) -> list[int]:
        return list(self._gates)

    def ports(self) -> list[int]:
        """The local ports of the connections to PostgreSQL open through the proxy."""
        return self._call(self._ports())

    async def _gate(self, port: int, flowing: bool) -> None:
        gate = self._gates[port]
        if flowing:
            gate.set()
        else:
            gate.clear()

    def hold(self, port: int) -> None:
        """Keep back what PostgreSQL sends on the connection from `port` from now on."""
        self._call(self._gate(port, False))

    def release(self, port: int) -> None:
        """Let through what was held back on the connection from `port`, and what follows."""
        self._call(self._gate(port, True))

    async def _cut(self) -> int:
        self.open = False
        cut = len(self._streams) // 2
        for stream in list(self._streams):
            stream.transport.abort()
        return cut

    def cut(self) -> int:
        """Partition: returns how many connections were dropped."""
        return self._call(self._cut())

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(setattr, self, "open", True)

    async def _shutdown(self) -> None:
        await self._cut()  # every pipe ends: its connections are gone
        self._server.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=5)

    def close(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@pytest.fixture
def partition(pg_database: str) -> Iterator[Partition]:
    parts = urlsplit(pg_database)
    made = Partition(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        yield made
    finally:
        made.close()


def behind_a_proxy(
    start_cluster: Callable[..., Cluster], database_url: str, partition: Partition, **settings: Any
) -> tuple[Cluster, Server, Server]:
    """Server 1 reaching PostgreSQL through `partition`, server 2 directly: (cluster, 1, 2).
    With `alone=True`, server 1 only: (cluster, 1, 1)."""
    alone = settings.pop("alone", False)
    cluster = start_cluster(count=0, **settings)
    parts = urlsplit(database_url)
    through_proxy = parts._replace(netloc=f"{parts.username}@127.0.0.1:{partition.listen_port}").geturl()
    launched = cluster.launch([through_proxy] if alone else [through_proxy, database_url])
    return cluster, launched[0], launched[-1]


async def cut_off(http: httpx.AsyncClient, partition: Partition, server: Server) -> int:
    """Cut `server` off from PostgreSQL until it says so itself (/healthz 503)."""
    dropped = await asyncio.to_thread(partition.cut)

    async def unhealthy() -> bool:
        return await health(http, server.url) == 503

    await wait_until(unhealthy, 30, f"{server.url} reports 503 while cut off")
    return dropped


async def reconnect(http: httpx.AsyncClient, partition: Partition, server: Server) -> None:
    partition.heal()

    async def healthy() -> bool:
        return await health(http, server.url) == 200

    await wait_until(healthy, 30, f"{server.url} healthy again by itself")


WATCHED_JOBS = 16  # jobUpdated subscriptions on one socket (at most 20 per connection)
JOB_UPDATED = "subscription($id: ID!) { jobUpdated(id: $id) { id status } }"
COMPLETED_EVENTS = "subscription { jobEvents(statuses: [COMPLETED]) { kind job { id status } } }"


@pytest.mark.parametrize(
    "feed",
    [
        "notify",
        "poll",
    ],
)
def test_subscribers_hear_of_jobs_finished_elsewhere_while_their_server_was_cut_off(
    start_cluster: Callable[..., Cluster], pg_database: str, partition: Partition, feed: str
) -> None:
    """jobUpdated "always delivers the terminal state, then ends"; jobEvents delivers every
    event, across servers. Server 1 reaches PostgreSQL through a proxy; its websocket
    subscribers watch 16 jobs held by a worker of server 2. Server 1 is cut off from the
    database (every connection dropped, new ones refused: what a PostgreSQL restart or a
    network blip does to it); meanwhile the worker completes the jobs on server 2; then
    server 1 reaches the database again. Its subscribers must hear of the completions.
    (The same happens with a real PostgreSQL restart, whenever another server commits
    before this one has LISTENed again: 3 out of 3 tries while writing this test.)"""
    cluster, one, two = behind_a_proxy(start_cluster, pg_database, partition, event_feed=feed)
    (producer,) = make_keys(pg_database, Role.PRODUCER, ["producer"])
    (worker,) = make_keys(pg_database, Role.WORKER, ["worker"])

    async def scenario() -> dict[str, Any]:
        outcome: dict[str, Any] = {}
        async with (
            httpx.AsyncClient(timeout=30) as http,
            AsyncClient(two.url, producer.secret) as producing,
            AsyncClient(two.url, worker.secret) as working,
            open_socket(one, cluster.admin_key) as socket,
        ):
            enqueued = await producing.enqueue_many([{"type": "report"} for _ in range(WATCHED_JOBS)])
            ids = [e.job.id for e in enqueued]
            held = await working.claim(WATCHED_JOBS, types=["report"])
            assert sorted(job.id for job in held) == sorted(ids)
            # One socket; its operations are taken in order: once the last jobUpdated has
            # answered, every subscription is in place (and no operation is sent while cut
            # off: that is SO-5).
            await socket.subscribe("completed", COMPLETED_EVENTS)
            for job_id in ids:
                await socket.subscribe(f"job-{job_id}", JOB_UPDATED, {"id": job_id})
                assert (await socket.data(f"job-{job_id}", 10))["jobUpdated"]["status"] == "RUNNING"

            outcome["connections cut"] = await cut_off(http, partition, one)
            done = await working.complete_many([(job.id, job.attempt, None) for job in held])
            assert sorted(done.completed) == sorted(ids) and not done.rejected
            await asyncio.sleep(1.0)
            await reconnect(http, partition, one)

            # Everything that arrives within 20 s (it takes well under a second; the loop ends
            # as soon as all of it is in), in one pass.
            terminal = {job_id: "nothing within 20 s" for job_id in ids}
            events: list[tuple[str, str]] = []
            deadline = time.monotonic() + 20
            with contextlib.suppress(TimeoutError):
                while len(events) < WATCHED_JOBS or "nothing within 20 s" in terminal.values():
                    message = await socket.recv(max(0.0, deadline - time.monotonic()))
                    data = (message.get("payload") or {}).get("data") or {}
                    if "jobUpdated" in data:
                        terminal[data["jobUpdated"]["id"]] = data["jobUpdated"]["status"]
                    elif "jobEvents" in data:
                        events.append((data["jobEvents"]["kind"], data["jobEvents"]["job"]["id"]))
            outcome["jobUpdated"] = Counter(terminal.values())
            outcome["jobEvents"] = Counter(kind for kind, _ in events)
            outcome["ids"] = ids
            outcome["events"] = events
        return outcome

    outcome = run(scenario())
    ids, events = outcome.pop("ids"), outcome.pop("events")
    print(outcome)
    assert outcome["connections cut"] > 0
    assert outcome["jobUpdated"] == {"COMPLETED": WATCHED_JOBS}, outcome
    assert sorted(events) == sorted(("COMPLETED", job_id) for job_id in ids), outcome


def test_an_operation_sent_while_the_database_is_unreachable_leaves_the_websocket_open(
    start_cluster: Callable[..., Cluster], pg_database: str, partition: Partition
) -> None:
    """Server 1 is cut off from PostgreSQL while a websocket to it holds a jobUpdated
    subscription. An operation sent then fails (the database does not answer), alone: the
    socket stays open; a new connection then is closed 1013 (try again later: its key could not
    be checked), which the SDK takes for an unavailable websocket, never a refused key (an SDK
    worker stops on that); and once server 1 reaches the database again the subscription goes on
    (the job's completion reaches it, maybe after its RUNNING state once more: around an
    outage a subscriber may get an event twice, never miss one)."""
    cluster, one, _ = behind_a_proxy(start_cluster, pg_database, partition, alone=True)
    (producer,) = make_keys(pg_database, Role.PRODUCER, ["producer"])
    (worker,) = make_keys(pg_database, Role.WORKER, ["worker"])

    async def scenario() -> dict[str, Any]:
        outcome: dict[str, Any] = {}
        async with (
            httpx.AsyncClient(timeout=30) as http,
            AsyncClient(one.url, producer.secret) as producing,
            AsyncClient(one.url, worker.secret) as working,
            open_socket(one, cluster.admin_key) as socket,
        ):
            job = await producing.enqueue("report")
            (held,) = await working.claim(1, types=["report"])
            await socket.subscribe("job", JOB_UPDATED, {"id": job.id})
            assert (await socket.data("job", 10))["jobUpdated"]["status"] == "RUNNING"

            await cut_off(http, partition, one)
            await socket.subscribe("me", "{ me { name } }")
            try:
                message = await socket.message_for("me", 15)
                outcome["the operation"] = message["type"]
                assert message["type"] == "error" or message.get("payload", {}).get("errors"), message
            except ConnectionClosed as closed:
                outcome["the operation"] = f"socket closed: {closed}"
            # A new connection's key cannot be checked now: try again later, not "refused".
            with pytest.raises(ConnectionClosed) as closed_at_init:
                async with open_socket(one, worker.secret):
                    pass
            rcvd = closed_at_init.value.rcvd
            outcome["a new connection"] = (rcvd.code, rcvd.reason) if rcvd is not None else None
            try:
                async for _ in working.watch(held.id):
                    pass
            except Exception as exc:  # ServerUnreachable (or WebSocketUnavailable), not Unauthenticated
                unreachable = isinstance(exc, ServerUnreachable)
                outcome["the SDK's error"] = "ServerUnreachable" if unreachable else repr(exc)
            await reconnect(http, partition, one)
            deadline = time.monotonic() + 30
            while True:  # the first writes may still meet the connection the cut broke
                try:
                    await working.complete(held.id, held.attempt)
                    break
                except RETRIED:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            try:
                # Around an outage an update may come twice (the listener catches up from its
                # last checkpoint, which may predate the claim): the job's RUNNING state again
                # is allowed before its completion, nothing else.
                seen = [(await socket.data("job", 15))["jobUpdated"]["status"]]
                while seen[-1] == "RUNNING" and len(seen) < 5:
                    seen.append((await socket.data("job", 15))["jobUpdated"]["status"])
                outcome["the subscription"] = seen[-1]
                outcome["before it"] = sorted(set(seen[:-1]))
            except ConnectionClosed as closed:
                outcome["the subscription"] = f"socket closed: {closed}"
        return outcome

    outcome = run(scenario())
    print(outcome)
    assert outcome.pop("before it", []) in ([], ["RUNNING"]), outcome
    assert outcome == {
        "the operation": "error",
        "a new connection": (1013, "the database is unavailable; try again"),
        "the SDK's error": "ServerUnreachable",
        "the subscription": "COMPLETED",
    }, outcome


def test_a_worker_reports_a_job_it_finished_while_the_database_was_unreachable(
    start_cluster: Callable[..., Cluster], pg_database: str, partition: Partition
) -> None:
    """An SDK worker's handlers finish while its server is cut off from PostgreSQL (503s);
    once the server reaches the database again the worker's reports get through: the jobs
    end COMPLETED with their results, run once, without waiting for their lease to expire."""
    cluster, one, _ = behind_a_proxy(start_cluster, pg_database, partition, alone=True)
    (producer,) = make_keys(pg_database, Role.PRODUCER, ["producer"])
    (worker_key,) = make_keys(pg_database, Role.WORKER, ["worker"])
    jobs = 4
    release = threading.Event()
    started: Counter[str] = Counter()

    def handle(job: JobContext) -> dict[str, Any]:  # a sync handler: runs on a thread
        started[job.id] += 1
        release.wait(60)
        return {"done": job.payload["n"]}

    async def scenario(lines: JobLines) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=30) as http, AsyncClient(one.url, producer.secret) as producing:
            enqueued = await producing.enqueue_many(
                [{"type": "report", "payload": {"n": n}} for n in range(jobs)]
            )
            worker = Worker(one.url, worker_key.secret, {"report": handle}, concurrency=jobs)
            running = asyncio.create_task(worker.run())
            try:

                async def all_started() -> bool:
                    return len(started) == jobs

                await wait_until(all_started, 30, "the worker runs every job")
                await cut_off(http, partition, one)
                release.set()  # the handlers return; their reports meet the outage
                await asyncio.sleep(1.5)
                await reconnect(http, partition, one)

                async def all_completed() -> bool:
                    rows = await asyncio.to_thread(
                        sql, pg_database, "SELECT count(*) FROM jobs WHERE status = 'completed'"
                    )
                    return rows[0][0] == jobs

                with contextlib.suppress(pytest.fail.Exception):  # the worker's back-off: seconds
                    await wait_until(all_completed, 30, "every job COMPLETED")
            finally:
                release.set()
                worker.stop()
                await asyncio.wait_for(running, 30)
        rows = sql(pg_database, "SELECT id, status, attempt, result::jsonb ->> 'done' FROM jobs ORDER BY id")
        return {
            "jobs": [(str(i), status, attempt, done) for i, status, attempt, done in rows],
            "enqueued": [e.job.id for e in enqueued],
            "outcomes": Counter(line["outcome"] for line in lines.outcomes),
        }

    with capture_job_lines() as lines:
        outcome = run(scenario(lines))
    print(outcome)
    expected = [(job_id, "completed", 1, str(n)) for n, job_id in enumerate(outcome["enqueued"])]
    assert outcome["jobs"] == expected, outcome
    assert outcome["outcomes"] == {"completed": jobs}, outcome
    assert set(started.values()) == {1}
