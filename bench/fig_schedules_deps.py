"""Figure 11: job dependencies and cron schedules (issue 17, API.md section 10).

Five parts (`--deps-parts`, default all), each on fresh servers and databases of its own,
driven only through the public API (the database is read, never written, for two checks):

base       what the feature costs jobs that use none of it: `enqueueJob` (figure 1's load),
           `claimJob` + `completeJob` (figure 2's) and `claimJobs(limit: 100)` (figure 10's
           claim part, 4 connections) on this checkout's server against a server started
           from `--deps-before DIR` (a checkout of the commit before the feature, on
           PYTHONPATH), rounds alternating A B, B A, ...; target >= 0.9x (within 10 %).
chains     end to end, one `queuelog worker` (figure 4's): --deps-jobs jobs as chains of 100
           (each waits for the one before; `enqueueJobs` of 1000 with `dependsOnItems`)
           against the same number of independent jobs on a second server, same run, in two
           rounds (fresh servers, opposite orders); jobs/s = N / (last finishedAt - first
           claimedAt), over both rounds; target >= 0.5x. Every chain is
           checked to have run in order (each claimedAt >= its predecessor's finishedAt).
fanin      1,000 jobs and one that waits for all of them. A job names at most 100
           dependencies (API.md section 10), so the 1,000 are gathered by 10 jobs of 100
           each and the last waits for those 10. Hop 1: a long-polling
           `claimJob(types: ["gather"], waitSeconds: 10)` is parked, then the 1,000th leaf
           is completed: the time from `completeJob`'s answer to the claim's answer.
           Hop 2: the same for the last job when the 10th gather completes. Target <= 10 ms
           each (every sample); the database shows the released job's run_at equal to the
           finished_at of the job that released it (one transaction). Baseline: the same
           long poll woken by a plain `enqueueJob` (from its answer).
cascade    a root job with --deps-dependents dependents (100 direct, 99 more under each),
           claimed, then `failJob(retryable: false)`: the call's time, the time until every
           dependent is CANCELLED with error `dependency <root> FAILED` (the database read
           every 10 ms from outside the server: the first are cancelled in the call's
           transaction, the rest in chunks after it; target <= 5 s per 100,000), and
           figure 5's dispatch sample (`claimJob(types: ["D"], waitSeconds: 5)` woken by one
           enqueue) before, while the dependents are being cancelled (target p99 <= 25 ms)
           and in the 2 s after.
schedules  --deps-schedules schedules `* * * * *` (`putSchedule`), then --deps-seconds of
           nothing else: the server's CPU against an idle server started with it (target
           < 5 % of one core for the difference) and every tick's job (`idempotencyKey`
           `<name>@<tick>`): createdAt - tick p50 / p99 / max, one job per schedule and
           tick. createdAt is the firing transaction's start, so the database is also read
           (from outside the server) every 10 ms around each tick for when the tick's jobs
           are all committed: that delay carries the 1 s target.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import _pg
from bench._api import COMPLETE, COMPLETE_MANY, ENQUEUE, ENQUEUE_MANY, RESULT, Api, enqueue_many
from bench._common import (
    PYTHON,
    HttpConnection,
    HttpError,
    ServerProcess,
    _launch,
    bearer,
    clean_env,
    cpu_delta,
    free_port,
    graphql_body,
    graphql_data,
    percentile,
    queuelog_ready,
)
from bench._context import Context
from bench._loadgen import Round, alternate, claim_complete_script, pool, round_summary, run_python, run_wrk
from bench._report import Figure, ms, num, ratio, rx
from bench.fig_e2e import run_queuelog
from bench.fig_flow import (
    PARK_SECONDS,
    ClaimRound,
    Dispatch,
    Samples,
    _by_type,
    _claim_phase,
    _complete_held,
    _epoch,
    _p50_p99,
    _pool,
    _sample_rows,
    run_parts,
)
from bench.fig_http import CLAIM_NOW, _claim_complete_step, _static_load

PARTS = ("base", "chains", "fanin", "cascade", "schedules")


@dataclass
class Options:
    """This figure's flags (cli.py sets them with `configure`); None: the default below."""

    before: str | None = None  # --deps-before: the checkout the base part compares against
    parts: tuple[str, ...] = PARTS
    jobs: int | None = None  # --deps-jobs: the chains part (10,000)
    dependents: int | None = None  # --deps-dependents: the cascade (10,000)
    schedules: int | None = None  # --deps-schedules (1,000)
    seconds: float | None = None  # --deps-seconds: the schedules' window (130 / 180)


OPTIONS = Options()


def configure(**values: Any) -> None:
    global OPTIONS
    OPTIONS = dataclasses.replace(OPTIONS, **{k: v for k, v in values.items() if v is not None})


def deps_figure(ctx: Context, fig: Figure) -> None:
    parts = {
        "base": _base_part,
        "chains": _chains_part,
        "fanin": _fanin_part,
        "cascade": _cascade_part,
        "schedules": _schedules_part,
    }
    fig.baseline = "the same without the feature: commit before it, independent jobs, plain enqueue, idle"
    fig.data["options"] = dataclasses.asdict(OPTIONS)
    run_parts(ctx, fig, parts, OPTIONS.parts)


# --- helpers ---------------------------------------------------------------------------------


def _code_env(code_dir: Path | None) -> dict[str, str]:
    """The environment of a subprocess that must run `code_dir`'s queuelog (None: the one
    this bench's servers run, i.e. PYTHONPATH as given, else the installed project)."""
    return {"PYTHONPATH": str(code_dir)} if code_dir is not None else {}


def _code_label(ctx: Context, code_dir: Path | None) -> str:
    """Where `python -m queuelog` imports from with that environment, and its commit."""
    done = subprocess.run(
        [PYTHON, "-c", "import queuelog.app; print(queuelog.app.__file__)"],
        capture_output=True,
        text=True,
        env=clean_env(_code_env(code_dir)),
        cwd=ctx.dir(),
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"queuelog does not import: {done.stderr.strip()[-300:]}")
    root = Path(done.stdout.strip()).resolve().parents[1]
    if code_dir is not None and root != code_dir.resolve():
        raise RuntimeError(f"PYTHONPATH={code_dir}: queuelog imports from {root}")
    described = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{root}@{described or '?'}"


def _queuelog_from(ctx: Context, code_dir: Path | None, name: str, job_types: str = "noop") -> ServerProcess:
    """ctx.queuelog, with `code_dir`'s queuelog (PYTHONPATH) when given; wait with
    queuelog_ready."""
    if code_dir is None:
        return ctx.queuelog(job_types=job_types, name=name, wait=False)
    db = ctx.database_url(name)
    port = free_port()
    command = [PYTHON, "-m", "queuelog", "serve", "--port", str(port), "--database-url", db]
    command += ["--job-types", job_types, "--log-level", "warning"]
    server = _launch(name, command, ctx.dir(), _code_env(code_dir))
    server.database_url = db
    ctx.watch_database(server, db)
    ctx.server(server)
    return server


def _keys(
    ctx: Context, server: ServerProcess, specs: Sequence[tuple[str, str]], code_dir: Path | None
) -> dict[str, str]:
    """make_keys, run by `code_dir`'s queuelog from the figure's directory (make_keys runs in
    the bench's working directory, whose queuelog would come first on sys.path)."""
    running = {
        name: subprocess.Popen(
            [PYTHON, "-m", "queuelog", "keys", "create", "--name", name, "--role", role]
            + ["--database-url", server.database_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(_code_env(code_dir)),
            cwd=ctx.dir(),
        )
        for name, role in specs
    }
    created = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=120)
        lines = out.strip().splitlines()
        if process.returncode != 0 or not lines:
            raise RuntimeError(f"keys create --name {name} failed: {err.strip()[-300:]}")
        created[name] = lines[-1].strip()
    return created


def _db_rows(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Read queuelog's database (never written): `?` placeholders, either backend."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as conn:
            return [tuple(r) for r in conn.execute(sql, tuple(params)).fetchall()]
    with contextlib.closing(_pg.psycopg().connect(url, autocommit=True)) as conn:
        return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), tuple(params)).fetchall()]


def _at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target


# --- base: jobs without dependencies or schedules, this commit vs the one before --------------

CLAIM_MANY_CONNECTIONS = 4
BASE_TARGET = 0.9


def _base_part(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    if not OPTIONS.before:
        raise RuntimeError(
            "needs --deps-before DIR, a checkout of the commit before the feature "
            "(git worktree add /tmp/before 4fb5e30)"
        )
    before_dir = Path(OPTIONS.before).resolve()
    labels = {"after": _code_label(ctx, None), "before": _code_label(ctx, before_dir)}
    ctx.log(f"base: {labels}")
    dirs: dict[str, Path | None] = {"after": None, "before": before_dir}
    servers = {side: _queuelog_from(ctx, code, side) for side, code in dirs.items()}
    for server in servers.values():
        queuelog_ready(server)
    specs = [("base-producer", "producer"), ("base-worker", "worker")]
    specs += [(f"base-many-{i}", "worker") for i in range(CLAIM_MANY_CONNECTIONS)]
    keys = {side: _keys(ctx, servers[side], specs, dirs[side]) for side in servers}
    rounds, seconds = (6, 2) if s.quick else (8, 4)
    many_jobs = 8_000 if s.quick else 20_000

    def pending(side: str) -> int:
        server = servers[side]
        assert server.admin_key is not None

        async def go() -> int:
            async with Api(server.url, server.admin_key) as api:
                return int((await api.counts())["pending"])

        return int(ctx.run(go()))

    def top_up(side: str, wanted: int) -> None:
        need = wanted - pending(side)
        if need > 0:
            ctx.run(enqueue_many(servers[side].url, keys[side]["base-producer"], need, connections=2))
        ctx.maintain(servers[side])

    def enqueue_round(side: str, length: float) -> Round:
        return _static_load(ctx, servers[side], "/graphql", bearer(keys[side]["base-producer"]), int(length))

    best = {"after": 1000.0, "before": 1000.0}

    def claim_round(side: str, length: float) -> Round:
        top_up(side, int(max(4000, 2 * best[side] * length)))
        server, headers = servers[side], bearer(keys[side]["base-worker"])
        claim_body = graphql_body(CLAIM_NOW)
        template = graphql_body(COMPLETE, {"id": "@ID@", "attempt": 7777777, "result": RESULT}).decode()
        complete_format = template.replace('"@ID@"', '"%s"').replace("7777777", "%s")
        if s.use_wrk:
            script = claim_complete_script(
                "/graphql", claim_body.decode(), "/graphql", complete_format, headers
            )
            conns = s.claim_connections
            result = run_wrk(
                server,
                "/graphql",
                script,
                connections=conns,
                threads=conns,
                seconds=int(length),
                workdir=ctx.dir(),
            )
        else:
            step = _claim_complete_step("/graphql", claim_body, "/graphql", complete_format)
            result = run_python(
                server, step, headers=headers, connections=s.claim_connections, seconds=length
            )
        done = result.counters.get("completed", 0)
        best[side] = max(best[side], done / result.seconds)
        return result

    def many_round(side: str, length: float) -> ClaimRound:
        top_up(side, many_jobs)
        server = servers[side]
        workers = [keys[side][f"base-many-{i}"] for i in range(CLAIM_MANY_CONNECTIONS)]
        held: list[list[dict[str, Any]]] = [[] for _ in workers]
        result = ClaimRound()
        cpu_before = server.cpu_seconds()
        started = time.perf_counter()
        ctx.run(_claim_phase(server.url, workers, held, result, started + length))
        result.seconds = time.perf_counter() - started
        cpu_after = server.cpu_seconds()
        if cpu_before is not None and cpu_after is not None:
            result.server_cpu = cpu_after - cpu_before
        ctx.run(_complete_held(server.url, workers, held))
        return result

    for side in servers:  # warm-up, not counted
        enqueue_round(side, 1)
        claim_round(side, 1)
        many_round(side, 1)
    with ctx.profile(servers["after"]):
        enq = alternate(
            {side: functools.partial(_nth, enqueue_round, side, seconds) for side in servers}, rounds
        )
        rt = alternate(
            {side: functools.partial(_nth, claim_round, side, seconds) for side in servers}, rounds
        )
        many: dict[str, list[ClaimRound]] = {side: [] for side in servers}
        names = list(servers)
        for i in range(rounds):
            for side in names if i % 2 == 0 else names[::-1]:
                many[side].append(many_round(side, seconds))
                time.sleep(0.3)

    fig.add(f"base: no dependencies, no schedules; this commit (left) vs {before_dir.name} (right)")
    enq_counts = {side: (lambda r: r.requests) for side in servers}
    _base_rows(fig, "enqueueJob", f"{s.enqueue_connections} conns", "req/s", enq, enq_counts)
    rt_counts = {side: (lambda r: r.counters.get("completed", 0)) for side in servers}
    _base_rows(fig, "claimJob + completeJob", f"{s.claim_connections} conns", "rt/s", rt, rt_counts)
    a, b = _pool(many["after"]), _pool(many["before"])
    r = ratio(a.rate, b.rate)
    fig.add(
        f"  claimJobs(limit: 100), {CLAIM_MANY_CONNECTIONS} conns, jobs/s",
        num(a.rate, 0, "jobs/s"),
        num(b.rate, 0, "jobs/s"),
        rx(r),
        f">= {BASE_TARGET}x",
        met=_at_least(r, BASE_TARGET),
    )
    fig.add(
        "    per call p50 / p99, ms",
        _p50_p99(a.calls),
        _p50_p99(b.calls),
        f"{rx(ratio(percentile(a.calls, 50), percentile(b.calls, 50)))} / "
        f"{rx(ratio(percentile(a.calls, 99), percentile(b.calls, 99)))}",
    )
    a_cpu = a.server_cpu / a.jobs if a.server_cpu is not None and a.jobs else None
    b_cpu = b.server_cpu / b.jobs if b.server_cpu is not None and b.jobs else None
    fig.add("    server CPU per job, ms", ms(a_cpu), ms(b_cpu), rx(ratio(a_cpu, b_cpu)))
    per_round = "  ".join(
        rx(ratio(x.rate, y.rate)) for x, y in zip(many["after"], many["before"], strict=True)
    )
    fig.notes.append(
        f"base: this commit = {labels['after']}, before = {labels['before']}; {rounds} rounds of "
        f"{seconds} s per side and operation, alternating; claimJobs(100) per-round ratios {per_round}"
    )
    fig.data["base"] = {
        "labels": labels,
        "rounds": rounds,
        "seconds": seconds,
        "enqueue": {side: [round_summary(x) for x in rs] for side, rs in enq.items()},
        "claim_complete": {
            side: [round_summary(x, x.counters.get("completed", 0)) for x in rs] for side, rs in rt.items()
        },
        "claim_many": {
            side: [{"jobs": x.jobs, "seconds": round(x.seconds, 3), "server_cpu_s": x.server_cpu} for x in rs]
            for side, rs in many.items()
        },
    }


def _nth(run: Callable[[str, float], Round], side: str, seconds: float, index: int) -> Round:
    """alternate()'s round `index` of `side`: every round alike."""
    return run(side, seconds)


def _base_rows(
    fig: Figure, what: str, conns: str, unit: str, rounds: dict[str, list[Round]], ops: dict[str, Any]
) -> None:
    a, b = pool(rounds["after"]), pool(rounds["before"])
    a_ops, b_ops = ops["after"](a), ops["before"](b)
    a_rate, b_rate = a_ops / a.seconds, b_ops / b.seconds
    r = ratio(a_rate, b_rate)
    fig.add(
        f"  {what}, {conns}, {unit}",
        num(a_rate, 0, unit),
        num(b_rate, 0, unit),
        rx(r),
        f">= {BASE_TARGET}x",
        met=_at_least(r, BASE_TARGET),
    )
    a_cpu = a.server_cpu / a_ops if a.server_cpu is not None and a_ops else None
    b_cpu = b.server_cpu / b_ops if b.server_cpu is not None and b_ops else None
    fig.add("    server CPU per op, ms", ms(a_cpu), ms(b_cpu), rx(ratio(a_cpu, b_cpu)))
    if a.db_cpu is not None and b.db_cpu is not None and a_ops and b_ops:
        a_db, b_db = a.db_cpu / a_ops, b.db_cpu / b_ops
        fig.add("    PostgreSQL backends' CPU per op, ms", ms(a_db), ms(b_db), rx(ratio(a_db, b_db)))
    per_round = "  ".join(
        rx(ratio(ops["after"](x) / x.seconds, ops["before"](y) / y.seconds))
        for x, y in zip(rounds["after"], rounds["before"], strict=True)
    )
    errors = a.errors + b.errors
    fig.notes.append(
        f"base {what}: per-round ratios {per_round}"
        + (f"; {errors} failed requests, first: {a.first_error or b.first_error}" if errors else "")
    )


# --- chains: 100 chains of 100 against independent jobs, one worker --------------------------

CHAIN = 100
CHAIN_TARGET = 0.5
PAYLOAD_PAGE = (
    "query Page($after: String) { jobs(status: COMPLETED, first: 100, after: $after) "
    "{ nodes { id payload claimedAt finishedAt attempt } pageInfo { hasNextPage endCursor } } }"
)


def _chain_inputs(first_chain: int, chains: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for c in range(first_chain, first_chain + chains):
        for k in range(CHAIN):
            item: dict[str, Any] = {"type": "noop", "payload": {"c": c, "k": k}}
            if k:
                item["dependsOnItems"] = [len(items) - 1]
            items.append(item)
    return items


async def _enqueue_chains(url: str, key: str, chains: int) -> None:
    per_call = 1000 // CHAIN
    async with Api(url, key) as api:
        for first in range(0, chains, per_call):
            items = _chain_inputs(first, min(per_call, chains - first))
            answer = (await api.call(ENQUEUE_MANY, {"inputs": items}))["enqueueJobs"]
            if len(answer) != len(items):
                raise HttpError(f"enqueueJobs answered {len(answer)} of {len(items)} jobs")


async def _chain_order(url: str, admin: str, n: int) -> tuple[int, int]:
    """(jobs read, chain steps claimed before the step before them finished)."""
    steps: dict[tuple[int, int], tuple[float, float]] = {}
    async with Api(url, admin) as api:
        after = None
        for _ in range(n // 100 + 10):
            page = (await api.call(PAYLOAD_PAGE, {"after": after}))["jobs"]
            for job in page["nodes"]:
                p = job["payload"]
                steps[(p["c"], p["k"])] = (_epoch(job["claimedAt"]), _epoch(job["finishedAt"]))
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
    early = sum(
        1
        for (c, k), (claimed, _) in steps.items()
        if k and (c, k - 1) in steps and claimed < steps[(c, k - 1)][1]
    )
    return len(steps), early


def _spied(ctx: Context, what: str) -> Context:
    """`ctx` whose --py-spy profile goes to a file of its own (`what` before the suffix)."""
    if ctx.py_spy_path is None:
        return ctx
    path = Path(ctx.py_spy_path)
    return dataclasses.replace(ctx, py_spy_path=str(path.with_name(f"{path.stem}-{what}{path.suffix}")))


def _chains_part(ctx: Context, fig: Figure) -> None:
    """Two rounds on fresh servers, in opposite orders (independent then chains, chains then
    independent): on this shared machine one side's run alone moved by a third between runs
    of the same code, so a single pair said more about the host than about chains. The row
    gives each side's jobs over its two drain times together; the note, each round's ratio."""
    s = ctx.settings
    n = OPTIONS.jobs or 10_000
    chains = max(1, n // CHAIN)
    n = chains * CHAIN
    rounds = [_chains_round(ctx, n, chains, index, chains_first=index == 1) for index in range(2)]
    plain = _both_rounds([r["independent"] for r in rounds], n)
    chain = _both_rounds([r["chained"] for r in rounds], n)
    r = ratio(chain["jobs_per_s"], plain["jobs_per_s"])
    fig.add(
        f"chains: {n:,} jobs, {chains} chains of {CHAIN} (left) vs independent (right), one worker, 2 rounds"
    )
    fig.add(
        f"  end to end, worker -c {s.e2e_concurrency}",
        num(chain["jobs_per_s"], 0, "jobs/s"),
        num(plain["jobs_per_s"], 0, "jobs/s"),
        rx(r),
        f">= {CHAIN_TARGET}x",
        met=_at_least(r, CHAIN_TARGET),
    )
    fig.add(
        "    CPU s: server + worker",
        f"{num(chain['server_cpu_s'], 2)} + {num(chain['worker_cpu_s'], 2)}",
        f"{num(plain['server_cpu_s'], 2)} + {num(plain['worker_cpu_s'], 2)}",
    )
    if chain.get("db_cpu_s") is not None:
        fig.add("    PostgreSQL backends' CPU s", num(chain["db_cpu_s"], 2), num(plain["db_cpu_s"], 2))
    fig.add("    wall time incl. the worker's start-up, s", num(chain["wall_s"], 2), num(plain["wall_s"], 2))
    per_round = "  ".join(
        _round_line(i, rd["chained"]["jobs_per_s"], rd["independent"]["jobs_per_s"])
        for i, rd in enumerate(rounds)
    )
    read = sum(rd["read"] for rd in rounds)
    early = sum(rd["early"] for rd in rounds)
    fig.notes.append(
        f"chains: per round {per_round}; enqueued in "
        + ", ".join(f"{rd['chain_fill']:.1f} s" for rd in rounds)
        + " (enqueueJobs of 1000 = 10 chains, dependsOnItems) vs "
        + ", ".join(f"{rd['plain_fill']:.1f} s" for rd in rounds)
        + f" independent; {read:,} chain jobs read back, {early} claimed before the step before them"
        " finished" + (" (a dependency did not hold!)" if early else "")
    )
    if early or read != 2 * n:
        fig.error = f"chains: {early} steps ran early, {read} of {2 * n} read back"
    fig.data["chains"] = {
        "jobs": n,
        "chains": chains,
        "chained": chain,
        "independent": plain,
        "early": early,
        "rounds": rounds,
    }


def _chains_round(ctx: Context, n: int, chains: int, index: int, chains_first: bool) -> dict[str, Any]:
    """One round: fresh servers, both filled, then each drained by one worker in turn."""
    suffix = f"-{index + 1}" if index else ""
    independent = ctx.queuelog(name=f"independent{suffix}", wait=False)
    chained = ctx.queuelog(name=f"chains{suffix}")
    queuelog_ready(independent)
    specs = [("chain-producer", "producer"), ("chain-worker", "worker")]
    keys = {name: ctx.keys(server, specs) for name, server in (("i", independent), ("c", chained))}
    started = time.perf_counter()
    ctx.run(enqueue_many(independent.url, keys["i"]["chain-producer"], n, batch=1000, connections=2))
    plain_fill = time.perf_counter() - started
    started = time.perf_counter()
    ctx.run(_enqueue_chains(chained.url, keys["c"]["chain-producer"], chains))
    chain_fill = time.perf_counter() - started
    ctx.maintain(independent)
    ctx.maintain(chained)
    part_ctx = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, e2e_jobs=n))
    runs = {
        "independent": lambda: run_queuelog(
            _spied(part_ctx, f"independent{suffix}"), independent, keys["i"]["chain-worker"]
        ),
        "chained": lambda: run_queuelog(
            _spied(part_ctx, f"chained{suffix}"), chained, keys["c"]["chain-worker"]
        ),
    }
    order = ["chained", "independent"] if chains_first else ["independent", "chained"]
    outcome: dict[str, Any] = {side: runs[side]() for side in order}
    assert chained.admin_key is not None
    outcome["read"], outcome["early"] = ctx.run(_chain_order(chained.url, chained.admin_key, n))
    outcome["plain_fill"], outcome["chain_fill"] = plain_fill, chain_fill
    return outcome


def _round_line(index: int, chained: float | None, independent: float | None) -> str:
    first = "chains first" if index else "independent first"
    return f"{first} {rx(ratio(chained, independent))} ({num(chained, 0)} / {num(independent, 0)} jobs/s)"


def _both_rounds(runs: Sequence[dict[str, Any]], n: int) -> dict[str, Any]:
    """One side's rounds of `n` jobs together: its jobs over its drain windows, its CPU and
    wall time summed."""
    seconds = sum(run["window_s"] for run in runs)
    together: dict[str, Any] = {"jobs": n * len(runs)}
    together["jobs_per_s"] = together["jobs"] / seconds if seconds > 0 else None
    for name in ("server_cpu_s", "worker_cpu_s", "db_cpu_s", "wall_s"):
        values = [run.get(name) for run in runs]
        together[name] = sum(values) if all(v is not None for v in values) else None
    return together


# --- fanin: 1,000 jobs, then one that waits for all of them ----------------------------------

FANIN_TYPES = "leaf,gather,fanin"
FANIN_LEAVES = 1000
FANIN_WIDTH = 100  # the most dependencies one job may name (API.md section 10)
FANIN_TARGET = 0.010
FANIN_WAIT = 10
CLAIM_MANY_TYPED = (
    "mutation ClaimMany($types: [String!], $limit: Int!) "
    "{ claimJobs(types: $types, limit: $limit) { id attempt } }"
)
CLAIM_WAIT_TYPED = (
    "mutation Claim($types: [String!], $waitSeconds: Int) "
    "{ claimJob(types: $types, waitSeconds: $waitSeconds) { id attempt } }"
)
ENQUEUE_IDS = (
    "mutation EnqueueMany($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
)


@dataclass
class Hop:
    """One release: from the releasing write's answer to the woken claim's answer."""

    seconds: float  # from the write's answer (negative: the claim answered first)
    from_send: float  # from writing the request
    same_tx: bool


@dataclass
class FaninResult:
    leaf: list[Hop] = field(default_factory=list)
    last: list[Hop] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


async def _woken(
    poller: HttpConnection, waiting: bytes, writer: HttpConnection, write: bytes
) -> tuple[float, float, dict[str, Any] | None, Any]:
    """Park `waiting` on `poller`, then send `write` on `writer`; returns (claim answer - write
    answer, claim answer - write sent, the claimed job, the write's data)."""
    answered: list[float] = []

    async def claim() -> Any:
        status, body = await poller.post("/graphql", waiting)
        answered.append(time.perf_counter())
        return graphql_data(status, body)

    task = asyncio.create_task(claim())
    await asyncio.sleep(PARK_SECONDS)
    if task.done():
        raise RuntimeError(f"the long poll answered before the write: {await task}")
    sent = time.perf_counter()
    data = graphql_data(*await writer.post("/graphql", write))
    write_answered = time.perf_counter()
    claimed = await asyncio.wait_for(task, FANIN_WAIT + 10)
    job = next(iter(claimed.values()))
    return answered[0] - write_answered, answered[0] - sent, job, data


def _released_in_same_tx(url: str, released: int, by: int) -> bool:
    rows = _db_rows(
        url,
        "SELECT j.run_at = p.finished_at AND j.waiting_for = 0 FROM jobs j, jobs p "
        "WHERE j.id = ? AND p.id = ?",
        (released, by),
    )
    return bool(rows and rows[0][0])


async def _fanin_sample(url: str, db_url: str, keys: dict[str, str], into: FaninResult, n: int) -> None:
    producer = Api(url, keys["producer"])
    leaf_worker = Api(url, keys["leaf-worker"])
    poller = HttpConnection(url, bearer(keys["gather-worker"]))
    holder = HttpConnection(url, bearer(keys["gather-worker"]))
    last_poller = HttpConnection(url, bearer(keys["fanin-worker"]))
    try:
        leaves = [{"type": "leaf", "payload": {"sample": n, "i": i}} for i in range(FANIN_LEAVES)]
        leaf_ids = [
            x["job"]["id"] for x in (await producer.call(ENQUEUE_IDS, {"inputs": leaves}))["enqueueJobs"]
        ]
        groups = FANIN_LEAVES // FANIN_WIDTH
        tree: list[dict[str, Any]] = [
            {
                "type": "gather",
                "payload": {"sample": n, "g": g},
                "dependsOn": leaf_ids[g * FANIN_WIDTH : (g + 1) * FANIN_WIDTH],
            }
            for g in range(groups)
        ]
        tree.append({"type": "fanin", "payload": {"sample": n}, "dependsOnItems": list(range(groups))})
        tree_ids = [
            x["job"]["id"] for x in (await producer.call(ENQUEUE_IDS, {"inputs": tree}))["enqueueJobs"]
        ]
        gathers, last = tree_ids[:groups], tree_ids[groups]
        held: list[dict[str, Any]] = []
        while len(held) < FANIN_LEAVES:
            got = (await leaf_worker.call(CLAIM_MANY_TYPED, {"types": ["leaf"], "limit": 100}))["claimJobs"]
            if not got:
                raise RuntimeError(f"only {len(held)} leaves claimable")
            held.extend(got)
        by_id = {j["id"]: j for j in held}
        final_leaf = by_id[leaf_ids[-1]]
        rest = [by_id[i] for i in leaf_ids[:-1]]
        for start in range(0, len(rest), 100):
            items = [
                {"id": j["id"], "attempt": j["attempt"], "result": RESULT} for j in rest[start : start + 100]
            ]
            if (await leaf_worker.call(COMPLETE_MANY, {"items": items}))["completeJobs"]["rejected"]:
                raise RuntimeError("completeJobs rejected leaves")
        early = graphql_data(
            *await holder.post(
                "/graphql", graphql_body(CLAIM_MANY_TYPED, {"types": ["gather"], "limit": 100})
            )
        )
        first = early["claimJobs"]
        if sorted(j["id"] for j in first) != sorted(gathers[:-1]):
            raise RuntimeError(f"claimable gathers {[j['id'] for j in first]}, expected {gathers[:-1]}")
        items = [{"id": j["id"], "attempt": j["attempt"], "result": RESULT} for j in first]
        graphql_data(*await holder.post("/graphql", graphql_body(COMPLETE_MANY, {"items": items})))
        # hop 1: the 1,000th leaf completes; its gather is claimable
        wait_gather = graphql_body(CLAIM_WAIT_TYPED, {"types": ["gather"], "waitSeconds": FANIN_WAIT})
        complete_leaf = graphql_body(
            COMPLETE, {"id": final_leaf["id"], "attempt": final_leaf["attempt"], "result": RESULT}
        )
        wait_worker = HttpConnection(url, bearer(keys["leaf-worker"]))
        try:
            seconds, from_send, job, _ = await _woken(poller, wait_gather, wait_worker, complete_leaf)
        finally:
            await wait_worker.close()
        if job is None or job["id"] != gathers[-1]:
            raise RuntimeError(f"the long poll claimed {job}, not gather {gathers[-1]}")
        into.leaf.append(
            Hop(seconds, from_send, _released_in_same_tx(db_url, int(gathers[-1]), int(final_leaf["id"])))
        )
        # hop 2: the 10th gather completes (on the poller's connection); the last is claimable
        wait_last = graphql_body(CLAIM_WAIT_TYPED, {"types": ["fanin"], "waitSeconds": FANIN_WAIT})
        complete_gather = graphql_body(
            COMPLETE, {"id": job["id"], "attempt": job["attempt"], "result": RESULT}
        )
        seconds, from_send, final, _ = await _woken(last_poller, wait_last, poller, complete_gather)
        if final is None or final["id"] != last:
            raise RuntimeError(f"the long poll claimed {final}, not the last job {last}")
        into.last.append(Hop(seconds, from_send, _released_in_same_tx(db_url, int(last), int(job["id"]))))
        graphql_data(
            *await last_poller.post(
                "/graphql",
                graphql_body(COMPLETE, {"id": final["id"], "attempt": final["attempt"], "result": RESULT}),
            )
        )
        # the baseline: the same long poll woken by a plain enqueue
        for _ in range(3):
            wait_plain = graphql_body(CLAIM_WAIT_TYPED, {"types": ["fanin"], "waitSeconds": FANIN_WAIT})
            enqueue = graphql_body(ENQUEUE, {"input": {"type": "fanin", "payload": {"plain": n}}})
            seconds, _, plain, _ = await _woken(last_poller, wait_plain, producer.conn, enqueue)
            into.plain.append(seconds)
            if plain is not None:
                graphql_data(
                    *await last_poller.post(
                        "/graphql",
                        graphql_body(
                            COMPLETE, {"id": plain["id"], "attempt": plain["attempt"], "result": RESULT}
                        ),
                    )
                )
    finally:
        for conn in (poller, holder, last_poller):
            await conn.close()
        await producer.close()
        await leaf_worker.close()


def _hop_row(fig: Figure, label: str, hops: Sequence[Hop], plain: Sequence[float]) -> None:
    values = [h.seconds for h in hops]
    worst = max(values, default=None)
    fig.add(
        label,
        f"{ms(percentile(values, 50))} / {ms(worst)}",
        f"{ms(percentile(plain, 50))} / {ms(max(plain, default=None))}",
        rx(ratio(percentile(values, 50), percentile(plain, 50))),
        f"<= {FANIN_TARGET * 1000:.0f} ms",
        met=None if worst is None else worst <= FANIN_TARGET,
    )
    fig.add(
        "    same transaction in the database (run_at = finished_at)",
        f"{sum(h.same_tx for h in hops)} of {len(hops)}",
        "",
        "",
        "all",
        met=bool(hops) and all(h.same_tx for h in hops),
    )


def _fanin_part(ctx: Context, fig: Figure) -> None:
    samples = 3 if ctx.settings.quick else 10
    server = ctx.queuelog(job_types=FANIN_TYPES, name="fanin")
    specs = [("producer", "producer"), ("leaf-worker", "worker"), ("gather-worker", "worker")]
    specs.append(("fanin-worker", "worker"))
    keys = ctx.keys(server, specs)
    result = FaninResult()
    with ctx.profile(server):
        for n in range(samples + 1):  # the first is a warm-up
            sample = FaninResult() if n == 0 else result
            ctx.run(_fanin_sample(server.url, server.database_url, keys, sample, n))
    fig.add(
        f"fanin: {FANIN_LEAVES:,} jobs, then one waiting for all (via {FANIN_LEAVES // FANIN_WIDTH} of "
        f"{FANIN_WIDTH}), {samples} samples"
    )
    fig.add("  long-polling claim woken: ms from the write's answer, p50 / max; right: plain enqueue")
    _hop_row(
        fig, f"  1,000th job completes -> its gather (of {FANIN_WIDTH}) claimable", result.leaf, result.plain
    )
    _hop_row(fig, "  10th gather completes -> the last claimable", result.last, result.plain)
    fig.notes.append(
        "fanin: ms from writing the completeJob to the claim's answer, hop 1 "
        + " ".join(ms(h.from_send) for h in result.leaf)
        + "; hop 2 "
        + " ".join(ms(h.from_send) for h in result.last)
        + f"; API.md section 10 caps dependsOn at {FANIN_WIDTH} jobs, so no job can name 1,000"
    )
    fig.data["fanin"] = {
        "samples": samples,
        "hop_leaf": [dataclasses.asdict(h) for h in result.leaf],
        "hop_last": [dataclasses.asdict(h) for h in result.last],
        "plain": _sample_rows(result.plain),
    }


# --- cascade: failJob of a root with 10,000 dependents ----------------------------------------

CASCADE_TYPES = "root,child,D"
CASCADE_SECONDS_PER_100K = 5.0  # API.md section 10: 100,000 dependents within seconds
CASCADE_POLL_SECONDS = 0.01
CASCADE_DIRECT = 100
DISPATCH_TARGET = 0.025
AFTER_SECONDS = 2.0
FAIL = (
    "mutation Fail($id: ID!, $attempt: Int) "
    '{ failJob(id: $id, attempt: $attempt, error: "root failed", retryable: false) { id status } }'
)


class TimedDispatch(Dispatch):
    """Figure 5's sample (fig_flow.Dispatch), remembering when each sample's enqueue went out."""

    def __init__(self, url: str, worker: str, producer: str) -> None:
        super().__init__(url, worker, producer)
        self.sent: list[float] = []

    async def sample(self, into: Samples) -> None:
        before = len(into.dispatch)
        started = time.perf_counter()
        await super().sample(into)
        if len(into.dispatch) > before:
            self.sent.append(started + PARK_SECONDS)


async def _cascade_fill(url: str, producer: str, worker: str, dependents: int) -> dict[str, Any]:
    """A root job, then `dependents` jobs: CASCADE_DIRECT depend on the root, the rest evenly
    under them, 1,000 a call; returns the claimed root."""
    async with Api(url, producer) as api:
        root_id = (await api.call(ENQUEUE_IDS, {"inputs": [{"type": "root", "payload": {}}]}))["enqueueJobs"][
            0
        ]["job"]["id"]
        direct = min(CASCADE_DIRECT, dependents)
        under, extra = divmod(dependents - direct, direct)
        heads = [{"type": "child", "payload": {"d": d}, "dependsOn": [root_id]} for d in range(direct)]
        answer = (await api.call(ENQUEUE_IDS, {"inputs": heads}))["enqueueJobs"]
        head_ids = [item["job"]["id"] for item in answer]
        batch: list[dict[str, Any]] = []
        for d, head_id in enumerate(head_ids):
            for k in range(under + (1 if d < extra else 0)):
                batch.append({"type": "child", "payload": {"d": d, "k": k}, "dependsOn": [head_id]})
                if len(batch) == 1000:
                    await _enqueue_batch(api, batch)
                    batch = []
        if batch:
            await _enqueue_batch(api, batch)
    async with Api(url, worker) as api:
        root = (await api.call(CLAIM_MANY_TYPED, {"types": ["root"], "limit": 1}))["claimJobs"]
    if not root or root[0]["id"] != root_id:
        raise RuntimeError(f"claimed {root}, not the root {root_id}")
    return dict(root[0])


async def _enqueue_batch(api: Api, batch: list[dict[str, Any]]) -> None:
    answer = (await api.call(ENQUEUE_IDS, {"inputs": batch}))["enqueueJobs"]
    if len(answer) != len(batch):
        raise HttpError(f"enqueueJobs answered {len(answer)} of {len(batch)}")


@dataclass
class CascadeRun:
    start: float  # perf_counter when failJob was sent
    answered: float  # ... when it answered
    settled: float  # ... when every dependent was seen CANCELLED
    samples: Samples


async def _cascade_run(
    url: str, database_url: str, worker: str, sampler: TimedDispatch, root: dict[str, Any], n: int
) -> CascadeRun:
    """failJob(retryable: false) of the root while `sampler` samples, from 0.3 s before until
    AFTER_SECONDS after every dependent is CANCELLED (read from the database)."""
    window: dict[str, float] = {}
    conn = HttpConnection(url, bearer(worker))
    cancelled = "SELECT count(*) FROM jobs WHERE type = 'child' AND status = 'cancelled'"

    async def fail() -> None:
        try:
            await asyncio.sleep(0.3)
            window["start"] = time.perf_counter()
            answer = graphql_data(
                *await conn.post(
                    "/graphql", graphql_body(FAIL, {"id": root["id"], "attempt": root["attempt"]})
                )
            )
            window["answered"] = time.perf_counter()
            if answer["failJob"]["status"] != "FAILED":
                raise RuntimeError(f"failJob answered {answer}")
            deadline = time.perf_counter() + 600
            while (await asyncio.to_thread(_db_rows, database_url, cancelled))[0][0] < n:
                if time.perf_counter() > deadline:
                    raise RuntimeError("the dependents were not all CANCELLED within 600 s")
                await asyncio.sleep(CASCADE_POLL_SECONDS)
            window["settled"] = time.perf_counter()
        finally:
            window.setdefault("answered", time.perf_counter())
            window.setdefault("settled", window["answered"])
            await conn.close()

    def done() -> bool:
        return "settled" in window and time.perf_counter() > window["settled"] + AFTER_SECONDS

    _, samples = await asyncio.gather(fail(), sampler.run(0, done))
    return CascadeRun(window["start"], window["answered"], window["settled"], samples)


def _cascade_part(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    n = OPTIONS.dependents or 10_000
    server = ctx.queuelog(job_types=CASCADE_TYPES, name="cascade")
    assert server.admin_key is not None
    keys = ctx.keys(server, [("producer", "producer"), ("worker", "worker"), ("poller", "worker")])
    started = time.perf_counter()
    root = ctx.run(_cascade_fill(server.url, keys["producer"], keys["worker"], n))
    fill_seconds = time.perf_counter() - started
    ctx.maintain(server)
    before = ctx.run(_by_type(server.url, server.admin_key))
    if before.get("child", {}).get("pending") != n:
        raise RuntimeError(f"the fill left child at {before.get('child')}, not {n} PENDING")
    sampler = TimedDispatch(server.url, keys["poller"], keys["producer"])
    quiet_n = 30 if s.quick else 100
    with ctx.profile(server):
        ctx.run(sampler.run(3, None))
        quiet = ctx.run(sampler.run(quiet_n, None))
        sampler.sent.clear()
        run = ctx.run(_cascade_run(server.url, server.database_url, keys["worker"], sampler, root, n))
    ctx.run(sampler.close())
    samples, start, end = run.samples, run.start, run.settled
    call, settling = run.answered - run.start, run.settled - run.start
    after = ctx.run(_by_type(server.url, server.admin_key))
    timed = list(zip(sampler.sent, samples.dispatch, samples.enqueued, strict=True))
    during = [d for t, d, _ in timed if start <= t <= end]
    overlapping = [d for t, d, _ in timed if t < start and t + d > start]
    following = [d for t, d, _ in timed if end < t <= end + AFTER_SECONDS]
    error = f"dependency {root['id']} FAILED"
    with_error = _db_rows(
        server.database_url,
        "SELECT count(*) FROM jobs WHERE type = 'child' AND status = 'cancelled' AND error = ?",
        (error,),
    )[0][0]
    # Two reads: as one join, PostgreSQL's plan for a table not analyzed yet ran for minutes.
    root_row = _db_rows(server.database_url, "SELECT finished_at FROM jobs WHERE id = ?", (int(root["id"]),))
    ended = root_row[0][0]
    in_call = _db_rows(
        server.database_url,
        "SELECT count(*) FROM jobs WHERE type = 'child' AND status = 'cancelled' AND finished_at = ?",
        (ended,),
    )[0][0]
    cancelled = after.get("child", {}).get("cancelled", 0)
    target = CASCADE_SECONDS_PER_100K * n / 100_000
    fig.add(f"cascade: failJob(retryable: false) of a root with {n:,} dependents ({CASCADE_DIRECT} direct)")
    fig.add("  the call, ms", ms(call))
    fig.add(
        "  until every dependent is CANCELLED, ms (from the call)",
        ms(settling),
        "",
        "",
        f"<= {target * 1000:,.0f} ms",
        met=settling <= target,
    )
    fig.add(
        f"    dependents CANCELLED / with error `{error}` / in the call's transaction",
        f"{cancelled:,} / {with_error:,} / {in_call:,}",
        f"{n:,}",
        "",
        "all / all",
        met=cancelled == n and with_error == n,
    )
    fig.add(
        f"  dispatch p50 / p99 ms, while cancelling (left) vs quiet, {len(during)}/{len(quiet.dispatch)}",
        _p50_p99(during),
        _p50_p99(quiet.dispatch),
        rx(ratio(percentile(during, 99), percentile(quiet.dispatch, 99))),
        f"p99 <= {DISPATCH_TARGET * 1000:.0f} ms",
        met=bool(during) and percentile(during, 99) <= DISPATCH_TARGET,
    )
    fig.add(
        f"    dispatch p50 / p99 ms, {AFTER_SECONDS:g} s after ({len(following)})",
        _p50_p99(following),
        _p50_p99(quiet.dispatch),
    )
    fig.add(
        "    dispatch max ms: enqueued while cancelling / before it, waiting",
        f"{ms(max(during, default=None))} ({len(during)}) / "
        f"{ms(max(overlapping, default=None))} ({len(overlapping)})",
        ms(max(quiet.dispatch, default=None)),
    )
    problems = quiet.problems + samples.problems
    fig.notes.append(
        f"cascade: filled in {fill_seconds:.0f} s; child after: {after.get('child')}"
        + (f"; {len(problems)} bad dispatch samples, first: {problems[0]}" if problems else "")
    )
    fig.data["cascade"] = {
        "dependents": n,
        "call_s": round(call, 4),
        "settled_s": round(settling, 4),
        "cancelled": cancelled,
        "with_error": with_error,
        "in_the_call": in_call,
        "dispatch_quiet": _sample_rows(quiet.dispatch),
        "dispatch_during": [round(x, 4) for x in during],
        "dispatch_overlapping": [round(x, 4) for x in overlapping],
        "dispatch_after": _sample_rows(following),
        "counts_after": after,
    }


# --- schedules: 1,000 schedules every minute --------------------------------------------------

SCHEDULE_CRON = "* * * * *"
PUT_SCHEDULE = "mutation Put($input: ScheduleInput!) { putSchedule(input: $input) { name nextRunAt } }"
SCHEDULED_PAGE = (
    'query Page($after: String) { jobs(type: "sched", first: 100, after: $after) '
    "{ nodes { idempotencyKey scheduleName createdAt } pageInfo { hasNextPage endCursor } } }"
)
LATENESS_TARGET = 1.0
CPU_TARGET = 0.05


async def _put_schedules(url: str, admin: str, count: int, connections: int = 4) -> None:
    names = iter(range(count))

    async def putter() -> None:
        async with Api(url, admin) as api:
            for i in names:
                variables = {
                    "input": {
                        "name": f"s{i:05d}",
                        "type": "sched",
                        "cron": SCHEDULE_CRON,
                        "payload": {"i": i},
                    }
                }
                await api.call(PUT_SCHEDULE, variables)

    await asyncio.gather(*(putter() for _ in range(connections)))


async def _scheduled_jobs(url: str, admin: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    async with Api(url, admin) as api:
        after = None
        for _ in range(100_000):
            page = (await api.call(SCHEDULED_PAGE, {"after": after}))["jobs"]
            jobs.extend(page["nodes"])
            if not page["pageInfo"]["hasNextPage"]:
                return jobs
            after = page["pageInfo"]["endCursor"]
    return jobs


TICK_POLL = 0.01


def _watch_ticks(db_url: str, count: int, until: float) -> dict[int, dict[str, float | None]]:
    """Until `until` (time.time()), read the count of scheduled jobs in the database every
    TICK_POLL seconds from just before each minute boundary until `count` more are there (or
    5 s): {boundary: {"first": s after it the first was visible, "all": ... all of them}}.
    Read-only and outside the server: it costs the server nothing."""
    sql = "SELECT count(*) FROM jobs WHERE type = 'sched'"
    seen: dict[int, dict[str, float | None]] = {}
    while True:
        boundary = (int(time.time()) // 60 + 1) * 60
        if boundary + 5 > until:
            time.sleep(max(0.0, until - time.time()))
            return seen
        time.sleep(max(0.0, boundary - 0.3 - time.time()))
        before = _db_rows(db_url, sql)[0][0]
        mark: dict[str, float | None] = {"first": None, "all": None}
        while time.time() < boundary + 5:
            now = time.time()
            found = _db_rows(db_url, sql)[0][0]
            if found > before and mark["first"] is None:
                mark["first"] = now - boundary
            if found >= before + count:
                mark["all"] = now - boundary
                break
            time.sleep(TICK_POLL)
        seen[boundary] = mark
        time.sleep(max(0.0, boundary + 5 - time.time()))


def _schedules_part(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    count = OPTIONS.schedules or 1000
    window = OPTIONS.seconds or (130.0 if s.quick else 180.0)
    busy = ctx.queuelog(job_types="sched", name="schedules", wait=False)
    idle = ctx.queuelog(job_types="sched", name="idle")
    queuelog_ready(busy)
    assert busy.admin_key is not None
    started = time.time()
    ctx.run(_put_schedules(busy.url, busy.admin_key, count))
    put_done = time.time()
    ctx.log(f"schedules: {count} put in {put_done - started:.1f} s; {window:g} s of nothing else")
    servers = {"busy": busy, "idle": idle}
    cpu_before = {k: v.cpu_seconds() for k, v in servers.items()}
    db_before = {k: v.db_cpu_snapshot() for k, v in servers.items()}
    t0 = time.perf_counter()
    with ctx.profile(busy):
        visible = _watch_ticks(busy.database_url, count, time.time() + window)
    elapsed = time.perf_counter() - t0
    cpu = {k: (v.cpu_seconds() or 0.0) - (cpu_before[k] or 0.0) for k, v in servers.items()}
    db = {k: cpu_delta(db_before[k], v.db_cpu_snapshot()) for k, v in servers.items()}
    window_end = time.time()
    jobs = ctx.run(_scheduled_jobs(busy.url, busy.admin_key))
    seen: dict[tuple[str, float], int] = {}
    lateness: list[float] = []
    for job in jobs:
        name, _, tick_text = job["idempotencyKey"].partition("@")
        tick = (
            datetime.datetime.strptime(tick_text, "%Y-%m-%dT%H:%M:%SZ")
            .replace(tzinfo=datetime.UTC)
            .timestamp()
        )
        seen[(name, tick)] = seen.get((name, tick), 0) + 1
        lateness.append(_epoch(job["createdAt"]) - tick)
        if job["scheduleName"] != name:
            raise RuntimeError(f"job of {job['idempotencyKey']} has scheduleName {job['scheduleName']}")
    # Every minute boundary after the last put, and at least LATENESS_TARGET before the end,
    # must have one job per schedule.
    first_full = (int(put_done) // 60 + 1) * 60
    boundaries = list(range(first_full, int(window_end - LATENESS_TARGET) + 1, 60))
    per_boundary = {b: sum(1 for (_, t) in seen if t == b) for b in boundaries}
    missing = sum(count - per_boundary[b] for b in boundaries)
    doubled = sum(v - 1 for v in seen.values() if v > 1)
    share = (cpu["busy"] - cpu["idle"]) / elapsed
    fig.add(
        f"schedules: {count:,} schedules '{SCHEDULE_CRON}', {elapsed:.0f} s, {len(boundaries)} full ticks"
    )
    worst = max(lateness, default=None)
    fig.add(
        "  enqueue lateness (createdAt - tick) p50 / p99 / max, ms",
        f"{ms(percentile(lateness, 50))} / {ms(percentile(lateness, 99))} / {ms(worst)}",
        f"{len(lateness):,} jobs",
        "",
        f"max <= {LATENESS_TARGET * 1000:.0f} ms",
        met=worst is not None and worst <= LATENESS_TARGET and not missing and not doubled,
    )
    commits = [v["all"] for v in visible.values() if v["all"] is not None]
    unseen = [b for b, v in visible.items() if v["all"] is None]
    fig.add(
        "  a tick's jobs all in the database (committed) - tick, ms, per tick",
        " ".join(ms(v) for v in commits) or "-",
        f"{len(visible)} ticks watched",
        "",
        f"<= {LATENESS_TARGET * 1000:.0f} ms",
        met=bool(visible) and not unseen and max(commits) <= LATENESS_TARGET,
    )
    fig.add(
        "    ticks with a job / expected, doubled",
        f"{sum(per_boundary.values()):,} / {count * len(boundaries):,}, {doubled}",
        "",
        "",
        "all, 0",
        met=bool(boundaries) and not missing and not doubled,
    )
    fig.add(
        "  server CPU s over the window: with schedules / idle",
        num(cpu["busy"], 2),
        num(cpu["idle"], 2),
        rx(ratio(cpu["busy"], cpu["idle"])),
    )
    fig.add(
        "    ticking, share of one core ((with - idle) / wall)",
        f"{share * 100:.2f} %",
        "",
        "",
        f"< {CPU_TARGET * 100:.0f} %",
        met=share < CPU_TARGET,
    )
    if db["busy"] is not None and db["idle"] is not None:
        fig.add("    PostgreSQL backends' CPU s: with / idle", num(db["busy"], 2), num(db["idle"], 2))
    fig.notes.append(
        f"schedules: put in {put_done - started:.1f} s; ticks per boundary "
        + ", ".join(
            f"{datetime.datetime.fromtimestamp(b, datetime.UTC):%H:%M} {per_boundary[b]}" for b in boundaries
        )
        + f"; {len(jobs):,} scheduled jobs in all; the database (read every {TICK_POLL * 1000:.0f} ms "
        "around each tick) first showed each tick's jobs at "
        + ", ".join(f"{ms(v['first'])}" for v in visible.values())
        + " ms after it"
        + (f"; ticks never complete in the database within 5 s: {unseen}" if unseen else "")
    )
    fig.data["schedules"] = {
        "schedules": count,
        "window_s": round(elapsed, 1),
        "cpu_s": cpu,
        "db_cpu_s": db,
        "ticking_share": round(share, 5),
        "lateness": _sample_rows(lateness),
        "visible": {str(b): v for b, v in visible.items()},
        "per_boundary": {str(b): v for b, v in per_boundary.items()},
        "missing": missing,
        "doubled": doubled,
    }
