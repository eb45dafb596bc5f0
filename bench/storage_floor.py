"""What queuelog's storage alone costs per job, with no HTTP and no GraphQL.

    .venv/bin/python bench/storage_floor.py [--batches 200] [--sql-only]

Opens the real Repository (group-commit writer, counters, events, every index) on a
fresh migrated SQLite file in a temp directory and times, in process CPU, enqueue /
claim / complete of batches of 100, as the server's resolvers would call them. The gap
between these figures and figure 3 of `python -m bench` is what HTTP and GraphQL add;
the gap to figure 3's raw ceiling is what queuelog's schema (indexes for every `jobs`
filter, the claim, leases, pruning and scopes, plus job_events and job_counts) costs.

`--sql-only` runs queuelog's own statements (sqlite/statements/) on the same migrated schema
through stdlib sqlite3, with no Repository and no Python model: one transaction per batch,
executemany INSERT of the jobs and of their job_events rows; the claim UPDATE ... RETURNING
and its events; the read of the held rows, the guarded completion UPDATEs and their
events. The SQL's own cost per job, below which no code above it can go.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from queuelog.model import Completion, EventKind, JobStatus, NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.repository import Repository
from queuelog.storage.schema.new_job import row_values
from queuelog.storage.sqlite.connection import connect
from queuelog.storage.sqlite.statements import SqliteStatements as sql
from queuelog.storage.sqlite.statements.inserted_ids import LAST_JOB_ID
from queuelog.storage.statements import per_type_params

BATCH = 100


async def measure(url: str, batches: int) -> dict[str, float]:
    repository = Repository(url, RetryPolicy(10, 3600))
    items = [
        NewJob("noop", {"n": i}, Priority.LOW, 3, None, None, payload_json=f'{{"n":{i}}}')
        for i in range(BATCH)
    ]
    timings: dict[str, float] = {}
    started = time.process_time()
    for _ in range(batches):
        await repository.enqueue(items, "bench-producer")
    timings["enqueue"] = time.process_time() - started
    started = time.process_time()
    claimed = [(await repository.claim("bench-worker", None, BATCH, 300)).jobs for _ in range(batches)]
    timings["claim"] = time.process_time() - started
    started = time.process_time()
    for jobs in claimed:
        done = [Completion(job.id, {"ok": True}, job.attempt, '{"ok":true}') for job in jobs]
        await repository.complete_many("bench-worker", done)
    timings["complete"] = time.process_time() - started
    await repository.close()
    return {name: seconds / (batches * BATCH) * 1e6 for name, seconds in timings.items()}


def measure_sql(path: str, batches: int) -> dict[str, float]:
    now = 1_700_000_000_000_000
    timings: dict[str, float] = {}
    with contextlib.closing(connect(path)) as db:

        def transaction(name: str, body: Callable[[], Any]) -> list[Any]:
            results = []
            started = time.process_time()
            for _ in range(batches):
                db.execute("BEGIN IMMEDIATE")
                results.append(body())
                db.execute("COMMIT")
            timings[name] = time.process_time() - started
            return results

        def events(ids: Iterable[int], kind: EventKind, status: JobStatus) -> None:
            rows = [{"job_id": i, "kind": kind.value, "status": status.value, "at": now} for i in ids]
            db.executemany(sql.INSERT_EVENT, rows)

        items = [
            NewJob("noop", {"n": i}, Priority.LOW, 3, None, None, payload_json=f'{{"n":{i}}}')
            for i in range(BATCH)
        ]

        def enqueue() -> None:
            # The row of every column an enqueue writes, as queuelog's enqueue builds it.
            rows = [row_values(item, "bench-producer", now) for item in items]
            db.executemany(sql.INSERT_JOB, rows)
            last = db.execute(LAST_JOB_ID).fetchone()[0]
            events(range(last - BATCH + 1, last + 1), EventKind.ENQUEUED, JobStatus.PENDING)

        def claim() -> list[int]:
            params = {"worker": "bench-worker", "now": now, "lease": now + 300_000_000, "limit": BATCH}
            params.update(per_type_params(["noop"], [BATCH]))
            ids = [row[0] for row in db.execute(sql.claim_jobs(1), params).fetchall()]
            events(ids, EventKind.CLAIMED, JobStatus.RUNNING)
            return ids

        held: list[list[int]] = []

        def complete() -> None:
            ids = held.pop()
            db.execute(sql.JOBS_BY_IDS, {"ids": json.dumps(ids)}).fetchall()
            rows = [{"id": i, "attempt": 1, "result": '{"ok":true}', "now": now} for i in ids]
            db.executemany(sql.COMPLETE_CHECKED, rows)
            events(ids, EventKind.COMPLETED, JobStatus.COMPLETED)

        transaction("enqueue", enqueue)
        held.extend(transaction("claim", claim))
        transaction("complete", complete)
    return {name: seconds / (batches * BATCH) * 1e6 for name, seconds in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200, help="batches of 100 per operation")
    parser.add_argument(
        "--sql-only", action="store_true", help="queuelog's statements on stdlib sqlite3 alone"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{Path(directory) / 'floor.db'}"
        engine = create_sync_engine(url)
        upgrade_to_head(engine)
        engine.dispose()
        if args.sql_only:
            per_job = measure_sql(str(Path(directory) / "floor.db"), args.batches)
        else:
            per_job = asyncio.run(measure(url, args.batches))
    jobs = args.batches * BATCH
    what = "queuelog's SQL alone (stdlib sqlite3)" if args.sql_only else "storage alone"
    print(f"{what}, {jobs:,} jobs, batches of {BATCH}: CPU per job")
    for name, micros in per_job.items():
        print(f"  {name:<9} {micros:6.1f} us   ({1e6 / micros:,.0f} jobs/s on one core)")


if __name__ == "__main__":
    main()
