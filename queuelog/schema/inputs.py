"""The GraphQL input types of schema.graphql."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.scalars import JSON

from queuelog.schema.types import JobPriority


@strawberry.input
class EnqueueJobInput:
    type: str
    payload: JSON = strawberry.field(default_factory=dict)
    priority: JobPriority = JobPriority.LOW
    idempotency_key: str | None = None
    max_retries: int = 3
    run_at: datetime | None = None
    concurrency_key: str | None = strawberry.field(
        default=None, description="1..255 printable characters; see Job.concurrencyKey."
    )
    timeout_seconds: int | None = strawberry.field(
        default=None, description="1..86400; null: the type's default (TypeControl.timeoutSeconds), if any."
    )
    depends_on: list[strawberry.ID] = strawberry.field(
        default_factory=list,
        description=(
            "Up to 100 ids of existing jobs visible to the caller; the job is claimed only after "
            "all are COMPLETED."
        ),
    )
    depends_on_items: list[int] = strawberry.field(
        default_factory=list,
        description=(
            "enqueueJobs only: 0-based indexes of earlier inputs of the same call that this job "
            "also waits for."
        ),
    )


@strawberry.input
class CompleteJobInput:
    id: strawberry.ID
    result: JSON | None = None
    attempt: int | None = None
