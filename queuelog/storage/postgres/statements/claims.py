"""PostgreSQL's claim of types no control binds, and the promotion of due delayed jobs before it."""

from __future__ import annotations

from queuelog.storage.postgres.statements.fragments import (
    CLAIMABLE,
    DELAYED,
    KEYED,
    NEXT_REVISION,
    NOW,
    READY,
    UNKEYED,
    WANTED,
    same_text,
    ts,
)
from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import (
    PENDING_TYPES_SQL,
    PROGRESS_RESET,
    PROMOTE_BATCH,
    TYPE_CONTROLS_SQL,
    Statements,
)

# Set by every claim: the job's own timeout, else its type's (a read by key).
_TIMEOUT_AT = (
    f"timeout_at = {NOW} + COALESCE(timeout_seconds,"
    " (SELECT c.timeout_seconds FROM type_controls AS c WHERE c.type = jobs.type)) * INTERVAL '1 second'"
)
# claimed_at is never before run_at: a job a dependency released in a transaction that began
# after this one (another writer connection; its clock was read later) became due then.
_CLAIM_STAMP = f"GREATEST({NOW}, jobs.run_at, jobs.updated_at)"
CLAIMED = f"""
    UPDATE jobs SET status = 'running', worker_id = %(worker)s, claimed_at = {_CLAIM_STAMP},
        attempt = attempt + 1, lease_expires_at = {ts("lease")}, updated_at = {_CLAIM_STAMP},
        {NEXT_REVISION}, {_TIMEOUT_AT}, {PROGRESS_RESET}
"""


def type_heads(
    columns: str, wanted: str, unkeyed_limit: str, keyed_limit: str, lock: bool, ready: str = READY
) -> str:
    """Each wanted type's first `ready` jobs without a key and with one (two LATERAL reads:
    FOR UPDATE is not allowed under a UNION's branches, but is in their FROM). A claim's
    reads take CLAIMABLE."""
    skip = " FOR UPDATE SKIP LOCKED" if lock else ""
    reads = [
        f"SELECT head.* FROM {wanted} CROSS JOIN LATERAL ("
        f"SELECT {columns} FROM jobs WHERE jobs.type = wanted.type AND {ready} AND {keyness}"
        f" ORDER BY priority DESC, created_at, id LIMIT {limit}{skip}) AS head"
        for keyness, limit in ((UNKEYED, unkeyed_limit), (KEYED, keyed_limit))
    ]
    return " UNION ALL ".join(reads)


def claim_heads(heads: str) -> str:
    """Claim the first `limit` of `heads`, in claim order."""
    return f"""{CLAIMED}
    WHERE id = ANY(ARRAY(
        SELECT heads.id FROM ({heads}) AS heads
        ORDER BY heads.priority DESC, heads.created_at, heads.id
        LIMIT %(limit)s))
    RETURNING {JOB_COLUMN_LIST}
"""


_CLAIM = claim_heads(
    type_heads("id, priority, created_at", WANTED, "%(limit)s", "%(limit)s", True, CLAIMABLE)
)


def _promote(wanted: str) -> str:
    """Make the due delayed jobs of the `wanted` types ready, then read the controls (a
    data-modifying WITH runs whatever the query reads)."""
    return f"""
    WITH promoted AS (UPDATE jobs SET delayed = 0, {NEXT_REVISION} WHERE id = ANY(ARRAY(
        SELECT due.id FROM {wanted} CROSS JOIN LATERAL (
            SELECT id FROM jobs WHERE jobs.type = wanted.type AND {DELAYED} AND run_at <= {NOW}
            ORDER BY run_at LIMIT {PROMOTE_BATCH} FOR UPDATE SKIP LOCKED) AS due)))
    {TYPE_CONTROLS_SQL}
"""


_PROMOTE = _promote(WANTED)
# The types that have PENDING jobs (a claim of any type), read in the statement, so that it
# goes in one round trip with PENDING_TYPES.
_PROMOTE_PENDING = _promote(f"({PENDING_TYPES_SQL}) AS wanted(type)")


class ClaimStatements(Statements, part=True):
    """The claim of uncontrolled types, the promotion before it, and the types it reads."""

    claim_jobs = staticmethod(same_text(_CLAIM))
    promote_due = staticmethod(same_text(_PROMOTE))
    PENDING_TYPES = PENDING_TYPES_SQL
    PROMOTE_PENDING = _PROMOTE_PENDING
