"""huey, the end-to-end baseline of figure 4: a no-op task on SqliteHuey, results off.

    python bench/_huey_app.py enqueue DB N
    python bench/_huey_app.py consume DB WORKERS N OUT

`enqueue` puts N no-op tasks in the SqliteHuey file DB (without an fsync per task: the fill
is not measured). `consume` runs huey's own consumer (`huey.create_consumer`, thread
workers, no periodic tasks, otherwise the defaults of `huey_consumer`) with huey's storage
defaults (WAL, and SQLite's default synchronous=FULL, which huey keeps unless given
`fsync=`) until N tasks have run, then writes `{"first_start", "last_finish", "count"}`
(time.time() of the first SIGNAL_EXECUTING and of the last SIGNAL_COMPLETE) to OUT and
keeps running until the bench stops it. Both run
as this same script, so the task's registered name is the same in both.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from huey import SqliteHuey, signals


def make(path: str, **options: object) -> SqliteHuey:
    return SqliteHuey("bench", filename=path, results=False, **options)


def main(argv: list[str]) -> None:
    command, path = argv[0], argv[1]
    # The fill is not measured: no fsync per enqueue there (fsync=False: synchronous=OFF).
    # The consumer runs with huey's defaults (WAL; SQLite's default synchronous=FULL).
    huey = make(path, fsync=False) if command == "enqueue" else make(path)

    @huey.task()
    def noop(n: int) -> None:
        return None

    if command == "enqueue":
        for i in range(int(argv[2])):
            noop(i)
        huey.storage.close()
        return

    workers, expected, out = int(argv[2]), int(argv[3]), argv[4]
    finished: list[float] = []
    started: list[float] = []
    all_done = threading.Event()

    @huey.signal(signals.SIGNAL_EXECUTING)
    def on_start(signal: str, task: object) -> None:
        if not started:
            started.append(time.time())

    @huey.signal(signals.SIGNAL_COMPLETE)
    def on_complete(signal: str, task: object) -> None:
        finished.append(time.time())  # list.append is atomic under the GIL
        if len(finished) >= expected:
            all_done.set()

    def report() -> None:
        all_done.wait()
        with open(out + ".tmp", "w") as f:
            json.dump({"first_start": started[0], "last_finish": max(finished), "count": len(finished)}, f)
        os.replace(out + ".tmp", out)

    threading.Thread(target=report, daemon=True).start()
    consumer = huey.create_consumer(workers=workers, worker_type="thread", periodic=False)
    consumer.run()


if __name__ == "__main__":
    main(sys.argv[1:])
