"""SQLite's claim of types no control binds, and the promotion of due delayed jobs before it."""

from __future__ import annotations

import functools

from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.sqlite.statements.fragments import (
    CLAIMABLE,
    DELAYED,
    NEXT_REVISION_SQL,
    READY,
    each_type,
)
from queuelog.storage.statements import PENDING_TYPES_SQL, PROGRESS_RESET, PROMOTE_BATCH, Statements

# A type's ready jobs in claim order: those without a key (ix_jobs_ready), or with one
# (ix_jobs_ready_keyed), each index named (INDEXED BY): lacking statistics, SQLite's planner
# may otherwise pick a status index and sort every pending row.
UNKEYED_HEAD = (
    "SELECT {columns} FROM jobs INDEXED BY ix_jobs_ready WHERE type = :type{{i}} AND {ready}"
    " AND concurrency_key IS NULL ORDER BY priority DESC, created_at, id LIMIT {limit}"
)
KEYED_HEAD = (
    "SELECT {columns} FROM jobs INDEXED BY ix_jobs_ready_keyed WHERE type = :type{{i}} AND {ready}"
    " AND concurrency_key IS NOT NULL ORDER BY priority DESC, created_at, id LIMIT {limit}"
)
# Set by every claim: the job's own timeout, else its type's (a correlated read by key).
_TIMEOUT_AT = (
    "timeout_at = :now + COALESCE(timeout_seconds,"
    " (SELECT c.timeout_seconds FROM type_controls AS c WHERE c.type = jobs.type)) * 1000000"
)
_CLAIM_STAMP = "max(:now, run_at, updated_at)"
CLAIMED = f"""
    UPDATE jobs SET status = 'running', worker_id = :worker, claimed_at = {_CLAIM_STAMP},
        attempt = attempt + 1, lease_expires_at = :lease, updated_at = {_CLAIM_STAMP},
        {NEXT_REVISION_SQL}, {_TIMEOUT_AT}, {PROGRESS_RESET}
"""


def type_heads(
    type_count: int, columns: str, unkeyed_limit: str, keyed_limit: str, ready: str = READY
) -> str:
    """Each type's first `ready` jobs without a key and with one (`ready`: a claim's reads
    take CLAIMABLE)."""
    unkeyed = UNKEYED_HEAD.format(columns=columns, ready=ready, limit=unkeyed_limit)
    keyed = KEYED_HEAD.format(columns=columns, ready=ready, limit=keyed_limit)
    return each_type(type_count, f"{unkeyed}) UNION ALL SELECT * FROM ({keyed}")


def claim_heads(heads: str) -> str:
    """Claim the first `limit` of `heads`, in claim order. BEGIN IMMEDIATE makes it atomic."""
    return f"""{CLAIMED}
    WHERE status = 'pending' AND id IN (
        SELECT id FROM ({heads}) ORDER BY priority DESC, created_at, id LIMIT :limit)
    RETURNING {JOB_COLUMN_LIST}
"""


# The claim of types without controls: up to `limit` of each type's heads.
@functools.lru_cache(maxsize=64)
def claim_statement(type_count: int) -> str:
    return claim_heads(type_heads(type_count, "id, priority, created_at", ":limit", ":limit", CLAIMABLE))


@functools.lru_cache(maxsize=64)
def promote_statement(type_count: int) -> str:
    due = each_type(
        type_count,
        "SELECT id FROM jobs INDEXED BY ix_jobs_delayed"
        f" WHERE type = :type{{i}} AND {DELAYED} AND run_at <= :now ORDER BY run_at LIMIT {PROMOTE_BATCH}",
    )
    return f"UPDATE jobs SET delayed = 0, {NEXT_REVISION_SQL} WHERE {DELAYED} AND id IN ({due})"


class ClaimStatements(Statements, part=True):
    """The claim of uncontrolled types, the promotion before it, and the types it reads."""

    claim_jobs = staticmethod(claim_statement)
    promote_due = staticmethod(promote_statement)
    PENDING_TYPES = PENDING_TYPES_SQL
