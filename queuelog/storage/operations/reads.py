"""The reads of jobs, their events and the queue's stats, for a caller's scope.

Pages of jobs and the oldest pending job ask read_plans.py which index to walk, from the
counters, and run that plan. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from queuelog import jsonutil
from queuelog.model import EventKind, Job, JobScope, JobStatus, MinuteCount, QueueStats, RecordedEvent
from queuelog.storage.operations import dependencies, flow, schedules
from queuelog.storage.operations.read_plans import (
    OldestPending,
    Walk,
    plan_held_of_creator,
    plan_list,
    plan_oldest_pending,
)
from queuelog.storage.schema import counters
from queuelog.storage.schema.codec import STATUS_BY_VALUE, decode_job, micros_to_datetime
from queuelog.storage.schema.counters import MICROS_PER_MINUTE
from queuelog.storage.schema.types import ids_json, to_micros
from queuelog.storage.statements import LAST_ID, PENDING, STATUS_TEXT, per_type_params
from queuelog.storage.transaction import Connection, WriteTx


def pending_types(conn: Connection) -> list[str]:
    """The types that have PENDING jobs, by the counters: what a claim of any type reads."""
    return sorted(job_type for (job_type,) in conn.execute(conn.sql.PENDING_TYPES).fetchall())


def fetch_job(conn: WriteTx | Connection, job_id: int) -> Job | None:
    """The job with this id, whoever may see it."""
    row = conn.execute(conn.sql.JOB_BY_ID, {"id": job_id}).fetchone()
    return decode_job(row) if row is not None else None


def get_job(conn: Connection, job_id: int, scope: JobScope) -> Job | None:
    """The job, if the caller may see it: its scope's, or (a worker) a job that a job it
    holds depends on, so that one step can read the result of the one before."""
    job = fetch_job(conn, job_id)
    if job is None:
        return None
    if scope.allows(job):
        return job
    if scope.worker_id is not None and job.has_dependents:
        return job if dependencies.held_dependency(conn, job_id, scope.worker_id) else None
    return None


def get_jobs(conn: Connection, job_ids: Sequence[int]) -> list[Job]:
    rows = conn.execute(conn.sql.JOBS_BY_IDS, {"ids": ids_json(job_ids)}).fetchall()
    return [decode_job(row) for row in rows]


def last_event_id(conn: Connection) -> int:
    row = conn.execute(conn.sql.MAX_EVENT_ID).fetchone()
    return row[0] if row is not None and row[0] is not None else 0


# The read's snapshot's (xmin, next transaction id) where event ids may commit out of order
# (postgres/statements/server.py SNAPSHOT_HORIZON).
Horizon = tuple[int, int]


def event_horizon(conn: Connection) -> Horizon | None:
    if not conn.can.concurrent_writes:
        return None  # ids commit in order
    xmin, next_xid = conn.execute(conn.sql.EVENT_HORIZON).fetchone()
    return int(xmin), int(next_xid)


def events_since(
    conn: Connection, after_id: int, missing: Sequence[int]
) -> tuple[list[tuple[int, int, str, str]], list[tuple[int, int, str, str]], Horizon | None]:
    """In one snapshot: the events after `after_id` (events_after), those of the `missing`
    ids that are there now (events_with_ids), and the snapshot's horizon (event_horizon)."""
    horizon = event_horizon(conn)
    late = events_with_ids(conn, missing) if missing else []
    return events_after(conn, after_id), late, horizon


def events_after(conn: Connection, after_id: int) -> list[tuple[int, int, str, str]]:
    """(id, job_id, kind, status) of the events after this id, oldest first (EVENT_TAIL_BATCH at most)."""
    return [tuple(row) for row in conn.execute(conn.sql.EVENTS_AFTER, {"after": after_id}).fetchall()]


def key_is_active(conn: Connection, name: str) -> bool:
    return conn.execute(conn.sql.KEY_IS_ACTIVE, {"name": name}).fetchone() is not None


def events_of_jobs(conn: Connection, job_ids: Sequence[int], last: int) -> dict[int, list[RecordedEvent]]:
    """Each job's newest `last` events, oldest first, in one read (jobs without any: absent)."""
    rows = conn.execute(conn.sql.EVENTS_OF_JOBS, {"ids": ids_json(job_ids), "limit": last}).fetchall()
    events: dict[int, list[RecordedEvent]] = {}
    for job_id, kind, status, at in rows:
        event = RecordedEvent(EventKind(kind), STATUS_BY_VALUE[status], micros_to_datetime(at))
        events.setdefault(job_id, []).append(event)
    return events


def events_with_ids(conn: Connection, event_ids: Sequence[int]) -> list[tuple[int, int, str, str]]:
    return [
        tuple(row) for row in conn.execute(conn.sql.EVENTS_WITH_IDS, {"ids": ids_json(event_ids)}).fetchall()
    ]


def counts_and_everyones(
    conn: Connection, scope: JobScope
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """type -> status -> n, for what the scope sees and for every job, in one read."""
    terms = counters.scope_terms(scope)
    if not terms:
        return {}, {}
    everyone = [(counters.ALL, "", 1)]
    wanted = terms if scope.everything else [*terms, *everyone]
    rows = conn.execute(conn.sql.COUNTS_OF_SCOPES, {"scopes": _scopes_json(wanted)}).fetchall()
    mine = counters.by_type(rows, terms)
    return mine, mine if scope.everything else counters.by_type(rows, everyone)


def _scopes_json(terms: list[tuple[str, str, int]]) -> str:
    """The (scope, name) pairs of counter terms, as the JSON array the *_OF_SCOPES reads take."""
    return jsonutil.dumps([[scope, name] for scope, name, _ in terms]).decode()


def walk_in_index_order(conn: Connection) -> None:
    """Where the database has one (PostgreSQL), set the read's transaction to walk indexes
    in their order and stop at a LIMIT (Statements.WALK_IN_INDEX_ORDER)."""
    if conn.can.plans_by_statistics:
        conn.execute(conn.sql.WALK_IN_INDEX_ORDER).fetchall()


def list_jobs(
    conn: Connection,
    scope: JobScope,
    status: JobStatus | None,
    job_type: str | None,
    first: int,
    after_id: int | None,
) -> tuple[list[Job], bool, int]:
    """Newest first (id DESC). Returns the page, whether more follow, and the total count.

    The counters give the total exactly, and choose the walk (read_plans.plan_list): no
    matching job, no read at all.
    """
    if not scope.everything and scope.created_by is None and scope.worker_id is None:
        return [], False, 0
    mine, everyones = counts_and_everyones(conn, scope)
    by_creator = not scope.everything and scope.created_by is not None
    by_worker = not scope.everything and scope.worker_id is not None
    plan = plan_list(mine, everyones, by_creator, by_worker, status, job_type, conn.can.type_index)
    if plan.walk is Walk.NOTHING:
        return [], False, 0
    params = {
        "name": scope.created_by if by_creator else scope.worker_id,
        "type": job_type,
        "after": after_id if after_id is not None else LAST_ID,
        "limit": first + 1,
    }
    if not (by_creator and by_worker):  # the one page whose plans all sort (an OR of both scopes)
        walk_in_index_order(conn)
    # each status's newest first+1, merged: the page is among them
    statuses = tuple(part.value for part in plan.statuses if part is not None)
    if plan.walk is Walk.SCOPE:
        sql = conn.sql.scope_page(by_worker, statuses, job_type is not None)
    else:
        sql = conn.sql.list_jobs(by_creator, by_worker, statuses, job_type is not None, after_id is not None)
    rows = conn.execute(sql, params).fetchall()
    return [decode_job(r) for r in rows[:first]], len(rows) > first, plan.total


def list_schedule_jobs(
    conn: Connection,
    scope: JobScope,
    schedule_name: str,
    status: JobStatus | None,
    job_type: str | None,
    first: int,
    after_id: int | None,
) -> tuple[list[Job], bool, int]:
    """`jobs(scheduleName:)`: the schedule's jobs the caller may see, newest first.

    They are the jobs of the schedule's own creator (schedules.creator), a name no key can
    have. A caller who sees every job reads them as that creator's jobs (list_jobs: the total
    from the counters, the page by read_plans); a producer sees none and reads nothing; a
    worker sees those it holds, counted through the worker's index or the schedule's,
    whichever the counters say holds fewer rows (read_plans.plan_held_of_creator)."""
    creator = schedules.creator(schedule_name)
    if scope.everything:
        return list_jobs(
            conn, JobScope(everything=False, created_by=creator), status, job_type, first, after_id
        )
    if scope.worker_id is None:
        return [], False, 0
    terms = [(counters.PRODUCER, creator, 1), (counters.WORKER, scope.worker_id, 1)]
    rows = conn.execute(conn.sql.COUNTS_OF_SCOPES, {"scopes": _scopes_json(terms)}).fetchall()
    created, held = (counters.by_type(rows, [term]) for term in terms)
    walk = plan_held_of_creator(created, held, status, job_type)
    if walk is Walk.NOTHING:
        return [], False, 0
    by_worker = walk is Walk.SCOPE
    params = {
        "schedule": schedule_name,
        "worker": scope.worker_id,
        "status": status.value if status is not None else None,
        "type": job_type,
    }
    total = conn.execute(conn.sql.held_schedule_jobs(by_worker, True), params).fetchone()[0]
    if not total:
        return [], False, 0
    page = {**params, "after": after_id if after_id is not None else LAST_ID, "limit": first + 1}
    walk_in_index_order(conn)
    found = conn.execute(conn.sql.held_schedule_jobs(by_worker, False), page).fetchall()
    return [decode_job(r) for r in found[:first]], len(found) > first, total


def finished_per_minute(conn: Connection, now: datetime, scope: JobScope, minutes: int) -> list[MinuteCount]:
    """The last `minutes` minutes, oldest first, the current one included, each with the
    jobs of the scope that became COMPLETED or FAILED in it (zeros where none did)."""
    current = to_micros(now) // MICROS_PER_MINUTE
    since = current - minutes + 1
    terms = counters.scope_terms(scope)
    found: dict[int, dict[str, int]] = {}
    if terms:
        rows = conn.execute(
            conn.sql.MINUTES_OF_SCOPES, {"since": since, "scopes": _scopes_json(terms)}
        ).fetchall()
        found = counters.by_minute(rows, terms)
    completed, failed = STATUS_TEXT[JobStatus.COMPLETED], STATUS_TEXT[JobStatus.FAILED]
    return [
        MinuteCount(
            micros_to_datetime(minute * MICROS_PER_MINUTE),
            found.get(minute, {}).get(completed, 0),
            found.get(minute, {}).get(failed, 0),
        )
        for minute in range(since, current + 1)
    ]


def queue_stats(conn: Connection, now: datetime, scope: JobScope) -> QueueStats:
    per_type, everyones = counts_and_everyones(conn, scope)
    totals: dict[str, int] = {}
    for per_status in per_type.values():
        for status, n in per_status.items():
            totals[status] = totals.get(status, 0) + n
    oldest, oldest_by_type = _oldest_pending_seconds(conn, now, scope, per_type, everyones)
    return QueueStats(
        counts=counters.status_counts(totals),
        by_type={t: counters.status_counts(c) for t, c in sorted(per_type.items())},
        oldest_pending_seconds=oldest,
        oldest_pending_by_type=oldest_by_type,
    )


def _oldest_pending_seconds(
    conn: Connection,
    now: datetime,
    scope: JobScope,
    counts: dict[str, dict[str, int]],
    everyones: dict[str, dict[str, int]],
) -> tuple[float | None, dict[str, float]]:
    """Queue lag: how long the longest-waiting claimable job has been due (now - run_at),
    read from each type's head in ix_jobs_lag and ix_jobs_delayed, never by a walk. Only
    types with PENDING jobs in the scope (the counters say which) that are not paused are
    read: a paused type's jobs are not claimable. Also each type's own lag (types without a
    claimable job left out), when the read goes type by type (always for every job)."""
    plan = plan_oldest_pending(scope.everything, scope.created_by is not None, counts, everyones)
    if plan is OldestPending.NOTHING:
        return None, {}
    controls = flow.read_controls(conn)
    types = sorted(
        t
        for t, per_status in counts.items()
        if per_status.get(PENDING, 0) > 0 and not (t in controls and controls[t].paused_at(now))
    )
    if not types:
        return None, {}
    params = per_type_params(types)
    params.update(now=to_micros(now), created_by=scope.created_by)
    if plan is OldestPending.AMONG_OWN:
        params["types"] = jsonutil.dumps(types).decode()
        row = conn.execute(conn.sql.OLDEST_DUE_AMONG_OWN, params).fetchone()
        oldest = micros_to_datetime(row[0]) if row is not None else None
        return (None if oldest is None else _lag(now, oldest)), {}
    if plan is OldestPending.EVERY_PENDING:
        sql = conn.sql.oldest_due(len(types))
    else:
        sql = conn.sql.oldest_due_of(len(types))
    heads = _earliest_by_type(conn.execute(sql, params).fetchall())
    by_type = {job_type: _lag(now, due) for job_type, due in sorted(heads.items())}
    return max(by_type.values(), default=None), by_type


def _earliest_by_type(rows: Sequence[Any]) -> dict[str, datetime]:
    """oldest_due's (type, run_at) rows: each type's earliest."""
    earliest: dict[str, datetime] = {}
    for job_type, run_at in rows:
        due = micros_to_datetime(run_at)
        if due is not None and (job_type not in earliest or due < earliest[job_type]):
            earliest[job_type] = due
    return earliest


def _lag(now: datetime, due: datetime) -> float:
    return max(0.0, (now - due).total_seconds())


def next_due_at(
    conn: Connection, types: Sequence[str] | None, now: datetime | None = None
) -> datetime | None:
    """When the earliest delayed job of these types (None: any) becomes due; may be past.
    With `now`, a ready job (another process's enqueue, say) counts too, as due already."""
    if types is None:
        types = pending_types(conn)
    if not types:
        return None
    params = per_type_params(types)
    row = conn.execute(conn.sql.next_due(len(types)), params).fetchone()
    due = micros_to_datetime(row[0]) if row is not None else None
    if now is not None:
        params.update(now=to_micros(now), created_by=None)
        heads = _earliest_by_type(conn.execute(conn.sql.oldest_due(len(types)), params).fetchall())
        ready_at = min(heads.values(), default=None)
        if ready_at is not None and (due is None or ready_at < due):
            due = ready_at
    return due
