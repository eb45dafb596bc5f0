"""Resolvers of fields below the root: Job.events, QueueStats.throughput."""

from __future__ import annotations

from strawberry.types import Info

from queuelog.model import Job, MinuteCount, RecordedEvent
from queuelog.resolvers.common import caller, queue
from queuelog.schema.context import RequestContext


async def job_events(info: Info[RequestContext, None], job: Job, last: int) -> list[RecordedEvent]:
    jobs = queue(info)
    batch = info.context.loader("job_events", jobs.histories)
    return await jobs.history(caller(info), job, last, batch.load)


async def job_dependencies(info: Info[RequestContext, None], job: Job) -> list[int]:
    """The ids `job` depends on, read for every job of the response at once."""
    batch = info.context.loader("job_dependencies", queue(info).dependency_ids)
    return await batch.load(job.id)


async def throughput(info: Info[RequestContext, None], minutes: int) -> list[MinuteCount]:
    return await queue(info).throughput(caller(info), minutes)
