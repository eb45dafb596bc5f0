"""Resolvers of fields below the root: Job.events."""

from __future__ import annotations

from strawberry.types import Info

from queuelog.model import Job, RecordedEvent
from queuelog.resolvers.common import caller, queue
from queuelog.schema.context import RequestContext


async def job_events(info: Info[RequestContext, None], job: Job, last: int) -> list[RecordedEvent]:
    return await queue(info).history(caller(info), job, last)
