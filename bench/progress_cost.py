"""What a handler reporting progress costs the server, beside heartbeats in the same run.

    .venv/bin/python -m bench.progress_cost [--handlers 20] [--seconds 5] [--rounds 3]
        [--database sqlite|postgresql] [--postgres-url postgresql://postgres@127.0.0.1:5432/test]
        [--py-spy PREFIX]

One `queuelog serve` on a temp SQLite file (or a fresh PostgreSQL database, dropped after).
`handlers` jobs are claimed with a long lease; then each round runs these loads in turn, for
`seconds` each, one handler per job on its own keep-alive connection, each paced to its rate:

- me 10/s: `{ me { name } }` ten times a second, which writes nothing: the floor of any
  request (HTTP, the key's check, the compiled GraphQL path), for scale;
- heartbeat 10/s: heartbeatJob ten times a second;
- report 10/s: reportProgress ten times a second, a handler that reports in a tight loop
  without the SDK's bound of four a second (the server stores at most one per 250 ms: four);
- heartbeat 3/s and report 3/s: every report stored (none comes within 250 ms of the one
  before), beside heartbeats at the same rate (a server's CPU per request falls as its
  request rate grows: it commits more of them together).

For each it prints the server's CPU (the server process; on a local PostgreSQL its backends
too, from /proc) per request and per handler-second, and how many writes reached each job
per second (the job's `revision`, which every write of its row adds one to). The rounds
alternate the loads, so that a machine's drift falls on all of them; the medians come last.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import _pg
from bench._api import Api
from bench._common import (
    Cleanup,
    ServerProcess,
    cpu_delta,
    event_loop_runner,
    make_keys,
    py_spy,
    sqlite_url,
    start_queuelog,
)

ME = "query Me { me { name } }"
HEARTBEAT = "mutation Beat($id: ID!, $attempt: Int) { heartbeatJob(id: $id, attempt: $attempt) { id } }"
REPORT = (
    "mutation Report($id: ID!, $attempt: Int!, $progress: Float!, $message: String) {"
    " reportProgress(id: $id, attempt: $attempt, progress: $progress, message: $message) { id } }"
)
ENQUEUE_MANY = "mutation Fill($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
CLAIM_MANY = "mutation Take($limit: Int!) { claimJobs(limit: $limit, leaseSeconds: 3600) { id attempt } }"
LOADS = (
    ("me 10/s", "me", 10.0),
    ("heartbeat 10/s", "heartbeat", 10.0),
    ("report 10/s", "report", 10.0),
    ("heartbeat 3/s", "heartbeat", 3.0),
    ("report 3/s", "report", 3.0),
)
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass
class Measured:
    requests: int
    server_cpu: float  # seconds
    database_cpu: float | None  # seconds: PostgreSQL's backends
    writes: int  # job row writes, by revision
    seconds: float
    handlers: int

    def per_request_ms(self) -> float:
        return (self.server_cpu + (self.database_cpu or 0.0)) / self.requests * 1e3

    def per_handler_second_ms(self) -> float:
        return (self.server_cpu + (self.database_cpu or 0.0)) / (self.handlers * self.seconds) * 1e3

    def writes_per_handler_second(self) -> float:
        return self.writes / (self.handlers * self.seconds)


async def handler(url: str, key: str, job: dict[str, Any], kind: str, rate: float, until: float) -> int:
    """One handler's calls, paced at `rate` a second until `until`; how many it made."""
    sent = 0
    async with Api(url, key) as api:
        next_at = time.monotonic()
        while next_at < until:
            if kind == "me":
                await api.call(ME)
            elif kind == "heartbeat":
                await api.call(HEARTBEAT, {"id": job["id"], "attempt": job["attempt"]})
            else:
                progress = (sent % 100) / 100
                variables = {"id": job["id"], "attempt": job["attempt"], "progress": progress}
                await api.call(REPORT, {**variables, "message": f"step {sent}"})
            sent += 1
            next_at += 1 / rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    return sent


async def run_load(
    server: ServerProcess, key: str, jobs: list[dict[str, Any]], kind: str, rate: float, seconds: float,
    revisions: Callable[[], int],
) -> Measured:  # fmt: skip
    await asyncio.sleep(0.5)  # the previous load's held reports are stored
    writes_before, cpu_before, db_before = revisions(), server.cpu_seconds(), server.db_cpu_snapshot()
    until = time.monotonic() + seconds
    counts = await asyncio.gather(*(handler(server.url, key, job, kind, rate, until) for job in jobs))
    await asyncio.sleep(0.3)  # the last windows end: their writes count
    cpu_after, db_after = server.cpu_seconds(), server.db_cpu_snapshot()
    assert cpu_before is not None and cpu_after is not None
    return Measured(
        requests=sum(counts),
        server_cpu=cpu_after - cpu_before,
        database_cpu=cpu_delta(db_before, db_after),
        writes=revisions() - writes_before,
        seconds=seconds,
        handlers=len(jobs),
    )


def revision_reader(database_url: str) -> Callable[[], int]:
    """The sum of every job's revision, read beside the server."""
    if database_url.startswith("sqlite"):
        path = database_url.removeprefix("sqlite:///")

        def read_sqlite() -> int:
            with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
                return int(conn.execute("SELECT COALESCE(SUM(revision), 0) FROM jobs").fetchone()[0])

        return read_sqlite

    def read_postgres() -> int:
        with contextlib.closing(_pg.psycopg().connect(database_url, autocommit=True)) as conn:
            return int(conn.execute("SELECT COALESCE(SUM(revision), 0) FROM jobs").fetchone()[0])

    return read_postgres


async def measure(server: ServerProcess, key: str, args: argparse.Namespace) -> dict[str, list[Measured]]:
    async with Api(server.url, server.admin_key) as admin:
        inputs = [{"type": "noop", "payload": {"n": n}} for n in range(args.handlers)]
        await admin.call(ENQUEUE_MANY, {"inputs": inputs})
    async with Api(server.url, key) as api:
        jobs = (await api.call(CLAIM_MANY, {"limit": args.handlers}))["claimJobs"]
    revisions = revision_reader(server.database_url)
    results: dict[str, list[Measured]] = {name: [] for name, _, _ in LOADS}
    for n in range(args.rounds):
        loads = LOADS if n % 2 == 0 else LOADS[::-1]
        for name, kind, rate in loads:
            output = f"{args.py_spy}-{kind}-{rate:g}-{n + 1}.txt" if args.py_spy else None
            with py_spy(server.pid if output else None, output):
                measured = await run_load(server, key, jobs, kind, rate, args.seconds, revisions)
            results[name].append(measured)
            print(f"round {n + 1}: {line(name, measured)}", flush=True)
    return results


def line(name: str, m: Measured) -> str:
    database = (
        "" if m.database_cpu is None else f" (of which PostgreSQL {m.database_cpu / m.requests * 1e3:.3f})"
    )
    return (
        f"{name:15} {m.requests / (m.handlers * m.seconds):5.1f} req/s a handler,"
        f" server CPU {m.per_request_ms():.3f} ms a request{database},"
        f" {m.per_handler_second_ms():.2f} ms a handler-second,"
        f" {m.writes_per_handler_second():.1f} writes of its job a second"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--handlers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--postgres-url", default=DEFAULT_URL)
    parser.add_argument(
        "--py-spy", metavar="PREFIX", help="profile the server during each load: PREFIX-<load>-<round>.txt"
    )
    args = parser.parse_args()
    with Cleanup() as cleanup:
        if args.database == "sqlite":
            url = sqlite_url(cleanup.workdir / "progress.db")
        else:
            url = _pg.create_database(args.postgres_url, "progress")
            cleanup.callback(_pg.drop_database, args.postgres_url, url)
        server = cleanup.server(start_queuelog(cleanup.workdir, url, job_types="noop"))
        key = make_keys(url, [("bench-worker", "worker")])["bench-worker"]
        if args.database == "postgresql" and _pg.is_local(args.postgres_url):
            database = _pg.database_name(url)
            server.database_cpu = lambda: _pg.backend_cpu(args.postgres_url, database)
        with event_loop_runner() as runner:
            results = runner.run(measure(server, key, args))
    print(f"median of {args.rounds} ({args.database}, {args.handlers} handlers, {args.seconds:g} s each):")
    for name, measured in results.items():
        per_request = statistics.median(m.per_request_ms() for m in measured)
        per_second = statistics.median(m.per_handler_second_ms() for m in measured)
        writes = statistics.median(m.writes_per_handler_second() for m in measured)
        print(
            f"  {name:15} server CPU {per_request:.3f} ms a request, {per_second:.2f} ms a handler-second,"
            f" {writes:.1f} writes of its job a second"
        )


if __name__ == "__main__":
    main()
