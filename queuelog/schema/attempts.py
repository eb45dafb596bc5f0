"""`Job.attempts` (API.md section 12): each claim of a job and how it ended."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.permission import PermissionExtension
from strawberry.types import Info

from queuelog import model
from queuelog.schema.context import RequestContext, caller, queue
from queuelog.schema.permissions import AdminOnlyAttemptError

AttemptOutcome = model.AttemptOutcome
strawberry.enum(AttemptOutcome, description="How one claim of a job ended.")


@strawberry.type
class JobAttempt:
    attempt: int = strawberry.field(description="1 for the first claim; equals Job.attempt for the latest.")
    worker_id: str
    claimed_at: datetime
    finished_at: datetime | None
    outcome: AttemptOutcome
    error: str | None = strawberry.field(
        description=(
            "Sanitized error of this attempt. ADMIN only, as Job.error: others get null plus "
            "FORBIDDEN at this path."
        ),
        extensions=[PermissionExtension(permissions=[AdminOnlyAttemptError()], use_directives=False)],
    )


async def job_attempts(root: model.Job, info: Info[RequestContext, None], last: int = 50) -> list[JobAttempt]:
    jobs = queue(info)
    batch = info.context.loader("job_attempts", jobs.attempt_events)
    found = await jobs.attempts(caller(info), root, last, batch.load)
    return [
        JobAttempt(
            attempt=a.attempt,
            worker_id=a.worker_id,
            claimed_at=a.claimed_at,
            finished_at=a.finished_at,
            outcome=a.outcome,
            error=a.error,
        )
        for a in found
    ]
