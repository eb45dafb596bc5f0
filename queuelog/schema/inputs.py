"""The GraphQL input types of schema.graphql."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from strawberry.scalars import JSON

from queuelog.errors import BadInput
from queuelog.model import JobEdit
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
    expires_at: datetime | None = strawberry.field(
        default=None, description="Must be later than runAt (and than now). Null: never expires."
    )


@strawberry.input
class CompleteJobInput:
    id: strawberry.ID
    result: JSON | None = None
    attempt: int | None = None


@strawberry.input(
    description=(
        "Fields left out stay as they are; expiresAt: null clears the expiry (the others cannot be null)."
    )
)
class UpdateJobInput:
    run_at: datetime | None = strawberry.UNSET
    priority: JobPriority | None = strawberry.UNSET
    max_retries: int | None = strawberry.field(default=strawberry.UNSET, description="0..25")
    expires_at: datetime | None = strawberry.UNSET

    def to_model(self) -> JobEdit:
        """The edit, once no field but expiresAt is null (BAD_USER_INPUT naming it)."""
        for name, value in (
            ("runAt", self.run_at),
            ("priority", self.priority),
            ("maxRetries", self.max_retries),
        ):
            if value is None:
                raise BadInput(f"{name} cannot be null; leave it out to keep it")

        def given(value: Any) -> Any:
            return None if value is strawberry.UNSET else value

        return JobEdit(
            priority=given(self.priority),
            max_retries=given(self.max_retries),
            run_at=given(self.run_at),
            expires_at=given(self.expires_at),
            clear_expiry=self.expires_at is None,
        )
