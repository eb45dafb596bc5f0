"""A randomised, model-checked concurrency test: a seeded random history through several
servers, checked against the contract's rules at every moment (tests/history/).

On PostgreSQL three `queuelog serve` processes share the database (one hears the others by
the job_events tail, two by LISTEN/NOTIFY, and one of those LISTEN connections is ended
mid-run); on SQLite one `queuelog serve --workers 2`. Producers,
workers and an admin run random mixes of every operation on random servers (section 12's
too: cancels of running jobs, snoozes, expiring jobs, edits and run-nows racing claims,
progress reports) while subscribers follow a sample of the jobs; then a drain, and the
checker replays the history.

The seed is QUEUELOG_HISTORY_SEED (`random` for a new one each run), else DEFAULT_SEED; it
fixes the operations, not their interleavings. A failure prints the seed, each broken
invariant with the jobs, events and operations involved, and the path of the whole history
as JSON (`cd tests && python -m history PATH` checks it again). The checker never judges
timings, so the test is as stable under `pytest -n` as the system it checks.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from conftest import Databases
from history.checker import check
from history.deployment import start_deployment
from history.generator import TYPE_NAMES
from history.harness import HarnessError, Sizes, run_history
from history.model import History
from history.report import render, summary

DEFAULT_SEED = 2029
SERVERS = {"postgresql": 3, "sqlite": 1}
# Server bugs the checker found and that are not fixed yet: a history whose only violations
# are of these invariants is an expected failure (xfail), with the report printed.
KNOWN_BUGS: dict[str, str] = {}


def history_seed() -> int:
    chosen = os.environ.get("QUEUELOG_HISTORY_SEED", "")
    if chosen == "random":
        return random.SystemRandom().randrange(1, 2**31)
    return int(chosen) if chosen else DEFAULT_SEED


def history_path(tmp_path: Path, history: History) -> Path:
    directory = Path(os.environ.get("QUEUELOG_HISTORY_DIR", tmp_path))
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"history-{history.backend}-{history.seed}.json"


def test_a_random_history_keeps_every_invariant(
    backend: str, databases: Databases, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    seed = history_seed()
    deployment = start_deployment(
        backend, databases.fresh(), lambda: tmp_path_factory.mktemp("server"), SERVERS[backend], TYPE_NAMES
    )
    try:
        history = run_history(deployment, seed, Sizes())
    except HarnessError as failed:
        saved = failed.history.save(history_path(tmp_path, failed.history))
        pytest.fail(f"seed {seed}: {failed} (history so far: {saved})")
    finally:
        deployment.stop()
    found = check(history)
    saved = history.save(history_path(tmp_path, history))
    print(
        f"\nseed {seed} on {backend}: {len(history.ops)} operations, {len(history.final.jobs)} jobs,"
        f" {len(history.subscriptions)} subscriptions; history in {saved}\n{summary(found)}"
    )
    known = set(found.failed()) & set(KNOWN_BUGS)
    if known and set(found.failed()) <= known:
        reasons = "; ".join(KNOWN_BUGS[name] for name in sorted(known))
        print(render(history, found, saved))
        pytest.xfail(f"known server bug: {reasons}")
    assert found.ok, render(history, found, saved)
