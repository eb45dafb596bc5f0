"""Figure 10: flow control (issue 16) — what the controls cost, and whether they hold.

Four parts (`--flow-parts`, default all), each on its own fresh servers, each beside a
baseline measured in the same run; every request goes through the public API:

claim   `claimJobs(limit: 100)` on a type whose `maxRunning` (100,000) never binds, against
        the same claims on a second server with no controls: rounds alternate L P, P L, ...
        (4 connections, each round topped up to ROUND_JOBS pending jobs, untimed; the claimed
        jobs are completed after the round, untimed). Target >= 0.8x jobs/s; the per-call
        p50/p99 lines read <= 1.25x (the same 0.8 the other way up).
hol     head-of-line: `claimJobs(limit: 100, types: ["B"])` while another backlog of
        --flow-jobs pending jobs cannot be claimed because (a) type A is paused, (b) A is
        rate-limited with its window full, (c) A is at its maxRunning, (d) one concurrencyKey
        of B is at its maxRunningPerKey (the rest of B: 50 keys, 200 pending jobs). The
        baseline is a second server in the very same control state with no backlog behind
        it. Samples interleave the two servers; target p50 and p99 <= 1.5x.
rate    a rate limit of 200 claims per 1 s on one type, 3 server processes (SQLite: `serve
        --workers 3`; PostgreSQL: three `serve` on one database), 24 claiming workers
        (`claimJob(waitSeconds: 2)` + `completeJob`) for --flow-seconds: the busiest 1 s
        sliding window of the jobs' `claimedAt` (<= 200) and the claims within the first
        --flow-seconds from the first one (>= 95 % of 200 per second).
keys    `claimJobs(limit: 10)` of a type with maxRunningPerKey 1 and 10,000 keys (two pending
        jobs each, the keys of the claimed jobs still RUNNING), against the same claims of
        the same jobs on a second server with no controls; samples alternate the servers,
        each claim's jobs completed after it, untimed. Target p50 and p99 <= 2x.
paused  `claimJobs(limit: 10, types: [noop, rare])` with `rare` paused (and a backlog of
        rare jobs), against the same claims on a second server where nothing is paused;
        samples alternate. Target: within noise (p50 <= 1.1x).
bulk    `retryJobs(limit: 1000)` over --flow-jobs FAILED jobs until `more` is false, each
        call timed (max <= 250 ms), while a worker long-polls `claimJob(types: ["D"],
        waitSeconds: 5)` and the bench enqueues one D job 50 ms later: the dispatch latency
        (p99 <= 25 ms) against the same samples taken on the same server just before, with
        no bulk action running.

No VACUUM ANALYZE anywhere (on PostgreSQL the statistics stay as stale as the fills leave
them, as in figure 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._api import COMPLETE, COMPLETE_MANY, ENQUEUE, ENQUEUE_MANY, RESULT, Api, chunks
from bench._common import (
    HttpConnection,
    HttpError,
    ServerProcess,
    bearer,
    child_pids,
    graphql_body,
    graphql_data,
    percentile,
    queuelog_ready,
    start_queuelog,
    wait_healthy,
)
from bench._context import Context
from bench._report import Figure, ms, num, ratio, rx

PARTS = ("claim", "keys", "paused", "hol", "rate", "bulk")

SET_CONTROL = (
    "mutation Set($input: TypeControlInput!) { setTypeControl(input: $input) "
    "{ type paused maxRunning maxRunningPerKey rateLimit { limit periodSeconds perKey } running } }"
)
PAUSE = "mutation Pause($type: String!) { pauseType(type: $type) { type paused } }"
RESUME = "mutation Resume($type: String!) { resumeType(type: $type) { type paused } }"
CANCEL_JOBS = (
    "mutation Cancel($filter: JobFilter!, $limit: Int!) { cancelJobs(filter: $filter, limit: $limit) "
    "{ count more } }"
)
RETRY_JOBS = (
    "mutation Retry($filter: JobFilter!, $limit: Int!) { retryJobs(filter: $filter, limit: $limit) "
    "{ count more } }"
)
CLAIM_MANY_TYPES = (
    "mutation ClaimMany($limit: Int!, $types: [String!], $leaseSeconds: Int) "
    "{ claimJobs(limit: $limit, types: $types, leaseSeconds: $leaseSeconds) "
    "{ id type payload attempt concurrencyKey } }"
)
CLAIM_MANY = "mutation ClaimMany { claimJobs(limit: 100) { id type payload attempt } }"
CLAIM_WAIT = (
    "mutation Claim($types: [String!], $waitSeconds: Int) "
    "{ claimJob(types: $types, waitSeconds: $waitSeconds) { id attempt claimedAt } }"
)
BY_TYPE = (
    "query ByType { queueStats { byType { type counts { pending running completed failed cancelled } } } }"
)


# --- shared helpers --------------------------------------------------------------------------


@contextlib.contextmanager
def _part(ctx: Context, name: str) -> Iterator[Context]:
    """A context whose servers and databases end with the part (not with the figure); with
    --py-spy, each part's profile goes to its own file (the part's name before the suffix)."""
    spy = ctx.py_spy_path
    if spy is not None:
        path = Path(spy)
        spy = str(path.with_name(f"{path.stem}-{name}{path.suffix}"))
    with contextlib.ExitStack() as stack:
        yield dataclasses.replace(ctx, stack=stack, name=f"{ctx.name}-{name}", py_spy_path=spy)


def run_parts(
    ctx: Context, fig: Figure, parts: Mapping[str, Callable[[Context, Figure], None]], names: Sequence[str]
) -> None:
    """Run the named parts in order, each in its own `_part` context and timed; a part that
    fails is noted in `fig.error` and the rest still run."""
    failed: list[str] = []
    for name in names:
        started = time.perf_counter()
        ctx.log(f"part {name}")
        try:
            with _part(ctx, name) as part_ctx:
                parts[name](part_ctx, fig)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {str(exc).strip()[:600]}")
            ctx.log(f"part {name} failed: {failed[-1]}")
        fig.data.setdefault("part_seconds", {})[name] = round(time.perf_counter() - started, 1)
    if failed:
        fig.error = "; ".join(failed)


def _sample_rows(values: Sequence[float]) -> dict[str, Any]:
    return {
        "samples": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 3),
        "p99_ms": round(percentile(values, 99) * 1000, 3),
        "max_ms": round(max(values) * 1000, 3) if values else None,
    }


def _p50_p99(values: Sequence[float]) -> str:
    return f"{ms(percentile(values, 50))} / {ms(percentile(values, 99))}"


async def _enqueue(
    url: str, key: str, inputs: Iterator[dict[str, Any]], count: int, connections: int = 2
) -> None:
    """`count` jobs from `inputs`, `enqueueJobs` of 1000 over `connections` connections."""
    batches = iter(chunks(range(count), 1000))

    async def producer() -> None:
        async with Api(url, key) as api:
            for batch in batches:
                items = [next(inputs) for _ in batch]
                answer = (await api.call(ENQUEUE_MANY, {"inputs": items}))["enqueueJobs"]
                if len(answer) != len(items):
                    raise HttpError(f"enqueueJobs answered {len(answer)} of {len(items)} jobs")

    await asyncio.gather(*(producer() for _ in range(connections)))


def _inputs(job_type: str, keys: Sequence[str | None] = (None,), **extra: Any) -> Iterator[dict[str, Any]]:
    n = 0
    while True:
        item: dict[str, Any] = {"type": job_type, "payload": {"n": n, "to": f"u{n}@example.com"}} | extra
        key = keys[n % len(keys)]
        if key is not None:
            item["concurrencyKey"] = key
        yield item
        n += 1


async def _complete_all(api: Api, jobs: Sequence[dict[str, Any]]) -> None:
    for part in chunks(jobs, 100):
        items = [{"id": j["id"], "attempt": j["attempt"], "result": RESULT} for j in part]
        outcome = (await api.call(COMPLETE_MANY, {"items": items}))["completeJobs"]
        if outcome["rejected"]:
            raise HttpError(f"completeJobs rejected {outcome['rejected'][:5]}")


async def _by_type(url: str, key: str) -> dict[str, dict[str, int]]:
    async with Api(url, key) as api:
        rows = (await api.call(BY_TYPE))["queueStats"]["byType"]
    return {row["type"]: row["counts"] for row in rows}


# --- the figure ------------------------------------------------------------------------------


def flow_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    parts = {
        "claim": _claim_part,
        "keys": _keys_part,
        "paused": _paused_part,
        "hol": _hol_part,
        "rate": _rate_part,
        "bulk": _bulk_part,
    }
    fig.baseline = "the same requests without the control, backlog or bulk action, same run"
    run_parts(ctx, fig, parts, s.flow_parts)


# --- claim: the cost of a control that never binds ------------------------------------------

CLAIM_CONNECTIONS = 4
NEVER_BINDS = 100_000  # the highest maxRunning the API accepts


@dataclass
class ClaimRound:
    jobs: int = 0
    seconds: float = 0.0
    calls: list[float] = field(default_factory=list)
    server_cpu: float | None = None

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else float("nan")


def _claim_part(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    round_jobs, round_seconds, rounds = (8_000, 2.0, 4) if s.quick else (20_000, 4.0, 6)
    limited = ctx.queuelog(job_types="noop", name="limited", wait=False)
    plain = ctx.queuelog(job_types="noop", name="plain")
    queuelog_ready(limited)
    servers = {"maxRunning": limited, "no controls": plain}
    specs = [("flow-producer", "producer")] + [
        (f"flow-worker-{i}", "worker") for i in range(CLAIM_CONNECTIONS)
    ]
    keys = {name: ctx.keys(server, specs) for name, server in servers.items()}
    assert limited.admin_key is not None
    control = ctx.run(
        _call(
            limited.url,
            limited.admin_key,
            SET_CONTROL,
            {"input": {"type": "noop", "maxRunning": NEVER_BINDS}},
        )
    )["setTypeControl"]
    ctx.log(f"limited server: {control}")
    pending = dict.fromkeys(servers, 0)

    def one_round(name: str, jobs: int, seconds: float) -> ClaimRound:
        server, k = servers[name], keys[name]
        top_up = max(0, jobs - pending[name])
        ctx.run(_enqueue(server.url, k["flow-producer"], _inputs("noop"), top_up))
        workers = [k[f"flow-worker-{i}"] for i in range(CLAIM_CONNECTIONS)]
        held: list[list[dict[str, Any]]] = [[] for _ in workers]
        result = ClaimRound()
        cpu_before = server.cpu_seconds()
        started = time.perf_counter()
        ctx.run(_claim_phase(server.url, workers, held, result, started + seconds))
        result.seconds = time.perf_counter() - started
        cpu_after = server.cpu_seconds()
        if cpu_before is not None and cpu_after is not None:
            result.server_cpu = cpu_after - cpu_before
        pending[name] += top_up - result.jobs
        ctx.run(_complete_held(server.url, workers, held))
        return result

    for name in servers:  # warm-up, not counted
        one_round(name, 2_000, round_seconds)
    done: dict[str, list[ClaimRound]] = {name: [] for name in servers}
    names = list(servers)
    with ctx.profile(limited):
        for i in range(rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                done[name].append(one_round(name, round_jobs, round_seconds))
                time.sleep(0.3)
    after = ctx.run(
        _call(limited.url, limited.admin_key, "query { typeControls { type maxRunning running } }")
    )
    q, b = _pool(done["maxRunning"]), _pool(done["no controls"])
    fig.add("claim: claimJobs(limit: 100), maxRunning 100000 never binds (left) vs no controls (right)")
    fig.add(
        f"  jobs/s, {CLAIM_CONNECTIONS} conns, {rounds} rounds each",
        num(q.rate, 0, "jobs/s"),
        num(b.rate, 0, "jobs/s"),
        rx(ratio(q.rate, b.rate)),
        ">= 0.8x",
        met=_at_least(ratio(q.rate, b.rate), 0.8),
    )
    r50 = ratio(percentile(q.calls, 50), percentile(b.calls, 50))
    r99 = ratio(percentile(q.calls, 99), percentile(b.calls, 99))
    fig.add(
        "  per call p50 / p99, ms",
        _p50_p99(q.calls),
        _p50_p99(b.calls),
        f"{rx(r50)} / {rx(r99)}",
        "<= 1.25x (0.8x)",
        met=None if r50 is None or r99 is None else max(r50, r99) <= 1.25,
    )
    q_cpu = q.server_cpu / q.jobs if q.server_cpu is not None and q.jobs else None
    b_cpu = b.server_cpu / b.jobs if b.server_cpu is not None and b.jobs else None
    fig.add("  server CPU per job, ms", ms(q_cpu), ms(b_cpu), rx(ratio(q_cpu, b_cpu)))
    fig.notes.append(
        "claim: per-round jobs/s ratios (limited / plain, in round order): "
        + "  ".join(
            rx(ratio(a.rate, c.rate)) for a, c in zip(done["maxRunning"], done["no controls"], strict=True)
        )
        + f"; up to {round_jobs:,} pending jobs and {round_seconds:g} s a round; typeControls after: "
        + str(after["typeControls"])
    )
    fig.data["claim"] = {
        name: {
            "rounds": [
                {"jobs": r.jobs, "seconds": round(r.seconds, 3), "jobs_per_s": round(r.rate, 1)} for r in rs
            ],
            "pooled": {
                "jobs": p.jobs,
                "seconds": round(p.seconds, 3),
                "jobs_per_s": round(p.rate, 1),
                "calls": _sample_rows(p.calls),
                "server_cpu_s": p.server_cpu,
            },
        }
        for name, rs in done.items()
        for p in (_pool(rs),)
    }


def _at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target


def _pool(rounds: Sequence[ClaimRound]) -> ClaimRound:
    cpus = [r.server_cpu for r in rounds]
    return ClaimRound(
        jobs=sum(r.jobs for r in rounds),
        seconds=sum(r.seconds for r in rounds),
        calls=[c for r in rounds for c in r.calls],
        server_cpu=None if None in cpus else sum(c for c in cpus if c is not None),
    )


async def _call(url: str, key: str, query: str, variables: dict[str, Any] | None = None) -> Any:
    async with Api(url, key) as api:
        return await api.call(query, variables)


async def _claim_phase(
    url: str, workers: Sequence[str], held: list[list[dict[str, Any]]], result: ClaimRound, deadline: float
) -> None:
    body = graphql_body(CLAIM_MANY)

    async def worker(index: int) -> None:
        conn = HttpConnection(url, bearer(workers[index]))
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                jobs = graphql_data(*await conn.post("/graphql", body))["claimJobs"]
                result.calls.append(time.perf_counter() - started)
                if not jobs:
                    return
                held[index].extend(jobs)
                result.jobs += len(jobs)
        finally:
            await conn.close()

    await asyncio.gather(*(worker(i) for i in range(len(workers))))


async def _complete_held(url: str, workers: Sequence[str], held: list[list[dict[str, Any]]]) -> None:
    async def worker(index: int) -> None:
        async with Api(url, workers[index]) as api:
            await _complete_all(api, held[index])

    await asyncio.gather(*(worker(i) for i in range(len(workers))))


# --- keys / paused: a claim's cost with many keys, or one paused type among its types --------

KEYS = 10_000
KEY_SAMPLES = (100, 400)  # per server: --quick, full
CLAIM_TEN = (
    "mutation Claim($types: [String!]) { claimJobs(limit: 10, types: $types) { id attempt concurrencyKey } }"
)


def _keys_part(ctx: Context, fig: Figure) -> None:
    keys = [f"tenant-{i:05d}" for i in range(KEYS)]
    _paired_claims(
        ctx,
        fig,
        title=f"keys: claimJobs(limit: 10) p50 / p99 ms, maxRunningPerKey 1, {KEYS:,} keys vs no controls",
        left="per-key",
        job_types="noop",
        fill=lambda url, key: _enqueue(url, key, _inputs("noop", keys), 2 * KEYS),
        control={"type": "noop", "maxRunningPerKey": 1},
        claim_types=["noop"],
        target=2.0,
    )


def _paused_part(ctx: Context, fig: Figure) -> None:
    async def fill(url: str, key: str) -> None:
        await _enqueue(url, key, _inputs("noop"), 20_000)
        await _enqueue(url, key, _inputs("rare"), 2_000)

    _paired_claims(
        ctx,
        fig,
        title="paused: claimJobs(limit: 10, types: [noop, rare]) p50 / p99 ms, rare paused vs nothing paused",
        left="rare paused",
        job_types="noop,rare",
        fill=fill,
        control=None,
        claim_types=["noop", "rare"],
        target=1.1,
        pause="rare",
    )


def _paired_claims(
    ctx: Context,
    fig: Figure,
    *,
    title: str,
    left: str,
    job_types: str,
    fill: Callable[[str, str], Awaitable[None]],
    control: dict[str, Any] | None,
    claim_types: list[str],
    target: float,
    pause: str | None = None,
) -> None:
    """Claims of 10 on two servers holding the same jobs, one with a control set: samples
    alternate the servers; each claim's jobs are completed after it, untimed."""
    samples = KEY_SAMPLES[not ctx.settings.quick]
    controlled = ctx.queuelog(job_types=job_types, name="controlled", wait=False)
    plain = ctx.queuelog(job_types=job_types, name="plain")
    queuelog_ready(controlled)
    servers = {left: controlled, "plain": plain}
    specs = [("pair-producer", "producer"), ("pair-worker", "worker")]
    keys = {name: ctx.keys(server, specs) for name, server in servers.items()}
    for server in servers.values():
        ctx.run(fill(server.url, keys[_name(servers, server)]["pair-producer"]))
    assert controlled.admin_key is not None
    if control is not None:
        ctx.run(_call(controlled.url, controlled.admin_key, SET_CONTROL, {"input": control}))
    if pause is not None:
        ctx.run(_call(controlled.url, controlled.admin_key, PAUSE, {"type": pause}))
    latencies: dict[str, list[float]] = {name: [] for name in servers}
    claimed: dict[str, int] = dict.fromkeys(servers, 0)

    async def measure() -> None:
        apis = {name: Api(server.url, keys[name]["pair-worker"]) for name, server in servers.items()}
        try:
            for i in range(samples + 10):
                order = list(servers) if i % 2 == 0 else list(servers)[::-1]
                for name in order:
                    started = time.perf_counter()
                    jobs = (await apis[name].call(CLAIM_TEN, {"types": claim_types}))["claimJobs"]
                    elapsed = time.perf_counter() - started
                    if i >= 10:  # the first 10 rounds warm up
                        latencies[name].append(elapsed)
                        claimed[name] += len(jobs)
                    await _complete_all(apis[name], jobs)
        finally:
            for api in apis.values():
                await api.close()

    with ctx.profile(controlled):
        ctx.run(measure())
    a, b = latencies[left], latencies["plain"]
    r50, r99 = ratio(percentile(a, 50), percentile(b, 50)), ratio(percentile(a, 99), percentile(b, 99))
    fig.add(title)
    fig.add(
        f"  {left} (left) vs plain (right), {samples} claims each",
        _p50_p99(a),
        _p50_p99(b),
        f"{rx(r50)} / {rx(r99)}",
        f"p50 <= {target}x",
        met=None if r50 is None else r50 <= target,
    )
    fig.data[left] = {
        name: {**_sample_rows(values), "jobs": claimed[name]} for name, values in latencies.items()
    }


def _name(servers: dict[str, ServerProcess], server: ServerProcess) -> str:
    return next(name for name, s in servers.items() if s is server)


# --- hol: claims of B behind a backlog that a control holds back ----------------------------

HOL_TYPES = "A,B"
HOL_SUPPLY = 200  # pending B jobs before every timed claim
HOL_KEYS = [f"k{i}" for i in range(50)]  # scenario (d): B's other keys
HOT_KEY = "hot"
HOL_HOLD = 100  # (b) the rate window's limit, (c) maxRunning of A
HOT_LIMIT = 10  # (d) maxRunningPerKey of B
HOL_SAMPLES = (50, 200)  # per scenario and server: --quick, full
HOL_SECONDS = (3.0, 10.0)  # time budget per scenario and server
HOL_TARGET = 1.5
SCENARIOS = {
    "a": "(a) A paused",
    "b": f"(b) A rate-limited, window full ({HOL_HOLD}/day)",
    "c": f"(c) A at maxRunning ({HOL_HOLD} held)",
    "d": f"(d) B key at maxRunningPerKey ({HOT_LIMIT})",
}
HOL_KEY_SPECS = [("hol-producer", "producer"), ("hol-worker", "worker"), ("hol-holder", "worker")]


@dataclass
class HolServer:
    server: ServerProcess
    keys: dict[str, str]
    backlog: int  # pending jobs behind each control: --flow-jobs (big) or 0 (small)
    supply_keys: list[str | None] = field(default_factory=lambda: [None])
    produced: int = 0

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def admin(self) -> str:
        assert self.server.admin_key is not None
        return self.server.admin_key


def _hol_part(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    samples, budget = HOL_SAMPLES[not s.quick], HOL_SECONDS[not s.quick]
    small_server = ctx.queuelog(job_types=HOL_TYPES, name="small", wait=False)
    big_server = ctx.queuelog(job_types=HOL_TYPES, name="big")
    queuelog_ready(small_server)
    servers = {
        "small": HolServer(small_server, _hol_keys(ctx, small_server), 0),
        "big": HolServer(big_server, _hol_keys(ctx, big_server), s.flow_jobs),
    }
    fills: dict[str, float] = {}
    for size, hs in servers.items():
        started = time.perf_counter()
        ctx.run(_enqueue(hs.url, hs.keys["producer"], _inputs("A"), hs.backlog))
        ctx.run(_supply(hs, HOL_SUPPLY))
        fills[f"{size} A"] = time.perf_counter() - started
    latencies: dict[str, dict[str, list[float]]] = {}
    states: dict[str, dict[str, Any]] = {}
    with ctx.profile(big_server):  # the set-ups (a few requests) are in the profile too
        for scenario in SCENARIOS:
            started = time.perf_counter()
            for hs in servers.values():
                ctx.run(_set_up(hs, scenario))
            fills[f"set-up {scenario}"] = time.perf_counter() - started
            states[scenario] = {size: ctx.run(_by_type(hs.url, hs.admin)) for size, hs in servers.items()}
            ctx.log(f"scenario {scenario}: {states[scenario]}")
            latencies[scenario] = ctx.run(_hol_measure(servers, samples, budget))
    fig.add(f'hol: claimJobs(limit: 100, types: ["B"]) p50 / p99 ms, {s.flow_jobs:,} held back vs none')
    for scenario, title in SCENARIOS.items():
        big, small = latencies[scenario]["big"], latencies[scenario]["small"]
        r50 = ratio(percentile(big, 50), percentile(small, 50))
        r99 = ratio(percentile(big, 99), percentile(small, 99))
        fig.add(
            "  " + title,
            _p50_p99(big),
            _p50_p99(small),
            f"{rx(r50)} / {rx(r99)}",
            f"<= {HOL_TARGET}x",
            met=None if r50 is None or r99 is None else max(r50, r99) <= HOL_TARGET,
        )
    counts = sorted({len(v) for by in latencies.values() for v in by.values()})
    fig.notes.append(
        f"hol: {s.flow_jobs:,} pending A jobs (enqueued first) on one server, none on the other; "
        f"(d) adds {s.flow_jobs:,} pending B jobs of key '{HOT_KEY}' (oldest B jobs) on it, with "
        f"{HOT_LIMIT} of them held on both; B kept at {HOL_SUPPLY} pending (claimed jobs completed "
        f"and replaced, untimed); samples per line {counts[0]}-{counts[-1]}; set-up seconds "
        + ", ".join(f"{k} {v:.0f}" for k, v in fills.items())
    )
    fig.data["hol"] = {
        "backlog": s.flow_jobs,
        "fill_seconds": {k: round(v, 1) for k, v in fills.items()},
        "states": states,
        "scenarios": {
            scenario: {size: _sample_rows(values) for size, values in by.items()}
            for scenario, by in latencies.items()
        },
    }


def _hol_keys(ctx: Context, server: ServerProcess) -> dict[str, str]:
    return {name.removeprefix("hol-"): key for name, key in ctx.keys(server, HOL_KEY_SPECS).items()}


async def _supply(hs: HolServer, count: int) -> None:
    """`count` new pending B jobs, their concurrencyKeys in turn from hs.supply_keys."""
    items = []
    for _ in range(count):
        key = hs.supply_keys[hs.produced % len(hs.supply_keys)]
        item: dict[str, Any] = {"type": "B", "payload": {"n": hs.produced}}
        if key is not None:
            item["concurrencyKey"] = key
        items.append(item)
        hs.produced += 1
    async with Api(hs.url, hs.keys["producer"]) as api:
        for part in chunks(items, 1000):
            await api.call(ENQUEUE_MANY, {"inputs": list(part)})


async def _set_up(hs: HolServer, scenario: str) -> None:
    """Put a server in the control state of `scenario` (see SCENARIOS); checks it holds."""
    async with Api(hs.url, hs.admin) as admin, Api(hs.url, hs.keys["holder"]) as holder:

        async def claim_a(limit: int, lease: int | None = None) -> list[dict[str, Any]]:
            variables = {"limit": limit, "types": ["A"], "leaseSeconds": lease}
            jobs: list[dict[str, Any]] = (await holder.call(CLAIM_MANY_TYPES, variables))["claimJobs"]
            return jobs

        if scenario == "a":
            await admin.call(PAUSE, {"type": "A"})
            if await claim_a(1):
                raise RuntimeError("(a) a paused type's job was claimed")
        elif scenario == "b":
            await admin.call(RESUME, {"type": "A"})
            rate = {"limit": HOL_HOLD, "periodSeconds": 86400}
            await admin.call(SET_CONTROL, {"input": {"type": "A", "rateLimit": rate}})
            if hs.backlog == 0:
                await _enqueue(hs.url, hs.keys["producer"], _inputs("A"), HOL_HOLD, connections=1)
            taken = await claim_a(HOL_HOLD)
            await _complete_all(holder, taken)
            if len(taken) != HOL_HOLD or await claim_a(1):
                raise RuntimeError(f"(b) the rate window took {len(taken)} claims, then not full")
        elif scenario == "c":
            await admin.call(SET_CONTROL, {"input": {"type": "A", "maxRunning": HOL_HOLD}})
            if hs.backlog == 0:
                await _enqueue(hs.url, hs.keys["producer"], _inputs("A"), HOL_HOLD, connections=1)
            taken = await claim_a(HOL_HOLD, lease=86400)
            if len(taken) != HOL_HOLD or await claim_a(1):
                raise RuntimeError(f"(c) maxRunning let {len(taken)} claims through, then more")
        elif scenario == "d":
            # A stays at its maxRunning. B's supply so far goes (cancelled), so that the key's
            # backlog is the oldest of B: every claim in claim order meets it first.
            filter_b = {"status": "PENDING", "type": "B"}
            while (await admin.call(CANCEL_JOBS, {"filter": filter_b, "limit": 10000}))["cancelJobs"]["more"]:
                pass
            await admin.call(SET_CONTROL, {"input": {"type": "B", "maxRunningPerKey": HOT_LIMIT}})
            hot = max(hs.backlog, 0) + HOT_LIMIT
            await _enqueue(hs.url, hs.keys["producer"], _inputs("B", [HOT_KEY]), hot)
            variables = {"limit": 100, "types": ["B"], "leaseSeconds": 86400}
            taken = (await holder.call(CLAIM_MANY_TYPES, variables))["claimJobs"]
            if len(taken) != HOT_LIMIT or any(j["concurrencyKey"] != HOT_KEY for j in taken):
                raise RuntimeError(f"(d) maxRunningPerKey let {len(taken)} claims of key {HOT_KEY!r} through")
            hs.supply_keys = list(HOL_KEYS)
            await _supply(hs, HOL_SUPPLY)
        else:  # pragma: no cover
            raise ValueError(scenario)


async def _hol_measure(servers: dict[str, HolServer], samples: int, budget: float) -> dict[str, list[float]]:
    """claimJobs(limit: 100, types: ["B"]) on each server in turn, one untimed warm-up each,
    then up to `samples` each (at least 3) within `budget` seconds of its own time."""
    conns = {size: HttpConnection(hs.url, bearer(hs.keys["worker"])) for size, hs in servers.items()}
    body = graphql_body(CLAIM_MANY_TYPES, {"limit": 100, "types": ["B"]})
    latencies: dict[str, list[float]] = {size: [] for size in servers}
    spent = dict.fromkeys(servers, 0.0)

    async def once(size: str) -> float:
        hs = servers[size]
        started = time.perf_counter()
        status, answer = await conns[size].post("/graphql", body)
        elapsed = time.perf_counter() - started
        jobs = graphql_data(status, answer)["claimJobs"]
        if len(jobs) != 100 or any(j["type"] != "B" or j["concurrencyKey"] == HOT_KEY for j in jobs):
            raise RuntimeError(f"{size}: claimJobs(types: [B]) answered {len(jobs)} jobs: {answer[:300]!r}")
        # Untimed: complete what it took and replace it, so the shape holds.
        async with Api(hs.url, hs.keys["worker"]) as api:
            await _complete_all(api, jobs)
        await _supply(hs, len(jobs))
        return elapsed

    try:
        for size in servers:
            await once(size)
        for i in range(samples):
            for size in servers:
                if i >= 3 and spent[size] > budget:
                    continue
                elapsed = await once(size)
                latencies[size].append(elapsed)
                spent[size] += elapsed
    finally:
        for conn in conns.values():
            await conn.close()
    return latencies


# --- rate: a rate limit under 24 claiming workers on 3 server processes ----------------------

RATE_LIMIT = 200
RATE_PERIOD = 1
RATE_WORKERS = 24
RATE_PROCESSES = 3
RATE_WAIT = 2  # waitSeconds of each claim
RATE_TOTAL_SHARE = 0.95
RATE_TYPES = "R,S"  # R: rate-limited; S: no controls (the capacity run)
CAPACITY_SECONDS = (3.0, 5.0)  # --quick, full
CAPACITY_JOBS_PER_S = 1500  # S jobs enqueued per second of the capacity run


def _rate_part(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    seconds = s.flow_seconds
    servers = _rate_servers(ctx)
    first = servers[0]
    assert first.admin_key is not None
    keys = ctx.keys(first, [("rate-producer", "producer"), ("rate-worker", "worker")])
    jobs = int(RATE_LIMIT * (seconds + RATE_WAIT + 4) * 1.2)
    ctx.run(_enqueue(first.url, keys["rate-producer"], _inputs("R"), jobs))
    capacity_seconds = CAPACITY_SECONDS[not s.quick]
    capacity_jobs = int(CAPACITY_JOBS_PER_S * (capacity_seconds + 2))
    ctx.run(_enqueue(first.url, keys["rate-producer"], _inputs("S"), capacity_jobs))
    rate = {"limit": RATE_LIMIT, "periodSeconds": RATE_PERIOD}
    ctx.run(_call(first.url, first.admin_key, SET_CONTROL, {"input": {"type": "R", "rateLimit": rate}}))
    urls = [server.url for server in servers] if len(servers) > 1 else [first.url]
    # The same workers on a type with no controls first: what this machine can claim at all.
    capacity_cpu = [server.cpu_seconds() for server in servers]
    capacity = ctx.run(_rate_run(urls, keys["rate-worker"], "S", capacity_seconds, slack=0.0))
    capacity_stamps = sorted(_epoch(at) for at in capacity.claimed_at)
    capacity_span = capacity_stamps[-1] - capacity_stamps[0] if len(capacity_stamps) > 1 else 0.0
    capacity_rate = (len(capacity_stamps) - 1) / capacity_span if capacity_span > 0 else None
    cpu_before = [server.cpu_seconds() for server in servers]
    capacity_cpu = [
        round(a - b, 1) if a is not None and b is not None else None
        for a, b in zip(cpu_before, capacity_cpu, strict=True)
    ]
    held_before = ctx.run(_held_back(urls, "R"))
    with ctx.profile(first):
        outcome = ctx.run(_rate_run(urls, keys["rate-worker"], "R", seconds))
    cpu_after = [server.cpu_seconds() for server in servers]
    held = ctx.run(_held_back(urls, "R")) - held_before
    stamps = sorted(_epoch(at) for at in outcome.claimed_at)
    counts = ctx.run(_by_type(first.url, first.admin_key)).get("R", {})
    taken = counts.get("running", 0) + counts.get("completed", 0) + counts.get("failed", 0)
    if taken != len(stamps):
        fig.notes.append(f"rate: the server counts {taken} claimed R jobs, the workers saw {len(stamps)}")
    busiest, busiest_at = _busiest_window(stamps, RATE_PERIOD)
    t0 = stamps[0] if stamps else 0.0
    within = sum(1 for t in stamps if t0 <= t < t0 + seconds)
    wanted = RATE_LIMIT * seconds / RATE_PERIOD
    per_second = [sum(1 for t in stamps if t0 + k <= t < t0 + k + 1) for k in range(int(seconds))]
    processes = "serve --workers 3" if not s.postgres else "3 serve processes"
    fig.add(f"rate: {RATE_LIMIT}/{RATE_PERIOD} s limit, {processes}, {RATE_WORKERS} workers, {seconds:g} s")
    fig.add(
        "  busiest 1 s sliding window, claims",
        num(busiest),
        f"limit {RATE_LIMIT}",
        rx(ratio(busiest, RATE_LIMIT)),
        f"<= {RATE_LIMIT}",
        met=bool(stamps) and busiest <= RATE_LIMIT,
    )
    fig.add(
        f"  claims in the first {seconds:g} s from the first",
        num(within),
        f"{wanted:,.0f} allowed",
        rx(ratio(within, wanted)),
        f">= {RATE_TOTAL_SHARE:.0%}",
        met=within >= RATE_TOTAL_SHARE * wanted,
    )
    fig.add(
        f"  the same workers on a type with no controls, {capacity_seconds:g} s",
        num(capacity_rate, 0, "claims/s"),
        f"{RATE_LIMIT / RATE_PERIOD:,.0f} claims/s limit",
        rx(ratio(capacity_rate, RATE_LIMIT / RATE_PERIOD)),
    )
    cpu = [
        round(a - b, 1) if a is not None and b is not None else None
        for a, b in zip(cpu_after, cpu_before, strict=True)
    ]
    fig.notes.append(
        f"rate: claims per second {per_second}; busiest window starts {busiest_at - t0:+.3f} s from "
        f"the first claim; {len(stamps)} claims in all, {outcome.empty} claims answered null after "
        f"waiting, {outcome.errors} errors; the capacity run: {len(capacity_stamps)} claims, "
        f"{capacity.empty} answered null (ran dry), {capacity.errors} errors, server CPU s "
        f"{capacity_cpu}; "
        f"server CPU s of the rate-limited run {cpu}; claims the rate limit held back "
        f"(queuelog_claims_held_back, all processes that answered /metrics) {held:,.0f}"
    )
    fig.data["rate"] = {
        "limit": RATE_LIMIT,
        "period_seconds": RATE_PERIOD,
        "seconds": seconds,
        "processes": RATE_PROCESSES,
        "workers": RATE_WORKERS,
        "claims": len(stamps),
        "server_count": taken,
        "within_seconds": within,
        "wanted": wanted,
        "busiest_window": busiest,
        "per_second": per_second,
        "capacity_claims": len(capacity_stamps),
        "capacity_seconds": round(capacity_span, 3),
        "capacity_claims_per_s": round(capacity_rate, 1) if capacity_rate else None,
        "capacity_empty": capacity.empty,
        "empty_claims": outcome.empty,
        "held_back": held,
        "errors": outcome.errors,
        "first_error": outcome.first_error,
    }


def _rate_servers(ctx: Context) -> list[ServerProcess]:
    """SQLite: one `serve --workers 3`; PostgreSQL: three `serve` on one database."""
    if not ctx.settings.postgres:
        server = ctx.queuelog(
            job_types=RATE_TYPES, extra_args=("--workers", str(RATE_PROCESSES)), name="rate"
        )
        server.whole_tree = True
        deadline = time.monotonic() + 60
        while len(child_pids(server.process.pid)) < RATE_PROCESSES and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # /healthz answers when the first process serves; let the others start
        return [server]
    first = ctx.queuelog(job_types=RATE_TYPES, name="rate")
    servers = [first]
    for i in range(1, RATE_PROCESSES):
        other = start_queuelog(
            ctx.dir(), first.database_url, job_types=RATE_TYPES, name=f"rate{i}", wait=False
        )
        ctx.server(other)
        ctx.watch_database(other, first.database_url)
        servers.append(other)
    for other in servers[1:]:
        wait_healthy(other)
        other.admin_key = first.admin_key
    return servers


@dataclass
class RateOutcome:
    claimed_at: list[str] = field(default_factory=list)
    empty: int = 0
    errors: int = 0
    first_error: str = ""


async def _rate_run(
    urls: Sequence[str], key: str, job_type: str, seconds: float, slack: float = 1.5
) -> RateOutcome:
    """RATE_WORKERS workers, spread over `urls`: claimJob(types: [job_type], waitSeconds) +
    completeJob until the time is up (`slack` past `seconds`, so that the first `seconds`
    from the first claim are all covered); waiting claims are let finish."""
    outcome = RateOutcome()
    stop = time.monotonic() + seconds + slack
    claim = graphql_body(CLAIM_WAIT, {"types": [job_type], "waitSeconds": RATE_WAIT})

    async def worker(index: int) -> None:
        conn = HttpConnection(urls[index % len(urls)], bearer(key))
        try:
            while time.monotonic() < stop:
                try:
                    job = graphql_data(*await conn.post("/graphql", claim))["claimJob"]
                    if job is None:
                        outcome.empty += 1
                        continue
                    outcome.claimed_at.append(job["claimedAt"])
                    variables = {"id": job["id"], "attempt": job["attempt"], "result": RESULT}
                    graphql_data(*await conn.post("/graphql", graphql_body(COMPLETE, variables)))
                except (HttpError, OSError, asyncio.IncompleteReadError) as exc:
                    outcome.errors += 1
                    outcome.first_error = outcome.first_error or f"{type(exc).__name__}: {exc}"[:300]
                    await conn.close()
                    await asyncio.sleep(0.1)
        finally:
            await conn.close()

    await asyncio.gather(*(worker(i) for i in range(RATE_WORKERS)))
    return outcome


async def _held_back(urls: Sequence[str], job_type: str) -> float:
    """queuelog_claims_held_back of `job_type`, summed over the servers' /metrics (under
    `serve --workers N`, whichever process answers)."""
    total = 0.0
    pattern = re.compile(rf'^queuelog_claims_held_back_total{{type="{re.escape(job_type)}"}} (\S+)$', re.M)
    for url in urls:
        conn = HttpConnection(url)
        try:
            status, body = await conn.get("/metrics")
        finally:
            await conn.close()
        if status == 200 and (found := pattern.search(body.decode())):
            total += float(found.group(1))
    return total


def _epoch(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def _busiest_window(stamps: Sequence[float], period: float) -> tuple[int, float]:
    """The most claims in any half-open window [t, t + period), and where it starts (a window
    holding the most always starts at a claim)."""
    best, best_at, j = 0, stamps[0] if stamps else 0.0, 0
    for i, start in enumerate(stamps):
        j = max(j, i)
        while j < len(stamps) and stamps[j] < start + period:
            j += 1
        if j - i > best:
            best, best_at = j - i, start
    return best, best_at


# --- bulk: retryJobs over many FAILED jobs, and a long-polling worker meanwhile --------------

BULK_LIMIT = 1000
BULK_MAX_CALL = 0.250
DISPATCH_P99 = 0.025
PARK_SECONDS = 0.05
DISPATCH_WAIT = 5
QUIET_SAMPLES = (50, 150)
ID_PATTERN = re.compile(rb'"id":"?(\d+)')


def _bulk_part(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    n = s.flow_jobs
    server = ctx.queuelog(job_types="F,D", name="bulk")
    assert server.admin_key is not None
    admin = server.admin_key
    keys = ctx.keys(
        server, [("bulk-producer", "producer"), ("bulk-worker", "worker"), ("bulk-poller", "worker")]
    )
    started = time.perf_counter()
    ctx.run(_enqueue(server.url, keys["bulk-producer"], _inputs("F", maxRetries=0), n))
    ctx.run(_fail_all(server.url, keys["bulk-worker"], admin, n))
    fill_seconds = time.perf_counter() - started
    before = ctx.run(_by_type(server.url, admin))
    ctx.log(f"bulk: {before} after {fill_seconds:.0f} s")
    if before.get("F", {}).get("failed") != n:
        raise RuntimeError(f"the fill left F at {before.get('F')}, not {n} FAILED")
    sampler = Dispatch(server.url, keys["bulk-poller"], keys["bulk-producer"])
    quiet_samples = QUIET_SAMPLES[not s.quick]
    with ctx.profile(server):
        ctx.run(sampler.run(3, None))  # warm-up
        quiet = ctx.run(sampler.run(quiet_samples, None))
        calls, during = ctx.run(_bulk_with_dispatch(server.url, admin, sampler, n))
    after = ctx.run(_by_type(server.url, admin))
    retried = sum(count for count, _ in calls)
    seconds = [t for _, t in calls]
    fig.add(f"bulk: retryJobs(limit: {BULK_LIMIT}) over {n:,} FAILED jobs, {len(calls)} calls")
    fig.add(
        "  per call p50 / p99 / max, ms",
        f"{_p50_p99(seconds)} / {ms(max(seconds) if seconds else None)}",
        "",
        "",
        f"max <= {BULK_MAX_CALL * 1000:.0f} ms",
        met=bool(seconds) and max(seconds) <= BULK_MAX_CALL,
    )
    fig.add(
        "  jobs retried / s (whole bulk)",
        num(retried / sum(seconds) if seconds and sum(seconds) else None, 0, "jobs/s"),
    )
    r50 = ratio(percentile(during.dispatch, 50), percentile(quiet.dispatch, 50))
    r99 = ratio(percentile(during.dispatch, 99), percentile(quiet.dispatch, 99))
    fig.add(
        f"  dispatch p50 / p99 ms during (left) vs none, {len(during.dispatch)}/{len(quiet.dispatch)}",
        _p50_p99(during.dispatch),
        _p50_p99(quiet.dispatch),
        f"{rx(r50)} / {rx(r99)}",
        f"p99 <= {DISPATCH_P99 * 1000:.0f} ms",
        met=bool(during.dispatch) and percentile(during.dispatch, 99) <= DISPATCH_P99,
    )
    fig.add("    its max, ms", ms(max(during.dispatch, default=None)), ms(max(quiet.dispatch, default=None)))
    fig.add("    the enqueue answered, p50 / p99 ms", _p50_p99(during.enqueued), _p50_p99(quiet.enqueued))
    problems = quiet.problems + during.problems
    fig.notes.append(
        f"bulk: {n:,} F jobs (maxRetries 0) claimed with leaseSeconds 1 and left to expire into FAILED "
        f"({fill_seconds:.0f} s, untimed); {retried:,} retried in {sum(seconds):.1f} s of calls; the "
        f'poller claims types ["D"] only; F after: {after.get("F")}'
        + (f"; {len(problems)} bad dispatch samples, first: {problems[0]}" if problems else "")
    )
    if retried != n or after.get("F", {}).get("pending") != n:
        fig.notes.append(
            f"bulk: retryJobs counted {retried:,} jobs for {n:,} FAILED; F after: {after.get('F')}"
        )
    fig.data["bulk"] = {
        "jobs": n,
        "fill_seconds": round(fill_seconds, 1),
        "calls": _sample_rows(seconds),
        "call_counts": [count for count, _ in calls],
        "retried": retried,
        "dispatch_during": _sample_rows(during.dispatch),
        "dispatch_quiet": _sample_rows(quiet.dispatch),
        "enqueue_during": _sample_rows(during.enqueued),
        "enqueue_quiet": _sample_rows(quiet.enqueued),
        "counts_before": before,
        "counts_after": after,
        "problems": problems[:5],
    }


async def _fail_all(url: str, worker: str, admin: str, n: int) -> None:
    """Claim every F job with a 1 s lease and let the leases expire (maxRetries 0: FAILED).
    Every claim expires up to 500 leases first, so claims on F (which find nothing to take)
    drive the expiry on; bounded in time."""
    variables = {"limit": 100, "types": ["F"], "leaseSeconds": 1}

    async def claimer() -> None:
        async with Api(url, worker) as api:
            while (await api.call(CLAIM_MANY_TYPES, variables))["claimJobs"]:
                pass

    await asyncio.gather(claimer(), claimer())
    deadline = time.monotonic() + max(120, n / 200)
    counts: dict[str, int] = {}
    async with Api(url, worker) as api:
        while time.monotonic() < deadline:
            counts = (await _by_type(url, admin)).get("F", {})
            if counts.get("running") == 0:
                return
            if (await api.call(CLAIM_MANY_TYPES, variables | {"limit": 1}))["claimJobs"]:
                raise RuntimeError("an F job came back to PENDING (maxRetries 0)")
            await asyncio.sleep(0.05)
    raise RuntimeError(f"F jobs still RUNNING after the fill: {counts}")


@dataclass
class Samples:
    dispatch: list[float] = field(default_factory=list)
    enqueued: list[float] = field(default_factory=list)  # the enqueue's own answer
    problems: list[str] = field(default_factory=list)


class Dispatch:
    """Figure 5's sample with a typed claim: claimJob(types: ["D"], waitSeconds: 5) parks, 50 ms
    later one D job is enqueued; the time from writing the enqueue to the claim's answer."""

    def __init__(self, url: str, worker: str, producer: str) -> None:
        self.poller = HttpConnection(url, bearer(worker))
        self.producer = HttpConnection(url, bearer(producer))
        self.claim = graphql_body(CLAIM_WAIT, {"types": ["D"], "waitSeconds": DISPATCH_WAIT})
        self.n = 0

    async def sample(self, into: Samples) -> None:
        self.n += 1
        body = graphql_body(ENQUEUE, {"input": {"type": "D", "payload": {"n": self.n}}})
        answered: list[float] = []

        async def claim() -> bytes:
            status, answer = await self.poller.post("/graphql", self.claim)
            answered.append(time.perf_counter())
            if status != 200 or b'"errors"' in answer:
                raise HttpError(f"claim answered {status}: {answer[:200]!r}")
            return answer

        claiming = asyncio.create_task(claim())
        await asyncio.sleep(PARK_SECONDS)
        if claiming.done():
            into.problems.append(f"the long poll answered before any enqueue: {(await claiming)[:200]!r}")
            return
        started = time.perf_counter()
        status, enqueued = await self.producer.post("/graphql", body)
        enqueue_answered = time.perf_counter()
        answer = await asyncio.wait_for(claiming, DISPATCH_WAIT + 10)
        wanted = ID_PATTERN.search(enqueued)
        got = ID_PATTERN.search(answer)
        if status != 200 or wanted is None or got is None or wanted.group(1) != got.group(1):
            into.problems.append(f"claimed {answer[:120]!r} after enqueueing {enqueued[:120]!r}")
            return
        into.dispatch.append(answered[0] - started)
        into.enqueued.append(enqueue_answered - started)

    async def run(self, count: int, until: Callable[[], bool] | None) -> Samples:
        """`count` samples, or (count None-like 0 and `until`) samples until `until()` is true."""
        into = Samples()
        if until is None:
            for _ in range(count):
                await self.sample(into)
        else:
            while not until():
                await self.sample(into)
        return into

    async def close(self) -> None:
        await self.poller.close()
        await self.producer.close()


async def _bulk_with_dispatch(
    url: str, admin: str, sampler: Dispatch, n: int
) -> tuple[list[tuple[int, float]], Samples]:
    """retryJobs(limit: 1000) until `more` is false, each call timed, while `sampler` takes
    dispatch samples (those started before the bulk's end count)."""
    calls: list[tuple[int, float]] = []
    finished = False
    conn = HttpConnection(url, bearer(admin))
    body = graphql_body(RETRY_JOBS, {"filter": {"status": "FAILED", "type": "F"}, "limit": BULK_LIMIT})

    async def bulk() -> None:
        nonlocal finished
        try:
            await asyncio.sleep(0.2)  # the sampler's first long poll is parked
            for _ in range(n // BULK_LIMIT + 20):
                started = time.perf_counter()
                answer = graphql_data(*await conn.post("/graphql", body))["retryJobs"]
                calls.append((answer["count"], time.perf_counter() - started))
                if not answer["more"]:
                    return
            raise RuntimeError("retryJobs still answered more after every job should be retried")
        finally:
            finished = True
            await conn.close()

    try:
        running: Awaitable[Samples] = sampler.run(0, lambda: finished)
        _, during = await asyncio.gather(bulk(), running)
    finally:
        await sampler.close()
    return calls, during
