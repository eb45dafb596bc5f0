"""The repository: the async interface the rest of queuelog uses to reach the database.

It opens the database its URL names (a `Database`: sqlite/ or postgres/), hands it the
queue's batch steps (operations/batch.py), and runs the operations through its group-commit
writer: enqueue, claims (with flow and controls), running (the holder's reports, expiry),
actions (cancel, retry), bulk, schedules, dependencies and settlements, pruning; and those of
`reads` on a reading connection. Once a write has committed, it hands its events to the
listeners (subscriptions, metrics, the claim wake-up), and through a feed (feeds/) those of
other server processes too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from queuelog.errors import DatabaseUnavailable
from queuelog.model import (
    ALL_JOBS,
    ApiKey,
    BulkOutcome,
    Completion,
    CompletionOutcome,
    EnqueueOutcome,
    EventKind,
    Job,
    JobEdit,
    JobEvent,
    JobFilter,
    JobScope,
    JobStatus,
    MinuteCount,
    NewJob,
    Priority,
    ProgressReport,
    QueueStats,
    RecordedEvent,
    Role,
    Schedule,
    ScheduleSpec,
    TypeControl,
)
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.database import Database
from queuelog.storage.engine import dialect_of, require_postgres_driver
from queuelog.storage.feeds.notify import NotifyFeed
from queuelog.storage.feeds.progress_watch import ProgressWatch
from queuelog.storage.feeds.tail import EventTail
from queuelog.storage.group_commit import OwnEvents, ParkedClaim
from queuelog.storage.operations import (
    actions,
    attempts,
    batch,
    bulk,
    claims,
    controls,
    dependencies,
    enqueue,
    flow,
    job_types,
    pacing,
    progress,
    pruning,
    reads,
    rescheduling,
    running,
    schedules,
    settlements,
)
from queuelog.storage.operations.bulk import Part as BulkPart
from queuelog.storage.operations.pacing import Pacing
from queuelog.storage.operations.schedules import Fired
from queuelog.storage.schema.codec import micros_to_datetime
from queuelog.storage.sqlite.database import SqliteDatabase
from queuelog.storage.statements import EXPIRE_BATCH, PRUNE_BATCH
from queuelog.storage.transaction import WriteTx

EventListener = Callable[[Sequence[JobEvent]], None]


class ClaimAbandoned(Exception):
    """Raised inside a claim to roll it back: the client that asked has gone away."""


class Repository:
    def __init__(self, url: str, policy: RetryPolicy, event_feed: str = "auto") -> None:
        self._db: Database
        self._pacing: Pacing
        if dialect_of(url) == "postgresql":
            require_postgres_driver()
            from queuelog.storage.postgres.database import PostgresDatabase

            self._db = PostgresDatabase(url, self._publish, batch)
            self._pacing = pacing.POSTGRES
        else:
            self._db = SqliteDatabase(url, self._publish, batch)
            self._pacing = pacing.SQLITE
        self._generation = 0
        self._types_generation = 0
        self._delay = policy.retry_delay
        self._listeners: list[EventListener] = []
        self._remote_listeners: list[EventListener] = []
        self._event_feed = event_feed
        self._feed: NotifyFeed | EventTail | None = None
        # The controls the latest claims went by: a claim they bind goes in the controlled
        # lane (group_commit.py). Only a guess at which batch suits it: the claim reads the
        # controls in its transaction all the same.
        self._controls_seen: dict[str, TypeControl] = {}
        # Other servers' progress reports on the jobs this server's subscribers follow.
        self.progress_watch = ProgressWatch(self.get_jobs, self._publish_remote)
        self.add_listener(self.progress_watch.on_events)

    def add_listener(self, listener: EventListener, *, remote: bool = True) -> None:
        """Call `listener` with the events of every commit: this process's, and (`remote`)
        those of other server processes on the same database."""
        self._listeners.append(listener)
        if remote:
            self._remote_listeners.append(listener)

    async def open(self) -> None:
        """Start hearing other server processes' events, as QUEUELOG_EVENT_FEED says:
        `auto` (the default: `notify` on PostgreSQL, `poll` on SQLite), `notify` (PostgreSQL
        LISTEN/NOTIFY), `poll` (read job_events forward: any processes on one SQLite file,
        or PostgreSQL behind PgBouncer in transaction mode) or `local` (hear nobody: one
        process alone on a SQLite file, sure to stay so)."""
        notifies = self._db.can.notifies
        feed = self._event_feed
        if feed == "auto":
            feed = "notify" if notifies else "poll"
        if feed == "notify" and not notifies:
            raise DatabaseUnavailable("QUEUELOG_EVENT_FEED=notify needs PostgreSQL; use poll on SQLite")
        if feed == "notify":
            listener = NotifyFeed(self._db, self._publish_remote, self.refresh_key_generation)
            self._feed = listener
            await asyncio.get_running_loop().run_in_executor(None, listener.wait_listening, 5.0)
        elif feed == "poll":
            own = self._db.own_events = OwnEvents()
            refresh = self.refresh_key_generation
            tail = EventTail(self._db, own, self._publish_remote, refresh, self._db.others_wrote)
            self._feed = tail
            await tail.start()

    async def close(self) -> None:
        await self.progress_watch.close()
        if self._feed is not None:
            await self._feed.close()
        await self._db.close()

    def _publish(self, events: Sequence[JobEvent]) -> None:
        for listener in self._listeners:
            listener(events)

    def _publish_remote(self, events: Sequence[JobEvent]) -> None:
        for listener in self._remote_listeners:
            listener(events)

    # --- jobs ------------------------------------------------------------------------------

    async def enqueue(
        self, items: Sequence[NewJob], created_by: str, scope: JobScope = ALL_JOBS
    ) -> list[EnqueueOutcome]:
        """`scope`: the jobs the caller may see, which are all its items may depend on."""
        return await self._db.write(lambda tx: enqueue.enqueue(tx, items, created_by, scope))

    async def get_job(self, job_id: int, scope: JobScope) -> Job | None:
        return await self._db.read(reads.get_job, job_id, scope)

    async def get_jobs(self, job_ids: Sequence[int]) -> list[Job]:
        """These jobs (those that exist), whoever may see them."""
        return await self._db.read(reads.get_jobs, job_ids)

    async def dependency_ids(self, job_ids: Sequence[int]) -> dict[int, list[int]]:
        return await self._db.read(dependencies.dependency_ids, job_ids)

    async def events_of_jobs(self, job_ids: Sequence[int], last: int) -> dict[int, list[RecordedEvent]]:
        return await self._db.read(reads.events_of_jobs, job_ids, last)

    async def list_jobs(
        self,
        scope: JobScope,
        status: JobStatus | None,
        job_type: str | None,
        first: int,
        after_id: int | None,
        schedule_name: str | None = None,
    ) -> tuple[list[Job], bool, int]:
        if schedule_name is not None:
            return await self._db.read(
                reads.list_schedule_jobs, scope, schedule_name, status, job_type, first, after_id
            )
        return await self._db.read(reads.list_jobs, scope, status, job_type, first, after_id)

    def now(self) -> datetime:
        """The time by the database's clock, the one its writes use (queuelog/clock.py)."""
        return self._db.now()

    async def queue_stats(self, scope: JobScope) -> QueueStats:
        return await self._db.read(reads.queue_stats, self.now(), scope)

    async def finished_per_minute(self, scope: JobScope, minutes: int) -> list[MinuteCount]:
        return await self._db.read(reads.finished_per_minute, self.now(), scope, minutes)

    async def next_due_at(self, types: Sequence[str] | None, ready_too: bool = False) -> datetime | None:
        """When a delayed job of these types becomes due; with `ready_too`, a ready job
        (claimable now) counts as due."""
        return await self._db.read(reads.next_due_at, types, self.now() if ready_too else None)

    async def claim(
        self,
        worker: str,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int,
        wanted: Callable[[], bool] | None = None,
        key_checked: bool = False,
    ) -> claims.Claimed:
        """Claim due jobs: the jobs, and which types a control held back and until when.
        `wanted` is asked inside the transaction, before it commits, and with `key_checked`
        so is the database whether the worker's key is still active (a claim that waited may
        outlive a revoke, made by any process)."""
        claim = self._claim_operation(worker, types, limit, lease_seconds, wanted, key_checked)
        seen = self._controls_seen
        try:
            outcome = await self._db.write(claim, last=True, lane=self._in_lane(types))
        except ClaimAbandoned:
            return claims.Claimed([], [], None)
        self._saw_controls(types, seen, outcome)
        return outcome

    def park_claim(
        self,
        worker: str,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int,
        wanted: Callable[[], bool] | None = None,
    ) -> ParkedClaim[claims.Claimed]:
        """The waiting claim `claim(..., key_checked=True)`, run by the batches that
        release jobs of its types (group_commit.py) until `leave_claim`."""
        claim = self._claim_operation(worker, types, limit, lease_seconds, wanted, True)
        return self._db.park(claim, types, lambda outcome: bool(outcome.jobs))

    async def leave_claim(self, parked: ParkedClaim[claims.Claimed]) -> claims.Claimed | None:
        """Stop running the parked claim; what a batch claimed for it, if any."""
        seen = self._controls_seen
        outcome = await self._db.leave(parked)
        if outcome is not None:
            self._saw_controls(None if parked.types is None else list(parked.types), seen, outcome)
        return outcome

    def _claim_operation(
        self,
        worker: str,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int,
        wanted: Callable[[], bool] | None,
        key_checked: bool,
    ) -> Callable[[WriteTx], claims.Claimed]:
        def claim(tx: WriteTx) -> claims.Claimed:
            outcome = claims.claim(
                tx, worker, types, limit, lease_seconds, self._delay, check_key=key_checked
            )
            if outcome.jobs and wanted is not None and not wanted():
                raise ClaimAbandoned()
            return outcome

        return claim

    def _in_lane(self, types: Sequence[str] | None) -> bool:
        """Whether a claim of `types` goes in the controlled lane: by the controls the latest
        claims went by, one of them binds."""
        seen = self._controls_seen
        return flow.any_binds(seen, list(seen) if types is None else types, self.now())

    def _saw_controls(
        self, types: Sequence[str] | None, seen: dict[str, TypeControl], outcome: claims.Claimed
    ) -> None:
        """Remember the controls a claim went by: the next claims' lane follows them."""
        if outcome.controls:
            self._controls_seen = outcome.controls
        elif types is None:
            self._controls_seen = {}
        elif any(t in seen for t in types):
            self._controls_seen = {t: c for t, c in seen.items() if t not in types}

    async def complete_and_claim(
        self,
        worker: str,
        items: Sequence[Completion],
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int,
    ) -> tuple[CompletionOutcome, claims.Claimed]:
        """complete_many, then claim (no wait), in one operation of one transaction."""

        def complete_then_claim(tx: WriteTx) -> tuple[CompletionOutcome, claims.Claimed]:
            completed = CompletionOutcome([], [])
            if items:  # batch.run settles their dependents: the claim sees those they released
                completed = batch.run(lambda tx: running.complete_many(tx, worker, items), tx)
            return completed, claims.claim(tx, worker, types, limit, lease_seconds, self._delay)

        seen = self._controls_seen
        lane = self._in_lane(types)
        outcome = await self._db.write(complete_then_claim, last=True, lane=lane, makes_ready=True)
        self._saw_controls(types, seen, outcome[1])
        return outcome

    async def type_controls(self, types: Sequence[str]) -> list[TypeControl]:
        return await self._db.read(controls.type_controls, types, self.now())

    async def stored_controls(self) -> dict[str, TypeControl]:
        """Every type's controls as stored (no running counts): one small read."""
        return await self._db.read(flow.read_controls)

    async def update_type_control(self, job_type: str, **changes: object) -> TypeControl:
        return await self._db.write(lambda tx: controls.update(tx, job_type, **changes))

    async def bulk(
        self,
        action: EventKind,
        job_filter: JobFilter,
        created_by: str | None,
        limit: int,
        running_grace: int | None = None,
    ) -> BulkOutcome:
        """Cancel (action CANCELLED) or retry (RETRIED) up to `limit` matching jobs, oldest
        first, one short transaction per chunk, with a pause after each where the database
        needs one (bulk.py). `running_grace`: a cancel asks matching RUNNING jobs to stop too,
        with that grace (cancel_requests.py)."""
        parts = await self._db.read(bulk.plan, action, job_filter, created_by, running_grace is not None)
        done, after, size = 0, 0, bulk.FIRST_CHUNK
        while parts and done < limit:
            found = await self._db.read(
                bulk.matching,
                job_filter,
                parts,
                created_by,
                after,
                min(size, limit - done),
                self._pacing.bulk_scan_rows,
            )
            after = found.last
            if found.rows:
                ids = [row[0] for row in found.rows]
                chunk = functools.partial(bulk.apply, action=action, ids=ids, running_grace=running_grace)
                started = time.perf_counter()
                changed = await self._db.write(chunk)
                took = time.perf_counter() - started
                size = bulk.next_chunk_size(size, took, self._pacing.bulk_chunk_seconds)
                done += changed
                if changed and done < limit and not found.exhausted:
                    await asyncio.sleep(bulk.pause_after(took, self._pacing.bulk_pause_ratio))
            if found.exhausted:
                return BulkOutcome(done, more=False)
            await asyncio.sleep(0)  # a SQLite read runs on the loop: let what waits run
        return BulkOutcome(
            done, more=bool(parts) and await self._bulk_remains(job_filter, parts, created_by, after)
        )

    async def settle_dependents(self, on_ready: Callable[[frozenset[str]], None] | None = None) -> int:
        """Settle the dependents that finished jobs left for later (settlements.py), one short
        transaction after another, until no settlement this server may take is left; returns
        how many dependents were passed. Chunks are sized by time (settlements.CHUNK_SECONDS)
        and followed by a bulk action's pause. `on_ready` hears the types of the jobs each
        chunk released."""
        if await self._db.read_one(self._db.sql.ANY_SETTLEMENT) is None:
            return 0  # the common case, read without taking a write transaction
        passed, size = 0, settlements.FIRST_CHUNK
        while True:
            chunk = functools.partial(settlements.sweep, limit=size)
            started = time.perf_counter()
            swept = await self._db.write(chunk, makes_ready=True)
            took = time.perf_counter() - started
            passed += swept.dependents
            if swept.ready_types and on_ready is not None:
                on_ready(swept.ready_types)
            if not swept.found:
                return passed
            size = settlements.next_chunk_size(size, took, self._pacing.settle_chunk_seconds)
            await asyncio.sleep(bulk.pause_after(took, self._pacing.bulk_pause_ratio))

    async def settlements_left(self, timeout: float) -> None:
        """Until a transaction of this server left dependents to settle, or `timeout` seconds."""
        left = self._db.settlements_left
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(left.wait(), timeout)
        left.clear()

    async def _bulk_remains(
        self, job_filter: JobFilter, parts: Sequence[BulkPart], created_by: str | None, after: int
    ) -> bool:
        """Whether a job after id `after` matches, read as a bulk call reads its chunks."""
        while True:
            scan = self._pacing.bulk_scan_rows
            found = await self._db.read(bulk.matching, job_filter, parts, created_by, after, 1, scan)
            if found.rows or found.exhausted:
                return bool(found.rows)
            after = found.last
            await asyncio.sleep(0)

    # --- schedules ---------------------------------------------------------------------------

    async def schedules(self) -> list[Schedule]:
        return await self._db.read(schedules.list_all)

    async def schedule_count(self) -> int:
        return await self._db.read(schedules.count)

    async def put_schedule(self, spec: ScheduleSpec) -> Schedule:
        return await self._db.write(lambda tx: schedules.put(tx, spec))

    async def delete_schedule(self, name: str) -> bool:
        return await self._db.write(lambda tx: schedules.delete(tx, name))

    async def set_schedule_paused(self, name: str, paused: bool) -> Schedule | None:
        return await self._db.write(lambda tx: schedules.set_paused(tx, name, paused))

    async def schedule(self, name: str) -> Schedule | None:
        return await self._db.read(schedules.by_name, name)

    async def run_schedule_now(self, name: str) -> Job | None:
        return await self._db.write(lambda tx: schedules.run_now(tx, name))

    async def next_schedule_due(self) -> datetime | None:
        return await self._db.read(schedules.next_due)

    async def mark_schedules_alive(self) -> None:
        await self._db.write(schedules.mark_alive)

    async def broken_schedules(self) -> int:
        """How many schedules are stopped because they no longer parse (schedules.py)."""
        return await self._db.read(schedules.broken_count)

    async def fire_schedules(self, started: float | None = None) -> Fired:
        """Enqueue the jobs of every due tick (on any server: exactly once per tick).
        `started`: when this server's ticker started, a `time.monotonic()` reading. It is
        put on the database's clock in the transaction (its `now` less the time since),
        which holds whatever this server's own clock says."""

        def fire(tx: WriteTx) -> Fired:
            running_since = None
            if started is not None:
                running_since = tx.now - timedelta(seconds=time.monotonic() - started)
            return schedules.fire_due(tx, running_since)

        return await self._db.write(fire)

    async def heartbeat(self, worker: str, job_id: int, attempt: int | None, lease_seconds: int) -> Job:
        return await self._db.write(lambda tx: running.heartbeat(tx, worker, job_id, attempt, lease_seconds))

    async def complete(self, worker: str, job_id: int, result: Any, attempt: int | None) -> Job:
        def completion(tx: WriteTx) -> Job:
            return running.complete(tx, worker, job_id, result, attempt)

        return await self._db.write(completion, makes_ready=True)

    async def complete_many(self, worker: str, items: Sequence[Completion]) -> CompletionOutcome:
        return await self._db.write(lambda tx: running.complete_many(tx, worker, items), makes_ready=True)

    async def fail(
        self,
        worker: str,
        job_id: int,
        error: str,
        retryable: bool,
        retry_in: float | None,
        attempt: int | None,
    ) -> Job:
        return await self._db.write(
            lambda tx: running.fail(tx, worker, job_id, error, retryable, retry_in, attempt, self._delay)
        )

    async def cancel(self, job_id: int, scope: JobScope, grace_seconds: int) -> Job:
        return await self._db.write(lambda tx: actions.cancel(tx, job_id, scope, grace_seconds))

    async def retry(self, job_id: int) -> Job:
        return await self._db.write(lambda tx: actions.retry(tx, job_id))

    # --- steering (API.md section 12) --------------------------------------------------------

    async def expire_due(self) -> int:
        """Cancel the PENDING jobs whose expiry has come, one batch a transaction."""
        total = 0
        while True:
            expired = await self._db.write(rescheduling.expire_due)
            total += expired
            if expired < EXPIRE_BATCH:
                return total

    async def next_expiry(self) -> datetime | None:
        return await self._db.read(rescheduling.next_expiry)

    async def snooze(self, worker: str, job_id: int, attempt: int, seconds: int) -> Job:
        return await self._db.write(lambda tx: rescheduling.snooze(tx, worker, job_id, attempt, seconds))

    async def update_job(self, job_id: int, scope: JobScope, edit: JobEdit) -> Job:
        return await self._db.write(lambda tx: rescheduling.update_pending(tx, job_id, scope, edit))

    # --- progress and attempts (API.md section 12) ---------------------------------------------

    async def report_progress(self, report: ProgressReport, lease_seconds: int) -> Job:
        return await self._db.write(lambda tx: progress.report(tx, report, lease_seconds))

    async def report_progress_late(self, reports: Sequence[ProgressReport], lease_seconds: int) -> list[Job]:
        return await self._db.write(lambda tx: progress.report_late(tx, reports, lease_seconds))

    async def attempt_events_of_jobs(
        self, job_ids: Sequence[int], last: int
    ) -> dict[int, list[attempts.AttemptEvent]]:
        return await self._db.read(attempts.attempt_events_of_jobs, job_ids, last)

    async def expire_leases(self) -> int:
        return await self._db.write(lambda tx: running.expire_leases(tx, self._delay))

    async def prune(self, retention_seconds: int) -> int:
        kept = timedelta(seconds=retention_seconds)
        total = 0
        while True:
            deleted = await self._db.write(lambda tx: pruning.prune(tx, tx.now - kept))
            total += deleted
            if deleted < PRUNE_BATCH:
                break
        await self._db.write(pruning.prune_minutes)
        return total

    @property
    def vacuums(self) -> bool:
        """Whether maintenance should look for tables to vacuum (PostgreSQL: vacuum.py)."""
        return self._db.can.vacuums

    async def vacuum_where_due(self) -> list[str]:
        """VACUUM and ANALYZE what autovacuum would have, where it does not run; the
        statements run (none on SQLite, or where autovacuum runs)."""
        return await self._db.vacuum_where_due()

    async def ping(self) -> None:
        await self._db.read_one(self._db.sql.PING)

    # --- API keys --------------------------------------------------------------------------

    async def find_active_key(self, key_hash: str) -> ApiKey | None:
        row = await self._db.read_one(self._db.sql.ACTIVE_KEY, {"key_hash": key_hash})
        if row is None:
            return None
        name, roles, max_priority, created_at = row
        return ApiKey(
            name=name,
            roles=frozenset(Role(r) for r in roles.split(",")),
            max_priority=Priority(max_priority),
            created_at=micros_to_datetime(created_at),
            revoked_at=None,
        )

    async def key_is_active(self, name: str) -> bool:
        return await self._db.read(reads.key_is_active, name)

    def key_generation(self) -> int:
        """Goes up whenever any key is revoked or changed, by any process.

        Read now where reads run on the event loop (SQLite: a local read costs microseconds);
        elsewhere, the value the last `refresh_key_generation` read (every request, and every
        open websocket's watch).
        """
        if self._db.can.runs_on_the_loop:
            self._saw_generations(self._db.read_one_now(self._db.sql.KEY_GENERATION))
        return self._generation

    async def refresh_key_generation(self) -> int:
        if self._db.can.runs_on_the_loop:
            return self.key_generation()
        self._saw_generations(await self._db.read_one(self._db.sql.KEY_GENERATION))
        return self._generation

    def _saw_generations(self, row: Any) -> None:
        self._generation, self._types_generation = (row[0], row[1]) if row is not None else (0, 0)

    # --- job types added at runtime (API.md section 12) -------------------------------------

    def types_generation(self) -> int:
        """Goes up whenever a job type is added or removed, by any process: as of the last
        read of the keys generation (SQLite: of `key_generation`), which every request makes."""
        return self._types_generation

    async def added_job_types(self) -> tuple[int, list[str]]:
        """The types generation, read now, and the added types as of it or later."""
        generation, names = await self._db.read(job_types.added)
        self._types_generation = max(self._types_generation, generation)
        return generation, names

    async def add_job_type(self, name: str, added_by: str) -> bool:
        return await self._db.write(lambda tx: job_types.add(tx, name, added_by))

    async def remove_job_type(self, name: str) -> bool:
        return await self._db.write(lambda tx: job_types.remove(tx, name))
