"""Stalling a server's write at a chosen point, so that a test forces a race instead of hoping
for it.

PostgreSQL: `install_stall` adds a trigger to the test's own database whose function, for the
rows `condition` picks, waits for a shared advisory lock; `AdvisoryHold` holds that lock on a
connection of the test's own until released. While it is held, the server's transaction that
wrote such a row waits right there (a constraint trigger deferred to COMMIT waits in the
COMMIT); `waiting_for` counts those waiting, so a test knows the stall is in place before it
goes on. Nothing is changed by the trigger: released, the transaction goes on as if it had
never waited.

SQLite: `FileLockHold` takes the exclusive `flock` beside the database that a server's writer
takes before BEGIN IMMEDIATE (storage/write_lock.py): its next batch then waits for it on a
helper thread; `flock_waiters` counts the processes waiting for it (/proc/locks).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

import psycopg
from sqlalchemy.engine import make_url

DEADLINE = 30.0


def install_stall(
    database_url: str, *, name: str, table: str, condition: str, lock: int, at_commit: bool = False
) -> None:
    """A trigger `name` on `table` (after INSERT, or before UPDATE), waiting for advisory lock
    `lock` whenever `condition` (PL/pgSQL, on NEW) holds; `at_commit`: a constraint trigger
    deferred to COMMIT (after INSERT only)."""
    when = "AFTER INSERT" if at_commit or table == "job_events" else "BEFORE UPDATE"
    returned = "NULL" if when.startswith("AFTER") else "NEW"
    kind = "CONSTRAINT TRIGGER" if at_commit else "TRIGGER"
    deferred = " DEFERRABLE INITIALLY DEFERRED" if at_commit else ""
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$"  # type: ignore[arg-type]
            f" BEGIN IF {condition} THEN PERFORM pg_advisory_xact_lock_shared({int(lock)}); END IF;"
            f" RETURN {returned}; END $$"
        )
        connection.execute(
            f"CREATE {kind} {name} {when} ON {table}{deferred}"  # type: ignore[arg-type]
            f" FOR EACH ROW EXECUTE FUNCTION {name}()"
        )


class AdvisoryHold:
    """Holds advisory lock `lock` (exclusively, for the session) until `release()`."""

    def __init__(self, database_url: str, lock: int) -> None:
        self.lock = lock
        self._connection = psycopg.connect(database_url, autocommit=True)
        self._connection.execute("SELECT pg_advisory_lock(%s)", (lock,))
        self.held = True

    def release(self) -> None:
        if self.held:
            self._connection.execute("SELECT pg_advisory_unlock(%s)", (self.lock,))
            self.held = False

    def close(self) -> None:
        self.release()
        self._connection.close()

    def __enter__(self) -> AdvisoryHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def waiting_for(database_url: str, lock: int) -> int:
    """How many transactions wait for advisory lock `lock` (a key below 2^32: objid)."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND NOT granted",
            (lock,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def until_waiting(database_url: str, lock: int, count: int = 1) -> None:
    """Until `count` transactions wait for `lock` (else fail after DEADLINE seconds)."""
    end = time.monotonic() + DEADLINE
    while waiting_for(database_url, lock) < count:
        assert time.monotonic() < end, f"no {count} transaction(s) came to wait for lock {lock}"
        time.sleep(0.02)


def until_released(database_url: str, lock: int) -> None:
    """Until no transaction holds or waits for `lock` (the stalled one has ended)."""
    end = time.monotonic() + DEADLINE
    while True:
        with psycopg.connect(database_url, autocommit=True) as connection:
            row = connection.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s", (lock,)
            ).fetchone()
        if row is not None and row[0] == 0:
            return
        assert time.monotonic() < end, f"lock {lock} is still held or waited for"
        time.sleep(0.02)


def lock_file_of(database_url: str) -> str:
    return f"{make_url(database_url).database}-queuelog.lock"


class FileLockHold:
    """Holds the SQLite writers' `flock` of the database at `database_url` until released."""

    def __init__(self, database_url: str) -> None:
        self.path = lock_file_of(database_url)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self.held = True

    def release(self) -> None:
        if self.held:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self.held = False

    def close(self) -> None:
        self.release()
        os.close(self._fd)

    def __enter__(self) -> FileLockHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def flock_waiters(path: str) -> int:
    """How many processes wait for the `flock` on `path` (the "->" lines of /proc/locks)."""
    inode = os.stat(path).st_ino
    waiting = 0
    with open("/proc/locks") as locks:
        for line in locks:
            fields = line.split()
            if fields[1] == "->" and fields[2] == "FLOCK" and fields[6].rsplit(":", 1)[-1] == str(inode):
                waiting += 1
    return waiting


def until_flock_waited(path: str) -> None:
    end = time.monotonic() + DEADLINE
    while flock_waiters(path) < 1:
        assert time.monotonic() < end, f"no writer came to wait for {path}"
        time.sleep(0.02)


@contextlib.contextmanager
def held(database_url: str, lock: int) -> Iterator[AdvisoryHold]:
    hold = AdvisoryHold(database_url, lock)
    try:
        yield hold
    finally:
        hold.close()
