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

`--sql-only --database postgresql [--postgres-url URL]` does the same on PostgreSQL: a fresh
database `qlbench_...` on the cluster of URL, migrated to queuelog's schema (dropped after),
and the transactions queuelog runs for enqueueJobs / claimJobs(limit: 100) / completeJobs of
100, each statement and round trip as queuelog sends them (bench/_pg_same_sql.py), through
raw psycopg 3 (sync) on one connection. It reports the bench process's CPU per job, the CPU
of the PostgreSQL backend of that connection per job (from /proc, when PostgreSQL runs on
this machine), and jobs/s of wall time: one connection, one transaction after another, each
COMMIT waiting for its flush at the server's synchronous_commit.
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

from bench import _pg
from bench import _pg_same_sql as same
from bench._common import migrate, process_cpu_seconds
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


def measure_sql_pg(url: str, batches: int, seconds: float | None = None) -> dict[str, dict[str, float]]:
    """The three phases of queuelog's PostgreSQL statements on `url` (a database migrated to
    queuelog's schema), `batches` transactions of 100 each (or until `seconds` pass, or the
    claims find nothing); per phase: `cpu_us` (this process) and `db_cpu_us` (the backend,
    None when not readable) per job, `rate` (jobs/s, wall) and `jobs`."""
    same.check()
    out: dict[str, dict[str, float]] = {}
    items = [({"type": "noop", "payload": {"n": i}}, f'{{"n":{i}}}') for i in range(BATCH)]
    result = '{"ok":true}'
    with contextlib.closing(same.connect(url)) as conn:
        backend = conn.info.backend_pid if _pg.is_local(url) else None

        def phase(name: str, body: Callable[[], int]) -> None:
            jobs = 0
            deadline = None if seconds is None else time.perf_counter() + seconds
            cpu, db_cpu = time.process_time(), process_cpu_seconds(backend) if backend else None
            started = time.perf_counter()
            for _ in range(batches):
                done = body()
                jobs += done
                if not done or (deadline is not None and time.perf_counter() > deadline):
                    break
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu
            db_after = process_cpu_seconds(backend) if backend else None
            db = db_after - db_cpu if db_cpu is not None and db_after is not None else None
            out[name] = {
                "jobs": jobs,
                "cpu_us": cpu / jobs * 1e6 if jobs else float("nan"),
                "db_cpu_us": db / jobs * 1e6 if db is not None and jobs else float("nan"),
                "rate": jobs / wall if wall else float("nan"),
            }

        held: list[list[tuple[int, int]]] = []
        phase("enqueue", lambda: len(same.tx_enqueue(conn, items, "bench-producer")))
        _pg.vacuum_analyze(url)  # as figure 3 does between these phases, on both sides

        def claim() -> int:
            rows = same.tx_claim(conn, "bench-worker", BATCH)
            if rows:
                held.append([(row[same.COL_ID], row[same.COL_ATTEMPT]) for row in rows])
            return len(rows)

        phase("claim", claim)

        def complete() -> int:
            if not held:
                return 0
            part = held.pop(0)
            done = same.tx_complete(conn, "bench-worker", [(i, a, result) for i, a in part])
            if len(done) != len(part):
                raise RuntimeError(f"the floor completed {len(done)} of {len(part)}")
            return len(done)

        phase("complete", complete)
    return out


def run_sql_pg(base_url: str, batches: int, seconds: float | None = None) -> dict[str, dict[str, float]]:
    """measure_sql_pg on a fresh database of `base_url`'s cluster, dropped after."""
    url = _pg.create_database(base_url, "floor")
    try:
        migrate(url)
        return measure_sql_pg(url, batches, seconds)
    finally:
        _pg.drop_database(base_url, url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200, help="batches of 100 per operation")
    parser.add_argument(
        "--sql-only", action="store_true", help="queuelog's statements on stdlib sqlite3 alone"
    )
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--postgres-url", default=_pg.DEFAULT_URL, help="a cluster to create a database on")
    args = parser.parse_args()
    if args.database == "postgresql":
        if not args.sql_only:
            parser.error("--database postgresql runs --sql-only only")
        phases = run_sql_pg(args.postgres_url, args.batches)
        print(f"queuelog's SQL alone (psycopg 3, one connection), batches of {BATCH}: per job")
        for name, p in phases.items():
            print(
                f"  {name:<9} {p['cpu_us']:6.1f} us here + {p['db_cpu_us']:6.1f} us PostgreSQL"
                f"   {p['rate']:8,.0f} jobs/s ({p['jobs']:,.0f} jobs)"
            )
        return
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
