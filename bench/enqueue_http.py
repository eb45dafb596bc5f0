"""Single `enqueueJob` over HTTP: queuelog vs a bare Starlette + SQLAlchemy baseline.

Starts two server processes on temp SQLite files, each on a free loopback port:

- queuelog: `python -m queuelog serve --job-types noop --log-level warning`;
- baseline: bare Starlette under uvicorn the same way (`_baseline_app.py`), whose POST
  parses the same JSON body and does the same single-row INSERT into the same (migrated)
  `jobs` table with SQLAlchemy Core on stdlib sqlite3, WAL and synchronous=NORMAL.

This process is the load generator (uvloop + raw keep-alive HTTP/1.1 connections, bodies
built beforehand): C connections send up to N requests per round, one at a time each; a
round also stops starting requests after --round-seconds. Rounds alternate between the two
targets (ABBA...) so that drift in a noisy machine hits both. Throughput (requests done /
wall time) and latency percentiles are reported for both, with the ratio.

    .venv/bin/python bench/enqueue_http.py                       # defaults, under 60 s
    .venv/bin/python bench/enqueue_http.py -c 32 -n 3000 --rounds 4
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    Cleanup,
    ServerProcess,
    bearer,
    event_loop_runner,
    machine_line,
    make_keys,
    migrate,
    phase,
    print_report,
    sqlite_url,
    start_queuelog,
    start_uvicorn,
    stderr,
)
from _enqueue_load import (  # noqa: E402
    alternating_rounds,
    check_enqueued,
    load_parser,
    parse_load_args,
    per_round_ratios,
    rounds_comparison,
    warm_up,
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = load_parser(__doc__)
    parser.add_argument(
        "--py-spy",
        metavar="PATH",
        help="profile the queuelog server with py-spy during its rounds (.svg flamegraph, .txt collapsed)",
    )
    return parse_load_args(parser, argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_line()
    with Cleanup(keep=args.keep) as cleanup, event_loop_runner() as runner:
        work = cleanup.workdir
        with phase("starting servers"):
            baseline_db = sqlite_url(work / "baseline.db")
            migrate(baseline_db)  # queuelog's own tables and indexes
            baseline = cleanup.server(
                start_uvicorn(
                    work,
                    "_baseline_app:create_app",
                    env={"BENCH_BASELINE_DATABASE_URL": baseline_db},
                    name="baseline",
                )
            )
            queuelog_db = sqlite_url(work / "queuelog.db")
            queuelog = cleanup.server(start_queuelog(work, queuelog_db))
            producer = make_keys(queuelog_db, [("bench-producer", "producer")])["bench-producer"]
        targets: dict[str, tuple[ServerProcess, dict[str, str]]] = {
            "baseline": (baseline, {}),
            "queuelog": (queuelog, bearer(producer)),
        }

        warm_up(runner, args, targets, check_enqueued)
        rounds = alternating_rounds(runner, args, targets, check_enqueued, queuelog.process.pid)

    per_round = per_round_ratios(rounds["baseline"], rounds["queuelog"])
    comparison = rounds_comparison(
        args,
        f"enqueueJob, single job per request, C={args.concurrency}",
        subject=("queuelog enqueueJob", rounds["queuelog"]),
        baseline=("baseline Starlette INSERT", rounds["baseline"]),
    )
    print_report(f"bench/enqueue_http.py  ({machine})", [comparison], args.json)
    print("per-round throughput ratio: " + per_round)
    ratio = comparison.throughput_ratio
    print(
        f"target: queuelog within 2x of the baseline -> {'met' if ratio <= 2 else 'not met'} ({ratio:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stderr("interrupted")
        sys.exit(130)
