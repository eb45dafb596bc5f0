"""Figure 6: does an operation get slower as the jobs table grows?

Two queuelog servers (job types noop, email, report, resize, given to jobs in turn, and
rare), each on a fresh database, filled **only through the public API** in the shape of
issue 31, the way real traffic leaves a table:

1. a quarter of N jobs with `runAt` tomorrow (delayed, PENDING), enqueued first;
2. three quarters of N jobs due now (`enqueueJobs` of 1000, 2 connections);
3. half of N claimed and completed by one worker key (`claimJobs(limit: 100)` +
   `completeJobs`, 2 connections): the oldest due ones, so a quarter of N stays due;
4. 20 `rare` jobs from a second producer key (the newest).

One server gets N = 1,000 (--growth-small), the other N = --growth-jobs (default 1M,
--quick 100k). Nothing else touches them: no VACUUM, no ANALYZE by the bench (the claim
after N/2 claims meets what those claims left behind, unless the database cleans it up by
itself: autovacuum, or queuelog's own maintenance where autovacuum is off). Then every
operation below is timed one request at a time, interleaved across operations and across
the two servers, each up to --growth-samples times within its time budget per server (at
least 3). The figure is p50 at N / p50 at 1k, per operation.

At the big size it also times the dashboard's own reads (bench/_dashboard.py: every view
and poll of the page, word for word) as four keys see them: the ADMIN (every job), the
producer that enqueued the rest, the producer of the 20 rare jobs, and the worker that
completed half of them. Issue 8's bar is absolute: each must answer within 50 ms.

Operations: claimJob (worker key; each claimed job is then completed and replaced by a new
one of its type, untimed, so the shape holds), enqueueJob (producer key), jobs(first: 20)
with no filter, status PENDING, type "noop", status COMPLETED + type "noop" (viewer key;
selection: edges { cursor node { id type status priority attempt createdAt } } pageInfo),
queueStats with byType (viewer), GET /metrics (no key); the scoped reads of issue 31: the
worker's jobs(status: COMPLETED), the small producer's jobs(status: PENDING) and its
queueStats; and jobs(status: PENDING) { totalCount } (shown for information).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import _dashboard
from bench._api import (
    CLAIM,
    COMPLETE,
    ENQUEUE,
    PAGE,
    RESULT,
    STATS,
    Api,
    claim_and_complete,
    enqueue_inputs,
    job_inputs,
    tomorrow,
)
from bench._common import HttpConnection, bearer, graphql_body, graphql_data, percentile, queuelog_ready
from bench._context import Context
from bench._report import Figure, ms, ratio, rx

TYPES = ("noop", "email", "report", "resize")
RARE = "rare"
TARGET = 1.5
DASHBOARD_TARGET_S = 0.050
SMALL_PRODUCER_JOBS = 20
TOTAL_PENDING = "query Total { jobs(status: PENDING, first: 1) { totalCount } }"


@dataclass(frozen=True)
class Operation:
    key: str | None  # which key sends it (None: no key, GET /metrics)
    query: str = ""
    variables: dict[str, Any] = field(default_factory=dict)
    claims: bool = False  # the job it takes is completed and replaced, untimed


OPERATIONS: dict[str, Operation] = {
    "claimJob": Operation("worker", CLAIM, claims=True),
    "enqueueJob": Operation("producer", ENQUEUE, {"input": {"type": "noop", "payload": {"n": 1}}}),
    "jobs(first: 20)": Operation("viewer", PAGE, {"first": 20}),
    "jobs(first: 20, status: PENDING)": Operation("viewer", PAGE, {"first": 20, "status": "PENDING"}),
    'jobs(first: 20, type: "noop")': Operation("viewer", PAGE, {"first": 20, "type": "noop"}),
    'jobs(first: 20, status: COMPLETED, type: "noop")': Operation(
        "viewer", PAGE, {"first": 20, "status": "COMPLETED", "type": "noop"}
    ),
    "queueStats (with byType)": Operation("viewer", STATS),
    "GET /metrics": Operation(None),
    "jobs(first: 20, status: COMPLETED), the worker": Operation(
        "worker", PAGE, {"first": 20, "status": "COMPLETED"}
    ),
    f"jobs(first: 20, status: PENDING), producer of {SMALL_PRODUCER_JOBS}": Operation(
        "small-producer", PAGE, {"first": 20, "status": "PENDING"}
    ),
    f"queueStats, producer of {SMALL_PRODUCER_JOBS}": Operation("small-producer", STATS),
    "jobs(status: PENDING) { totalCount }": Operation("viewer", TOTAL_PENDING),
}
INFORMATION_ONLY = {"jobs(status: PENDING) { totalCount }"}
KEY_SPECS = [
    ("bench-producer", "producer"),
    ("bench-worker", "worker"),
    ("bench-viewer", "viewer"),
    ("bench-admin", "admin"),
    ("bench-small-producer", "producer"),
]


def growth_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    job_types = ",".join((*TYPES, RARE))
    small_server = ctx.queuelog(job_types=job_types, name="small", wait=False)
    big_server = ctx.queuelog(job_types=job_types, name="big")
    queuelog_ready(small_server)
    servers = {"small": small_server, "big": big_server}
    sizes = {"small": s.growth_small, "big": s.growth_jobs}
    keys = {size: _role_keys(ctx.keys(server, KEY_SPECS)) for size, server in servers.items()}

    fill_seconds: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}
    rare_ids: dict[str, list[str]] = {}
    for size, server in servers.items():
        started = time.perf_counter()
        rare_ids[size] = ctx.run(_fill(server.url, keys[size], sizes[size], ctx.log))
        fill_seconds[size] = time.perf_counter() - started
        counts[size] = ctx.run(_counts(server.url, keys[size]["viewer"]))
        ctx.log(f"{size}: {sizes[size]:,} jobs + {SMALL_PRODUCER_JOBS} rare in {fill_seconds[size]:.0f} s")

    urls = {size: server.url for size, server in servers.items()}
    with ctx.profile(big_server):
        latencies = ctx.run(_measure(urls, keys, s.growth_samples, s.growth_op_seconds))
    dashboard = ctx.run(
        _dashboard_at_size(
            big_server.url, keys["big"], rare_ids["big"], s.growth_samples, s.growth_op_seconds
        )
    )

    total_big, total_small = sum(counts["big"].values()), sum(counts["small"].values())
    fig.baseline = f"a server with {total_small:,} jobs of the same shape, same run"
    fig.add(f"p50 ms at {total_big:,} jobs (left) vs {total_small:,} (right)")
    for name in OPERATIONS:
        b50 = percentile(latencies["big"][name], 50)
        s50 = percentile(latencies["small"][name], 50)
        r = ratio(b50, s50)
        info = name in INFORMATION_ONLY
        fig.add(
            "  " + name,
            ms(b50),
            ms(s50),
            rx(r),
            "" if info else f"<= {TARGET}x",
            met=None if info or r is None else r <= TARGET,
        )
    views = len(next(iter(dashboard.values())))
    fig.add(f"dashboard, slowest of its {views} views at {total_big:,} jobs: p50 / p99 / max ms")
    for who, by_view in dashboard.items():
        slowest = max(by_view, key=lambda name: max(by_view[name]))
        worst = by_view[slowest]
        fig.add(
            f"  {who}: {slowest}",
            f"{ms(percentile(worst, 50))} / {ms(percentile(worst, 99))} / {ms(max(worst))}",
            "",
            "",
            f"<= {DASHBOARD_TARGET_S * 1000:.0f} ms",
            met=max(worst) <= DASHBOARD_TARGET_S,
        )
    fig.notes.append(
        f"shape: 1/4 delayed (runAt tomorrow, enqueued first), 1/4 due, 1/2 completed jobs of "
        f"{', '.join(TYPES)} in turn + {SMALL_PRODUCER_JOBS} `{RARE}` from another producer; filled "
        f"through the API in {fill_seconds['small']:.0f} s (1k) and {fill_seconds['big']:.0f} s (big); "
        f"counts then: {counts['big']}"
    )
    if s.postgres:
        fig.notes.append("PostgreSQL: no VACUUM or ANALYZE by the bench (the database's own, if any)")
    fig.data = {
        "small_jobs": s.growth_small,
        "big_jobs": s.growth_jobs,
        "rare_jobs": SMALL_PRODUCER_JOBS,
        "counts": counts,
        "fill_seconds": {k: round(v, 1) for k, v in fill_seconds.items()},
        "fill": "API",
        "dashboard": {
            who: {name: _summary(values) for name, values in by_view.items()}
            for who, by_view in dashboard.items()
        },
        "operations": {
            name: {size: _summary(latencies[size][name]) for size in servers} for name in OPERATIONS
        },
    }


def _summary(values: list[float]) -> dict[str, Any]:
    return {
        "samples": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 3),
        "p90_ms": round(percentile(values, 90) * 1000, 3),
        "p99_ms": round(percentile(values, 99) * 1000, 3),
        "max_ms": round(max(values) * 1000, 3) if values else None,
    }


def _role_keys(made: dict[str, str]) -> dict[str, str]:
    return {name.removeprefix("bench-"): key for name, key in made.items()}


async def _fill(url: str, keys: dict[str, str], jobs: int, log: Callable[[str], None]) -> list[str]:
    """The shape, in the order real traffic would leave it (see the module's docstring);
    returns the ids of the small producer's jobs."""
    delayed = jobs // 4
    completed = jobs - 2 * (jobs // 4)
    due = jobs - delayed
    await enqueue_inputs(url, keys["producer"], job_inputs(TYPES, tomorrow()), delayed)
    await enqueue_inputs(url, keys["producer"], job_inputs(TYPES), due)
    log(f"enqueued {delayed:,} delayed + {due:,} due jobs")
    done = await claim_and_complete(url, keys["worker"], completed, connections=2)
    if done != completed:
        raise RuntimeError(f"the fill completed {done:,} jobs of {completed:,}")
    rare = job_inputs([RARE])
    return await enqueue_inputs(url, keys["small-producer"], rare, SMALL_PRODUCER_JOBS, connections=1)


async def _counts(url: str, key: str) -> dict[str, int]:
    async with Api(url, key) as api:
        return await api.counts()


async def _measure(
    urls: dict[str, str], keys: dict[str, dict[str, str]], samples: int, seconds_per_op: float
) -> dict[str, dict[str, list[float]]]:
    """Every operation on every server, up to `samples` times each (at least 3), interleaved,
    each within its time budget per server: {size: {operation: seconds}}."""
    conns: dict[str, dict[str | None, HttpConnection]] = {
        size: {role: HttpConnection(url, bearer(key)) for role, key in keys[size].items()}
        | {None: HttpConnection(url)}
        for size, url in urls.items()
    }
    latencies: dict[str, dict[str, list[float]]] = {size: {name: [] for name in OPERATIONS} for size in urls}
    spent = {size: dict.fromkeys(OPERATIONS, 0.0) for size in urls}
    bodies = {name: graphql_body(op.query, op.variables) for name, op in OPERATIONS.items() if op.query}

    async def once(size: str, name: str) -> float:
        op = OPERATIONS[name]
        conn = conns[size][op.key]
        started = time.perf_counter()
        if op.key is None:
            status, answer = await conn.get("/metrics")
        else:
            status, answer = await conn.post("/graphql", bodies[name])
        elapsed = time.perf_counter() - started
        if status != 200 or b'"errors"' in answer:
            raise RuntimeError(f"{name} ({size}) answered {status}: {answer[:300]!r}")
        if op.claims:
            await _complete_and_replace(conns[size], graphql_data(status, answer))
        return elapsed

    try:
        for size in urls:  # one untimed warm-up each
            for name in OPERATIONS:
                await once(size, name)
        for i in range(samples):
            for size in urls:
                for name in OPERATIONS:
                    if i >= 3 and spent[size][name] > seconds_per_op:
                        continue
                    elapsed = await once(size, name)
                    latencies[size][name].append(elapsed)
                    spent[size][name] += elapsed
    finally:
        for by_role in conns.values():
            for conn in by_role.values():
                await conn.close()
    return latencies


async def _complete_and_replace(conns: dict[str | None, HttpConnection], data: Any) -> None:
    """Untimed: complete the job a claim took and enqueue one like it, so the shape holds."""
    job = data["claimJob"]
    if job is None:
        raise RuntimeError("claimJob found no job: the backlog ran dry")
    variables = {"id": job["id"], "attempt": job["attempt"], "result": RESULT}
    graphql_data(*await conns["worker"].post("/graphql", graphql_body(COMPLETE, variables)))
    producer = "small-producer" if job["type"] == RARE else "producer"
    new = {"input": {"type": job["type"], "payload": {"n": -1}}}
    graphql_data(*await conns[producer].post("/graphql", graphql_body(ENQUEUE, new)))


async def _dashboard_at_size(
    url: str, keys: dict[str, str], small_ids: list[str], samples: int, budget_s: float
) -> dict[str, dict[str, list[float]]]:
    """Every dashboard view, as each of four keys sees the table."""
    newest = await _newest_job_id(url, keys["admin"])
    middle = newest // 2
    found: dict[str, dict[str, list[float]]] = {}
    for who, key, detail_id in (
        ("ADMIN", keys["admin"], middle),
        ("the producer of the rest", keys["producer"], middle),
        (f"a producer of {len(small_ids)} jobs", keys["small-producer"], int(small_ids[0])),
        ("the worker", keys["worker"], await _newest_job_id(url, keys["worker"])),
    ):
        plan = _dashboard.views("noop", newest, detail_id)
        found[who] = await _dashboard.dashboard_latencies(url, key, plan, samples, budget_s, who == "ADMIN")
    return found


async def _newest_job_id(url: str, key: str) -> int:
    """The newest job the key sees."""
    async with Api(url, key) as api:
        page = await api.call("query { jobs(first: 1) { nodes { id } } }")
    return int(page["jobs"]["nodes"][0]["id"])
