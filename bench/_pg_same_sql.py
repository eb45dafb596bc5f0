"""queuelog's own PostgreSQL statements, for the baselines that send the same SQL (issue 31).

`python -m bench --database postgresql` compares queuelog on PostgreSQL with

- figures 1 and 2: `_baseline_pg_same_app.py`, a bare Starlette app that runs, for each
  request, the transaction queuelog runs for a single enqueueJob / claimJob / completeJob;
- figure 3: `storage_floor.py --sql-only --database postgresql`, the transactions of
  enqueueJobs / claimJobs / completeJobs of 100, in a loop on one connection.

Both send what queuelog's write batch of one operation sends (storage/postgres/database.py
`_commit_once`, as PostgreSQL's log showed it with log_statement=all), in the same round
trips, through the same driver (psycopg 3, sync, binary parameters, the same timestamptz
loader), and write the same rows: the job, its job_events row, its job_counts and
job_minutes deltas (one upsert per counter row, in key order, on one of 16 shards), the
NOTIFY. What they leave out is queuelog's Python: GraphQL, keys, the group commit, the
repository, the codec. Per transaction (`tx_*` below):

1. BEGIN and OPEN_WRITE_BATCH (generic plans, no JIT, the batch's clock), pipelined: one round trip;
2. the operation's statements: INSERT_JOB (or INSERT_JOBS_AT_ONCE); OVERDUE + PENDING_TYPES +
   PROMOTE_PENDING pipelined, then CLAIM_JOBS; COMPLETE_HELD (or COMPLETE_MANY);
3. the events (INSERT_EVENT, or INSERT_EVENTS_AT_ONCE for more than one), the counter
   upserts, pg_notify and COMMIT, pipelined: one round trip.

The statements' text is copied below (this module imports nothing of queuelog, so the app
stays free of it); `check()` compares it with queuelog's (the figures call it before they
start), and `python -m bench._pg_same_sql` prints the current text to paste here when
queuelog's statements change.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

# --- the statements (queuelog/storage/postgres/statements/; `python -m bench._pg_same_sql`) ---
# plans.py OPEN_WRITE_BATCH
OPEN_WRITE_BATCH = (
    "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true),"
    " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint"
)
# server.py
NOTIFY = "SELECT pg_notify(%s, %s)"
EVENTS_CHANNEL = "queuelog_events"
# @generated: the block below is `python -m bench._pg_same_sql`'s output
INSERT_JOB = (
    "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt, "
    "idempotency_key, run_at, created_by, created_at, updated_at, concurrency_key, timeout_seconds, "
    "delayed, waiting_for, dependency_count, has_dependents, schedule_name, revision, expires_at) "
    "VALUES (%(type)s, %(payload)s, %(priority)s, %(status)s, %(retry_count)s, %(max_retries)s, "
    "%(attempt)s, %(idempotency_key)s, (TIMESTAMPTZ 'epoch' + %(run_at)s::bigint * INTERVAL '1 "
    "microsecond'), %(created_by)s, (TIMESTAMPTZ 'epoch' + %(created_at)s::bigint * INTERVAL '1 "
    "microsecond'), (TIMESTAMPTZ 'epoch' + %(updated_at)s::bigint * INTERVAL '1 microsecond'), "
    "%(concurrency_key)s, %(timeout_seconds)s, %(delayed)s, %(waiting_for)s, %(dependency_count)s, "
    "%(has_dependents)s, %(schedule_name)s, %(revision)s, (TIMESTAMPTZ 'epoch' + "
    "%(expires_at)s::bigint * INTERVAL '1 microsecond')) RETURNING id"
)
INSERT_JOBS_AT_ONCE = (
    "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt, "
    "idempotency_key, run_at, created_by, created_at, updated_at, concurrency_key, timeout_seconds, "
    "delayed, waiting_for, dependency_count, has_dependents, schedule_name, revision, expires_at) "
    "SELECT v.type, v.payload, v.priority, v.status, v.retry_count, v.max_retries, v.attempt, "
    "v.idempotency_key, (TIMESTAMPTZ 'epoch' + v.run_at * INTERVAL '1 microsecond'), v.created_by, "
    "(TIMESTAMPTZ 'epoch' + v.created_at * INTERVAL '1 microsecond'), (TIMESTAMPTZ 'epoch' + "
    "v.updated_at * INTERVAL '1 microsecond'), v.concurrency_key, v.timeout_seconds, v.delayed, "
    "v.waiting_for, v.dependency_count, v.has_dependents, v.schedule_name, v.revision, (TIMESTAMPTZ "
    "'epoch' + v.expires_at * INTERVAL '1 microsecond') FROM unnest(%(type)s::text[], "
    "%(payload)s::text[], %(priority)s::smallint[], %(status)s::text[], %(retry_count)s::integer[], "
    "%(max_retries)s::integer[], %(attempt)s::integer[], %(idempotency_key)s::text[], "
    "%(run_at)s::bigint[], %(created_by)s::text[], %(created_at)s::bigint[], "
    "%(updated_at)s::bigint[], %(concurrency_key)s::text[], %(timeout_seconds)s::integer[], "
    "%(delayed)s::smallint[], %(waiting_for)s::integer[], %(dependency_count)s::smallint[], "
    "%(has_dependents)s::smallint[], %(schedule_name)s::text[], %(revision)s::integer[], "
    "%(expires_at)s::bigint[]) WITH ORDINALITY AS v(type, payload, priority, status, retry_count, "
    "max_retries, attempt, idempotency_key, run_at, created_by, created_at, updated_at, "
    "concurrency_key, timeout_seconds, delayed, waiting_for, dependency_count, has_dependents, "
    "schedule_name, revision, expires_at, n) ORDER BY v.n RETURNING id"
)
INSERT_EVENT = (
    "INSERT INTO job_events (job_id, kind, status, at, attempt, worker_id, error) VALUES "
    "(%(job_id)s, %(kind)s, %(status)s, (TIMESTAMPTZ 'epoch' + %(at)s::bigint * INTERVAL '1 "
    "microsecond'), %(attempt)s, %(worker_id)s, %(error)s) RETURNING id"
)
INSERT_EVENTS_AT_ONCE = (
    "INSERT INTO job_events (job_id, kind, status, at, attempt, worker_id, error) SELECT v.job_id, "
    "v.kind, v.status, (TIMESTAMPTZ 'epoch' + v.at * INTERVAL '1 microsecond'), v.attempt, "
    "v.worker_id, v.error FROM unnest(%(job_id)s::bigint[], %(kind)s::text[], %(status)s::text[], "
    "%(at)s::bigint[], %(attempt)s::integer[], %(worker_id)s::text[], %(error)s::text[]) WITH "
    "ORDINALITY AS v(job_id, kind, status, at, attempt, worker_id, error, n) ORDER BY v.n RETURNING "
    "id"
)
ADD_TO_COUNT = (
    "INSERT INTO job_counts (scope, name, type, status, shard, n) VALUES (%(scope)s, %(name)s, "
    "%(type)s, %(status)s, %(shard)s, %(n)s) ON CONFLICT (scope, name, type, status, shard) DO "
    "UPDATE SET n = job_counts.n + excluded.n"
)
ADD_TO_MINUTE = (
    "INSERT INTO job_minutes (scope, name, minute, status, shard, n) VALUES (%(scope)s, %(name)s, "
    "%(minute)s, %(status)s, %(shard)s, %(n)s) ON CONFLICT (scope, name, minute, status, shard) DO "
    "UPDATE SET n = job_minutes.n + excluded.n"
)
OVERDUE = (
    "\n        WITH expired AS MATERIALIZED (\n            SELECT id, type, payload, priority, status, "
    "retry_count, max_retries, attempt, idempotency_key, claimed_at, worker_id, lease_expires_at, "
    "run_at, finished_at, result, error, created_by, created_at, updated_at, concurrency_key, "
    "timeout_seconds, delayed, timeout_at, waiting_for, dependency_count, has_dependents, "
    "schedule_name, revision, cancel_requested_at, expires_at, snooze_count, progress, "
    "progress_message, progress_at, enqueued_as, 'lease' AS why FROM jobs WHERE lease_expires_at < "
    "(TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 microsecond')\n            ORDER BY "
    "lease_expires_at LIMIT 500 FOR UPDATE SKIP LOCKED),\n        late AS MATERIALIZED (\n            "
    "SELECT id, type, payload, priority, status, retry_count, max_retries, attempt, idempotency_key, "
    "claimed_at, worker_id, lease_expires_at, run_at, finished_at, result, error, created_by, "
    "created_at, updated_at, concurrency_key, timeout_seconds, delayed, timeout_at, waiting_for, "
    "dependency_count, has_dependents, schedule_name, revision, cancel_requested_at, expires_at, "
    "snooze_count, progress, progress_message, progress_at, enqueued_as, 'timeout' AS why FROM jobs "
    "WHERE timeout_at < (TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 microsecond')\n          "
    "  ORDER BY timeout_at LIMIT 500 FOR UPDATE SKIP LOCKED),\n        stale AS (\n            UPDATE "
    "jobs SET lease_expires_at = NULL, timeout_at = NULL, revision = jobs.revision + 1\n            "
    "WHERE id = ANY(ARRAY(\n                SELECT id FROM expired WHERE status <> 'running'\n         "
    "       UNION ALL SELECT id FROM late WHERE status <> 'running'))\n            AND (status <> "
    "'running') IS TRUE)\n        SELECT * FROM expired WHERE status = 'running'\n        UNION ALL\n   "
    "     SELECT * FROM late WHERE status = 'running'\n    "
)
PENDING_TYPES = (
    "SELECT type FROM job_counts WHERE scope = '*' AND name = '' AND status = 'pending' GROUP BY "
    "type HAVING SUM(n) > 0"
)
PROMOTE_PENDING = (
    "\n    WITH promoted AS (UPDATE jobs SET delayed = 0, revision = jobs.revision + 1 WHERE id = "
    "ANY(ARRAY(\n        SELECT due.id FROM (SELECT type FROM job_counts WHERE scope = '*' AND name = "
    "'' AND status = 'pending' GROUP BY type HAVING SUM(n) > 0) AS wanted(type) CROSS JOIN LATERAL "
    "(\n            SELECT id FROM jobs WHERE jobs.type = wanted.type AND status = 'pending' AND "
    "delayed = 1 AND run_at <= (TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 microsecond')\n   "
    "         ORDER BY run_at LIMIT 1000 FOR UPDATE SKIP LOCKED) AS due)))\n    SELECT type, paused, "
    "paused_until, max_running, max_running_per_key, rate_limit, rate_period_seconds, rate_per_key, "
    "timeout_seconds FROM type_controls ORDER BY type\n"
)
CLAIM_JOBS = (
    "\n    UPDATE jobs SET status = 'running', worker_id = %(worker)s, claimed_at = "
    "GREATEST((TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 microsecond'), jobs.run_at, "
    "jobs.updated_at),\n        attempt = attempt + 1, lease_expires_at = (TIMESTAMPTZ 'epoch' + "
    "%(lease)s::bigint * INTERVAL '1 microsecond'), updated_at = GREATEST((TIMESTAMPTZ 'epoch' + "
    "%(now)s::bigint * INTERVAL '1 microsecond'), jobs.run_at, jobs.updated_at),\n        revision = "
    "jobs.revision + 1, timeout_at = (TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 "
    "microsecond') + COALESCE(timeout_seconds, (SELECT c.timeout_seconds FROM type_controls AS c "
    "WHERE c.type = jobs.type)) * INTERVAL '1 second', progress = NULL, progress_message = NULL, "
    "progress_at = NULL\n\n    WHERE id = ANY(ARRAY(\n        SELECT heads.id FROM (SELECT head.* FROM "
    "unnest(%(types)s::text[]) AS wanted(type) CROSS JOIN LATERAL (SELECT id, priority, created_at "
    "FROM jobs WHERE jobs.type = wanted.type AND status = 'pending' AND delayed = 0 AND (expires_at "
    "IS NULL OR expires_at > (TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 microsecond')) AND "
    "concurrency_key IS NULL ORDER BY priority DESC, created_at, id LIMIT %(limit)s FOR UPDATE SKIP "
    "LOCKED) AS head UNION ALL SELECT head.* FROM unnest(%(types)s::text[]) AS wanted(type) CROSS "
    "JOIN LATERAL (SELECT id, priority, created_at FROM jobs WHERE jobs.type = wanted.type AND "
    "status = 'pending' AND delayed = 0 AND (expires_at IS NULL OR expires_at > (TIMESTAMPTZ 'epoch' "
    "+ %(now)s::bigint * INTERVAL '1 microsecond')) AND concurrency_key IS NOT NULL ORDER BY "
    "priority DESC, created_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS head) AS heads\n        "
    "ORDER BY heads.priority DESC, heads.created_at, heads.id\n        LIMIT %(limit)s))\n    "
    "RETURNING id, type, payload, priority, status, retry_count, max_retries, attempt, "
    "idempotency_key, claimed_at, worker_id, lease_expires_at, run_at, finished_at, result, error, "
    "created_by, created_at, updated_at, concurrency_key, timeout_seconds, delayed, timeout_at, "
    "waiting_for, dependency_count, has_dependents, schedule_name, revision, cancel_requested_at, "
    "expires_at, snooze_count, progress, progress_message, progress_at, enqueued_as\n"
)
COMPLETE_HELD = (
    "UPDATE jobs SET status = 'completed', lease_expires_at = NULL, timeout_at = NULL, finished_at = "
    "GREATEST((TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 microsecond'), jobs.updated_at), "
    "result = %(result)s, updated_at = GREATEST((TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 "
    "microsecond'), jobs.updated_at), revision = jobs.revision + 1 WHERE id = %(id)s AND (status = "
    "'running') IS TRUE AND worker_id = %(worker)s AND (%(attempt)s::integer IS NULL OR attempt = "
    "%(attempt)s::integer) RETURNING id, type, payload, priority, status, retry_count, max_retries, "
    "attempt, idempotency_key, claimed_at, worker_id, lease_expires_at, run_at, finished_at, result, "
    "error, created_by, created_at, updated_at, concurrency_key, timeout_seconds, delayed, "
    "timeout_at, waiting_for, dependency_count, has_dependents, schedule_name, revision, "
    "cancel_requested_at, expires_at, snooze_count, progress, progress_message, progress_at, "
    "enqueued_as"
)
COMPLETE_MANY = (
    "UPDATE jobs SET status = 'completed', lease_expires_at = NULL, timeout_at = NULL, finished_at = "
    "GREATEST((TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 microsecond'), jobs.updated_at), "
    "result = (%(result)s::text[])[array_position(%(id)s::bigint[], jobs.id)], updated_at = "
    "GREATEST((TIMESTAMPTZ 'epoch' + %(now)s::bigint * INTERVAL '1 microsecond'), jobs.updated_at), "
    "revision = jobs.revision + 1 WHERE id = ANY(%(id)s::bigint[]) AND (status = 'running') IS TRUE "
    "AND (worker_id = %(worker)s) IS TRUE AND attempt = "
    "COALESCE((%(attempt)s::bigint[])[array_position(%(id)s::bigint[], jobs.id)], attempt) RETURNING "
    "id, type, payload, priority, status, retry_count, max_retries, attempt, idempotency_key, "
    "claimed_at, worker_id, lease_expires_at, run_at, finished_at, result, error, created_by, "
    "created_at, updated_at, concurrency_key, timeout_seconds, delayed, timeout_at, waiting_for, "
    "dependency_count, has_dependents, schedule_name, revision, cancel_requested_at, expires_at, "
    "snooze_count, progress, progress_message, progress_at, enqueued_as"
)
# @end
# JOB_COLUMN_LIST's order (RETURNING of the claim and the completions): the columns read here.
COL_ID, COL_TYPE, COL_PAYLOAD, COL_ATTEMPT, COL_WORKER, COL_CREATED_BY, COL_UPDATED_AT = (
    0,
    1,
    2,
    7,
    10,
    16,
    18,
)

# The constants above that come from queuelog's statement classes, in this order.
GENERATED = (
    "INSERT_JOB",
    "INSERT_JOBS_AT_ONCE",
    "INSERT_EVENT",
    "INSERT_EVENTS_AT_ONCE",
    "ADD_TO_COUNT",
    "ADD_TO_MINUTE",
    "OVERDUE",
    "PENDING_TYPES",
    "PROMOTE_PENDING",
    "CLAIM_JOBS",
    "COMPLETE_HELD",
    "COMPLETE_MANY",
)
COUNTER_SHARDS = 16  # database.py COUNTER_SHARDS
MICROS_PER_MINUTE = 60_000_000
PRIORITIES = {"LOW": 0, "MEDIUM": 10, "HIGH": 20, "CRITICAL": 30}
ORIGIN = "baseline0000"  # a server id, as notify payloads start with one
NOTIFY_PAYLOAD_MAX = 7000  # database.py


def queuelog_text() -> dict[str, str]:
    """The same names, as queuelog has them now (imports queuelog)."""
    from queuelog.storage.postgres.statements import PostgresWriterStatements as S
    from queuelog.storage.postgres.statements import plans, sending, server

    found = {name: getattr(S, name) for name in GENERATED if hasattr(S, name)}
    found |= {
        "INSERT_JOBS_AT_ONCE": sending.INSERT_JOBS_AT_ONCE.sql,
        "INSERT_EVENTS_AT_ONCE": sending.INSERT_EVENTS_AT_ONCE.sql,
        "CLAIM_JOBS": S.claim_jobs(1),  # any number of types: one array parameter
        "OPEN_WRITE_BATCH": plans.OPEN_WRITE_BATCH,
        "NOTIFY": server.NOTIFY,
        "EVENTS_CHANNEL": server.EVENTS_CHANNEL,
    }
    return found


def mismatches() -> list[str]:
    """The names whose text here differs from queuelog's."""
    here = globals()
    return [name for name, text in queuelog_text().items() if here.get(name) != text]


def check() -> None:
    wrong = mismatches()
    if wrong:
        raise RuntimeError(
            "bench/_pg_same_sql.py no longer sends queuelog's statements: "
            + ", ".join(wrong)
            + "; paste `python -m bench._pg_same_sql`'s output into it"
        )


def literal(text: str, width: int = 96) -> str:
    """`text` as a Python expression of string pieces, each under `width` characters."""
    pieces: list[str] = []
    while text:
        cut = len(text) if len(text) <= width else text.rfind(" ", 0, width) + 1 or width
        pieces.append(text[:cut])
        text = text[cut:]
    if len(pieces) == 1:
        return repr(pieces[0])
    return "(\n" + "".join(f"    {piece!r}\n" for piece in pieces) + ")"


# --- the parameters, as queuelog builds them ------------------------------------------------


def new_job_row(item: dict[str, Any], payload: str, created_by: str, now_us: int) -> dict[str, Any]:
    """The values of a new job's row (schema/new_job.py row_values) for an enqueue input of
    type, payload, priority, maxRetries, idempotencyKey and nothing else."""
    return {
        "type": item["type"],
        "payload": payload,
        "priority": PRIORITIES[item.get("priority", "LOW")],
        "status": "pending",
        "retry_count": 0,
        "max_retries": item.get("maxRetries", 3),
        "attempt": 0,
        "idempotency_key": item.get("idempotencyKey"),
        "run_at": now_us,
        "created_by": created_by,
        "created_at": now_us,
        "updated_at": now_us,
        "concurrency_key": None,
        "timeout_seconds": None,
        "delayed": 0,
        "waiting_for": 0,
        "dependency_count": 0,
        "has_dependents": 0,
        "schedule_name": None,
        "revision": 0,
        "expires_at": None,
    }


def event_row(
    job_id: int, kind: str, status: str, at: int, attempt: int | None, worker_id: str | None
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "kind": kind,
        "status": status,
        "at": at,
        "attempt": attempt,
        "worker_id": worker_id,
        "error": None,
    }


# A transition: type, created_by, old status, old worker, new status, new worker.
Move = tuple[str, str, "str | None", "str | None", "str | None", "str | None"]


def _count_keys(job_type: str, status: str, created_by: str, worker: str | None) -> list[tuple[str, ...]]:
    """schema/counters.py count_keys."""
    keys = [("*", "", job_type, status), ("p", created_by, job_type, status)]
    if worker is not None:
        keys.append(("w", worker, job_type, status))
        if worker == created_by:
            keys.append(("s", worker, job_type, status))
    return keys


def counter_rows(moves: Iterable[Move], shard: int, now_us: int) -> tuple[list[dict[str, Any]], ...]:
    """The job_counts and job_minutes upserts of these transitions (operations/batch.py
    write_side_effects, schema/counters.py net and finished), in key order."""
    total: Counter[tuple[str, ...]] = Counter()
    minutes: Counter[tuple[Any, ...]] = Counter()
    minute = now_us // MICROS_PER_MINUTE
    for (job_type, created_by, old, old_worker, new, new_worker), n in Counter(moves).items():
        if old is not None:
            for key in _count_keys(job_type, old, created_by, old_worker):
                total[key] -= n
        if new is not None:
            for key in _count_keys(job_type, new, created_by, new_worker):
                total[key] += n
        if new in ("completed", "failed") and old != new:
            for scope, name, _, status in _count_keys(job_type, new, created_by, new_worker):
                minutes[(scope, name, minute, status)] += n
    counts = [
        {"scope": k[0], "name": k[1], "type": k[2], "status": k[3], "shard": shard, "n": n}
        for k, n in sorted(total.items())
        if n
    ]
    finished = [
        {"scope": k[0], "name": k[1], "minute": k[2], "status": k[3], "shard": shard, "n": n}
        for k, n in sorted(minutes.items())
    ]
    return counts, finished


def notify_payloads(items: Iterable[tuple[str, int, str]]) -> list[str]:
    """`origin kind:id:status ...`, split to stay under PostgreSQL's payload limit
    (database.py notify_payloads)."""
    payloads, current, size = [], [ORIGIN], len(ORIGIN)
    for kind, job_id, status in items:
        item = f"{kind}:{job_id}:{status}"
        if size + len(item) + 1 > NOTIFY_PAYLOAD_MAX:
            payloads.append(" ".join(current))
            current, size = [ORIGIN], len(ORIGIN)
        current.append(item)
        size += len(item) + 1
    if len(current) > 1:
        payloads.append(" ".join(current))
    return payloads


# --- the transactions (psycopg 3, sync; one per call, as a write batch of one operation) ---------


def connect(url: str) -> Any:
    """A writer connection as queuelog opens one (postgres/connection.py): not autocommit,
    timestamptz read in binary as integer microseconds."""
    import psycopg
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    epoch_us = 946_684_800 * 1_000_000

    class MicrosLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> int:
            return int.from_bytes(data, "big", signed=True) + epoch_us

    connection = psycopg.connect(url, autocommit=False, connect_timeout=5)
    connection.adapters.register_loader("timestamptz", MicrosLoader)
    return connection


def _begin(conn: Any) -> int:
    """BEGIN, the generic-plan switch and the clock: one round trip; the clock's microseconds."""
    with conn.pipeline():
        opened = conn.execute(OPEN_WRITE_BATCH)
    return int(opened.fetchone()[2])


def _rows(cursor: Any) -> list[Any]:
    from psycopg.pq import ExecStatus

    result = cursor.pgresult
    return cursor.fetchall() if result is not None and result.status == ExecStatus.TUPLES_OK else []


def _finish(
    conn: Any,
    events: list[dict[str, Any]],
    moves: list[Move],
    notified: list[tuple[str, int, str]],
    now_us: int,
) -> None:
    """Events, counters, NOTIFY and COMMIT: one round trip (database.py `_commit_once`)."""
    counts, finished = counter_rows(moves, random.randrange(COUNTER_SHARDS), now_us)
    with conn.pipeline():
        if len(events) > 1:
            conn.execute(INSERT_EVENTS_AT_ONCE, {k: [e[k] for e in events] for k in events[0]}, binary=True)
        elif events:
            conn.cursor(binary=True).executemany(INSERT_EVENT, events)
        if counts:
            conn.cursor(binary=True).executemany(ADD_TO_COUNT, counts)
        if finished:
            conn.cursor(binary=True).executemany(ADD_TO_MINUTE, finished)
        for payload in notify_payloads(notified):
            conn.execute(NOTIFY, (EVENTS_CHANNEL, payload))
        conn.commit()


def tx_enqueue(conn: Any, items: Sequence[tuple[dict[str, Any], str]], created_by: str) -> list[int]:
    """enqueueJob / enqueueJobs: (input, its payload as compact JSON) each; the new ids."""
    now_us = _begin(conn)
    rows = [new_job_row(item, payload, created_by, now_us) for item, payload in items]
    if len(rows) == 1:
        ids = [conn.execute(INSERT_JOB, rows[0], binary=True).fetchone()[0]]
    else:
        arrays = {k: [row[k] for row in rows] for k in rows[0]}
        ids = sorted(row[0] for row in conn.execute(INSERT_JOBS_AT_ONCE, arrays, binary=True).fetchall())
    events = [event_row(i, "ENQUEUED", "pending", now_us, None, None) for i in ids]
    moves: list[Move] = [(row["type"], created_by, None, None, "pending", None) for row in rows]
    _finish(conn, events, moves, [("ENQUEUED", i, "pending") for i in ids], now_us)
    return ids


def tx_claim(conn: Any, worker: str, limit: int, lease_seconds: int = 300) -> list[Any]:
    """claimJob / claimJobs(limit) of any type: the overdue probe, the types with pending jobs
    and the promotion (which reads the controls) in one round trip, then the claim; the
    claimed rows (all of JOB_COLUMN_LIST), in claim order. Nothing is overdue or delayed in
    the bench: what OVERDUE or the promotion would find is not handled here."""
    now_us = _begin(conn)
    with conn.pipeline():
        overdue = conn.execute(OVERDUE, {"now": now_us}, binary=True)
        counted = conn.execute(PENDING_TYPES, None, binary=True)
        conn.execute(PROMOTE_PENDING, {"now": now_us}, binary=True)
    if _rows(overdue):
        raise RuntimeError("the same-statements baseline found overdue jobs: it does not expire them")
    types = sorted(t for (t,) in _rows(counted))
    rows: list[Any] = []
    if types:
        params = {"worker": worker, "now": now_us, "lease": now_us + lease_seconds * 1_000_000}
        params |= {"limit": limit, "types": types}
        rows = conn.execute(CLAIM_JOBS, params, binary=True).fetchall()
        rows.sort(key=lambda r: (-r[3], r[17], r[COL_ID]))  # priority, created_at, id
    events = [
        event_row(r[COL_ID], "CLAIMED", "running", r[COL_UPDATED_AT], r[COL_ATTEMPT], worker) for r in rows
    ]
    moves: list[Move] = [(r[COL_TYPE], r[COL_CREATED_BY], "pending", None, "running", worker) for r in rows]
    if rows:
        _finish(conn, events, moves, [("CLAIMED", r[COL_ID], "running") for r in rows], now_us)
    else:
        conn.commit()
    return rows


def tx_complete(conn: Any, worker: str, items: Sequence[tuple[int, int | None, str | None]]) -> list[Any]:
    """completeJob / completeJobs: (id, attempt, result as compact JSON) each; the rows completed."""
    from psycopg.types.numeric import Int8

    now_us = _begin(conn)
    if len(items) == 1:
        ((job_id, attempt, result),) = items
        params = {"id": job_id, "worker": worker, "attempt": attempt, "result": result, "now": now_us}
        rows = _rows(conn.execute(COMPLETE_HELD, params, binary=True))
    else:
        params = {
            # sending.py INT8_ARRAYS: these go as bigint[] whatever their values
            "id": [Int8(i) for i, _, _ in items],
            "attempt": [None if a is None else Int8(a) for _, a, _ in items],
            "result": [r for _, _, r in items],
            "worker": worker,
            "now": now_us,
        }
        done = {row[COL_ID]: row for row in _rows(conn.execute(COMPLETE_MANY, params, binary=True))}
        rows = [done[i] for i, _, _ in items if i in done]
    events = [
        event_row(r[COL_ID], "COMPLETED", "completed", r[COL_UPDATED_AT], r[COL_ATTEMPT], None) for r in rows
    ]
    moves: list[Move] = [
        (r[COL_TYPE], r[COL_CREATED_BY], "running", worker, "completed", worker) for r in rows
    ]
    if rows:
        _finish(conn, events, moves, [("COMPLETED", r[COL_ID], "completed") for r in rows], now_us)
    else:
        conn.rollback()
    return rows


if __name__ == "__main__":
    current = queuelog_text()
    for name in GENERATED:
        print(f"{name} = {literal(current[name])}")
    wrong = mismatches()
    print(f"# {'differs: ' + ', '.join(wrong) if wrong else 'all the same as here'}", file=sys.stderr)
