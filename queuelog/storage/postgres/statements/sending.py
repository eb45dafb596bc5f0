"""How the connection sends some statements, found by their text: those whose RETURNING gives
the new row's id, those whose integer arrays go as bigint[], and those whose executemany
runs as one statement over arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Integer, SmallInteger, String, Text

from queuelog.storage.postgres.statements import PostgresStatements
from queuelog.storage.postgres.statements.fragments import as_timestamp
from queuelog.storage.postgres.statements.jobs import INSERT_COLUMNS
from queuelog.storage.schema.codec import NEW_JOB_COLUMNS
from queuelog.storage.schema.tables import jobs
from queuelog.storage.schema.types import JsonDocument, UtcTimestamp

# Statements whose RETURNING gives the new row's id (a cursor's `lastrowid`).
RETURNING_ID = frozenset(
    {PostgresStatements.INSERT_JOB, PostgresStatements.INSERT_JOB_ONCE, PostgresStatements.INSERT_EVENT}
)


@dataclass(frozen=True)
class SetForm:
    """A statement that an operation runs once per row (executemany), written for all the
    rows at once: each parameter is sent as one array and `unnest` turns them back into rows,
    in order (`v.n`). One statement instead of a pipeline of as many: a fraction of the
    PostgreSQL and driver CPU per row."""

    sql: str
    arrays: tuple[tuple[str, str], ...]  # (parameter, element type), in unnest's column order

    def parameters(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
        return {name: [row[name] for row in rows] for name, _ in self.arrays}


def _rows_of(arrays: tuple[tuple[str, str], ...]) -> str:
    columns = ", ".join(f"%({name})s::{kind}[]" for name, kind in arrays)
    names = ", ".join(name for name, _ in arrays)
    return f"unnest({columns}) WITH ORDINALITY AS v({names}, n)"


def _ts_of(column: str) -> str:
    return as_timestamp(f"v.{column}")


# A job column's array element type, as the operations send its values: timestamps as integer
# microseconds, JSON documents as text. Most specific first (Text is a String).
_ELEMENT_TYPES = (
    (UtcTimestamp, "bigint"),
    (JsonDocument, "text"),
    (SmallInteger, "smallint"),
    (BigInteger, "bigint"),
    (Integer, "integer"),
    (String, "text"),
    (Text, "text"),
)


def _element_type(column: str) -> str:
    for kind, name in _ELEMENT_TYPES:
        if isinstance(jobs.c[column].type, kind):
            return name
    raise TypeError(f"jobs.{column}: no array element type for {jobs.c[column].type!r}")  # at import


def _from_array(column: str) -> str:
    return _ts_of(column) if isinstance(jobs.c[column].type, UtcTimestamp) else f"v.{column}"


_JOB_ARRAYS = tuple((column, _element_type(column)) for column in NEW_JOB_COLUMNS)
_EVENT_ARRAYS = (
    ("job_id", "bigint"),
    ("kind", "text"),
    ("status", "text"),
    ("at", "bigint"),
    ("attempt", "integer"),
    ("worker_id", "text"),
    ("error", "text"),
)
# Rows go in in `n` order, so their ids (one sequence) rise in the order of the rows given.
INSERT_JOBS_AT_ONCE = SetForm(
    f"INSERT INTO jobs ({INSERT_COLUMNS})"
    f" SELECT {', '.join(_from_array(column) for column in NEW_JOB_COLUMNS)}"
    f" FROM {_rows_of(_JOB_ARRAYS)} ORDER BY v.n RETURNING id",
    _JOB_ARRAYS,
)
INSERT_EVENTS_AT_ONCE = SetForm(
    "INSERT INTO job_events (job_id, kind, status, at, attempt, worker_id, error)"
    f" SELECT v.job_id, v.kind, v.status, {_ts_of('at')}, v.attempt, v.worker_id, v.error"
    f" FROM {_rows_of(_EVENT_ARRAYS)}"
    " ORDER BY v.n RETURNING id",
    _EVENT_ARRAYS,
)


# Integer array parameters sent as bigint[] whatever their values (psycopg sends small ones as
# smallint[]): these statements look into the arrays once per row, and a cast there would
# copy the array for every row (array_map: 3.6 % of PostgreSQL's CPU in a drain).
INT8_ARRAYS: dict[str, tuple[str, ...]] = {PostgresStatements.COMPLETE_MANY: ("id", "attempt")}

# executemany of these statements runs as one statement.
AT_ONCE = {
    PostgresStatements.INSERT_JOB: INSERT_JOBS_AT_ONCE,
    PostgresStatements.INSERT_EVENT: INSERT_EVENTS_AT_ONCE,
}
