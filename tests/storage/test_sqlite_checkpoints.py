"""SQLite checkpoints run off the writer's path (queuelog/storage/sqlite/database.py).

On a real SQLite file, through the Repository: the writer never checkpoints
(wal_autocheckpoint=0), so a COMMIT on the event loop never waits for one; the database's
own checkpointer thread copies the write-ahead log back into the database file within a
few of its intervals, so the log does not grow without bound; and it stops with the
database.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from conftest import migrate

from queuelog.model import NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.repository import Repository
from queuelog.storage.sqlite import database as sqlite
from queuelog.storage.sqlite.database import SqliteDatabase

JOBS = 6000


def test_the_checkpointer_not_the_writer_copies_the_log_into_the_database(tmp_path: Path) -> None:
    path = tmp_path / "queuelog.db"
    payload = {"text": "x" * 300}
    job = NewJob("email", payload, Priority.MEDIUM, 0, None, None, payload_json=f'{{"text":"{"x" * 300}"}}')

    async def scenario() -> tuple[int, int, int, bool]:
        repository = Repository(migrate(f"sqlite:///{path}"), RetryPolicy(10, 3600))
        await repository.open()
        db = repository._db
        assert isinstance(db, SqliteDatabase)
        (autocheckpoint,) = db._writer.execute("PRAGMA wal_autocheckpoint").fetchone()
        before = os.path.getsize(path)
        for _ in range(JOBS // 500):
            await repository.enqueue([job] * 500, "producer")
        deadline = time.monotonic() + 20 * sqlite.CHECKPOINT_SECONDS
        # Over 2 MB of jobs went into the log; the checkpointer moves them into the file.
        while os.path.getsize(path) < before + 2_000_000 and time.monotonic() < deadline:
            await asyncio.sleep(sqlite.CHECKPOINT_SECONDS / 4)
        grown = os.path.getsize(path) - before
        thread = db.checkpointer._thread
        await repository.close()
        return autocheckpoint, grown, db.checkpointer.checkpoints, thread.is_alive()

    autocheckpoint, grown, checkpoints, alive = asyncio.run(scenario())
    assert autocheckpoint == 0
    assert grown >= 2_000_000, grown
    assert checkpoints >= 1
    assert not alive  # closed with the database
