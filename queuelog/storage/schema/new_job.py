"""A job as enqueue writes it: the values of its row, and the `Job` it answers with.

Both are generated from `tables.jobs`, like the row decoder (codec.py): a column of
NEW_JOB_COLUMNS takes the `NewJob` field of the same name, unless ENQUEUED below says
otherwise; a lifecycle column (codec.LIFECYCLE_COLUMNS) is left to its default (NULL, or
the server default the model repeats: snooze_count 0). A column that is
neither fails at import, naming itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

from queuelog.model import Job, JobStatus, NewJob
from queuelog.storage.schema.codec import JOB_COLUMNS, LIFECYCLE_COLUMNS, NEW_JOB_COLUMNS
from queuelog.storage.schema.tables import jobs
from queuelog.storage.schema.types import JsonDocument, UtcTimestamp, compact_json, to_micros

# column -> (its value in the row, its value in the Job): the columns a NewJob has no field
# for, or holds in another form. Names in scope: item, created_by, now_us (row), now (Job).
ENQUEUED = {
    "payload": ("item.payload_json", "item.payload"),
    "priority": ("item.priority.value", "item.priority"),
    "status": ("PENDING", "JobStatus.PENDING"),
    "retry_count": ("0", "0"),
    "attempt": ("0", "0"),
    "run_at": (
        "now_us if item.run_at is None else to_micros(item.run_at)",
        "now if item.run_at is None else item.run_at",
    ),
    "delayed": (  # 2: waiting for dependencies (storage/schema/tables.py)
        "2 if item.waiting_for else int(item.run_at is not None and to_micros(item.run_at) > now_us)",
        "2 if item.waiting_for else int(item.run_at is not None and item.run_at > now)",
    ),
    "created_by": ("created_by", "created_by"),
    "created_at": ("now_us", "now"),
    "updated_at": ("now_us", "now"),
    "revision": ("0", "0"),
}
_NEW_JOB_FIELDS = {field.name for field in dataclasses.fields(NewJob)}
_JOB_DEFAULTS = {field.name: field.default for field in dataclasses.fields(Job)}
RowValues = Callable[[NewJob, str, int], dict[str, Any]]
NewJobOf = Callable[[int, NewJob, str, datetime], Job]


def _from_new_job(column: str) -> tuple[str, str]:
    if column not in _NEW_JOB_FIELDS:
        raise RuntimeError(
            f"jobs.{column}: model.NewJob has no field {column!r}; add one, or say how an enqueue"
            " fills it (storage/schema/new_job.py ENQUEUED, or codec.LIFECYCLE_COLUMNS for NULL)"
        )
    value = f"item.{column}"
    kind = jobs.c[column].type
    if isinstance(kind, UtcTimestamp):
        return f"(None if {value} is None else to_micros({value}))", value
    if isinstance(kind, JsonDocument):
        return f"(None if {value} is None else compact_json({value}))", value
    return value, value


def _build() -> tuple[RowValues, NewJobOf]:
    sources = {column: ENQUEUED.get(column) or _from_new_job(column) for column in NEW_JOB_COLUMNS}
    row = ", ".join(f"{column!r}: {sources[column][0]}" for column in NEW_JOB_COLUMNS)
    # A lifecycle column the model gives a default (snooze_count: 0) takes it, as the row's
    # server default does; the others are None.
    fields = ", ".join(
        "id=job_id" if column == "id" else f"{column}={sources[column][1] if column in sources else None}"
        for column in JOB_COLUMNS
        if column in sources or column == "id" or _JOB_DEFAULTS.get(column) is dataclasses.MISSING
    )
    assert set(JOB_COLUMNS) == {"id", *NEW_JOB_COLUMNS, *LIFECYCLE_COLUMNS}
    source = (
        f"def row_values(item, created_by, now_us):\n    return {{{row}}}\n"
        f"def new_job(job_id, item, created_by, now):\n    return Job({fields})\n"
    )
    namespace: dict[str, Any] = {
        "Job": Job,
        "JobStatus": JobStatus,
        "PENDING": JobStatus.PENDING.value,
        "to_micros": to_micros,
        "compact_json": compact_json,
    }
    exec(source, namespace)
    return namespace["row_values"], namespace["new_job"]


# row_values(item, created_by, now_us): the INSERT's parameters (timestamps as microseconds);
# new_job(job_id, item, created_by, now): the Job that row holds, without reading it back.
row_values: RowValues
new_job: NewJobOf
row_values, new_job = _build()
