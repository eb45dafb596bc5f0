"""`python -m bench`: every figure of issue 6 beside its baseline, one table, JSON.

    .venv/bin/python -m bench --quick                 # under 2 minutes
    .venv/bin/python -m bench                         # the full run, ~10 minutes
    .venv/bin/python -m bench --only enqueue,claim    # some figures
    .venv/bin/python -m bench --only growth --growth-jobs 200000
    .venv/bin/python -m bench --only enqueue --py-spy /tmp/enqueue.svg
    .venv/bin/python -m bench --database postgresql --quick   # the same figures on PostgreSQL

Each figure starts its own servers (queuelog and its baseline) on 127.0.0.1 free ports with
fresh SQLite files in a temp directory (with --database postgresql: fresh PostgreSQL
databases, created and dropped on --postgres-url's cluster), drives a bounded load, and
stops them. See bench/README.md for what each figure and baseline is.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import (
    _pg,
    fig_backlog,
    fig_batch,
    fig_dispatch,
    fig_e2e,
    fig_flow,
    fig_growth,
    fig_http,
    fig_rss,
    fig_scale,
    fig_schedules_deps,
)
from bench._common import BENCH_DIR, Cleanup, event_loop_runner, machine_line, stderr
from bench._context import Context, Settings
from bench._loadgen import wrk_path
from bench._report import Figure, format_table

FigureFn = Callable[[Context, Figure], None]
# name: (number, title, baseline, function, in the default set)
FIGURES: dict[str, tuple[int, str, str, FigureFn, bool]] = {
    "enqueue": (
        1,
        "single enqueueJob over HTTP",
        "bare Starlette + stdlib sqlite3 on the loop, one INSERT",
        fig_http.enqueue_figure,
        True,
    ),
    "claim": (
        2,
        "claimJob + completeJob round trip",
        "bare Starlette + sqlite3, the same claim/complete UPDATEs",
        fig_http.claim_complete_figure,
        True,
    ),
    "batch": (
        3,
        "batches of 100 over HTTP, jobs/s",
        "raw sqlite3 in this process, same batches (a ceiling)",
        fig_batch.batch_figure,
        True,
    ),
    "e2e": (
        4,
        "end to end: one queuelog worker drains no-op jobs",
        "huey consumer (SqliteHuey, threads), best of its worker counts",
        fig_e2e.e2e_figure,
        True,
    ),
    "dispatch": (
        5,
        "dispatch latency to a long-polling claimJob",
        "bare Starlette + sqlite3 long poll (asyncio future)",
        fig_dispatch.dispatch_figure,
        True,
    ),
    "growth": (
        6,
        "latency with many jobs in the table vs 1k",
        "the same queuelog server with 1k jobs",
        fig_growth.growth_figure,
        True,
    ),
    "rss": (
        7,
        "server memory under steady mixed load",
        "the same server's RSS before the load",
        fig_rss.rss_figure,
        True,
    ),
    "workers": (
        8,
        "enqueueJob on serve --workers 2 (not a target)",
        "queuelog serve --workers 1",
        fig_http.workers_figure,
        False,
    ),
    "backlog": (
        9,
        "backlog shapes (issue 16): latency with a big backlog vs 1k",
        "a queuelog server with 1k jobs of the same shape",
        fig_backlog.backlog_figure,
        False,
    ),
    "flow": (
        10,
        "flow control (issue 16): cost of controls, head-of-line, rate limit, bulk retry",
        "the same requests without the control, backlog or bulk action, same run",
        fig_flow.flow_figure,
        False,
    ),
    "deps+schedules": (
        11,
        "dependencies and schedules (issue 17): their cost, chains, fan-in, cascade, ticks",
        "the same without the feature: commit before it, independent jobs, plain enqueue, idle",
        fig_schedules_deps.deps_figure,
        False,
    ),
    "scale": (
        12,
        "scaling out (issue 31): 1, 2, 3 servers on one PostgreSQL database, a worker each",
        "the same jobs through 1 server and its worker, same run",
        fig_scale.scale_figure,
        False,
    ),
}
# The baseline column on `--database postgresql` where it differs from SQLite's.
POSTGRES_BASELINES = {
    "enqueue": "bare Starlette + psycopg 3 async (8 conns), one INSERT; then queuelog's own statements",
    "claim": "bare Starlette + psycopg 3 async, the same UPDATEs (SKIP LOCKED); then queuelog's own SQL",
    "batch": "raw psycopg (sync) in this process, same batches (a ceiling); then queuelog's own SQL",
    "e2e": "PgQueuer's worker (pgqueuer.run), then procrastinate's worker; best config of each",
    "dispatch": "bare Starlette + psycopg 3 on PostgreSQL, long poll (asyncio future)",
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="short rounds and smaller sizes (under 2 minutes)"
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=str(BENCH_DIR / "results" / "latest.json"),
        help="write every figure as JSON here (default bench/results/latest.json)",
    )
    parser.add_argument(
        "--only",
        metavar="NAMES",
        help="comma-separated figures: "
        + ", ".join(FIGURES)
        + " (default: all but workers, backlog, flow, deps+schedules and scale)",
    )
    parser.add_argument(
        "--py-spy",
        metavar="PATH",
        help="profile the queuelog server of each figure with py-spy during its measured part "
        "(.svg flamegraph, .txt collapsed stacks); with several figures, the name goes before the suffix",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp directory (logs, databases)")
    parser.add_argument(
        "--no-wrk", action="store_true", help="use the Python load generator even if wrk is installed"
    )
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="where queuelog and the bare baselines keep their jobs (default sqlite); postgresql: "
        "a fresh database per server on --postgres-url's cluster, dropped afterwards, and figure 4 "
        "against PgQueuer instead of huey",
    )
    parser.add_argument(
        "--postgres-url",
        metavar="URL",
        default=_pg.DEFAULT_URL,
        help="a database on the PostgreSQL cluster to use; the bench connects to it to create and "
        f"drop its own databases (default {_pg.DEFAULT_URL})",
    )
    parser.add_argument(
        "--pgqueuer-configs",
        metavar="LIST",
        help="figure 4's PgQueuer runs on PostgreSQL, comma-separated DRIVER:BATCH_SIZE:MAX_CONCURRENT_TASKS "
        "(driver asyncpg or psycopg; 0 = no limit); the best counts (default "
        + ",".join(Settings.make(False).pgqueuer_configs)
        + ")",
    )
    parser.add_argument(
        "--procrastinate-configs",
        metavar="LIST",
        help="figure 4's procrastinate runs on PostgreSQL, comma-separated worker concurrencies "
        "(each opens that many + 4 connections); the best counts (default "
        + ",".join(map(str, Settings.make(False).procrastinate_configs))
        + "; --quick "
        + ",".join(map(str, Settings.make(True).procrastinate_configs))
        + ")",
    )
    sizes = parser.add_argument_group("sizes (defaults depend on --quick)")
    sizes.add_argument("--http-seconds", type=int, help="seconds per round, figures 1 and 2 (3 / 8)")
    sizes.add_argument(
        "--http-rounds", type=int, help="alternating rounds per target, figures 1 and 2 (2 / 3)"
    )
    sizes.add_argument("--enqueue-connections", type=int, help="connections of figure 1 (32)")
    sizes.add_argument("--claim-connections", type=int, help="connections of figure 2 (16)")
    sizes.add_argument("--batch-jobs", type=int, help="most jobs per phase of figure 3 (30000 / 200000)")
    sizes.add_argument("--batch-seconds", type=float, help="most seconds per phase of figure 3 (3 / 10)")
    sizes.add_argument("--e2e-jobs", type=int, help="jobs drained in figure 4 (10000)")
    sizes.add_argument("--e2e-concurrency", type=int, help="the worker's --concurrency in figure 4 (64)")
    sizes.add_argument("--dispatch-samples", type=int, help="samples of figure 5 (50 / 300)")
    sizes.add_argument("--growth-jobs", type=int, help="jobs in the big table of figure 6 (100000 / 1000000)")
    sizes.add_argument(
        "--backlog-jobs", type=int, help="jobs in the big table of figure 9, backlog (100000 / 1000000)"
    )
    sizes.add_argument(
        "--flow-jobs",
        type=int,
        help="figure 10, flow: backlog held back and FAILED jobs retried (20000 / 100000)",
    )
    sizes.add_argument(
        "--flow-seconds", type=float, help="figure 10, flow: length of the rate-limit run (6 / 20)"
    )
    sizes.add_argument(
        "--flow-parts",
        metavar="LIST",
        help="figure 10, flow: comma-separated parts among " + ",".join(fig_flow.PARTS) + " (default all)",
    )
    sizes.add_argument(
        "--deps-before",
        metavar="DIR",
        help="figure 11, deps+schedules: a checkout of the commit before the feature, which the base "
        "part's servers run from (PYTHONPATH=DIR), e.g. `git worktree add /tmp/before 4fb5e30`",
    )
    sizes.add_argument(
        "--deps-parts",
        metavar="LIST",
        help="figure 11: comma-separated parts among "
        + ",".join(fig_schedules_deps.PARTS)
        + " (default all)",
    )
    sizes.add_argument(
        "--deps-jobs", type=int, help="figure 11: jobs of the chains part, 100 per chain (10000)"
    )
    sizes.add_argument(
        "--deps-dependents", type=int, help="figure 11: dependents cancelled by the cascade (10000)"
    )
    sizes.add_argument("--deps-schedules", type=int, help="figure 11: schedules ticking every minute (1000)")
    sizes.add_argument(
        "--deps-seconds", type=float, help="figure 11: seconds the schedules are watched (130 / 180)"
    )
    sizes.add_argument(
        "--scale-jobs", type=int, help="figure 12, scale: jobs per configuration (10000 / 20000)"
    )
    sizes.add_argument(
        "--scale-servers",
        metavar="LIST",
        help="figure 12, scale: comma-separated server counts, the first the baseline (default 1,2,3)",
    )
    sizes.add_argument(
        "--scale-rounds", type=int, help="figure 12, scale: rounds, each count once a round, alternating (2)"
    )
    sizes.add_argument("--growth-samples", type=int, help="most samples per operation in figure 6 (20 / 100)")
    sizes.add_argument("--rss-seconds", type=float, help="length of the soak of figure 7 (45 / 300)")
    sizes.add_argument(
        "--soak-rate", type=float, help="requests/s per soak client in figure 7, 0 = closed loop (25)"
    )
    args = parser.parse_args(argv)
    if args.pgqueuer_configs:
        for config in args.pgqueuer_configs.split(","):
            parts = config.strip().split(":")
            if (
                len(parts) != 3
                or parts[0] not in ("asyncpg", "psycopg")
                or not all(p.isdigit() for p in parts[1:])
            ):
                parser.error(f"--pgqueuer-configs: {config!r} is not DRIVER:BATCH_SIZE:MAX_CONCURRENT_TASKS")
    if args.procrastinate_configs:
        concurrencies = [c for c in map(str.strip, args.procrastinate_configs.split(",")) if c]
        if not concurrencies:
            parser.error("--procrastinate-configs: no concurrency given")
        for config in concurrencies:
            if not config.isdigit() or not 1 <= int(config) <= 1000:
                parser.error(f"--procrastinate-configs: {config!r} is not a concurrency within 1..1000")
    if args.flow_parts is not None:
        parts = [p.strip() for p in args.flow_parts.split(",") if p.strip()]
        if not parts or any(p not in fig_flow.PARTS for p in parts):
            parser.error(f"--flow-parts: choose from {','.join(fig_flow.PARTS)}")
    if args.deps_parts is not None:
        parts = [p.strip() for p in args.deps_parts.split(",") if p.strip()]
        if not parts or any(p not in fig_schedules_deps.PARTS for p in parts):
            parser.error(f"--deps-parts: choose from {','.join(fig_schedules_deps.PARTS)}")
    if args.deps_before is not None and not (Path(args.deps_before) / "queuelog" / "app.py").is_file():
        parser.error(f"--deps-before: {args.deps_before} holds no queuelog/app.py")
    if args.scale_servers is not None:
        counts = [c.strip() for c in args.scale_servers.split(",") if c.strip()]
        if not counts or any(not c.isdigit() or not 1 <= int(c) <= 16 for c in counts):
            parser.error("--scale-servers: comma-separated server counts within 1..16")
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    if names is not None:
        unknown = [n for n in names if n not in FIGURES]
        if unknown or not names:
            parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    args.names = names or [n for n, f in FIGURES.items() if f[4]]
    bounds = {
        "http_seconds": (1, 120),
        "http_rounds": (1, 10),
        "enqueue_connections": (1, 512),
        "claim_connections": (1, 128),
        "batch_jobs": (100, 2_000_000),
        "batch_seconds": (0.5, 120),
        "e2e_jobs": (100, 1_000_000),
        "e2e_concurrency": (1, 1000),
        "dispatch_samples": (5, 10_000),
        "growth_jobs": (2_000, 10_000_000),
        "backlog_jobs": (2_000, 10_000_000),
        "flow_jobs": (1_000, 10_000_000),
        "flow_seconds": (2, 600),
        "deps_jobs": (100, 1_000_000),
        "deps_dependents": (100, 1_000_000),
        "deps_schedules": (1, 100_000),
        "deps_seconds": (30, 3600),
        "growth_samples": (3, 10_000),
        "rss_seconds": (10, 3600),
        "soak_rate": (0, 10_000),
        "scale_jobs": (1_000, 1_000_000),
        "scale_rounds": (1, 10),
    }
    for name, (low, high) in bounds.items():
        value = getattr(args, name)
        if value is not None and not low <= value <= high:
            parser.error(f"--{name.replace('_', '-')} must be within {low}..{high}")
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {
        name: getattr(args, name)
        for name in (
            "http_seconds",
            "http_rounds",
            "enqueue_connections",
            "claim_connections",
            "batch_jobs",
            "batch_seconds",
            "e2e_jobs",
            "e2e_concurrency",
            "dispatch_samples",
            "growth_jobs",
            "backlog_jobs",
            "flow_jobs",
            "flow_seconds",
            "growth_samples",
            "rss_seconds",
            "soak_rate",
            "scale_jobs",
            "scale_rounds",
        )
    }
    settings = Settings.make(args.quick, **overrides)
    if args.no_wrk:
        settings.use_wrk = False
    settings.database = args.database
    settings.postgres_url = args.postgres_url
    if args.pgqueuer_configs:
        settings.pgqueuer_configs = tuple(c.strip() for c in args.pgqueuer_configs.split(",") if c.strip())
    if args.scale_servers:
        settings.scale_servers = tuple(int(c) for c in args.scale_servers.split(",") if c.strip())
    if args.flow_parts:
        settings.flow_parts = tuple(p.strip() for p in args.flow_parts.split(",") if p.strip())
    fig_schedules_deps.configure(
        before=args.deps_before,
        parts=tuple(p.strip() for p in args.deps_parts.split(",") if p.strip()) if args.deps_parts else None,
        jobs=args.deps_jobs,
        dependents=args.deps_dependents,
        schedules=args.deps_schedules,
        seconds=args.deps_seconds,
    )
    if args.procrastinate_configs:
        settings.procrastinate_configs = tuple(
            int(c) for c in args.procrastinate_configs.split(",") if c.strip()
        )
    return settings


def spy_path(base: str | None, name: str, several: bool) -> str | None:
    if base is None or not several:
        return base
    path = Path(base)
    return str(path.with_name(f"{path.stem}-{name}{path.suffix}"))


def git_head() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "-C", str(BENCH_DIR.parent), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return done.stdout.strip() or None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    machine = machine_line()
    database = "SQLite"
    if settings.postgres:
        try:
            version = _pg.server_version(settings.postgres_url)
            database = f"PostgreSQL {version} ({_pg.settings_line(settings.postgres_url)})"
        except Exception as exc:
            stderr(f"cannot reach PostgreSQL at {settings.postgres_url}: {type(exc).__name__}: {exc}")
            return 2
    started = time.perf_counter()
    figures: list[Figure] = []
    if not settings.use_wrk and not args.no_wrk:
        stderr("wrk is not installed (apt-get install wrk): using the Python load generator instead")
    with Cleanup(keep=args.keep) as cleanup, event_loop_runner() as runner:
        for name in args.names:
            number, title, baseline, function, _ = FIGURES[name]
            if settings.postgres:
                baseline = POSTGRES_BASELINES.get(name, baseline)
            fig = Figure(name=name, number=number, title=title, baseline=baseline)
            figures.append(fig)
            stderr(f"... figure {number} ({name}): {title}")
            fig_started = time.perf_counter()
            with contextlib.ExitStack() as stack:
                ctx = Context(
                    settings=settings,
                    root=cleanup.workdir,
                    stack=stack,
                    py_spy_path=spy_path(args.py_spy, name, len(args.names) > 1),
                    name=name,
                    runner=runner,
                    keep=args.keep,
                )
                try:
                    function(ctx, fig)
                except KeyboardInterrupt:
                    fig.error = "interrupted"
                    raise
                except Exception as exc:
                    fig.error = f"{type(exc).__name__}: {str(exc).strip()[:1500]}"
                    stderr(traceback.format_exc())
            fig.seconds = time.perf_counter() - fig_started
            stderr(f"    figure {number} ({name}) took {fig.seconds:.1f} s")
    total = time.perf_counter() - started
    mode = "--quick" if args.quick else "full"
    client = f"wrk {wrk_path()}" if settings.use_wrk else "python load generator"
    heading = f"python -m bench ({mode}; {database}; {machine}; {client}; {total:.0f} s)"
    print(format_table(heading, figures), flush=True)
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "git": git_head(),
            "mode": mode,
            "machine": machine,
            "database": database,
            "load_average_at_end": list(os.getloadavg()),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "seconds": round(total, 1),
            "settings": vars(settings)
            | {
                "huey_workers": list(settings.huey_workers),
                "pgqueuer_configs": list(settings.pgqueuer_configs),
                "procrastinate_configs": list(settings.procrastinate_configs),
                "flow_parts": list(settings.flow_parts),
                "scale_servers": list(settings.scale_servers),
            },
            "argv": list(sys.argv[1:] if argv is None else argv),
            "figures": [f.to_dict() for f in figures],
        }
        path.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {path}")
    return 1 if any(f.error for f in figures) else 0
