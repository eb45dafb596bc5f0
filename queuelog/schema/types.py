"""The GraphQL output types of schema.graphql, built from the model's records.

`Job`, `EnqueueJobPayload` and `CompleteJobsPayload` are declarations only, never
instantiated: resolvers return `model.Job`, `model.EnqueueOutcome` and
`model.CompletionOutcome`, whose attributes are those fields, and Strawberry's resolvers read
them as they are (no copy per job). So a field that holds one of them has the model's class
as its Python type and names the GraphQL type with `graphql_type` (here and in graphql_api/root.py).

The fields read on demand (Job.events, Job.dependsOn, QueueStats.throughput) have their
resolvers here, beside their types, so that the types need nothing from the resolvers.
"""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.permission import PermissionExtension
from strawberry.scalars import JSON
from strawberry.types import Info

from queuelog import model
from queuelog.schema.attempts import job_attempts
from queuelog.schema.context import RequestContext, caller, queue
from queuelog.schema.permissions import AdminOnlyField

# strawberry.enum marks the class it is given as a GraphQL enum and returns it: the schema's
# enums are the model's own.
JobStatus = model.JobStatus
JobPriority = model.Priority
Role = model.Role
strawberry.enum(JobStatus, description="pending -> running -> completed | failed; pending -> cancelled.")
strawberry.enum(
    JobPriority,
    name="JobPriority",
    description="Stored as 0, 10, 20, 30 so that ORDER BY priority DESC sorts directly.",
)
strawberry.enum(Role)


EVENT_KINDS = (
    "ENQUEUED, CLAIMED, COMPLETED, RETRYING, FAILED, CANCELLED, LEASE_EXPIRED, RETRIED,"
    " CANCEL_REQUESTED, SNOOZED, UPDATED, EXPIRED"
)


@strawberry.type(description="One recorded transition of a job.")
class JobTransition:
    kind: str = strawberry.field(description=f"As JobEvent.kind: one of {EVENT_KINDS}.")
    status: JobStatus = strawberry.field(description="The job's status right after it.")
    at: datetime


async def job_transitions(
    root: model.Job, info: Info[RequestContext, None], last: int = 50
) -> list[JobTransition]:
    jobs = queue(info)
    batch = info.context.loader("job_events", jobs.histories)
    recorded = await jobs.history(caller(info), root, last, batch.load)
    return [JobTransition(kind=e.kind.value, status=e.status, at=e.at) for e in recorded]


async def job_dependency_ids(root: model.Job, info: Info[RequestContext, None]) -> list[strawberry.ID]:
    """The ids `root` depends on, read for every job of the response at once."""
    if not root.dependency_count:
        return []
    batch = info.context.loader("job_dependencies", queue(info).dependency_ids)
    return [strawberry.ID(str(i)) for i in await batch.load(root.id)]


@strawberry.type
class Job:
    id: strawberry.ID
    type: str
    payload: JSON
    priority: JobPriority
    status: JobStatus
    retry_count: int = strawberry.field(
        description="Retries used so far (a failure or an expired lease that sent the job back to PENDING)."
    )
    max_retries: int
    attempt: int = strawberry.field(
        description="How many times the job has been claimed; a fencing token for heartbeat/complete/fail."
    )
    idempotency_key: str | None
    worker_id: str | None = strawberry.field(
        description=(
            "The authenticated name of the worker that holds the job (RUNNING) or finished it "
            "(COMPLETED, FAILED, or CANCELLED while running); null otherwise."
        )
    )
    claimed_at: datetime | None
    lease_expires_at: datetime | None
    run_at: datetime = strawberry.field(
        description="The job is not claimed before this time (delayed jobs and retry back-off)."
    )
    finished_at: datetime | None
    result: JSON | None
    created_at: datetime
    updated_at: datetime
    concurrency_key: str | None = strawberry.field(
        description=(
            "Jobs of one type with the same key share that type's per-key limits "
            "(maxRunningPerKey, a per-key rateLimit)."
        )
    )
    timeout_seconds: int | None = strawberry.field(
        description=(
            "A RUNNING job whose claimedAt is older than this many seconds fails with error "
            "`timed out`; null: the type's default, else none."
        )
    )
    error: str | None = strawberry.field(
        description=(
            "Sanitized worker error. ADMIN only: any other caller gets null plus a FORBIDDEN "
            "error at this path."
        ),
        extensions=[PermissionExtension(permissions=[AdminOnlyField()], use_directives=False)],
    )
    waiting_for: int = strawberry.field(
        description="How many of dependsOn are not COMPLETED yet; a PENDING job is claimed only at 0."
    )
    schedule_name: str | None = strawberry.field(description="The schedule that enqueued this job, or null.")
    cancel_requested: bool = strawberry.field(
        description="True once cancelJob was called on this job while it was RUNNING; the holder should stop."
    )
    expires_at: datetime | None = strawberry.field(
        description=(
            "A PENDING job not claimed by this time is never claimed: it becomes CANCELLED with "
            "error `expired`."
        )
    )
    snooze_count: int = strawberry.field(
        description="Times the job was snoozed (snoozeJob); snoozes use no retry."
    )
    progress: float | None = strawberry.field(
        description=(
            "0..1 as last reported by the holder of the current or last attempt; null when never reported."
        )
    )
    progress_message: str | None = strawberry.field(description="At most 200 characters, with progress.")
    progress_at: datetime | None
    depends_on = strawberry.field(
        resolver=job_dependency_ids,
        description="Ids of the jobs this job waits for; empty for most jobs.",
    )
    events = strawberry.field(
        resolver=job_transitions,
        description=(
            "The job's recorded transitions, oldest first: its newest `last` (1..100). They are "
            "kept as long as the job is."
        ),
    )
    attempts = strawberry.field(
        resolver=job_attempts, description="One entry per claim, oldest first: the newest `last` (1..100)."
    )


@strawberry.type
class JobEdge:
    node: model.Job = strawberry.field(graphql_type=Job)
    cursor: str


@strawberry.type
class PageInfo:
    has_next_page: bool
    end_cursor: str | None


@strawberry.type
class JobConnection:
    edges: list[JobEdge]
    nodes: list[model.Job] = strawberry.field(graphql_type=list[Job])
    page_info: PageInfo
    total_count: int


@strawberry.type
class StatusCounts:
    pending: int
    running: int
    completed: int
    failed: int
    cancelled: int

    @classmethod
    def from_model(cls, counts: model.StatusCounts) -> StatusCounts:
        return cls(
            pending=counts.pending,
            running=counts.running,
            completed=counts.completed,
            failed=counts.failed,
            cancelled=counts.cancelled,
        )


@strawberry.type
class TypeStats:
    type: str
    counts: StatusCounts


@strawberry.type(description="Jobs that became COMPLETED or FAILED in one minute.")
class ThroughputMinute:
    at: datetime = strawberry.field(description="The minute's start (UTC).")
    completed: int
    failed: int


async def throughput_minutes(info: Info[RequestContext, None], minutes: int = 30) -> list[ThroughputMinute]:
    found = await queue(info).throughput(caller(info), minutes)
    return [ThroughputMinute(at=m.at, completed=m.completed, failed=m.failed) for m in found]


@strawberry.type
class QueueStats:
    counts: StatusCounts
    by_type: list[TypeStats]
    oldest_pending_seconds: float | None = strawberry.field(
        description="Age in seconds of the oldest job that is PENDING and due (runAt <= now); null when none."
    )
    throughput = strawberry.field(
        resolver=throughput_minutes,
        description=(
            "Jobs the caller sees that finished in each of the last `minutes` minutes (1..1440), "
            "oldest first, the current minute (so far) last; minutes with none are listed with zeros. "
            "Kept for 24 hours."
        ),
    )

    @classmethod
    def from_model(cls, stats: model.QueueStats) -> QueueStats:
        return cls(
            counts=StatusCounts.from_model(stats.counts),
            by_type=[TypeStats(type=t, counts=StatusCounts.from_model(c)) for t, c in stats.by_type.items()],
            oldest_pending_seconds=stats.oldest_pending_seconds,
        )


@strawberry.type
class Principal:
    name: str
    roles: list[Role]
    max_priority: JobPriority = strawberry.field(description="Highest priority this caller may enqueue.")


@strawberry.type
class EnqueueJobPayload:
    job: model.Job = strawberry.field(graphql_type=Job)
    created: bool = strawberry.field(
        description="false when an earlier job with the same idempotency key was returned instead."
    )


@strawberry.type
class CompleteJobsPayload:
    completed: list[model.Job] = strawberry.field(graphql_type=list[Job])
    rejected: list[strawberry.ID] = strawberry.field(
        description=(
            "Items not applied: not held by the caller, not RUNNING, or attempt mismatch. "
            "Nothing else changes."
        )
    )


@strawberry.type
class CompleteAndClaimPayload(CompleteJobsPayload):
    claimed: list[model.Job] = strawberry.field(
        graphql_type=list[Job],
        description="Claimed after the completions applied, in the same transaction.",
    )


@strawberry.type
class JobEvent:
    kind: str = strawberry.field(description=f"One of: {EVENT_KINDS}.")
    job: model.Job = strawberry.field(graphql_type=Job)
    at: datetime

    @classmethod
    def from_model(cls, event: model.JobEvent) -> JobEvent:
        return cls(kind=event.kind.value, job=event.job, at=event.at)
