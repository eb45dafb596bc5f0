"""Schedule resolvers (API.md section 10)."""

from __future__ import annotations

from strawberry.types import Info

from queuelog.model import Job, Schedule
from queuelog.schema.context import RequestContext, caller, queue
from queuelog.schema.schedules import ScheduleInput

Ctx = Info[RequestContext, None]


async def schedules(info: Ctx) -> list[Schedule]:
    return await queue(info).schedules()


async def put_schedule(info: Ctx, input: ScheduleInput) -> Schedule:
    # Both GraphQL paths hand over ScheduleInput objects whose attributes are its fields.
    return await queue(info).put_schedule(caller(info), **vars(input))


async def delete_schedule(info: Ctx, name: str) -> bool:
    return await queue(info).delete_schedule(caller(info), name)


async def pause_schedule(info: Ctx, name: str) -> Schedule:
    return await queue(info).pause_schedule(caller(info), name, paused=True)


async def resume_schedule(info: Ctx, name: str) -> Schedule:
    return await queue(info).pause_schedule(caller(info), name, paused=False)


async def run_schedule_now(info: Ctx, name: str) -> Job:
    return await queue(info).run_schedule_now(caller(info), name)
