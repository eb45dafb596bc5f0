"""The queue's vocabulary, shared by storage, auth and the GraphQL layer."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from queuelog.enqueue_request import REQUEST_FIELDS, EnqueueRequest


class JobStatus(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})


class Priority(enum.Enum):
    """Stored as these numbers so that ORDER BY priority DESC sorts directly."""

    LOW = 0
    MEDIUM = 10
    HIGH = 20
    CRITICAL = 30


class Role(enum.Enum):
    ADMIN = "ADMIN"
    PRODUCER = "PRODUCER"
    WORKER = "WORKER"
    VIEWER = "VIEWER"


class EventKind(enum.Enum):
    ENQUEUED = "ENQUEUED"
    CLAIMED = "CLAIMED"
    COMPLETED = "COMPLETED"
    RETRYING = "RETRYING"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    RETRIED = "RETRIED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    SNOOZED = "SNOOZED"
    UPDATED = "UPDATED"
    EXPIRED = "EXPIRED"
    PROGRESS = "PROGRESS"


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    type: str
    payload: dict[str, Any]
    priority: Priority
    status: JobStatus
    retry_count: int
    max_retries: int
    attempt: int
    idempotency_key: str | None
    worker_id: str | None
    claimed_at: datetime | None
    lease_expires_at: datetime | None
    run_at: datetime
    finished_at: datetime | None
    result: Any
    error: str | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    concurrency_key: str | None = None
    timeout_seconds: int | None = None
    delayed: int = 0  # internal: 1 while PENDING before its run_at, 2 waiting (storage/schema/tables.py)
    timeout_at: datetime | None = None  # internal: when a RUNNING job times out
    waiting_for: int = 0  # dependencies not COMPLETED yet
    dependency_count: int = 0  # internal: how many jobs it depends on
    has_dependents: int = 0  # internal: 1 once a job depends on it
    schedule_name: str | None = None
    # Internal: how many times the job's row was updated; grows in the order its changes
    # commit (storage/schema/tables.py). A higher revision is a later state of the job.
    revision: int = 0
    # Steering (API.md section 12).
    cancel_requested_at: datetime | None = None
    expires_at: datetime | None = None
    snooze_count: int = 0
    progress: float | None = None
    progress_message: str | None = None
    progress_at: datetime | None = None
    # Internal: once the job was edited (updateJob), the values idempotency compares as they
    # were enqueued ({"priority", "max_retries", "expires_at"}); None: the row's own are.
    enqueued_as: dict[str, Any] | None = None

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_requested_at is not None


@dataclass(frozen=True, slots=True)
class JobEvent:
    kind: EventKind
    job: Job
    at: datetime
    # The newest state of the job known when the event was delivered, where `job` is not the
    # job as of the event: an event of another server process, whose job is read back later
    # and given the status it had as of the event (storage/feeds/tail.py). None: `job` is.
    latest: Job | None = None

    @property
    def newest(self) -> Job:
        """The newest state of the job this event tells of (what jobUpdated follows)."""
        return self.job if self.latest is None else self.latest


@dataclass(frozen=True, slots=True)
class MinuteCount:
    """Jobs that became COMPLETED or FAILED in the minute starting at `at`."""

    at: datetime
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """One transition of a job as job_events keeps it: what happened, the status it left
    the job in, and when."""

    kind: EventKind
    status: JobStatus
    at: datetime


class AttemptOutcome(enum.Enum):
    """How one claim of a job ended (API.md section 12)."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    RETRIED = "RETRIED"
    FAILED = "FAILED"
    SNOOZED = "SNOOZED"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"


@dataclass(frozen=True, slots=True)
class JobAttempt:
    """One claim of a job, as its events tell it (Job.attempts)."""

    attempt: int
    worker_id: str
    claimed_at: datetime
    finished_at: datetime | None
    outcome: AttemptOutcome
    error: str | None


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """A holder's report on its attempt (reportProgress)."""

    job_id: int
    worker: str
    attempt: int
    progress: float
    message: str | None
    # When it arrived, for a report the server held back (stored later); None: stamped as
    # it is stored.
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobRequest(EnqueueRequest[Priority, int]):
    """An enqueue request as the server reads it: its priority a Priority, its dependencies
    parsed into job ids."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob(JobRequest):
    """A validated enqueue request, as storage writes it: the request's fields (checked and
    normalised), and what storage derives from them."""

    payload_json: str  # the payload's compact JSON, as measured against the size limit
    schedule_name: str | None = None
    # Set by storage once the dependencies are read: the row's own values.
    waiting_for: int = 0
    dependency_count: int = 0
    has_dependents: int = 0

    @classmethod
    def of(cls, request: JobRequest, payload_json: str, **checked: Any) -> NewJob:
        """`request` once validated: its fields, but those given in `checked`."""
        values = {name: getattr(request, name) for name in REQUEST_FIELDS}
        values.update(checked)
        return cls(**values, payload_json=payload_json)


@dataclass(frozen=True, slots=True)
class JobEdit:
    """updateJob's input, validated (runJobNow: `run_now`): a field left None stays as it is."""

    priority: Priority | None = None
    max_retries: int | None = None
    run_at: datetime | None = None
    run_now: bool = False  # runAt = now, by the clock of the transaction that applies it
    expires_at: datetime | None = None
    clear_expiry: bool = False  # expiresAt: null


@dataclass(frozen=True, slots=True)
class EnqueueOutcome:
    job: Job
    created: bool


@dataclass(frozen=True, slots=True)
class Completion:
    id: int
    result: Any
    attempt: int | None
    result_json: str | None = None  # the result's compact JSON, once measured


@dataclass(frozen=True, slots=True)
class CompletionOutcome:
    completed: list[Job]
    rejected: list[int]


@dataclass(frozen=True, slots=True)
class CompleteAndClaimOutcome:
    """completeAndClaimJobs: the completions' outcome, then the jobs claimed after them."""

    completed: list[Job]
    rejected: list[int]
    claimed: list[Job]


@dataclass(frozen=True, slots=True)
class JobScope:
    """Which jobs a caller may see: all, or those it created and/or holds (OR)."""

    everything: bool
    created_by: str | None = None
    worker_id: str | None = None

    def allows(self, job: Job) -> bool:
        return self.allows_owned(job.created_by, job.worker_id)

    def allows_owned(self, created_by: str, worker_id: str | None) -> bool:
        """`allows` for a job known only by its creator and its worker."""
        if self.everything:
            return True
        return (self.created_by is not None and created_by == self.created_by) or (
            self.worker_id is not None and worker_id == self.worker_id
        )


ALL_JOBS = JobScope(everything=True)


@dataclass(frozen=True, slots=True)
class StatusCounts:
    pending: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0


@dataclass(frozen=True, slots=True)
class QueueStats:
    counts: StatusCounts
    by_type: dict[str, StatusCounts]
    oldest_pending_seconds: float | None
    # Each type's oldest_pending_seconds, for the types with a claimable job (/metrics);
    # filled for every job's scope, maybe empty for a producer's.
    oldest_pending_by_type: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    roles: frozenset[Role]
    max_priority: Priority
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class RateLimit:
    limit: int
    period_seconds: int
    per_key: bool


@dataclass(frozen=True, slots=True)
class TypeControl:
    """How claims treat one job type (API.md section 9), with its RUNNING count."""

    type: str
    paused: bool = False
    paused_until: datetime | None = None
    max_running: int | None = None
    max_running_per_key: int | None = None
    rate_limit: RateLimit | None = None
    timeout_seconds: int | None = None
    running: int = 0

    def paused_at(self, now: datetime) -> bool:
        return self.paused and (self.paused_until is None or self.paused_until > now)

    @property
    def limits_running(self) -> bool:
        """Whether a job of this type leaving RUNNING may free a slot for a claim."""
        return self.max_running is not None or self.max_running_per_key is not None

    @property
    def per_key(self) -> bool:
        """Whether claims must count by concurrency key."""
        return self.max_running_per_key is not None or (
            self.rate_limit is not None and self.rate_limit.per_key
        )


@dataclass(frozen=True, slots=True)
class TypeLimits:
    """`setTypeControl`'s input: the limits it names (None clears one); the others stay."""

    type: str
    max_running: int | None = None
    max_running_per_key: int | None = None
    rate_limit: RateLimit | None = None
    timeout_seconds: int | None = None
    # the fields the caller gave (a field left out is unchanged); None: every field
    given: frozenset[str] | None = None

    def changes(self) -> dict[str, object]:
        """The control fields to write: those given."""
        values: dict[str, object] = {
            "max_running": self.max_running,
            "max_running_per_key": self.max_running_per_key,
            "rate_limit": self.rate_limit,
            "timeout_seconds": self.timeout_seconds,
        }
        return {k: v for k, v in values.items() if self.given is None or k in self.given}


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a bulk action applies to: every field given must match."""

    status: JobStatus | None = None
    type: str | None = None
    concurrency_key: str | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    count: int  # jobs this call changed
    more: bool  # whether matching jobs remain


class Misfire(enum.Enum):
    """What a schedule does about ticks that passed while no server was running."""

    SKIP = "SKIP"
    RUN_ONCE = "RUN_ONCE"


class Overlap(enum.Enum):
    """What a tick does while the job of the schedule's previous tick is PENDING or RUNNING."""

    ALLOW = "ALLOW"
    SKIP = "SKIP"


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """`putSchedule`'s input, validated."""

    name: str
    type: str
    cron: str
    timezone: str
    payload: dict[str, Any]
    priority: Priority
    max_retries: int
    misfire: Misfire
    overlap: Overlap


@dataclass(frozen=True, slots=True)
class Schedule(ScheduleSpec):
    """A stored schedule: its definition and where its ticks stand."""

    paused: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_job_id: int | None
    created_at: datetime
    updated_at: datetime
