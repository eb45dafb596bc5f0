"""Schedules (docs/python.md, "Schedules"; API.md section 10)."""

from __future__ import annotations

import builtins
from typing import Any

from queuelog.sdk.session import Session
from queuelog.sdk.types import JOB_FIELDS, SCHEDULE_FIELDS, Job, Schedule


class ScheduleCalls(Session):
    async def schedules(self) -> builtins.list[Schedule]:
        """ADMIN and VIEWER: every schedule, in name order.

        Raises Forbidden (another role), Unauthenticated, ServerUnreachable.
        """
        data = await self.execute(f"{{ schedules {{ {SCHEDULE_FIELDS} }} }}")
        return [Schedule.from_graphql(s) for s in data["schedules"]]

    async def put_schedule(
        self,
        name: str,
        type: str,
        cron: str,
        timezone: str = "UTC",
        payload: dict[str, Any] | None = None,
        *,
        priority: str = "LOW",
        max_retries: int = 3,
        misfire: str = "RUN_ONCE",
        overlap: str = "ALLOW",
    ) -> Schedule:
        """ADMIN: create the schedule `name`, or replace the one with that name. Each tick of
        `cron` (read in the IANA `timezone`) enqueues one job of `type` with `payload`,
        `priority` and `max_retries`. `misfire`: "RUN_ONCE" (one job for the newest tick
        missed while no server ran) or "SKIP"; `overlap`: "ALLOW" or "SKIP" (no job for a tick
        while the previous tick's job is PENDING or RUNNING).

        Raises BadInput (a bad cron expression, time zone or name, a type outside the
        allowlist: the message names the field), Forbidden, Unauthenticated,
        ServerUnreachable.
        """
        item = {
            "name": name,
            "type": type,
            "cron": cron,
            "timezone": timezone,
            "payload": payload if payload is not None else {},
            "priority": priority.upper(),
            "maxRetries": max_retries,
            "misfire": misfire.upper(),
            "overlap": overlap.upper(),
        }
        data = await self.execute(
            f"mutation($input: ScheduleInput!) {{ putSchedule(input: $input) {{ {SCHEDULE_FIELDS} }} }}",
            {"input": item},
        )
        return Schedule.from_graphql(data["putSchedule"])

    async def delete_schedule(self, name: str) -> bool:
        """ADMIN: delete the schedule; False when there was none by that name. The jobs it
        already enqueued stay.

        Raises BadInput (a malformed name), Forbidden, Unauthenticated, ServerUnreachable.
        """
        data = await self.execute("mutation($name: String!) { deleteSchedule(name: $name) }", {"name": name})
        return bool(data["deleteSchedule"])

    async def pause_schedule(self, name: str) -> Schedule:
        """ADMIN: stop the schedule's ticks until `resume_schedule`.

        Raises NotFound (no such schedule), BadInput (a malformed name), Forbidden,
        Unauthenticated, ServerUnreachable.
        """
        data = await self.execute(
            f"mutation($name: String!) {{ pauseSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}",
            {"name": name},
        )
        return Schedule.from_graphql(data["pauseSchedule"])

    async def resume_schedule(self, name: str) -> Schedule:
        """ADMIN: restart the schedule's ticks from now on (the ticks missed while paused
        enqueue nothing).

        Raises NotFound (no such schedule), BadInput (a malformed name), Forbidden,
        Unauthenticated, ServerUnreachable.
        """
        data = await self.execute(
            f"mutation($name: String!) {{ resumeSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}",
            {"name": name},
        )
        return Schedule.from_graphql(data["resumeSchedule"])

    async def run_schedule_now(self, name: str) -> Job:
        """ADMIN: enqueue the schedule's job now, outside its ticks (idempotency key
        `<name>@manual-<unique>`), even while it is paused and whatever its `overlap`; its
        ticks, `last_run_at` and `next_run_at` are unaffected. Returns the job.

        Raises NotFound (no such schedule), BadInput, Forbidden, Unauthenticated,
        ServerUnreachable.
        """
        data = await self.execute(
            f"mutation($name: String!) {{ runScheduleNow(name: $name) {{ {JOB_FIELDS} }} }}", {"name": name}
        )
        return Job.from_graphql(data["runScheduleNow"])
