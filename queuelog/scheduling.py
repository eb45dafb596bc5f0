"""The rules of `putSchedule`'s input (API.md section 10), checked before anything is written."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

from queuelog import cron as cron_rules
from queuelog.errors import BadInput, Forbidden
from queuelog.model import JobRequest, Misfire, NewJob, Overlap, Priority, ScheduleSpec

if TYPE_CHECKING:
    from queuelog.auth import Principal

SCHEDULE_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


def check_schedule_name(name: str, field: str = "name") -> None:
    if not SCHEDULE_NAME.fullmatch(name):
        raise BadInput(f"{field}: a schedule name is 1..100 characters: letters, digits, '-', '_', '.'")


class JobValidator(Protocol):
    """The rules of enqueueJob (JobQueue.validate_new_job): the job, checked, or a refusal."""

    def __call__(self, principal: Principal, request: JobRequest) -> NewJob: ...


def validate_schedule(
    validate_job: JobValidator,
    principal: Principal,
    *,
    name: str,
    type: str,
    cron: str,
    timezone: str,
    payload: Any,
    priority: Priority,
    max_retries: int,
    misfire: Misfire,
    overlap: Overlap,
) -> ScheduleSpec:
    check_schedule_name(name)
    try:
        cron_rules.check_timezone(timezone)
    except cron_rules.CronError as exc:
        raise BadInput(f"timezone: {exc}") from None
    try:
        expression = cron_rules.parse(cron, timezone)
    except cron_rules.CronError as exc:
        raise BadInput(f"cron: {exc}") from None
    # The job each tick enqueues must pass the rules of enqueueJob (type allowlist, payload
    # size, maxRetries, priority): checked once here, not at every tick.
    job = validate_job(principal, JobRequest(type, payload, priority, max_retries))
    if priority.value > principal.max_priority.value:  # pragma: no cover - validate_new_job checks it
        raise Forbidden("priority above this key's maximum")
    return ScheduleSpec(
        name=name,
        type=job.type,
        cron=expression.expression,
        timezone=expression.timezone,
        payload=job.payload,
        priority=job.priority,
        max_retries=job.max_retries,
        misfire=misfire,
        overlap=overlap,
    )
