"""What every figure gets: the options, a temp directory, and a place to register cleanups."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import _baseline_app as base
from bench import _baseline_pg_same_app as same_app
from bench import _pg, _pg_same_sql
from bench._common import (
    BENCH_DIR,
    PROJECT_DIR,
    ServerProcess,
    make_keys,
    migrate,
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
    backlog_jobs: int  # the big table of figure 9 (backlog)
    flow_jobs: int  # figure 10 (flow): the held-back backlogs and the FAILED jobs retried
    flow_seconds: float  # figure 10: the length of the rate-limit run
    rss_seconds: float
    rss_interval: float
    rss_window: float
    soak_rate: float  # requests/s per soak client, 0 = as fast as answers come
    database: str = "sqlite"  # or "postgresql": where queuelog (and the baselines) keep jobs
    postgres_url: str = _pg.DEFAULT_URL  # databases are created on this cluster
    # Figure 4's first peer on PostgreSQL, PgQueuer: DRIVER:BATCH_SIZE:MAX_CONCURRENT_TASKS (0 = no limit).
    pgqueuer_configs: tuple[str, ...] = ("asyncpg:32:64", "asyncpg:64:0", "psycopg:32:64")
    # Its second peer there, procrastinate: the worker's concurrency, once per entry.
    procrastinate_configs: tuple[int, ...] = (16, 64)
    # Figure 10's parts, in order (bench/fig_flow.py).
    flow_parts: tuple[str, ...] = ("claim", "hol", "rate", "bulk")
    # Figure 12 (scale): jobs per configuration, server counts, rounds (each count once a round).
    scale_jobs: int = 20_000
    scale_servers: tuple[int, ...] = (1, 2, 3)
    scale_rounds: int = 2

    @property
    def postgres(self) -> bool:
        return self.database == "postgresql"

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
            "procrastinate_configs": (64,) if quick else (16, 64),
            "dispatch_samples": 50 if quick else 300,
            "growth_jobs": 100_000 if quick else 1_000_000,
            "growth_small": 1_000,
            "growth_samples": 20 if quick else 100,
            "growth_op_seconds": 1.5 if quick else 6.0,
            "backlog_jobs": 100_000 if quick else 1_000_000,
            "flow_jobs": 20_000 if quick else 100_000,
            "flow_seconds": 6.0 if quick else 20.0,
            "rss_seconds": 45.0 if quick else 300.0,
            "rss_interval": 5.0 if quick else 10.0,
            "rss_window": 15.0 if quick else 60.0,
            "soak_rate": 25.0,
            "scale_jobs": 10_000 if quick else 20_000,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class BaselineDb:
    """Where a bare baseline keeps its jobs: a SQLite file, or a PostgreSQL database (its URL);
    `same_sql`: a PostgreSQL database with queuelog's schema, for the same-statements baseline
    (`_baseline_pg_same_app.py`)."""

    location: str
    postgres: bool
    same_sql: bool = False

    @property
    def app(self) -> str:
        if self.same_sql:
            return "bench._baseline_pg_same_app:create_app"
        return "_baseline_pg_app:create_app" if self.postgres else "_baseline_app:create_app"

    @property
    def app_dir(self) -> Path:
        return PROJECT_DIR if self.same_sql else BENCH_DIR

    @property
    def env(self) -> dict[str, str]:
        return {"BENCH_BASELINE_PG_URL" if self.postgres else "BENCH_BASELINE_DB": self.location}

    def count(self, where: str = "") -> int:
        if self.postgres:
            return _pg.count(self.location, where)
        uri = f"file:{self.location}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
            return int(conn.execute(f"SELECT count(*) FROM jobs {where}").fetchone()[0])

    def maintain(self) -> None:
        """PostgreSQL: VACUUM ANALYZE its table (see Context.maintain); nothing on SQLite."""
        if self.same_sql:
            _pg.vacuum_analyze(self.location)  # queuelog's tables, as Context.maintain
        elif self.postgres:
            _pg.vacuum_analyze(self.location, ("jobs",))

    def insert_pending(self, n: int) -> None:
        """n pending no-op jobs, in one transaction (topping a queue up; not measured)."""
        if self.same_sql:
            same_app.fill(self.location, n)
            return
        if self.postgres:
            _pg.fill_pending(self.location, n)
            return
        with contextlib.closing(base.connect(self.location)) as db:
            now = base.micros()
            rows = [base.insert_params({"type": "noop", "payload": {"n": i}}, now) for i in range(n)]
            db.execute("BEGIN IMMEDIATE")
            db.executemany(base.INSERT_SQL, rows)
            db.execute("COMMIT")


@dataclass
class Context:
    settings: Settings
    root: Path  # the run's temp directory
    stack: contextlib.ExitStack
    py_spy_path: str | None = None
    name: str = ""
    runner: asyncio.Runner | None = field(default=None, repr=False)
    keep: bool = False  # --keep: keep PostgreSQL databases too

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
        db = self.database_url(name)
        server = start_queuelog(
            self.dir(), db, job_types=job_types, extra_args=extra_args, name=name, wait=False
        )
        self.watch_database(server, db)
        self.server(server)
        return queuelog_ready(server) if wait else server

    def database_url(self, what: str) -> str:
        """A fresh database: a SQLite file in the figure's directory, or a new PostgreSQL
        database on --postgres-url's cluster, dropped when the figure ends (unless --keep)."""
        if not self.settings.postgres:
            return sqlite_url(self.dir() / f"{what}.db")
        base_url = self.settings.postgres_url
        url = _pg.create_database(base_url, f"{self.name}_{what}")
        if self.keep:
            self.log(f"keeping PostgreSQL database {_pg.database_name(url)}")
        else:
            # Registered before the server's stop, so it runs after it (the stack unwinds LIFO).
            self.stack.callback(self._drop, base_url, url)
        return url

    def _drop(self, base_url: str, url: str) -> None:
        try:
            _pg.drop_database(base_url, url)
        except Exception as exc:  # the run goes on; say what is left behind
            self.log(f"could not drop {_pg.database_name(url)}: {type(exc).__name__}: {exc}")

    def maintain(self, server: ServerProcess) -> None:
        """On PostgreSQL, VACUUM ANALYZE queuelog's tables of `server` (nothing on SQLite).

        Figures call it where a table was just filled or churned and nothing is measured
        yet, on both sides of a line alike: it is what autovacuum does on any real server,
        and some test clusters run with autovacuum off. Without statistics PostgreSQL may
        plan a claim as "sort every pending row" (seen here on the bare baseline's table)."""
        if self.settings.postgres:
            _pg.vacuum_analyze(server.database_url)

    def watch_database(self, server: ServerProcess, url: str) -> None:
        """Let figures read the CPU of the PostgreSQL backends of `server`'s database."""
        if url.startswith("postgres"):
            server.database_cpu = functools.partial(
                _pg.backend_cpu, self.settings.postgres_url, _pg.database_name(url)
            )

    def baseline_db(self, name: str = "baseline") -> BaselineDb:
        """An empty database with the bare baseline's table (SQLite or PostgreSQL)."""
        if self.settings.postgres:
            url = self.database_url(name)
            _pg.create_baseline_schema(url)
            return BaselineDb(url, postgres=True)
        path = self.dir() / f"{name}.db"
        base.connect(str(path)).close()
        return BaselineDb(str(path), postgres=False)

    def same_sql_db(self, name: str = "same") -> BaselineDb:
        """PostgreSQL: an empty database migrated to queuelog's schema, for the baseline that
        sends queuelog's own statements (after checking they still are queuelog's)."""
        _pg_same_sql.check()
        url = self.database_url(name)
        migrate(url)
        return BaselineDb(url, postgres=True, same_sql=True)

    def baseline(self, db: BaselineDb, name: str = "baseline", wait: bool = True) -> ServerProcess:
        """The bare Starlette baseline (`_baseline_app.py` / `_baseline_pg_app.py`, or
        `_baseline_pg_same_app.py` on a `same_sql` database) on `db`."""
        server = self.server(
            start_uvicorn(self.dir(), db.app, app_dir=db.app_dir, env=db.env, name=name, wait=wait)
        )
        self.watch_database(server, db.location)
        return server

    def pair(self, baseline_db: BaselineDb, job_types: str = "noop") -> tuple[ServerProcess, ServerProcess]:
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
