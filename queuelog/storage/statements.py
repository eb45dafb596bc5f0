"""The names of the statements queuelog runs, and the constants both databases share.

Each database has one class holding its SQL under these names: `SqliteStatements`
(sqlite_statements.py) and `PostgresStatements` (postgres_statements.py). A connection
carries its database's class as `.sql`, so operations.py asks for `tx.sql.CLAIM_ANY` and
never sees the text. A class that lacks a name, or adds one not declared here, fails when it
is defined: at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from queuelog.model import EventKind, Job, JobStatus
from queuelog.storage import counters
from queuelog.storage.codec import COLUMN_INDEX

PENDING = JobStatus.PENDING.value
RUNNING = JobStatus.RUNNING.value
TERMINAL_SQL = "('completed', 'failed', 'cancelled')"
LEASE_EXPIRED_ERROR = "lease expired"
EXPIRE_BATCH = 500
PRUNE_BATCH = 2000
EVENT_TAIL_BATCH = 5000

# `delay(job, retryable, retry_in)`: seconds until the next attempt, None when final.
RetryDecision = Callable[[Job, bool, "float | None"], "float | None"]

KIND_TEXT = {kind: kind.value for kind in EventKind}
STATUS_TEXT = counters.STATUS_TEXT
# Positions of columns in a row of JOB_COLUMN_LIST, for checks made before decoding.
COL_ID, COL_STATUS, COL_WORKER, COL_ATTEMPT = (
    COLUMN_INDEX[c] for c in ("id", "status", "worker_id", "attempt")
)
COL_PRIORITY, COL_CREATED = COLUMN_INDEX["priority"], COLUMN_INDEX["created_at"]
COL_RESULT, COL_FINISHED, COL_LEASE, COL_UPDATED = (
    COLUMN_INDEX[c] for c in ("result", "finished_at", "lease_expires_at", "updated_at")
)


class Statements:
    """Every statement operations.py and the repository run, by name. Subclass it once per
    database, defining each name as a class attribute (never instantiated)."""

    # jobs: enqueue
    INSERT_JOB: ClassVar[str]
    INSERT_JOB_ONCE: ClassVar[str]
    JOB_BY_IDEMPOTENCY_KEY: ClassVar[str]
    JOBS_BY_IDEMPOTENCY_KEYS: ClassVar[str]
    # jobs: by id
    JOB_BY_ID: ClassVar[str]
    JOBS_BY_IDS: ClassVar[str]
    # jobs: claim and the holder's reports
    CLAIM_ANY: ClassVar[str]
    CLAIM_TYPES: ClassVar[str]
    HEARTBEAT: ClassVar[str]
    COMPLETE_HELD: ClassVar[str]
    COMPLETE_CHECKED: ClassVar[str]
    FAIL_RUNNING: ClassVar[str]
    EXPIRE_RUNNING: ClassVar[str]
    EXPIRED_LEASES: ClassVar[str]
    # jobs: producer and admin actions
    CANCEL_PENDING: ClassVar[str]
    RETRY_FINISHED: ClassVar[str]
    PRUNE: ClassVar[str]
    # jobs: reads
    NEXT_DUE_ANY: ClassVar[str]
    NEXT_DUE_TYPES: ClassVar[str]
    OLDEST_PENDING_ANY: ClassVar[str]
    OLDEST_PENDING_OF: ClassVar[str]
    OLDEST_PENDING_AMONG_OWN: ClassVar[str]
    # `list_jobs(by_creator, by_worker, status, job_type, after, walk_scope)`: `jobs(...)`
    list_jobs: ClassVar[Callable[[bool, bool, bool, bool, bool, bool], str]]
    # job_events
    INSERT_EVENT: ClassVar[str]
    DELETE_EVENTS_OF: ClassVar[str]
    MAX_EVENT_ID: ClassVar[str]
    EVENTS_WITH_IDS: ClassVar[str]
    EVENTS_AFTER: ClassVar[str]
    EVENTS_OF_JOBS: ClassVar[str]
    # job_counts and job_minutes
    ADD_TO_COUNT: ClassVar[str]
    ADD_TO_MINUTE: ClassVar[str]
    COUNTS_OF_SCOPES: ClassVar[str]
    MINUTES_OF_SCOPES: ClassVar[str]
    PRUNE_MINUTES: ClassVar[str]
    # api_keys and key_state: every request's key checks
    ACTIVE_KEY: ClassVar[str]
    KEY_IS_ACTIVE: ClassVar[str]
    KEY_GENERATION: ClassVar[str]
    PING: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = set(statement_names())
        defined = {name for name in vars(cls) if name.isupper() or name in declared}
        inherited = {name for name in declared if hasattr(cls, name)}
        missing = sorted(declared - inherited)
        unknown = sorted(name for name in defined - declared if not name.startswith("_"))
        if missing or unknown:
            raise TypeError(f"{cls.__name__}: missing statements {missing}, undeclared {unknown}")


def statement_names() -> tuple[str, ...]:
    """Every name a database's statements class must define."""
    return tuple(Statements.__annotations__)
