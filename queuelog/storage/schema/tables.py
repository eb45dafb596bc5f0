"""The tables, in SQLAlchemy Core. Alembic migrations create them; this file describes them
(tests/storage/test_migrations.py checks that the two agree).

`jobs` keeps the design note's columns under their names (priority stored 0/10/20/30,
status lowercase) and adds what the contract needs; its columns are named as the fields
of `queuelog.model.Job`. `job_counts` holds the counts that stats and totals read, kept in
the same transaction as every transition; `key_state` holds the generation that tells
each server process its cached API keys are stale.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from queuelog.storage.schema.types import JsonDocument, UtcTimestamp

metadata = MetaData()

# SQLite only gives AUTOINCREMENT-like rowids to INTEGER PRIMARY KEY; BIGINT elsewhere.
IdType = BigInteger().with_variant(Integer(), "sqlite")

jobs = Table(
    "jobs",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("type", String(255), nullable=False),
    Column("payload", JsonDocument(), nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("status", String(16), nullable=False),
    Column("retry_count", Integer, nullable=False, server_default="0"),
    Column("max_retries", Integer, nullable=False),
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("idempotency_key", String(255)),
    Column("claimed_at", UtcTimestamp()),
    Column("worker_id", String(255)),
    Column("lease_expires_at", UtcTimestamp()),
    Column("run_at", UtcTimestamp(), nullable=False),
    Column("finished_at", UtcTimestamp()),
    Column("result", JsonDocument()),
    Column("error", Text),
    Column("created_by", String(255), nullable=False),
    Column("created_at", UtcTimestamp(), nullable=False),
    Column("updated_at", UtcTimestamp(), nullable=False),
    # Flow control (API.md section 9): the key that per-key limits count by, and the job's
    # own timeout.
    Column("concurrency_key", String(255)),
    Column("timeout_seconds", Integer),
    # Internal: 1 while a PENDING job waits for its run_at. A claim only reads jobs that are
    # not delayed (ix_jobs_ready), so a backlog of delayed jobs is never walked; claims and
    # the maintenance loop turn due jobs ready (ix_jobs_delayed, oldest run_at first).
    Column("delayed", SmallInteger, nullable=False, server_default="0"),
    # Internal: when a RUNNING job times out (set by the claim from its timeout, or its type's).
    Column("timeout_at", UtcTimestamp()),
    # Dependencies (API.md section 10): how many of the job's dependencies are not COMPLETED
    # yet; while above 0 the job is PENDING with delayed = 2, in none of the claim's indexes.
    Column("waiting_for", Integer, nullable=False, server_default="0"),
    # Internal: how many jobs this one depends on (0: job_dependencies need not be read), and
    # 1 once some job depends on it (then finishing it releases or cancels its dependents).
    Column("dependency_count", SmallInteger, nullable=False, server_default="0"),
    Column("has_dependents", SmallInteger, nullable=False, server_default="0"),
    Column("schedule_name", String(100)),
    # Internal: how many times the row was updated. Every UPDATE of a job adds one under the
    # row's lock, so it grows in the order a job's changes commit (migration 0010).
    Column("revision", Integer, nullable=False, server_default="0"),
    # Steering (API.md section 12, migration 0015): set when a RUNNING job's cancellation is
    # asked for; the time after which a PENDING job is never claimed (ix_jobs_expiry finds
    # those due); snoozes, which use no retry; the holder's latest progress report.
    Column("cancel_requested_at", UtcTimestamp()),
    Column("expires_at", UtcTimestamp()),
    Column("snooze_count", Integer, nullable=False, server_default="0"),
    Column("progress", Float),
    Column("progress_message", String(200)),
    Column("progress_at", UtcTimestamp()),
    # Internal: from a job's first edit (updateJob) on, its priority, max_retries and
    # expires_at as enqueued (JSON), which a replayed enqueue is compared with (migration 0016).
    Column("enqueued_as", JsonDocument()),
    # A producer's idempotency keys. On PostgreSQL a partial unique index over the jobs that
    # have one: a status change is never a HOT update, so every index a row is in gets a new
    # entry at each transition, and most jobs have no key (migration 0014). SQLite keeps its
    # table constraint (dropping it rewrites the table), whose index no UPDATE of a job touches.
    UniqueConstraint("created_by", "idempotency_key", name="uq_jobs_idempotency").ddl_if(dialect="sqlite"),
    Index(
        "ix_jobs_idempotency",
        "created_by",
        "idempotency_key",
        unique=True,
        postgresql_where=text("idempotency_key IS NOT NULL"),
    ).ddl_if(dialect="postgresql"),
    # The claim, one type at a time: the first ready rows of the type in claim order
    # (priority DESC, created_at, id). Other types and delayed jobs are not in its path.
    # Jobs without a concurrency key (the usual case) are in this index alone...
    Index(
        "ix_jobs_ready",
        "type",
        text("priority DESC"),
        "created_at",
        "id",
        postgresql_where=text("status = 'pending' AND delayed = 0 AND concurrency_key IS NULL"),
        sqlite_where=text("status = 'pending' AND delayed = 0 AND concurrency_key IS NULL"),
    ),
    # ...jobs with one in these two: in claim order, and per key, so that a type with
    # per-key limits seeks past a full key's backlog instead of walking it.
    Index(
        "ix_jobs_ready_keyed",
        "type",
        text("priority DESC"),
        "created_at",
        "id",
        postgresql_where=text("status = 'pending' AND delayed = 0 AND concurrency_key IS NOT NULL"),
        sqlite_where=text("status = 'pending' AND delayed = 0 AND concurrency_key IS NOT NULL"),
    ),
    Index(
        "ix_jobs_ready_key",
        "type",
        "concurrency_key",
        text("priority DESC"),
        "created_at",
        "id",
        postgresql_where=text(
            "status = 'pending' AND delayed = 0 AND concurrency_key IS NOT NULL AND concurrency_key >= ''"
        ),
        sqlite_where=text("status = 'pending' AND delayed = 0 AND concurrency_key IS NOT NULL"),
    ),
    # Queue lag (oldestPendingSeconds): the ready job of each type that has waited longest.
    # On PostgreSQL the last terms of this predicate and ix_jobs_ready_key's (always true)
    # are stated only by the statements meant to use them: however stale its statistics, the
    # planner cannot read a claim's jobs from these indexes and sort them (it did: 57 ms at
    # 100k). SQLite's statements name their index (INDEXED BY) instead.
    Index(
        "ix_jobs_lag",
        "type",
        "run_at",
        postgresql_where=text("status = 'pending' AND delayed = 0 AND run_at IS NOT NULL"),
        sqlite_where=text("status = 'pending' AND delayed = 0"),
    ),
    # The overdue probe before every claim: on PostgreSQL these hold the rows whose lease or
    # timeout is set (only RUNNING jobs have one), so that the probe names its index by its
    # own column and no status index can answer it (migration 0008).
    Index(
        "ix_jobs_lease",
        "lease_expires_at",
        postgresql_where=text("lease_expires_at IS NOT NULL"),
        sqlite_where=text("status = 'running'"),
    ),
    # Statements that must use the partial indexes above name them (INDEXED BY), because
    # without statistics SQLite's planner may prefer the status indexes below.
    Index(
        "ix_jobs_finished",
        "finished_at",
        postgresql_where=text("finished_at IS NOT NULL"),
        sqlite_where=text("finished_at IS NOT NULL"),
    ),
    # `jobs(status:, type:)`, newest first: one index per filter, each in id order. PostgreSQL
    # reads a type's jobs through ix_jobs_type_status, once per status (read_plans.plan_list),
    # and has no ix_jobs_type: an entry fewer at every transition (migration 0014). On SQLite
    # an UPDATE touches only the indexes of the columns it changes, never this one.
    Index("ix_jobs_status", "status", "id"),
    Index("ix_jobs_type", "type", "id").ddl_if(dialect="sqlite"),
    Index("ix_jobs_type_status", "type", "status", "id"),
    # When each type's next delayed job becomes due (a claim makes it ready then;
    # long-polling claims sleep until then).
    Index(
        "ix_jobs_delayed",
        "type",
        "run_at",
        postgresql_where=text("status = 'pending' AND delayed = 1"),
        sqlite_where=text("status = 'pending' AND delayed = 1"),
    ),
    # RUNNING jobs per (type, key), counted by claims of types with per-key limits.
    Index(
        "ix_jobs_running_key",
        "type",
        "concurrency_key",
        postgresql_where=text("status = 'running' AND concurrency_key IS NOT NULL"),
        sqlite_where=text("status = 'running' AND concurrency_key IS NOT NULL"),
    ),
    Index(
        "ix_jobs_timeout",
        "timeout_at",
        postgresql_where=text("timeout_at IS NOT NULL"),
        sqlite_where=text("status = 'running' AND timeout_at IS NOT NULL"),
    ),
    # A caller's own jobs, by status, in id order: a producer's (created_by) and a worker's.
    # A page of a scoped caller walks (scope, status) from its end and stops at the page's
    # end, one status at a time (reads.list_jobs); a producer's cancelJobs walks its PENDING
    # jobs; its oldest pending job is read among its PENDING jobs (migration 0013).
    Index("ix_jobs_creator_status", "created_by", "status", "id"),
    Index(
        "ix_jobs_schedule",
        "schedule_name",
        "id",
        postgresql_where=text("schedule_name IS NOT NULL"),
        sqlite_where=text("schedule_name IS NOT NULL"),
    ),
    Index(
        "ix_jobs_worker_status",
        "worker_id",
        "status",
        "id",
        postgresql_where=text("worker_id IS NOT NULL"),
        sqlite_where=text("worker_id IS NOT NULL"),
    ),
    # PENDING jobs that expire, soonest first: expiry reads only those due (migration 0015).
    Index(
        "ix_jobs_expiry",
        "expires_at",
        postgresql_where=text("status = 'pending' AND expires_at IS NOT NULL"),
        sqlite_where=text("status = 'pending' AND expires_at IS NOT NULL"),
    ),
    # Never reuse the id of a pruned job: ids are what clients hold on to (and cursors).
    sqlite_autoincrement=True,
)

# What each job waits for: `job_id` is claimed only once every `depends_on` is COMPLETED.
job_dependencies = Table(
    "job_dependencies",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    Column("depends_on", BigInteger, primary_key=True),
    # The newest settlement (dependency_settlements.id) of `depends_on` that `job_id` was
    # retried after: the settlements up to it pass the job by (settlements.py).
    Column("spared_by", BigInteger),
    Index("ix_job_dependencies_on", "depends_on", "job_id"),
)

# A finished job's dependents still to settle (settlements.py): released (`error` NULL: the
# job completed) or cancelled with `error`, those with ids up to `passed` done already, none
# above `reaches` (they came after it finished). A job's rows are worked through in id order;
# ids are never reused (AUTOINCREMENT), so that `spared_by` never names a later settlement.
dependency_settlements = Table(
    "dependency_settlements",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, nullable=False),
    Column("error", Text),
    Column("passed", BigInteger, nullable=False),
    Column("reaches", BigInteger, nullable=False),
    Index("ix_dependency_settlements_job", "job_id", "id"),
    sqlite_autoincrement=True,
)

# Cron schedules (API.md section 10). `next_run_at`: the next tick to enqueue (NULL while
# paused); every server's ticker takes the due rows (PostgreSQL: FOR UPDATE SKIP LOCKED,
# SQLite: under the write lock), enqueues and moves `next_run_at` on in one transaction.
schedules = Table(
    "schedules",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("type", String(255), nullable=False),
    Column("cron", String(200), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("payload", JsonDocument(), nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("misfire", String(16), nullable=False),
    Column("overlap", String(16), nullable=False),
    Column("paused", SmallInteger, nullable=False, server_default="0"),
    Column("next_run_at", UtcTimestamp()),
    Column("last_run_at", UtcTimestamp()),
    Column("last_job_id", BigInteger),
    Column("created_at", UtcTimestamp(), nullable=False),
    Column("updated_at", UtcTimestamp(), nullable=False),
    Index(
        "ix_schedules_due",
        "next_run_at",
        postgresql_where=text("paused = 0"),
        sqlite_where=text("paused = 0"),
    ),
)

# One row: when a ticker last ran on any server. Ticks between that moment and a ticker's
# next run long after it passed while no server ran (misfire), not while one lagged.
schedule_clock = Table(
    "schedule_clock",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("alive_at", UtcTimestamp()),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("roles", String(64), nullable=False),
    Column("max_priority", SmallInteger, nullable=False),
    Column("created_at", UtcTimestamp(), nullable=False),
    Column("revoked_at", UtcTimestamp()),
)

job_events = Table(
    "job_events",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("at", UtcTimestamp(), nullable=False),
    # Of a claim and of the end of an attempt: what Job.attempts is read from (migration 0015).
    Column("attempt", Integer),
    Column("worker_id", String(255)),
    Column("error", Text),
    Index("ix_job_events_job", "job_id", "id"),
    sqlite_autoincrement=True,
)

# How many jobs each scope sees, by type and status. `scope` is '*' (every job, name ''),
# 'p' (jobs created by `name`), 'w' (jobs whose worker_id is `name`) or 's' (both at once,
# so that a key with both roles is counted once: p + w - s).
job_counts = Table(
    "job_counts",
    metadata,
    Column("scope", String(1), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("type", String(255), primary_key=True),
    Column("status", String(16), primary_key=True),
    # Concurrent transactions add to rows of different shards, not to one hot row (migration
    # 0006); a count is the sum over the shards. SQLite writes shard 0 only.
    Column("shard", SmallInteger, primary_key=True, server_default="0"),
    Column("n", BigInteger, nullable=False),
)

# Jobs finished (completed or failed) per minute, by the same scopes as job_counts: the
# dashboard's throughput, read without counting jobs. `minute` counts minutes since 1970
# (UTC); rows older than MINUTES_KEPT are pruned.
job_minutes = Table(
    "job_minutes",
    metadata,
    Column("scope", String(1), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("minute", BigInteger, primary_key=True),
    Column("status", String(16), primary_key=True),
    # Concurrent transactions add to rows of different shards, not to one hot row (migration
    # 0006); a count is the sum over the shards. SQLite writes shard 0 only.
    Column("shard", SmallInteger, primary_key=True, server_default="0"),
    Column("n", BigInteger, nullable=False),
)

# How claims treat a type (API.md section 9), on every server. A type without a row has no
# controls. `paused_until`: a pause that ends by itself (NULL with paused = 1: until resumed).
# Job types an ADMIN added at runtime (addJobType): the allowlist is QUEUELOG_JOB_TYPES plus
# these, read by every server (API.md section 12).
job_types = Table(
    "job_types",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("added_by", String(255), nullable=False),
    Column("added_at", UtcTimestamp(), nullable=False),
)

type_controls = Table(
    "type_controls",
    metadata,
    Column("type", String(255), primary_key=True),
    Column("paused", SmallInteger, nullable=False, server_default="0"),
    Column("paused_until", UtcTimestamp()),
    Column("max_running", Integer),
    Column("max_running_per_key", Integer),
    Column("rate_limit", Integer),
    Column("rate_period_seconds", Integer),
    Column("rate_per_key", SmallInteger, nullable=False, server_default="0"),
    Column("timeout_seconds", Integer),
    Column("updated_at", UtcTimestamp(), nullable=False),
)

# The claims of rate-limited types inside their window (a sliding window is counted, not
# estimated): one row per claim, `key` '' for the type as a whole or a job without a key.
# Rows older than the type's period are pruned. `seq` numbers each (type, key)'s claims and
# `at` never decreases with it, so a window's count is the difference of two sequence
# numbers, each found by one seek in ix_rate_claims_window (flow.py).
rate_claims = Table(
    "rate_claims",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("type", String(255), nullable=False),
    Column("key", String(255), nullable=False),
    Column("at", UtcTimestamp(), nullable=False),
    Column("seq", BigInteger),
    Index("ix_rate_claims_window", "type", "key", "at", "seq"),
)

# One row; `generation` goes up whenever a key is revoked or changed (a trigger does it, so
# every path that touches api_keys counts), and servers drop their cached principals.
# `types_generation` goes up whenever job_types changes (a trigger too): servers read both in
# one read per request, and read job_types again only when it has moved.
key_state = Table(
    "key_state",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("generation", BigInteger, nullable=False),
    Column("types_generation", BigInteger, nullable=False, server_default="0"),
)
