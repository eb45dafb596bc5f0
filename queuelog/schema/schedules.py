"""The schedule types of API.md section 10: Schedule, ScheduleInput, Misfire, Overlap.
`Schedule` is a declaration read from `model.Schedule` (as `Job` is, types.py)."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.scalars import JSON

from queuelog import model
from queuelog.schema.types import JobPriority

Misfire = model.Misfire
Overlap = model.Overlap
strawberry.enum(
    Misfire, description="What a schedule does about ticks that passed while no server was running."
)
strawberry.enum(
    Overlap,
    description="What a tick does while the job of the schedule's previous tick is still PENDING or RUNNING.",
)


@strawberry.type
class Schedule:
    name: str
    type: str
    cron: str = strawberry.field(
        description=(
            "Cron expression: 5 fields (minute hour day-of-month month day-of-week), an optional "
            "leading seconds field (6 fields), or @yearly @monthly @weekly @daily @hourly."
        )
    )
    timezone: str = strawberry.field(
        description="IANA time zone the cron fields are read in, e.g. Europe/Paris."
    )
    payload: JSON
    priority: JobPriority
    max_retries: int
    misfire: Misfire
    overlap: Overlap
    paused: bool
    next_run_at: datetime | None = strawberry.field(
        description="The next tick that will enqueue a job; null while paused."
    )
    last_run_at: datetime | None = strawberry.field(
        description="The newest tick that enqueued a job, and that job."
    )
    last_job_id: strawberry.ID | None


@strawberry.input
class ScheduleInput:
    name: str = strawberry.field(description="1..100 characters: letters, digits, '-', '_', '.'")
    type: str
    cron: str
    timezone: str = "UTC"
    payload: JSON = strawberry.field(default_factory=dict)
    priority: JobPriority = JobPriority.LOW
    max_retries: int = 3
    misfire: Misfire = Misfire.RUN_ONCE
    overlap: Overlap = Overlap.ALLOW
