"""The same-statements baseline on PostgreSQL: bare Starlette sending queuelog's own SQL (issue 31).

    BENCH_BASELINE_PG_URL=postgresql://... \
        python -m uvicorn bench._baseline_pg_same_app:create_app --factory --app-dir .

Figures 1 and 2's target on PostgreSQL: same routes, request bodies and answers as
`_baseline_pg_app.py`, served by uvicorn exactly as `queuelog serve` is, on a database
migrated to queuelog's schema. Each request runs, in one transaction of its own, what
queuelog's write batch runs for that one operation (`_pg_same_sql.py`: the statements'
text copied from queuelog/storage/postgres/statements/, the same round trips and pipelines,
the same job_events rows, counter deltas and NOTIFY) with the same driver the same way:
psycopg 3's sync API on a thread of its own, one connection per thread
(BENCH_BASELINE_PG_CONNECTIONS threads, default 8), as queuelog's writers run. What it
leaves out is queuelog's Python: GraphQL, keys and their per-request check, input checks,
the group commit (so no savepoints, and no sharing of a COMMIT between requests), the
repository and the codec.

`/claim` with `variables.waitSeconds` waits for an enqueue of this process, as the other
baselines do. This module imports nothing of queuelog.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from bench import _pg_same_sql as same
from bench._baseline_pg_app import claim_or_wait, wake

T = TypeVar("T")
WORKER = "bench-worker"
PRODUCER = "bench-producer"
DEFAULT_CONNECTIONS = 8


def create_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    url = os.environ["BENCH_BASELINE_PG_URL"]
    size = int(os.environ.get("BENCH_BASELINE_PG_CONNECTIONS", DEFAULT_CONNECTIONS))
    threads = ThreadPoolExecutor(size, thread_name_prefix="baseline-pg")
    local = threading.local()
    opened: list[Any] = []
    opened_lock = threading.Lock()
    waiters: set[asyncio.Future[None]] = set()

    def connection() -> Any:
        conn = getattr(local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = local.conn = same.connect(url)
            with opened_lock:
                opened.append(conn)
        return conn

    def in_transaction(body: Callable[[Any], T]) -> T:
        conn = connection()
        try:
            return body(conn)
        except BaseException:
            conn.rollback()
            raise

    async def run(body: Callable[[Any], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(threads, in_transaction, body)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        # Every thread's connection opened now, not by the first requests.
        barrier = threading.Barrier(size)
        await asyncio.gather(*(run(lambda conn: barrier.wait(10)) for _ in range(size)))
        try:
            yield
        finally:
            threads.shutdown(wait=True)
            for conn in opened:
                conn.close()

    async def claim_one() -> Response | None:
        rows = await run(lambda conn: same.tx_claim(conn, WORKER, 1))
        if not rows:
            return None
        row = rows[0]
        body = b'{"id":%d,"type":%s,"payload":%s,"attempt":%d}' % (
            row[same.COL_ID],
            json.dumps(row[same.COL_TYPE]).encode(),
            row[same.COL_PAYLOAD].encode(),
            row[same.COL_ATTEMPT],
        )
        return Response(body, media_type="application/json")

    async def enqueue(request: Request) -> Response:
        item = (await request.json())["variables"]["input"]
        payload = json.dumps(item.get("payload", {}), separators=(",", ":"), ensure_ascii=False)
        (job_id,) = await run(lambda conn: same.tx_enqueue(conn, [(item, payload)], PRODUCER))
        wake(waiters)
        return JSONResponse({"id": job_id})

    async def claim(request: Request) -> Response:
        answer = await claim_or_wait(claim_one, waiters, (await request.json()).get("variables") or {})
        return answer if answer is not None else JSONResponse(None)

    async def complete(request: Request) -> Response:
        variables = (await request.json())["variables"]
        result = json.dumps(variables.get("result"), separators=(",", ":"), ensure_ascii=False)
        job_id = int(variables["id"])
        item = (job_id, variables.get("attempt"), result)
        done = await run(lambda conn: same.tx_complete(conn, WORKER, [item]))
        if not done:
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


def fill(url: str, n: int, chunk: int = 1000) -> None:
    """n pending no-op jobs through the same enqueue transaction, `chunk` at a time (topping
    the queue up between rounds; not measured): their counters move too, and the claim reads
    the types it claims from them."""
    with contextlib.closing(same.connect(url)) as conn:
        for start in range(0, n, chunk):
            items = [
                ({"type": "noop", "payload": {"n": i}}, f'{{"n":{i}}}')
                for i in range(start, min(n, start + chunk))
            ]
            same.tx_enqueue(conn, items, PRODUCER)
