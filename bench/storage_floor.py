"""What queuelog's storage alone costs per job, with no HTTP and no GraphQL.

    .venv/bin/python bench/storage_floor.py [--batches 200]

Opens the real Repository (group-commit writer, counters, events, every index) on a
fresh migrated SQLite file in a temp directory and times, in process CPU, enqueue /
claim / complete of batches of 100, as the server's resolvers would call them. The gap
between these figures and figure 3 of `python -m bench` is what HTTP and GraphQL add;
the gap to figure 3's raw ceiling is what queuelog's schema (indexes for every `jobs`
filter, the claim, leases, pruning and scopes, plus job_events and job_counts) costs.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from queuelog.model import Completion, NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.repository import Repository

BATCH = 100


async def measure(url: str, batches: int) -> dict[str, float]:
    repository = Repository(url, RetryPolicy(10, 3600))
    items = [NewJob("noop", {"n": i}, f'{{"n":{i}}}', Priority.LOW, 3, None, None) for i in range(BATCH)]
    timings: dict[str, float] = {}
    started = time.process_time()
    for _ in range(batches):
        await repository.enqueue(items, "bench-producer")
    timings["enqueue"] = time.process_time() - started
    started = time.process_time()
    claimed = [await repository.claim("bench-worker", None, BATCH, 300) for _ in range(batches)]
    timings["claim"] = time.process_time() - started
    started = time.process_time()
    for jobs in claimed:
        done = [Completion(job.id, {"ok": True}, job.attempt, '{"ok":true}') for job in jobs]
        await repository.complete_many("bench-worker", done)
    timings["complete"] = time.process_time() - started
    await repository.close()
    return {name: seconds / (batches * BATCH) * 1e6 for name, seconds in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200, help="batches of 100 per operation")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'floor.db'}"
        engine = create_sync_engine(url)
        upgrade_to_head(engine)
        engine.dispose()
        per_job = asyncio.run(measure(url, args.batches))
    jobs = args.batches * BATCH
    print(f"storage alone, {jobs:,} jobs, batches of {BATCH}: CPU per job")
    for name, micros in per_job.items():
        print(f"  {name:<9} {micros:6.1f} us   ({1e6 / micros:,.0f} jobs/s on one core)")


if __name__ == "__main__":
    main()
