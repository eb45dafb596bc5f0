"""Mutation resolvers: enqueue, claim, report, cancel and retry, snooze and edit."""

from __future__ import annotations

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from queuelog.model import (
    CompleteAndClaimOutcome,
    Completion,
    CompletionOutcome,
    EnqueueOutcome,
    Job,
    JobRequest,
)
from queuelog.resolvers.ids import parse_job_id
from queuelog.schema.context import RequestContext, caller, queue
from queuelog.schema.inputs import CompleteJobInput, EnqueueJobInput, UpdateJobInput

Ctx = Info[RequestContext, None]


def _enqueue_request(item: EnqueueJobInput) -> JobRequest:
    # Both paths (Strawberry's and queuelog.compiled) hand over EnqueueJobInput objects,
    # whose attributes are exactly its dataclass fields, EnqueueRequest's: read them at once.
    fields = vars(item)
    if item.depends_on:
        fields = {**fields, "depends_on": [parse_job_id(i, "dependsOn") for i in item.depends_on]}
    return JobRequest(**fields)


async def enqueue_job(info: Ctx, input: EnqueueJobInput) -> EnqueueOutcome:
    (outcome,) = await queue(info).enqueue(caller(info), [_enqueue_request(input)])
    return outcome


async def enqueue_jobs(info: Ctx, inputs: list[EnqueueJobInput]) -> list[EnqueueOutcome]:
    return await queue(info).enqueue(caller(info), [_enqueue_request(i) for i in inputs])


async def _claim(
    info: Ctx, limit: int, types: list[str] | None, lease_seconds: int | None, wait_seconds: int | None
) -> list[Job]:
    context = info.context
    # Over a websocket, the operation's task is cancelled when the socket closes or the
    # client stops the operation: the queue sees that itself (JobQueue.claim).
    gone = context.client_gone if context.request.scope["type"] == "http" else None
    claimed = await queue(info).claim(
        caller(info),
        types=types,
        limit=limit,
        lease_seconds=lease_seconds,
        wait_seconds=wait_seconds,
        client_gone=gone,
    )
    return claimed


async def claim_job(
    info: Ctx,
    types: list[str] | None = None,
    lease_seconds: int | None = None,
    wait_seconds: int | None = None,
) -> Job | None:
    claimed = await _claim(info, 1, types, lease_seconds, wait_seconds)
    return claimed[0] if claimed else None


async def claim_jobs(
    info: Ctx,
    limit: int,
    types: list[str] | None = None,
    lease_seconds: int | None = None,
    wait_seconds: int | None = None,
) -> list[Job]:
    return await _claim(info, limit, types, lease_seconds, wait_seconds)


async def heartbeat_job(
    info: Ctx, id: strawberry.ID, attempt: int | None = None, lease_seconds: int | None = None
) -> Job:
    return await queue(info).heartbeat(caller(info), parse_job_id(id), attempt, lease_seconds)


async def complete_job(
    info: Ctx, id: strawberry.ID, result: JSON | None = None, attempt: int | None = None
) -> Job:
    return await queue(info).complete(caller(info), parse_job_id(id), result, attempt)


async def complete_jobs(info: Ctx, items: list[CompleteJobInput]) -> CompletionOutcome:
    completions = [_completion(i) for i in items]
    return await queue(info).complete_many(caller(info), completions)


async def complete_and_claim_jobs(
    info: Ctx,
    items: list[CompleteJobInput],
    limit: int,
    types: list[str] | None = None,
    lease_seconds: int | None = None,
) -> CompleteAndClaimOutcome:
    completions = [_completion(i) for i in items]
    return await queue(info).complete_and_claim(
        caller(info), completions, types=types, limit=limit, lease_seconds=lease_seconds
    )


def _completion(item: CompleteJobInput) -> Completion:
    return Completion(parse_job_id(item.id), item.result, item.attempt)


async def fail_job(
    info: Ctx,
    id: strawberry.ID,
    error: str,
    retryable: bool = True,
    retry_in_seconds: int | None = None,
    attempt: int | None = None,
) -> Job:
    job_id = parse_job_id(id)
    return await queue(info).fail(caller(info), job_id, error, retryable, retry_in_seconds, attempt)


async def cancel_job(info: Ctx, id: strawberry.ID) -> Job:
    return await queue(info).cancel(caller(info), parse_job_id(id))


async def retry_job(info: Ctx, id: strawberry.ID) -> Job:
    return await queue(info).retry(parse_job_id(id))


# --- steering (API.md section 12) -----------------------------------------------------------


async def snooze_job(info: Ctx, id: strawberry.ID, attempt: int, seconds: int) -> Job:
    return await queue(info).snooze(caller(info), parse_job_id(id), attempt, seconds)


async def update_job(info: Ctx, id: strawberry.ID, input: UpdateJobInput) -> Job:
    job_id = parse_job_id(id)
    return await queue(info).update_job(caller(info), job_id, input.to_model())


async def run_job_now(info: Ctx, id: strawberry.ID) -> Job:
    return await queue(info).run_job_now(caller(info), parse_job_id(id))


async def report_progress(
    info: Ctx, id: strawberry.ID, attempt: int, progress: float, message: str | None = None
) -> Job:
    return await queue(info).report_progress(caller(info), parse_job_id(id), attempt, progress, message)
