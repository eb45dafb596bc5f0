"""The SDK's arguments as the API's inputs: enqueue requests, moments in UTC, type controls and
job filters. TypeError and ValueError here are raised before anything is sent."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from queuelog.enqueue_request import EnqueueRequest
from queuelog.errors import echo
from queuelog.sdk.types import UNCHANGED, Enqueued, EnqueueItem, Job, JobRefs, RateLimit, RateLimitSpec

P = ParamSpec("P")
A = TypeVar("A")
S = TypeVar("S")
R = TypeVar("R")


def enqueue_request(
    type: str,
    payload: dict[str, Any] | None = None,
    *,
    priority: str = "LOW",
    idempotency_key: str | None = None,
    max_retries: int = 3,
    run_at: datetime | str | None = None,
    concurrency_key: str | None = None,
    timeout_seconds: int | None = None,
    depends_on: JobRefs = (),
    expires_at: datetime | str | None = None,
) -> EnqueueRequest[str, str]:
    """enqueue()'s arguments as the request it sends: the priority's name in capitals, run_at
    and expires_at (still PENDING then: CANCELLED, never claimed) as moments in UTC,
    depends_on as job ids."""
    return EnqueueRequest(
        type,
        payload if payload is not None else {},
        priority.upper(),
        max_retries,
        idempotency_key,
        moment(run_at) if run_at is not None else None,
        concurrency_key,
        timeout_seconds,
        job_ids(depends_on),
        expires_at=moment(expires_at) if expires_at is not None else None,
    )


def enqueue_item_request(item: EnqueueItem | dict[str, Any]) -> EnqueueRequest[str, str]:
    """One item of enqueue_many: enqueue()'s arguments, plus `depends_on_items` (an index or
    several). TypeError for a key enqueue() does not take."""
    arguments = dict(item)
    positions = arguments.pop("depends_on_items", ())
    request = enqueue_request(**arguments)
    if isinstance(positions, int):
        positions = (positions,)
    return dataclasses.replace(request, depends_on_items=tuple(positions)) if positions else request


def arguments_of(
    build: Callable[P, A],
) -> Callable[[Callable[[S, A], Awaitable[R]]], Callable[Concatenate[S, P], Coroutine[Any, Any, R]]]:
    """A coroutine method that takes what `build` makes, called with `build`'s arguments:
    `@arguments_of(enqueue_request) async def enqueue(self, request)` is called as
    `enqueue(type, payload, priority=...)`, for mypy, IDEs and inspect alike."""

    def decorate(
        method: Callable[[S, A], Awaitable[R]],
    ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
        async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return await method(self, build(*args, **kwargs))

        functools.update_wrapper(call, method, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        takes = inspect.signature(build, eval_str=True)
        returns = inspect.signature(method, eval_str=True).return_annotation
        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        vars(call)["__signature__"] = takes.replace(
            parameters=[self_parameter, *takes.parameters.values()], return_annotation=returns
        )
        return call

    return decorate


def job_ids(jobs: JobRefs) -> tuple[str, ...]:
    """The ids of `depends_on`'s jobs; TypeError for anything but ids, Jobs and Enqueued."""
    if isinstance(jobs, str | Job | Enqueued):
        jobs = (jobs,)
    ids: list[str] = []
    for job in jobs:
        if isinstance(job, str):
            ids.append(job)
        elif isinstance(job, Job):
            ids.append(job.id)
        elif isinstance(job, Enqueued):
            ids.append(job.job.id)
        else:
            raise TypeError(f"depends_on takes job ids, Job or Enqueued objects, not {type(job).__name__}")
    return tuple(ids)


def moment_text(value: datetime | str, name: str = "run_at") -> str:
    """`moment` as the API spells it (ISO 8601)."""
    return moment(value, name).isoformat()


def moment(value: datetime | str, name: str = "run_at") -> datetime:
    """A moment (`run_at`, `until`, `created_before`) as the API takes it, in UTC: from an
    aware datetime, or an ISO-8601 string with an offset ("2030-01-01T09:00:00+02:00",
    "2030-01-01T07:00:00Z"). A time without an offset is refused (ValueError) rather than
    guessed: it names a different moment in each time zone. TypeError for anything but a
    datetime or a string."""
    if isinstance(value, str):
        try:
            at = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{name} {echo(value)} is not an ISO-8601 time such as 2030-01-01T09:00:00Z "
                "or 2030-01-01T09:00:00+02:00"
            ) from None
        if at.utcoffset() is None:
            raise ValueError(
                f"{name} {echo(value)} has no UTC offset, so it could be any time zone's: add one, "
                "e.g. 2030-01-01T09:00:00Z (UTC) or 2030-01-01T09:00:00+02:00"
            )
    elif isinstance(value, datetime):
        at = value
        if at.utcoffset() is None:
            raise ValueError(
                f"{name} {at.isoformat()} is a naive datetime (no tzinfo), so it could be any "
                "time zone's: pass an aware one, e.g. datetime(2030, 1, 1, 9, tzinfo=UTC) or "
                "datetime.now(UTC) + timedelta(hours=1)"
            )
    else:
        raise TypeError(
            f"{name} takes an aware datetime or an ISO-8601 string with an offset, not {type(value).__name__}"
        )
    try:
        return at.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{name} {at.isoformat()} is out of range in UTC") from None


def type_control_input(type: str, limits: dict[str, Any]) -> dict[str, Any]:
    """A TypeControlInput naming only the limits given: None clears one, UNCHANGED leaves it out."""
    item: dict[str, Any] = {"type": type}
    for name, value in limits.items():
        if value is UNCHANGED:
            continue
        item[name] = _rate_limit_input(value) if name == "rateLimit" else value
    return item


def _rate_limit_input(rate_limit: RateLimitSpec | None) -> dict[str, Any] | None:
    if rate_limit is None:
        return None
    if isinstance(rate_limit, RateLimit):
        rate = rate_limit
    elif len(rate_limit) in (2, 3):  # a tuple (or a list: JSON gives those)
        rate = RateLimit(*rate_limit)
    else:
        raise TypeError(
            "rate_limit is a RateLimit, (limit, period_seconds) or (limit, period_seconds, per_key)"
        )
    return {"limit": rate.limit, "periodSeconds": rate.period_seconds, "perKey": rate.per_key}


def job_filter(
    status: str | None, type: str | None, concurrency_key: str | None, created_before: datetime | str | None
) -> dict[str, Any]:
    job_filter: dict[str, Any] = {}
    if status is not None:
        job_filter["status"] = status.upper()
    if type is not None:
        job_filter["type"] = type
    if concurrency_key is not None:
        job_filter["concurrencyKey"] = concurrency_key
    if created_before is not None:
        job_filter["createdBefore"] = moment_text(created_before, "created_before")
    return job_filter
