"""Figure 7: the server's memory under steady mixed load.

One fresh `queuelog serve`; its RSS is sampled (VmRSS from /proc) before any load (the
baseline column), then every --rss-interval seconds (10; --quick 5) during a soak of
--rss-seconds (300; --quick 45) of:

- 8 clients, each paced at --soak-rate requests/s (25; 0 = as fast as answers come), in a
  fixed cycle: enqueueJob, job(id) of its last job, enqueueJob, jobs(first: 20),
  enqueueJobs of 10, job(id), queueStats, jobs(first: 20, status: PENDING) (producer key
  for its jobs, viewer key for pages and stats);
- one `python -m queuelog worker --concurrency 16` with an async no-op handler;
- 4 `jobEvents` subscribers over websocket (graphql-transport-ws, the key in the
  connection_init payload), each reading every event as it comes.

Reported: the peak (the kernel's VmHWM, the true high-water mark), the mean RSS of the
first and last window (60 s; --quick 15 s) and their ratio ("flat" means the last window
is within 10 % of the first), requests answered, events received, and errors (failed
requests, GraphQL errors, subscription errors or closes).
"""

from __future__ import annotations

import asyncio
import json
import time

from bench._api import ENQUEUE, ENQUEUE_MANY, JOB, PAGE, STATS
from bench._common import HttpConnection, bearer, graphql_body, start_worker, stop_process
from bench._context import Context
from bench._report import Figure, mb, num, ratio, rx

CLIENTS = 8
SUBSCRIBERS = 4
WORKER_CONCURRENCY = 16
RSS_TARGET = 150 * 2**20
FLAT = 1.10
EVENTS = "subscription Events { jobEvents { kind at job { id type status attempt } } }"


class Soak:
    def __init__(self, url: str, keys: dict[str, str], rate: float, deadline: float) -> None:
        self.url, self.keys, self.rate, self.deadline = url, keys, rate, deadline
        self.requests = 0
        self.events = 0
        self.errors = 0
        self.problems: list[str] = []
        self.subscribed = 0

    def problem(self, text: str) -> None:
        self.errors += 1
        if len(self.problems) < 5:
            self.problems.append(text[:300])

    async def client(self, index: int) -> None:
        producer = HttpConnection(self.url, bearer(self.keys["producer"]))
        viewer = HttpConnection(self.url, bearer(self.keys["viewer"]))
        last_id = None
        n = 0
        interval = 1 / self.rate if self.rate > 0 else 0.0
        next_at = time.monotonic()

        def job_body() -> bytes:
            nonlocal n
            n += 1
            return graphql_body(ENQUEUE, {"input": {"type": "noop", "payload": {"c": index, "n": n}}})

        cycle = [
            lambda: (producer, job_body()),
            lambda: (producer, graphql_body(JOB, {"id": last_id or "1"})),
            lambda: (producer, job_body()),
            lambda: (viewer, graphql_body(PAGE, {"first": 20})),
            lambda: (
                producer,
                graphql_body(
                    ENQUEUE_MANY,
                    {"inputs": [{"type": "noop", "payload": {"c": index, "b": i}} for i in range(10)]},
                ),
            ),
            lambda: (producer, graphql_body(JOB, {"id": last_id or "1"})),
            lambda: (viewer, graphql_body(STATS)),
            lambda: (viewer, graphql_body(PAGE, {"first": 20, "status": "PENDING"})),
        ]
        step = 0
        try:
            while time.monotonic() < self.deadline:
                if interval:
                    next_at = max(next_at + interval, time.monotonic() - 1.0)
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                conn, body = cycle[step % len(cycle)]()
                step += 1
                try:
                    status, answer = await conn.post("/graphql", body)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    self.problem(f"client {index}: {type(exc).__name__}: {exc}")
                    await conn.close()
                    await asyncio.sleep(0.1)
                    continue
                self.requests += 1
                if status != 200 or b'"errors"' in answer:
                    self.problem(f"client {index}: HTTP {status}: {answer[:200]!r}")
                    continue
                if b'"enqueueJob"' in answer:
                    last_id = json.loads(answer)["data"]["enqueueJob"]["job"]["id"]
        finally:
            await producer.close()
            await viewer.close()

    async def subscriber(self, index: int) -> None:
        import websockets

        uri = self.url.replace("http://", "ws://") + "/graphql"
        try:
            async with websockets.connect(
                uri, subprotocols=["graphql-transport-ws"], max_size=2**24, open_timeout=30
            ) as ws:
                init = {"authorization": f"Bearer {self.keys['viewer']}"}
                await ws.send(json.dumps({"type": "connection_init", "payload": init}))
                ack = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if ack.get("type") != "connection_ack":
                    self.problem(f"subscriber {index}: no connection_ack: {ack}")
                    return
                await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": EVENTS}}))
                self.subscribed += 1
                while True:
                    left = self.deadline - time.monotonic()
                    if left <= 0:
                        return
                    try:
                        raw = await asyncio.wait_for(ws.recv(), left)
                    except TimeoutError:
                        return
                    message = json.loads(raw)
                    kind = message.get("type")
                    if kind == "next":
                        if message.get("payload", {}).get("errors"):
                            self.problem(f"subscriber {index}: {str(message)[:200]}")
                        else:
                            self.events += 1
                    elif kind == "ping":
                        await ws.send(json.dumps({"type": "pong"}))
                    elif kind in ("error", "complete"):
                        self.problem(f"subscriber {index}: {kind}: {str(message)[:200]}")
                        return
        except Exception as exc:  # a close or a protocol error is an error of the soak
            self.problem(f"subscriber {index}: {type(exc).__name__}: {exc}")


def rss_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    queuelog = ctx.queuelog()
    names = [("bench-producer", "producer"), ("bench-worker", "worker"), ("bench-viewer", "viewer")]
    keys = ctx.keys(queuelog, names)
    role_key = {"producer": keys["bench-producer"], "viewer": keys["bench-viewer"]}
    idle = queuelog.memory()
    worker = start_worker(ctx.dir(), queuelog.url, keys["bench-worker"], WORKER_CONCURRENCY)
    ctx.stack.callback(stop_process, worker)
    samples: list[tuple[float, int]] = []

    async def soak() -> Soak:
        started = time.monotonic()
        run = Soak(queuelog.url, role_key, s.soak_rate, started + s.rss_seconds)

        async def sampler() -> None:
            while True:
                memory = queuelog.memory()
                if memory is not None:
                    samples.append((time.monotonic() - started, memory[0]))
                left = run.deadline - time.monotonic()
                if left <= 0:
                    return
                await asyncio.sleep(min(s.rss_interval, left))

        tasks = [run.subscriber(i) for i in range(SUBSCRIBERS)] + [run.client(i) for i in range(CLIENTS)]
        await asyncio.gather(sampler(), *tasks)
        return run

    soak_started = time.perf_counter()
    with ctx.profile(queuelog):
        run = ctx.run(soak())
    ctx.log(f"the soak ran {time.perf_counter() - soak_started:.1f} s")
    memory = queuelog.memory()
    worker_alive = worker.poll() is None
    stopping = time.perf_counter()
    stop_process(worker)
    ctx.log(
        f"the worker exited {time.perf_counter() - stopping:.1f} s after SIGTERM (code {worker.returncode})"
    )
    peak = memory[1] if memory else None
    window = s.rss_window
    first = [rss for t, rss in samples if t <= window]
    last = [rss for t, rss in samples if t >= s.rss_seconds - window]
    first_mean = sum(first) / len(first) if first else None
    last_mean = sum(last) / len(last) if last else None
    growth = ratio(last_mean, first_mean)
    idle_rss = idle[0] if idle else None
    fig.add(
        "peak RSS (VmHWM)",
        mb(peak),
        mb(idle_rss) + " idle",
        rx(ratio(peak, idle_rss)),
        "<= 150 MB",
        met=peak is not None and peak <= RSS_TARGET,
    )
    fig.add(
        f"  RSS mean, first / last {window:g} s",
        f"{mb(first_mean)} / {mb(last_mean)}",
        "",
        rx(growth),
        f"flat (<= {FLAT:.2f}x)",
        met=growth is not None and growth <= FLAT,
    )
    fig.add(
        f"  {s.rss_seconds:g} s: requests / events / errors",
        f"{num(run.requests)} / {num(run.events)} / {run.errors}",
        "",
        "",
        "0 errors",
        met=run.errors == 0 and run.subscribed == SUBSCRIBERS,
    )
    if not worker_alive:
        fig.notes.append(f"the worker exited early with {worker.returncode}")
    if run.problems:
        fig.notes.append(f"first errors: {run.problems[:3]}")
    fig.notes.append("RSS samples (s: MB): " + "  ".join(f"{t:.0f}: {rss / 2**20:.0f}" for t, rss in samples))
    fig.data = {
        "seconds": s.rss_seconds,
        "soak_rate_per_client": s.soak_rate,
        "clients": CLIENTS,
        "subscribers": SUBSCRIBERS,
        "idle_rss_bytes": idle_rss,
        "peak_rss_bytes": peak,
        "first_window_mean_bytes": first_mean,
        "last_window_mean_bytes": last_mean,
        "samples": [[round(t, 1), rss] for t, rss in samples],
        "requests": run.requests,
        "events": run.events,
        "errors": run.errors,
        "subscribed": run.subscribed,
        "problems": run.problems,
    }
