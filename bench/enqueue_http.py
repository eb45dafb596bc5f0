"""Single `enqueueJob` over HTTP: queuelog vs a bare Starlette + SQLAlchemy baseline.

Starts two server processes on temp SQLite files, each on a free loopback port:

- queuelog: `python -m queuelog serve --job-types noop --log-level warning`;
- baseline: bare Starlette under uvicorn the same way (`_baseline_app.py`), whose POST
  parses the same JSON body and does the same single-row INSERT into the same (migrated)
  `jobs` table with SQLAlchemy Core on stdlib sqlite3, WAL and synchronous=NORMAL.

This process is the load generator (uvloop + raw keep-alive HTTP/1.1 connections, bodies
built beforehand): C connections send up to N requests per round, one at a time each; a
round also stops starting requests after --round-seconds. Rounds alternate between the two
targets (ABBA...) so that drift in a noisy machine hits both. Throughput (requests done /
wall time) and latency percentiles are reported for both, with the ratio.

    .venv/bin/python bench/enqueue_http.py                       # defaults, under 60 s
    .venv/bin/python bench/enqueue_http.py -c 32 -n 3000 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

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
    machine_line,
    make_keys,
    measured,
    merge,
    migrate,
    phase,
    print_report,
    py_spy,
    sqlite_url,
    start_queuelog,
    start_uvicorn,
    stderr,
)

ENQUEUE = (
    "mutation Enqueue($input: EnqueueJobInput!) { enqueueJob(input: $input) { created job { id status } } }"
)
Check = Callable[[int, bytes], str | None]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-c", "--concurrency", type=int, default=16, help="client connections (default 16)")
    parser.add_argument(
        "-n", "--requests", type=int, default=1000, help="requests per target per round (default 1000)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per target (default 3)")
    parser.add_argument(
        "--round-seconds",
        type=float,
        default=8.0,
        help="a round also ends after this long, with the requests done so far (default 8)",
    )
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests per target first (200)")
    parser.add_argument(
        "--payload-bytes", type=int, default=64, help="approximate size of each job's payload (64)"
    )
    parser.add_argument(
        "--py-spy",
        metavar="PATH",
        help="profile the queuelog server with py-spy during its rounds (.svg flamegraph, .txt collapsed)",
    )
    common_arguments(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.concurrency <= 256 or not 1 <= args.requests <= 100_000 or not 1 <= args.rounds <= 20:
        parser.error("bounds: 1 <= concurrency <= 256, 1 <= requests <= 100000, 1 <= rounds <= 20")
    if not 0 < args.round_seconds <= 300:
        parser.error("bounds: 0 < round-seconds <= 300")
    return args


def bodies(count: int, start: int, payload_bytes: int) -> list[bytes]:
    pad = "x" * max(0, payload_bytes - 40)
    return [
        graphql_body(
            ENQUEUE, {"input": {"type": "noop", "payload": {"n": i, "to": f"u{i}@example.com", "p": pad}}}
        )
        for i in range(start, start + count)
    ]


def check_enqueued(status: int, body: bytes) -> str | None:
    if status != 200 or b'"errors"' in body or b'"created"' not in body:
        return f"HTTP {status}: {body[:300]!r}"
    return None


async def drive(
    server: ServerProcess,
    headers: dict[str, str],
    payloads: list[bytes],
    concurrency: int,
    check: Check,
    seconds: float,
) -> tuple[list[float], list[str]]:
    """`concurrency` connections send `payloads` (each once), one request at a time each.

    No new request starts after `seconds`; the latencies of those done are returned.
    """
    latencies: list[float] = []
    failures: list[str] = []
    pending = iter(payloads)
    deadline = time.perf_counter() + seconds

    async def connection() -> None:
        conn = HttpConnection(server.url, headers)
        try:
            for body in pending:
                if time.perf_counter() > deadline:
                    return
                started = time.perf_counter()
                status, answer = await conn.post("/graphql", body)
                latencies.append(time.perf_counter() - started)
                problem = check(status, answer)
                if problem is not None:
                    failures.append(problem)
        finally:
            await conn.close()

    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return latencies, failures


async def load(
    label: str,
    server: ServerProcess,
    headers: dict[str, str],
    payloads: list[bytes],
    concurrency: int,
    seconds: float,
) -> Measurement:
    failures: list[str] = []

    async def work() -> tuple[int, list[float]]:
        latencies, failed = await drive(server, headers, payloads, concurrency, check_enqueued, seconds)
        failures.extend(failed)
        return len(latencies), latencies

    result = await measured(label, work, server)
    if failures:
        raise SystemExit(
            f"{label}: {len(failures)} failed requests, first: {failures[0]}\n{server.log()[-2000:]}"
        )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_line()
    with Cleanup(keep=args.keep) as cleanup, event_loop_runner() as runner:
        work = cleanup.workdir
        with phase("starting servers"):
            baseline_db = sqlite_url(work / "baseline.db")
            migrate(baseline_db)  # queuelog's own tables and indexes
            baseline = cleanup.server(
                start_uvicorn(
                    work,
                    "_baseline_app:create_app",
                    env={"BENCH_BASELINE_DATABASE_URL": baseline_db},
                    name="baseline",
                )
            )
            queuelog_db = sqlite_url(work / "queuelog.db")
            queuelog = cleanup.server(start_queuelog(work, queuelog_db))
            producer = make_keys(queuelog_db, [("bench-producer", "producer")])["bench-producer"]
        targets: dict[str, tuple[ServerProcess, dict[str, str]]] = {
            "baseline": (baseline, {}),
            "queuelog": (queuelog, bearer(producer)),
        }

        with phase(f"warm-up ({args.warmup} requests each)"):
            for name, (server, headers) in targets.items():
                payloads = bodies(args.warmup, 10_000_000, args.payload_bytes)
                runner.run(
                    load(
                        name,
                        server,
                        headers,
                        payloads,
                        min(args.concurrency, args.warmup),
                        args.round_seconds,
                    )
                )

        rounds: dict[str, list[Measurement]] = {"baseline": [], "queuelog": []}
        rounds_phase = phase(
            f"{args.rounds} rounds x {args.requests} requests per target, C={args.concurrency}"
        )
        with rounds_phase, py_spy(queuelog.process.pid, args.py_spy):
            for r in range(args.rounds):
                order = ["baseline", "queuelog"] if r % 2 == 0 else ["queuelog", "baseline"]
                for name in order:
                    server, headers = targets[name]
                    payloads = bodies(args.requests, r * args.requests, args.payload_bytes)
                    measurement = load(name, server, headers, payloads, args.concurrency, args.round_seconds)
                    rounds[name].append(runner.run(measurement))
                    time.sleep(0.2)

    per_round = [
        b.throughput / q.throughput for b, q in zip(rounds["baseline"], rounds["queuelog"], strict=True)
    ]
    comparison = Comparison(
        title=f"enqueueJob, single job per request, C={args.concurrency}",
        subject=merge("queuelog enqueueJob", rounds["queuelog"]),
        baseline=merge("baseline Starlette INSERT", rounds["baseline"]),
        unit="req/s",
        note=f"{args.rounds} rounds of up to {args.requests} requests or {args.round_seconds:g} s each",
    )
    print_report(f"bench/enqueue_http.py  ({machine})", [comparison], args.json)
    print("per-round throughput ratio: " + "  ".join(f"{x:.2f}x" for x in per_round))
    ratio = comparison.throughput_ratio
    print(
        f"target: queuelog within 2x of the baseline -> {'met' if ratio <= 2 else 'not met'} ({ratio:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stderr("interrupted")
        sys.exit(130)
