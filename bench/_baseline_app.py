"""The baseline of enqueue_http.py: a bare Starlette app, no GraphQL.

    BENCH_BASELINE_DATABASE_URL=sqlite:////tmp/x.db python -m uvicorn _baseline_app:create_app \
        --factory --app-dir bench

POST /graphql parses the same JSON body queuelog gets (`{"query", "variables": {"input":
{...}}}`), ignores the query text, and does the same single-row INSERT into queuelog's own
`jobs` table (the database is migrated by `queuelog migrate` first, so table and indexes are
identical) with SQLAlchemy Core on the stdlib sqlite3 driver, WAL and synchronous=NORMAL.
Like queuelog, writes run on one dedicated writer thread, so concurrent requests queue
in-process instead of on SQLite's file lock. It answers the same response shape.

What it leaves out, on purpose: GraphQL parsing/validation/execution, authentication (the
API-key lookup), input validation, the job_events row, the RETURNING of the whole row,
middleware (CORS, body limit, timing metrics) and event fan-out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import MetaData, Table, create_engine, event, insert
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PRIORITIES = {"LOW": 0, "MEDIUM": 10, "HIGH": 20, "CRITICAL": 30}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def create_app() -> Starlette:
    url = os.environ["BENCH_BASELINE_DATABASE_URL"]
    engine = create_engine(
        url, pool_size=1, max_overflow=0, connect_args={"check_same_thread": False, "timeout": 30}
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    jobs = Table("jobs", MetaData(), autoload_with=engine)
    statement = insert(jobs).returning(jobs.c.id)
    writer = ThreadPoolExecutor(1, thread_name_prefix="baseline-writer")

    def insert_row(row: dict[str, Any]) -> int:
        with engine.begin() as conn:
            return int(conn.execute(statement, row).scalar_one())

    async def enqueue(request: Request) -> Response:
        body = await request.json()
        item = body["variables"]["input"]
        now = _micros(datetime.now(UTC))
        row = {
            "type": item["type"],
            "payload": json.dumps(item.get("payload", {}), separators=(",", ":"), ensure_ascii=False),
            "priority": PRIORITIES[item.get("priority", "LOW")],
            "status": "pending",
            "retry_count": 0,
            "max_retries": item.get("maxRetries", 3),
            "attempt": 0,
            "idempotency_key": item.get("idempotencyKey"),
            "run_at": now,
            "created_by": "baseline",
            "created_at": now,
            "updated_at": now,
        }
        job_id = await asyncio.get_running_loop().run_in_executor(writer, insert_row, row)
        return JSONResponse(
            {"data": {"enqueueJob": {"created": True, "job": {"id": str(job_id), "status": "PENDING"}}}}
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            writer.shutdown(wait=True)
            engine.dispose()

    return Starlette(
        routes=[Route("/graphql", enqueue, methods=["POST"]), Route("/healthz", healthz)],
        lifespan=lifespan,
    )
