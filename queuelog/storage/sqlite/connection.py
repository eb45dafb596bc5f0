"""SQLite's connections: the stdlib driver's, carrying SQLite's statements, in WAL mode on a
file only its owner may read."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import make_url

from queuelog.errors import DatabaseUnavailable
from queuelog.storage.engine import SQLITE_BUSY_TIMEOUT_MS, protect_sqlite_file
from queuelog.storage.sqlite.statements import SqliteStatements
from queuelog.storage.sqlite.statements.inserted_ids import LAST_ID_AFTER
from queuelog.storage.statements import Capabilities


def database_path(url: str) -> str:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise DatabaseUnavailable("queuelog needs a SQLite file (sqlite:///path.db), not a memory database")
    return database


SQLITE = Capabilities(
    # one writer at a time (the write lock): rows stay as read, ids commit in order
    concurrent_writes=False,
    promotion_reads_controls=False,  # an UPDATE without RETURNING: TYPE_CONTROLS follows
    completes_at_once=False,
    release_returns_edges=False,
    type_index=True,
    plans_by_statistics=False,  # its statements name their indexes (INDEXED BY)
    runs_on_the_loop=True,
    notifies=False,
    vacuums=False,
)


class SqliteConnection(sqlite3.Connection):
    """sqlite3's connection, carrying SQLite's statements (`sql`) and capabilities (`can`),
    and allocating ids."""

    sql = SqliteStatements
    can = SQLITE

    def execute_together(self, statements: Sequence[tuple[str, Any]]) -> list[list[Any]]:
        return [self.execute(sql, parameters).fetchall() for sql, parameters in statements]

    def insert_ids(self, sql: str, rows: list[dict[str, Any]]) -> range:
        """executemany an INSERT and return the new rows' ids, in order. AUTOINCREMENT under
        the write lock hands out consecutive ids after the last one ever used; the check
        below makes sure of it before relying on it."""
        last_id = LAST_ID_AFTER[sql]
        before = self.execute(last_id).fetchone()
        cursor = self.executemany(sql, rows)
        last = self.execute(last_id).fetchone()[0]
        first_id = (before[0] if before is not None else 0) + 1
        if cursor.rowcount != len(rows) or last != first_id + len(rows) - 1:  # pragma: no cover
            raise RuntimeError("ids were not consecutive; nothing was written")
        return range(first_id, first_id + len(rows))


def connect(path: str) -> SqliteConnection:
    """A connection in autocommit mode (queuelog issues BEGIN itself), WAL, NORMAL sync, on a
    file only its owner may read (engine.protect_sqlite_file)."""
    protect_sqlite_file(path)
    try:
        connection = sqlite3.connect(
            path,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=512,
            timeout=SQLITE_BUSY_TIMEOUT_MS / 1000,
            factory=SqliteConnection,
        )
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
    except sqlite3.Error as exc:
        raise DatabaseUnavailable(f"cannot open the SQLite database {path}: {exc}") from None
    return connection
