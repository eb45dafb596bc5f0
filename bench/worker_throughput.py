"""Jobs per second that one `queuelog worker` process sustains with no-op handlers.

For each handler kind (async and sync, each on a fresh server and database):

1. starts `python -m queuelog serve --job-types noop` on a temp SQLite file;
2. enqueues N no-op jobs with `enqueueJobs` (1000 per call) before any worker runs;
3. starts one `python -m queuelog worker --handlers ...:HANDLERS --concurrency C`, whose
   handler returns None at once (`async def` or plain `def`, run in a thread);
4. polls `queueStats` until all N are COMPLETED, then stops the worker with SIGTERM.

The headline figure is N / (last finishedAt - first claimedAt), read from the server's own
timestamps in the database, so the worker's Python start-up is not counted; the wall time
from launching the worker (start-up included) is shown as well, with the CPU seconds the
worker and the server used meanwhile (they share the machine's cores).

    .venv/bin/python bench/worker_throughput.py                     # 5000 jobs, -c 32, ~30 s
    .venv/bin/python bench/worker_throughput.py --jobs 2000 --handler async --concurrency 8
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    PYTHON,
    Cleanup,
    ServerProcess,
    common_arguments,
    machine_line,
    make_keys,
    phase,
    process_cpu_seconds,
    sqlite_url,
    start_queuelog,
    stderr,
)

ENQUEUE_BATCH = 1000
DONE_TIMEOUT = 300.0
HANDLERS_MODULE = '''"""No-op handlers for bench/worker_throughput.py."""


async def noop_async(job):
    return None


def noop_sync(job):
    return None


ASYNC = {"noop": noop_async}
SYNC = {"noop": noop_sync}
'''
ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { created } }"
STATS = "{ queueStats { counts { pending running completed failed cancelled } } }"


@dataclass
class Run:
    handler: str
    jobs: int
    concurrency: int
    window_seconds: float  # first claimedAt .. last finishedAt, server clock
    wall_seconds: float  # worker launch .. all COMPLETED seen, start-up included
    worker_cpu_seconds: float | None
    server_cpu_seconds: float | None

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.window_seconds if self.window_seconds > 0 else float("nan")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--jobs", type=int, default=5000, help="no-op jobs per run (default 5000)")
    parser.add_argument(
        "-c", "--concurrency", type=int, default=32, help="the worker's --concurrency (default 32)"
    )
    parser.add_argument(
        "--handler",
        choices=["async", "sync", "both"],
        default="both",
        help="async def, plain def (threads), or one run of each (default both)",
    )
    common_arguments(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.jobs <= 100_000 or not 1 <= args.concurrency <= 100:
        parser.error("bounds: 1 <= jobs <= 100000, 1 <= concurrency <= 100")
    return args


def gql(
    client: httpx.Client, url: str, key: str, query: str, variables: dict[str, Any] | None = None
) -> dict[str, Any]:
    response = client.post(
        f"{url}/graphql",
        json={"query": query, "variables": variables or {}},
        headers={"Authorization": f"Bearer {key}"},
    )
    body = response.json()
    if response.status_code != 200 or body.get("errors"):
        raise RuntimeError(f"HTTP {response.status_code}: {json.dumps(body)[:300]}")
    return body["data"]


def enqueue(client: httpx.Client, server: ServerProcess, count: int) -> None:
    assert server.admin_key is not None
    for start in range(0, count, ENQUEUE_BATCH):
        inputs = [
            {"type": "noop", "payload": {"n": i}} for i in range(start, min(count, start + ENQUEUE_BATCH))
        ]
        created = gql(client, server.url, server.admin_key, ENQUEUE_MANY, {"inputs": inputs})["enqueueJobs"]
        if len(created) != len(inputs):
            raise RuntimeError(f"enqueued {len(created)} of {len(inputs)}")


def wait_all_completed(
    client: httpx.Client, server: ServerProcess, worker: subprocess.Popen[bytes], count: int
) -> None:
    assert server.admin_key is not None
    deadline = time.monotonic() + DONE_TIMEOUT
    while True:
        counts = gql(client, server.url, server.admin_key, STATS)["queueStats"]["counts"]
        if counts["completed"] == count:
            return
        if counts["failed"] or counts["cancelled"]:
            raise RuntimeError(f"jobs did not complete: {counts}")
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done after {DONE_TIMEOUT:.0f} s: {counts}")
        time.sleep(0.1)


def server_window(database: Path, count: int) -> float:
    """Seconds from the first claim to the last completion, from the server's timestamps."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as conn:
        done, first, last, attempts = conn.execute(
            "SELECT count(*), min(claimed_at), max(finished_at), max(attempt) FROM jobs"
            " WHERE status = 'completed'"
        ).fetchone()
    if done != count or attempts != 1:
        raise RuntimeError(f"{done} completed jobs (expected {count}), max attempt {attempts}")
    return (last - first) / 1_000_000  # stored as microseconds since the epoch


def run_once(cleanup: Cleanup, handler: str, jobs: int, concurrency: int) -> Run:
    workdir = cleanup.workdir / handler
    workdir.mkdir()
    (workdir / "bench_handlers.py").write_text(HANDLERS_MODULE)
    database = workdir / "queuelog.db"
    with phase(f"{handler}: start the server"):
        server = cleanup.server(start_queuelog(workdir, sqlite_url(database), job_types="noop"))
        key = make_keys(sqlite_url(database), [("bench-worker", "worker")])["bench-worker"]
    with httpx.Client(timeout=60) as client:
        with phase(f"{handler}: enqueue {jobs} jobs"):
            enqueue(client, server, jobs)
        log = (workdir / "worker.log").open("wb")
        cleanup.callback(log.close)
        server_cpu = server.cpu_seconds()
        launched = time.perf_counter()
        worker = subprocess.Popen(
            [PYTHON, "-m", "queuelog", "worker", "--url", server.url, "--key", key]
            + ["--handlers", f"bench_handlers:{handler.upper()}", "--concurrency", str(concurrency)],
            cwd=workdir,
            env={k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        cleanup.callback(_stop, worker)
        with phase(f"{handler}: run the worker until all are COMPLETED"):
            wait_all_completed(client, server, worker, jobs)
        wall = time.perf_counter() - launched
        worker_cpu = process_cpu_seconds(worker.pid)
        server_after = server.cpu_seconds()
    _stop(worker)
    return Run(
        handler=handler,
        jobs=jobs,
        concurrency=concurrency,
        window_seconds=server_window(database, jobs),
        wall_seconds=wall,
        worker_cpu_seconds=worker_cpu,
        server_cpu_seconds=(
            server_after - server_cpu if server_after is not None and server_cpu is not None else None
        ),
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report(runs: Sequence[Run]) -> str:
    lines = [
        "queuelog worker throughput: one `queuelog worker` process, no-op handlers",
        machine_line(),
        f"{'handler':<8} {'jobs':>6} {'conc':>5} {'jobs/s':>9} {'window s':>9} {'wall s':>7} "
        f"{'worker CPU s':>13} {'server CPU s':>13}",
    ]
    for r in runs:
        lines.append(
            f"{r.handler:<8} {r.jobs:>6} {r.concurrency:>5} {_fmt(r.jobs_per_second):>9} "
            f"{_fmt(r.window_seconds, 2):>9} {_fmt(r.wall_seconds, 2):>7} "
            f"{_fmt(r.worker_cpu_seconds, 2):>13} {_fmt(r.server_cpu_seconds, 2):>13}"
        )
    lines.append(
        "jobs/s = jobs / (last finishedAt - first claimedAt) on the server's clock; wall s = from\n"
        "launching the worker (Python start-up included) until all were seen COMPLETED."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    kinds = ["async", "sync"] if args.handler == "both" else [args.handler]
    runs: list[Run] = []
    try:
        with Cleanup(keep=args.keep) as cleanup:
            for kind in kinds:
                runs.append(run_once(cleanup, kind, args.jobs, args.concurrency))
    except KeyboardInterrupt:
        stderr("interrupted")
        return 130
    except RuntimeError as exc:
        stderr(f"worker_throughput: {exc}")
        return 1
    print(report(runs), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [{**asdict(r), "jobs_per_second": round(r.jobs_per_second, 1)} for r in runs], indent=2
            )
            + "\n"
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
