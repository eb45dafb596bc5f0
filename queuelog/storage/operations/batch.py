"""What a write batch runs besides its operations' own statements: after each operation, the
settling of the jobs it finished (settlements.py), in its savepoint; and before COMMIT, the
events and counter changes of every operation that was kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from queuelog.storage.operations import settlements
from queuelog.storage.operations.attempts import event_columns
from queuelog.storage.schema import counters
from queuelog.storage.schema.counters import MICROS_PER_MINUTE
from queuelog.storage.schema.types import to_micros
from queuelog.storage.statements import KIND_TEXT, STATUS_TEXT
from queuelog.storage.transaction import WriteTx

T = TypeVar("T")


def run(operation: Callable[[WriteTx], T], tx: WriteTx) -> T:
    """One operation of a write batch, then what its finished jobs' dependents need: both in
    the operation's savepoint."""
    value = operation(tx)
    if tx.parents:
        settlements.settle(tx)
    return value


def write_side_effects(tx: WriteTx) -> None:
    """The events and counter changes of a group commit's successful operations."""
    now = tx.now_us
    events = tx.stored_events()
    if events:
        # Each event is stamped as its job was (never before the job's previous stamp).
        rows = []
        for e in events:
            attempt, worker_id, error = event_columns(e.kind, e.job)
            rows.append(
                {
                    "job_id": e.job.id,
                    "kind": KIND_TEXT[e.kind],
                    "status": STATUS_TEXT[e.job.status],
                    "at": to_micros(e.at),
                    "attempt": attempt,
                    "worker_id": worker_id,
                    "error": error,
                }
            )
        if tx.event_ids is None:
            tx.executemany(tx.sql.INSERT_EVENT, rows)
        else:  # an event tail runs: it must know this process's events from the others'
            tx.event_ids.extend(tx.connection.insert_ids(tx.sql.INSERT_EVENT, rows))
    if tx.rate_claims:
        tx.executemany(tx.sql.INSERT_RATE_CLAIM, tx.rate_claims)
    # In key order: concurrent transactions (PostgreSQL servers) then lock the shared counter
    # rows in the same order and queue behind each other instead of deadlocking.
    changes = sorted(counters.net(tx.moves))
    if changes:
        tx.executemany(
            tx.sql.ADD_TO_COUNT,
            [
                {"scope": k[0], "name": k[1], "type": k[2], "status": k[3], "shard": tx.counter_shard, "n": n}
                for k, n in changes
            ],
        )
    finished = counters.finished(tx.moves, now // MICROS_PER_MINUTE)
    if finished:
        tx.executemany(
            tx.sql.ADD_TO_MINUTE,
            [
                {
                    "scope": k[0],
                    "name": k[1],
                    "minute": k[2],
                    "status": k[3],
                    "shard": tx.counter_shard,
                    "n": n,
                }
                for k, n in finished
            ],
        )
