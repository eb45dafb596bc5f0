"""Figure 6: does an operation get slower as the jobs table grows?

One queuelog server (job types noop, email, report, resize, given to jobs in turn), filled
only through the public API: `enqueueJobs` of 1000 (2 connections), then `claimJobs(limit:
100)` + `completeJobs` (2 workers) until half the jobs are COMPLETED and half PENDING.
First at 1k jobs, every operation below is timed, one request at a time, interleaved;
then the same server is filled on to --growth-jobs (default 1M, --quick 100k) and they
are timed again. The figure is p50 at the big size / p50 at 1k, per operation.

At the big size it also times the dashboard's own reads (bench/_dashboard.py: every view
and poll of the page, word for word) as four keys see them: the ADMIN (every job), the
producer that enqueued them all, a producer with 20 jobs among them (its pages walk its
own index), and the worker that completed half of them. Issue 8's bar is absolute: each
must answer within 50 ms.

Operations: claimJob (worker key; each takes one pending job), enqueueJob (producer key),
jobs(first: 20) with no filter, status PENDING, type "noop", status COMPLETED + type
"noop" (viewer key; selection: edges { cursor node { id type status priority attempt
createdAt } } pageInfo), jobs(status: PENDING) { totalCount } (not in the issue's list,
shown for information), queueStats with byType (viewer), and GET /metrics (no key).

On `--database postgresql` the first 1k jobs still go through the API, but the rest are
added by bulk SQL (`_pg.growth_fill`: INSERT ... SELECT generate_series, in the same state
the API would leave them: types in turn, the oldest half COMPLETED by the same worker, with
their job_events), job_counts is then recounted with migration 0002's BACKFILL statements,
and the bench checks that queueStats answers the table's own counts. Both sizes are
measured after VACUUM ANALYZE (what autovacuum does; some test clusters turn it off).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench import _dashboard, _pg
from bench._api import CLAIM, ENQUEUE, ENQUEUE_MANY, PAGE, STATS, Api, claim_and_complete, enqueue_many
from bench._common import HttpConnection, graphql_body, percentile
from bench._context import Context
from bench._report import Figure, ms, ratio, rx

TYPES = ("noop", "email", "report", "resize")
TARGET = 1.5
DASHBOARD_TARGET_S = 0.050
SMALL_PRODUCER_JOBS = 20
TOTAL_PENDING = "query Total { jobs(status: PENDING, first: 1) { totalCount } }"

# name: (key role, request builder); None role = no key (GET /metrics)
OPERATIONS: dict[str, tuple[str | None, str, dict[str, Any] | None]] = {
    "claimJob": ("worker", CLAIM, {}),
    "enqueueJob": ("producer", ENQUEUE, {"input": {"type": "noop", "payload": {"n": 1}}}),
    "jobs(first: 20)": ("viewer", PAGE, {"first": 20}),
    "jobs(first: 20, status: PENDING)": ("viewer", PAGE, {"first": 20, "status": "PENDING"}),
    'jobs(first: 20, type: "noop")': ("viewer", PAGE, {"first": 20, "type": "noop"}),
    'jobs(first: 20, status: COMPLETED, type: "noop")': (
        "viewer",
        PAGE,
        {"first": 20, "status": "COMPLETED", "type": "noop"},
    ),
    "queueStats (with byType)": ("viewer", STATS, {}),
    "GET /metrics": (None, "", None),
    "jobs(status: PENDING) { totalCount }": ("viewer", TOTAL_PENDING, {}),
}
INFORMATION_ONLY = {"jobs(status: PENDING) { totalCount }"}


def growth_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    queuelog = ctx.queuelog(job_types=",".join(TYPES))
    names = [
        ("bench-producer", "producer"),
        ("bench-worker", "worker"),
        ("bench-viewer", "viewer"),
        ("bench-admin", "admin"),
        ("bench-small-producer", "producer"),
    ]
    keys = ctx.keys(queuelog, names)
    role_key = {
        "producer": keys["bench-producer"],
        "worker": keys["bench-worker"],
        "viewer": keys["bench-viewer"],
    }
    state = {"enqueued": 0, "completed": 0}

    def fill_to(total: int) -> None:
        started = time.perf_counter()

        async def go() -> None:
            need = total - state["enqueued"]
            if need > 0:
                state["enqueued"] += await enqueue_many(
                    queuelog.url,
                    role_key["producer"],
                    need,
                    batch=1000,
                    connections=2,
                    types=TYPES,
                    start=state["enqueued"],
                )
            ctx.log(f"enqueued {state['enqueued']} jobs ({time.perf_counter() - started:.0f} s)")
            to_complete = total // 2 - state["completed"]
            if to_complete > 0:
                state["completed"] += await claim_and_complete(
                    queuelog.url, role_key["worker"], to_complete, connections=2
                )
            ctx.log(f"completed {state['completed']} jobs ({time.perf_counter() - started:.0f} s)")

        ctx.run(go())

    def measure() -> dict[str, list[float]]:
        return ctx.run(_measure(queuelog.url, role_key, s.growth_samples, s.growth_op_seconds))

    def bulk_fill_to(total: int) -> dict[str, Any]:
        """PostgreSQL: the rest of the jobs by bulk SQL, as the API would have left them."""
        need = total - state["enqueued"]
        to_complete = max(0, min(need, total // 2 - state["completed"]))
        filled = _pg.growth_fill(
            queuelog.database_url, state["enqueued"], need, to_complete, list(TYPES), ctx.log
        )
        state["enqueued"] += need
        state["completed"] += to_complete
        return filled

    small_ids = ctx.run(_small_producer_jobs(queuelog.url, keys["bench-small-producer"]))
    fill_to(s.growth_small)
    ctx.maintain(queuelog)  # PostgreSQL: what autovacuum would have done after the fill
    small = measure()
    fill_started = time.perf_counter()
    bulk: dict[str, Any] | None = None
    if s.postgres:
        bulk = bulk_fill_to(s.growth_jobs)
    else:
        fill_to(s.growth_jobs)
    fill_seconds = time.perf_counter() - fill_started

    async def counts() -> dict[str, int]:
        async with Api(queuelog.url, role_key["viewer"]) as api:
            return await api.counts()

    at_big = ctx.run(counts())
    if bulk is not None:
        # The counters the server answers with must be the rows' own (job_counts recounted).
        rows = {k: int(v) for k, v in bulk["rows_by_status"].items()}
        answered = {k: v for k, v in at_big.items() if v}
        if rows != answered:
            raise RuntimeError(f"after the bulk fill queueStats says {answered}, the jobs table {rows}")
    with ctx.profile(queuelog):
        big = measure()
    dashboard = ctx.run(
        _dashboard_at_size(queuelog.url, keys, small_ids, s.growth_samples, s.growth_op_seconds)
    )

    fig.baseline = f"the same server at {s.growth_small:,} jobs (half pending, half completed)"
    fig.add(f"p50 ms at {sum(at_big.values()):,} jobs (left) vs {s.growth_small:,} (right)")
    for name in OPERATIONS:
        b50, s50 = percentile(big[name], 50), percentile(small[name], 50)
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
    fig.add(f"dashboard, slowest of its {views} views at {sum(at_big.values()):,} jobs: p50 / p99 / max ms")
    for who, latencies in dashboard.items():
        slowest = max(latencies, key=lambda name: max(latencies[name]))
        worst = latencies[slowest]
        fig.add(
            f"  {who}: {slowest}",
            f"{ms(percentile(worst, 50))} / {ms(percentile(worst, 99))} / {ms(max(worst))}",
            "",
            "",
            f"<= {DASHBOARD_TARGET_S * 1000:.0f} ms",
            met=max(worst) <= DASHBOARD_TARGET_S,
        )
    how = "through the API"
    if s.postgres:
        how = "by bulk SQL (INSERT ... SELECT generate_series), counters recounted"
    fig.notes.append(f"fill to {s.growth_jobs:,} jobs {how} took {fill_seconds:.0f} s; counts then: {at_big}")
    if s.postgres:
        fig.notes.append(
            "PostgreSQL: VACUUM ANALYZE of jobs, job_events and job_counts after each fill (what autovacuum "
            "would do; the 1k jobs were filled through the API)"
        )
    fig.data = {
        "small_jobs": s.growth_small,
        "big_jobs": s.growth_jobs,
        "counts_big": at_big,
        "fill_seconds": round(fill_seconds, 1),
        "fill": "bulk SQL" if s.postgres else "API",
        "dashboard": {
            who: {
                name: {
                    "samples": len(values),
                    "p50_ms": round(percentile(values, 50) * 1000, 3),
                    "p99_ms": round(percentile(values, 99) * 1000, 3),
                    "max_ms": round(max(values) * 1000, 3),
                }
                for name, values in latencies.items()
            }
            for who, latencies in dashboard.items()
        },
        "operations": {
            name: {
                size: {
                    "samples": len(values[name]),
                    "p50_ms": round(percentile(values[name], 50) * 1000, 3),
                    "p90_ms": round(percentile(values[name], 90) * 1000, 3),
                    "max_ms": round(max(values[name]) * 1000, 3) if values[name] else None,
                }
                for size, values in (("small", small), ("big", big))
            }
            for name in OPERATIONS
        },
    }


async def _measure(
    url: str, role_key: dict[str, str], samples: int, seconds_per_op: float
) -> dict[str, list[float]]:
    """Each operation up to `samples` times (at least 3), interleaved, within its time budget."""
    conns = {role: HttpConnection(url, {"Authorization": f"Bearer {key}"}) for role, key in role_key.items()}
    anonymous = HttpConnection(url)
    latencies: dict[str, list[float]] = {name: [] for name in OPERATIONS}
    spent: dict[str, float] = {name: 0.0 for name in OPERATIONS}
    requests: dict[str, Callable[[], Any]] = {}
    for name, (role, query, variables) in OPERATIONS.items():
        if role is None:
            requests[name] = lambda: anonymous.get("/metrics")
        else:
            body = graphql_body(query, variables)
            requests[name] = lambda conn=conns[role], body=body: conn.post("/graphql", body)
    try:
        for name in OPERATIONS:  # one untimed warm-up each
            await requests[name]()
        for i in range(samples):
            for name in OPERATIONS:
                if i >= 3 and spent[name] > seconds_per_op:
                    continue
                started = time.perf_counter()
                status, answer = await requests[name]()
                elapsed = time.perf_counter() - started
                if status != 200 or b'"errors"' in answer:
                    raise RuntimeError(f"{name} answered {status}: {answer[:300]!r}")
                latencies[name].append(elapsed)
                spent[name] += elapsed
    finally:
        for conn in (*conns.values(), anonymous):
            await conn.close()
    return latencies


async def _small_producer_jobs(url: str, key: str) -> list[str]:
    """The small producer's jobs: the oldest of the table, so its pages walk its own index."""
    inputs = [{"type": t, "payload": {"n": 1}} for t in TYPES * (SMALL_PRODUCER_JOBS // len(TYPES))]
    async with Api(url, key) as api:
        made = await api.call(ENQUEUE_MANY, {"inputs": inputs})
    return [item["job"]["id"] for item in made["enqueueJobs"]]


async def _dashboard_at_size(
    url: str, keys: dict[str, str], small_ids: list[str], samples: int, budget_s: float
) -> dict[str, dict[str, list[float]]]:
    """Every dashboard view, as each of four keys sees the table."""
    newest = await _newest_job_id(url, keys["bench-admin"])
    middle = newest // 2
    found: dict[str, dict[str, list[float]]] = {}
    for who, key, detail_id in (
        ("ADMIN", keys["bench-admin"], middle),
        ("the producer of every job", keys["bench-producer"], middle),
        (f"a producer of {len(small_ids)} jobs", keys["bench-small-producer"], int(small_ids[0])),
        ("the worker", keys["bench-worker"], await _newest_job_id(url, keys["bench-worker"])),
    ):
        plan = _dashboard.views("noop", newest, detail_id)
        found[who] = await _dashboard.dashboard_latencies(url, key, plan, samples, budget_s, who == "ADMIN")
    return found


async def _newest_job_id(url: str, key: str) -> int:
    """The newest job the key sees."""
    async with Api(url, key) as api:
        page = await api.call("query { jobs(first: 1) { nodes { id } } }")
    return int(page["jobs"]["nodes"][0]["id"])
