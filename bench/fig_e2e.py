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
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench._api import TIMES_PAGE, Api, enqueue_many
from bench._common import (
    BENCH_DIR,
    PYTHON,
    ServerProcess,
    clean_env,
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
