"""Flow-control resolvers (API.md section 9): type controls and bulk actions."""

from __future__ import annotations

from datetime import datetime

from strawberry.types import Info

from queuelog.model import BulkOutcome, TypeControl
from queuelog.schema.context import RequestContext, caller, queue
from queuelog.schema.flow_control import JobFilter, TypeControlInput

Ctx = Info[RequestContext, None]


async def type_controls(info: Ctx) -> list[TypeControl]:
    return await queue(info).type_controls()


async def pause_type(info: Ctx, type: str, until: datetime | None = None) -> TypeControl:
    return await queue(info).pause_type(caller(info), type, until)


async def resume_type(info: Ctx, type: str) -> TypeControl:
    return await queue(info).resume_type(caller(info), type)


async def set_type_control(info: Ctx, input: TypeControlInput) -> TypeControl:
    return await queue(info).set_type_control(caller(info), input.to_model())


async def add_job_type(info: Ctx, type: str) -> TypeControl:
    return await queue(info).add_job_type(caller(info), type)


async def remove_job_type(info: Ctx, type: str) -> bool:
    return await queue(info).remove_job_type(caller(info), type)


async def cancel_jobs(
    info: Ctx, filter: JobFilter, limit: int = 1000, include_running: bool = False
) -> BulkOutcome:
    return await queue(info).cancel_jobs(caller(info), filter.to_model(), limit, include_running)


async def retry_jobs(info: Ctx, filter: JobFilter, limit: int = 1000) -> BulkOutcome:
    return await queue(info).retry_jobs(caller(info), filter.to_model(), limit)
