"""The bare baseline on PostgreSQL: Starlette + psycopg 3 async, no GraphQL (`--database postgresql`).

    BENCH_BASELINE_PG_URL=postgresql://... \
        python -m uvicorn _baseline_pg_app:create_app --factory --app-dir bench

The PostgreSQL twin of `_baseline_app.py` (same routes, same request bodies, same answers),
served by uvicorn exactly as `queuelog serve` is. Where the SQLite baseline runs each
statement on one sqlite3 connection on the loop, this one runs it on one of a few psycopg
`AsyncConnection`s (BENCH_BASELINE_PG_CONNECTIONS, default 8, opened at start-up, each
request takes a free one), in autocommit: every statement is its own durable transaction,
at the server's default synchronous_commit, as queuelog's commits are. Statements: one
INSERT for `/enqueue`; `UPDATE ... WHERE id IN (SELECT ... LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING` for `/claim` (SKIP LOCKED: several connections claim at once, as queuelog's
servers may); the guarded UPDATE for `/complete`.

`/claim` with `variables.waitSeconds` waits for an enqueue of this process (an asyncio
future that `/enqueue` resolves after its INSERT commits), as the SQLite baseline does.
Same omissions as there: no authentication, input checks, idempotency, events, counters.

Its table (SCHEMA) has queuelog's job columns as queuelog stores them on PostgreSQL (payload
and result as text, timestamps as timestamptz) and the one index its claim needs. This
module imports nothing of the bench (uvicorn loads it from bench/ on its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS jobs (
        id BIGSERIAL PRIMARY KEY,
        type VARCHAR(255) NOT NULL,
        payload TEXT NOT NULL,
        priority SMALLINT NOT NULL,
        status VARCHAR(16) NOT NULL,
        retry_count INTEGER NOT NULL DEFAULT 0,
        max_retries INTEGER NOT NULL,
        attempt INTEGER NOT NULL DEFAULT 0,
        idempotency_key VARCHAR(255),
        claimed_at TIMESTAMPTZ,
        worker_id VARCHAR(255),
        lease_expires_at TIMESTAMPTZ,
        run_at TIMESTAMPTZ NOT NULL,
        finished_at TIMESTAMPTZ,
        result TEXT,
        error TEXT,
        created_by VARCHAR(255) NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS ix_jobs_claim ON jobs (priority DESC, created_at, id)"
    " WHERE status = 'pending'",
]
# Timestamps come from the database's clock (now(): the transaction's start), as queuelog
# takes them from PostgreSQL's clock on this backend.
INSERT_SQL = (
    "INSERT INTO jobs (type, payload, priority, status, max_retries, idempotency_key, run_at, "
    "created_by, created_at, updated_at) VALUES (%s, %s, %s, 'pending', %s, %s, now(), %s, now(), now()) "
    "RETURNING id"
)
_CLAIM = (
    "UPDATE jobs SET status = 'running', worker_id = %s, claimed_at = now(), attempt = attempt + 1, "
    "lease_expires_at = now() + interval '300 seconds', updated_at = now() "
    "WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND run_at <= now() "
    "ORDER BY priority DESC, created_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED) "
    "RETURNING id, type, payload, attempt"
)
CLAIM_ONE_SQL = _CLAIM.format(limit="1")
CLAIM_MANY_SQL = _CLAIM.format(limit="%s")
COMPLETE_SQL = (
    "UPDATE jobs SET status = 'completed', result = %s, finished_at = now(), lease_expires_at = NULL, "
    "updated_at = now() WHERE id = %s AND status = 'running' AND worker_id = %s AND attempt = %s"
)
# Many pending no-op jobs at once (queues topped up between rounds; not measured).
FILL_SQL = (
    "INSERT INTO jobs (type, payload, priority, status, max_retries, run_at, created_by, created_at, "
    "updated_at) SELECT 'noop', '{\"n\":' || g || '}', 0, 'pending', 3, now(), 'bench-producer', "
    "now(), now() FROM generate_series(1, %s) AS g"
)
PRIORITIES = {"LOW": 0, "MEDIUM": 10, "HIGH": 20, "CRITICAL": 30}
WORKER = "bench-worker"
PRODUCER = "bench-producer"
DEFAULT_CONNECTIONS = 8
R = TypeVar("R")


def create_app() -> Any:
    import psycopg
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    url = os.environ["BENCH_BASELINE_PG_URL"]
    size = int(os.environ.get("BENCH_BASELINE_PG_CONNECTIONS", DEFAULT_CONNECTIONS))
    free: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
    waiters: set[asyncio.Future[None]] = set()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        opened = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(size)]
        for conn in opened:
            free.put_nowait(conn)
        try:
            yield
        finally:
            for conn in opened:
                await conn.close()

    async def run(sql: str, params: tuple[Any, ...]) -> tuple[Any, int]:
        conn = await free.get()
        try:
            cursor = await conn.execute(sql, params)
            row = await cursor.fetchone() if cursor.description is not None else None
            return row, cursor.rowcount
        finally:
            free.put_nowait(conn)

    async def claim_one() -> Response | None:
        row, _ = await run(CLAIM_ONE_SQL, (WORKER,))
        if row is None:
            return None
        body = b'{"id":%d,"type":%s,"payload":%s,"attempt":%d}' % (
            row[0],
            json.dumps(row[1]).encode(),
            row[2].encode(),
            row[3],
        )
        return Response(body, media_type="application/json")

    async def enqueue(request: Request) -> Response:
        item = (await request.json())["variables"]["input"]
        params = (
            item["type"],
            json.dumps(item.get("payload", {}), separators=(",", ":"), ensure_ascii=False),
            PRIORITIES[item.get("priority", "LOW")],
            item.get("maxRetries", 3),
            item.get("idempotencyKey"),
            PRODUCER,
        )
        row, _ = await run(INSERT_SQL, params)
        wake(waiters)
        return JSONResponse({"id": row[0]})

    async def claim(request: Request) -> Response:
        answer = await claim_or_wait(claim_one, waiters, (await request.json()).get("variables") or {})
        return answer if answer is not None else JSONResponse(None)

    async def complete(request: Request) -> Response:
        variables = (await request.json())["variables"]
        result = json.dumps(variables.get("result"), separators=(",", ":"), ensure_ascii=False)
        job_id = int(variables["id"])
        _, rowcount = await run(COMPLETE_SQL, (result, job_id, WORKER, variables.get("attempt")))
        if rowcount != 1:
            return JSONResponse({"error": "conflict"}, status_code=409)
        return JSONResponse({"id": job_id, "status": "COMPLETED"})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/enqueue", enqueue, methods=["POST"]),
            Route("/claim", claim, methods=["POST"]),
            Route("/complete", complete, methods=["POST"]),
            Route("/healthz", healthz),
        ],
        lifespan=lifespan,
    )


async def claim_or_wait(
    claim_one: Callable[[], Awaitable[R | None]],
    waiters: set[asyncio.Future[None]],
    variables: dict[str, Any],
) -> R | None:
    """`/claim`: a job now, or once an enqueue of this process wakes `waiters`, until
    `variables.waitSeconds` (at most 30) have passed; None then."""
    deadline = time.monotonic() + min(30, int(variables.get("waitSeconds") or 0))
    while True:
        answer = await claim_one()
        if answer is not None:
            return answer
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        waiter = asyncio.get_running_loop().create_future()
        waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, left)
        except TimeoutError:
            pass
        finally:
            waiters.discard(waiter)


def wake(waiters: set[asyncio.Future[None]]) -> None:
    """An enqueue committed: every waiting claim looks again."""
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
