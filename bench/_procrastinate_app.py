"""procrastinate, the second PostgreSQL peer of figure 4 (`--database postgresql`): a no-op task.

    python bench/_procrastinate_app.py install URL                # procrastinate's schema
    python bench/_procrastinate_app.py enqueue URL N              # N no-op jobs, 1000 per call
    python bench/_procrastinate_app.py consume URL CONCURRENCY    # the worker, until SIGTERM

The consumer is procrastinate's own worker as `procrastinate worker --concurrency C` runs
it: `App.run_worker_async(concurrency=C, wait=True)` inside `App.open_async()`, with its
own SIGINT/SIGTERM handlers (a graceful stop), on asyncio's event loop as the CLI runs it.
The App has one async task `noop` that returns None, and a `PsycopgConnector` (psycopg 3's
`AsyncConnectionPool`, procrastinate's default connector) of C + 4 connections, all opened
before the worker starts: one per concurrent job slot, one for LISTEN/NOTIFY and some for
the heartbeat and the abort poll. Each slot fetches one job per query
(`procrastinate_fetch_job_v2`, `FOR UPDATE SKIP LOCKED`) and records its end with one more
(`procrastinate_finish_job_v1`); jobs are kept (`delete_jobs` stays "never"), and triggers
add a row to `procrastinate_events` on every status change.

The bench reads the outcome from the database, procrastinate's own clock: every job's row
ends `succeeded`, and `procrastinate_events` has a `started` and a `succeeded` row per job,
each stamped with now() of its transaction. The enqueue (`batch_defer_async` of 1000: one
INSERT each) is not measured.

The App is defined at module level in the module `_procrastinate_app`: run as a script, this
file imports itself under that name and runs there, since procrastinate warns about an App
created in `__main__`. Its placeholder connector is replaced for each command
(`App.replace_connector`) by one on the command's URL.
"""

from __future__ import annotations

import asyncio
import sys

if __name__ == "__main__":
    import _procrastinate_app  # this file again, as a module: see the docstring

    _procrastinate_app.main(sys.argv[1:])
    raise SystemExit(0)

import procrastinate  # noqa: E402

BATCH = 1000
SPARE_CONNECTIONS = 4  # beyond one per slot: LISTEN/NOTIFY, heartbeat, abort poll

app = procrastinate.App(connector=procrastinate.PsycopgConnector())


@app.task(name="noop")
async def noop(n: int, to: str) -> None:
    return None


def connector(url: str, size: int) -> procrastinate.PsycopgConnector:
    return procrastinate.PsycopgConnector(conninfo=url, min_size=size, max_size=size)


async def install(url: str) -> None:
    with app.replace_connector(connector(url, 1)):
        async with app.open_async():
            await app.schema_manager.apply_schema_async()


async def enqueue(url: str, count: int) -> None:
    with app.replace_connector(connector(url, 1)):
        async with app.open_async():
            for start in range(0, count, BATCH):
                ids = range(start, min(count, start + BATCH))
                await noop.batch_defer_async(*[{"n": i, "to": f"u{i}@example.com"} for i in ids])


async def consume(url: str, concurrency: int) -> None:
    with app.replace_connector(connector(url, concurrency + SPARE_CONNECTIONS)):
        async with app.open_async():
            await app.run_worker_async(concurrency=concurrency, wait=True, install_signal_handlers=True)


def main(argv: list[str]) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    command, url = argv[0], argv[1]
    if command == "install":
        asyncio.run(install(url))
    elif command == "enqueue":
        asyncio.run(enqueue(url, int(argv[2])))
    elif command == "consume":
        asyncio.run(consume(url, int(argv[2])))
    else:
        raise SystemExit(f"unknown command {command!r}")
