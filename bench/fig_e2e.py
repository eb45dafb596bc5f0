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

On `--database postgresql` queuelog serves from a fresh PostgreSQL database and there are
two peers instead of huey, both Python job queues on PostgreSQL, run after queuelog in the
same run, each config on a fresh database of its own filled with N no-op jobs first (not
measured); the best config of each counts.

- PgQueuer (`bench/_pgqueuer_app.py`), once per --pgqueuer-configs entry (driver, batch
  size, max concurrent tasks): its own worker (`pgqueuer.run`) drains its queue; jobs/s = N /
  (first `picked` .. last `successful` in pgqueuer_log, the database's clock). Every job must
  have been picked once and succeeded once. PgQueuer deletes a finished job from its queue
  table and keeps its history as log rows, and works in batches (a claim of up to BATCH
  jobs per UPDATE, completions logged many at a time): the faster reference, with issue
  31's targets: as many jobs/s, for no more PostgreSQL CPU.
- procrastinate (`bench/_procrastinate_app.py`), once per --procrastinate-configs entry (the
  worker's concurrency): its own worker (`App.run_worker_async`) drains it; jobs/s = N /
  (first `started` .. last `succeeded` in procrastinate_events, the database's clock). Every
  job must end `succeeded` with one `started` and one `succeeded` event and no other event
  but its `deferred`. procrastinate keeps each job's row with its status and writes an event
  row on every transition (by triggers), as queuelog keeps jobs and job_events: the
  like-for-like design, and the peer the issue's target ("come out ahead of it") is read
  against. Its worker fetches one job per transaction and finishes it in another.

Every side's tables get VACUUM ANALYZE after their fill. The CPU of each side's worker and of
its PostgreSQL backends gets a line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
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
HUEY_TARGET = 5.0  # issue 6's decided bar (it replaced ">= 20,000 jobs/s and >= 3x huey")
PEER_TARGET = 1.0  # the issue: ahead of a Python PostgreSQL peer, end to end (procrastinate)


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
        f">= {HUEY_TARGET:g}x huey",
        met=r is not None and r >= HUEY_TARGET,
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


# --- PostgreSQL: queuelog against PgQueuer and procrastinate ---------------------------------


def e2e_postgres_figure(ctx: Context, fig: Figure) -> None:
    """queuelog on PostgreSQL against PgQueuer (`_pgqueuer_app.py`), then procrastinate
    (`_procrastinate_app.py`), each config on its own fresh database, filled with the same
    number of no-op jobs first; the best config of each peer counts."""
    s = ctx.settings
    pgq_peers = [_pgqueuer_database(ctx, config) for config in s.pgqueuer_configs]
    proc_peers = [_procrastinate_database(ctx, c) for c in s.procrastinate_configs]
    queuelog = ctx.queuelog()
    keys = ctx.keys(queuelog, [("bench-producer", "producer"), ("bench-worker", "worker")])
    started = time.perf_counter()
    ctx.run(enqueue_many(queuelog.url, keys["bench-producer"], s.e2e_jobs, batch=1000, connections=2))
    ctx.log(f"enqueued {s.e2e_jobs} jobs in {time.perf_counter() - started:.1f} s")
    ctx.maintain(queuelog)  # VACUUM ANALYZE after the fill, as for the peers' tables
    for peer in pgq_peers:
        _pgqueuer_fill(ctx, peer)
    for peer in proc_peers:
        _procrastinate_fill(ctx, peer)

    q = run_queuelog(ctx, queuelog, keys["bench-worker"])
    pgq_runs = [run_pgqueuer(ctx, peer) for peer in pgq_peers]
    proc_runs = [run_procrastinate(ctx, peer) for peer in proc_peers]
    pgq = max(pgq_runs, key=lambda r: r["jobs_per_s"] or 0.0)
    proc = max(proc_runs, key=lambda r: r["jobs_per_s"] or 0.0)

    r = ratio(q["jobs_per_s"], pgq["jobs_per_s"])
    fig.add(
        f"{s.e2e_jobs:,} no-op jobs, worker -c {s.e2e_concurrency}",
        num(q["jobs_per_s"], 0, "jobs/s"),
        num(pgq["jobs_per_s"], 0, f"jobs/s ({pgq['config']})"),
        rx(r),
        ">= 1x (issue 31)",
        met=r is not None and r >= 1.0,
    )
    _peer_lines(fig, q, pgq, "PgQueuer", db_cpu_target=True)
    r = ratio(q["jobs_per_s"], proc["jobs_per_s"])
    fig.add(
        "against procrastinate, the same jobs",
        num(q["jobs_per_s"], 0, "jobs/s"),
        num(proc["jobs_per_s"], 0, f"jobs/s ({proc['config']})"),
        rx(r),
        f">= {PEER_TARGET:g}x (ahead of the peer)",
        met=r is not None and r >= PEER_TARGET,
    )
    _peer_lines(fig, q, proc, "procrastinate")
    fig.notes.append(
        "PgQueuer (driver:batch_size:max_concurrent_tasks, 0 = no limit): "
        + ", ".join(f"{x['config']} {x['jobs_per_s'] or 0:,.0f} jobs/s" for x in pgq_runs)
    )
    fig.notes.append(
        "procrastinate (c = the worker's concurrency): "
        + ", ".join(f"{x['config']} {x['jobs_per_s'] or 0:,.0f} jobs/s" for x in proc_runs)
    )
    fig.data = {
        "jobs": s.e2e_jobs,
        "queuelog": q,
        "pgqueuer": pgq_runs,
        "pgqueuer_best": pgq,
        "procrastinate": proc_runs,
        "procrastinate_best": proc,
    }


def _peer_lines(
    fig: Figure, q: dict[str, Any], best: dict[str, Any], peer: str, db_cpu_target: bool = False
) -> None:
    """Wall time and CPU of queuelog beside a peer's best run; with `db_cpu_target`, the
    PostgreSQL CPU line carries issue 31's target (no more than the peer's)."""
    fig.add(
        "  wall time incl. start-up, s",
        num(q["wall_s"], 2),
        num(best["wall_s"], 2),
        rx(ratio(q["wall_s"], best["wall_s"])),
    )
    q_cpu = (q["server_cpu_s"] or 0.0) + (q["worker_cpu_s"] or 0.0)
    fig.add(
        f"  CPU s: server + worker / {peer} worker",
        f"{num(q['server_cpu_s'], 2)} + {num(q['worker_cpu_s'], 2)}",
        num(best["worker_cpu_s"], 2),
        rx(ratio(q_cpu, best["worker_cpu_s"])),
    )
    db_ratio = ratio(q["db_cpu_s"], best["db_cpu_s"])
    fig.add(
        "  PostgreSQL CPU s (the database's backends)",
        num(q["db_cpu_s"], 2),
        num(best["db_cpu_s"], 2),
        rx(db_ratio),
        "<= 1x (issue 31)" if db_cpu_target else "",
        met=(db_ratio is not None and db_ratio <= 1.0) if db_cpu_target else None,
    )


def _round(value: float | None, digits: int = 2) -> float | None:
    return round(value, digits) if value is not None else None


def _peer_script(ctx: Context, script: str, *args: str, timeout: float = 300) -> None:
    """Run `bench/<script> ARGS` (a peer's install or enqueue) to the end, or raise."""
    done = subprocess.run(
        [PYTHON, str(BENCH_DIR / script), *args],
        cwd=ctx.dir(),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} {args[0]} failed: {done.stderr.strip()[-800:]}")


def _fill_peer(
    ctx: Context, peer: dict[str, Any], label: str, script: str, waiting_sql: str, tables: tuple[str, ...]
) -> None:
    """The peer's schema and N jobs through its own script, checked, then VACUUM ANALYZE."""
    started = time.perf_counter()
    _peer_script(ctx, script, "install", peer["url"])
    _peer_script(ctx, script, "enqueue", peer["url"], str(ctx.settings.e2e_jobs))
    with contextlib.closing(_pg.psycopg().connect(peer["url"], autocommit=True)) as conn:
        waiting = conn.execute(waiting_sql).fetchone()[0]
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")  # what autovacuum would have done after the fill
    if waiting != ctx.settings.e2e_jobs:
        raise RuntimeError(f"{label} has {waiting} jobs waiting after enqueueing {ctx.settings.e2e_jobs}")
    ctx.log(f"{label} {peer['config']}: {waiting} jobs in after {time.perf_counter() - started:.1f} s")


@contextlib.contextmanager
def _drain(
    ctx: Context, peer: str, url: str, script: str, args: list[str], log_name: str, done_sql: str
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Launch a peer's worker (`bench/<script> consume URL ARGS`) on its filled database,
    poll `done_sql` ten times a second until it counts every job, then stop the worker with
    SIGTERM. Yields an autocommit connection to the database, to read the outcome, and the
    wall time, the worker's CPU and its database backends' CPU."""
    s = ctx.settings
    work = ctx.dir()
    log = (work / f"{log_name}.log").open("wb")
    ctx.stack.callback(log.close)
    db_cpu = functools.partial(_pg.backend_cpu, s.postgres_url, _pg.database_name(url))
    db_before = db_cpu()
    launched = time.perf_counter()
    consumer = subprocess.Popen(
        [PYTHON, str(BENCH_DIR / script), "consume", url, *args],
        cwd=work,
        env=clean_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ctx.stack.callback(stop_process, consumer)
    with contextlib.closing(_pg.psycopg().connect(url, autocommit=True)) as conn:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while conn.execute(done_sql).fetchone()[0] < s.e2e_jobs:
            if consumer.poll() is not None:
                raise RuntimeError(
                    f"the {peer} worker exited with {consumer.returncode} (see {log_name}.log)"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{peer} did not drain {s.e2e_jobs} jobs in {DRAIN_TIMEOUT:.0f} s")
            time.sleep(0.1)
        wall = time.perf_counter() - launched
        worker_cpu = process_cpu_seconds(consumer.pid)
        db_after = db_cpu()
        if db_after is not None:
            db_after.pop(conn.info.backend_pid, None)  # this poll's own backend is not the peer's
        db_used = cpu_delta(db_before, db_after)
        stopping = time.perf_counter()
        stop_process(consumer)
        yield (
            conn,
            {
                "wall_s": round(wall, 3),
                "worker_cpu_s": worker_cpu,
                "db_cpu_s": _round(db_used),
                "worker_exit_after_sigterm_s": round(time.perf_counter() - stopping, 2),
                "worker_exit_code": consumer.returncode,
            },
        )


# PgQueuer


def _pgqueuer_database(ctx: Context, config: str) -> dict[str, Any]:
    driver, batch, max_tasks = _parse_config(config)
    url = ctx.database_url(f"pgq_{driver}_{batch}_{max_tasks}")
    return {"config": config, "driver": driver, "batch": batch, "max_tasks": max_tasks, "url": url}


def _parse_config(config: str) -> tuple[str, int, int]:
    driver, batch, max_tasks = config.split(":")
    if driver not in ("asyncpg", "psycopg"):
        raise ValueError(f"PgQueuer config {config!r}: the driver is asyncpg or psycopg")
    return driver, int(batch), int(max_tasks)


def _pgqueuer_fill(ctx: Context, peer: dict[str, Any]) -> None:
    waiting = "SELECT count(*) FROM pgqueuer WHERE status = 'queued'"
    _fill_peer(ctx, peer, "PgQueuer", "_pgqueuer_app.py", waiting, ("pgqueuer",))


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
    name = f"pgqueuer-{peer['driver']}-{peer['batch']}-{peer['max_tasks']}"
    args = [peer["driver"], str(peer["batch"]), str(peer["max_tasks"])]
    with _drain(ctx, "PgQueuer", peer["url"], "_pgqueuer_app.py", args, name, PGQ_SUCCESSFUL) as (conn, used):
        first, last, picked, succeeded, other, left = conn.execute(PGQ_WINDOW).fetchone()
    ctx.log(f"PgQueuer {peer['config']} drained in {used['wall_s']:.2f} s from launch")
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
    } | used


# procrastinate


def _procrastinate_database(ctx: Context, concurrency: int) -> dict[str, Any]:
    url = ctx.database_url(f"proc_c{concurrency}")
    return {"config": f"c={concurrency}", "concurrency": concurrency, "url": url}


PROC_TABLES = ("procrastinate_jobs", "procrastinate_events")


def _procrastinate_fill(ctx: Context, peer: dict[str, Any]) -> None:
    waiting = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'"
    _fill_peer(ctx, peer, "procrastinate", "_procrastinate_app.py", waiting, PROC_TABLES)


PROC_SUCCEEDED = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
# Event types (procrastinate's sql/schema.sql): `deferred` on insert, `started` todo -> doing,
# `succeeded` doing -> succeeded; any other (deferred_for_retry, failed, cancelled, aborted,
# retried, ...) would mean a job did not simply run once.
PROC_WINDOW = (
    "SELECT (SELECT min(at) FROM procrastinate_events WHERE type = 'started'),"
    " (SELECT max(at) FROM procrastinate_events WHERE type = 'succeeded'),"
    " (SELECT count(*) FROM procrastinate_events WHERE type = 'started'),"
    " (SELECT count(DISTINCT job_id) FROM procrastinate_events WHERE type = 'started'),"
    " (SELECT count(*) FROM procrastinate_events WHERE type = 'succeeded'),"
    " (SELECT count(DISTINCT job_id) FROM procrastinate_events WHERE type = 'succeeded'),"
    " (SELECT count(*) FROM procrastinate_events"
    "   WHERE type IS NULL OR type NOT IN ('deferred', 'started', 'succeeded')),"
    " (SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'),"
    " (SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded')"
)


def run_procrastinate(ctx: Context, peer: dict[str, Any]) -> dict[str, Any]:
    """procrastinate's worker drains its filled database; the window is from its events table."""
    s = ctx.settings
    name = f"procrastinate-c{peer['concurrency']}"
    args = [str(peer["concurrency"])]
    drained = _drain(ctx, "procrastinate", peer["url"], "_procrastinate_app.py", args, name, PROC_SUCCEEDED)
    with drained as (conn, used):
        row = conn.execute(PROC_WINDOW).fetchone()
    first, last, started, started_jobs, succeeded, succeeded_jobs, other, unfinished, done = row
    ctx.log(f"procrastinate {peer['config']} drained in {used['wall_s']:.2f} s from launch")
    n = s.e2e_jobs
    if (done, started, started_jobs, succeeded, succeeded_jobs, other, unfinished) != (n, n, n, n, n, 0, 0):
        raise RuntimeError(
            f"procrastinate {peer['config']}: {done} jobs succeeded and {unfinished} did not; "
            f"{started} started events ({started_jobs} jobs), {succeeded} succeeded events "
            f"({succeeded_jobs} jobs), {other} other events (expected {n} jobs, each started and "
            "succeeded once)"
        )
    seconds = (last - first).total_seconds()
    return {
        "config": peer["config"],
        "concurrency": peer["concurrency"],
        "jobs_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "window_s": round(seconds, 4),
    } | used
