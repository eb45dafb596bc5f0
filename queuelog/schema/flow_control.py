"""The flow-control types of API.md section 9: TypeControl, RateLimit, their inputs, the bulk
filter and payload. `TypeControl`, `RateLimit` and `BulkPayload` are declarations read from
the model's records (as `Job` is, types.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry

from queuelog import model
from queuelog.schema.types import JobStatus


@strawberry.type(
    description=(
        "No window of periodSeconds holds more than `limit` claims (a sliding window, not a fixed one)."
    )
)
class RateLimit:
    limit: int
    period_seconds: int
    per_key: bool = strawberry.field(
        description=(
            "true: each concurrencyKey has its own limit (jobs without a key share one); "
            "false: the type as a whole."
        )
    )


@strawberry.type(
    description="How claims treat one job type, on every server process that shares the database."
)
class TypeControl:
    type: str
    paused: bool = strawberry.field(
        description="A paused type's jobs are not claimed; enqueues are accepted and RUNNING jobs finish."
    )
    paused_until: datetime | None = strawberry.field(
        description="When a pause with `until` ends by itself; null for no pause or a pause until resumeType."
    )
    max_running: int | None = strawberry.field(
        description="At most this many jobs of the type RUNNING at once; null: no limit."
    )
    max_running_per_key: int | None = strawberry.field(
        description="At most this many jobs of the type RUNNING at once per concurrencyKey; null: no limit."
    )
    rate_limit: model.RateLimit | None = strawberry.field(graphql_type=RateLimit | None)
    timeout_seconds: int | None = strawberry.field(
        description="Timeout for jobs of the type that set none; null: none."
    )
    running: int = strawberry.field(description="Jobs of the type RUNNING now.")


@strawberry.type
class BulkPayload:
    count: int = strawberry.field(description="Jobs this call changed.")
    more: bool = strawberry.field(description="true when more jobs still match: call again to go on.")


@strawberry.input
class RateLimitInput:
    limit: int = strawberry.field(description="1..100000")
    period_seconds: int = strawberry.field(description="1..86400")
    per_key: bool = False


@strawberry.input
class TypeControlInput:
    type: str
    # Left out: unchanged; null: cleared (API.md section 9).
    max_running: int | None = strawberry.field(default=strawberry.UNSET, description="1..100000 or null")
    max_running_per_key: int | None = strawberry.field(
        default=strawberry.UNSET, description="1..100000 or null"
    )
    rate_limit: RateLimitInput | None = strawberry.UNSET
    timeout_seconds: int | None = strawberry.field(default=strawberry.UNSET, description="1..86400 or null")

    def to_model(self) -> model.TypeLimits:
        fields = ("max_running", "max_running_per_key", "rate_limit", "timeout_seconds")
        given = frozenset(f for f in fields if getattr(self, f) is not strawberry.UNSET)

        def value(name: str) -> Any:
            found = getattr(self, name)
            return None if found is strawberry.UNSET else found

        rate = value("rate_limit")
        return model.TypeLimits(
            type=self.type,
            max_running=value("max_running"),
            max_running_per_key=value("max_running_per_key"),
            rate_limit=model.RateLimit(rate.limit, rate.period_seconds, rate.per_key) if rate else None,
            timeout_seconds=value("timeout_seconds"),
            given=given,
        )


@strawberry.input(description="Every field given must match; at least one of status or type is required.")
class JobFilter:
    status: JobStatus | None = None
    type: str | None = None
    concurrency_key: str | None = None
    created_before: datetime | None = strawberry.field(
        default=None, description="Only jobs created before this time."
    )

    def to_model(self) -> model.JobFilter:
        return model.JobFilter(self.status, self.type, self.concurrency_key, self.created_before)
