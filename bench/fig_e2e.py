"""Figure 4: end to end, one worker process draining no-op jobs, against huey.

queuelog: a fresh `serve`; N no-op jobs enqueued first (`enqueueJobs` of 1000); then one
`python -m queuelog worker --concurrency 64` with an async no-op handler is launched, and
the bench polls `queueStats` (10 per second) until all N are COMPLETED, then stops it.
jobs/s = N / (last finishedAt - first claimedAt), read back through the API
(`jobs(status: COMPLETED)`, every page), so it is the server's own clock and leaves the
worker's start-up out; wall = worker launch .. all COMPLETED seen, start-up included.

huey: N no-op tasks put in a SqliteHuey file first (results off), then huey's own consumer
with thread workers drains them (`bench/_huey_app.py`); tasks/s = N / (first task started
.. last task finished, from huey's signals), wall = consumer launch .. all done. Once per
worker count (4 and 16), each on a copy of the same filled file; the best counts.

On `--database postgresql` queuelog serves from a fresh PostgreSQL database and the peer is
PgQueuer instead of huey (`bench/_pgqueuer_app.py`): for each --pgqueuer-configs entry
(driver, batch size, max concurrent tasks) a fresh database gets pgqueuer's schema and N
no-op jobs first, then PgQueuer's own worker (`pgqueuer.run`) drains it; jobs/s = N / (first
`picked` .. last `successful` in pgqueuer_log, the database's clock); the best config counts.
Every job must have been picked once and succeeded once. Both sides' tables get VACUUM
ANALYZE after their fill. The CPU of each side's PostgreSQL backends gets a line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import _pg
from bench._api import TIMES_PAGE, Api, enqueue_many
from bench._common import (
    BENCH_DIR,
    PYTHON,
    ServerProcess,
    clean_env,
    cpu_delta,
    process_cpu_seconds,
    start_worker,
    stop_process,
)
from bench._context import Context
from bench._report import Figure, num, ratio, rx

DRAIN_TIMEOUT = 300.0
RATE_TARGET = 20_000
HUEY_TARGET = 3.0


def _parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def e2e_figure(ctx: Context, fig: Figure) -> None:
    if ctx.settings.postgres:
        e2e_postgres_figure(ctx, fig)
        return
    s = ctx.settings
    work = ctx.dir()
    huey_db = work / "huey-filled.db"
    # huey's enqueue runs meanwhile in its own process (it is not measured).
    huey_fill = subprocess.Popen(
        [PYTHON, str(BENCH_DIR / "_huey_app.py"), "enqueue", str(huey_db), str(s.e2e_jobs)],
        cwd=work,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    ctx.stack.callback(stop_process, huey_fill)
    queuelog = ctx.queuelog()
    keys = ctx.keys(queuelog, [("bench-producer", "producer"), ("bench-worker", "worker")])
    started = time.perf_counter()
    ctx.run(enqueue_many(queuelog.url, keys["bench-producer"], s.e2e_jobs, batch=1000, connections=2))
    ctx.log(f"enqueued {s.e2e_jobs} jobs in {time.perf_counter() - started:.1f} s")
    waited = time.perf_counter()
    _, err = huey_fill.communicate(timeout=300)
    ctx.log(f"huey's {s.e2e_jobs} tasks were in after {time.perf_counter() - waited:.1f} s more")
    if huey_fill.returncode != 0:
        raise RuntimeError(f"huey enqueue failed: {err.decode(errors='replace')[-500:]}")

    q = run_queuelog(ctx, queuelog, keys["bench-worker"])
    huey_runs = [run_huey(ctx, huey_db, workers) for workers in s.huey_workers]
    best = max(huey_runs, key=lambda r: r["jobs_per_s"])

    r = ratio(q["jobs_per_s"], best["jobs_per_s"])
    fig.add(
        f"{s.e2e_jobs:,} no-op jobs, worker -c {s.e2e_concurrency}",
        num(q["jobs_per_s"], 0, "jobs/s"),
        num(best["jobs_per_s"], 0, f"tasks/s (w={best['workers']})"),
        rx(r),
        f">= {RATE_TARGET:,} jobs/s",
        met=q["jobs_per_s"] >= RATE_TARGET,
    )
    fig.add(
        "  against huey", "", "", rx(r), f">= {HUEY_TARGET:g}x huey", met=r is not None and r >= HUEY_TARGET
    )
    fig.add(
        "  wall time incl. start-up, s",
        num(q["wall_s"], 2),
        num(best["wall_s"], 2),
        rx(ratio(q["wall_s"], best["wall_s"])),
    )
    fig.add(
        "  CPU s: server + worker / consumer",
        f"{num(q['server_cpu_s'], 2)} + {num(q['worker_cpu_s'], 2)}",
        num(best["consumer_cpu_s"], 2),
    )
    fig.notes.append(
        "huey: " + ", ".join(f"{h['workers']} threads {h['jobs_per_s']:,.0f} tasks/s" for h in huey_runs)
    )
    fig.data = {"jobs": s.e2e_jobs, "queuelog": q, "huey": huey_runs, "huey_best": best}


def run_queuelog(ctx: Context, server: ServerProcess, worker_key: str) -> dict[str, Any]:
    s = ctx.settings
    admin = server.admin_key
    db_before = server.db_cpu_snapshot()
    server_cpu = server.cpu_seconds()
    launched = time.perf_counter()
    worker = start_worker(ctx.dir(), server.url, worker_key, s.e2e_concurrency)
    ctx.stack.callback(stop_process, worker)

    async def wait_done() -> dict[str, int]:
        async with Api(server.url, admin) as api:
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while True:
                counts = await api.counts()
                if counts["completed"] >= s.e2e_jobs:
                    return counts
                if counts["failed"] or counts["cancelled"]:
                    raise RuntimeError(f"jobs did not complete: {counts}")
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker exited with {worker.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not drained after {DRAIN_TIMEOUT:.0f} s: {counts}")
                await asyncio.sleep(0.1)

    with ctx.profile(server):
        ctx.run(wait_done())
    wall = time.perf_counter() - launched
    worker_cpu = process_cpu_seconds(worker.pid)
    server_after = server.cpu_seconds()
    db_used = cpu_delta(db_before, server.db_cpu_snapshot())
    ctx.log(f"queuelog drained {s.e2e_jobs} jobs; {wall:.2f} s from the worker's launch")
    stopping = time.perf_counter()
    stop_process(worker)
    stop_seconds = time.perf_counter() - stopping
    ctx.log(f"the worker exited {stop_seconds:.1f} s after SIGTERM (code {worker.returncode})")

    async def window() -> tuple[float, float, int, int]:
        first, last, count, retried = float("inf"), float("-inf"), 0, 0
        async with Api(server.url, admin) as api:
            after = None
            for _ in range(s.e2e_jobs // 100 + 10):
                page = (await api.call(TIMES_PAGE, {"after": after}))["jobs"]
                for job in page["nodes"]:
                    first = min(first, _parse_time(job["claimedAt"]))
                    last = max(last, _parse_time(job["finishedAt"]))
                    count += 1
                    retried += job["attempt"] != 1
                if not page["pageInfo"]["hasNextPage"]:
                    break
                after = page["pageInfo"]["endCursor"]
        return first, last, count, retried

    reading = time.perf_counter()
    first, last, count, retried = ctx.run(window())
    ctx.log(f"read {count} jobs' timestamps back in {time.perf_counter() - reading:.1f} s")
    if count != s.e2e_jobs or retried:
        raise RuntimeError(f"{count} completed jobs read back (expected {s.e2e_jobs}), {retried} retried")
    seconds = last - first
    return {
        "jobs_per_s": round(s.e2e_jobs / seconds, 1) if seconds > 0 else None,
        "window_s": round(seconds, 4),
        "wall_s": round(wall, 3),
        "server_cpu_s": round(server_after - server_cpu, 2)
        if server_after is not None and server_cpu
        else None,
        "worker_cpu_s": worker_cpu,
        "db_cpu_s": round(db_used, 2) if db_used is not None else None,
        "worker_exit_after_sigterm_s": round(stop_seconds, 2),
        "worker_exit_code": worker.returncode,
        "concurrency": s.e2e_concurrency,
    }


def run_huey(ctx: Context, filled: Path, workers: int) -> dict[str, Any]:
    work = ctx.dir()
    db = work / f"huey-w{workers}.db"
    shutil.copyfile(filled, db)
    out = work / f"huey-w{workers}.json"
    log = (work / f"huey-w{workers}.log").open("wb")
    ctx.stack.callback(log.close)
    command = [PYTHON, str(BENCH_DIR / "_huey_app.py"), "consume", str(db), str(workers)]
    launched = time.perf_counter()
    consumer = subprocess.Popen(
        command + [str(ctx.settings.e2e_jobs), str(out)],
        cwd=work,
        env=clean_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ctx.stack.callback(stop_process, consumer)
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while not out.exists():
        if consumer.poll() is not None:
            raise RuntimeError(f"huey consumer exited with {consumer.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"huey did not drain {ctx.settings.e2e_jobs} tasks in {DRAIN_TIMEOUT:.0f} s")
        time.sleep(0.02)
    wall = time.perf_counter() - launched
    cpu = process_cpu_seconds(consumer.pid)
    stop_process(consumer)
    ctx.log(f"huey with {workers} threads drained in {wall:.2f} s from launch")
    data = json.loads(out.read_text())
    seconds = data["last_finish"] - data["first_start"]
    return {
        "workers": workers,
        "jobs_per_s": round(data["count"] / seconds, 1) if seconds > 0 else 0.0,
        "window_s": round(seconds, 4),
        "wall_s": round(wall, 3),
        "consumer_cpu_s": cpu,
        "count": data["count"],
    }


# --- PostgreSQL: queuelog against PgQueuer ---------------------------------------------------


def e2e_postgres_figure(ctx: Context, fig: Figure) -> None:
    """queuelog on PostgreSQL against PgQueuer (`_pgqueuer_app.py`), each config on its own
    fresh database, filled with the same number of no-op jobs first; the best config counts."""
    s = ctx.settings
    peers = [_pgqueuer_database(ctx, config) for config in s.pgqueuer_configs]
    queuelog = ctx.queuelog()
    keys = ctx.keys(queuelog, [("bench-producer", "producer"), ("bench-worker", "worker")])
    started = time.perf_counter()
    ctx.run(enqueue_many(queuelog.url, keys["bench-producer"], s.e2e_jobs, batch=1000, connections=2))
    ctx.log(f"enqueued {s.e2e_jobs} jobs in {time.perf_counter() - started:.1f} s")
    ctx.maintain(queuelog)  # VACUUM ANALYZE after the fill, as for PgQueuer's table
    for peer in peers:
        _pgqueuer_fill(ctx, peer)

    q = run_queuelog(ctx, queuelog, keys["bench-worker"])
    runs = [run_pgqueuer(ctx, peer) for peer in peers]
    best = max(runs, key=lambda r: r["jobs_per_s"] or 0.0)

    r = ratio(q["jobs_per_s"], best["jobs_per_s"])
    fig.add(
        f"{s.e2e_jobs:,} no-op jobs, worker -c {s.e2e_concurrency}",
        num(q["jobs_per_s"], 0, "jobs/s"),
        num(best["jobs_per_s"], 0, f"jobs/s ({best['config']})"),
        rx(r),
        f">= {RATE_TARGET:,} jobs/s",
        met=q["jobs_per_s"] is not None and q["jobs_per_s"] >= RATE_TARGET,
    )
    fig.add("  against PgQueuer (no target)", "", "", rx(r))
    fig.add(
        "  wall time incl. start-up, s",
        num(q["wall_s"], 2),
        num(best["wall_s"], 2),
        rx(ratio(q["wall_s"], best["wall_s"])),
    )
    q_cpu = (q["server_cpu_s"] or 0.0) + (q["worker_cpu_s"] or 0.0)
    fig.add(
        "  CPU s: server + worker / PgQueuer worker",
        f"{num(q['server_cpu_s'], 2)} + {num(q['worker_cpu_s'], 2)}",
        num(best["worker_cpu_s"], 2),
        rx(ratio(q_cpu, best["worker_cpu_s"])),
    )
    fig.add(
        "  PostgreSQL CPU s (the database's backends)",
        num(q["db_cpu_s"], 2),
        num(best["db_cpu_s"], 2),
        rx(ratio(q["db_cpu_s"], best["db_cpu_s"])),
    )
    fig.notes.append(
        "PgQueuer (driver:batch_size:max_concurrent_tasks, 0 = no limit): "
        + ", ".join(f"{x['config']} {x['jobs_per_s'] or 0:,.0f} jobs/s" for x in runs)
    )
    fig.data = {"jobs": s.e2e_jobs, "queuelog": q, "pgqueuer": runs, "pgqueuer_best": best}


def _round(value: float | None, digits: int = 2) -> float | None:
    return round(value, digits) if value is not None else None


def _pgqueuer_database(ctx: Context, config: str) -> dict[str, Any]:
    driver, batch, max_tasks = _parse_config(config)
    url = ctx.database_url(f"pgq_{driver}_{batch}_{max_tasks}")
    return {"config": config, "driver": driver, "batch": batch, "max_tasks": max_tasks, "url": url}


def _parse_config(config: str) -> tuple[str, int, int]:
    driver, batch, max_tasks = config.split(":")
    if driver not in ("asyncpg", "psycopg"):
        raise ValueError(f"PgQueuer config {config!r}: the driver is asyncpg or psycopg")
    return driver, int(batch), int(max_tasks)


def _pgqueuer_script(ctx: Context, *args: str, timeout: float = 300) -> None:
    done = subprocess.run(
        [PYTHON, str(BENCH_DIR / "_pgqueuer_app.py"), *args],
        cwd=ctx.dir(),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"_pgqueuer_app.py {args[0]} failed: {done.stderr.strip()[-800:]}")


def _pgqueuer_fill(ctx: Context, peer: dict[str, Any]) -> None:
    started = time.perf_counter()
    _pgqueuer_script(ctx, "install", peer["url"])
    _pgqueuer_script(ctx, "enqueue", peer["url"], str(ctx.settings.e2e_jobs))
    with contextlib.closing(_pg.psycopg().connect(peer["url"], autocommit=True)) as conn:
        queued = conn.execute("SELECT count(*) FROM pgqueuer WHERE status = 'queued'").fetchone()[0]
        conn.execute("VACUUM ANALYZE pgqueuer")  # what autovacuum would have done after the fill
    if queued != ctx.settings.e2e_jobs:
        raise RuntimeError(f"PgQueuer has {queued} queued jobs after enqueueing {ctx.settings.e2e_jobs}")
    ctx.log(f"PgQueuer {peer['config']}: {queued} jobs in after {time.perf_counter() - started:.1f} s")


PGQ_SUCCESSFUL = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
PGQ_WINDOW = (
    "SELECT (SELECT min(created) FROM pgqueuer_log WHERE status = 'picked'),"
    " (SELECT max(created) FROM pgqueuer_log WHERE status = 'successful'),"
    " (SELECT count(*) FROM pgqueuer_log WHERE status = 'picked'),"
    " (SELECT count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'),"
    " (SELECT count(*) FROM pgqueuer_log WHERE status NOT IN ('queued', 'picked', 'successful')),"
    " (SELECT count(*) FROM pgqueuer)"
)


def run_pgqueuer(ctx: Context, peer: dict[str, Any]) -> dict[str, Any]:
    """PgQueuer's worker drains its filled database; the window is from its log table."""
    s = ctx.settings
    work = ctx.dir()
    name = f"pgqueuer-{peer['driver']}-{peer['batch']}-{peer['max_tasks']}"
    log = (work / f"{name}.log").open("wb")
    ctx.stack.callback(log.close)
    database = _pg.database_name(peer["url"])
    db_cpu = functools.partial(_pg.backend_cpu, s.postgres_url, database)
    db_before = db_cpu()
    command = [PYTHON, str(BENCH_DIR / "_pgqueuer_app.py"), "consume", peer["url"], peer["driver"]]
    launched = time.perf_counter()
    consumer = subprocess.Popen(
        command + [str(peer["batch"]), str(peer["max_tasks"])],
        cwd=work,
        env=clean_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ctx.stack.callback(stop_process, consumer)
    with contextlib.closing(_pg.psycopg().connect(peer["url"], autocommit=True)) as conn:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while conn.execute(PGQ_SUCCESSFUL).fetchone()[0] < s.e2e_jobs:
            if consumer.poll() is not None:
                raise RuntimeError(f"the PgQueuer worker exited with {consumer.returncode} (see {name}.log)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"PgQueuer did not drain {s.e2e_jobs} jobs in {DRAIN_TIMEOUT:.0f} s")
            time.sleep(0.1)
        wall = time.perf_counter() - launched
        worker_cpu = process_cpu_seconds(consumer.pid)
        db_after = db_cpu()
        if db_after is not None:
            db_after.pop(conn.info.backend_pid, None)  # this poll's own backend is not PgQueuer's
        db_used = cpu_delta(db_before, db_after)
        stop_process(consumer)
        first, last, picked, succeeded, other, left = conn.execute(PGQ_WINDOW).fetchone()
    ctx.log(f"PgQueuer {peer['config']} drained in {wall:.2f} s from launch")
    if succeeded != s.e2e_jobs or picked != s.e2e_jobs or other or left:
        raise RuntimeError(
            f"PgQueuer {peer['config']}: {succeeded} jobs succeeded, {picked} picks, {other} other log rows, "
            f"{left} jobs left (expected {s.e2e_jobs} once each)"
        )
    seconds = (last - first).total_seconds()
    return {
        "config": peer["config"],
        "driver": peer["driver"],
        "batch_size": peer["batch"],
        "max_concurrent_tasks": peer["max_tasks"],
        "jobs_per_s": round(s.e2e_jobs / seconds, 1) if seconds > 0 else None,
        "window_s": round(seconds, 4),
        "wall_s": round(wall, 3),
        "worker_cpu_s": worker_cpu,
        "db_cpu_s": _round(db_used),
    }
