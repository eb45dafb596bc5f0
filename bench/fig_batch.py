"""Figure 3: batches over HTTP in jobs/s, with a raw in-process sqlite3 ceiling beside them.

queuelog (one `serve`, fresh database), C connections, three phases in turn, each bounded
by --batch-jobs jobs and --batch-seconds seconds:

1. enqueue:  producers send `enqueueJobs` of 100 (bodies built beforehand);
2. claim:    workers (one WORKER key each) call `claimJobs(limit: 100)` until [] and hold
             what they get;
3. complete: each worker sends `completeJobs` of 100 items (id, attempt, result).

The ceiling does the same phases in this process on stdlib sqlite3 (the baseline's table,
WAL, synchronous=NORMAL), sequentially, one transaction per batch of 100: executemany
INSERT, `UPDATE ... WHERE id IN (SELECT ... LIMIT 100) RETURNING`, executemany guarded
UPDATE. No HTTP, no JSON: a ceiling for context, not a target (one row, one index).

The target's baseline is `bench/storage_floor.py --sql-only`, run here in the same process
right after: queuelog's own statements on its migrated schema through stdlib sqlite3, with
no queuelog code above them. Its CPU per job is the floor no server can go under on one
core; each phase must reach >= 0.75x of its jobs/s (1 / CPU per job).

On PostgreSQL the target's baseline is `storage_floor.py --sql-only --database postgresql`
(`sql_floor_pg`): queuelog's own PostgreSQL statements (bench/_pg_same_sql.py), the same
transactions queuelog runs for a batch of 100, on raw psycopg (sync) in this process, one
connection, on a fresh database migrated to queuelog's schema. Its rate is jobs/s of wall
time (it waits for each COMMIT's flush, as queuelog does); each phase must reach >= 0.7x of
it (issue 31). Its CPU per job, this process's and its backend's, is shown beside
queuelog's server and backends.

On `--database postgresql` queuelog serves from a fresh PostgreSQL database and the ceiling
runs the same phases on raw psycopg (`raw_ceiling_pg`); both tables get VACUUM ANALYZE
between the enqueue and the claim phase (untimed), and the CPU of the PostgreSQL backends
is shown per job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench import _baseline_app as base
from bench import _baseline_pg_app as pg_app
from bench import _pg
from bench._api import COMPLETE_MANY, RESULT, Api, chunks, enqueue_many, job_input
from bench._common import (
    HttpConnection,
    HttpError,
    ServerProcess,
    bearer,
    cpu_delta,
    graphql_body,
    graphql_data,
    migrate,
    percentile,
    process_cpu_seconds,
)
from bench._context import Context
from bench._report import Figure, ms, num, ratio, rx
from bench.storage_floor import measure_sql, measure_sql_pg
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head

ENQUEUE_MANY = (
    "mutation EnqueueMany($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
)
CLAIM_MANY = "mutation ClaimMany { claimJobs(limit: 100) { id type payload attempt } }"
BATCH = 100
FLOOR_TARGET = 0.75  # of storage_floor.py --sql-only's jobs/s, same run
PG_FLOOR_TARGET = 0.7  # PostgreSQL (issue 31): of the same statements' jobs/s on raw psycopg
FLOOR_BATCHES = 300


@dataclass
class Phase:
    jobs: int = 0
    seconds: float = 0.0
    calls: list[float] = field(default_factory=list)  # latency per call
    server_cpu: float | None = None
    client_cpu: float | None = None
    db_cpu: float | None = None  # PostgreSQL backends (PostgreSQL runs only)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else float("nan")

    def summary(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "seconds": round(self.seconds, 4),
            "jobs_per_s": round(self.rate, 1),
            "calls": len(self.calls),
            "p50_call_ms": round(percentile(self.calls, 50) * 1000, 3),
            "p99_call_ms": round(percentile(self.calls, 99) * 1000, 3),
            "server_cpu_s": self.server_cpu,
            "client_cpu_s": round(self.client_cpu, 3) if self.client_cpu is not None else None,
            "db_cpu_s": round(self.db_cpu, 3) if self.db_cpu is not None else None,
        }


async def measured(server: ServerProcess | None, work: Callable[[Phase], Awaitable[None]]) -> Phase:
    phase = Phase()
    db_before = server.db_cpu_snapshot() if server else None
    cpu_before = server.cpu_seconds() if server else None
    client_before = time.process_time()
    started = time.perf_counter()
    await work(phase)
    phase.seconds = time.perf_counter() - started
    phase.client_cpu = time.process_time() - client_before
    if server is not None and cpu_before is not None:
        after = server.cpu_seconds()
        phase.server_cpu = after - cpu_before if after is not None else None
    if server is not None:
        phase.db_cpu = cpu_delta(db_before, server.db_cpu_snapshot())
    return phase


def batch_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    queuelog = ctx.queuelog()
    names = [("bench-producer", "producer")] + [
        (f"bench-worker-{i}", "worker") for i in range(s.batch_connections)
    ]
    keys = ctx.keys(queuelog, names)
    workers = [keys[f"bench-worker-{i}"] for i in range(s.batch_connections)]
    url = queuelog.url

    async def warm_up() -> None:
        await enqueue_many(url, keys["bench-producer"], 2000, batch=BATCH, connections=2, start=50_000_000)
        async with Api(url, workers[0]) as api:
            while jobs := (await api.call(CLAIM_MANY))["claimJobs"]:
                items = [{"id": j["id"], "attempt": j["attempt"], "result": RESULT} for j in jobs]
                await api.call(COMPLETE_MANY, {"items": items})

    ctx.run(warm_up())
    bodies = [
        graphql_body(ENQUEUE_MANY, {"inputs": [job_input(i) for i in ids]})
        for ids in chunks(range(s.batch_jobs), BATCH)
    ]
    held: list[list[tuple[str, int]]] = [[] for _ in workers]

    async def enqueue(phase: Phase) -> None:
        pending = iter(bodies)
        deadline = time.perf_counter() + s.batch_seconds

        async def producer() -> None:
            conn = HttpConnection(url, bearer(keys["bench-producer"]))
            try:
                for body in pending:
                    if time.perf_counter() > deadline:
                        return
                    started = time.perf_counter()
                    answer = graphql_data(*await conn.post("/graphql", body))["enqueueJobs"]
                    phase.calls.append(time.perf_counter() - started)
                    if len(answer) != BATCH:
                        raise HttpError(f"enqueueJobs answered {len(answer)} jobs of {BATCH}")
                    phase.jobs += BATCH
            finally:
                await conn.close()

        await asyncio.gather(*(producer() for _ in workers))

    async def claim(phase: Phase) -> None:
        deadline = time.perf_counter() + s.batch_seconds
        body = graphql_body(CLAIM_MANY)

        async def worker(index: int) -> None:
            conn = HttpConnection(url, bearer(workers[index]))
            try:
                while time.perf_counter() < deadline:
                    started = time.perf_counter()
                    jobs = graphql_data(*await conn.post("/graphql", body))["claimJobs"]
                    phase.calls.append(time.perf_counter() - started)
                    if not jobs:
                        return
                    held[index].extend((j["id"], j["attempt"]) for j in jobs)
                    phase.jobs += len(jobs)
            finally:
                await conn.close()

        await asyncio.gather(*(worker(i) for i in range(len(workers))))

    complete_bodies: list[list[bytes]] = []  # built after the claim phase, outside the timing

    async def complete(phase: Phase) -> None:
        deadline = time.perf_counter() + s.batch_seconds

        async def worker(index: int) -> None:
            conn = HttpConnection(url, bearer(workers[index]))
            try:
                for part, body in zip(chunks(held[index], BATCH), complete_bodies[index], strict=True):
                    if time.perf_counter() > deadline:
                        return
                    started = time.perf_counter()
                    outcome = graphql_data(*await conn.post("/graphql", body))["completeJobs"]
                    phase.calls.append(time.perf_counter() - started)
                    if outcome["rejected"] or len(outcome["completed"]) != len(part):
                        raise HttpError(f"completeJobs rejected {outcome['rejected'][:5]}")
                    phase.jobs += len(part)
            finally:
                await conn.close()

        await asyncio.gather(*(worker(i) for i in range(len(workers))))

    with ctx.profile(queuelog):
        phases = {
            "enqueue": ctx.run(measured(queuelog, enqueue)),
        }
        ctx.maintain(queuelog)  # PostgreSQL: VACUUM ANALYZE, as the ceiling does between phases
        phases["claim"] = ctx.run(measured(queuelog, claim))
        complete_bodies[:] = [
            [
                graphql_body(
                    COMPLETE_MANY, {"items": [{"id": i, "attempt": a, "result": RESULT} for i, a in part]}
                )
                for part in chunks(jobs, BATCH)
            ]
            for jobs in held
        ]
        phases["complete"] = ctx.run(measured(queuelog, complete))
    ctx.log(", ".join(f"{k} {v.jobs} jobs in {v.seconds:.2f} s" for k, v in phases.items()))
    ceiling = (raw_ceiling_pg if s.postgres else raw_ceiling)(ctx, s.batch_jobs, s.batch_seconds)

    titles = {
        "enqueue": f"enqueueJobs (100 a call), {len(workers)} conns",
        "claim": f"claimJobs(limit: 100), {len(workers)} conns",
        "complete": f"completeJobs (100 items), {len(workers)} conns",
    }
    floor = None if s.postgres else sql_floor(ctx)
    pg_floor = sql_floor_pg(ctx) if s.postgres else None
    for name, title in titles.items():
        q, c = phases[name], ceiling[name]
        fig.add(
            title, num(q.rate, 0, "jobs/s"), num(c.rate, 0, "jobs/s (ceiling)"), rx(ratio(q.rate, c.rate))
        )
        if floor is not None:
            floor_rate = 1e6 / floor[name]
            r = ratio(q.rate, floor_rate)
            fig.add(
                "  against storage_floor.py --sql-only",
                "",
                f"{floor_rate:,.0f} jobs/s ({floor[name]:.1f} us)",
                rx(r),
                f">= {FLOOR_TARGET:g}x",
                met=r is not None and r >= FLOOR_TARGET,
            )
        if pg_floor is not None:
            _pg_floor_rows(fig, q, pg_floor[name])
        fig.add(
            "  per call p50 / p99, ms",
            f"{ms(percentile(q.calls, 50))} / {ms(percentile(q.calls, 99))}",
            f"{ms(percentile(c.calls, 50))} / {ms(percentile(c.calls, 99))}",
        )
        q_cpu = q.server_cpu / q.jobs if q.server_cpu is not None and q.jobs else None
        c_cpu = c.server_cpu / c.jobs if c.server_cpu is not None and c.jobs else None
        fig.add("  server CPU per job, ms", ms(q_cpu), ms(c_cpu), rx(ratio(q_cpu, c_cpu)))
        if q.db_cpu is not None and c.db_cpu is not None:
            q_db = q.db_cpu / q.jobs if q.jobs else None
            c_db = c.db_cpu / c.jobs if c.jobs else None
            fig.add("  PostgreSQL CPU per job, ms", ms(q_db), ms(c_db), rx(ratio(q_db, c_db)))
        share = 100 * (q.client_cpu or 0) / q.seconds if q.seconds else None
        if share is not None and share > 60:
            fig.notes.append(f"{name}: the client used {share:.0f}% CPU; it may limit that rate")
    fig.notes.append(
        "client CPU share of wall: "
        + ", ".join(
            f"{k} {100 * (v.client_cpu or 0) / v.seconds:.0f}%" for k, v in phases.items() if v.seconds
        )
    )
    fig.data = {
        "connections": len(workers),
        "queuelog": {k: v.summary() for k, v in phases.items()},
        "ceiling": {k: v.summary() for k, v in ceiling.items()},
        "sql_floor_us_per_job": floor,
        "pg_sql_floor": pg_floor,
    }


def _pg_floor_rows(fig: Figure, q: Phase, floor: dict[str, float]) -> None:
    """queuelog's phase against its own statements on raw psycopg: jobs/s (the target), and
    CPU per job of the process (queuelog's server; the floor's bench process) and of PostgreSQL."""
    r = ratio(q.rate, floor["rate"])
    fig.add(
        "  against the same statements, raw psycopg",
        "",
        num(floor["rate"], 0, "jobs/s"),
        rx(r),
        f">= {PG_FLOOR_TARGET:g}x",
        met=r is not None and r >= PG_FLOOR_TARGET,
    )
    q_cpu = q.server_cpu / q.jobs if q.server_cpu is not None and q.jobs else None
    q_db = q.db_cpu / q.jobs if q.db_cpu is not None and q.jobs else None
    f_cpu, f_db = floor["cpu_us"] / 1e6, floor["db_cpu_us"] / 1e6
    fig.add("    process CPU per job, ms (server; floor)", ms(q_cpu), ms(f_cpu), rx(ratio(q_cpu, f_cpu)))
    fig.add("    PostgreSQL CPU per job, ms", ms(q_db), ms(f_db), rx(ratio(q_db, f_db)))


def sql_floor_pg(ctx: Context) -> dict[str, dict[str, float]]:
    """`storage_floor.py --sql-only --database postgresql` in this process, on a fresh database
    migrated to queuelog's schema: per phase, jobs/s and CPU per job (here and PostgreSQL)."""
    url = ctx.database_url("floor")
    migrate(url)
    floor = measure_sql_pg(url, FLOOR_BATCHES, ctx.settings.batch_seconds)
    ctx.log(
        "storage floor on PostgreSQL (SQL only): "
        + ", ".join(
            f"{k} {v['rate']:,.0f} jobs/s, {v['cpu_us']:.1f} + {v['db_cpu_us']:.1f} us per job"
            for k, v in floor.items()
        )
    )
    return floor


def sql_floor(ctx: Context) -> dict[str, float]:
    """`storage_floor.py --sql-only` in this process: CPU microseconds per job per phase."""
    path = ctx.dir() / "floor.db"
    engine = create_sync_engine(f"sqlite:///{path}")
    upgrade_to_head(engine)
    engine.dispose()
    floor = measure_sql(str(path), FLOOR_BATCHES)
    ctx.log("storage floor (SQL only), us per job: " + ", ".join(f"{k} {v:.1f}" for k, v in floor.items()))
    return floor


def raw_ceiling(ctx: Context, jobs: int, seconds: float) -> dict[str, Phase]:
    """The same three phases on raw sqlite3 in this process (its CPU counts as the server's)."""
    path = ctx.dir() / "ceiling.db"
    out: dict[str, Phase] = {}
    with contextlib.closing(base.connect(str(path))) as db:

        def transaction(fn: Callable[[], Any]) -> Any:
            db.execute("BEGIN IMMEDIATE")
            try:
                value = fn()
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return value

        def timed(name: str, body: Callable[[Phase, float], None]) -> None:
            phase = Phase()
            cpu = time.process_time()
            started = time.perf_counter()
            body(phase, started + seconds)
            phase.seconds = time.perf_counter() - started
            phase.server_cpu = time.process_time() - cpu
            out[name] = phase

        def enqueue(phase: Phase, deadline: float) -> None:
            for ids in chunks(range(jobs), BATCH):
                if time.perf_counter() > deadline:
                    return
                started = time.perf_counter()
                now = base.micros()
                rows = [base.insert_params(job_input(i), now) for i in ids]
                transaction(lambda rows=rows: db.executemany(base.INSERT_SQL, rows))
                phase.calls.append(time.perf_counter() - started)
                phase.jobs += len(rows)

        held: list[tuple[int, int]] = []

        def claim(phase: Phase, deadline: float) -> None:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                now = base.micros()
                params = (base.WORKER, now, now + base.LEASE_MICROS, now, now, BATCH)
                rows = transaction(lambda params=params: db.execute(base.CLAIM_MANY_SQL, params).fetchall())
                phase.calls.append(time.perf_counter() - started)
                if not rows:
                    return
                held.extend((row[0], row[3]) for row in rows)
                phase.jobs += len(rows)

        def complete(phase: Phase, deadline: float) -> None:
            result = json.dumps(RESULT, separators=(",", ":"))
            for part in chunks(held, BATCH):
                if time.perf_counter() > deadline:
                    return
                started = time.perf_counter()
                now = base.micros()
                params = [(result, now, now, job_id, base.WORKER, attempt) for job_id, attempt in part]
                cursor = transaction(lambda params=params: db.executemany(base.COMPLETE_SQL, params))
                if cursor.rowcount != len(part):
                    raise RuntimeError(f"ceiling completed {cursor.rowcount} of {len(part)}")
                phase.calls.append(time.perf_counter() - started)
                phase.jobs += len(part)

        timed("enqueue", enqueue)
        timed("claim", claim)
        timed("complete", complete)
    return out


def raw_ceiling_pg(ctx: Context, jobs: int, seconds: float) -> dict[str, Phase]:
    """The same three phases on raw psycopg (sync) in this process, on a fresh PostgreSQL
    database with the PostgreSQL baseline's table; one transaction per batch of 100:
    executemany INSERT (psycopg pipelines it), `UPDATE ... WHERE id IN (SELECT ... LIMIT
    100 FOR UPDATE SKIP LOCKED) RETURNING`, executemany guarded UPDATE. Its "server CPU" is
    this process's; its PostgreSQL CPU that of its one backend."""
    url = ctx.database_url("ceiling")
    _pg.create_baseline_schema(url)
    out: dict[str, Phase] = {}
    with contextlib.closing(_pg.psycopg().connect(url, autocommit=False)) as db:
        backend = db.info.backend_pid if _pg.is_local(url) else None
        result = json.dumps(RESULT, separators=(",", ":"))
        held: list[tuple[int, int]] = []

        def timed(name: str, body: Callable[[Phase, float], None]) -> None:
            phase = Phase()
            cpu = time.process_time()
            db_cpu = process_cpu_seconds(backend) if backend else None
            started = time.perf_counter()
            body(phase, started + seconds)
            phase.seconds = time.perf_counter() - started
            phase.server_cpu = time.process_time() - cpu
            db_after = process_cpu_seconds(backend) if backend else None
            phase.db_cpu = db_after - db_cpu if db_cpu is not None and db_after is not None else None
            out[name] = phase

        def enqueue(phase: Phase, deadline: float) -> None:
            for ids in chunks(range(jobs), BATCH):
                if time.perf_counter() > deadline:
                    return
                started = time.perf_counter()
                rows = [
                    (
                        item["type"],
                        json.dumps(item["payload"], separators=(",", ":"), ensure_ascii=False),
                        0,
                        3,
                        None,
                        base.PRODUCER,
                    )
                    for item in (job_input(i) for i in ids)
                ]
                with db.cursor() as cursor:
                    cursor.executemany(pg_app.INSERT_SQL, rows)
                db.commit()
                phase.calls.append(time.perf_counter() - started)
                phase.jobs += len(rows)

        def claim(phase: Phase, deadline: float) -> None:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                rows = db.execute(pg_app.CLAIM_MANY_SQL, (base.WORKER, BATCH)).fetchall()
                db.commit()
                phase.calls.append(time.perf_counter() - started)
                if not rows:
                    return
                held.extend((row[0], row[3]) for row in rows)
                phase.jobs += len(rows)

        def complete(phase: Phase, deadline: float) -> None:
            for part in chunks(held, BATCH):
                if time.perf_counter() > deadline:
                    return
                started = time.perf_counter()
                params = [(result, job_id, base.WORKER, attempt) for job_id, attempt in part]
                with db.cursor() as cursor:
                    cursor.executemany(pg_app.COMPLETE_SQL, params)
                    done = cursor.rowcount
                db.commit()
                if done != len(part):
                    raise RuntimeError(f"ceiling completed {done} of {len(part)}")
                phase.calls.append(time.perf_counter() - started)
                phase.jobs += len(part)

        timed("enqueue", enqueue)
        _pg.vacuum_analyze(url, ("jobs",))  # as queuelog's tables get between these phases
        timed("claim", claim)
        timed("complete", complete)
    return out
