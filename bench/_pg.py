"""PostgreSQL for `python -m bench --database postgresql`: databases, the baseline's table, CPU.

Every server of a figure gets a database of its own, created on the cluster of
`--postgres-url` (its path names the database the bench connects to for CREATE/DROP
DATABASE) and dropped when the figure ends (`--keep` keeps them). Names are
`qlbench_<pid>_<n>_<what>`.

The bare PostgreSQL baseline's table and statements are in `_baseline_pg_app.py` (which
uvicorn imports on its own); the in-process ceiling of figure 3 uses them too.

PostgreSQL's own CPU: every connection is a backend process; `backend_cpu(db)` sums the
CPU time of the backends connected to one database (pg_stat_activity + /proc), so a
figure can show what the database spent on top of the server process.

psycopg (3) is imported here only: the SQLite run never needs it.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench._baseline_pg_app import FILL_SQL, SCHEMA
from bench._common import process_cpu_seconds

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
_NAMES = itertools.count(1)
_SAFE = re.compile(r"[^a-z0-9_]")


def psycopg() -> Any:
    try:
        import psycopg as module
    except ImportError:
        raise SystemExit(
            "--database postgresql needs psycopg 3: .venv/bin/pip install 'psycopg[binary]'"
        ) from None
    return module


def with_database(url: str, name: str) -> str:
    """`url` with its path (the database) replaced by `name`."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def admin(url: str) -> Any:
    """An autocommit connection to the base database of `url` (for CREATE/DROP DATABASE)."""
    return psycopg().connect(url, autocommit=True, connect_timeout=10)


def server_version(url: str) -> str:
    with contextlib.closing(admin(url)) as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0]).split()[0]


def settings_line(url: str) -> str:
    """The server settings that move these figures, for the heading."""
    names = ("synchronous_commit", "fsync", "shared_buffers", "autovacuum")
    with contextlib.closing(admin(url)) as conn:
        values = {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}
    return ", ".join(f"{k}={v}" for k, v in values.items())


def create_database(base_url: str, what: str) -> str:
    """A new empty database on the cluster of `base_url`; returns its URL."""
    name = _SAFE.sub("_", f"qlbench_{os.getpid()}_{next(_NAMES)}_{what}".lower())[:63]
    with contextlib.closing(admin(base_url)) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(base_url, name)


def drop_database(base_url: str, url: str) -> None:
    name = database_name(url)
    with contextlib.closing(admin(base_url)) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def backend_pids(base_url: str, database: str) -> list[int]:
    """PIDs of the backends connected to `database`, except the one asking."""
    with contextlib.closing(admin(base_url)) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (database,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def is_local(url: str) -> bool:
    """Whether the server's backends are processes of this machine (their CPU is readable)."""
    host = urlsplit(url).hostname
    return host in (None, "", "localhost", "::1") or host.startswith("127.") or host.startswith("/")


def backend_cpu(base_url: str, database: str) -> dict[int, float] | None:
    """{pid: user + system CPU seconds} of the backends of `database`, read from /proc;
    None when PostgreSQL is on another machine."""
    if not is_local(base_url):
        return None
    out: dict[int, float] = {}
    for pid in backend_pids(base_url, database):
        cpu = process_cpu_seconds(pid)
        if cpu is not None:
            out[pid] = cpu
    return out


def create_baseline_schema(url: str) -> None:
    with contextlib.closing(psycopg().connect(url, autocommit=True)) as conn:
        for statement in SCHEMA:
            conn.execute(statement)


def count(url: str, where: str = "") -> int:
    with contextlib.closing(psycopg().connect(url, autocommit=True)) as conn:
        return int(conn.execute(f"SELECT count(*) FROM jobs {where}").fetchone()[0])


def fill_pending(url: str, n: int) -> None:
    with contextlib.closing(psycopg().connect(url, autocommit=True)) as conn:
        conn.execute(FILL_SQL, (n,))


# --- figure 6: filling queuelog's own tables fast ---------------------------------------------

# queuelog's job_counts recounted from its jobs: the statements of migration 0002's BACKFILL,
# read from the migration's source (the bench never imports queuelog: see bench/README.md).
MIGRATION_0002 = Path(__file__).resolve().parents[1] / "queuelog/storage/migrations/versions/0002_counters.py"


def _assigned_list(path: Path, name: str) -> list[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise LookupError(f"{name} is not assigned in {path}")


BACKFILL = _assigned_list(MIGRATION_0002, "BACKFILL")
# New jobs g = 0 .. n-1 (job index i = start + g, type types[i % len(types)], payload as
# bench/_api.py's job_input(i)); the first `completed` of them COMPLETED by the worker that
# completed the API-filled ones (claimed 1 ms, finished 2 ms after creation, attempt 1, the
# same result), the rest PENDING. Created over the microseconds just before now, in id order.
FILL_JOBS = """
INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt,
    claimed_at, worker_id, run_at, finished_at, result, created_by, created_at, updated_at)
SELECT (%(types)s::text[])[1 + (i %% cardinality(%(types)s::text[]))],
    '{"n":' || i || ',"to":"u' || i || '@example.com"}',
    0,
    CASE WHEN done THEN 'completed' ELSE 'pending' END,
    0, %(max_retries)s::integer,
    CASE WHEN done THEN 1 ELSE 0 END,
    CASE WHEN done THEN t + interval '1 millisecond' END,
    CASE WHEN done THEN %(worker)s END,
    t,
    CASE WHEN done THEN t + interval '2 milliseconds' END,
    CASE WHEN done THEN %(result)s END,
    %(producer)s, t,
    CASE WHEN done THEN t + interval '2 milliseconds' ELSE t END
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
    LATERAL (SELECT %(start)s::bigint + g AS i, g < %(completed)s::bigint AS done,
        now() - (%(total)s::bigint - g) * interval '1 microsecond' AS t) AS x
ORDER BY g
"""
# The events the API writes for the same jobs: ENQUEUED for each, CLAIMED and COMPLETED for
# each completed one, with the kind and status texts queuelog uses.
FILL_EVENTS = """
INSERT INTO job_events (job_id, kind, status, at)
SELECT id, e.kind, e.status, e.at FROM jobs,
    LATERAL (VALUES ('ENQUEUED', 'pending', created_at, 1),
                    ('CLAIMED', 'running', claimed_at, 2),
                    ('COMPLETED', 'completed', finished_at, 3)) AS e(kind, status, at, n)
WHERE jobs.id > %(after)s AND (e.n = 1 OR jobs.status = 'completed')
ORDER BY jobs.id, e.n
"""
FILL_CHUNK = 100_000


def growth_fill(
    url: str, start: int, count: int, completed: int, types: list[str], log: Callable[[str], None]
) -> dict[str, Any]:
    """Add `count` jobs to a queuelog database by bulk SQL, the first `completed` of them
    COMPLETED, with their job_events, then recount job_counts (migration 0002's BACKFILL)
    and VACUUM ANALYZE what changed. The server must be idle meanwhile (no requests).

    Where the API-filled rows are, the new ones copy from them what the server wrote: the
    creator and worker names, max_retries and the completed jobs' result text."""
    with contextlib.closing(psycopg().connect(url, autocommit=True)) as conn:
        template = conn.execute(
            "SELECT created_by, worker_id, max_retries, result FROM jobs WHERE status = 'completed'"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
        if template is None:
            raise RuntimeError("growth_fill needs a completed job to copy its names from")
        producer, worker, max_retries, result = template
        after = conn.execute("SELECT coalesce(max(id), 0) FROM jobs").fetchone()[0]
        params = {
            "types": types,
            "max_retries": max_retries,
            "worker": worker,
            "result": result,
            "producer": producer,
            "start": start,
            "completed": completed,
            "total": count,
        }
        for first in range(0, count, FILL_CHUNK):
            with conn.transaction():
                conn.execute(FILL_JOBS, params | {"first": first, "last": min(count, first + FILL_CHUNK) - 1})
                log(f"bulk-inserted {min(count, first + FILL_CHUNK):,} of {count:,} jobs")
        with conn.transaction():
            conn.execute(FILL_EVENTS, {"after": after})
        log("inserted their job_events")
        recount(conn)
        for table in ("jobs", "job_events", "job_counts"):
            conn.execute(f"VACUUM ANALYZE {table}")
        by_status = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    return {"producer": producer, "worker": worker, "rows_by_status": by_status}


def recount(conn: Any) -> None:
    """job_counts := migration 0002's BACKFILL over jobs, in one transaction that holds the
    counters still (a server's writes to them wait: none is lost or counted twice)."""
    with conn.transaction():
        conn.execute("LOCK TABLE job_counts IN EXCLUSIVE MODE")
        conn.execute("DELETE FROM job_counts")
        for statement in BACKFILL:
            conn.execute(statement)


def vacuum_analyze(url: str, tables: tuple[str, ...] = ("jobs", "job_events", "job_counts")) -> None:
    """What autovacuum would do after a fill (it is off on some test clusters)."""
    with contextlib.closing(psycopg().connect(url, autocommit=True)) as conn:
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")
