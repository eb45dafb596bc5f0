"""Opening the database: URLs, SQLite pragmas and transaction modes."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from queuelog.errors import DatabaseUnavailable
from queuelog.storage.write_lock import WriteLock

SQLITE_BUSY_TIMEOUT_MS = 30_000


def dialect_of(url: str) -> str:
    try:
        return make_url(url).get_backend_name()
    except ArgumentError:
        raise DatabaseUnavailable(f"not a database URL: {url!r}") from None


def sync_url(url: str) -> str:
    """The URL for SQLAlchemy's sync drivers: stdlib sqlite3, psycopg 3 for PostgreSQL."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def create_sqlite_engine(url: str) -> Engine:
    """The CLI's and migrations' engine: every transaction is BEGIN IMMEDIATE, taken under
    the write lock that running servers queue on (write_lock.py).

    pysqlite's own transaction handling is switched off so that we issue BEGIN ourselves
    (the SQLAlchemy-documented recipe). Servers do not use this engine: see sqlite.py.
    """
    engine = create_engine(
        url,
        pool_size=1,
        max_overflow=0,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
    )
    lock = WriteLock(url, create=False)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # WAL + NORMAL: a commit survives a process crash (kill -9); only an OS crash or
        # power loss can lose the last transactions. FULL would fsync every commit.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        lock.acquire()
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            lock.release()
            raise

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def _on_end(connection: Any) -> None:
        lock.release()

    return engine


def require_postgres_driver() -> None:
    """PostgreSQL needs psycopg 3 (the `postgres` extra): say so in one line if it is missing."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise DatabaseUnavailable(
            "PostgreSQL needs the psycopg driver: pip install 'queuelog[postgres]' (or psycopg[binary])"
        ) from None


def create_sync_engine(url: str) -> Engine:
    """A plain engine for migrations and the CLI."""
    if dialect_of(url) == "sqlite":
        return create_sqlite_engine(url)
    require_postgres_driver()
    return create_engine(sync_url(url), pool_pre_ping=True)
