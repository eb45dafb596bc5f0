"""Type controls (API.md section 9): read with their RUNNING counts, and written whole.

A type's row in type_controls holds its pause and its limits; a type without a row has
none. Writes replace the row (upsert) in the write transaction, so every server's next
claim reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from queuelog.model import TypeControl
from queuelog.storage.flow import read_controls, running_counts
from queuelog.storage.transaction import Connection, WriteTx
from queuelog.storage.types import to_micros


def type_controls(conn: Connection, types: Sequence[str], now: datetime) -> list[TypeControl]:
    """The controls of these types, in type order, each with its RUNNING count; a pause whose
    `until` has passed shows as ended (it ended by itself)."""
    stored = read_controls(conn)
    running = running_counts(conn)
    return [as_of(stored.get(t) or TypeControl(type=t), now, running.get(t, 0)) for t in sorted(set(types))]


def as_of(control: TypeControl, now: datetime, running: int) -> TypeControl:
    if control.paused and not control.paused_at(now):
        control = dataclasses.replace(control, paused=False, paused_until=None)
    return dataclasses.replace(control, running=running)


def update(tx: WriteTx, job_type: str, **changes: object) -> TypeControl:
    """Change some of a type's controls (the others stay) and store the row."""
    current = read_controls(tx).get(job_type) or TypeControl(type=job_type)
    control = dataclasses.replace(current, **changes)  # type: ignore[arg-type]
    rate = control.rate_limit
    tx.execute(
        tx.sql.PUT_TYPE_CONTROL,
        {
            "type": job_type,
            "paused": int(control.paused),
            "paused_until": to_micros(control.paused_until) if control.paused_until is not None else None,
            "max_running": control.max_running,
            "max_running_per_key": control.max_running_per_key,
            "rate_limit": rate.limit if rate is not None else None,
            "rate_period_seconds": rate.period_seconds if rate is not None else None,
            "rate_per_key": int(rate.per_key) if rate is not None else 0,
            "timeout_seconds": control.timeout_seconds,
            "updated_at": tx.now_us,
        },
    )
    tx.claim_preamble.controls = None  # claims later in this transaction read them again
    return as_of(control, tx.now, running_counts(tx).get(job_type, 0))
