"""queuelog's public GraphQL API as the bench uses it: the documents, and bulk helpers.

Everything here goes through HTTP `POST /graphql` with a key, as any client would; the
bench never writes to queuelog's database.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator, Sequence
from typing import Any

from bench._common import HttpConnection, HttpError, bearer, graphql_body, graphql_data

ENQUEUE = "mutation Enqueue($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
ENQUEUE_MANY = (
    "mutation EnqueueMany($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
)
CLAIM = (
    "mutation Claim($waitSeconds: Int) { claimJob(waitSeconds: $waitSeconds) { id type payload attempt } }"
)
CLAIM_MANY = "mutation ClaimMany($limit: Int!) { claimJobs(limit: $limit) { id type payload attempt } }"
COMPLETE = (
    "mutation Complete($id: ID!, $attempt: Int, $result: JSON) "
    "{ completeJob(id: $id, attempt: $attempt, result: $result) { id status } }"
)
COMPLETE_MANY = (
    "mutation CompleteMany($items: [CompleteJobInput!]!) "
    "{ completeJobs(items: $items) { completed { id } rejected } }"
)
STATS = (
    "query Stats { queueStats { counts { pending running completed failed cancelled } "
    "byType { type counts { pending running completed failed cancelled } } oldestPendingSeconds } }"
)
COUNTS = "query Counts { queueStats { counts { pending running completed failed cancelled } } }"
JOB = "query Job($id: ID!) { job(id: $id) { id type status attempt createdAt } }"
PAGE_FIELDS = (
    "edges { cursor node { id type status priority attempt createdAt } } pageInfo { hasNextPage endCursor }"
)
PAGE = (
    "query Page($status: JobStatus, $type: String, $first: Int!, $after: String) "
    "{ jobs(status: $status, type: $type, first: $first, after: $after) { " + PAGE_FIELDS + " } }"
)
TIMES_PAGE = (
    "query Times($after: String) { jobs(status: COMPLETED, first: 100, after: $after) "
    "{ nodes { id attempt claimedAt finishedAt } pageInfo { hasNextPage endCursor } } }"
)
RESULT = {"ok": True}


class Api:
    """One keep-alive connection to a queuelog server, authenticated with one key."""

    def __init__(self, url: str, key: str | None) -> None:
        self.conn = HttpConnection(url, bearer(key) if key else {})

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.conn.close()

    async def call(self, query: str, variables: dict[str, Any] | None = None) -> Any:
        return graphql_data(*await self.conn.post("/graphql", graphql_body(query, variables)))

    async def counts(self) -> dict[str, int]:
        counts: dict[str, int] = (await self.call(COUNTS))["queueStats"]["counts"]
        return counts


def job_input(i: int, job_type: str = "noop") -> dict[str, Any]:
    return {"type": job_type, "payload": {"n": i, "to": f"u{i}@example.com"}}


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def enqueue_many(
    url: str,
    key: str,
    count: int,
    *,
    batch: int = 1000,
    connections: int = 2,
    types: Sequence[str] = ("noop",),
    start: int = 0,
    deadline: float | None = None,
) -> int:
    """Enqueue `count` jobs with `enqueueJobs` of `batch`, over `connections` connections.

    Job i gets type types[i % len(types)]. Stops starting calls after `deadline` (a
    time.monotonic() value); returns how many jobs were enqueued.
    """
    pending = iter(chunks(range(start, start + count), batch))
    done = 0

    async def producer() -> None:
        nonlocal done
        async with Api(url, key) as api:
            for ids in pending:
                if deadline is not None and time.monotonic() > deadline:
                    return
                inputs = [job_input(i, types[i % len(types)]) for i in ids]
                answer = (await api.call(ENQUEUE_MANY, {"inputs": inputs}))["enqueueJobs"]
                if len(answer) != len(inputs):
                    raise HttpError(f"enqueueJobs answered {len(answer)} of {len(inputs)} jobs")
                done += len(inputs)

    await asyncio.gather(*(producer() for _ in range(connections)))
    return done


def tomorrow() -> str:
    """A `runAt` a day ahead: the job waits, delayed, PENDING."""
    return (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)).isoformat()


def job_inputs(types: Sequence[str], run_at: str | None = None) -> Iterator[dict[str, Any]]:
    """Endless enqueueJob inputs, the types in turn, each `runAt` this (None: due now)."""
    n = 0
    while True:
        item: dict[str, Any] = {"type": types[n % len(types)], "payload": {"n": n, "to": f"u{n}@example.com"}}
        if run_at is not None:
            item["runAt"] = run_at
        yield item
        n += 1


async def enqueue_inputs(
    url: str, key: str, inputs: Iterator[dict[str, Any]], count: int, connections: int = 2
) -> list[str]:
    """`count` jobs from `inputs`, `enqueueJobs` of 1000 over `connections` connections;
    their ids."""
    batches = iter(chunks(range(count), 1000))
    ids: list[str] = []

    async def producer() -> None:
        async with Api(url, key) as api:
            for batch in batches:
                items = [next(inputs) for _ in batch]
                answer = (await api.call(ENQUEUE_MANY, {"inputs": items}))["enqueueJobs"]
                if len(answer) != len(items):
                    raise HttpError(f"enqueueJobs answered {len(answer)} of {len(items)} jobs")
                ids.extend(item["job"]["id"] for item in answer)

    await asyncio.gather(*(producer() for _ in range(connections)))
    return ids


async def claim_and_complete(url: str, key: str, count: int, *, connections: int = 2) -> int:
    """Claim (claimJobs, 100) and complete (completeJobs) up to `count` jobs; returns how many."""
    left = count
    done = 0

    async def worker() -> None:
        nonlocal left, done
        async with Api(url, key) as api:
            while left > 0:
                limit = min(100, left)
                left -= limit
                jobs = (await api.call(CLAIM_MANY, {"limit": limit}))["claimJobs"]
                left += limit - len(jobs)
                if not jobs:
                    return
                items = [{"id": j["id"], "attempt": j["attempt"], "result": RESULT} for j in jobs]
                outcome = (await api.call(COMPLETE_MANY, {"items": items}))["completeJobs"]
                if outcome["rejected"]:
                    raise HttpError(f"completeJobs rejected {outcome['rejected'][:5]}")
                done += len(jobs)

    await asyncio.gather(*(worker() for _ in range(connections)))
    return done
