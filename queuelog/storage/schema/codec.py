"""Rows of `jobs` to `model.Job` and back, for the statements run on the driver directly.

The decoder is generated from the table's columns, so the field list lives in two places
only: `model.Job` and `tables.jobs` (whose column names must be the model's field names;
checked at import). Timestamps are integer microseconds on SQLite (see storage/schema/types.py),
JSON columns are compact text there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, overload

from queuelog import jsonutil
from queuelog.model import EventKind, Job, JobStatus, Priority
from queuelog.storage.schema.tables import jobs
from queuelog.storage.schema.types import JsonDocument, UtcTimestamp

JOB_COLUMNS: tuple[str, ...] = tuple(c.name for c in jobs.c)
JOB_COLUMN_LIST = ", ".join(JOB_COLUMNS)
# Set by a claim, a completion or a failure: NULL in a job just enqueued.
LIFECYCLE_COLUMNS = frozenset(
    {"claimed_at", "worker_id", "lease_expires_at", "finished_at", "result", "error", "timeout_at"}
    | {"cancel_requested_at", "snooze_count", "progress", "progress_message", "progress_at"}
    | {"enqueued_as"}
)
# The columns an enqueue writes, in the table's order (the id comes from the database).
NEW_JOB_COLUMNS: tuple[str, ...] = tuple(c for c in JOB_COLUMNS if c != "id" and c not in LIFECYCLE_COLUMNS)

if set(JOB_COLUMNS) != {f.name for f in dataclasses.fields(Job)}:  # pragma: no cover
    raise RuntimeError("tables.jobs and model.Job must have the same fields")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PRIORITY_BY_VALUE = {p.value: p for p in Priority}
STATUS_BY_VALUE = {s.value: s for s in JobStatus}
KIND_BY_VALUE = {k.value: k for k in EventKind}
# An event of another process, as (kind, job id, the job's status as of the event).
RemoteEvent = tuple[EventKind, int, JobStatus]


def remote_event(kind: str, job_id: int, status: str) -> RemoteEvent | None:
    """An event as stored in job_events or notified (text), or None for a kind or status
    this version does not know (a newer server's)."""
    if kind in KIND_BY_VALUE and status in STATUS_BY_VALUE:
        return (KIND_BY_VALUE[kind], job_id, STATUS_BY_VALUE[status])
    return None


_DATETIMES: dict[int, datetime] = {}


@overload
def micros_to_datetime(value: int) -> datetime: ...
@overload
def micros_to_datetime(value: int | None) -> datetime | None: ...
def micros_to_datetime(value: int | None) -> datetime | None:
    # Rows written in one transaction share their timestamps: build each datetime once.
    if value is None:
        return None
    moment = _DATETIMES.get(value)
    if moment is None:
        if len(_DATETIMES) >= 4096:
            _DATETIMES.clear()
        moment = _DATETIMES[value] = _EPOCH + timedelta(microseconds=value)
    return moment


def json_or_none(value: str | None) -> Any:
    return None if value is None else jsonutil.loads(value)


def _decoder_for(column: Any) -> str | None:
    if column.name == "priority":
        return "PRIORITY_BY_VALUE.__getitem__"
    if column.name == "status":
        return "STATUS_BY_VALUE.__getitem__"
    if isinstance(column.type, UtcTimestamp):
        return "micros_to_datetime"
    if isinstance(column.type, JsonDocument):
        return "json_or_none"
    return None


def _build_decoder() -> Callable[[Sequence[Any]], Job]:
    """One straight-line function: a bare Job, then each slot set from its column.

    Job is a frozen dataclass, whose __init__ sets each of its 19 fields through
    object.__setattr__; setting the slots through their descriptors builds the same object
    in a third of the time (it has no __post_init__ to skip), and rows are decoded by the
    hundred per claim or completion."""
    lines = ["def decode_job(row):", "    job = new_job(Job)"]
    namespace: dict[str, Any] = {
        "Job": Job,
        "new_job": Job.__new__,
        "PRIORITY_BY_VALUE": PRIORITY_BY_VALUE,
        "STATUS_BY_VALUE": STATUS_BY_VALUE,
        "micros_to_datetime": micros_to_datetime,
        "json_or_none": json_or_none,
    }
    for index, column in enumerate(jobs.c):
        decode = _decoder_for(column)
        value = f"row[{index}]" if decode is None else f"{decode}(row[{index}])"
        namespace[f"set_{column.name}"] = getattr(Job, column.name).__set__
        lines.append(f"    set_{column.name}(job, {value})")
    lines.append("    return job")
    exec("\n".join(lines) + "\n", namespace)
    return namespace["decode_job"]


decode_job = _build_decoder()
COLUMN_INDEX = {name: index for index, name in enumerate(JOB_COLUMNS)}
