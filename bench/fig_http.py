"""Figures 1 and 2 (and the optional `workers`): single operations over keep-alive HTTP.

1. `enqueueJob` (selection `{ job { id } }`, producer key), C connections, against the
   bare baseline's `POST /enqueue` (one INSERT on the event loop, answers `{"id": N}`),
   both sent the very same request body.
2. `claimJob` then `completeJob` of what it claimed, sequential on each of C
   connections (worker key), against the baseline's `/claim` + `/complete` (the same
   UPDATEs on stdlib sqlite3). Both queues are kept filled between rounds.
Figures 1 and 2 also run a third server, `queuelog serve --no-compiled`
(QUEUELOG_COMPILED=false: every request through Strawberry, no precompiled plan), in the
same alternation, so the table shows what queuelog/compiled buys.

w. `enqueueJob` on `queuelog serve --workers 2` against `--workers 1` (not a target; CPU
   is that of the whole process tree).

On `--database postgresql` queuelog serves from a fresh PostgreSQL database and the
baseline is `_baseline_pg_app.py` (Starlette + psycopg 3 async, the same statements on its
own database); lines for the CPU of each side's PostgreSQL backends are added. Before each
round of figure 2 both tables get VACUUM ANALYZE (Context.maintain).

Load: wrk with a Lua script (one thread; for figure 2 one thread per connection, each
holding its claimed job), or this process's asyncio client when wrk is missing.
"""

from __future__ import annotations

import functools
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench._api import COMPLETE, ENQUEUE, RESULT, Api, enqueue_many
from bench._common import PYTHON, HttpConnection, ServerProcess, bearer, graphql_body
from bench._context import Context
from bench._loadgen import (
    Round,
    alternate,
    claim_complete_script,
    pool,
    round_summary,
    run_python,
    run_wrk,
    static_post_script,
    static_post_step,
    weighted_percentile,
)
from bench._report import Figure, ms, num, ratio, rx

CLAIM_NOW = "mutation Claim { claimJob { id type payload attempt } }"
PAD = "x" * 24


def enqueue_body() -> bytes:
    return graphql_body(
        ENQUEUE, {"input": {"type": "noop", "payload": {"n": 1, "to": "u1@example.com", "p": PAD}}}
    )


def client_name(ctx: Context, threads: int | None = None) -> str:
    if not ctx.settings.use_wrk:
        return "python asyncio client"
    return f"wrk -t{threads or ctx.settings.wrk_threads}"


def _static_load(
    ctx: Context, server: ServerProcess, path: str, headers: dict[str, str], seconds: int
) -> Round:
    s = ctx.settings
    body = enqueue_body()
    if s.use_wrk:
        script = static_post_script(body, headers)
        return run_wrk(
            server,
            path,
            script,
            connections=s.enqueue_connections,
            threads=s.wrk_threads,
            seconds=seconds,
            workdir=ctx.dir(),
        )
    return run_python(
        server,
        static_post_step(path, body, b'"id"'),
        headers=headers,
        connections=s.enqueue_connections,
        seconds=seconds,
    )


def _check_once(server: ServerProcess, path: str, headers: dict[str, str], body: bytes, ctx: Context) -> None:
    async def go() -> None:
        conn = HttpConnection(server.url, headers)
        try:
            status, answer = await conn.post(path, body)
        finally:
            await conn.close()
        if status != 200 or b'"errors"' in answer or b'"id"' not in answer:
            raise RuntimeError(f"{server.name} answered {status}: {answer[:300]!r}")

    ctx.run(go())


def _rate_rows(
    fig: Figure,
    title: str,
    unit: str,
    q: Round,
    b: Round,
    q_ops: int,
    b_ops: int,
    ctx: Context,
    target: float | None,
    op_name: str,
    threads: int | None = None,
    indent: str = "",
    label: str = "baseline",
) -> None:
    q_rate, b_rate = q_ops / q.seconds, b_ops / b.seconds
    r = ratio(q_rate, b_rate)
    met = None if target is None or r is None else r >= target
    fig.add(
        indent + title,
        num(q_rate, 0, unit),
        num(b_rate, 0, unit),
        rx(r),
        f">= {target}x" if target else "",
        met=met,
    )
    qp = [weighted_percentile(q.points, p) for p in (50, 99)]
    bp = [weighted_percentile(b.points, p) for p in (50, 99)]
    fig.add(
        indent + "  latency p50 / p99, ms (per request)",
        f"{ms(qp[0])} / {ms(qp[1])}",
        f"{ms(bp[0])} / {ms(bp[1])}",
        f"{rx(ratio(qp[0], bp[0]))} / {rx(ratio(qp[1], bp[1]))}",
    )
    q_cpu = q.server_cpu / q_ops if q.server_cpu is not None and q_ops else None
    b_cpu = b.server_cpu / b_ops if b.server_cpu is not None and b_ops else None
    fig.add(f"{indent}  server CPU per {op_name}, ms", ms(q_cpu), ms(b_cpu), rx(ratio(q_cpu, b_cpu)))
    if q.db_cpu is not None and b.db_cpu is not None:
        q_db = q.db_cpu / q_ops if q_ops else None
        b_db = b.db_cpu / b_ops if b_ops else None
        fig.add(f"{indent}  PostgreSQL CPU per {op_name}, ms", ms(q_db), ms(b_db), rx(ratio(q_db, b_db)))
        q_all = q_cpu + q_db if q_cpu is not None and q_db is not None else None
        b_all = b_cpu + b_db if b_cpu is not None and b_db is not None else None
        fig.add(indent + "  server + PostgreSQL CPU, ms", ms(q_all), ms(b_all), rx(ratio(q_all, b_all)))
    fig.add(
        f"{indent}  client CPU ({client_name(ctx, threads)}), of wall",
        num(100 * (q.client_cpu or 0) / q.seconds, 0, "%"),
        num(100 * (b.client_cpu or 0) / b.seconds, 0, "%"),
    )
    for who, r_ in (("queuelog", q), (label, b)):
        if r_.client_cpu is not None and r_.client_cpu / r_.seconds > 0.6:
            fig.notes.append(
                f"the load generator used {100 * r_.client_cpu / r_.seconds:.0f}% CPU on {who}: "
                "it may be what limits that rate"
            )
        if r_.errors:
            fig.notes.append(f"{who}: {r_.errors} failed requests; first: {r_.first_error}")


UNCOMPILED = ("--no-compiled",)
# PostgreSQL: the second baseline of figures 1 and 2, which the target compares against.
SAME_TITLE = "same statements, bare (_baseline_pg_same_app)"
SAME_LABEL = "same-statements baseline"


@functools.cache
def compiled_switch_available() -> bool:
    """Whether the queuelog under test has QUEUELOG_COMPILED. An older checkout measured
    through PYTHONPATH does not: its figures then leave that line out."""
    shown = subprocess.run(
        [PYTHON, "-m", "queuelog", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # not the project root, which would shadow PYTHONPATH
    )
    return "--no-compiled" in shown.stdout


def _uncompiled_row(fig: Figure, unit: str, q_ops: int, q: Round, u_ops: int, u: Round) -> None:
    """The same figure on `serve --no-compiled`, beside the compiled server's rate."""
    q_rate, u_rate = q_ops / q.seconds, u_ops / u.seconds
    up = [weighted_percentile(u.points, p) for p in (50, 99)]
    fig.add(
        "  the same, QUEUELOG_COMPILED=false (queuelog / that)",
        num(u_rate, 0, unit),
        f"p50 / p99 {ms(up[0])} / {ms(up[1])} ms",
        rx(ratio(q_rate, u_rate)),
    )
    if u.errors:
        fig.notes.append(f"QUEUELOG_COMPILED=false: {u.errors} failed requests; first: {u.first_error}")


def per_round(q: list[Round], b: list[Round], key: Callable[[Round], float]) -> str:
    return "  ".join(f"{key(x) / key(y):.2f}x" for x, y in zip(q, b, strict=True))


# --- figure 1 --------------------------------------------------------------------------------


def enqueue_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    baseline_db = ctx.baseline_db()
    queuelog, baseline = ctx.pair(baseline_db)
    producer = ctx.keys(queuelog, [("bench-producer", "producer")])["bench-producer"]
    targets = {
        "queuelog": (queuelog, "/graphql", bearer(producer)),
        "baseline": (baseline, "/enqueue", {}),
    }
    same_db = ctx.same_sql_db() if s.postgres else None
    if same_db is not None:
        targets["same"] = (ctx.baseline(same_db, name="same"), "/enqueue", {})
    if compiled_switch_available():
        uncompiled = ctx.queuelog(extra_args=UNCOMPILED, name="uncompiled")
        uncompiled_producer = ctx.keys(uncompiled, [("bench-producer", "producer")])["bench-producer"]
        targets["uncompiled"] = (uncompiled, "/graphql", bearer(uncompiled_producer))
    for server, path, headers in targets.values():
        _check_once(server, path, headers, enqueue_body(), ctx)
    warm = {name: _static_load(ctx, *t, seconds=1) for name, t in targets.items()}

    with ctx.profile(queuelog):
        rounds = alternate(
            {
                name: (lambda i, t=t: _static_load(ctx, *t, seconds=s.http_seconds))
                for name, t in targets.items()
            },
            s.http_rounds,
        )
    q, b = pool(rounds["queuelog"]), pool(rounds["baseline"])
    _rate_rows(
        fig,
        f"enqueueJob, {s.enqueue_connections} connections",
        "req/s",
        q,
        b,
        q.requests,
        b.requests,
        ctx,
        None if same_db is not None else 0.5,
        "request",
    )
    sm = pool(rounds["same"]) if "same" in rounds else None
    if sm is not None:
        _rate_rows(
            fig, SAME_TITLE, "req/s", q, sm, q.requests, sm.requests, ctx, 0.5, "request", label=SAME_LABEL
        )
    u = pool(rounds["uncompiled"]) if "uncompiled" in rounds else None
    if u is not None:
        _uncompiled_row(fig, "req/s", q.requests, q, u.requests, u)
    fig.notes.append(
        "per-round throughput ratios: " + per_round(rounds["queuelog"], rounds["baseline"], lambda r: r.rate)
    )
    if sm is not None:
        fig.notes.append(
            "per-round ratios to the same statements: "
            + per_round(rounds["queuelog"], rounds["same"], lambda r: r.rate)
        )

    # Every answered request must have stored one job (wrk cannot check bodies cheaply).
    answered_q = q.requests + warm["queuelog"].requests + 1
    answered_b = b.requests + warm["baseline"].requests + 1

    async def stored() -> int:
        async with Api(queuelog.url, queuelog.admin_key) as api:
            return sum((await api.counts()).values())

    stored_q, stored_b = ctx.run(stored()), baseline_db.count()
    slack = s.enqueue_connections * (s.http_rounds + 1)
    checks = [("queuelog", answered_q, stored_q), ("baseline", answered_b, stored_b)]
    if sm is not None and same_db is not None:
        checks.append((SAME_LABEL, sm.requests + warm["same"].requests + 1, same_db.count()))
    for label, answered, count in checks:
        if not answered <= count <= answered + slack:
            fig.notes.append(f"{label}: {answered} requests answered but {count} jobs stored")
    fig.data = {
        "client": client_name(ctx),
        "connections": s.enqueue_connections,
        "queuelog": round_summary(q),
        "baseline": round_summary(b),
        "same_statements": round_summary(sm) if sm is not None else None,
        "uncompiled": round_summary(u) if u is not None else None,
        "rounds": {k: [round_summary(r) for r in v] for k, v in rounds.items()},
        "jobs_stored": {label: count for label, _, count in checks},
    }


# --- figure 2 --------------------------------------------------------------------------------


def claim_complete_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    work = ctx.dir()
    baseline_db = ctx.baseline_db()
    queuelog, baseline = ctx.pair(baseline_db)
    specs = [("bench-producer", "producer"), ("bench-worker", "worker")]
    keys = ctx.keys(queuelog, specs)
    claim_body = graphql_body(CLAIM_NOW).decode()
    template = json.dumps(
        {"query": COMPLETE, "variables": {"id": "@ID@", "attempt": 7777777, "result": RESULT}},
        separators=(",", ":"),
    )
    complete_format = template.replace('"@ID@"', '"%s"').replace("7777777", "%s")
    targets: dict[str, tuple[ServerProcess, str, str, dict[str, str]]] = {
        "queuelog": (queuelog, "/graphql", "/graphql", bearer(keys["bench-worker"])),
        "baseline": (baseline, "/claim", "/complete", {}),
    }
    databases = {"baseline": baseline_db}
    if s.postgres:
        databases["same"] = ctx.same_sql_db()
        targets["same"] = (ctx.baseline(databases["same"], name="same"), "/claim", "/complete", {})
    producers = {"queuelog": keys["bench-producer"]}
    if compiled_switch_available():
        uncompiled = ctx.queuelog(extra_args=UNCOMPILED, name="uncompiled")
        uncompiled_keys = ctx.keys(uncompiled, specs)
        targets["uncompiled"] = (uncompiled, "/graphql", "/graphql", bearer(uncompiled_keys["bench-worker"]))
        producers["uncompiled"] = uncompiled_keys["bench-producer"]
    best_rate = {"queuelog": 1000.0, "baseline": 5000.0, "same": 2000.0, "uncompiled": 1000.0}

    def pending(name: str) -> int:
        if name in databases:
            return databases[name].count("WHERE status = 'pending'")
        server = targets[name][0]

        async def go() -> int:
            async with Api(server.url, server.admin_key) as api:
                return (await api.counts())["pending"]

        return int(ctx.run(go()))

    def top_up(name: str, seconds: int) -> None:
        """Enough pending jobs for `seconds` at twice the best rate seen so far, and at least 4000."""
        need = int(max(4000, 2 * best_rate[name] * seconds)) - pending(name)
        if need <= 0:
            return
        if name in databases:
            databases[name].insert_pending(need)
        else:
            ctx.run(enqueue_many(targets[name][0].url, producers[name], need, batch=1000, connections=2))

    def load(name: str, seconds: int) -> Round:
        top_up(name, seconds)
        if name in databases:
            databases[name].maintain()
        else:
            ctx.maintain(targets[name][0])
        server, claim_path, complete_path, headers = targets[name]
        if s.use_wrk:
            script = claim_complete_script(claim_path, claim_body, complete_path, complete_format, headers)
            result = run_wrk(
                server,
                claim_path,
                script,
                connections=s.claim_connections,
                threads=s.claim_connections,
                seconds=seconds,
                workdir=work,
            )
        else:
            result = run_python(
                server,
                _claim_complete_step(claim_path, claim_body.encode(), complete_path, complete_format),
                headers=headers,
                connections=s.claim_connections,
                seconds=seconds,
            )
        done = result.counters.get("completed", 0)
        best_rate[name] = max(best_rate[name], done / result.seconds)
        if result.counters.get("empty"):
            # Ran dry, or answered null while jobs were pending? (The latter breaks the contract.)
            result.counters["pending_after_empty_round"] = pending(name)
        return result

    for name in targets:
        load(name, 1)  # warm-up
    with ctx.profile(queuelog):
        rounds = alternate(
            {name: (lambda i, n=name: load(n, s.http_seconds)) for name in targets}, s.http_rounds
        )
    q, b = pool(rounds["queuelog"]), pool(rounds["baseline"])
    q_done, b_done = q.counters.get("completed", 0), b.counters.get("completed", 0)
    _rate_rows(
        fig,
        f"claimJob + completeJob, {s.claim_connections} conns",
        "rt/s",
        q,
        b,
        q_done,
        b_done,
        ctx,
        None if "same" in rounds else 0.5,
        "round trip",
        s.claim_connections,
    )
    sm = pool(rounds["same"]) if "same" in rounds else None
    if sm is not None:
        sm_done = sm.counters.get("completed", 0)
        _rate_rows(
            fig,
            SAME_TITLE,
            "rt/s",
            q,
            sm,
            q_done,
            sm_done,
            ctx,
            0.5,
            "round trip",
            s.claim_connections,
            label=SAME_LABEL,
        )
    u = pool(rounds["uncompiled"]) if "uncompiled" in rounds else None
    if u is not None:
        _uncompiled_row(fig, "rt/s", q_done, q, u.counters.get("completed", 0), u)
    fig.notes.append(
        "per-round round-trip ratios: "
        + per_round(
            rounds["queuelog"], rounds["baseline"], lambda r: r.counters.get("completed", 0) / r.seconds
        )
    )
    if sm is not None:
        fig.notes.append(
            "per-round round-trip ratios to the same statements: "
            + per_round(
                rounds["queuelog"], rounds["same"], lambda r: r.counters.get("completed", 0) / r.seconds
            )
        )
    checked = [("queuelog", q), ("baseline", b)] + ([(SAME_LABEL, sm)] if sm is not None else [])
    for label, r in checked:
        if r.counters.get("empty"):
            left = r.counters.get("pending_after_empty_round", 0)
            fig.notes.append(
                f"{label}: {r.counters['empty']} claims answered null"
                + (
                    f", though {left} jobs were still PENDING after those rounds"
                    if left
                    else " (the queue ran dry)"
                )
            )
    fig.data = {
        "client": client_name(ctx, s.claim_connections),
        "connections": s.claim_connections,
        "queuelog": round_summary(q, q_done),
        "baseline": round_summary(b, b_done),
        "same_statements": round_summary(sm, sm.counters.get("completed", 0)) if sm is not None else None,
        "uncompiled": round_summary(u, u.counters.get("completed", 0)) if u is not None else None,
        "rounds": {
            k: [round_summary(r, r.counters.get("completed", 0)) for r in v] for k, v in rounds.items()
        },
    }


def _claim_complete_step(claim_path: str, claim_body: bytes, complete_path: str, complete_format: str) -> Any:
    async def step(conn: HttpConnection, state: dict[str, Any], counters: dict[str, int]) -> float:
        started = time.perf_counter()
        held = state.pop("held", None)
        if held is not None:
            body = (complete_format % held).encode()
            status, answer = await conn.post(complete_path, body)
            key = "bad" if status != 200 or b'"errors"' in answer else "completed"
        else:
            status, answer = await conn.post(claim_path, claim_body)
            key = "bad"
            if status == 200 and b'"errors"' not in answer:
                document = json.loads(answer)
                is_graphql = isinstance(document, dict) and "data" in document
                job = document["data"]["claimJob"] if is_graphql else document
                if job:
                    state["held"] = (job["id"], job["attempt"])
                    key = "claimed"
                else:
                    key = "empty"
        counters[key] = counters.get(key, 0) + 1
        return time.perf_counter() - started

    return step


# --- optional: serve --workers 2 vs --workers 1 ------------------------------------------------


def workers_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    one = ctx.queuelog(name="workers1")
    two = ctx.queuelog(extra_args=("--workers", "2"), name="workers2")
    two.whole_tree = one.whole_tree = True
    time.sleep(2)  # /healthz answers when the first worker process serves
    keys = {
        n: ctx.keys(srv, [("bench-producer", "producer")])["bench-producer"]
        for n, srv in (("one", one), ("two", two))
    }
    targets = {
        "workers=2": (two, "/graphql", bearer(keys["two"])),
        "workers=1": (one, "/graphql", bearer(keys["one"])),
    }
    for t in targets.values():
        _static_load(ctx, *t, seconds=1)
    rounds = alternate(
        {name: (lambda i, t=t: _static_load(ctx, *t, seconds=s.http_seconds)) for name, t in targets.items()},
        s.http_rounds,
    )
    q, b = pool(rounds["workers=2"]), pool(rounds["workers=1"])
    _rate_rows(
        fig,
        f"enqueueJob, {s.enqueue_connections} conns, 2 processes",
        "req/s",
        q,
        b,
        q.requests,
        b.requests,
        ctx,
        None,
        "request",
    )
    fig.data = {"workers2": round_summary(q), "workers1": round_summary(b)}
