"""What the SDK's calls return and take: frozen dataclasses in snake_case, times as aware
datetimes in UTC; and the GraphQL selections derived from them."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from typing import Any, Generic, NotRequired, Self, TypedDict, TypeVar, cast

W = TypeVar("W")
V = TypeVar("V")


def graphql_name(field_name: str) -> str:
    """A snake_case field's camelCase GraphQL name."""
    head, *rest = field_name.split("_")
    return head + "".join(part.title() for part in rest)


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    type: str
    payload: dict[str, Any]
    priority: str
    status: str
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
    created_at: datetime
    updated_at: datetime
    concurrency_key: str | None = None
    timeout_seconds: int | None = None
    waiting_for: int = 0
    schedule_name: str | None = None
    cancel_requested: bool = False
    expires_at: datetime | None = None
    snooze_count: int = 0
    progress: float | None = None
    progress_message: str | None = None
    progress_at: datetime | None = None

    @classmethod
    def from_graphql(cls, data: dict[str, Any]) -> Self:
        """From a selection of JOB_FIELDS, WORKER_JOB_FIELDS or NEW_JOB_FIELDS (`error` may be
        absent, as may any field whose annotation allows None; a field left out that has a
        default takes it); timestamps are parsed."""
        values: dict[str, Any] = {}
        for name, key, is_time, optional in _JOB_FROM_GRAPHQL:
            if key not in data and name in _DEFAULTED:
                continue
            value = data.get(key) if optional else data[key]
            values[name] = parse_time(value) if is_time else value
        return cls(**values)


# (field, GraphQL name, a timestamp?, may be absent or null?) for each field of Job; the
# annotations are text here (`from __future__ import annotations`).
_JOB_FROM_GRAPHQL = tuple(
    (
        f.name,
        graphql_name(f.name),
        str(f.type).startswith("datetime"),
        "None" in str(f.type) or f.type == "Any",
    )
    for f in fields(Job)
)

# The selection is the Job dataclass's fields (tests/api/test_job_fields.py keeps those equal to
# the schema's). Workers ask for everything but `error`, which only ADMIN keys may read
# (any other key would get a FORBIDDEN error per job for it).
JOB_FIELDS = " ".join(graphql_name(f.name) for f in fields(Job))
_DEFAULTED = frozenset(f.name for f in fields(Job) if f.default is not MISSING)
_JOB_FIELD_NAMES = tuple(f.name for f in fields(Job))
# What enqueue_many asks of each job: a job just enqueued has no error, cancel request,
# snooze or progress yet (a replay answers them at their defaults; `error` is ADMIN's only),
# and 100 jobs of every field would cost more than half the server's query cost limit
# (security/test_query_cost.py).
_NOT_SET_AT_ENQUEUE = frozenset(
    {"error", "cancel_requested", "snooze_count", "progress", "progress_message", "progress_at"}
)
NEW_JOB_FIELDS = " ".join(graphql_name(f.name) for f in fields(Job) if f.name not in _NOT_SET_AT_ENQUEUE)
WORKER_JOB_FIELDS = " ".join(graphql_name(f.name) for f in fields(Job) if f.name != "error")


def _no_waiter() -> None:
    """What an unpickled JobWaiter becomes: none (the client it called stayed behind)."""
    return None


class JobWaiter(Generic[W]):
    """What `EnqueuedJob.wait` calls: the `wait` of the client that enqueued the job, as that
    client runs it: a coroutine for AsyncClient (W is an awaitable), blocking for Client (W is
    the Job). A copy of the job shares it (a deep copy does not copy the client); a pickled job
    loses it (an unpickled one has no waiter)."""

    __slots__ = ("_wait",)

    def __init__(self, wait: Callable[[str, float | None], W]) -> None:
        self._wait = wait

    def __call__(self, id: str, timeout: float | None) -> W:
        return self._wait(id, timeout)

    def __copy__(self) -> JobWaiter[W]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> JobWaiter[W]:
        return self

    def __reduce__(self) -> tuple[Callable[[], None], tuple[()]]:
        return (_no_waiter, ())


@dataclass(frozen=True, slots=True, eq=False)
class EnqueuedJob(Job, Generic[W]):
    """What `enqueue` answers: the Job, `created` (False: an earlier job with the same
    idempotency key was answered instead, as `Enqueued.created` says for enqueue_many), and
    `wait(timeout)`, the enqueuing client's `wait` for this job: `await job.wait(30)` on an
    AsyncClient's job (`EnqueuedJob[Awaitable[Job]]`), `job.wait(30)` on a Client's
    (`EnqueuedJob[Job]`, blocking).

    It equals a Job with the same fields (`created` says what the call did, not what the job
    is, and `waiter` is how to follow it): `client.get(job.id) == client.enqueue(...)` as
    before `created` existed."""

    created: bool = True
    waiter: JobWaiter[W] | None = field(default=None, repr=False, compare=False)

    def with_created(self, created: bool) -> EnqueuedJob[W]:
        return dataclasses.replace(self, created=created)

    def with_waiter(self, waiter: JobWaiter[V]) -> EnqueuedJob[V]:
        return cast(EnqueuedJob[V], dataclasses.replace(self, waiter=waiter))  # type: ignore[arg-type]

    def wait(self, timeout: float | None = None) -> W:
        """The job once it is COMPLETED, FAILED or CANCELLED: the enqueuing client's
        `wait(self.id, timeout)`, with what that raises (TimeoutError, NotFound, ...). On an
        AsyncClient's job it returns an awaitable. RuntimeError for a job that no client's
        `enqueue` returned (one made by hand, or unpickled): call `client.wait(job.id)`."""
        if self.waiter is None:
            raise RuntimeError(f"job {self.id} has no client to wait with: call client.wait(job.id)")
        return self.waiter(self.id, timeout)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Job):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _JOB_FIELD_NAMES)

    __hash__ = Job.__hash__


@dataclass(frozen=True, slots=True)
class Enqueued:
    job: Job
    created: bool


# What `depends_on` takes: jobs (or what enqueue_many returned for them), or their ids; one
# alone, or a sequence of them.
JobRef = str | Job | Enqueued
JobRefs = JobRef | Sequence[JobRef]


@dataclass(frozen=True, slots=True)
class Completed:
    completed: list[str]
    rejected: list[str]


@dataclass(frozen=True, slots=True)
class QueueStats:
    counts: dict[str, int]
    by_type: dict[str, dict[str, int]]
    oldest_pending_seconds: float | None


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `limit` claims of a type in any window of `period_seconds` (a sliding window);
    `per_key`: each concurrencyKey on its own (jobs without a key share one limit)."""

    limit: int
    period_seconds: int
    per_key: bool = False


RateLimitSpec = RateLimit | tuple[int, int] | tuple[int, int, bool]


class Unchanged(enum.Enum):
    """The type of `UNCHANGED`, `set_type_control`'s default: a limit left out stays as it is."""

    UNCHANGED = "UNCHANGED"


UNCHANGED = Unchanged.UNCHANGED


@dataclass(frozen=True, slots=True)
class TypeControl:
    """How claims treat one job type (API.md section 9), with its RUNNING count."""

    type: str
    paused: bool
    paused_until: datetime | None
    max_running: int | None
    max_running_per_key: int | None
    rate_limit: RateLimit | None
    timeout_seconds: int | None
    running: int

    @classmethod
    def from_graphql(cls, data: dict[str, Any]) -> TypeControl:
        rate = data.get("rateLimit")
        return cls(
            type=data["type"],
            paused=data["paused"],
            paused_until=parse_time(data.get("pausedUntil")),
            max_running=data.get("maxRunning"),
            max_running_per_key=data.get("maxRunningPerKey"),
            rate_limit=RateLimit(rate["limit"], rate["periodSeconds"], rate["perKey"]) if rate else None,
            timeout_seconds=data.get("timeoutSeconds"),
            running=data["running"],
        )


TYPE_CONTROL_FIELDS = (
    "type paused pausedUntil maxRunning maxRunningPerKey rateLimit { limit periodSeconds perKey }"
    " timeoutSeconds running"
)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A cron schedule (API.md section 10); `next_run_at` is None while paused, `last_run_at`
    and `last_job_id` until its first job."""

    name: str
    type: str
    cron: str
    timezone: str
    payload: dict[str, Any]
    priority: str
    max_retries: int
    misfire: str
    overlap: str
    paused: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_job_id: str | None

    @classmethod
    def from_graphql(cls, data: dict[str, Any]) -> Schedule:
        return cls(
            name=data["name"],
            type=data["type"],
            cron=data["cron"],
            timezone=data["timezone"],
            payload=data["payload"],
            priority=data["priority"],
            max_retries=data["maxRetries"],
            misfire=data["misfire"],
            overlap=data["overlap"],
            paused=data["paused"],
            next_run_at=parse_time(data.get("nextRunAt")),
            last_run_at=parse_time(data.get("lastRunAt")),
            last_job_id=data.get("lastJobId"),
        )


SCHEDULE_FIELDS = " ".join(graphql_name(f.name) for f in fields(Schedule))


class EnqueueItem(TypedDict):
    """One item of `enqueue_many`: enqueue()'s arguments as keys, plus `depends_on_items`, the
    0-based indexes of earlier items of the same call that this job waits for. A plain dict
    with these keys does as well; this type only lets a type checker check the keys."""

    type: str
    payload: NotRequired[dict[str, Any] | None]
    priority: NotRequired[str]
    idempotency_key: NotRequired[str | None]
    max_retries: NotRequired[int]
    run_at: NotRequired[datetime | str | None]
    concurrency_key: NotRequired[str | None]
    timeout_seconds: NotRequired[int | None]
    depends_on: NotRequired[JobRefs]
    depends_on_items: NotRequired[Sequence[int] | int]
    expires_at: NotRequired[datetime | str | None]
