"""An OS file lock that serialises SQLite writers across server processes.

SQLite's own lock is a busy-wait: a writer that finds the database locked sleeps in
growing steps (up to 100 ms) and tries again, so with `queuelog serve --workers N` the
processes' writes stall each other for far longer than they take. Taking an exclusive
`flock` on a file beside the database before BEGIN IMMEDIATE makes them queue in the
kernel instead, and each wakes the moment the previous one commits. The CLI's writes
take it too (engine.py). It is an optimisation, never a correctness requirement: SQLite's
own lock still guards every write. Not available on Windows, where it does nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    _HAVE_FCNTL = False
else:
    _HAVE_FCNTL = True

from sqlalchemy.engine import make_url


class WriteLock:
    def __init__(self, database_url: str, *, create: bool = True) -> None:
        """`create=False` (the CLI) uses the lock file only if a server has made one."""
        database = make_url(database_url).database
        self._fd: int | None = None
        if _HAVE_FCNTL and database and database != ":memory:":
            flags = os.O_RDWR | (os.O_CREAT if create else 0)
            try:
                self._fd = os.open(f"{database}-queuelog.lock", flags, 0o600)
            except FileNotFoundError:
                self._fd = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if self._fd is None:
            yield
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def acquire(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it, without waiting."""
        if self._fd is None:
            return True
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
