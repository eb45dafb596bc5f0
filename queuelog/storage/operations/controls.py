"""Type controls (API.md section 9): read with their RUNNING counts, and written field by field.

A type's row in type_controls holds its pause and its limits; a type without a row has
none. A write changes only the fields it names, in one statement that locks the row
(PUT_TYPE_CONTROL), so that writes of different fields on different servers at once all
stay (a pause and a change of limits, say); every server's next claim reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from queuelog.model import TypeControl
from queuelog.storage.operations.flow import read_controls, running_counts
from queuelog.storage.schema.types import to_micros
from queuelog.storage.statements import TYPE_CONTROL_FLAGS
from queuelog.storage.transaction import Connection, WriteTx

# The fields of TypeControl a write may change, and the flag of PUT_TYPE_CONTROL of each.
WRITABLE = {
    "paused": "set_paused",
    "paused_until": "set_paused_until",
    "max_running": "set_max_running",
    "max_running_per_key": "set_max_running_per_key",
    "rate_limit": "set_rate_limit",
    "timeout_seconds": "set_timeout_seconds",
}
assert set(WRITABLE.values()) == set(TYPE_CONTROL_FLAGS.values())


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
    """Change the given fields of a type's controls (named as in TypeControl); the others
    keep what they hold as the row is changed. The type's controls afterwards."""
    unknown = set(changes) - WRITABLE.keys()
    if unknown:
        raise TypeError(f"not a writable type control: {', '.join(sorted(unknown))}")
    given = dataclasses.replace(TypeControl(type=job_type), **changes)  # type: ignore[arg-type]
    rate = given.rate_limit
    row = tx.execute(
        tx.sql.PUT_TYPE_CONTROL,
        {
            "type": job_type,
            "paused": int(given.paused),
            "paused_until": to_micros(given.paused_until) if given.paused_until is not None else None,
            "max_running": given.max_running,
            "max_running_per_key": given.max_running_per_key,
            "rate_limit": rate.limit if rate is not None else None,
            "rate_period_seconds": rate.period_seconds if rate is not None else None,
            "rate_per_key": int(rate.per_key) if rate is not None else 0,
            "timeout_seconds": given.timeout_seconds,
            "updated_at": tx.now_us,
            **{flag: field in changes for field, flag in WRITABLE.items()},
        },
    ).fetchone()
    tx.claim_preamble.controls = None  # claims later in this transaction read them again
    control = read_controls(tx, [row])[job_type]
    return as_of(control, tx.now, running_counts(tx).get(job_type, 0))
