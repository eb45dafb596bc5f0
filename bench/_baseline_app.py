"""The bare baseline of the HTTP figures: Starlette + stdlib sqlite3 on the event loop, no GraphQL.

    BENCH_BASELINE_DB=/tmp/x.db python -m uvicorn _baseline_app:create_app --factory --app-dir bench

It is the lightest honest way to do each operation over HTTP on one machine: one process
served by uvicorn exactly as `queuelog serve` is served (uvloop + httptools, log level
warning), one stdlib sqlite3 connection used directly on the event loop (no thread hop),
WAL and synchronous=NORMAL (a commit is durable against a process crash, like queuelog's),
autocommit: every statement is its own transaction. Each request body is the very JSON
body queuelog gets for the same operation (`{"query", "variables"}`); the baseline ignores
the query text and reads the variables.

- `POST /enqueue`: one INSERT of `variables.input`; answers `{"id": N}`.
- `POST /claim`: one atomic `UPDATE ... WHERE id = (SELECT ... LIMIT 1) RETURNING`;
  answers `{"id", "type", "payload", "attempt"}` or `null`. With `variables.waitSeconds`
  it waits for an enqueue (an asyncio future that `/enqueue` resolves; no polling).
- `POST /complete`: one guarded `UPDATE ... WHERE id=? AND status='running' AND
  worker_id=? AND attempt=?`; answers `{"id", "status"}`, or 409 when nothing matched.
- `GET /healthz`: `{"status": "ok"}`.

Its table (SCHEMA below) has queuelog's job columns and the one index its own claim needs.
It leaves out on purpose: authentication, input validation, idempotency keys, job events,
counters, the dashboard's filter indexes, middleware. That is what "lightest honest" means
here: every figure compares queuelog with the least work that still does the operation
durably over HTTP.

The schema and statements are also used by the in-process ceilings (`bench/fig_batch.py`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL,
    status TEXT NOT NULL,
    retry_count INTEGER NOT NULL DEFAULT 0,
    max_retries INTEGER NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    claimed_at INTEGER,
    worker_id TEXT,
    lease_expires_at INTEGER,
    run_at INTEGER NOT NULL,
    finished_at INTEGER,
    result TEXT,
    error TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_jobs_claim ON jobs (priority DESC, created_at, id) WHERE status = 'pending';
"""

INSERT_SQL = (
    "INSERT INTO jobs (type, payload, priority, status, max_retries, idempotency_key, run_at, "
    "created_by, created_at, updated_at) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?)"
)
CLAIM_ONE_SQL = (
    "UPDATE jobs SET status = 'running', worker_id = ?, claimed_at = ?, attempt = attempt + 1, "
    "lease_expires_at = ?, updated_at = ? "
    "WHERE id = (SELECT id FROM jobs WHERE status = 'pending' AND run_at <= ? "
    "ORDER BY priority DESC, created_at, id LIMIT 1) "
    "RETURNING id, type, payload, attempt"
)
CLAIM_MANY_SQL = (
    "UPDATE jobs SET status = 'running', worker_id = ?, claimed_at = ?, attempt = attempt + 1, "
    "lease_expires_at = ?, updated_at = ? "
    "WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND run_at <= ? "
    "ORDER BY priority DESC, created_at, id LIMIT ?) "
    "RETURNING id, type, payload, attempt"
)
COMPLETE_SQL = (
    "UPDATE jobs SET status = 'completed', result = ?, finished_at = ?, lease_expires_at = NULL, "
    "updated_at = ? WHERE id = ? AND status = 'running' AND worker_id = ? AND attempt = ?"
)
PRIORITIES = {"LOW": 0, "MEDIUM": 10, "HIGH": 20, "CRITICAL": 30}
LEASE_MICROS = 300 * 1_000_000
WORKER = "bench-worker"
PRODUCER = "bench-producer"


def connect(path: str) -> sqlite3.Connection:
    """An autocommit connection with the pragmas every baseline uses."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    return db


def micros() -> int:
    return time.time_ns() // 1000


def insert_params(item: dict[str, Any], now: int, producer: str = PRODUCER) -> tuple[Any, ...]:
    return (
        item["type"],
        json.dumps(item.get("payload", {}), separators=(",", ":"), ensure_ascii=False),
        PRIORITIES[item.get("priority", "LOW")],
        item.get("maxRetries", 3),
        item.get("idempotencyKey"),
        now,
        producer,
        now,
        now,
    )


def create_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    db = connect(os.environ["BENCH_BASELINE_DB"])
    waiters: set[asyncio.Future[None]] = set()

    def claim_one() -> Response | None:
        now = micros()
        row = db.execute(CLAIM_ONE_SQL, (WORKER, now, now + LEASE_MICROS, now, now)).fetchone()
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
        cursor = db.execute(INSERT_SQL, insert_params(item, micros()))
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return JSONResponse({"id": cursor.lastrowid})

    async def claim(request: Request) -> Response:
        variables = (await request.json()).get("variables") or {}
        deadline = time.monotonic() + min(30, int(variables.get("waitSeconds") or 0))
        while True:
            answer = claim_one()
            if answer is not None:
                return answer
            left = deadline - time.monotonic()
            if left <= 0:
                return JSONResponse(None)
            waiter = asyncio.get_running_loop().create_future()
            waiters.add(waiter)
            try:
                await asyncio.wait_for(waiter, left)
            except TimeoutError:
                pass
            finally:
                waiters.discard(waiter)

    async def complete(request: Request) -> Response:
        variables = (await request.json())["variables"]
        now = micros()
        result = json.dumps(variables.get("result"), separators=(",", ":"), ensure_ascii=False)
        job_id = int(variables["id"])
        cursor = db.execute(COMPLETE_SQL, (result, now, now, job_id, WORKER, variables.get("attempt")))
        if cursor.rowcount != 1:
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
        ]
    )
