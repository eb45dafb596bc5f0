"""Pruning: finished jobs past their retention, with their events, and old job_minutes rows."""

from __future__ import annotations

from datetime import datetime

from queuelog.storage.schema import counters
from queuelog.storage.schema.counters import MICROS_PER_MINUTE
from queuelog.storage.schema.types import ids_json, to_micros
from queuelog.storage.transaction import WriteTx


def prune(tx: WriteTx, finished_before: datetime) -> int:
    """Delete up to PRUNE_BATCH terminal jobs finished before the cutoff, with their events,
    but none that a PENDING job waits for (a retried dependent may wait for a FAILED job)."""
    found = tx.execute(tx.sql.PRUNABLE, {"cutoff": to_micros(finished_before)}).fetchall()
    if not found:
        return 0
    rows = tx.execute(tx.sql.PRUNE, {"ids": ids_json([r[0] for r in found])}).fetchall()
    if rows:
        tx.execute(tx.sql.DELETE_EVENTS_OF, {"ids": ids_json([r[0] for r in rows])})
        tx.execute(tx.sql.DELETE_DEPENDENCIES_OF, {"ids": ids_json([r[0] for r in rows])})
        for _, job_type, status, created_by, worker_id in rows:
            tx.forget(job_type, status, created_by, worker_id)
    return len(rows)


def prune_minutes(tx: WriteTx) -> int:
    """Drop job_minutes rows older than counters.MINUTES_KEPT."""
    before = tx.now_us // MICROS_PER_MINUTE - counters.MINUTES_KEPT
    return tx.execute(tx.sql.PRUNE_MINUTES, {"before": before}).rowcount
