"""The job queue's rules between the API and storage (API.md section 3).

Input limits (V-02, V-03, V-07), error sanitising (V-10), the long-poll claim and the
visibility scope of the caller live here, so that every entry point (the GraphQL API, the
CLI's `types` commands) applies the same rules. Role checks come first, in the schema's
permission classes; this layer assumes the role may call the operation at all.

Text that a database cannot store is refused here, alike on every backend (BAD_USER_INPUT,
never a database error): NUL (U+0000), which PostgreSQL's text columns cannot hold, and
lone surrogates, which have no UTF-8 form at all (`check_storable`). JSON documents hold
NUL as the escape `\u0000` and are fine; a lone surrogate in one is refused. A failure's
error text is sanitised before it is stored, which replaces lone surrogates; NUL in it is
refused all the same (`check_no_nul`).

Concurrency and idempotency keys are NFC-normalised where they come in (enqueues and bulk
filters alike), so that one key typed two ways ("é", "e" + U+0301) is one key, and stored and
answered in that form; a key of spaces only is refused (`checked_key`).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from queuelog.allowlist import Allowlist, check_job_type_name
from queuelog.auth import Principal
from queuelog.errors import BadInput, Forbidden, NotFound, echo
from queuelog.model import (
    BulkOutcome,
    EnqueueOutcome,
    EventKind,
    Job,
    JobEdit,
    JobFilter,
    JobRequest,
    JobStatus,
    MinuteCount,
    NewJob,
    QueueStats,
    RecordedEvent,
    Role,
    Schedule,
    TypeControl,
    TypeLimits,
)
from queuelog.progress import ProgressWindows
from queuelog.queue.checks import (
    as_utc,
    check_dependencies,
    check_storable,
    checked_concurrency_key,
    checked_expiry,
    checked_idempotency_key,
    checked_json,
    described,
)
from queuelog.queue.limits import (
    MAX_BULK,
    MAX_CONTROL_LIMIT,
    MAX_ENQUEUE_BATCH,
    MAX_HISTORY,
    MAX_PAGE,
    MAX_RATE_PERIOD,
    MAX_RETRIES_LIMIT,
    MAX_SNOOZE_SECONDS,
    MAX_THROUGHPUT_MINUTES,
    MAX_TIMEOUT_SECONDS,
)
from queuelog.queue.workers import WorkerOperations
from queuelog.scheduling import check_schedule_name, validate_schedule
from queuelog.settings import Settings, env_name
from queuelog.shared_reads import ControlWatch, Recent
from queuelog.stopping import Stopping
from queuelog.storage.repository import Repository
from queuelog.wakeup import WorkSignal

# While a control holds back one of its types, the process reads the (small) table of
# controls this often for all of its waiting claims together (shared_reads.ControlWatch): a
# pause lifted or a limit raised on another server wakes them within that time. A slot freed
# anywhere is a job event, which wakes them at once, and a rate window or a timed pause ends
# at its `wake_at`.
HELD_RECHECK_SECONDS = 0.1
# Waiting claims share one read of the keys generation this recent (a revoke ends them).
KEY_GENERATION_MAX_AGE = 0.1
log = logging.getLogger("queuelog.queue")
# Where `history` gets a job's events: (job id, how many) -> the events.
HistoryRead = Callable[[tuple[int, int]], Awaitable[list[RecordedEvent]]]


class JobQueue(WorkerOperations):
    def __init__(
        self,
        settings: Settings,
        repository: Repository,
        signal: WorkSignal,
        on_held: Callable[[Sequence[str]], None] | None = None,
        stopping: Stopping | None = None,
    ) -> None:
        self.settings = settings
        self.repository = repository
        self.signal = signal
        # Once set, waiting claims answer what they have (usually nothing) instead of waiting.
        self.stopping = stopping if stopping is not None else Stopping()
        self.on_held = on_held  # told the types a control held back in each claim (metrics)
        self.allowlist = Allowlist(settings.job_types, repository)
        self._control_watch = ControlWatch(repository.stored_controls, HELD_RECHECK_SECONDS)
        self._key_generation = Recent(repository.refresh_key_generation, KEY_GENERATION_MAX_AGE)
        self.progress = ProgressWindows(repository, settings.lease_seconds)
        repository.add_listener(self.progress.on_events)
        # Set when this process changes a schedule: its ticker looks again at once.
        self.schedules_changed = asyncio.Event()

    # --- producers -------------------------------------------------------------------------

    async def enqueue(self, principal: Principal, items: Sequence[JobRequest]) -> list[EnqueueOutcome]:
        if len(items) > MAX_ENQUEUE_BATCH:
            raise BadInput(f"at most {MAX_ENQUEUE_BATCH} jobs per call, got {len(items)}")
        await self.allowlist.current({item.type for item in items})
        new_jobs = [
            check_dependencies(self.validate_new_job(principal, item), position)
            for position, item in enumerate(items)
        ]
        if not new_jobs:
            return []
        return await self.repository.enqueue(new_jobs, created_by=principal.name, scope=principal.scope)

    def validate_new_job(self, principal: Principal, request: JobRequest) -> NewJob:
        """The job, checked against the allowlist as last read (callers bring it up to date
        with `allowlist.current` first)."""
        check_storable(request.type, "type")
        self.allowlist.check(request.type, self.allowlist.types)
        if not isinstance(request.payload, dict):
            raise BadInput("payload must be a JSON object")
        payload_json = checked_json(request.payload, "payload", self.settings.max_payload_bytes)
        if not 0 <= request.max_retries <= MAX_RETRIES_LIMIT:
            raise BadInput(f"maxRetries must be between 0 and {MAX_RETRIES_LIMIT}")
        priority = request.priority
        if priority.value > principal.max_priority.value:
            raise Forbidden(
                f"priority {priority.name} is above this key's maximum {principal.max_priority.name}"
            )
        idempotency_key, concurrency_key = request.idempotency_key, request.concurrency_key
        if idempotency_key is not None:
            idempotency_key = checked_idempotency_key(idempotency_key)
        if concurrency_key is not None:
            concurrency_key = checked_concurrency_key(concurrency_key)
        timeout_seconds = request.timeout_seconds
        if timeout_seconds is not None and not 1 <= timeout_seconds <= MAX_TIMEOUT_SECONDS:
            raise BadInput(f"timeoutSeconds must be between 1 and {MAX_TIMEOUT_SECONDS}")
        run_at = as_utc(request.run_at, "runAt") if request.run_at is not None else None
        expires_at = request.expires_at
        if expires_at is not None:
            expires_at = checked_expiry(expires_at, run_at)
        return NewJob.of(
            request,
            payload_json,
            idempotency_key=idempotency_key,
            run_at=run_at,
            concurrency_key=concurrency_key,
            depends_on=tuple(sorted(set(request.depends_on))),
            depends_on_items=tuple(sorted(set(request.depends_on_items))),
            expires_at=expires_at,
        )

    async def cancel(self, principal: Principal, job_id: int) -> Job:
        """PENDING: CANCELLED at once. RUNNING: its cancellation requested (API.md section 12)."""
        return await self.repository.cancel(
            job_id, principal.cancel_scope, self.settings.cancel_grace_seconds
        )

    async def retry(self, job_id: int) -> Job:
        return await self.repository.retry(job_id)

    # --- steering (API.md section 12) --------------------------------------------------------

    async def snooze(self, principal: Principal, job_id: int, attempt: int, seconds: int) -> Job:
        """The holder's job back to PENDING, due in `seconds`: no retry used."""
        if not 1 <= seconds <= MAX_SNOOZE_SECONDS:
            raise BadInput(f"seconds must be between 1 and {MAX_SNOOZE_SECONDS}")
        await self._before_attempts_end([job_id])
        return await self.repository.snooze(principal.name, job_id, attempt, seconds)

    async def update_job(self, principal: Principal, job_id: int, edit: JobEdit) -> Job:
        """Edit a PENDING job: ADMIN any, a PRODUCER those it enqueued (others: NOT_FOUND)."""
        if edit.priority is not None and edit.priority.value > principal.max_priority.value:
            raise Forbidden(
                f"priority {edit.priority.name} is above this key's maximum {principal.max_priority.name}"
            )
        if edit.max_retries is not None and not 0 <= edit.max_retries <= MAX_RETRIES_LIMIT:
            raise BadInput(f"maxRetries must be between 0 and {MAX_RETRIES_LIMIT}")
        edit = dataclasses.replace(
            edit,
            run_at=None if edit.run_at is None else as_utc(edit.run_at, "runAt"),
            expires_at=None if edit.expires_at is None else as_utc(edit.expires_at, "expiresAt"),
        )
        return await self.repository.update_job(job_id, principal.cancel_scope, edit)

    async def run_job_now(self, principal: Principal, job_id: int) -> Job:
        """updateJob with runAt = now: due at once, still subject to dependencies and controls."""
        return await self.repository.update_job(job_id, principal.cancel_scope, JobEdit(run_now=True))

    # --- readers ---------------------------------------------------------------------------

    async def get(self, principal: Principal, job_id: int) -> Job | None:
        return await self.repository.get_job(job_id, principal.scope)

    async def list(
        self,
        principal: Principal,
        status: JobStatus | None,
        job_type: str | None,
        first: int,
        after_id: int | None,
        schedule_name: str | None = None,
    ) -> tuple[builtins.list[Job], bool, int]:
        if not 1 <= first <= MAX_PAGE:
            raise BadInput(f"first must be between 1 and {MAX_PAGE}")
        if job_type is not None:
            check_storable(job_type, "type")
        if schedule_name is not None:
            check_schedule_name(schedule_name, "scheduleName")
        return await self.repository.list_jobs(
            principal.scope, status, job_type, first, after_id, schedule_name
        )

    async def history(
        self, principal: Principal, job: Job, last: int, read: HistoryRead
    ) -> builtins.list[RecordedEvent]:
        """The recorded events of a job the caller was shown (so already may see).

        `read` is where the events come from: `histories` batched over a request (the
        resolvers pass a DataLoader's `load`).
        """
        if not 1 <= last <= MAX_HISTORY:
            raise BadInput(f"last must be between 1 and {MAX_HISTORY}")
        if not principal.scope.allows(job):
            return []
        return await read((job.id, last))

    async def dependency_ids(self, job_ids: Sequence[int]) -> builtins.list[builtins.list[int]]:
        """The ids each job depends on, for many jobs in one read (Job.dependsOn)."""
        found = await self.repository.dependency_ids(list(dict.fromkeys(job_ids)))
        return [found.get(job_id, []) for job_id in job_ids]

    async def histories(
        self, wanted: Sequence[tuple[int, int]]
    ) -> builtins.list[builtins.list[RecordedEvent]]:
        """The newest events of many jobs, (job id, how many) each, in one read."""
        if not wanted:
            return []
        events = await self.repository.events_of_jobs(
            list(dict.fromkeys(job_id for job_id, _ in wanted)), max(last for _, last in wanted)
        )
        return [events.get(job_id, [])[-last:] for job_id, last in wanted]

    async def stats(self, principal: Principal) -> QueueStats:
        return await self.repository.queue_stats(principal.scope)

    async def throughput(self, principal: Principal, minutes: int) -> builtins.list[MinuteCount]:
        if not 1 <= minutes <= MAX_THROUGHPUT_MINUTES:
            raise BadInput(f"minutes must be between 1 and {MAX_THROUGHPUT_MINUTES}")
        return await self.repository.finished_per_minute(principal.scope, minutes)

    # --- schedules (API.md section 10) -----------------------------------------------------

    async def schedules(self) -> builtins.list[Schedule]:
        return await self.repository.schedules()

    async def schedule_count(self) -> int:
        """How many schedules `schedules` answers now (its cost, schema/cost.py)."""
        return await self.repository.schedule_count()

    async def put_schedule(self, principal: Principal, **fields: Any) -> Schedule:
        await self.allowlist.current([fields["type"]])
        spec = validate_schedule(self.validate_new_job, principal, **fields)
        schedule = await self.repository.put_schedule(spec)
        log.info("schedule %r (%s %s) put by %s", spec.name, spec.cron, spec.timezone, principal.name)
        self.schedules_changed.set()
        return schedule

    async def delete_schedule(self, principal: Principal, name: str) -> bool:
        check_schedule_name(name)
        deleted = await self.repository.delete_schedule(name)
        if deleted:
            log.info("schedule %r deleted by %s", name, principal.name)
        return deleted

    async def pause_schedule(self, principal: Principal, name: str, paused: bool) -> Schedule:
        check_schedule_name(name)
        schedule = await self.repository.set_schedule_paused(name, paused)
        if schedule is None:
            raise NotFound(f"schedule {echo(name)} not found")
        log.info("schedule %r %s by %s", name, "paused" if paused else "resumed", principal.name)
        self.schedules_changed.set()
        return schedule

    async def run_schedule_now(self, principal: Principal, name: str) -> Job:
        """Enqueue the schedule's job now (API.md section 12), paused or not, whatever its
        overlap; its ticks are left as they are. Its type must still be allowed, as for any
        new enqueue."""
        check_schedule_name(name)
        schedule = await self.repository.schedule(name)
        if schedule is None:
            raise NotFound(f"schedule {echo(name)} not found")
        self.allowlist.check(schedule.type, await self.allowlist.current([schedule.type]))
        job = await self.repository.run_schedule_now(name)
        if job is None:  # deleted since it was read
            raise NotFound(f"schedule {echo(name)} not found")
        log.info("schedule %r run now by %s: job %d", name, principal.name, job.id)
        return job

    # --- job types at runtime (API.md section 12) ------------------------------------------

    async def add_job_type(self, principal: Principal, job_type: str) -> TypeControl:
        """Add the type to the allowlist of every server on the database (a type already
        there is left as it is)."""
        check_job_type_name(job_type)
        added = await self.repository.add_job_type(job_type, principal.name)
        how = "added" if added else "added again (it was there)"
        log.info("job type %r %s by %s", job_type, how, principal.name)
        (control,) = await self.repository.type_controls([job_type])
        return control

    async def remove_job_type(self, principal: Principal, job_type: str) -> bool:
        """Remove an added type: new enqueues of it are refused; its jobs stay. False when it
        was not added. A type of this server's QUEUELOG_JOB_TYPES stays (BAD_USER_INPUT)."""
        check_storable(job_type, "type")
        if job_type in self.allowlist.configured:
            raise BadInput(
                f"type: {echo(job_type)} is in this server's {env_name('job_types')}; "
                "only a type added with addJobType can be removed"
            )
        check_job_type_name(job_type)
        removed = await self.repository.remove_job_type(job_type)
        how = "removed" if removed else "not removed (it was not added)"
        log.info("job type %r %s by %s", job_type, how, principal.name)
        return removed

    # --- flow control (API.md section 9) ---------------------------------------------------

    async def allowed_type_count(self) -> int:
        """How many types `type_controls` answers now (its cost, schema/cost.py)."""
        return len(await self.allowlist.current())

    async def type_controls(self) -> builtins.list[TypeControl]:
        return await self.repository.type_controls(sorted(await self.allowlist.current()))

    async def pause_type(self, principal: Principal, job_type: str, until: datetime | None) -> TypeControl:
        await self._check_controlled_type(job_type)
        until = as_utc(until, "until") if until is not None else None
        control = await self.repository.update_type_control(job_type, paused=True, paused_until=until)
        log.info(
            "type %r paused by %s%s", job_type, principal.name, f" until {until.isoformat()}" if until else ""
        )
        return control

    async def resume_type(self, principal: Principal, job_type: str) -> TypeControl:
        await self._check_controlled_type(job_type)
        control = await self.repository.update_type_control(job_type, paused=False, paused_until=None)
        log.info("type %r resumed by %s", job_type, principal.name)
        self.signal.notify([job_type])  # claims waiting here; others see it at their recheck
        return control

    async def set_type_control(self, principal: Principal, limits: TypeLimits) -> TypeControl:
        await self._check_controlled_type(limits.type)
        for name, value in (
            ("maxRunning", limits.max_running),
            ("maxRunningPerKey", limits.max_running_per_key),
            ("rateLimit.limit", limits.rate_limit.limit if limits.rate_limit else None),
        ):
            if value is not None and not 1 <= value <= MAX_CONTROL_LIMIT:
                raise BadInput(f"{name} must be between 1 and {MAX_CONTROL_LIMIT}, or null")
        if limits.rate_limit is not None and not 1 <= limits.rate_limit.period_seconds <= MAX_RATE_PERIOD:
            raise BadInput(f"rateLimit.periodSeconds must be between 1 and {MAX_RATE_PERIOD}")
        if limits.timeout_seconds is not None and not 1 <= limits.timeout_seconds <= MAX_TIMEOUT_SECONDS:
            raise BadInput(f"timeoutSeconds must be between 1 and {MAX_TIMEOUT_SECONDS}, or null")
        changes = limits.changes()
        control = await self.repository.update_type_control(limits.type, **changes)
        log.info(
            "type %r limits set by %s: %s",
            limits.type,
            principal.name,
            " ".join(f"{name}={value}" for name, value in changes.items()) or "nothing changed",
        )
        self.signal.notify([limits.type])  # a raised limit may free claims waiting here
        return control

    async def cancel_jobs(
        self, principal: Principal, job_filter: JobFilter, limit: int, include_running: bool = False
    ) -> BulkOutcome:
        """ADMIN: any matching job; PRODUCER: its own (the role check came first).
        `include_running`: RUNNING ones are asked to stop too (API.md section 12)."""
        job_filter = self._check_bulk(job_filter, limit)
        created_by = None if Role.ADMIN in principal.roles else principal.name
        grace = self.settings.cancel_grace_seconds if include_running else None
        outcome = await self.repository.bulk(EventKind.CANCELLED, job_filter, created_by, limit, grace)
        done = "cancelled or asked to stop" if include_running else "cancelled"
        log.info("cancelJobs by %s: %d %s (%s)", principal.name, outcome.count, done, described(job_filter))
        return outcome

    async def retry_jobs(self, principal: Principal, job_filter: JobFilter, limit: int) -> BulkOutcome:
        job_filter = self._check_bulk(job_filter, limit)
        outcome = await self.repository.bulk(EventKind.RETRIED, job_filter, None, limit)
        log.info("retryJobs by %s: %d retried (%s)", principal.name, outcome.count, described(job_filter))
        return outcome

    def _check_bulk(self, job_filter: JobFilter, limit: int) -> JobFilter:
        """The filter, checked; a `createdBefore` without an offset is UTC, as `runAt` is."""
        if not 1 <= limit <= MAX_BULK:
            raise BadInput(f"limit must be between 1 and {MAX_BULK}")
        if job_filter.status is None and job_filter.type is None:
            raise BadInput("filter needs a status or a type")
        if job_filter.type is not None:
            check_storable(job_filter.type, "filter.type")
        if job_filter.concurrency_key is not None:
            key = checked_concurrency_key(job_filter.concurrency_key)
            job_filter = dataclasses.replace(job_filter, concurrency_key=key)
        before = job_filter.created_before
        if before is not None:
            job_filter = dataclasses.replace(job_filter, created_before=as_utc(before, "createdBefore"))
        return job_filter

    async def _check_controlled_type(self, job_type: str) -> None:
        check_storable(job_type, "type")
        self.allowlist.check(job_type, await self.allowlist.current([job_type]))
