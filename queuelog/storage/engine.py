"""Opening the database: URLs, SQLite pragmas, transaction modes and file permissions."""

from __future__ import annotations

import logging
import os
import sqlite3
from typing import Any
from urllib.parse import unquote, urlsplit

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from queuelog.errors import DatabaseUnavailable, echo
from queuelog.storage.write_lock import WriteLock

SQLITE_BUSY_TIMEOUT_MS = 30_000
OWNER_ONLY = 0o600
# The files SQLite keeps beside a database; it creates each with the database file's mode.
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")

log = logging.getLogger("queuelog.storage")


def dialect_of(url: str) -> str:
    try:
        return make_url(url).get_backend_name()
    except ArgumentError:
        raise DatabaseUnavailable(f"not a database URL: {echo(url)}") from None


def sync_url(url: str) -> str:
    """The URL for SQLAlchemy's sync drivers: stdlib sqlite3, psycopg 3 for PostgreSQL."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names (a relative path is relative to the current directory, as
    SQLite takes it), or None for an in-memory database."""
    parsed = make_url(url)
    database = parsed.database
    if database and database.startswith("file:") and parsed.query.get("uri") in ("true", "1"):
        if parsed.query.get("mode") == "memory":
            return None
        database = unquote(urlsplit(database).path)
    return database if database and database != ":memory:" else None


def protect_sqlite_file(path: str) -> None:
    """Make a SQLite database readable and writable by its owner only, before SQLite opens it.

    An absent file is created 0600, whatever the umask: SQLite would create it 0644 (under
    umask 022) for anyone on the host to read every payload, error and key hash, and it
    creates the -wal and -shm files with the database file's mode, so those follow. A file
    that others may read (left by an older version) is tightened, with one warning.
    """
    if os.name != "posix":
        return  # Windows has no mode bits to speak of
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, OWNER_ONLY)
    except FileExistsError:
        _tighten(path)
    except OSError:
        return  # no such directory, no permission...: SQLite then says so in its own words
    else:
        try:
            os.fchmod(fd, OWNER_ONLY)  # an odd umask (0o200, say) may have masked the owner's bits
        finally:
            os.close(fd)


def _tighten(path: str) -> None:
    loose: dict[str, int] = {}
    for name in (path, *(path + suffix for suffix in SQLITE_SIDE_FILES)):
        try:
            mode = os.stat(name).st_mode & 0o777
        except OSError:
            continue
        if mode & 0o077:
            loose[name] = mode
    if not loose:
        return
    shown = ", ".join(f"{name} ({mode:04o})" for name, mode in loose.items())
    try:
        for name in loose:
            os.chmod(name, OWNER_ONLY)
    except OSError as exc:
        log.warning("%s can be read by other users and could not be made 0600: %s", shown, exc.strerror)
    else:
        log.warning("%s could be read by other users; made readable by the owner only (0600)", shown)


def create_sqlite_engine(url: str) -> Engine:
    """The CLI's and migrations' engine: every transaction is BEGIN IMMEDIATE, taken under
    the write lock that running servers queue on (write_lock.py).

    pysqlite's own transaction handling is switched off so that we issue BEGIN ourselves
    (the SQLAlchemy-documented recipe). Servers do not use this engine: see sqlite/database.py.
    """
    engine = create_engine(
        url,
        pool_size=1,
        max_overflow=0,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
    )
    lock = WriteLock(url, create=False)
    path = sqlite_file(url)

    @event.listens_for(engine, "do_connect")
    def _before_connect(*_: Any) -> None:
        if path is not None:
            protect_sqlite_file(path)

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
