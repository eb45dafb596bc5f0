"""Figure 9: backlog shapes (issue 16) — does an operation get slower behind a big backlog?

Two queuelog servers (job types `bench,rare`), each on a fresh database, filled **only
through the public API**, the way real traffic leaves a table:

1. a quarter of N `bench` jobs with `runAt` tomorrow (delayed, PENDING), enqueued first;
2. three quarters of N `bench` jobs due now (`enqueueJobs` of 1000, 2 connections);
3. half of N claimed and completed by one worker key (`claimJobs(limit: 100)` +
   `completeJobs`, 2 connections): the oldest due ones, so a quarter of N stays due;
4. 20 `rare` jobs from a second producer key.

One server gets N = 1,000, the other N = --backlog-jobs (default 1M, --quick 100k). Nothing
else touches them: on PostgreSQL there is no VACUUM ANALYZE after the fill (issue 16: plans
must hold under stale statistics), so they are measured right after it.

Then each operation below is timed one request at a time, interleaved across operations
and across the two servers (sample i of every operation on the small server, then on the
big one, then sample i + 1), each up to SAMPLES times within OP_SECONDS of its own time per
server (at least 3). The figure is p50 and p99 at N over the same at 1k; target <= 1.5x.

The claims keep the shape: each claimed job is completed at once (untimed) and replaced by
a new job of its type from its producer (untimed), so the due `bench` jobs and the 20 `rare`
ones never run out; the completed jobs grow by the claims made (at most 2 x SAMPLES).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench._api import (
    COMPLETE,
    ENQUEUE,
    PAGE,
    RESULT,
    Api,
    claim_and_complete,
    enqueue_inputs,
    job_inputs,
    tomorrow,
)
from bench._common import (
    HttpConnection,
    bearer,
    graphql_body,
    graphql_data,
    percentile,
    queuelog_ready,
)
from bench._context import Context
from bench._report import Figure, ms, ratio, rx

TYPES = "bench,rare"
TARGET = 1.5
SMALL_JOBS = 1_000
RARE_JOBS = 20
SAMPLES = (50, 200)  # per operation and size: --quick, full
OP_SECONDS = (3.0, 10.0)  # time budget per operation and size: --quick, full

CLAIM_TYPES = "mutation Claim($types: [String!]) { claimJob(types: $types) { id type payload attempt } }"
STATS = (
    "query Stats { queueStats { counts { pending running completed failed cancelled } "
    "byType { type counts { pending } } oldestPendingSeconds } }"
)


@dataclass(frozen=True)
class Operation:
    key: str | None  # which key sends it (None: no key, GET /metrics)
    query: str = ""
    variables: dict[str, Any] = field(default_factory=dict)
    # claims: the type and producer of the job that replaces the claimed one
    replace: tuple[str, str] | None = None


OPERATIONS: dict[str, Operation] = {
    'claimJob(types: ["bench"]), worker': Operation(
        "worker", CLAIM_TYPES, {"types": ["bench"]}, replace=("bench", "producer")
    ),
    'claimJob(types: ["rare"]), worker': Operation(
        "worker", CLAIM_TYPES, {"types": ["rare"]}, replace=("rare", "rare-producer")
    ),
    "queueStats, ADMIN": Operation("admin", STATS),
    f"queueStats, producer of the {RARE_JOBS} rare jobs": Operation("rare-producer", STATS),
    "GET /metrics": Operation(None),
    "jobs(status: PENDING, first: 20), rare producer": Operation(
        "rare-producer", PAGE, {"status": "PENDING", "first": 20}
    ),
    "jobs(status: COMPLETED, first: 20), worker": Operation(
        "worker", PAGE, {"status": "COMPLETED", "first": 20}
    ),
}
KEY_SPECS = [
    ("backlog-producer", "producer"),
    ("backlog-rare-producer", "producer"),
    ("backlog-worker", "worker"),
    ("backlog-admin", "admin"),
]


def backlog_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    big_jobs = s.backlog_jobs
    samples, op_seconds = SAMPLES[not s.quick], OP_SECONDS[not s.quick]
    small_server = ctx.queuelog(job_types=TYPES, name="small", wait=False)
    big_server = ctx.queuelog(job_types=TYPES, name="big")
    queuelog_ready(small_server)
    servers = {"small": small_server, "big": big_server}
    keys = {size: _role_keys(ctx.keys(server, KEY_SPECS)) for size, server in servers.items()}

    fill_seconds: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}
    for size, jobs in (("small", SMALL_JOBS), ("big", big_jobs)):
        started = time.perf_counter()
        ctx.run(_fill(servers[size].url, keys[size], jobs, ctx.log))
        fill_seconds[size] = time.perf_counter() - started
        counts[size] = ctx.run(_counts(servers[size].url, keys[size]["admin"]))
        ctx.log(f"{size}: {jobs:,} jobs + {RARE_JOBS} rare in {fill_seconds[size]:.0f} s: {counts[size]}")

    # No ctx.maintain(): on PostgreSQL the statistics stay as stale as the fill left them.
    with ctx.profile(big_server):
        latencies, replaced = ctx.run(
            _measure({size: servers[size].url for size in servers}, keys, samples, op_seconds)
        )
    after = {size: ctx.run(_counts(servers[size].url, keys[size]["admin"])) for size in servers}

    total_big, total_small = sum(counts["big"].values()), sum(counts["small"].values())
    fig.baseline = f"a server with {total_small:,} jobs of the same shape, same run"
    fig.add(f"p50 / p99 ms at {total_big:,} jobs (left) vs {total_small:,} (right)")
    for name in OPERATIONS:
        big, small = latencies["big"][name], latencies["small"][name]
        r50 = ratio(percentile(big, 50), percentile(small, 50))
        r99 = ratio(percentile(big, 99), percentile(small, 99))
        fig.add(
            "  " + name,
            f"{ms(percentile(big, 50))} / {ms(percentile(big, 99))}",
            f"{ms(percentile(small, 50))} / {ms(percentile(small, 99))}",
            f"{rx(r50)} / {rx(r99)}",
            f"<= {TARGET}x",
            met=None if r50 is None or r99 is None else max(r50, r99) <= TARGET,
        )
    few = sorted({len(v) for by_op in latencies.values() for v in by_op.values()})
    fig.notes.append(
        f"shape: 1/4 delayed (runAt tomorrow, enqueued first), 1/4 due, 1/2 completed `bench` jobs "
        f"+ {RARE_JOBS} `rare` from another producer; filled through the API in "
        f"{fill_seconds['small']:.0f} s (1k) and {fill_seconds['big']:.0f} s (big); "
        f"samples per operation {few[0]}-{few[-1]}"
    )
    fig.notes.append(f"counts before: {counts['big']}; after the claims: {after['big']}")
    if s.postgres:
        fig.notes.append("PostgreSQL: no VACUUM ANALYZE after the fill (stale statistics, as issue 16 asks)")
    fig.data = {
        "small_jobs": SMALL_JOBS,
        "big_jobs": big_jobs,
        "rare_jobs": RARE_JOBS,
        "counts": counts,
        "counts_after": after,
        "fill_seconds": {k: round(v, 1) for k, v in fill_seconds.items()},
        "replaced_jobs": replaced,
        "operations": {
            name: {
                size: {
                    "samples": len(values),
                    "p50_ms": round(percentile(values, 50) * 1000, 3),
                    "p99_ms": round(percentile(values, 99) * 1000, 3),
                    "max_ms": round(max(values) * 1000, 3) if values else None,
                }
                for size in ("small", "big")
                for values in (latencies[size][name],)
            }
            for name in OPERATIONS
        },
    }


def _role_keys(made: dict[str, str]) -> dict[str, str]:
    return {name.removeprefix("backlog-"): key for name, key in made.items()}


# --- the fill --------------------------------------------------------------------------------


async def _fill(url: str, keys: dict[str, str], jobs: int, log: Callable[[str], None]) -> None:
    """The shape, in the order real traffic would leave it (see the module's docstring)."""
    delayed = jobs // 4
    completed = jobs - 2 * (jobs // 4)
    due = jobs - delayed
    await enqueue_inputs(url, keys["producer"], job_inputs(["bench"], tomorrow()), delayed)
    await enqueue_inputs(url, keys["producer"], job_inputs(["bench"]), due)
    log(f"enqueued {delayed:,} delayed + {due:,} due `bench` jobs")
    done = await claim_and_complete(url, keys["worker"], completed, connections=2)
    if done != completed:
        raise RuntimeError(f"the fill completed {done:,} jobs of {completed:,}")
    await enqueue_inputs(url, keys["rare-producer"], job_inputs(["rare"]), RARE_JOBS, connections=1)


async def _counts(url: str, admin_key: str) -> dict[str, int]:
    async with Api(url, admin_key) as api:
        return await api.counts()


# --- the measurement -------------------------------------------------------------------------


async def _measure(
    urls: dict[str, str], keys: dict[str, dict[str, str]], samples: int, seconds_per_op: float
) -> tuple[dict[str, dict[str, list[float]]], dict[str, int]]:
    """Every operation on every server, up to `samples` times each (at least 3), interleaved,
    each within its time budget per server; returns {size: {operation: seconds}} and how many
    claimed jobs were replaced on each server."""
    conns: dict[str, dict[str | None, HttpConnection]] = {
        size: {role: HttpConnection(url, bearer(key)) for role, key in keys[size].items()}
        | {None: HttpConnection(url)}
        for size, url in urls.items()
    }
    latencies: dict[str, dict[str, list[float]]] = {size: {name: [] for name in OPERATIONS} for size in urls}
    spent = {size: dict.fromkeys(OPERATIONS, 0.0) for size in urls}
    replaced = dict.fromkeys(urls, 0)
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
        if op.replace is not None:
            await _complete_and_replace(conns[size], name, graphql_data(status, answer), op.replace)
            replaced[size] += 1
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
    return latencies, replaced


async def _complete_and_replace(
    conns: dict[str | None, HttpConnection], name: str, data: Any, replace: tuple[str, str]
) -> None:
    """Untimed: complete the job a claim took and enqueue one like it, so the shape holds."""
    job = data["claimJob"]
    if job is None:
        raise RuntimeError(f"{name} found no job: the backlog ran dry")
    job_type, producer = replace
    variables = {"id": job["id"], "attempt": job["attempt"], "result": RESULT}
    graphql_data(*await conns["worker"].post("/graphql", graphql_body(COMPLETE, variables)))
    new = {"input": {"type": job_type, "payload": {"n": -1}}}
    graphql_data(*await conns[producer].post("/graphql", graphql_body(ENQUEUE, new)))
