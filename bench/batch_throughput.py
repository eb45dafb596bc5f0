"""Batch throughput: enqueueJobs (1000 a call), claimJobs(limit: 100) and completeJobs (100).

Starts one real `queuelog serve` on a temp SQLite file and a free loopback port, creates a
PRODUCER key and W WORKER keys with `queuelog keys create`, then, over HTTP:

1. enqueue   J jobs with `enqueueJobs` in batches of B (1000), P producer connections;
2. claim     W workers call `claimJobs(limit: 100)` until it answers [] (they hold it all);
3. complete  each worker reports its jobs with `completeJobs` of 100 items;
4. drain     J more jobs are enqueued, then W workers loop claimJobs(100) + completeJobs
             until the queue is empty (the realistic worker loop; jobs/s end to end).

The baseline, in the same run, is the ceiling: the same steps in this process on raw stdlib
sqlite3 (WAL, synchronous=NORMAL, one transaction per call like queuelog) against a copy of
queuelog's schema: executemany INSERT of the same rows, the same claim
`UPDATE ... WHERE id IN (SELECT ... LIMIT 100) RETURNING *`, and an executemany UPDATE for
completion. It runs once before and once after queuelog (fresh database each time), and the
two are pooled, so drift on a noisy machine hits both.

    .venv/bin/python bench/batch_throughput.py              # defaults, ~35 s
    .venv/bin/python bench/batch_throughput.py --jobs 20000 --workers 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    Cleanup,
    Comparison,
    HttpConnection,
    Measurement,
    ServerProcess,
    bearer,
    common_arguments,
    event_loop_runner,
    graphql_body,
    graphql_data,
    machine_line,
    make_keys,
    measured,
    measured_in_process,
    merge,
    migrate,
    phase,
    print_report,
    py_spy,
    sqlite_url,
    start_queuelog,
    stderr,
    timed,
)

ENQUEUE_MANY = (
    "mutation Enqueue($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { created job { id } } }"
)
CLAIM = "mutation Claim($limit: Int!) { claimJobs(limit: $limit) { id attempt } }"
COMPLETE = (
    "mutation Complete($items: [CompleteJobInput!]!) "
    "{ completeJobs(items: $items) { completed { id } rejected } }"
)
STATS = "{ queueStats { counts { pending running completed failed cancelled } } }"
RESULT = {"ok": True}
LEASE_SECONDS = 300
Held = list[tuple[str, int]]  # (job id, attempt)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-j", "--jobs", type=int, default=4000, help="jobs per pass (default 4000)")
    parser.add_argument("-b", "--batch", type=int, default=1000, help="jobs per enqueueJobs call (1000)")
    parser.add_argument("-w", "--workers", type=int, default=4, help="worker connections W (default 4)")
    parser.add_argument("-p", "--producers", type=int, default=2, help="producer connections P (default 2)")
    parser.add_argument("--limit", type=int, default=100, help="claimJobs limit and completeJobs size (100)")
    parser.add_argument(
        "--py-spy", metavar="PATH", help="profile the queuelog server with py-spy (.svg or .txt)"
    )
    common_arguments(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.jobs <= 200_000 or not 1 <= args.batch <= 1000 or not 1 <= args.limit <= 100:
        parser.error("bounds: 1 <= jobs <= 200000, 1 <= batch <= 1000, 1 <= limit <= 100")
    if not 1 <= args.workers <= 64 or not 1 <= args.producers <= 16:
        parser.error("bounds: 1 <= workers <= 64, 1 <= producers <= 16")
    return args


def payload(i: int) -> dict[str, Any]:
    return {"n": i, "to": f"u{i}@example.com"}


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- queuelog over HTTP ----------------------------------------------------------------------


def enqueue_bodies(jobs: int, batch: int, start: int) -> list[bytes]:
    return [
        graphql_body(ENQUEUE_MANY, {"inputs": [{"type": "noop", "payload": payload(i)} for i in ids]})
        for ids in chunks(range(start, start + jobs), batch)
    ]


async def enqueue(
    server: ServerProcess, key: str, bodies: list[bytes], producers: int
) -> tuple[int, list[float]]:
    latencies: list[float] = []
    created = 0
    pending = iter(bodies)

    async def producer() -> None:
        nonlocal created
        conn = HttpConnection(server.url, bearer(key))
        try:
            for body in pending:
                outcomes = graphql_data(*await timed(conn.post("/graphql", body), latencies))["enqueueJobs"]
                if not all(o["created"] for o in outcomes):
                    raise RuntimeError(
                        "enqueueJobs answered created: false for a job without idempotency key"
                    )
                created += len(outcomes)
        finally:
            await conn.close()

    await asyncio.gather(*(producer() for _ in range(producers)))
    return created, latencies


async def claim_once(conn: HttpConnection, body: bytes, latencies: list[float]) -> Held:
    jobs = graphql_data(*await timed(conn.post("/graphql", body), latencies))["claimJobs"]
    return [(job["id"], job["attempt"]) for job in jobs]


async def complete_once(conn: HttpConnection, held: Sequence[tuple[str, int]], latencies: list[float]) -> int:
    items = [{"id": job_id, "attempt": attempt, "result": RESULT} for job_id, attempt in held]
    body = graphql_body(COMPLETE, {"items": items})
    outcome = graphql_data(*await timed(conn.post("/graphql", body), latencies))["completeJobs"]
    if outcome["rejected"] or len(outcome["completed"]) != len(held):
        raise RuntimeError(f"completeJobs rejected {outcome['rejected'][:10]}")
    return len(held)


async def claim_all(
    server: ServerProcess, keys: list[str], limit: int
) -> tuple[dict[str, Held], list[float]]:
    """Every worker claims until the queue answers []; returns what each holds."""
    latencies: list[float] = []
    held: dict[str, Held] = {key: [] for key in keys}
    body = graphql_body(CLAIM, {"limit": limit})

    async def worker(key: str) -> None:
        conn = HttpConnection(server.url, bearer(key))
        try:
            while claimed := await claim_once(conn, body, latencies):
                held[key].extend(claimed)
        finally:
            await conn.close()

    await asyncio.gather(*(worker(key) for key in keys))
    return held, latencies


async def complete_all(server: ServerProcess, held: dict[str, Held], limit: int) -> tuple[int, list[float]]:
    latencies: list[float] = []
    done = 0

    async def worker(key: str, jobs: Held) -> None:
        nonlocal done
        conn = HttpConnection(server.url, bearer(key))
        try:
            for part in chunks(jobs, limit):
                completed = await complete_once(conn, part, latencies)
                done += completed  # not `done += await ...`: that reads `done` before awaiting
        finally:
            await conn.close()

    await asyncio.gather(*(worker(key, jobs) for key, jobs in held.items()))
    return done, latencies


async def drain(server: ServerProcess, keys: list[str], limit: int) -> tuple[int, list[float]]:
    """The worker loop: claim up to `limit`, complete them, until the queue answers []."""
    cycles: list[float] = []
    done = 0
    body = graphql_body(CLAIM, {"limit": limit})

    async def worker(key: str) -> None:
        nonlocal done
        conn = HttpConnection(server.url, bearer(key))
        scratch: list[float] = []
        try:
            while True:
                started = time.perf_counter()
                claimed = await claim_once(conn, body, scratch)
                if not claimed:
                    return
                completed = await complete_once(conn, claimed, scratch)
                done += completed
                cycles.append(time.perf_counter() - started)
        finally:
            await conn.close()

    await asyncio.gather(*(worker(key) for key in keys))
    return done, cycles


async def queue_counts(server: ServerProcess) -> dict[str, int]:
    assert server.admin_key is not None
    conn = HttpConnection(server.url, bearer(server.admin_key))
    try:
        counts: dict[str, int] = graphql_data(*await conn.post("/graphql", graphql_body(STATS)))[
            "queueStats"
        ]["counts"]
        return counts
    finally:
        await conn.close()


def run_queuelog(
    runner: asyncio.Runner, server: ServerProcess, producer: str, workers: list[str], args: argparse.Namespace
) -> dict[str, Measurement]:
    def run(label: str, work: Any) -> Measurement:
        result = runner.run(measured(label, work, server))
        stderr(f"    {label}: {result.ops} jobs in {result.seconds:.2f} s")
        return result

    first = enqueue_bodies(args.jobs, args.batch, 0)
    second = enqueue_bodies(args.jobs, args.batch, args.jobs)
    held: dict[str, Held] = {}

    async def claim_phase() -> tuple[int, list[float]]:
        claimed, latencies = await claim_all(server, workers, args.limit)
        held.update(claimed)
        return sum(len(h) for h in claimed.values()), latencies

    out = {
        "enqueue": run("queuelog enqueueJobs", lambda: enqueue(server, producer, first, args.producers)),
        "claim": run("queuelog claimJobs", claim_phase),
        "complete": run("queuelog completeJobs", lambda: complete_all(server, held, args.limit)),
    }
    again = run("queuelog enqueueJobs", lambda: enqueue(server, producer, second, args.producers))
    out["enqueue"] = merge("queuelog enqueueJobs", [out["enqueue"], again])
    out["drain"] = run("queuelog claim+complete", lambda: drain(server, workers, args.limit))
    return out


def warm_up(runner: asyncio.Runner, server: ServerProcess, producer: str, worker: str) -> None:
    async def go() -> None:
        await enqueue(server, producer, enqueue_bodies(200, 100, 10_000_000), 1)
        await drain(server, [worker], 50)

    runner.run(go())


# --- the in-process baseline -----------------------------------------------------------------

CLAIM_SQL = """
UPDATE jobs SET status = 'running', attempt = attempt + 1, claimed_at = ?, worker_id = ?,
    lease_expires_at = ?, updated_at = ?
WHERE id IN (
    SELECT id FROM jobs WHERE status = 'pending' AND run_at <= ?
    ORDER BY priority DESC, created_at, id LIMIT ?
) AND status = 'pending'
RETURNING *
"""
COMPLETE_SQL = """
UPDATE jobs SET status = 'completed', result = ?, finished_at = ?, lease_expires_at = NULL, updated_at = ?
WHERE id = ? AND status = 'running' AND worker_id = ? AND attempt = ?
"""
INSERT_SQL = """
INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt, idempotency_key,
    run_at, created_by, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


def micros_now() -> int:
    now = datetime.now(UTC)
    return int(now.timestamp()) * 1_000_000 + now.microsecond


class Baseline:
    """The same steps on raw sqlite3 in this process: one connection, one transaction per call."""

    def __init__(self, path: Path, args: argparse.Namespace) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.args = args
        self.workers = [f"bench-worker-{i}" for i in range(args.workers)]

    def close(self) -> None:
        self.db.close()

    def _transaction(self, fn: Any, *params: Any) -> Any:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            value = fn(*params)
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        return value

    def enqueue(self, start: int) -> tuple[int, list[float]]:
        latencies: list[float] = []
        for ids in chunks(range(start, start + self.args.jobs), self.args.batch):
            started = time.perf_counter()
            now = micros_now()
            rows = [
                ("noop", json.dumps(payload(i), separators=(",", ":")), 0, "pending", 0, 3, 0, None)
                + (now, "bench-producer", now, now)
                for i in ids
            ]
            self._transaction(self.db.executemany, INSERT_SQL, rows)
            latencies.append(time.perf_counter() - started)
        return self.args.jobs, latencies

    def claim_once(self, worker: str, latencies: list[float]) -> Held:
        started = time.perf_counter()
        now = micros_now()
        params = (now, worker, now + LEASE_SECONDS * 1_000_000, now, now, self.args.limit)
        rows = self._transaction(lambda: self.db.execute(CLAIM_SQL, params).fetchall())
        latencies.append(time.perf_counter() - started)
        return [(str(row[0]), row[7]) for row in rows]

    def complete_once(self, worker: str, held: Sequence[tuple[str, int]], latencies: list[float]) -> int:
        started = time.perf_counter()
        now = micros_now()
        result = json.dumps(RESULT, separators=(",", ":"))
        params = [(result, now, now, int(job_id), worker, attempt) for job_id, attempt in held]
        cursor = self._transaction(self.db.executemany, COMPLETE_SQL, params)
        if cursor.rowcount != len(held):
            raise RuntimeError(f"baseline completed {cursor.rowcount} of {len(held)}")
        latencies.append(time.perf_counter() - started)
        return len(held)

    def run(self) -> dict[str, Measurement]:
        held: dict[str, Held] = {w: [] for w in self.workers}

        def claim_all() -> tuple[int, list[float]]:
            latencies: list[float] = []
            turn = 0
            while claimed := self.claim_once(self.workers[turn % len(self.workers)], latencies):
                held[self.workers[turn % len(self.workers)]].extend(claimed)
                turn += 1
            return sum(len(h) for h in held.values()), latencies

        def complete_all() -> tuple[int, list[float]]:
            latencies: list[float] = []
            done = sum(
                self.complete_once(worker, part, latencies)
                for worker, jobs in held.items()
                for part in chunks(jobs, self.args.limit)
            )
            return done, latencies

        def drain() -> tuple[int, list[float]]:
            cycles: list[float] = []
            scratch: list[float] = []
            done = turn = 0
            while True:
                worker = self.workers[turn % len(self.workers)]
                started = time.perf_counter()
                claimed = self.claim_once(worker, scratch)
                if not claimed:
                    return done, cycles
                done += self.complete_once(worker, claimed, scratch)
                cycles.append(time.perf_counter() - started)
                turn += 1

        out = {
            "enqueue": measured_in_process("baseline executemany", lambda: self.enqueue(0)),
            "claim": measured_in_process("baseline UPDATE RETURNING", claim_all),
            "complete": measured_in_process("baseline executemany UPDATE", complete_all),
        }
        again = measured_in_process("baseline executemany", lambda: self.enqueue(self.args.jobs))
        out["enqueue"] = merge("baseline executemany", [out["enqueue"], again])
        out["drain"] = measured_in_process("baseline claim+complete", drain)
        return out


def run_baseline(template: Path, path: Path, args: argparse.Namespace) -> dict[str, Measurement]:
    """One baseline pass on a fresh copy of `template` (a database `queuelog migrate` made)."""
    shutil.copyfile(template, path)
    baseline = Baseline(path, args)
    try:
        return baseline.run()
    finally:
        baseline.close()


# --- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_line()
    with Cleanup(keep=args.keep) as cleanup, event_loop_runner() as runner:
        work = cleanup.workdir
        with phase("starting queuelog"):
            database = sqlite_url(work / "queuelog.db")
            server = cleanup.server(start_queuelog(work, database))
        with phase(f"creating 1 producer and {args.workers} worker keys, migrating the baseline's database"):
            names = [("bench-producer", "producer")] + [
                (f"bench-worker-{i}", "worker") for i in range(args.workers)
            ]
            keys = make_keys(database, names)
            producer, workers = keys["bench-producer"], [keys[n] for n, role in names if role == "worker"]
            template = work / "baseline-template.db"
            migrate(sqlite_url(template))  # queuelog's own tables and indexes
        with phase("warm-up"):
            warm_up(runner, server, producer, workers[0])

        with phase("baseline, first pass"):
            baselines = [run_baseline(template, work / "baseline-1.db", args)]
        queuelog_phase = phase(f"queuelog: {args.jobs} jobs x 2, W={args.workers}, P={args.producers}")
        with queuelog_phase, py_spy(server.process.pid, args.py_spy):
            queuelog = run_queuelog(runner, server, producer, workers, args)
        with phase("baseline, second pass"):
            baselines.append(run_baseline(template, work / "baseline-2.db", args))

        counts = runner.run(queue_counts(server))
        expected_done = 2 * args.jobs + 200  # + the warm-up jobs
        if counts["completed"] != expected_done or counts["pending"] or counts["running"]:
            raise SystemExit(f"queue not drained as expected: {counts} (expected {expected_done} completed)")

    notes = {
        "enqueue": f"enqueueJobs of {args.batch}, 2 x {args.jobs} jobs; queuelog: P={args.producers}",
        "claim": f"claimJobs(limit: {args.limit}) until empty; queuelog: W={args.workers} workers",
        "complete": f"completeJobs of {args.limit}; queuelog: W={args.workers} workers",
        "drain": f"claim {args.limit} + complete them, until empty; latency per cycle; W={args.workers}",
    }
    comparisons = [
        Comparison(
            title=step,
            subject=queuelog[step],
            baseline=merge(baselines[0][step].label, [b[step] for b in baselines]),
            unit="jobs/s",
            note=notes[step],
        )
        for step in ("enqueue", "claim", "complete", "drain")
    ]
    print_report(f"bench/batch_throughput.py  ({machine})", comparisons, args.json)
    print(
        "latency is per call (a batch); queuelog's includes queueing behind the other connections,\n"
        "the in-process baseline's is its sequential service time. "
        f"Verified after the run: {counts['completed']} jobs COMPLETED, none pending or running."
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stderr("interrupted")
        sys.exit(130)
