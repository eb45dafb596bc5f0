"""Query resolvers: me, job, jobs, queueStats."""

from __future__ import annotations

from typing import Annotated

import strawberry
from strawberry.types import Info

from queuelog.model import Job
from queuelog.resolvers.ids import decode_cursor, encode_cursor, parse_job_id
from queuelog.schema.context import RequestContext, caller, queue
from queuelog.schema.types import JobConnection, JobEdge, JobStatus, PageInfo, Principal, QueueStats

Ctx = Info[RequestContext, None]


async def me(info: Ctx) -> Principal:
    principal = caller(info)
    return Principal(
        name=principal.name,
        roles=sorted(principal.roles, key=lambda r: r.value),
        max_priority=principal.max_priority,
    )


async def job(info: Ctx, id: strawberry.ID) -> Job | None:
    return await queue(info).get(caller(info), parse_job_id(id))


async def jobs(
    info: Ctx,
    status: JobStatus | None = None,
    type: str | None = None,
    first: int = 20,
    after: str | None = None,
    schedule_name: Annotated[
        str | None, strawberry.argument(description="Only the jobs this schedule enqueued.")
    ] = None,
) -> JobConnection:
    after_id = decode_cursor(after) if after is not None else None
    page, has_next, total = await queue(info).list(caller(info), status, type, first, after_id, schedule_name)
    edges = [JobEdge(node=j, cursor=encode_cursor(j.id)) for j in page]
    return JobConnection(
        edges=edges,
        nodes=page,
        page_info=PageInfo(has_next_page=has_next, end_cursor=edges[-1].cursor if edges else None),
        total_count=total,
    )


async def queue_stats(info: Ctx) -> QueueStats:
    return QueueStats.from_model(await queue(info).stats(caller(info)))
