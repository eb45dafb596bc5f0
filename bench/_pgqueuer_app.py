"""PgQueuer, the PostgreSQL peer of figure 4 (`--database postgresql`): a no-op entrypoint.

    python bench/_pgqueuer_app.py install URL                 # pgqueuer's schema (`pgq install`)
    python bench/_pgqueuer_app.py enqueue URL N               # N no-op jobs, 1000 per call
    python bench/_pgqueuer_app.py consume URL DRIVER BATCH MAX  # the worker, until SIGTERM

The consumer is PgQueuer's own worker as `pgq run FACTORY --batch-size BATCH
--max-concurrent-tasks MAX` runs it: `pgqueuer.run(factory, ...)`, "a worker from factory,
as pgq run does, without the CLI", on uvloop as the CLI does. (The CLI itself is not used:
pgqueuer 1.6.0's `pgq run` fails at start-up with typer 0.29, `AttributeError: 'str' object
has no attribute 'name'` in setup_fancy_logger.) The factory returns a `PgQueuer` on one
connection (asyncpg, pgqueuer's first driver, or psycopg 3's AsyncConnection, in autocommit
as pgqueuer requires) with one async entrypoint `noop` that returns None. The worker claims
up to BATCH jobs per dequeue (`UPDATE ... FOR UPDATE SKIP LOCKED`), holds at most MAX
picked jobs (0 = no limit), is woken by LISTEN/NOTIFY, and records completions in batches
(pgqueuer_log) as it always does.

The bench reads the outcome from the database, pgqueuer's own clock: `pgqueuer_log` has a
row per job for `picked` and one for `successful`, each stamped with now() of its
transaction. The enqueue (`Queries.enqueue` with lists: one INSERT per 1000 jobs) is not
measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

BATCH = 1000


async def _driver(url: str, kind: str) -> Any:
    if kind == "psycopg":
        import psycopg
        from pgqueuer.db import PsycopgDriver

        return PsycopgDriver(await psycopg.AsyncConnection.connect(url, autocommit=True))
    import asyncpg
    from pgqueuer.db import AsyncpgDriver

    return AsyncpgDriver(await asyncpg.connect(url))


@contextlib.asynccontextmanager
async def factory(url: str, driver_kind: str) -> AsyncIterator[Any]:
    """The PgQueuer of the figure: one connection, one no-op entrypoint."""
    from pgqueuer import PgQueuer
    from pgqueuer.models import Job

    pgq = PgQueuer(await _driver(url, driver_kind))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    yield pgq


async def install(url: str) -> None:
    from pgqueuer.queries import Queries

    driver = await _driver(url, "asyncpg")
    await Queries(driver).install()


async def enqueue(url: str, count: int) -> None:
    from pgqueuer.queries import Queries

    queries = Queries(await _driver(url, "asyncpg"))
    for start in range(0, count, BATCH):
        ids = range(start, min(count, start + BATCH))
        payloads = [json.dumps({"n": i, "to": f"u{i}@example.com"}).encode() for i in ids]
        await queries.enqueue(["noop"] * len(payloads), payloads, [0] * len(payloads))


def consume(url: str, driver_kind: str, batch_size: int, max_tasks: int) -> None:
    import logging

    import pgqueuer
    import uvloop

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    uvloop.run(
        pgqueuer.run(
            functools.partial(factory, url, driver_kind),
            batch_size=batch_size,
            max_concurrent_tasks=max_tasks or None,
        )
    )


def main(argv: list[str]) -> None:
    command, url = argv[0], argv[1]
    if command == "install":
        asyncio.run(install(url))
    elif command == "enqueue":
        asyncio.run(enqueue(url, int(argv[2])))
    elif command == "consume":
        consume(url, argv[2], int(argv[3]), int(argv[4]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
