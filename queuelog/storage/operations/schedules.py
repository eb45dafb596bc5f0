"""Cron schedules (API.md section 10): each tick enqueues exactly one job, whichever servers run.

No server is special. Every server's ticker (queuelog/ticker.py) runs `fire_due` when a
schedule is due; the transaction takes the due rows (PostgreSQL: `FOR UPDATE SKIP LOCKED`,
under the schedule clock's row lock; SQLite: under the write lock), enqueues each due tick's
job and moves `next_run_at` past now before it commits. A server that dies mid-way rolls
back and the next one fires the same ticks: none is lost, none doubled. One pass enqueues
at most MAX_TICKS_PER_FIRE ticks of a schedule: a longer backlog (left by a deployment that
ran but could not write for long) moves `next_run_at` only past the last of them, and the
next passes, at once, go on from there. The job's
idempotency key `<name>@<tick>` is the last line of defence, not the mechanism.

Misfire: `schedule_clock.alive_at` says when a ticker last ran anywhere. A tick found more
than MISFIRE_GRACE old is "missed while no server ran" only when no ticker had run for
DOWN_AFTER seconds before this one; then `misfire` decides (SKIP: none, RUN_ONCE: one job for
the newest, found by walking the cron backwards from the cutoff: never tick by tick, however
long the downtime). A deployment that was up but slow still enqueues every tick.

A due schedule that no longer parses (its time zone gone after a tzdata upgrade, say) is
stopped: it gets no next tick, so it is neither due nor read again, and the others fire as
usual. `fire_due` names it once, in the transaction that stopped it; BROKEN_SCHEDULES counts
the stopped ones. Put again (or paused and resumed once it parses), it runs again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from queuelog import cron, jsonutil
from queuelog.errors import Conflict, echo
from queuelog.model import (
    EventKind,
    Job,
    JobStatus,
    Misfire,
    NewJob,
    Overlap,
    Priority,
    Schedule,
    ScheduleSpec,
)
from queuelog.storage.schema.codec import micros_to_datetime
from queuelog.storage.schema.new_job import new_job, row_values
from queuelog.storage.schema.types import compact_json, ids_json, to_micros
from queuelog.storage.transaction import Connection, WriteTx

DOWN_AFTER = timedelta(seconds=3)  # no ticker ran for this long: the deployment was down
MISFIRE_GRACE = timedelta(seconds=1)  # a tick older than this when fired was missed (if down)
MAX_TICKS_PER_FIRE = 1000  # ticks of one schedule enqueued in one pass (the rest: the next pass)
OPEN_STATUSES = (JobStatus.PENDING.value, JobStatus.RUNNING.value)


@dataclass
class Fired:
    """What one `fire_due` did: how many jobs it enqueued, and the schedules it stopped
    because they no longer parse (name, why)."""

    enqueued: int = 0
    stopped: list[tuple[str, str]] = field(default_factory=list)


def creator(name: str) -> str:
    """The `created_by` of a schedule's jobs: no API key can have this name (keys.py), so
    producers never see them; ADMIN and VIEWER see every job."""
    return f"schedule:{name}"


def idempotency_key(name: str, tick: datetime) -> str:
    return f"{name}@{tick.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def decode(row: Sequence[Any]) -> Schedule:
    (name, job_type, expression, zone, payload, priority, max_retries, misfire, overlap, paused) = row[:10]
    next_run_at, last_run_at, last_job_id, created_at, updated_at = row[10:]
    return Schedule(
        name=name,
        type=job_type,
        cron=expression,
        timezone=zone,
        payload=jsonutil.loads(payload) if isinstance(payload, str | bytes) else payload,
        priority=Priority(priority),
        max_retries=max_retries,
        misfire=Misfire(misfire),
        overlap=Overlap(overlap),
        paused=bool(paused),
        next_run_at=micros_to_datetime(next_run_at),
        last_run_at=micros_to_datetime(last_run_at),
        last_job_id=last_job_id,
        created_at=micros_to_datetime(created_at),
        updated_at=micros_to_datetime(updated_at),
    )


def list_all(conn: Connection) -> list[Schedule]:
    return [decode(row) for row in conn.execute(conn.sql.SCHEDULES).fetchall()]


def by_name(conn: Connection, name: str) -> Schedule | None:
    row = conn.execute(conn.sql.SCHEDULE_BY_NAME, {"name": name}).fetchone()
    return None if row is None else decode(row)


def count(conn: Connection) -> int:
    row = conn.execute(conn.sql.SCHEDULE_COUNT).fetchone()
    return int(row[0]) if row is not None else 0


def put(tx: WriteTx, spec: ScheduleSpec) -> Schedule:
    """Create or replace; a replaced schedule keeps its pause and its last run, and its next
    tick is the first after now by the new expression."""
    next_tick = cron.parse(spec.cron, spec.timezone).next_after(tx.now)
    params = {
        "name": spec.name,
        "type": spec.type,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "payload": compact_json(spec.payload),
        "priority": spec.priority.value,
        "max_retries": spec.max_retries,
        "misfire": spec.misfire.value,
        "overlap": spec.overlap.value,
        "next_run_at": to_micros(next_tick),
        "now": tx.now_us,
    }
    return decode(tx.execute(tx.sql.PUT_SCHEDULE, params).fetchone())


def delete(tx: WriteTx, name: str) -> bool:
    return tx.execute(tx.sql.DELETE_SCHEDULE, {"name": name}).rowcount > 0


def set_paused(tx: WriteTx, name: str, paused: bool) -> Schedule | None:
    """Pause (no next tick) or resume (the next tick after now: the ticks missed while
    paused are not enqueued); None if there is no such schedule."""
    row = tx.execute(tx.sql.SCHEDULE_BY_NAME, {"name": name}).fetchone()
    if row is None:
        return None
    schedule = decode(row)
    next_tick = None
    if not paused:
        try:
            next_tick = cron.parse(schedule.cron, schedule.timezone).next_after(tx.now)
        except cron.CronError as error:
            raise Conflict(
                f"schedule {echo(name)} no longer parses ({error}):"
                " put it again with a valid cron and time zone"
            ) from None
    params = {
        "name": name,
        "paused": int(paused),
        "next_run_at": None if next_tick is None else to_micros(next_tick),
        "now": tx.now_us,
    }
    return decode(tx.execute(tx.sql.SET_SCHEDULE_PAUSED, params).fetchone())


def broken_count(conn: Connection) -> int:
    """How many schedules are stopped because they no longer parse."""
    row = conn.execute(conn.sql.BROKEN_SCHEDULES).fetchone()
    return int(row[0]) if row is not None else 0


def next_due(conn: Connection) -> datetime | None:
    """When the next tick of any running schedule is due."""
    row = conn.execute(conn.sql.NEXT_SCHEDULE_AT).fetchone()
    return micros_to_datetime(row[0]) if row is not None else None


def mark_alive(tx: WriteTx) -> None:
    """A ticker runs: ticks found late from now on were not missed while no server ran."""
    tx.execute(tx.sql.MARK_SCHEDULE_CLOCK, {"now": tx.now_us})


def fire_due(tx: WriteTx, running_since: datetime | None = None) -> Fired:
    """Enqueue the jobs of every due tick, and stop the due schedules that no longer parse.
    `running_since`:
    since when this server's ticker has run (no tick after it was missed while no server
    ran, however long the database stalled since).

    A fixed number of statements however many schedules are due (1,000 every-minute
    schedules fire together): the due rows, their last jobs' states, the tick jobs that
    exist already, one insert, one executemany moving the schedules on."""
    row = tx.execute(tx.sql.LOCK_SCHEDULE_CLOCK).fetchone()
    alive_at = micros_to_datetime(row[0]) if row is not None else None
    mark_alive(tx)
    # Never marked (a database no ticker has fired on yet, or one `queuelog copy-database`
    # just filled): nothing says a server ran, so ticks found late were missed.
    was_down = alive_at is None or tx.now - alive_at > DOWN_AFTER
    cutoff = tx.now - MISFIRE_GRACE  # a tick before this was missed, if the deployment was down
    if running_since is not None:
        cutoff = min(cutoff, running_since)
    due = [decode(r) for r in tx.execute(tx.sql.DUE_SCHEDULES, {"now": tx.now_us}).fetchall()]
    if not due:
        return Fired()
    still_open = _open_last_jobs(tx, due)
    fired: list[tuple[Schedule, cron.Cron, list[datetime], datetime]] = []
    outcome = Fired()
    for schedule in due:
        assert schedule.next_run_at is not None  # DUE_SCHEDULES reads running schedules only
        try:
            expression = cron.parse(schedule.cron, schedule.timezone)
        except cron.CronError as error:
            outcome.stopped.append((schedule.name, str(error)))
            continue
        ticks = _due_ticks(
            expression, schedule.next_run_at, tx.now, cutoff if was_down else None, schedule.misfire
        )
        # At the bound, the rest of the backlog is the next pass's: from the tick after these.
        resume_after = ticks[-1] if len(ticks) >= MAX_TICKS_PER_FIRE else tx.now
        if schedule.overlap is Overlap.SKIP:
            # The first tick's job is PENDING when the next one comes: one job at most.
            ticks = [] if schedule.last_job_id in still_open else ticks[:1]
            resume_after = tx.now
        fired.append((schedule, expression, ticks, resume_after))
    newest, outcome.enqueued = _enqueue_ticks(
        tx, [(schedule, tick) for schedule, _, ticks, _ in fired for tick in ticks]
    )
    moves: list[dict[str, object]] = [
        {"name": name, "next_run_at": None, "last_run_at": None, "last_job_id": None, "now": tx.now_us}
        for name, _ in outcome.stopped
    ]
    for schedule, expression, _, resume_after in fired:
        last = newest.get(schedule.name)
        moves.append(
            {
                "name": schedule.name,
                "next_run_at": to_micros(expression.next_after(resume_after)),
                "last_run_at": None if last is None else to_micros(last[0]),
                "last_job_id": None if last is None else last[1],
                "now": tx.now_us,
            }
        )
    tx.executemany(tx.sql.SCHEDULE_FIRED, moves)
    return outcome


def _due_ticks(
    expression: cron.Cron, first: datetime, now: datetime, cutoff: datetime | None, misfire: Misfire
) -> list[datetime]:
    """The ticks to enqueue, oldest first, at most MAX_TICKS_PER_FIRE, of a schedule whose
    next tick was `first`; `cutoff`: the ticks before it were missed while no server ran
    (None: none was)."""
    if cutoff is None or first >= cutoff:
        return [first, *expression.ticks_between(first, now, MAX_TICKS_PER_FIRE - 1)]
    # Missed while no server ran: every tick from `first` to the cutoff, maybe millions. The
    # ticks still in time and the newest missed one are looked up from the end, never by
    # walking from `first`.
    if misfire is Misfire.SKIP:
        return expression.ticks_between(cutoff - _MICROSECOND, now, MAX_TICKS_PER_FIRE)
    # `first` is a tick before the cutoff, so the newest missed one is `first` or later;
    # unless the ticks moved under it (a tzdata upgrade), then `first` stands for it.
    newest = expression.previous(cutoff)
    newest_missed = first if newest is None or newest < first else newest
    in_time = expression.ticks_between(cutoff - _MICROSECOND, now, MAX_TICKS_PER_FIRE - 1)
    return [newest_missed, *in_time]


_MICROSECOND = timedelta(microseconds=1)


def _open_last_jobs(tx: WriteTx, due: Sequence[Schedule]) -> set[int]:
    """The last jobs of the overlap-SKIP schedules that are still PENDING or RUNNING."""
    ids = [s.last_job_id for s in due if s.overlap is Overlap.SKIP and s.last_job_id is not None]
    if not ids:
        return set()
    rows = tx.execute(tx.sql.JOB_STATES, {"ids": ids_json(ids)}).fetchall()
    return {job_id for job_id, status in rows if status in OPEN_STATUSES}


def _enqueue_ticks(
    tx: WriteTx, ticks: Sequence[tuple[Schedule, datetime]]
) -> tuple[dict[str, tuple[datetime, int]], int]:
    """Each tick's job, in one insert; a tick whose job exists already (the idempotency key's
    guard: never, while the schedule rows are locked) is left out. Returns each schedule's
    newest tick that got a job with that job's id, and how many jobs were enqueued."""
    if not ticks:
        return {}, 0
    items = [(schedule, tick, _tick_job(schedule, tick)) for schedule, tick in ticks]
    pairs = [[creator(s.name), item.idempotency_key] for s, _, item in items]
    found = tx.execute(tx.sql.EXISTING_KEYS, {"pairs": jsonutil.dumps(pairs).decode()}).fetchall()
    existing = {(created_by, key) for created_by, key in found}
    new = [(s, t, item) for s, t, item in items if (creator(s.name), item.idempotency_key) not in existing]
    if not new:
        return {}, 0
    rows = [row_values(item, creator(s.name), tx.now_us) for s, _, item in new]
    ids = tx.connection.insert_ids(tx.sql.INSERT_JOB, rows)
    newest: dict[str, tuple[datetime, int]] = {}
    for (schedule, tick, item), job_id in zip(new, ids, strict=True):
        tx.record(EventKind.ENQUEUED, None, new_job(job_id, item, creator(schedule.name), tx.now))
        newest[schedule.name] = (tick, job_id)  # ticks come oldest first
    return newest, len(new)


def _tick_job(schedule: Schedule, tick: datetime) -> NewJob:
    return _schedule_job(schedule, idempotency_key(schedule.name, tick))


def _schedule_job(schedule: Schedule, key: str) -> NewJob:
    return NewJob(
        type=schedule.type,
        payload=schedule.payload,
        payload_json=compact_json(schedule.payload),
        priority=schedule.priority,
        max_retries=schedule.max_retries,
        idempotency_key=key,
        run_at=None,
        schedule_name=schedule.name,
    )


# --- run now (API.md section 12) ---------------------------------------------------------


def manual_idempotency_key(name: str) -> str:
    """`<name>@manual-<unique>`: never a tick's key, and never another run's."""
    return f"{name}@manual-{uuid.uuid4().hex}"


def run_now(tx: WriteTx, name: str) -> Job | None:
    """Enqueue the schedule's job now, outside its ticks, paused or not and whatever its
    overlap; None if there is no such schedule. The schedule row is left as it is: its next
    tick, last run and last job (which overlap SKIP looks at) stay those of its ticks."""
    row = tx.execute(tx.sql.SCHEDULE_BY_NAME, {"name": name}).fetchone()
    if row is None:
        return None
    schedule = decode(row)
    item = _schedule_job(schedule, manual_idempotency_key(name))
    (job_id,) = tx.connection.insert_ids(tx.sql.INSERT_JOB, [row_values(item, creator(name), tx.now_us)])
    job = new_job(job_id, item, creator(name), tx.now)
    tx.record(EventKind.ENQUEUED, None, job)
    return job
