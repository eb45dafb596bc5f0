"""What every figure gets: the options, a temp directory, and a place to register cleanups."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import (
    ServerProcess,
    make_keys,
    py_spy,
    queuelog_ready,
    sqlite_url,
    start_queuelog,
    start_uvicorn,
    stderr,
    wait_healthy,
)
from bench._loadgen import wrk_path


@dataclass
class Settings:
    """Sizes and durations of every figure; `--quick` and the flags set them."""

    quick: bool
    use_wrk: bool
    wrk_threads: int
    http_seconds: int  # per round of figures 1, 2 (and workers)
    http_rounds: int
    enqueue_connections: int
    claim_connections: int
    batch_jobs: int  # most jobs per phase of figure 3
    batch_seconds: float  # and most seconds per phase
    batch_connections: int
    e2e_jobs: int
    e2e_concurrency: int
    huey_workers: tuple[int, ...]
    dispatch_samples: int
    growth_jobs: int
    growth_small: int
    growth_samples: int
    growth_op_seconds: float
    rss_seconds: float
    rss_interval: float
    rss_window: float
    soak_rate: float  # requests/s per soak client, 0 = as fast as answers come

    @classmethod
    def make(cls, quick: bool, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "quick": quick,
            "use_wrk": wrk_path() is not None,
            "wrk_threads": 1,
            "http_seconds": 2 if quick else 8,
            "http_rounds": 2 if quick else 3,
            "enqueue_connections": 32,
            "claim_connections": 16,
            "batch_jobs": 30_000 if quick else 200_000,
            "batch_seconds": 3.0 if quick else 10.0,
            "batch_connections": 4,
            "e2e_jobs": 10_000,
            "e2e_concurrency": 64,
            "huey_workers": (4, 16),
            "dispatch_samples": 50 if quick else 300,
            "growth_jobs": 100_000 if quick else 1_000_000,
            "growth_small": 1_000,
            "growth_samples": 20 if quick else 100,
            "growth_op_seconds": 1.5 if quick else 6.0,
            "rss_seconds": 45.0 if quick else 300.0,
            "rss_interval": 5.0 if quick else 10.0,
            "rss_window": 15.0 if quick else 60.0,
            "soak_rate": 25.0,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class Context:
    settings: Settings
    root: Path  # the run's temp directory
    stack: contextlib.ExitStack
    py_spy_path: str | None = None
    name: str = ""
    runner: asyncio.Runner | None = field(default=None, repr=False)

    def dir(self) -> Path:
        path = self.root / self.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def server(self, server: ServerProcess) -> ServerProcess:
        self.stack.callback(self._stop, server)
        return server

    def _stop(self, server: ServerProcess) -> None:
        started = time.perf_counter()
        server.stop()
        took = time.perf_counter() - started
        if took > 2:
            self.log(f"{server.name} took {took:.1f} s to exit after SIGTERM")

    def queuelog(
        self,
        job_types: str = "noop",
        extra_args: tuple[str, ...] = (),
        name: str = "queuelog",
        wait: bool = True,
    ) -> ServerProcess:
        """A fresh `queuelog serve`; with wait=False, call `ready` on it before use."""
        db = sqlite_url(self.dir() / f"{name}.db")
        server = start_queuelog(
            self.dir(), db, job_types=job_types, extra_args=extra_args, name=name, wait=False
        )
        self.server(server)
        return queuelog_ready(server) if wait else server

    def baseline(self, db: Path, name: str = "baseline", wait: bool = True) -> ServerProcess:
        """The bare Starlette baseline (`_baseline_app.py`) on database file `db`."""
        env = {"BENCH_BASELINE_DB": str(db)}
        return self.server(
            start_uvicorn(self.dir(), "_baseline_app:create_app", env=env, name=name, wait=wait)
        )

    def pair(self, baseline_db: Path, job_types: str = "noop") -> tuple[ServerProcess, ServerProcess]:
        """queuelog and the bare baseline, started side by side: (queuelog, baseline)."""
        queuelog = self.queuelog(job_types=job_types, wait=False)
        baseline = self.baseline(baseline_db, wait=False)
        wait_healthy(baseline)
        return queuelog_ready(queuelog), baseline

    def keys(self, server: ServerProcess, specs: list[tuple[str, str]]) -> dict[str, str]:
        return make_keys(server.database_url, specs)

    def run(self, coroutine: Any) -> Any:
        assert self.runner is not None
        return self.runner.run(coroutine)

    @contextlib.contextmanager
    def profile(self, server: ServerProcess) -> Iterator[None]:
        """py-spy on `server` while the block runs, when --py-spy was given."""
        with py_spy(server.pid if self.py_spy_path else None, self.py_spy_path):
            yield

    def log(self, message: str) -> None:
        stderr(f"    [{self.name}] {message}")
