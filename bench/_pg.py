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

import contextlib
import itertools
import os
import re
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


def backend_cpu_by_application(base_url: str, database: str) -> dict[str, dict[int, float]] | None:
    """{application_name: {pid: CPU seconds}} of the backends of `database` (a server whose
    URL carries `?application_name=NAME` names every connection it opens); None when
    PostgreSQL is on another machine."""
    if not is_local(base_url):
        return None
    with contextlib.closing(admin(base_url)) as conn:
        rows = conn.execute(
            "SELECT application_name, pid FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    out: dict[str, dict[int, float]] = {}
    for name, pid in rows:
        cpu = process_cpu_seconds(int(pid))
        if cpu is not None:
            out.setdefault(str(name), {})[int(pid)] = cpu
    return out


def shared_process_cpu(base_url: str) -> dict[int, float] | None:
    """{pid: CPU seconds} of the cluster's processes that serve every database: the
    postmaster and what pg_stat_activity lists with no database (walwriter, checkpointer,
    background writer, the launchers). None when PostgreSQL is on another machine."""
    if not is_local(base_url):
        return None
    with contextlib.closing(admin(base_url)) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname IS NULL AND backend_type <> 'client backend'"
        ).fetchall()
        own = int(conn.info.backend_pid)
    pids = [int(r[0]) for r in rows]
    postmaster = parent_pid(own)
    if postmaster is not None:
        pids.append(postmaster)
    out: dict[int, float] = {}
    for pid in pids:
        cpu = process_cpu_seconds(pid)
        if cpu is not None:
            out[pid] = cpu
    return out


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


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


def vacuum_analyze(url: str, tables: tuple[str, ...] = ("jobs", "job_events", "job_counts")) -> None:
    """What autovacuum would do after a fill (it is off on some test clusters)."""
    with contextlib.closing(psycopg().connect(url, autocommit=True)) as conn:
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")
