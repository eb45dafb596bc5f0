"""PostgreSQL's statements of flow control: the type controls, the controlled-claim lock, the
counts a quota needs and the claims within quotas."""

from __future__ import annotations

from queuelog.storage.postgres.statements.claims import CLAIMED, claim_heads, type_heads
from queuelog.storage.postgres.statements.fragments import (
    CANDIDATE,
    CLAIMABLE,
    IS_PENDING,
    KEYED,
    PER_KEY,
    READY,
    UNEXPIRED,
    UNKEYED,
    WANTED_QUOTAS,
    among_ids,
    same_text,
    text_list,
    ts,
)
from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.statements import TYPE_CONTROLS_SQL, Statements, put_type_control


def _within_quotas(columns: str) -> str:
    """Each wanted type's first `quota` ready jobs, keyed and unkeyed together: the quota is
    the type's, so it applies to the merge of its two index reads, not to each of them."""
    reads = [
        f"SELECT * FROM (SELECT {columns} FROM jobs WHERE jobs.type = wanted.type AND {CLAIMABLE}"
        f" AND {keyness} ORDER BY priority DESC, created_at, id LIMIT wanted.quota"
        f" FOR UPDATE SKIP LOCKED) AS {name}"
        for keyness, name in ((UNKEYED, "unkeyed"), (KEYED, "keyed"))
    ]
    return (
        f"SELECT head.* FROM {WANTED_QUOTAS} CROSS JOIN LATERAL ("
        f"SELECT * FROM ({' UNION ALL '.join(reads)}) AS both_heads"
        " ORDER BY priority DESC, created_at, id LIMIT wanted.quota) AS head"
    )


_READY_HEADS = type_heads(
    CANDIDATE,
    "unnest(%(types)s::text[], %(quotas)s::int[], %(kquotas)s::int[]) AS wanted(type, quota, kquota)",
    "wanted.quota",
    "wanted.kquota",
    True,
)
_CLAIM_WITHIN_QUOTAS = claim_heads(_within_quotas("id, priority, created_at"))
_KEY_HEADS = f"""
    SELECT head.* FROM unnest(%(types)s::text[], %(keys)s::text[], %(quotas)s::int[])
        AS wanted(type, key, quota)
    CROSS JOIN LATERAL (
        SELECT {CANDIDATE} FROM jobs
        WHERE jobs.type = wanted.type AND concurrency_key = wanted.key AND {READY} AND {PER_KEY}
        ORDER BY priority DESC, created_at, id LIMIT wanted.quota FOR UPDATE SKIP LOCKED) AS head
"""


class FlowStatements(Statements, part=True):
    """Flow control: the controls, the controlled-claim lock, quotas' counts and claims."""

    claim_within_quotas = staticmethod(same_text(_CLAIM_WITHIN_QUOTAS))
    ready_heads = staticmethod(same_text(_READY_HEADS))
    key_heads = staticmethod(same_text(_KEY_HEADS))
    # The candidates were read without the expiry term: it is checked here, on the row.
    CLAIM_IDS = (
        f"{CLAIMED} WHERE {among_ids('id', 'ids')} AND {IS_PENDING} AND {UNEXPIRED}"
        f" RETURNING {JOB_COLUMN_LIST}"
    )
    TYPE_CONTROLS = TYPE_CONTROLS_SQL
    # Every server's claims of controlled types take turns (operations/flow.py); the number is
    # arbitrary but fixed: queuelog's only advisory lock. Answers the clock once the lock is
    # held (the subquery, kept apart by OFFSET 0, runs first), so what the claim plans is timed
    # after every controlled claim it waited for.
    LOCK_CONTROLLED_CLAIMS = (
        "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint"
        " FROM (SELECT pg_advisory_xact_lock(7160419) OFFSET 0) AS locked"
    )
    RUNNING_PER_KEY = (
        "SELECT concurrency_key, count(*) FROM jobs"
        " WHERE type = %(type)s AND status = 'running' AND concurrency_key IS NOT NULL"
        " GROUP BY concurrency_key"
    )
    # Not locked: CLAIM_IDS claims only what is still PENDING once it holds the row.
    KEYED_WALK = (
        f"SELECT {CANDIDATE} FROM jobs WHERE type = %(type)s AND {READY} AND {KEYED}"
        f" AND NOT concurrency_key = ANY(ARRAY{text_list('full')})"
        " ORDER BY priority DESC, created_at, id LIMIT %(walk)s"
    )
    # Each key's head: the keys of the type's ready jobs by a loose index scan (one seek a
    # key), then each key's first job in claim order (one more).
    KEYED_HEADS = f"""
        WITH RECURSIVE ready_keys(key) AS (
            (SELECT concurrency_key FROM jobs
            WHERE type = %(type)s AND {READY} AND {PER_KEY} ORDER BY concurrency_key LIMIT 1)
            UNION ALL
            SELECT (SELECT concurrency_key FROM jobs
                WHERE type = %(type)s AND {READY} AND {PER_KEY} AND concurrency_key > ready_keys.key
                ORDER BY concurrency_key LIMIT 1)
            FROM ready_keys WHERE ready_keys.key IS NOT NULL)
        SELECT head.* FROM ready_keys CROSS JOIN LATERAL (
            SELECT {CANDIDATE} FROM jobs
            WHERE jobs.type = %(type)s AND concurrency_key = ready_keys.key AND {READY} AND {PER_KEY}
            ORDER BY priority DESC, created_at, id LIMIT 1) AS head
        WHERE ready_keys.key IS NOT NULL AND NOT ready_keys.key = ANY(ARRAY{text_list("full")})
    """
    # Each key with claims in the window (a loose index scan), its count (last seq - first
    # seq in the window + 1) and its oldest claim: two seeks a key, whatever the count.
    RATE_WINDOW = f"""
        WITH RECURSIVE window_keys(key) AS (
            (SELECT key FROM rate_claims WHERE type = %(type)s ORDER BY key LIMIT 1)
            UNION ALL
            SELECT (SELECT key FROM rate_claims WHERE type = %(type)s AND key > window_keys.key
                ORDER BY key LIMIT 1)
            FROM window_keys WHERE window_keys.key IS NOT NULL)
        SELECT window_keys.key, last.seq - first.seq + 1, first.at FROM window_keys
        CROSS JOIN LATERAL (SELECT seq FROM rate_claims WHERE type = %(type)s AND key = window_keys.key
            ORDER BY at DESC, seq DESC LIMIT 1) AS last
        CROSS JOIN LATERAL (SELECT seq, at FROM rate_claims WHERE type = %(type)s AND key = window_keys.key
            AND at > {ts("since")} ORDER BY at, seq LIMIT 1) AS first
        WHERE window_keys.key IS NOT NULL
    """
    FORGET_RATE_CLAIMS = f"DELETE FROM rate_claims WHERE type = %(type)s AND at <= {ts('since')}"
    # The key's next sequence number, at no earlier than its last claim's (see SQLite's).
    INSERT_RATE_CLAIM = f"""
        INSERT INTO rate_claims (type, key, at, seq)
        SELECT %(type)s, %(key)s, GREATEST({ts("at")}, MAX(at)), COALESCE(MAX(seq), 0) + 1 FROM (
            SELECT at, seq FROM rate_claims WHERE type = %(type)s AND key = %(key)s
            ORDER BY at DESC, seq DESC LIMIT 1) AS last
    """
    PUT_TYPE_CONTROL = put_type_control(
        lambda name: f"%({name})s",
        lambda column: ts(column) if column in ("paused_until", "updated_at") else f"%({column})s",
    )
