"""SQLite's statements of flow control: the type controls, the counts a quota needs and the
claims within quotas."""

from __future__ import annotations

import functools

from queuelog.storage.schema.codec import JOB_COLUMN_LIST
from queuelog.storage.sqlite.statements.claims import (
    CLAIMED,
    KEYED_HEAD,
    UNKEYED_HEAD,
    claim_heads,
    type_heads,
)
from queuelog.storage.sqlite.statements.fragments import CANDIDATE, CLAIMABLE, READY, UNEXPIRED, each_type
from queuelog.storage.statements import TYPE_CONTROLS_SQL, Statements, put_type_control


def _within_quotas(type_count: int, columns: str) -> str:
    """Each type's first `quota{i}` ready jobs, keyed and unkeyed together: the quota is the
    type's, so it applies to the merge of its two index reads, not to each of them."""
    unkeyed = UNKEYED_HEAD.format(columns=columns, ready=CLAIMABLE, limit=":quota{i}")
    keyed = KEYED_HEAD.format(columns=columns, ready=CLAIMABLE, limit=":quota{i}")
    return each_type(
        type_count,
        f"SELECT * FROM ({unkeyed}) UNION ALL SELECT * FROM ({keyed})"
        " ORDER BY priority DESC, created_at, id LIMIT :quota{i}",
    )


@functools.lru_cache(maxsize=64)
def claim_within_quotas_statement(type_count: int) -> str:
    return claim_heads(_within_quotas(type_count, "id, priority, created_at"))


@functools.lru_cache(maxsize=64)
def ready_heads_statement(type_count: int) -> str:
    return type_heads(type_count, CANDIDATE, ":quota{i}", ":kquota{i}")


@functools.lru_cache(maxsize=64)
def key_heads_statement(key_count: int) -> str:
    return each_type(
        key_count,
        f"SELECT {CANDIDATE} FROM jobs INDEXED BY ix_jobs_ready_key"
        f" WHERE type = :type{{i}} AND concurrency_key = :key{{i}} AND {READY}"
        " ORDER BY priority DESC, created_at, id LIMIT :quota{i}",
    )


class FlowStatements(Statements, part=True):
    """Flow control: the controls, the controlled-claim lock, quotas' counts and claims."""

    claim_within_quotas = staticmethod(claim_within_quotas_statement)
    ready_heads = staticmethod(ready_heads_statement)
    key_heads = staticmethod(key_heads_statement)
    # The candidates were read without the expiry term: it is checked here, on the row.
    CLAIM_IDS = f"""{CLAIMED}
        WHERE status = 'pending' AND id IN (SELECT value FROM json_each(:ids)) AND {UNEXPIRED}
        RETURNING {JOB_COLUMN_LIST}
    """
    TYPE_CONTROLS = TYPE_CONTROLS_SQL
    RUNNING_PER_KEY = (
        "SELECT concurrency_key, count(*) FROM jobs INDEXED BY ix_jobs_running_key"
        " WHERE type = :type AND status = 'running' AND concurrency_key IS NOT NULL"
        " GROUP BY concurrency_key"
    )
    KEYED_WALK = (
        f"SELECT {CANDIDATE} FROM jobs INDEXED BY ix_jobs_ready_keyed WHERE type = :type AND {READY}"
        " AND concurrency_key IS NOT NULL AND concurrency_key NOT IN (SELECT value FROM json_each(:full))"
        " ORDER BY priority DESC, created_at, id LIMIT :walk"
    )
    # Each key's head: the keys of the type's ready jobs by a loose index scan (one seek a
    # key), then each key's first job in claim order (one more).
    KEYED_HEADS = f"""
        WITH RECURSIVE ready_keys(key) AS (
            SELECT MIN(concurrency_key) FROM jobs INDEXED BY ix_jobs_ready_key
            WHERE type = :type AND {READY} AND concurrency_key IS NOT NULL
            UNION ALL
            SELECT (SELECT MIN(concurrency_key) FROM jobs INDEXED BY ix_jobs_ready_key
                WHERE type = :type AND {READY} AND concurrency_key > ready_keys.key)
            FROM ready_keys WHERE ready_keys.key IS NOT NULL)
        SELECT {CANDIDATE} FROM jobs WHERE id IN (
            SELECT (SELECT id FROM jobs INDEXED BY ix_jobs_ready_key
                WHERE type = :type AND concurrency_key = ready_keys.key AND {READY}
                ORDER BY priority DESC, created_at, id LIMIT 1)
            FROM ready_keys
            WHERE key IS NOT NULL AND key NOT IN (SELECT value FROM json_each(:full)))
    """
    # Each key with claims in the window (a loose index scan), its count (last seq - first
    # seq in the window + 1) and its oldest claim: three seeks a key, whatever the count.
    RATE_WINDOW = """
        WITH RECURSIVE window_keys(key) AS (
            SELECT MIN(key) FROM rate_claims INDEXED BY ix_rate_claims_window WHERE type = :type
            UNION ALL
            SELECT (SELECT MIN(key) FROM rate_claims INDEXED BY ix_rate_claims_window
                WHERE type = :type AND key > window_keys.key)
            FROM window_keys WHERE window_keys.key IS NOT NULL),
        ends(key, last_seq, first_seq, first_at) AS (
            SELECT key,
                (SELECT seq FROM rate_claims INDEXED BY ix_rate_claims_window
                    WHERE type = :type AND key = window_keys.key ORDER BY at DESC, seq DESC LIMIT 1),
                (SELECT seq FROM rate_claims INDEXED BY ix_rate_claims_window
                    WHERE type = :type AND key = window_keys.key AND at > :since ORDER BY at, seq LIMIT 1),
                (SELECT at FROM rate_claims INDEXED BY ix_rate_claims_window
                    WHERE type = :type AND key = window_keys.key AND at > :since ORDER BY at, seq LIMIT 1)
            FROM window_keys WHERE key IS NOT NULL)
        SELECT key, last_seq - first_seq + 1, first_at FROM ends WHERE first_seq IS NOT NULL
    """
    FORGET_RATE_CLAIMS = "DELETE FROM rate_claims WHERE type = :type AND at <= :since"
    # The key's next sequence number, at no earlier than its last claim's (a clock that
    # stepped back would otherwise break the order that RATE_WINDOW's count relies on).
    INSERT_RATE_CLAIM = """
        INSERT INTO rate_claims (type, key, at, seq)
        SELECT :type, :key, MAX(:at, COALESCE(MAX(at), :at)), COALESCE(MAX(seq), 0) + 1 FROM (
            SELECT at, seq FROM rate_claims INDEXED BY ix_rate_claims_window
            WHERE type = :type AND key = :key ORDER BY at DESC, seq DESC LIMIT 1)
    """
    PUT_TYPE_CONTROL = put_type_control(lambda name: f":{name}", lambda column: f":{column}")
