"""`python -m bench.history_soak`: the randomised, model-checked history (tests/history/) for
N minutes, round after round, each with a kill -9 of a server mid-run.

    .venv/bin/python -m bench.history_soak                          # 10 minutes on SQLite
    .venv/bin/python -m bench.history_soak --database postgresql    # 3 servers on PostgreSQL
    .venv/bin/python -m bench.history_soak --minutes 2 --seed 7     # the first round's seed

Each round starts a fresh deployment on a fresh database (SQLite: `queuelog serve --workers
2`, one worker process killed and brought back by uvicorn; PostgreSQL: --servers separate
servers, one killed and started again on its port, and one server's LISTEN connection ended),
runs a history bigger than the CI test's, drains, and checks it. It prints each round's
figures and, at the end, the totals: operations run, invariant checks made, the seeds used,
and the violations by invariant. A failed round's whole history is written as JSON beside
the results (`cd tests && python -m history PATH` checks it again). Exit status 1 when any
round broke an invariant.

Needs the test extra (`pip install -e '.[test]'`): the harness starts servers with
tests/conftest.py's helpers.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import POSTGRES, postgres_unreachable  # noqa: E402
from history.checker import check  # noqa: E402
from history.deployment import start_deployment  # noqa: E402
from history.generator import TYPE_NAMES  # noqa: E402
from history.harness import HarnessError, Sizes, run_history  # noqa: E402
from history.report import render, summary  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ROUND = Sizes(
    producer_steps=600,
    worker_steps=1000,
    admin_steps=450,
    kills=1,
    main_seconds=300,
    drain_seconds=180,
)


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.history_soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to go on starting rounds (10)")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--servers", type=int, default=3, help="PostgreSQL: servers sharing the database (3)")
    parser.add_argument("--seed", type=int, default=None, help="the first round's seed (default: a new one)")
    return parser.parse_args(argv)


def database_url(backend: str, directory: Path) -> tuple[str, str | None]:
    """A fresh database: its URL, and the PostgreSQL database's name (to drop after)."""
    if backend == "sqlite":
        return f"sqlite:///{directory / 'queuelog.db'}", None
    name = POSTGRES.create()
    return POSTGRES.url(name), name


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.database == "postgresql" and (reason := postgres_unreachable()):
        print(reason, file=sys.stderr)
        return 2
    seeds = random.Random(args.seed) if args.seed is not None else random.SystemRandom()
    deadline = time.monotonic() + args.minutes * 60
    RESULTS.mkdir(exist_ok=True)
    totals: Counter[str] = Counter()
    broken: Counter[str] = Counter()
    used: list[int] = []
    workdir = Path(tempfile.mkdtemp(prefix="queuelog-soak-"))
    try:
        while time.monotonic() < deadline:
            seed = args.seed if args.seed is not None and not used else seeds.randrange(1, 2**31)
            used.append(seed)
            round_dir = workdir / f"round-{len(used)}"
            round_dir.mkdir()
            url, name = database_url(args.database, round_dir)
            started = time.monotonic()
            deployment = start_deployment(
                args.database,
                url,
                lambda d=round_dir: Path(tempfile.mkdtemp(prefix="server-", dir=d)),
                args.servers if args.database == "postgresql" else 1,
                TYPE_NAMES,
            )
            try:
                history = run_history(deployment, seed, ROUND)
            except HarnessError as failed:
                saved = failed.history.save(RESULTS / f"history-{args.database}-{seed}.json")
                print(
                    f"round {len(used)} seed {seed}: the harness failed: {failed}\n  history so far: {saved}"
                )
                broken["harness"] += 1
                continue
            finally:
                deployment.stop()
                if name is not None:
                    POSTGRES.drop_later(name)
            found = check(history)
            checks = sum(found.checks.values())
            totals.update(operations=len(history.ops), checks=checks, jobs=len(history.final.jobs))
            totals.update(kills=sum(1 for i in history.incidents if i.what == "kill"))
            broken.update(found.failed())
            print(
                f"round {len(used)} seed {seed}: {len(history.ops)} operations, {len(history.final.jobs)}"
                f" jobs, {checks} invariant checks, {len(found.violations)} violations"
                f" ({time.monotonic() - started:.0f} s; {'; '.join(i.detail for i in history.incidents)})",
                flush=True,
            )
            if not found.ok:
                saved = history.save(RESULTS / f"history-{args.database}-{seed}.json")
                print(render(history, found, saved))
                print(summary(found))
    finally:
        POSTGRES.finish()
        if not broken:
            shutil.rmtree(workdir, ignore_errors=True)
    if broken:
        print(f"\nservers' logs kept in {workdir}")
    print(
        f"\n{args.database}: {len(used)} rounds in {args.minutes:g} min, {totals['operations']} operations,"
        f" {totals['jobs']} jobs, {totals['checks']} invariant checks, {totals['kills']} kill -9"
    )
    print(f"seeds: {' '.join(map(str, used))}")
    print("violations: " + (", ".join(f"{k} {n}" for k, n in broken.most_common()) or "none"))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
