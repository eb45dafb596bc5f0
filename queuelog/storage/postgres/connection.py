"""PostgreSQL's connections through psycopg 3: opened with timestamps read as integer
microseconds, and `PgConnection`, what an operation runs its statements on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg.adapt import Loader
from psycopg.pq import ExecStatus, Format
from psycopg.types.numeric import Int8

from queuelog.errors import DatabaseUnavailable
from queuelog.storage.postgres.statements import PostgresStatements, PostgresWriterStatements
from queuelog.storage.postgres.statements.plans import DEFAULT_PLANS, FORCE_GENERIC_PLANS, GENERIC_PLANS
from queuelog.storage.postgres.statements.sending import AT_ONCE, INT8_ARRAYS, RETURNING_ID
from queuelog.storage.statements import Capabilities

POSTGRES = Capabilities(
    concurrent_writes=True,
    promotion_reads_controls=True,
    completes_at_once=True,
    release_returns_edges=True,
    type_index=False,  # migration 0014
    plans_by_statistics=True,
    runs_on_the_loop=False,
    notifies=True,
    vacuums=True,
)
CONNECT_TIMEOUT_SECONDS = 5
_PG_EPOCH_US = 946_684_800 * 1_000_000  # 2000-01-01, PostgreSQL's epoch, in Unix microseconds


class MicrosLoader(Loader):
    """timestamptz, read in binary (microseconds since 2000-01-01), as Unix microseconds:
    the integer form the operations and the codec use on both backends."""

    format = Format.BINARY

    def load(self, data: Any) -> int:
        return int.from_bytes(data, "big", signed=True) + _PG_EPOCH_US


def conninfo(url: str) -> str:
    """A libpq URL from a SQLAlchemy-style one (`postgresql+psycopg://` -> `postgresql://`)."""
    scheme, sep, rest = url.partition("://")
    return "postgresql://" + rest if sep and scheme.startswith("postgres") else url


def connect(url: str, *, autocommit: bool) -> psycopg.Connection[Any]:
    try:
        connection = psycopg.connect(
            conninfo(url), autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_SECONDS
        )
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {type(exc).__name__}") from None
    connection.adapters.register_loader("timestamptz", MicrosLoader)
    return connection


class Result:
    """What an operation reads of a cursor: rows, rowcount, and the id an INSERT returned."""

    __slots__ = ("rows", "rowcount", "lastrowid", "_next")

    def __init__(self, rows: list[Any], rowcount: int, lastrowid: int | None = None) -> None:
        self.rows = rows
        self.rowcount = rowcount
        self.lastrowid = lastrowid
        self._next = 0

    def fetchone(self) -> Any:
        if self._next >= len(self.rows):
            return None
        self._next += 1
        return self.rows[self._next - 1]

    def fetchall(self) -> list[Any]:
        rows, self._next = self.rows[self._next :], len(self.rows)
        return rows


class PgConnection:
    """A psycopg connection, carrying PostgreSQL's statements (`sql`) and capabilities (`can`): on a writer
    (`locking`), the reads of rows it is about to update take them FOR UPDATE.

    `defer` holds statements that need no answer (a batch's SAVEPOINT and RELEASE) until the
    next statement that does, and sends them in its round trip: an operation in its own
    savepoint then costs no round trip more than one without.

    Statements of GENERIC_PLANS run with plan_cache_mode set to force_generic_plan, for the
    transaction; the others with the server's setting. The switch is deferred likewise, and
    sent only when the next statement needs the other mode."""

    can = POSTGRES

    def __init__(
        self,
        connection: psycopg.Connection[Any],
        *,
        locking: bool,
        in_transaction: bool = True,
        generic: bool = False,
    ) -> None:
        self.raw = connection
        self.sql: type[PostgresStatements] = PostgresWriterStatements if locking else PostgresStatements
        self._deferred: list[str] = []
        # Whether plan_cache_mode is forced now; None: not known (after ROLLBACK TO SAVEPOINT,
        # which restores the mode of the savepoint's time).
        self._generic: bool | None = generic  # the mode the transaction began in
        # Outside a transaction (a read of one statement) SET LOCAL does nothing: not sent.
        self._plan_modes = in_transaction

    def _plan_mode_for(self, sql: str) -> None:
        if not self._plan_modes:
            return
        generic = sql in GENERIC_PLANS
        if generic is not self._generic:
            self._deferred.append(FORCE_GENERIC_PLANS if generic else DEFAULT_PLANS)
            self._generic = generic

    def rolled_back_to_savepoint(self) -> None:
        self._generic = None

    def defer(self, *statements: str) -> None:
        self._deferred.extend(statements)

    def drop_deferred(self) -> None:
        """Forget what was deferred (before COMMIT, which releases every savepoint)."""
        self._deferred.clear()

    def send_deferred(self) -> None:
        """Send what was deferred now, in one round trip (before a ROLLBACK TO SAVEPOINT)."""
        if self._deferred:
            with self.raw.pipeline():
                self._queue_deferred()

    def _queue_deferred(self) -> None:
        statements, self._deferred = self._deferred, []
        for statement in statements:
            self.raw.execute(statement)

    def _execute(self, sql: str, parameters: Any) -> psycopg.Cursor[Any]:
        """One statement, in the same round trip as what was deferred."""
        self._plan_mode_for(sql)
        if not self._deferred:
            return self.raw.execute(sql, parameters or None, binary=True)
        with self.raw.pipeline():
            self._queue_deferred()
            return self.raw.execute(sql, parameters or None, binary=True)

    def execute(self, sql: str, parameters: Any = ()) -> Result:
        int8_arrays = INT8_ARRAYS.get(sql)
        if int8_arrays is not None:
            parameters = _as_int8_arrays(parameters, int8_arrays)
        cursor = self._execute(sql, parameters)
        rows = _rows(cursor)
        lastrowid = rows[0][0] if rows and sql in RETURNING_ID else None
        return Result(rows, cursor.rowcount, lastrowid)

    def execute_together(self, statements: Sequence[tuple[str, Any]]) -> list[list[Any]]:
        with self.raw.pipeline():
            cursors = []
            for sql, parameters in statements:
                self._plan_mode_for(sql)
                self._queue_deferred()
                cursors.append(self.raw.execute(sql, parameters or None, binary=True))
        return [_rows(cursor) for cursor in cursors]

    def executemany(self, sql: str, parameters: Iterable[Any]) -> Result:
        rows = list(parameters)
        at_once = AT_ONCE.get(sql)
        if at_once is not None and len(rows) > 1:
            cursor = self._execute(at_once.sql, at_once.parameters(rows))
            return Result([], cursor.rowcount)
        self._plan_mode_for(sql)
        self.send_deferred()
        cursor = self.raw.cursor(binary=True)
        cursor.executemany(sql, rows)
        return Result([], cursor.rowcount)

    def insert_ids(self, sql: str, rows: list[dict[str, Any]]) -> list[int]:
        at_once = AT_ONCE.get(sql)
        if at_once is not None:
            cursor = self._execute(at_once.sql, at_once.parameters(rows))
            return sorted(row[0] for row in cursor.fetchall())  # rising in the rows' order
        self._plan_mode_for(sql)
        self.send_deferred()
        cursor = self.raw.cursor(binary=True)
        cursor.executemany(sql, rows, returning=True)
        ids = []
        while True:
            ids.append(cursor.fetchone()[0])  # type: ignore[index]
            if not cursor.nextset():
                return ids


def _as_int8_arrays(parameters: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """`parameters` with the integer lists `names` sent as bigint[] (statements/sending.py)."""
    return parameters | {name: [None if v is None else Int8(v) for v in parameters[name]] for name in names}


def _rows(cursor: psycopg.Cursor[Any]) -> list[Any]:
    """The rows of a statement, none for one that returns none. (Not by `cursor.description`,
    which makes a Column object of every column each time it is read: 15 % of a claim's
    Python time in a profile.)"""
    result = cursor.pgresult
    if result is None or result.status != ExecStatus.TUPLES_OK:
        return []
    return cursor.fetchall()


def close_quietly(raw: psycopg.Connection[Any] | None) -> None:
    if raw is not None:
        with contextlib.suppress(psycopg.Error):
            raw.close()
