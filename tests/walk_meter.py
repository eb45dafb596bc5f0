"""How much of the database a repository's reads and writes go through, measured by the
database itself, never by a clock: `Meter.install(repository)` records every call of its
`read` and `write` and, for each statement one of them runs, its cost:

- SQLite: the virtual machine instructions the statement took (a progress handler called at
  every one, on the connection that runs it). Walking an index costs a few per entry.
- PostgreSQL: the buffers a read statement accessed (shared hit + read), from EXPLAIN
  (ANALYZE, BUFFERS) of it run just before it, with its parameters, in the same transaction.
  Statements that change rows are not measured (0): here they change jobs by id.

Tests then bound each call's cost by a constant that does not grow with the table: a walk
that passes the whole backlog costs many times that much. They fill their tables with SQL,
from `numbers(backend, count)`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from queuelog.storage.repository import Repository

MEASURED = ("SELECT", "WITH")


def numbers(backend: str, count: int) -> str:
    """A FROM item of `count` rows, its column g numbering them from 1."""
    if backend == "postgresql":
        return f"generate_series(1, {count}) AS s(g)"
    return (
        f"(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {count}) SELECT g FROM s)"
    )


@dataclass
class Call:
    kind: str  # "read" or "write"
    function: str
    statements: list[tuple[str, int]] = field(default_factory=list)  # (sql, cost)

    @property
    def cost(self) -> int:
        return sum(cost for _, cost in self.statements)

    def __str__(self) -> str:
        return f"{self.kind} {self.function}: {self.cost} ({len(self.statements)} statements)"


class Rows:
    """A statement's rows, read at once (the measure must end before the next statement)."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self.lastrowid: int | None = None

    def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None


def _name(function: Any) -> str:
    inner = getattr(function, "func", function)  # functools.partial
    return getattr(inner, "__qualname__", repr(inner))


class Meter:
    def __init__(self) -> None:
        self.calls: list[Call] = []

    def install(self, repository: Repository) -> None:
        db = repository._db
        read, write = db.read, db.write

        async def metered_read(function: Callable[..., Any], *args: Any) -> Any:
            call = Call("read", _name(function))
            self.calls.append(call)
            return await read(lambda conn, *rest: function(Metered(conn, call), *rest), *args)

        async def metered_write(operation: Callable[[Any], Any], **options: Any) -> Any:
            call = Call("write", _name(operation))
            self.calls.append(call)

            def run(tx: Any) -> Any:
                tx.execute = Metered(tx.connection, call).execute
                try:
                    return operation(tx)
                finally:
                    del tx.execute

            return await write(run, **options)

        db.read = metered_read  # type: ignore[method-assign]
        db.write = metered_write  # type: ignore[method-assign]

    def of(self, kind: str | None = None) -> list[Call]:
        return [c for c in self.calls if kind is None or c.kind == kind]

    def clear(self) -> None:
        self.calls.clear()

    def report(self) -> str:
        return "\n".join(map(str, self.calls))


class Metered:
    """A connection whose statements are measured into `call`."""

    def __init__(self, connection: Any, call: Call) -> None:
        self._connection = connection
        self._call = call
        self.sql = connection.sql

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def execute(self, sql: str, parameters: Mapping[str, Any] | Sequence[Any] = ()) -> Rows:
        connection = self._connection
        if isinstance(connection, sqlite3.Connection):
            steps = [0]

            def step() -> int:
                steps[0] += 1
                return 0

            connection.set_progress_handler(step, 1)
            try:
                cursor = connection.execute(sql, parameters)
                rows = cursor.fetchall()
            finally:
                connection.set_progress_handler(None, 1)
            self._call.statements.append((sql, steps[0]))
            return Rows(rows, cursor.rowcount)
        cost = 0
        if sql.lstrip().upper().startswith(MEASURED):
            (plan,) = connection.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, parameters
            ).fetchone()
            top = plan[0]["Plan"]
            cost = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
        result = connection.execute(sql, parameters)
        self._call.statements.append((sql, cost))
        return Rows(result.fetchall(), result.rowcount)
