"""The SDK's arguments as the API's inputs: enqueue items, moments in UTC, type controls and
job filters. TypeError and ValueError here are raised before anything is sent."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from queuelog.errors import echo
from queuelog.sdk.types import UNCHANGED, Enqueued, Job, JobRefs, RateLimit, RateLimitSpec


def enqueue_input(
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
    depends_on_items: Sequence[int] | int = (),
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": type,
        "payload": payload if payload is not None else {},
        "priority": priority.upper(),
        "maxRetries": max_retries,
    }
    if idempotency_key is not None:
        item["idempotencyKey"] = idempotency_key
    if run_at is not None:
        item["runAt"] = moment_text(run_at)
    if concurrency_key is not None:
        item["concurrencyKey"] = concurrency_key
    if timeout_seconds is not None:
        item["timeoutSeconds"] = timeout_seconds
    # Sent only when given, so that an enqueue without them also suits a server without them.
    if dependencies := job_ids(depends_on):
        item["dependsOn"] = dependencies
    if isinstance(depends_on_items, int):
        depends_on_items = (depends_on_items,)
    if depends_on_items:
        item["dependsOnItems"] = list(depends_on_items)
    return item


def job_ids(jobs: JobRefs) -> list[str]:
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
    return ids


def moment_text(value: datetime | str, name: str = "run_at") -> str:
    """A moment (`run_at`, `until`, `created_before`) as the API takes it, in UTC: from an
    aware datetime, or an ISO-8601 string with an offset ("2030-01-01T09:00:00+02:00",
    "2030-01-01T07:00:00Z"). A time without an offset is refused (ValueError) rather than
    guessed: it names a different moment in each time zone. TypeError for anything but a
    datetime or a string."""
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{name} {echo(value)} is not an ISO-8601 time such as 2030-01-01T09:00:00Z "
                "or 2030-01-01T09:00:00+02:00"
            ) from None
        if moment.utcoffset() is None:
            raise ValueError(
                f"{name} {echo(value)} has no UTC offset, so it could be any time zone's: add one, "
                "e.g. 2030-01-01T09:00:00Z (UTC) or 2030-01-01T09:00:00+02:00"
            )
    elif isinstance(value, datetime):
        moment = value
        if moment.utcoffset() is None:
            raise ValueError(
                f"{name} {moment.isoformat()} is a naive datetime (no tzinfo), so it could be any "
                "time zone's: pass an aware one, e.g. datetime(2030, 1, 1, 9, tzinfo=UTC) or "
                "datetime.now(UTC) + timedelta(hours=1)"
            )
    else:
        raise TypeError(
            f"{name} takes an aware datetime or an ISO-8601 string with an offset, not {type(value).__name__}"
        )
    try:
        return moment.astimezone(UTC).isoformat()
    except OverflowError:
        raise ValueError(f"{name} {moment.isoformat()} is out of range in UTC") from None


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
