"""PostgreSQL's CPU per job of a drain through queuelog's storage alone, with no HTTP.

    .venv/bin/python -m bench.pg_drain [--jobs 10000] [--rounds 3] [--batch 64]
        [--postgres-url postgresql://postgres@127.0.0.1:5432/test]

Each round creates a fresh database on the cluster, migrates it, enqueues the jobs through
the real Repository (1,000 a call, the no-op payload of figure 4), runs VACUUM ANALYZE, then
drains them as `queuelog worker --concurrency 64` does at full load: claim `batch`, complete
them all in one completeJobs, until a claim finds none. It prints the CPU of the database's
backends (from /proc, as figure 4 reads them) and of this process per job, and drops the
database. Figure 4 measures the same drain end to end, where the worker's HTTP calls, the
key checks and the polling share the machine's two cores; this one moves less from run to
run, so it is the one to compare schema and statement changes with (run each checkout in
turn: `PYTHONPATH=<checkout> .venv/bin/python -m bench.pg_drain`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time

from bench import _pg
from bench._common import process_cpu_seconds
from queuelog.jsonutil import compact
from queuelog.model import Completion, NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.repository import Repository

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
ENQUEUE_BATCH = 1000


def _backends_cpu(base_url: str, database: str) -> dict[int, float]:
    return _pg.backend_cpu(base_url, database) or {}


async def _fill(repo: Repository, jobs: int) -> None:
    for start in range(0, jobs, ENQUEUE_BATCH):
        items = []
        for i in range(start, min(jobs, start + ENQUEUE_BATCH)):
            payload = {"n": i, "to": f"u{i}@example.com"}
            items.append(
                NewJob("noop", payload, Priority.MEDIUM, 0, None, None, payload_json=compact(payload))
            )
        await repo.enqueue(items, "bench-producer")


async def _drain(repo: Repository, batch: int) -> int:
    done = 0
    while True:
        jobs = (await repo.claim("bench-worker", ["noop"], batch, 60)).jobs
        if not jobs:
            return done
        completions = [Completion(job.id, None, job.attempt) for job in jobs]
        done += len((await repo.complete_many("bench-worker", completions)).completed)


async def one_round(base_url: str, jobs: int, batch: int) -> tuple[float, float, float]:
    """PostgreSQL CPU per job, this process's CPU per job (both µs), jobs/s."""
    url = _pg.create_database(base_url, "drain")
    database = _pg.database_name(url)
    try:
        upgrade_to_head(create_sync_engine(url))
        repo = Repository(url, RetryPolicy(10, 3600), event_feed="local")
        await repo.open()
        try:
            await _fill(repo, jobs)
            _pg.vacuum_analyze(url)
            before = _backends_cpu(base_url, database)
            own = process_cpu_seconds(os.getpid()) or 0.0
            started = time.perf_counter()
            done = await _drain(repo, batch)
            wall = time.perf_counter() - started
            own = (process_cpu_seconds(os.getpid()) or 0.0) - own
            after = _backends_cpu(base_url, database)
        finally:
            await repo.close()
    finally:
        with contextlib.suppress(Exception):
            _pg.drop_database(base_url, url)
    if done != jobs:
        raise RuntimeError(f"{done} of {jobs} jobs completed")
    used = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
    return used / jobs * 1e6, own / jobs * 1e6, jobs / wall


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--postgres-url", default=DEFAULT_URL)
    args = parser.parse_args()
    results = []
    for n in range(args.rounds):
        pg, own, rate = asyncio.run(one_round(args.postgres_url, args.jobs, args.batch))
        results.append((pg, own))
        print(
            f"round {n + 1}: PostgreSQL {pg:.1f} us/job, storage (this process) {own:.1f} us/job,"
            f" {rate:,.0f} jobs/s"
        )
    print(
        f"median of {args.rounds}: PostgreSQL {statistics.median(r[0] for r in results):.1f} us/job,"
        f" storage {statistics.median(r[1] for r in results):.1f} us/job"
    )


if __name__ == "__main__":
    main()
