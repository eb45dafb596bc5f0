"""A rate window is counted by seeks, not row by row (API.md section 9, storage/operations/flow.py).

Every claim of a rate-limited type reads its window under the lock that every server's
counted claims share; a limit of 100,000 a day used to mean counting up to 100,000 rows of
rate_claims per claim. These tests fill rate_claims through the server's own statement
(INSERT_RATE_CLAIM) on a real SQLite file and a real PostgreSQL database, then read the window
with RATE_WINDOW and check both its answer and the work it took: SQLite's virtual-machine
steps (a progress handler counts them) and PostgreSQL's buffer reads (EXPLAIN ANALYZE) must
not grow with the number of claims in the window.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from conftest import Databases

from queuelog.storage.engine import sqlite_file
from queuelog.storage.postgres.statements import PostgresStatements
from queuelog.storage.schema.types import to_micros
from queuelog.storage.sqlite.statements import SqliteStatements

HOUR_US = 3_600_000_000
NOW_US = to_micros(datetime.now(UTC))


def _claims(job_type: str, key: str, count: int, start_us: int) -> list[dict[str, Any]]:
    """`count` claims one millisecond apart from `start_us`."""
    return [{"type": job_type, "key": key, "at": start_us + i * 1000} for i in range(count)]


class Window:
    """RATE_WINDOW on one database, with the work it did."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        if backend == "sqlite":
            path = sqlite_file(url)
            assert path is not None
            self.sqlite = sqlite3.connect(path, isolation_level=None)
            self.sql: Any = SqliteStatements
        else:
            self.pg = psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True)
            self.sql = PostgresStatements

    def close(self) -> None:
        (self.sqlite if self.backend == "sqlite" else self.pg).close()

    def insert(self, rows: list[dict[str, Any]]) -> None:
        if self.backend == "sqlite":
            self.sqlite.execute("BEGIN")
            self.sqlite.executemany(self.sql.INSERT_RATE_CLAIM, rows)
            self.sqlite.execute("COMMIT")
        else:
            with self.pg.cursor() as cursor:
                cursor.executemany(self.sql.INSERT_RATE_CLAIM, rows)

    def read(self, job_type: str, since_us: int) -> tuple[dict[str, tuple[int, int]], int]:
        """key -> (claims in the window, the oldest's micros), and the work done reading it."""
        params = {"type": job_type, "since": since_us}
        if self.backend == "sqlite":
            steps = [0]

            def step() -> int:
                steps[0] += 1
                return 0

            self.sqlite.set_progress_handler(step, 100)
            rows = self.sqlite.execute(self.sql.RATE_WINDOW, params).fetchall()
            self.sqlite.set_progress_handler(None, 0)
            return {key: (n, oldest) for key, n, oldest in rows}, steps[0]
        with self.pg.cursor() as cursor:
            rows = cursor.execute(self.sql.RATE_WINDOW, params).fetchall()
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + self.sql.RATE_WINDOW, params)
            (plan,) = cursor.fetchone()
        plan = plan if isinstance(plan, list) else json.loads(plan)
        top = plan[0]["Plan"]
        buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
        return {key: (n, _micros(oldest)) for key, n, oldest in rows}, buffers


def _micros(value: Any) -> int:
    return value if isinstance(value, int) else to_micros(value)


def _with_window(databases: Databases, test: Callable[[Window], None]) -> None:
    url = databases.migrated()
    window = Window(databases.backend, url)
    try:
        test(window)
    finally:
        window.close()


def test_a_type_wide_window_reads_the_same_whatever_its_count(databases: Databases) -> None:
    def test(window: Window) -> None:
        start = NOW_US - HOUR_US
        window.insert(_claims("small", "", 200, start))
        window.insert(_claims("big", "", 40_000, start))
        since = NOW_US - 2 * HOUR_US
        small, small_work = window.read("small", since)
        big, big_work = window.read("big", since)
        assert small == {"": (200, start)}
        assert big == {"": (40_000, start)}
        print(f"\n{window.backend}: work reading 200 claims {small_work}, 40,000 claims {big_work}")
        assert big_work <= 2 * small_work + 20, (small_work, big_work)

    _with_window(databases, test)


def test_a_window_counts_only_the_claims_inside_it(databases: Databases) -> None:
    def test(window: Window) -> None:
        start = NOW_US - HOUR_US
        window.insert(_claims("t", "", 1000, start))  # one per millisecond, over one second
        window.insert(_claims("t", "k", 10, start + 500_000))
        assert window.read("t", start + 399_999)[0] == {
            "": (600, start + 400_000),
            "k": (10, start + 500_000),
        }
        assert window.read("t", start + 500_009)[0] == {"": (499, start + 501_000), "k": (9, start + 501_000)}
        assert window.read("t", start + 998_999)[0] == {"": (1, start + 999_000)}
        assert window.read("t", start + 999_000)[0] == {}

    _with_window(databases, test)


def test_a_claim_recorded_with_an_earlier_clock_keeps_the_order_the_count_needs(
    databases: Databases,
) -> None:
    """A claim stamped before the last one (another process's clock a little behind) is
    recorded at the last one's moment: later, never earlier, so the window stays strict."""

    def test(window: Window) -> None:
        start = NOW_US - HOUR_US
        window.insert(_claims("t", "", 3, start))
        window.insert([{"type": "t", "key": "", "at": start - 5_000}])
        assert window.read("t", start - 10_000)[0] == {"": (4, start)}
        assert window.read("t", start + 1_500)[0] == {"": (2, start + 2_000)}

    _with_window(databases, test)
