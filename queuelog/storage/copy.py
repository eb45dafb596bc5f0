"""Copying a queue to another database: `queuelog copy-database`, SQLite to PostgreSQL.

The target is always PostgreSQL; the source SQLite file (and its -wal and -shm) is made
owner-only (0600) like every SQLite file queuelog opens (engine.protect_sqlite_file).

Both ends are at Alembic's head when `copy_database` runs (the CLI migrates them first).

The source is only read: in one transaction taken under SQLite's write lock (engine.py), so
it holds still and no server writes it meanwhile, with `PRAGMA query_only` on so that SQLite
itself would refuse a write, and rolled back at the end. The target is written in one
transaction that first locks its tables against other writers: a failure anywhere leaves
it as it was (the id sequences too: ALTER SEQUENCE is transactional, setval is not).

Every table that holds the queue's state is copied row for row (WITH_IDS and KEYED: keys,
jobs and their events and dependencies, schedules and the schedule clock, type controls and
the claims inside their rate windows, the throughput per minute, the dependents still to
release or cancel), with their ids (a job's
lease and timeout only while it is RUNNING: RUNNING_ONLY), streamed (a large queue is never
held in memory) into PostgreSQL's binary COPY, SQLAlchemy Core having no COPY:
JSON documents go as the text the server stored, byte for byte, and timestamps as integers,
exact: SQLite keeps microseconds since 1970, binary timestamptz is microseconds since 2000
(postgres/connection.py reads it the same way). The tables in NOT_COPIED are derived or the target's
own: job_counts is recounted from the copied jobs with the server's own definition
(counters.count_keys). Each id sequence restarts past the highest id the source ever gave
out (AUTOINCREMENT remembers the ids of pruned jobs too), so a new job never takes the id of
an old one. tests/storage/test_copy_to_postgres.py checks that every table of a migrated database
is one or the other.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Table,
    Text,
    case,
    delete,
    func,
    insert,
    select,
    text,
    type_coerce,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql import ColumnElement

from queuelog.errors import BadInput, Conflict, NotFound, QueuelogError, echo
from queuelog.model import JobStatus
from queuelog.storage.engine import dialect_of, protect_sqlite_file
from queuelog.storage.postgres.statements.copying import (
    COLUMN_TYPES,
    SEQUENCE_OF,
    copy_binary,
    lock_exclusive,
    restart_sequence,
    sequence_state,
)
from queuelog.storage.schema.counters import CountKey, count_keys
from queuelog.storage.schema.tables import (
    api_keys,
    dependency_settlements,
    job_counts,
    job_dependencies,
    job_events,
    job_minutes,
    job_types,
    jobs,
    key_state,
    rate_claims,
    schedule_clock,
    schedules,
    type_controls,
)
from queuelog.storage.schema.types import JsonDocument, UtcTimestamp
from queuelog.storage.sqlite.statements.copying import GIVEN_OUT, IS_MIGRATED

BATCH_ROWS = 5000  # rows fetched from the source at a time
# Copied row for row, ids included; each id sequence then restarts past the source's ids.
# rate_claims: the claims inside each rate window, which the target's next claims count.
# dependency_settlements: dependents still to release or cancel (settlements.py), whose ids
# the edges' spared_by name.
WITH_IDS = (api_keys, jobs, job_events, rate_claims, dependency_settlements)
# Copied row for row, without an id sequence.
KEYED = (
    job_dependencies,  # what waiting jobs wait for: without them one would wait forever
    schedules,  # with their ticker state: next and last tick, last job
    schedule_clock,  # when a ticker last ran: ticks missed since are misfires, as on the source
    type_controls,  # pauses (and when they end), concurrency and rate limits, default timeouts
    job_types,  # types an ADMIN added at runtime: without them their jobs could not be enqueued
    job_minutes,  # the throughput per minute, as it was: finished jobs may have been pruned since
)
COPIED = (*WITH_IDS, *KEYED)
# Not copied, and why (tests/storage/test_copy_to_postgres.py names the same).
NOT_COPIED = {
    "alembic_version": "the schema's revision: the CLI migrates both ends to head before copying",
    job_counts.name: "derived: recounted from the copied jobs, as the server counts them",
    key_state.name: "the target servers' key-cache generation, moved by its triggers: the source's is no use",
}
# A target holding rows in these is not empty; every migrated database holds the clock's row.
HELD = tuple(t for t in COPIED if t is not schedule_clock)
PG_EPOCH_US = 946_684_800 * 1_000_000  # 2000-01-01 in Unix microseconds
# Columns of a RUNNING attempt, copied as NULL for any other job: older versions left the
# timeout set on completed jobs, and PostgreSQL's overdue probe reads these columns' indexes.
RUNNING_ONLY = frozenset({jobs.c.lease_expires_at.name, jobs.c.timeout_at.name})


class CopyFailed(QueuelogError):
    """The copy stopped; the target's transaction was rolled back."""


@dataclass(frozen=True, slots=True)
class Copied:
    rows: dict[str, int]  # table name -> rows copied
    next_job_id: int


def check_urls(source_url: str, target_url: str) -> None:
    """Refuse what this copy does not do, before anything is opened (opening an absent
    SQLite file would create it)."""
    if (kind := dialect_of(source_url)) != "sqlite":
        raise BadInput(f"the source must be a SQLite database (sqlite:///PATH), not {echo(kind)}")
    path = make_url(source_url).database
    if not path or path == ":memory:":
        raise BadInput("the source URL names no SQLite file (sqlite:///PATH)")
    if not Path(path).is_file():
        raise NotFound(f"no SQLite database at {path}")
    if not _is_queue(Path(path)):
        raise BadInput(f"{path} is not a queuelog database")
    protect_sqlite_file(path)  # the probe may have made a -shm as open as the file itself
    if (kind := dialect_of(target_url)) != "postgresql":
        raise BadInput(f"the target must be a PostgreSQL database (postgresql://...), not {echo(kind)}")


def _is_queue(path: Path) -> bool:
    """Whether the file is a database that Alembic has migrated (opened read-only: migrating
    some other application's file would write queuelog's tables into it)."""
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as probe:
            return probe.execute(IS_MIGRATED).fetchone() is not None
    except sqlite3.DatabaseError:
        return False


def copy_database(
    source: Engine, target: Engine, *, replace: bool = False, batch_rows: int = BATCH_ROWS
) -> Copied:
    """Copy the queue in `source` (SQLite) into `target` (PostgreSQL), which must hold none
    of it (HELD) unless `replace`: then it is deleted, in the same transaction."""
    try:
        with source.connect() as read, target.begin() as write:
            read.exec_driver_sql("PRAGMA query_only = ON")  # in a BEGIN IMMEDIATE: see engine.py
            try:
                _empty_target(write, replace)
                rows = {t.name: _copy_rows(read, write, t, batch_rows) for t in COPIED}
                _recount(write)
                next_ids = {t.name: _restart_sequence(write, t, _highest_id(read, t)) for t in WITH_IDS}
            finally:
                read.exec_driver_sql("PRAGMA query_only = OFF")
    except (SQLAlchemyError, psycopg.Error) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__]
        raise CopyFailed(f"copy failed, the target is unchanged: {reason[0]}") from exc
    return Copied(rows, next_ids[jobs.name])


def _empty_target(write: Connection, replace: bool) -> None:
    write.exec_driver_sql(lock_exclusive([t.name for t in (*COPIED, job_counts)]))
    held = {t.name: write.execute(select(func.count()).select_from(t)).scalar_one() for t in HELD}
    if any(held.values()) and not replace:
        listing = ", ".join(f"{name}: {n}" for name, n in held.items() if n)
        raise Conflict(
            f"the target already holds rows ({listing}): copy into an empty database, "
            "or pass --replace to delete them first"
        )
    for table in (*COPIED, job_counts):
        write.execute(delete(table))


def _as_sent(column: Column[Any]) -> ColumnElement[Any]:
    """A source column as COPY takes it: JSON as its text, timestamps as binary timestamptz."""
    if isinstance(column.type, UtcTimestamp):
        sent = type_coerce(column, BigInteger()) - PG_EPOCH_US
        if column.table is jobs and column.name in RUNNING_ONLY:
            sent = case((jobs.c.status == JobStatus.RUNNING.value, sent))
        return sent.label(column.name)
    if isinstance(column.type, JsonDocument):
        return type_coerce(column, Text()).label(column.name)
    return column


def _copy_rows(read: Connection, write: Connection, table: Table, batch_rows: int) -> int:
    types: dict[str, str] = dict(write.execute(text(COLUMN_TYPES), {"table": table.name}).all())
    wire = ["int8" if types[c.name] == "timestamp with time zone" else types[c.name] for c in table.c]
    order = list(table.primary_key.columns)
    query = select(*map(_as_sent, table.c)).order_by(*order).execution_options(yield_per=batch_rows)
    driver = write.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)  # the target is PostgreSQL through psycopg
    with driver.cursor() as cursor:
        with cursor.copy(copy_binary(table.name, [c.name for c in table.c])) as copy:
            copy.set_types(wire)
            for row in read.execute(query):
                copy.write_row(row)
        return cursor.rowcount


def _recount(write: Connection) -> None:
    groups = (jobs.c.type, jobs.c.status, jobs.c.created_by, jobs.c.worker_id)
    counts: Counter[CountKey] = Counter()
    for job_type, status, created_by, worker_id, n in write.execute(
        select(*groups, func.count()).group_by(*groups)
    ):
        for key in count_keys(job_type, status, created_by, worker_id):
            counts[key] += n
    if counts:
        write.execute(
            insert(job_counts),
            [
                {"scope": scope, "name": name, "type": job_type, "status": status, "n": n}
                for (scope, name, job_type, status), n in counts.items()
            ],
        )


def _highest_id(read: Connection, table: Table) -> int:
    """The highest id the source has given out: a stored row's, or a deleted one's."""
    stored = read.execute(select(func.max(table.c.id))).scalar() or 0
    return max(stored, read.execute(text(GIVEN_OUT), {"name": table.name}).scalar() or 0)


def _restart_sequence(write: Connection, table: Table, highest: int) -> int:
    """Make the target's next id for `table` exceed `highest` and any it gave out; return the
    id the sequence will give next, as read back from it (what `copy-database` reports)."""
    sequence = write.execute(text(SEQUENCE_OF), {"table": table.name}).scalar_one()  # quoted by PostgreSQL
    write.exec_driver_sql(restart_sequence(sequence, max(highest + 1, _next_value(write, sequence))))
    return _next_value(write, sequence)


def _next_value(write: Connection, sequence: str) -> int:
    """The value `nextval` would return (sequences here step by 1)."""
    last, called = write.exec_driver_sql(sequence_state(sequence)).one()
    return int(last) + 1 if called else int(last)
