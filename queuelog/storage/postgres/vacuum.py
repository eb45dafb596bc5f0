"""VACUUM and ANALYZE of queuelog's busiest tables where autovacuum does not run (PostgreSQL).

Every transition of a job writes a new version of its row and leaves the old one dead, with
its index entries: after 500k claims, the head of the claims' ready index is 500k entries of
jobs that are no longer there, and every claim walks them until a VACUUM removes them (a
claim at 1M jobs takes 2.4x its time at 1k). Autovacuum does it, by the thresholds that
migration 0013 sets on jobs; where it is off (`autovacuum = off` in the server's
configuration, as on some operators' clusters and on this project's test cluster, or
`autovacuum_enabled = false` on a table), each server checks every
Settings.vacuum_check_seconds and does what autovacuum would have done: a table with more
dead rows (or rows inserted since its last VACUUM) than its thresholds is vacuumed, one with
more rows changed since its last ANALYZE than that threshold is analyzed, by the same
formula and the table's own settings (else the server's), at autovacuum's cost limits, so
that it takes no more of the disk than autovacuum would. VACUUM, never VACUUM FULL: it
takes no lock that stops reads or writes. One server at a time does it (an advisory lock,
tried, not waited for). Where autovacuum runs, this does nothing but read two settings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("queuelog.vacuum")

# The tables whose rows queuelog updates or deletes all the time.
TABLES = ("jobs", "job_counts", "job_minutes", "job_events", "rate_claims")
VACUUM_LOCK = 0x76616375  # "vacu": one server vacuums at a time
SETTINGS = (
    "autovacuum",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_analyze_threshold",
    "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
)
READ_SETTINGS = "SELECT " + ", ".join(f"current_setting('{name}')" for name in SETTINGS)
READ_TABLES = """
    SELECT s.relname, s.n_dead_tup, s.n_ins_since_vacuum, s.n_mod_since_analyze, c.reltuples,
           coalesce(c.reloptions, '{}')
    FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
    WHERE s.schemaname = current_schema() AND s.relname = ANY(%(tables)s)
    ORDER BY s.relname
"""


@dataclass(frozen=True, slots=True)
class TableState:
    name: str
    dead: int  # n_dead_tup
    inserted: int  # n_ins_since_vacuum
    changed: int  # n_mod_since_analyze
    rows: float  # reltuples (-1: never vacuumed nor analyzed)
    options: Mapping[str, str]  # the table's storage parameters (ALTER TABLE ... SET)


@dataclass(frozen=True, slots=True)
class Work:
    table: str
    vacuum: bool
    analyze: bool

    @property
    def statement(self) -> str:
        """SKIP_LOCKED: a table another session has locked (a migration, a copy) is left for
        the next check, instead of waiting in the lock's queue ahead of others."""
        if self.vacuum:
            return f"VACUUM (SKIP_LOCKED{', ANALYZE' if self.analyze else ''}) {self.table}"
        return f"ANALYZE (SKIP_LOCKED) {self.table}"


def options_of(reloptions: Sequence[str]) -> dict[str, str]:
    """pg_class.reloptions (`name=value` texts) as a mapping."""
    return dict(option.split("=", 1) for option in reloptions)


def _number(table: TableState, server: Mapping[str, str], name: str) -> float:
    return float(table.options.get(name, server[name]))


def work_for(table: TableState, server: Mapping[str, str]) -> Work | None:
    """What autovacuum would do to the table now, if autovacuum will not (None: nothing),
    with the server's settings (`server`: SETTINGS by name, as current_setting gives them)."""
    autovacuum_runs = (
        server["autovacuum"] == "on" and table.options.get("autovacuum_enabled", "true") == "true"
    )
    if autovacuum_runs:
        return None
    rows = max(table.rows, 0.0)
    dead_limit = _number(table, server, "autovacuum_vacuum_threshold") + rows * _number(
        table, server, "autovacuum_vacuum_scale_factor"
    )
    insert_threshold = _number(table, server, "autovacuum_vacuum_insert_threshold")
    inserted_limit = insert_threshold + rows * _number(table, server, "autovacuum_vacuum_insert_scale_factor")
    analyze_limit = _number(table, server, "autovacuum_analyze_threshold") + rows * _number(
        table, server, "autovacuum_analyze_scale_factor"
    )
    vacuum = table.dead > dead_limit or (insert_threshold >= 0 and table.inserted > inserted_limit)
    analyze = table.changed > analyze_limit
    return Work(table.name, vacuum, analyze) if vacuum or analyze else None


def read_state(connection: Any) -> tuple[dict[str, str], list[TableState]]:
    """The server's settings (SETTINGS) and the state of queuelog's TABLES."""
    server = dict(zip(SETTINGS, connection.execute(READ_SETTINGS).fetchone(), strict=True))
    rows = connection.execute(READ_TABLES, {"tables": list(TABLES)}).fetchall()
    tables = [
        TableState(name, dead, inserted, changed, reltuples, options_of(reloptions))
        for name, dead, inserted, changed, reltuples, reloptions in rows
    ]
    return server, tables


def vacuum_where_due(connection: Any) -> list[Work]:
    """On an autocommit connection of its own: VACUUM and ANALYZE what autovacuum would
    have, where it will not; what was done. Nothing when another server holds VACUUM_LOCK."""
    if not connection.execute("SELECT pg_try_advisory_lock(%(lock)s)", {"lock": VACUUM_LOCK}).fetchone()[0]:
        return []
    try:
        server, tables = read_state(connection)
        due = [work for work in (work_for(table, server) for table in tables) if work is not None]
        if due:
            _cost_limits_of_autovacuum(connection, server)
        for work in due:
            connection.execute(work.statement)
        return due
    finally:
        connection.execute("SELECT pg_advisory_unlock(%(lock)s)", {"lock": VACUUM_LOCK})


def _cost_limits_of_autovacuum(connection: Any, server: Mapping[str, str]) -> None:
    """This session's VACUUM pauses as autovacuum's do (a manual VACUUM does not pause)."""
    delay = server["autovacuum_vacuum_cost_delay"]  # with its unit: "2ms"; -1: vacuum_cost_delay's
    limit = server["autovacuum_vacuum_cost_limit"]  # -1: vacuum_cost_limit's
    if delay != "-1":
        connection.execute("SELECT set_config('vacuum_cost_delay', %(delay)s, false)", {"delay": delay})
    if limit != "-1":
        connection.execute("SELECT set_config('vacuum_cost_limit', %(limit)s, false)", {"limit": limit})
