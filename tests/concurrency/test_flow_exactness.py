"""Flow-control limits hold exactly under concurrency, on one server and on several (API.md 9).

Each scenario records what happened and checks its worst moment, two ways: a sampler that
polls the servers while the workers run (typeControls.running, and the jobs table itself)
never sees a limit exceeded, and the claim -> finish intervals of every job, read back once
the run is over (claimedAt / finishedAt, the server's own times), never overlap more than the
limit allows. Rate limits are checked from every claim's claimedAt: no sliding window holds
more than the limit, and the claims reach at least 95% of it.

Deployments, on each backend (`backend`):
- `one`: a single `queuelog serve`;
- `several`: on PostgreSQL three `queuelog serve` processes sharing the database, on SQLite
  one `queuelog serve --workers 3` (three processes on one file); worker threads spread over
  the servers, and over the processes of `--workers 3` through their own connections;
- `pair` (per test): two separate `queuelog serve` processes on one database, so that a test
  can talk to one process and kill the other with SIGKILL.

Proven here:
- maxRunning 3 and maxRunningPerKey 2 with 24 worker threads claiming and completing at random
  pace: never exceeded, every job run once;
- a rate limit of 20 per second, 10 workers over the servers for about 8 s: no 1 s window holds
  more than 20 claims, and the busiest 6 s hold at least 95% of 6 x 20;
- a server killed with -9 while its worker holds every slot loses none: once the leases
  expire the slots come back, the other server's workers finish every job, and the counts
  (typeControls.running, queueStats) equal the jobs table;
- resumeType on one server wakes a claim long-polling on another.

Recorded times: a controlled claim is stamped after the controlled-claim lock and after the
counts it read, so a claim that takes a slot a finish freed is never recorded before that
finish (test_a_claim_is_stamped_after_the_finish_that_freed_its_slot makes it happen).
"""

from __future__ import annotations

import bisect
import itertools
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from conftest import Databases, Server, http_client, launch_server

from queuelog import keys as key_admin
from queuelog.cli import open_migrated
from queuelog.model import Role
from queuelog.storage.postgres.statements import PostgresStatements

TYPE_NAMES = [f"x{i:02d}" for i in range(40)]
JOB_TYPES = ",".join(TYPE_NAMES)
_types = iter(TYPE_NAMES)  # each test takes types of its own
_names = itertools.count(1)

WORKERS = 24
MAX_RUNNING = 3
PER_KEY = 2
RATE = 20  # claims per second
RATE_SECONDS = 6  # the measured stretch: the busiest 6 s of a run of about 8
RATE_LONG_SECONDS = 20  # how long a run goes on when a starved machine spoiled its first 8 s
RATE_WORKERS = 10  # each claims up to 3 at a time: 30 ready for each second's 20
RUN_DEADLINE = 60.0  # a run that has not finished by then has hung

CONTROLS = "{ typeControls { type running } }"
SET_CONTROL = """mutation($input: TypeControlInput!) {
  setTypeControl(input: $input) { type maxRunning maxRunningPerKey rateLimit { limit } } }"""
PAUSE = "mutation($type: String!) { pauseType(type: $type) { paused } }"
RESUME = "mutation($type: String!) { resumeType(type: $type) { paused } }"
ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
CLAIM = """mutation($limit: Int!, $types: [String!], $lease: Int, $wait: Int) {
  claimJobs(limit: $limit, types: $types, leaseSeconds: $lease, waitSeconds: $wait) {
    id attempt concurrencyKey claimedAt } }"""
COMPLETE = "mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt) { id } }"
RUNNING_KEYS = """query($type: String!) {
  jobs(type: $type, status: RUNNING, first: 100) { totalCount nodes { concurrencyKey } } }"""
JOBS_PAGE = """query($type: String!, $after: String) {
  jobs(type: $type, first: 100, after: $after) {
    nodes { id status attempt concurrencyKey claimedAt finishedAt events(last: 20) { kind } }
    pageInfo { hasNextPage endCursor } } }"""
STATS = "{ queueStats { byType { type counts { pending running completed failed cancelled } } } }"

Job = dict[str, Any]


# --- deployments -----------------------------------------------------------------------------


@dataclass
class Deployment:
    """Server processes on one database, spoken to by URL."""

    kind: str
    backend: str
    servers: list[Server]
    databases: Databases

    @property
    def admin_key(self) -> str:
        return self.servers[0].admin_key

    def server(self, i: int) -> Server:
        return self.servers[i % len(self.servers)]

    def key(self, role: str) -> str:
        return self.servers[0].make_key(f"{role}-{next(_names)}", role)

    def sql(self, statement: str, **params: Any) -> list[tuple[Any, ...]]:
        return self.servers[0].sql(statement, **params)

    def stop(self) -> None:
        with ThreadPoolExecutor(len(self.servers)) as pool:
            list(pool.map(lambda s: s.stop(), self.servers))
        self.databases.drop_all()


def start_deployment(
    kind: str, backend: str, tmp: pytest.TempPathFactory, count: int, **settings: Any
) -> Deployment:
    """`count` servers on a fresh database: separate processes, or on SQLite with kind
    `several`, one `--workers count` server."""
    settings.setdefault("job_types", JOB_TYPES)
    databases = Databases(backend, tmp)
    url = databases.fresh()
    if backend == "sqlite" and kind == "several":
        return Deployment(
            kind,
            backend,
            [launch_server(tmp.mktemp("server"), database_url=url, workers=count, **settings)],
            databases,
        )
    engine = open_migrated(url)  # migrate and make the admin key first, so no two servers race to
    try:
        _, admin_key = key_admin.create_key(engine, "admin", [Role.ADMIN])
    finally:
        engine.dispose()
    directories = [tmp.mktemp("server") for _ in range(count)]
    with ThreadPoolExecutor(count) as pool:
        servers = list(
            pool.map(
                lambda d: launch_server(d, database_url=url, admin_key=admin_key, **settings), directories
            )
        )
    return Deployment(kind, backend, servers, databases)


@pytest.fixture(scope="module", params=["one", "several"])
def deployment(
    request: pytest.FixtureRequest, backend: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    count = 1 if request.param == "one" else 3
    made = start_deployment(request.param, backend, tmp_path_factory, count)
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def pair(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Two separate server processes on one database; retries are due at once."""
    made = start_deployment("pair", backend, tmp_path_factory, 2, retry_base_seconds=0)
    try:
        yield made
    finally:
        made.stop()


# --- clients ---------------------------------------------------------------------------------


class Caller:
    """One key on its own HTTP connection to one server."""

    def __init__(self, server: Server, key: str) -> None:
        self.server = server
        self.key = key
        self.client = http_client(60)

    def close(self) -> None:
        self.client.close()

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> Any:
        response = self.client.post(
            self.server.graphql_url,
            json={"query": query, "variables": variables or {}},
            headers={"Authorization": f"Bearer {self.key}"},
        )
        body = response.json()
        assert response.status_code == 200 and not body.get("errors"), body
        return body["data"]

    def claim(self, types: list[str], limit: int, wait: int, lease: int | None = None) -> list[Job]:
        variables = {"limit": limit, "types": types, "wait": wait, "lease": lease}
        return self.gql(CLAIM, variables)["claimJobs"]

    def complete(self, job: Job) -> None:
        self.gql(COMPLETE, {"id": job["id"], "attempt": job["attempt"]})


def admin(deployment: Deployment, i: int = 0) -> Caller:
    return Caller(deployment.server(i), deployment.admin_key)


def running(caller: Caller, job_type: str) -> int:
    (count,) = [c["running"] for c in caller.gql(CONTROLS)["typeControls"] if c["type"] == job_type]
    return int(count)


def enqueue(caller: Caller, inputs: list[dict[str, Any]]) -> None:
    for start in range(0, len(inputs), 500):
        caller.gql(ENQUEUE_MANY, {"inputs": inputs[start : start + 500]})


def all_jobs(caller: Caller, job_type: str) -> list[Job]:
    jobs: list[Job] = []
    after = None
    while True:
        page = caller.gql(JOBS_PAGE, {"type": job_type, "after": after})["jobs"]
        jobs += page["nodes"]
        if not page["pageInfo"]["hasNextPage"]:
            return jobs
        after = page["pageInfo"]["endCursor"]


def table_counts(deployment: Deployment, job_type: str) -> dict[str, int]:
    rows = deployment.sql("SELECT status, count(*) FROM jobs WHERE type = :t GROUP BY status", t=job_type)
    counts = {"pending": 0, "running": 0, "completed": 0, "failed": 0, "cancelled": 0}
    counts.update({str(status): int(n) for status, n in rows})
    return counts


def api_counts(caller: Caller, job_type: str) -> dict[str, int]:
    for entry in caller.gql(STATS)["queueStats"]["byType"]:
        if entry["type"] == job_type:
            return dict(entry["counts"])
    return {}


def utc(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), value
    return parsed


def max_overlap(intervals: Sequence[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one moment; one that ends as another starts is not open."""
    moments = [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals]
    most = now = 0
    for _, step in sorted(moments):  # at equal times -1 sorts first
        now += step
        most = max(most, now)
    return most


def max_in_window(moments: Sequence[datetime], seconds: float) -> int:
    """The most of `moments` inside any half-open window [t, t + seconds)."""
    ordered = sorted(moments)
    width = timedelta(seconds=seconds)
    return max((bisect.bisect_left(ordered, t + width) - i for i, t in enumerate(ordered)), default=0)


def recorded_within(holds: bool, deployment: Deployment, what: str) -> None:
    """The check of the recorded times, made last (after every live sample has passed)."""
    if not holds:
        pytest.fail(f"{what} ({deployment.backend}, {len(deployment.servers)} server(s))")


@dataclass
class Run:
    """Worker threads and samplers, stopped together; the first error is raised at the end."""

    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, body: Callable[[], None]) -> None:
        def run() -> None:
            try:
                body()
            except BaseException as exc:  # raised by finish(), on the test's thread
                self.errors.append(exc)
                self.stop.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def sample(self, once: Callable[[], None], every: float = 0.002) -> None:
        """Call `once` over and over on a thread until the run stops; returns after the first
        call, so that the workers started next are watched from their first claim."""
        first = threading.Event()

        def body() -> None:
            try:
                while not self.stop.is_set():
                    once()
                    first.set()
                    time.sleep(every)
            finally:
                first.set()

        self.start(body)
        first.wait(30)

    def wait_until(self, done: Callable[[], bool], deadline: float, what: str) -> None:
        end = time.monotonic() + deadline
        while not done() and not self.stop.is_set():
            if time.monotonic() > end:
                self.stop.set()
                pytest.fail(f"not within {deadline:.0f} s: {what}")
            time.sleep(0.05)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        if self.errors:
            raise self.errors[0]


def worker_loop(
    run: Run,
    caller: Caller,
    types: list[str],
    finished: Counter[str],
    lock: threading.Lock,
    hold: tuple[float, float],
    seed: int,
    lease: int | None = None,
) -> Callable[[], None]:
    """Claim (1-3 at a time, long-polling 1 s), hold each job a random while, complete it."""
    rng = random.Random(seed)

    def body() -> None:
        try:
            while not run.stop.is_set():
                for job in caller.claim(types, rng.randint(1, 3), wait=1, lease=lease):
                    time.sleep(rng.uniform(*hold))
                    caller.complete(job)
                    with lock:
                        finished["done"] += 1
        finally:
            caller.close()

    return body


def start_workers(
    run: Run, deployment: Deployment, types: list[str], hold: tuple[float, float], workers: int = WORKERS
) -> Counter[str]:
    finished: Counter[str] = Counter()
    lock = threading.Lock()
    keys = [deployment.key("worker") for _ in range(6)]
    for i in range(workers):
        caller = Caller(deployment.server(i), keys[i % len(keys)])
        run.start(worker_loop(run, caller, types, finished, lock, hold, seed=i))
    return finished


# --- concurrency limits ----------------------------------------------------------------------


def test_max_running_is_never_exceeded(deployment: Deployment) -> None:
    job_type = next(_types)
    # 20 times over, the 24 workers race for the 3 slots as they free up: more jobs only make
    # more rounds of the same race.
    jobs = 60
    boss = admin(deployment)
    boss.gql(SET_CONTROL, {"input": {"type": job_type, "maxRunning": MAX_RUNNING}})
    enqueue(boss, [{"type": job_type, "payload": {"n": n}} for n in range(jobs)])

    run = Run()
    seen_api: list[int] = []
    seen_table: list[int] = []

    samplers = [admin(deployment, i) for i in range(len(deployment.servers))]
    callers = itertools.cycle(samplers)

    def sample() -> None:
        seen_api.append(running(next(callers), job_type))
        table = deployment.sql("SELECT count(*) FROM jobs WHERE type = :t AND status = 'running'", t=job_type)
        seen_table.append(int(table[0][0]))

    run.sample(sample)
    started = time.monotonic()
    finished = start_workers(run, deployment, [job_type], hold=(0.0, 0.03))
    try:
        run.wait_until(lambda: finished["done"] >= jobs, RUN_DEADLINE, f"{jobs} jobs completed ({finished})")
    finally:
        run.finish()
    took = time.monotonic() - started

    done = all_jobs(boss, job_type)
    assert len(done) == jobs
    assert Counter(j["status"] for j in done) == {"COMPLETED": jobs}
    assert all(j["attempt"] == 1 for j in done)
    overlap = max_overlap([(utc(j["claimedAt"]), utc(j["finishedAt"])) for j in done])
    print(
        f"\n{deployment.kind}: {jobs} jobs in {took:.1f} s; samples {len(seen_api)} api / "
        f"{len(seen_table)} table, max running {max(seen_api)} / {max(seen_table)}; "
        f"max overlap of claim->finish {overlap}"
    )
    assert max(seen_api) <= MAX_RUNNING, Counter(seen_api)
    assert max(seen_table) <= MAX_RUNNING, Counter(seen_table)
    assert max(seen_api) == MAX_RUNNING  # the limit was reached, not merely respected
    assert running(boss, job_type) == 0 == table_counts(deployment, job_type)["running"]
    for caller in [boss, *samplers]:
        caller.close()
    recorded_within(overlap <= MAX_RUNNING, deployment, f"{overlap} claim->finish intervals overlap")


def test_max_running_per_key_is_never_exceeded(deployment: Deployment) -> None:
    job_type = next(_types)
    keys = ["k0", "k1", "k2", "k3"]
    # Each key's slots are taken 5 times over while 24 workers race for them (and for the
    # unkeyed jobs beside): more jobs only make more rounds of the same race.
    per_key_jobs, unkeyed_jobs = 10, 10
    boss = admin(deployment)
    boss.gql(SET_CONTROL, {"input": {"type": job_type, "maxRunningPerKey": PER_KEY}})
    inputs: list[dict[str, Any]] = [{"type": job_type, "concurrencyKey": k} for k in keys * per_key_jobs]
    inputs += [{"type": job_type}] * unkeyed_jobs
    random.Random(7).shuffle(inputs)
    enqueue(boss, inputs)
    jobs = len(inputs)

    run = Run()
    worst_api: Counter[str] = Counter()
    worst_table: Counter[str] = Counter()
    samples = Counter[str]()

    samplers = [admin(deployment, i) for i in range(len(deployment.servers))]
    callers = itertools.cycle(samplers)

    def sample() -> None:
        page = next(callers).gql(RUNNING_KEYS, {"type": job_type})["jobs"]
        assert page["totalCount"] <= 100
        for key, n in Counter(node["concurrencyKey"] for node in page["nodes"]).items():
            worst_api[str(key)] = max(worst_api[str(key)], n)
        rows = deployment.sql(
            "SELECT concurrency_key, count(*) FROM jobs WHERE type = :t AND status = 'running'"
            " GROUP BY concurrency_key",
            t=job_type,
        )
        for key, n in rows:
            worst_table[str(key)] = max(worst_table[str(key)], int(n))
        samples["n"] += 1

    run.sample(sample)
    finished = start_workers(run, deployment, [job_type], hold=(0.0, 0.03))
    try:
        run.wait_until(lambda: finished["done"] >= jobs, RUN_DEADLINE, f"{jobs} jobs completed ({finished})")
    finally:
        run.finish()

    done = all_jobs(boss, job_type)
    assert Counter(j["status"] for j in done) == {"COMPLETED": jobs}
    assert all(j["attempt"] == 1 for j in done)
    overlaps = {
        key: max_overlap(
            [(utc(j["claimedAt"]), utc(j["finishedAt"])) for j in done if j["concurrencyKey"] == key]
        )
        for key in keys
    }
    unkeyed = max_overlap(
        [(utc(j["claimedAt"]), utc(j["finishedAt"])) for j in done if j["concurrencyKey"] is None]
    )
    print(
        f"\n{deployment.kind}: {samples['n']} samples; worst running per key api {dict(worst_api)}, "
        f"table {dict(worst_table)}; claim->finish overlap per key {overlaps}, unkeyed {unkeyed}"
    )
    for key in keys:
        assert worst_api[key] <= PER_KEY, (key, worst_api)
        assert worst_table[key] <= PER_KEY, (key, worst_table)
    assert max(worst_api[k] for k in keys) == PER_KEY  # reached
    assert running(boss, job_type) == 0 == table_counts(deployment, job_type)["running"]
    for caller in [boss, *samplers]:
        caller.close()
    worst = max(overlaps.values())
    recorded_within(worst <= PER_KEY, deployment, f"claim->finish intervals of one key overlap: {overlaps}")


# --- rate limits -----------------------------------------------------------------------------


def test_a_rate_limit_holds_in_every_window_and_is_reached(deployment: Deployment) -> None:
    job_type = next(_types)
    boss = admin(deployment)
    boss.gql(SET_CONTROL, {"input": {"type": job_type, "rateLimit": {"limit": RATE, "periodSeconds": 1}}})
    enqueue(boss, [{"type": job_type}] * (RATE * (RATE_LONG_SECONDS + 4)))
    goal = 0.95 * RATE * RATE_SECONDS

    def claim_moments() -> list[datetime]:
        return sorted(utc(j["claimedAt"]) for j in all_jobs(boss, job_type) if j["claimedAt"] is not None)

    run = Run()
    # Fewer workers than the other scenarios: each held claim re-checks every 0.1 s, and on a
    # busy machine 24 of them cost the servers the time the claims themselves need.
    finished = start_workers(run, deployment, [job_type], hold=(0.0, 0.005), workers=RATE_WORKERS)
    try:
        run.wait_until(lambda: finished["done"] >= RATE * (RATE_SECONDS + 2), RUN_DEADLINE, "the run")
        if max_in_window(claim_moments(), RATE_SECONDS) < goal:
            # A CI machine running six test processes on two cores starves the servers for
            # seconds at a time (seen: 7, 20, 8, 14, 20, 19 claims a second). The limiter must
            # reach the limit whenever it gets the CPU: give the run more seconds to show it,
            # and every 1 s window of the longer run must still hold the limit.
            longer = RATE * RATE_LONG_SECONDS
            run.wait_until(lambda: finished["done"] >= longer, RUN_DEADLINE, "the longer run")
    finally:
        run.finish()

    claimed = [j for j in all_jobs(boss, job_type) if j["claimedAt"] is not None]
    moments = sorted(utc(j["claimedAt"]) for j in claimed)
    first = moments[0]
    # The best stretch of RATE_SECONDS, wherever it starts: start-up, or a moment when a busy
    # machine starves the servers, does not count against the claims reaching the limit.
    measured = max_in_window(moments, RATE_SECONDS)
    busiest = max_in_window(moments, 1.0)
    per_second = Counter(int((m - first).total_seconds()) for m in moments)
    print(
        f"\n{deployment.kind}: {len(moments)} claims; busiest 1 s window {busiest}; "
        f"{measured} in the best {RATE_SECONDS} s; per second {sorted(per_second.items())}"
    )
    assert measured >= goal, sorted(per_second.items())
    assert all(j["attempt"] == 1 for j in claimed)
    boss.close()
    recorded_within(busiest <= RATE, deployment, f"a 1 s window holds {busiest} claims")


# --- several servers -------------------------------------------------------------------------


def test_a_server_killed_while_its_worker_holds_every_slot_loses_none(pair: Deployment) -> None:
    job_type, keyed_type = next(_types), next(_types)
    jobs, lease = 40, 3
    doomed, survivor = pair.servers
    boss = admin(pair, 1)
    boss.gql(SET_CONTROL, {"input": {"type": job_type, "maxRunning": MAX_RUNNING}})
    boss.gql(SET_CONTROL, {"input": {"type": keyed_type, "maxRunningPerKey": 1}})
    enqueue(boss, [{"type": job_type}] * jobs + [{"type": keyed_type, "concurrencyKey": "k"}] * 4)

    # A worker on the doomed server takes every slot, then the server dies mid-flight.
    holder = Caller(doomed, pair.key("worker"))
    held = holder.claim([job_type], limit=10, wait=0, lease=lease)
    held += holder.claim([keyed_type], limit=10, wait=0, lease=lease)
    assert Counter(j.get("concurrencyKey") for j in held) == {None: MAX_RUNNING, "k": 1}
    # The earliest lease to expire is that of the first claim: no slot may come back before it.
    claimed_at = min(utc(j["claimedAt"]) for j in held)
    assert running(boss, job_type) == MAX_RUNNING == table_counts(pair, job_type)["running"]
    # Claims waiting on the doomed server when it dies (each on its own connection).
    waiting = [Caller(doomed, holder.key) for _ in range(4)]
    with ThreadPoolExecutor(len(waiting)) as pool:
        pending = [pool.submit(c.claim, [job_type, keyed_type], 1, 10, lease) for c in waiting]
        time.sleep(0.3)
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait(10)
        # Each ends with an error (the connection died) or, answered before it did, with
        # jobs that are then held by no one as well.
        for future in pending:
            if future.exception(30) is None:
                held += future.result()
    for caller in [holder, *waiting]:
        caller.close()

    # The survivor's workers get nothing until the leases expire, then finish everything.
    run = Run()
    seen: list[int] = []
    first_claims: list[datetime] = []

    watcher = admin(pair, 1)

    def survivor_worker(seed: int) -> Callable[[], None]:
        caller = Caller(survivor, pair.key("worker"))
        rng = random.Random(seed)

        def body() -> None:
            while not run.stop.is_set():
                for job in caller.claim([job_type, keyed_type], rng.randint(1, 2), wait=1, lease=60):
                    first_claims.append(utc(job["claimedAt"]))
                    time.sleep(rng.uniform(0, 0.02))
                    caller.complete(job)
            caller.close()

        return body

    run.sample(lambda: seen.append(running(watcher, job_type)), every=0.01)
    for seed in range(8):
        run.start(survivor_worker(seed))

    def all_done() -> bool:
        return (
            table_counts(pair, job_type)["completed"] == jobs
            and table_counts(pair, keyed_type)["completed"] == 4
        )

    try:
        run.wait_until(all_done, RUN_DEADLINE, "every job completed after the kill")
    finally:
        run.finish()

    came_back = (min(first_claims) - claimed_at).total_seconds()
    print(
        f"\nkill -9: slots came back {came_back:.2f} s after the first claim (lease {lease} s); "
        f"max running {max(seen)}"
    )
    assert came_back >= lease - 0.05  # not before the leases expired
    assert max(seen) <= MAX_RUNNING
    for kind, count in ((job_type, jobs), (keyed_type, 4)):
        done = all_jobs(boss, kind)
        assert Counter(j["status"] for j in done) == {"COMPLETED": count}
        # Every job the dead server's worker held came back through lease expiry (on a slow
        # machine a lease may also expire before the kill and the job be claimed there again).
        expired = {j["id"]: j for j in done if "LEASE_EXPIRED" in [e["kind"] for e in j["events"]]}
        assert {j["id"] for j in held} & {j["id"] for j in done} <= set(expired)
        assert all(j["attempt"] >= 2 for j in expired.values()), expired
        assert running(boss, kind) == 0
        assert api_counts(boss, kind) == table_counts(pair, kind)
    boss.close()
    watcher.close()


def test_resume_on_one_server_wakes_a_claim_long_polling_on_another(pair: Deployment) -> None:
    job_type = next(_types)
    one, other = admin(pair, 0), Caller(pair.servers[1], pair.key("worker"))
    one.gql(PAUSE, {"type": job_type})
    enqueue(one, [{"type": job_type}])
    with ThreadPoolExecutor(1) as pool:
        polled = pool.submit(other.claim, [job_type], 1, 3)
        time.sleep(0.6)
        assert not polled.done()
        sent = time.monotonic()
        one.gql(RESUME, {"type": job_type})
        jobs = polled.result(30)
        woke = time.monotonic() - sent
    one.close()
    other.close()
    print(
        f"\nresumeType on server 1 -> claim on server 2 answered after {woke:.2f} s with {len(jobs)} job(s)"
    )
    assert len(jobs) == 1 and woke < 1.0


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_claim_is_stamped_after_the_finish_that_freed_its_slot(
    backend: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Made deterministic by holding the controlled-claim lock from outside for a moment: the
    # claim's batch has begun (and taken its time) and waits for the lock, the completion that
    # frees the slot commits meanwhile, then the claim goes on and takes that slot.
    made = start_deployment("one", backend, tmp_path_factory, 1)
    try:
        job_type = next(_types)
        boss = admin(made)
        worker = Caller(made.servers[0], made.key("worker"))
        waiter = Caller(made.servers[0], worker.key)
        boss.gql(SET_CONTROL, {"input": {"type": job_type, "maxRunning": 1}})
        enqueue(boss, [{"type": job_type}] * 2)
        (first,) = worker.claim([job_type], 1, wait=0)
        with psycopg.connect(made.servers[0].database_url) as lock, ThreadPoolExecutor(1) as pool:
            lock.execute(PostgresStatements.LOCK_CONTROLLED_CLAIMS)  # held until the commit
            claiming = pool.submit(waiter.claim, [job_type], 1, 0)
            time.sleep(0.5)
            assert not claiming.done()
            worker.complete(first)
            lock.commit()
            (second,) = claiming.result(30)
        finished = {j["id"]: j for j in all_jobs(boss, job_type)}[first["id"]]["finishedAt"]
        gap = (utc(second["claimedAt"]) - utc(finished)).total_seconds()
        print(f"\nsecond claim stamped {gap:+.3f} s after the first job's finish")
        for caller in (boss, worker, waiter):
            caller.close()
        assert gap >= 0, (
            f"claimedAt {second['claimedAt']} is before the finish {finished} that freed its slot"
        )
    finally:
        made.stop()
