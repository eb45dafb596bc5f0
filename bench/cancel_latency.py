"""Cancel to handler cancelled: how long an SDK worker's async handler runs on after a
cancelJob is answered, beside the same run without the worker's cancel subscription.

    .venv/bin/python -m bench.cancel_latency [--samples 40] [--database sqlite|postgresql]
        [--postgres-url postgresql://postgres@127.0.0.1:5432/test] [--lease-seconds 30]

SQLite: one `queuelog serve`; the worker and the cancels talk to it. PostgreSQL: two servers
on one fresh database (dropped after); the worker talks to one, every cancelJob goes to the
other, so the request crosses servers (NOTIFY) before it reaches the worker's websocket.

"with": the worker as shipped. Jobs are cancelled one at a time: enqueue one, wait until its
handler has started, send cancelJob, and time from its answer to the handler's
CancelledError (and from the request's start). "without": the worker with its cancel
subscription switched off (`lifecycle.LISTEN_FOR_CANCELS`), hearing of requests only from
its heartbeats (every third of `--lease-seconds`): as many jobs as the worker's
concurrency are started and cancelled at once. Targets (issue 33): p50 <= 100 ms and p99 <=
1 s with the subscription.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench import _pg
from bench._api import Api
from bench._common import (
    Cleanup,
    event_loop_runner,
    make_keys,
    percentile,
    sqlite_url,
    start_queuelog,
    wait_healthy,
)
from queuelog.sdk.worker import lifecycle
from queuelog.worker import Worker

ENQUEUE = "mutation Enqueue($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
CANCEL = "mutation Cancel($id: ID!) { cancelJob(id: $id) { id status cancelRequested } }"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
STARTED_TIMEOUT = 30.0


@dataclass
class Handlers:
    """The `slow` handler: waits until cancelled, recording when it started and ended."""

    started: dict[str, asyncio.Event] = field(default_factory=dict)
    cancelled_at: dict[str, float] = field(default_factory=dict)
    ended: dict[str, asyncio.Event] = field(default_factory=dict)

    def expect(self, job_id: str) -> None:
        self.started[job_id] = asyncio.Event()
        self.ended[job_id] = asyncio.Event()

    async def slow(self, job: Any) -> None:
        self.started[job.id].set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled_at[job.id] = time.monotonic()
            self.ended[job.id].set()
            raise


@dataclass
class Sample:
    from_answer: float  # seconds, cancelJob's answer to the handler's CancelledError
    from_request: float


async def one_by_one(api: Api, canceller: Api, handlers: Handlers, samples: int) -> list[Sample]:
    measured = []
    for _ in range(samples + 1):  # the first one warms up (the subscription opens with the claim)
        job_id = (await api.call(ENQUEUE, {"input": {"type": "slow"}}))["enqueueJob"]["job"]["id"]
        handlers.expect(job_id)
        await asyncio.wait_for(handlers.started[job_id].wait(), STARTED_TIMEOUT)
        await asyncio.sleep(0.05)
        sent = time.monotonic()
        await canceller.call(CANCEL, {"id": job_id})
        answered = time.monotonic()
        await asyncio.wait_for(handlers.ended[job_id].wait(), 600)
        at = handlers.cancelled_at[job_id]
        measured.append(Sample(at - answered, at - sent))
    return measured[1:]


async def all_at_once(api: Api, canceller: Api, handlers: Handlers, count: int) -> list[Sample]:
    ids = []
    for _ in range(count):
        job_id = (await api.call(ENQUEUE, {"input": {"type": "slow"}}))["enqueueJob"]["job"]["id"]
        handlers.expect(job_id)
        ids.append(job_id)
    for job_id in ids:
        await asyncio.wait_for(handlers.started[job_id].wait(), STARTED_TIMEOUT)
    await asyncio.sleep(0.05)
    times = []
    for job_id in ids:
        sent = time.monotonic()
        await canceller.call(CANCEL, {"id": job_id})
        times.append((sent, time.monotonic()))
    for job_id in ids:
        await asyncio.wait_for(handlers.ended[job_id].wait(), 600)
    return [
        Sample(handlers.cancelled_at[job_id] - answered, handlers.cancelled_at[job_id] - sent)
        for job_id, (sent, answered) in zip(ids, times, strict=True)
    ]


async def measure(
    worker_url: str, cancel_url: str, admin_key: str, worker_key: str, listen: bool, args: argparse.Namespace
) -> list[Sample]:
    lifecycle.LISTEN_FOR_CANCELS = listen
    handlers = Handlers()
    concurrency = 1 if listen else args.concurrency
    worker = Worker(worker_url, key=worker_key, handlers={"slow": handlers.slow}, concurrency=concurrency)
    running = asyncio.create_task(worker.run())
    try:
        async with Api(cancel_url, admin_key) as api, Api(cancel_url, admin_key) as canceller:
            if listen:
                return await one_by_one(api, canceller, handlers, args.samples)
            return await all_at_once(api, canceller, handlers, args.concurrency)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 60)


def summary(name: str, samples: list[Sample]) -> str:
    answer = [s.from_answer * 1e3 for s in samples]
    request = [s.from_request * 1e3 for s in samples]
    return (
        f"  {name:8} {len(samples):3} cancels: from the answer p50 {statistics.median(answer):8.1f} ms,"
        f" p99 {percentile(answer, 99):8.1f} ms, max {max(answer):8.1f} ms;"
        f" from the request p50 {statistics.median(request):8.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=10, help="jobs cancelled at once without")
    parser.add_argument("--lease-seconds", type=int, default=30)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--postgres-url", default=DEFAULT_URL)
    args = parser.parse_args()
    extra = ("--lease-seconds", str(args.lease_seconds))
    with Cleanup() as cleanup:
        if args.database == "sqlite":
            url = sqlite_url(cleanup.workdir / "cancel.db")
        else:
            url = _pg.create_database(args.postgres_url, "cancels")
            cleanup.callback(_pg.drop_database, args.postgres_url, url)
        near = cleanup.server(start_queuelog(cleanup.workdir, url, job_types="slow", extra_args=extra))
        far = near
        if args.database == "postgresql":
            far = start_queuelog(
                cleanup.workdir, url, job_types="slow", extra_args=extra, name="far", wait=False
            )
            cleanup.server(far)
            wait_healthy(far)
        worker_key = make_keys(url, [("bench-worker", "worker")])["bench-worker"]
        with event_loop_runner() as runner:
            with_feature = runner.run(measure(far.url, near.url, near.admin_key, worker_key, True, args))
            without = runner.run(measure(far.url, near.url, near.admin_key, worker_key, False, args))
    where = (
        "worker and cancels on one server"
        if args.database == "sqlite"
        else "cancels sent to the other server"
    )
    print(f"cancel to handler cancelled ({args.database}, {where}; lease {args.lease_seconds} s):")
    print(summary("with", with_feature))
    print(summary("without", without) + "  (heartbeats only)")


if __name__ == "__main__":
    main()
