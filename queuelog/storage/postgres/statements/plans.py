"""Which statements run with a generic plan, and the settings that switch a transaction's mode."""

from __future__ import annotations

from queuelog.storage.postgres.statements import PostgresStatements, PostgresWriterStatements
from queuelog.storage.postgres.statements.sending import INSERT_EVENTS_AT_ONCE, INSERT_JOBS_AT_ONCE
from queuelog.storage.postgres.statements.server import CLOCK_MICROS

# Statements run with a generic plan, made once per connection. Their custom plans cost
# 0.5-0.7 ms of PostgreSQL's CPU to make, on every call, for a few hundredths of a
# millisecond's work: PostgreSQL's own choice ("auto") keeps making them because a generic
# plan cannot see how many types the array holds, nor the limit, and so looks costlier. The
# generic plans of these statements seek the same indexes (test_postgres_plans checks them).
# Every other statement keeps the server's plan_cache_mode: some need their parameters seen.
GENERIC_PLANS = frozenset(
    {
        PostgresStatements.claim_jobs(1),
        PostgresStatements.claim_within_quotas(1),
        PostgresStatements.promote_due(1),
        PostgresStatements.ready_heads(1),
        PostgresStatements.key_heads(1),
        PostgresStatements.next_due(1),
        PostgresStatements.OVERDUE,
        PostgresStatements.PROMOTE_PENDING,
        # One plan whatever their parameters (none; a lookup by a unique key or the primary
        # key, tested with generic plans; an insert; a small table's index): here so that a
        # batch of claims and completions, and a claim's own statements, run in one mode
        # instead of switching for nearly every statement (2.9 SET LOCAL / RESET per claim and
        # completion, each a statement more for the driver and the server).
        PostgresStatements.PENDING_TYPES,
        PostgresStatements.TYPE_CONTROLS,
        PostgresStatements.LOCK_CONTROLLED_CLAIMS,
        PostgresStatements.RATE_WINDOW,
        PostgresStatements.KEYED_WALK,
        PostgresStatements.FORGET_RATE_CLAIMS,
        PostgresStatements.INSERT_RATE_CLAIM,
        PostgresStatements.KEY_IS_ACTIVE,
        PostgresStatements.COMPLETE_HELD,
        PostgresStatements.COMPLETE_CHECKED,
        PostgresStatements.COMPLETE_MANY,
        PostgresStatements.HEARTBEAT,
        PostgresStatements.REPORT_PROGRESS,
        PostgresStatements.FAIL_RUNNING,
        PostgresStatements.INSERT_JOB,
        PostgresStatements.INSERT_JOB_ONCE,
        INSERT_JOBS_AT_ONCE.sql,
        PostgresStatements.INSERT_EVENT,
        INSERT_EVENTS_AT_ONCE.sql,
        PostgresStatements.ADD_TO_COUNT,
        PostgresStatements.ADD_TO_MINUTE,
        # By a list of ids, written for generic plans (among_ids; test_postgres_plans checks
        # each generic): the reads and updates of a completeJobs batch, the dependents it releases
        PostgresStatements.JOB_BY_ID,
        PostgresWriterStatements.JOB_BY_ID,
        PostgresStatements.JOBS_BY_IDS,
        PostgresWriterStatements.JOBS_BY_IDS,
        PostgresStatements.CLAIM_IDS,
        PostgresStatements.CANCEL_IDS,
        PostgresStatements.RETRY_IDS,
        PostgresStatements.MARK_DEPENDED_ON,
        PostgresStatements.JOB_STATES,
        PostgresStatements.BULK_STATES,
        PostgresStatements.NEXT_EDGES,
        PostgresStatements.RELEASE_NEXT,
        PostgresStatements.EVENTS_OF_JOBS,
        PostgresStatements.ATTEMPT_EVENTS_OF_JOBS,
    }
)
# JIT off for the transaction too (a write batch starts with this): a generic plan cannot
# see a claim's LIMIT and takes it for a tenth of the ready rows, so once ANALYZE has counted
# a big table (90k ready jobs of a type at 1M jobs) the claim's estimate passed
# jit_above_cost, and every claim spent 14-21 ms compiling what runs in 0.2 ms.
_GENERIC_PLANS_NO_JIT = (
    "set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true)"
)
FORCE_GENERIC_PLANS = f"SELECT {_GENERIC_PLANS_NO_JIT}"
# A write batch's first statement: generic plans and no JIT for the transaction, and the
# database's clock (server.DB_NOW's value), in one statement.
OPEN_WRITE_BATCH = f"SELECT {_GENERIC_PLANS_NO_JIT}, {CLOCK_MICROS}"
# The server's own mode, until the transaction ends.
DEFAULT_PLANS = "SET LOCAL plan_cache_mode TO DEFAULT"
