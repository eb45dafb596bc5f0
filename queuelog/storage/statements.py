"""The names of the statements queuelog runs, what else differs between the databases, and the
constants both share.

Each database has one class holding its SQL under these names: `SqliteStatements`
(sqlite/statements/) and `PostgresStatements` (postgres/statements/). A connection carries its
database's class as `.sql`, so the operations (operations/) ask for `tx.sql.INSERT_JOB_ONCE`
and never see the text. A class that lacks a name, or adds one not declared here, fails when
it is defined: at import. What a database does differently beyond its text, the operations
learn from its `Capabilities`, which a connection carries as `.can`; a few statements exist
only where a capability says so (ONLY_WHERE).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from queuelog.model import EventKind, Job, JobStatus
from queuelog.storage.schema import counters
from queuelog.storage.schema.codec import COLUMN_INDEX
from queuelog.storage.schema.tables import schedules

SCHEDULE_COLUMNS: tuple[str, ...] = tuple(c.name for c in schedules.c)
SCHEDULE_COLUMN_LIST = ", ".join(SCHEDULE_COLUMNS)
SCHEDULES_PER_PASS = 1000  # due schedules one ticker transaction fires

PENDING = JobStatus.PENDING.value
RUNNING = JobStatus.RUNNING.value
TERMINAL_SQL = "('completed', 'failed', 'cancelled')"
LEASE_EXPIRED_ERROR = "lease expired"
TIMED_OUT_ERROR = "timed out"
CANCELLED_WHILE_RUNNING_ERROR = "cancelled while running"
EXPIRED_ERROR = "expired"
EXPIRE_BATCH = 500
PRUNE_BATCH = 2000
EVENT_TAIL_BATCH = 5000
PROMOTE_BATCH = 1000  # delayed jobs made ready per type by one claim
LAST_ID = 2**63 - 1  # above every job's id
# Progress belongs to the attempt (API.md section 12): every claim starts the next one
# without (the claim statements' SET).
PROGRESS_RESET = "progress = NULL, progress_message = NULL, progress_at = NULL"

# type_controls as TYPE_CONTROLS and PUT_TYPE_CONTROL answer it (flow.read_controls decodes).
TYPE_CONTROL_COLUMN_LIST = (
    "type, paused, paused_until, max_running, max_running_per_key, rate_limit,"
    " rate_period_seconds, rate_per_key, timeout_seconds"
)
# PUT_TYPE_CONTROL's parameter that says whether it changes the column: a column whose flag
# is false keeps its stored value (the row is locked, so no concurrent write of another
# column is lost); a new row takes every value given.
TYPE_CONTROL_FLAGS = {
    "paused": "set_paused",
    "paused_until": "set_paused_until",
    "max_running": "set_max_running",
    "max_running_per_key": "set_max_running_per_key",
    "rate_limit": "set_rate_limit",
    "rate_period_seconds": "set_rate_limit",
    "rate_per_key": "set_rate_limit",
    "timeout_seconds": "set_timeout_seconds",
}


def put_type_control(parameter: Callable[[str], str], value: Callable[[str], str]) -> str:
    """PUT_TYPE_CONTROL in a database's parameter style (`parameter(name)`; `value(column)`
    is the value inserted into a column)."""
    columns = ["type", *TYPE_CONTROL_FLAGS, "updated_at"]
    changes = ", ".join(
        f"{column} = CASE WHEN {parameter(flag)} THEN excluded.{column} ELSE type_controls.{column} END"
        for column, flag in TYPE_CONTROL_FLAGS.items()
    )
    return (
        f"INSERT INTO type_controls ({', '.join(columns)}) VALUES ({', '.join(map(value, columns))})"
        f" ON CONFLICT (type) DO UPDATE SET {changes}, updated_at = excluded.updated_at"
        f" RETURNING {TYPE_CONTROL_COLUMN_LIST}"
    )


def status_literal(value: str) -> str:
    """A status value written into a statement's text (a page's part per status): only one
    of JobStatus's values, never anything a client sent."""
    if value not in STATUS_VALUES:
        raise ValueError(f"not a status: {value!r}")
    return f"'{value}'"


STATUS_VALUES_IN_ORDER = tuple(status.value for status in JobStatus)
STATUS_VALUES = frozenset(STATUS_VALUES_IN_ORDER)


class BulkWalk(enum.Enum):
    """The index a bulk action's chunks walk for one status, in id order."""

    STATUS = enum.auto()  # ix_jobs_status: every job of the status, testing the filter
    TYPE_STATUS = enum.auto()  # ix_jobs_type_status: the type's jobs of the status
    CREATOR = enum.auto()  # ix_jobs_creator_status: the creator's PENDING jobs, testing the type


# `delay(job, retryable, retry_in)`: seconds until the next attempt, None when final.
RetryDecision = Callable[[Job, bool, "float | None"], "float | None"]

# The types with PENDING jobs, by the counters (what a claim of any type reads), in both
# databases' SQL.
PENDING_TYPES_SQL = (
    f"SELECT type FROM job_counts WHERE scope = '{counters.ALL}' AND name = '' AND status = '{PENDING}'"
    " GROUP BY type HAVING SUM(n) > 0"
)
TYPE_CONTROLS_SQL = f"SELECT {TYPE_CONTROL_COLUMN_LIST} FROM type_controls ORDER BY type"
BROKEN_SCHEDULES_SQL = "SELECT count(*) FROM schedules WHERE paused = 0 AND next_run_at IS NULL"
SCHEDULE_COUNT_SQL = "SELECT count(*) FROM schedules"
KIND_TEXT = {kind: kind.value for kind in EventKind}
STATUS_TEXT = counters.STATUS_TEXT
# Positions of columns in a row of JOB_COLUMN_LIST, for checks made before decoding.
COL_ID, COL_STATUS, COL_WORKER, COL_ATTEMPT = (
    COLUMN_INDEX[c] for c in ("id", "status", "worker_id", "attempt")
)
COL_PRIORITY, COL_CREATED = COLUMN_INDEX["priority"], COLUMN_INDEX["created_at"]
COL_RESULT, COL_FINISHED, COL_LEASE, COL_TIMEOUT, COL_UPDATED, COL_REVISION = (
    COLUMN_INDEX[c]
    for c in ("result", "finished_at", "lease_expires_at", "timeout_at", "updated_at", "revision")
)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a database does differently, beyond the text of its statements."""

    # Other transactions commit while one runs (PostgreSQL: every server's writers). Without
    # (SQLite), the write lock keeps every other writer out from BEGIN to COMMIT: the rows and
    # controls a transaction read stay as read, event ids commit in order (no EVENT_HORIZON),
    # and controlled claims take turns without a lock of their own (no LOCK_CONTROLLED_CLAIMS).
    concurrent_writes: bool
    # promote_due answers TYPE_CONTROLS's rows in the same statement, and PROMOTE_PENDING
    # promotes the types with PENDING jobs, read in the statement: a claim's preamble in one
    # round trip (PostgreSQL).
    promotion_reads_controls: bool
    # completeJobs checks and completes in one statement (COMPLETE_MANY), with no read before.
    completes_at_once: bool
    # RELEASE_NEXT answers NEXT_EDGES's rows too: one round trip, one snapshot.
    release_returns_edges: bool
    # jobs has ix_jobs_type, the index of a type's jobs in id order (schema/tables.py):
    # without it `jobs(type:)` reads ix_jobs_type_status once per status (read_plans).
    type_index: bool
    # The planner picks indexes by their statistics: a read that must walk one in its order
    # and stop at its LIMIT sets WALK_IN_INDEX_ORDER first (PostgreSQL). SQLite's statements
    # name their indexes (INDEXED BY).
    plans_by_statistics: bool
    # Reads and writes run on the event loop's thread, each in microseconds (SQLite): a read
    # costs nothing to run when asked, and a long write holds up every request.
    runs_on_the_loop: bool
    # Other servers' commits can be heard as they happen (LISTEN/NOTIFY: Database.listen).
    notifies: bool
    # A maintenance loop VACUUMs and ANALYZEs the busiest tables where autovacuum does not
    # run (postgres/vacuum.py).
    vacuums: bool


# The statements a database has only where its capabilities say so, by the field that does.
ONLY_WHERE = {
    "PROMOTE_PENDING": "promotion_reads_controls",
    "COMPLETE_MANY": "completes_at_once",
    "WALK_IN_INDEX_ORDER": "plans_by_statistics",
    "EVENT_HORIZON": "concurrent_writes",
    "LOCK_CONTROLLED_CLAIMS": "concurrent_writes",
}


class Statements:
    """Every statement the operations and the repository run, by name. Subclass it once per
    database, defining each name as a class attribute (never instantiated)."""

    # jobs: enqueue
    INSERT_JOB: ClassVar[str]
    INSERT_JOB_ONCE: ClassVar[str]
    JOB_BY_IDEMPOTENCY_KEY: ClassVar[str]
    JOBS_BY_IDEMPOTENCY_KEYS: ClassVar[str]
    # jobs: by id
    JOB_BY_ID: ClassVar[str]
    JOBS_BY_IDS: ClassVar[str]
    # jobs: claim and the holder's reports. Statements over several types take a count of
    # types and read parameters `type0`..`typeN` (and `quota0`..: at most that many of each)
    # on SQLite, the arrays `types` (and `quotas`) on PostgreSQL: see per_type_params.
    # `claim_jobs(n)`: up to `limit` ready jobs of n types, in claim order.
    claim_jobs: ClassVar[Callable[[int], str]]
    # `promote_due(n)`: make delayed jobs of n types that are due (run_at <= now) ready;
    # where `promotion_reads_controls`, the same statement answers TYPE_CONTROLS's rows (one
    # round trip less per claim on PostgreSQL).
    promote_due: ClassVar[Callable[[int], str]]
    # Only where `promotion_reads_controls`: promote_due of the types with PENDING jobs
    # (PENDING_TYPES, read in the statement), for a claim of any type to send with
    # PENDING_TYPES in one round trip.
    PROMOTE_PENDING: ClassVar[str]
    # Claims of controlled types (operations/flow.py): `claim_within_quotas(n)` claims the
    # first `limit` of each type's first `quota{i}` ready jobs in claim order, in one
    # statement, when no type is limited per key; otherwise candidates first, then CLAIM_IDS.
    claim_within_quotas: ClassVar[Callable[[int], str]]
    # `ready_heads(n)`: each type's first ready jobs, `quota{i}` without a key and `kquota{i}`
    # with one; `key_heads(n)`: the first `quota{i}` ready jobs of (type{i}, key{i}).
    ready_heads: ClassVar[Callable[[int], str]]
    key_heads: ClassVar[Callable[[int], str]]
    CLAIM_IDS: ClassVar[str]
    TIME_OUT_RUNNING: ClassVar[str]
    HEARTBEAT: ClassVar[str]
    COMPLETE_HELD: ClassVar[str]
    COMPLETE_CHECKED: ClassVar[str]
    # Only where `completes_at_once`: completeJobs in one statement that checks each job
    # against its item (RUNNING, held by `worker`, the item's attempt if it has one) and
    # returns the rows it completed: arrays `id`, `attempt` (None: any) and `result`, `worker`
    # and `now`. Elsewhere the rows are read first, then COMPLETE_CHECKED (SQLite: the write
    # lock keeps them as read).
    COMPLETE_MANY: ClassVar[str]
    FAIL_RUNNING: ClassVar[str]
    EXPIRE_RUNNING: ClassVar[str]
    OVERDUE: ClassVar[str]
    # jobs: producer and admin actions
    CANCEL_PENDING: ClassVar[str]
    RETRY_FINISHED: ClassVar[str]
    # Cancelling RUNNING jobs (API.md section 12, cancel_requests.py): REQUEST_CANCEL stamps
    # `cancel_requested_at` on job `id` if it is RUNNING with no request yet, and brings its
    # `timeout_at` forward to `deadline` (microseconds) unless it is sooner already, so that
    # the timeout sweep (OVERDUE) ends it when the grace is up; the row back.
    # REQUEST_CANCEL_IDS does the same for the jobs `ids` (a JSON array), their rows back.
    REQUEST_CANCEL: ClassVar[str]
    REQUEST_CANCEL_IDS: ClassVar[str]
    # Steering (API.md section 12; rescheduling.py of each database). EXPIRE_DUE: up to
    # EXPIRE_BATCH PENDING jobs whose expires_at is not after `now` CANCELLED with error
    # EXPIRED_ERROR, found through ix_jobs_expiry (PostgreSQL: skipping those locked), the
    # rows returned; NEXT_EXPIRY: the earliest expires_at of a PENDING job (NULL: none).
    # SNOOZE_RUNNING: the RUNNING job `id` at `attempt` back to PENDING at `run_at`
    # (`delayed`), worker and lease cleared, snooze_count + 1. UPDATE_PENDING: the PENDING
    # job `id`'s priority, max_retries, run_at, delayed, expires_at and enqueued_as set.
    EXPIRE_DUE: ClassVar[str]
    NEXT_EXPIRY: ClassVar[str]
    SNOOZE_RUNNING: ClassVar[str]
    UPDATE_PENDING: ClassVar[str]
    # Pruning: PRUNABLE reads (and on PostgreSQL locks) the ids of up to PRUNE_BATCH jobs
    # finished before `cutoff` that nothing waits for; PRUNE deletes those of `ids` that
    # still nothing waits for, returning (id, type, status, created_by, worker_id).
    PRUNABLE: ClassVar[str]
    PRUNE: ClassVar[str]
    # jobs: reads
    # `next_due(n)`: the earliest run_at of a delayed job of n types (maybe already past).
    next_due: ClassVar[Callable[[int], str]]
    # `oldest_due(n)`: (type, run_at) rows, each type's earliest claimable job of n types
    # (ready, or delayed and due: up to two rows per type, none for a type without one);
    # `oldest_due_of(n)` the same among those created by `created_by`.
    oldest_due: ClassVar[Callable[[int], str]]
    oldest_due_of: ClassVar[Callable[[int], str]]
    # The same through the creator's own jobs (`types`: a JSON list of the types counted).
    OLDEST_DUE_AMONG_OWN: ClassVar[str]
    # Bulk actions (operations/bulk.py): `match_jobs(walk, by_creator, job_type, key, before,
    # unrequested)` passes at most `scan` rows of one `status`'s walk (BulkWalk) after id
    # `after`, in id order, and reads (id, status, worker_id) of the first `limit` that match
    # (`unrequested`: only jobs with no cancel request); and one row (id, NULL, NULL) when the
    # walk goes on: the id of the last row it may pass, where the next chunk starts.
    # BULK_STATES: (id, status, worker_id) of the jobs `ids` that a chunk is about to change,
    # locked (PostgreSQL); *_IDS change them.
    match_jobs: ClassVar[Callable[[BulkWalk, bool, bool, bool, bool, bool], str]]
    # Only where `plans_by_statistics`: run in a read's transaction before match_jobs,
    # scope_page and list_jobs, so that their walks go in index order and stop at their LIMIT
    # (see postgres/statements/reads.py).
    WALK_IN_INDEX_ORDER: ClassVar[str]
    BULK_STATES: ClassVar[str]
    CANCEL_IDS: ClassVar[str]
    RETRY_IDS: ClassVar[str]
    # `list_jobs(by_creator, by_worker, statuses, job_type, after)`: `jobs(...)` through the
    # filter's index (`statuses`: each one's part, merged; `type`), or the primary key,
    # testing the caller (`name`).
    list_jobs: ClassVar[Callable[[bool, bool, tuple[str, ...], bool, bool], str]]
    # `scope_page(by_worker, statuses, job_type)`: `jobs(...)` of a caller who sees its own
    # jobs, through its own index (ix_jobs_creator_status, or ix_jobs_worker_status): the
    # first `limit` of `name`'s jobs below id `after` (LAST_ID: from the newest) in each of
    # `statuses` (status values, in the text), of `type` where `job_type`, newest first.
    scope_page: ClassVar[Callable[[bool, tuple[str, ...], bool], str]]
    # job_events
    INSERT_EVENT: ClassVar[str]
    DELETE_EVENTS_OF: ClassVar[str]
    MAX_EVENT_ID: ClassVar[str]
    # Only where `concurrent_writes` (event ids may commit out of order): the read's
    # snapshot's oldest transaction still running and the next transaction id (xmin, next).
    # An event id not seen in a snapshot belongs to a transaction below that next id, or will
    # never commit; once a later snapshot's xmin has passed it, a read of it settles it for
    # good.
    EVENT_HORIZON: ClassVar[str]
    EVENTS_WITH_IDS: ClassVar[str]
    EVENTS_AFTER: ClassVar[str]
    EVENTS_OF_JOBS: ClassVar[str]
    # Progress and attempts (API.md section 12: operations/progress.py, attempts.py).
    # REPORT_PROGRESS stores a report (`progress`, `message`, `at`) on job `id` at `attempt`:
    # RUNNING and held by `worker`, or with `late` whatever its state (the attempt ended
    # since, and no claim came after it). It extends a RUNNING job's lease to at least
    # `lease`, and returns the row (none when nothing matched). ATTEMPT_EVENTS_OF_JOBS:
    # (job_id, kind, at, attempt, worker_id, error) of the newest `limit` events that carry
    # an attempt of each of the jobs `ids`, by job and oldest first.
    REPORT_PROGRESS: ClassVar[str]
    ATTEMPT_EVENTS_OF_JOBS: ClassVar[str]
    # job_counts and job_minutes
    ADD_TO_COUNT: ClassVar[str]
    ADD_TO_MINUTE: ClassVar[str]
    COUNTS_OF_SCOPES: ClassVar[str]
    PENDING_TYPES: ClassVar[str]
    MINUTES_OF_SCOPES: ClassVar[str]
    PRUNE_MINUTES: ClassVar[str]
    # type_controls and rate_claims (flow control)
    TYPE_CONTROLS: ClassVar[str]
    # Only where `concurrent_writes`: the lock every server's controlled claims take in turn
    # (operations/flow.py), answering the clock once it is held.
    LOCK_CONTROLLED_CLAIMS: ClassVar[str]
    RUNNING_PER_KEY: ClassVar[str]
    # A per-key type's ready keyed jobs in claim order, those of the `full` keys (a JSON list)
    # left out, at most `walk` of them; and the head (first in claim order) of each key with
    # ready jobs but the full ones, one index seek per key.
    KEYED_WALK: ClassVar[str]
    KEYED_HEADS: ClassVar[str]
    RATE_WINDOW: ClassVar[str]
    FORGET_RATE_CLAIMS: ClassVar[str]
    INSERT_RATE_CLAIM: ClassVar[str]
    # PUT_TYPE_CONTROL (put_type_control): insert a type's row or change the columns whose
    # TYPE_CONTROL_FLAGS are set, in one statement; the row as TYPE_CONTROLS reads it.
    PUT_TYPE_CONTROL: ClassVar[str]
    # `jobs(scheduleName:)` of a worker: `held_schedule_jobs(by_worker, count)` reads the jobs
    # of `schedule` that `worker` holds (of `status` and `type` where not NULL), newest first
    # below id `after` (`count`: how many), walking ix_jobs_worker_status (`by_worker`: each
    # status's part, merged) or ix_jobs_schedule. Other callers read a schedule's jobs as its
    # creator's (operations/reads.py).
    held_schedule_jobs: ClassVar[Callable[[bool, bool], str]]
    # job_dependencies (operations/dependencies.py). MARK_DEPENDED_ON: has_dependents at least
    # 1 on `ids`, their (id, status, created_by, worker_id) back, the rows locked against a
    # concurrent finish.
    MARK_DEPENDED_ON: ClassVar[str]
    INSERT_DEPENDENCY: ClassVar[str]
    DEPENDENCIES_OF_JOBS: ClassVar[str]
    # Settling finished jobs' dependents (operations/settlements.py). NEXT_EDGES: (depends_on,
    # job_id, spared_by) of the first `limit` edges to the jobs `ids` whose job_id is in
    # (`passed`, `reaches`], in that order. RELEASE_NEXT: the PENDING jobs of those edges that
    # wait count one dependency done per edge; those at 0 become ready (or delayed). It returns
    # (type, delayed) of each; where `release_returns_edges` (PostgreSQL), NEXT_EDGES's rows
    # too: rows (depends_on, job_id, spared_by, NULL, NULL) of the edges, then (NULL, NULL,
    # NULL, type, delayed) of the jobs released. CANCEL_DEPENDENTS: the PENDING jobs `ids`
    # CANCELLED with `error`, but those whose edge to one of `parents` spares them (spared_by
    # at least `settlement`).
    NEXT_EDGES: ClassVar[str]
    RELEASE_NEXT: ClassVar[str]
    CANCEL_DEPENDENTS: ClassVar[str]
    # dependency_settlements: the highest job id there is (a settlement's `reaches`); the
    # jobs among `ids` that have a settlement; INSERT, PASS (to `passed`), DELETE (`ids`);
    # MARK_SETTLING: has_dependents = 2 on `ids` (a settlement of theirs may be under way).
    # SETTLEMENTS_DUE: (id, job_id, error, passed, reaches) of the first `limit`, each its
    # job's oldest, locked and skipping those locked (PostgreSQL). ANY_SETTLEMENT: a row if
    # there is one.
    HIGHEST_JOB_ID: ClassVar[str]
    ANY_SETTLEMENT: ClassVar[str]
    SETTLING_JOBS: ClassVar[str]
    INSERT_SETTLEMENT: ClassVar[str]
    PASS_SETTLEMENT: ClassVar[str]
    DELETE_SETTLEMENTS: ClassVar[str]
    MARK_SETTLING: ClassVar[str]
    SETTLEMENTS_DUE: ClassVar[str]
    # Retrying the jobs `ids` (dependencies.restore_waiting): the ids of their dependencies not
    # COMPLETED, locked (PostgreSQL: FOR SHARE); the settlements of their dependencies
    # (job_id, error, passed, reaches, id), locked likewise; WAIT_AGAIN: the PENDING jobs
    # `ids` wait for `waiting` dependencies; SPARE: the edge (`job_id`, `depends_on`) is
    # spared by the settlements up to `settlement`.
    OPEN_DEPENDENCIES: ClassVar[str]
    SETTLEMENTS_OF_DEPENDENCIES: ClassVar[str]
    WAIT_AGAIN: ClassVar[str]
    SPARE: ClassVar[str]
    # A row when job `id` is a dependency of a RUNNING job held by `worker`.
    DEPENDENCY_OF_HELD: ClassVar[str]
    DELETE_DEPENDENCIES_OF: ClassVar[str]
    # schedules and schedule_clock (operations/schedules.py)
    SCHEDULES: ClassVar[str]
    # How many SCHEDULES answers: what `schedules` costs (schema/cost.py).
    SCHEDULE_COUNT: ClassVar[str]
    SCHEDULE_BY_NAME: ClassVar[str]
    PUT_SCHEDULE: ClassVar[str]
    DELETE_SCHEDULE: ClassVar[str]
    SET_SCHEDULE_PAUSED: ClassVar[str]
    DUE_SCHEDULES: ClassVar[str]
    NEXT_SCHEDULE_AT: ClassVar[str]
    SCHEDULE_FIRED: ClassVar[str]
    # How many schedules are stopped because they no longer parse (schedules.fire_due):
    # running (not paused) but with no next tick.
    BROKEN_SCHEDULES: ClassVar[str]
    # (created_by, idempotency_key) of the `pairs` (a JSON list of both) that exist.
    EXISTING_KEYS: ClassVar[str]
    # (id, status) of the jobs `ids`.
    JOB_STATES: ClassVar[str]
    SCHEDULE_CLOCK: ClassVar[str]
    LOCK_SCHEDULE_CLOCK: ClassVar[str]
    MARK_SCHEDULE_CLOCK: ClassVar[str]
    # api_keys and key_state: every request's key checks. KEY_GENERATION: (generation,
    # types_generation), the second moved by every change of job_types.
    ACTIVE_KEY: ClassVar[str]
    KEY_IS_ACTIVE: ClassVar[str]
    KEY_GENERATION: ClassVar[str]
    # job_types (types added at runtime, job_types.py): JOB_TYPE_NAMES every name;
    # INSERT_JOB_TYPE a row for `name` (`added_by`, `now`) unless there is one, returning it when
    # new; DELETE_JOB_TYPE `name`'s row, returning it when there was one.
    JOB_TYPE_NAMES: ClassVar[str]
    INSERT_JOB_TYPE: ClassVar[str]
    DELETE_JOB_TYPE: ClassVar[str]
    PING: ClassVar[str]

    def __init_subclass__(cls, part: bool = False, **kwargs: Any) -> None:
        """`part`: the statements of one concern, which the database's class gathers (and is
        checked with)."""
        super().__init_subclass__(**kwargs)
        if part:
            return
        declared = set(statement_names())
        own = [vars(klass) for klass in cls.__mro__ if not issubclass(Statements, klass)]
        defined = {name for names in own for name in names if name.isupper() or name in declared}
        inherited = {name for name in declared if hasattr(cls, name)}
        missing = sorted(declared - inherited - set(ONLY_WHERE))
        unknown = sorted(name for name in defined - declared if not name.startswith("_"))
        if missing or unknown:
            raise TypeError(f"{cls.__name__}: missing statements {missing}, undeclared {unknown}")


def per_type_params(
    types: Sequence[str], quotas: Sequence[int] | None = None, **more: Sequence[Any]
) -> dict[str, Any]:
    """The parameters of a per-type statement, for either database: each list both as an
    array (`types`, `quotas`, `keys`...: PostgreSQL) and item by item (`type0`...: SQLite)."""
    lists: dict[str, Sequence[Any]] = {"type": types, **more}
    if quotas is not None:
        lists["quota"] = quotas
    params: dict[str, Any] = {}
    for name, values in lists.items():
        params[f"{name}s"] = list(values)
        for i, value in enumerate(values):
            params[f"{name}{i}"] = value
    return params


def statement_names() -> tuple[str, ...]:
    """Every name a database's statements class must define."""
    return tuple(Statements.__annotations__)
