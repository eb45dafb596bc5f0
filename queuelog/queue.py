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
import contextlib
import dataclasses
import functools
import logging
import time
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from queuelog.allowlist import Allowlist, check_job_type_name
from queuelog.auth import Principal
from queuelog.errors import BadInput, Forbidden, NotFound, PayloadTooLarge, echo
from queuelog.model import (
    ALL_JOBS,
    BulkOutcome,
    CompleteAndClaimOutcome,
    Completion,
    CompletionOutcome,
    EnqueueOutcome,
    EventKind,
    Job,
    JobAttempt,
    JobEdit,
    JobFilter,
    JobRequest,
    JobStatus,
    MinuteCount,
    NewJob,
    ProgressReport,
    QueueStats,
    RecordedEvent,
    Role,
    Schedule,
    TypeControl,
    TypeLimits,
)
from queuelog.progress import ProgressWindows
from queuelog.sanitize import sanitize_error
from queuelog.scheduling import check_schedule_name, validate_schedule
from queuelog.settings import Settings, env_name
from queuelog.shared_reads import ControlWatch, Recent
from queuelog.stopping import Stopping
from queuelog.storage.group_commit import ParkedClaim
from queuelog.storage.operations.attempts import AttemptEvent, attempts_of
from queuelog.storage.operations.claims import Claimed
from queuelog.storage.repository import ClaimerRevoked, Repository
from queuelog.storage.schema.types import compact_json
from queuelog.wakeup import WorkSignal

MAX_RETRIES_LIMIT = 25
MAX_ENQUEUE_BATCH = 1000
MAX_CLAIM_BATCH = 100
MAX_COMPLETE_BATCH = 100
MAX_PAGE = 100
MAX_HISTORY = 100
MAX_THROUGHPUT_MINUTES = 24 * 60  # as long as job_minutes keeps them (counters.MINUTES_KEPT)
MAX_WAIT_SECONDS = 30
MAX_LEASE_SECONDS = 86400
MAX_RETRY_IN_SECONDS = 86400
MAX_IDEMPOTENCY_KEY = 255
MAX_CONCURRENCY_KEY = 255
MAX_CONTROL_LIMIT = 100_000
MAX_BULK = 10_000
MAX_RATE_PERIOD = 86400
MAX_TIMEOUT_SECONDS = 86400
MAX_DEPENDENCIES = 100
MAX_SNOOZE_SECONDS = 86400
MAX_PROGRESS_MESSAGE = 200
# A waiting claim re-checks the database at least this often, so that work enqueued by
# another server process is found even though only this process's enqueues signal it.
CROSS_PROCESS_RECHECK_SECONDS = 0.5
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
# Where `attempts` gets a job's events that carry an attempt: (job id, how many attempts).
AttemptsRead = Callable[[tuple[int, int]], Awaitable[list[AttemptEvent]]]


def _caller_still_there() -> Callable[[], bool]:
    """Whether the task running this claim still wants its answer: not once it has been
    cancelled, as a websocket's operation is when its socket closes or the client stops it
    (an HTTP request's task is not: `client_gone` tells of that). Read from the writer's
    thread, inside the claim's transaction."""
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - claims run in a task
        return lambda: True
    return lambda: not (task.cancelling() or task.done())


class JobQueue:
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
        payload_json = self.check_json_size(request.payload, "payload")
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

    def check_json_size(self, value: Any, what: str) -> str:
        """The value's compact JSON, once it is known to be JSON within the size limit."""
        try:
            text = compact_json(value)
        except (TypeError, ValueError):
            raise BadInput(f"{what} is not valid JSON") from None
        # Characters count as at least one byte each: most texts need no encoding to pass.
        limit = self.settings.max_payload_bytes
        if text.isascii():
            size = len(text)
        else:
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError:
                raise BadInput(f"{what} holds a lone surrogate (not Unicode text)") from None
        if size > limit:
            raise PayloadTooLarge(f"{what} is {size} bytes; the limit is {limit}")
        return text

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
        log.info("cancelJobs by %s: %d %s (%s)", principal.name, outcome.count, done, _described(job_filter))
        return outcome

    async def retry_jobs(self, principal: Principal, job_filter: JobFilter, limit: int) -> BulkOutcome:
        job_filter = self._check_bulk(job_filter, limit)
        outcome = await self.repository.bulk(EventKind.RETRIED, job_filter, None, limit)
        log.info("retryJobs by %s: %d retried (%s)", principal.name, outcome.count, _described(job_filter))
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

    # --- workers ---------------------------------------------------------------------------

    async def claim(
        self,
        principal: Principal,
        *,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int | None,
        wait_seconds: int | None,
        client_gone: Callable[[], Awaitable[object]] | None = None,
    ) -> builtins.list[Job]:
        type_list, lease = self._claim_arguments(types, limit, lease_seconds)
        wait = 0 if wait_seconds is None else wait_seconds
        if not 0 <= wait <= MAX_WAIT_SECONDS:
            raise BadInput(f"waitSeconds must be between 0 and {MAX_WAIT_SECONDS}")
        claim = functools.partial(self.repository.claim, principal.name, type_list, limit, lease)
        if not wait:
            return self._seen(await claim(wanted=_caller_still_there())).jobs
        park = functools.partial(self.repository.park_claim, principal.name, type_list, limit, lease)
        return await self._claim_waiting(
            functools.partial(claim, key_checked=True), park, principal.name, type_list, wait, client_gone
        )

    def _claim_arguments(
        self, types: Sequence[str] | None, limit: int, lease_seconds: int | None
    ) -> tuple[builtins.list[str] | None, int]:
        """A claim's types (None: any) and lease, checked."""
        if not 1 <= limit <= MAX_CLAIM_BATCH:
            raise BadInput(f"limit must be between 1 and {MAX_CLAIM_BATCH}")
        lease = self._lease(lease_seconds)
        if types is not None and not types:
            raise BadInput("types must not be empty; leave it out to claim any type")
        for job_type in types or ():
            check_storable(job_type, "types")
        return (list(dict.fromkeys(types)) if types is not None else None), lease

    async def _claim_waiting(
        self,
        claim: Callable[..., Awaitable[Claimed]],
        park: Callable[..., ParkedClaim[Claimed]],
        worker: str,
        types: builtins.list[str] | None,
        wait: float,
        client_gone: Callable[[], Awaitable[object]] | None,
    ) -> builtins.list[Job]:
        """Claim; if nothing is due, sleep until woken, something is due, or time is up.

        Between claims it only reads when the next job is due (an indexed MIN), so an idle
        worker costs one cheap read per recheck, never a write. Enqueues in this process
        wake it at once; those of other processes wake it through the event feed, or are
        seen at the next recheck (CROSS_PROCESS_RECHECK_SECONDS). While it sleeps, it is
        parked (group_commit.py): a completion in this process that releases jobs of its
        types claims them for it in its own transaction. A revoke of
        the worker's key ends the wait with nothing claimed: each claim checks the key in its
        transaction, and a moved keys generation (any process's revoke) ends it at the next
        recheck. So does the server stopping, at once: the claim answers as when its time is up.
        """
        deadline = time.monotonic() + wait
        gone = asyncio.ensure_future(client_gone()) if client_gone is not None else None
        there = _caller_still_there()

        def wanted() -> bool:
            # Read from the writer thread right before commit: a client that has gone away by
            # then claims nothing (the claim rolls back) instead of stranding jobs until
            # their lease expires.
            return there() and (gone is None or not gone.done())

        try:
            while True:
                if gone is not None and gone.done():
                    return []
                # Taken before the claim: what becomes ready while it runs (after its snapshot)
                # ends the wait that follows at once, instead of being missed until a recheck.
                mark = self.signal.mark()
                try:
                    outcome = self._seen(await claim(wanted=wanted))
                except ClaimerRevoked:
                    return []
                if outcome.jobs:
                    return outcome.jobs
                if self.stopping.is_set():
                    return []
                # Claims a control binds stay out of other transactions: they take the
                # controlled-claim lock (flow.py).
                parked = None if outcome.controls else park(wanted=wanted)
                failure: Exception | None = None
                try:
                    again = await self._sleep_until_claimable(
                        outcome, worker, types, deadline, gone, parked, mark
                    )
                except Exception as exc:  # a read failed: what the parked claim took still goes out
                    failure, again = exc, False
                finally:
                    found = await self.repository.leave_claim(parked) if parked is not None else None
                if found is not None:  # even past the deadline: these jobs are claimed
                    return self._seen(found).jobs
                if failure is not None:
                    raise failure
                if not again:
                    return []
        finally:
            if gone is not None and not gone.done():
                gone.cancel()

    async def _sleep_until_claimable(
        self,
        outcome: Claimed,
        worker: str,
        types: builtins.list[str] | None,
        deadline: float,
        gone: asyncio.Future[object] | None,
        parked: ParkedClaim[Claimed] | None,
        mark: int,
    ) -> bool:
        """Sleep after a claim that found nothing: True when the claim should run again,
        False when the wait is over (time is up, the client has gone, the key was revoked,
        the server is stopping); either as soon as `parked` has claimed."""
        generation = self.repository.key_generation()
        watched: builtins.list[asyncio.Future[Any]] = [self.stopping.future()]
        if gone is not None:
            watched.append(gone)
        if parked is not None:
            watched.append(parked.claimed)
        # A type held back by a control frees when a job leaves RUNNING (a job
        # event, from any process, wakes us), when a pause or rate window ends
        # (wake_at), or when a control changes (the process's ControlWatch).
        controls_changed = None
        if outcome.controls:
            controls_changed = self._control_watch.changed(outcome.controls, types)
            watched.append(controls_changed)
        rechecking = False
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (gone is not None and gone.done()) or self.stopping.is_set():
                    return False
                if parked is not None and parked.claimed.done():
                    return True
                if controls_changed is not None and controls_changed.done():
                    return True  # a control changed on some server: claim again
                # Read afresh (one read shared by the process's waiting claims): on
                # PostgreSQL the cached generation moves only when a request or an event
                # arrives, and an idle queue has neither.
                if await self._key_generation.get() != generation:
                    if not await self.repository.key_is_active(worker):
                        return False
                    generation = self.repository.key_generation()
                # At a recheck, a ready job of a type no control holds (another
                # process's enqueue whose event has not reached us) ends the wait too. Not
                # right after the claim: the ready jobs it skipped are being claimed.
                ready_too = rechecking and not outcome.controls
                next_due = await self.repository.next_due_at(types, ready_too=ready_too)
                if outcome.wake_at is not None and (next_due is None or outcome.wake_at < next_due):
                    next_due = outcome.wake_at
                until_due = remaining
                if next_due is not None:
                    until_due = (next_due - self.repository.now()).total_seconds()
                if until_due <= 0:
                    return True
                pause = min(remaining, until_due + 0.001, CROSS_PROCESS_RECHECK_SECONDS)
                if await self.signal.wait(pause, *watched, types=types, since=mark):
                    return True  # woken: claim again
                rechecking = True
        finally:
            if controls_changed is not None and not controls_changed.done():
                controls_changed.cancel()

    def _seen(self, outcome: Claimed) -> Claimed:
        """Types held back by a control: their jobs leaving RUNNING wake waiting claims."""
        if outcome.controls:  # a job of a type with a RUNNING limit finishing may free a slot
            self.signal.watch(outcome.controls)
        if outcome.held and self.on_held is not None:
            self.on_held(outcome.held)
        return outcome

    def _lease(self, lease_seconds: int | None) -> int:
        if lease_seconds is None:
            return self.settings.lease_seconds
        if not 1 <= lease_seconds <= MAX_LEASE_SECONDS:
            raise BadInput(f"leaseSeconds must be between 1 and {MAX_LEASE_SECONDS}")
        return lease_seconds

    async def heartbeat(
        self, principal: Principal, job_id: int, attempt: int | None, lease_seconds: int | None
    ) -> Job:
        return await self.repository.heartbeat(principal.name, job_id, attempt, self._lease(lease_seconds))

    async def complete(self, principal: Principal, job_id: int, result: Any, attempt: int | None) -> Job:
        self.check_json_size(result, "result")
        await self._before_attempts_end([job_id])
        return await self.repository.complete(principal.name, job_id, result, attempt)

    async def complete_many(self, principal: Principal, items: Sequence[Completion]) -> CompletionOutcome:
        items = self._completions(items)
        if not items:
            return CompletionOutcome(completed=[], rejected=[])
        await self._before_attempts_end(item.id for item in items)
        return await self.repository.complete_many(principal.name, items)

    async def complete_and_claim(
        self,
        principal: Principal,
        items: Sequence[Completion],
        *,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int | None,
    ) -> CompleteAndClaimOutcome:
        """complete_many, then a claim that answers at once, in one transaction (a chain's
        next step is claimable as soon as the completion before it applies)."""
        items = self._completions(items)
        type_list, lease = self._claim_arguments(types, limit, lease_seconds)
        await self._before_attempts_end(item.id for item in items)
        outcome, claimed = await self.repository.complete_and_claim(
            principal.name, items, type_list, limit, lease
        )
        return CompleteAndClaimOutcome(outcome.completed, outcome.rejected, self._seen(claimed).jobs)

    def _completions(self, items: Sequence[Completion]) -> builtins.list[Completion]:
        """completeJobs items, checked, with their results measured."""
        if len(items) > MAX_COMPLETE_BATCH:
            raise BadInput(f"at most {MAX_COMPLETE_BATCH} items per call, got {len(items)}")
        return [
            dataclasses.replace(item, result_json=self.check_json_size(item.result, "result"))
            if item.result is not None
            else item
            for item in items
        ]

    async def fail(
        self,
        principal: Principal,
        job_id: int,
        error: str,
        retryable: bool,
        retry_in_seconds: int | None,
        attempt: int | None,
    ) -> Job:
        if retry_in_seconds is not None and not 0 <= retry_in_seconds <= MAX_RETRY_IN_SECONDS:
            raise BadInput(f"retryInSeconds must be between 0 and {MAX_RETRY_IN_SECONDS}")
        check_no_nul(error, "error")  # lone surrogates: sanitize_error replaces them
        clean = sanitize_error(error, self.settings.max_error_chars)
        await self._before_attempts_end([job_id])
        return await self.repository.fail(principal.name, job_id, clean, retryable, retry_in_seconds, attempt)

    # --- progress and attempts (API.md section 12) ------------------------------------------

    async def report_progress(
        self, principal: Principal, job_id: int, attempt: int, progress: float, message: str | None
    ) -> Job:
        if not 0 <= progress <= 1:  # NaN too
            raise BadInput("progress must be between 0 and 1")
        if message is not None:
            if len(message) > MAX_PROGRESS_MESSAGE:
                raise BadInput(f"message must be at most {MAX_PROGRESS_MESSAGE} characters")
            check_storable(message, "message")
        report = ProgressReport(job_id, principal.name, attempt, progress, message)
        return await self.progress.report(report, lambda: self.repository.get_job(job_id, ALL_JOBS))

    def following_progress(self, job: Job) -> contextlib.AbstractContextManager[None]:
        """While the block runs, reports on `job` through other servers reach this server's
        subscribers (storage/feeds/progress_watch.py); those through this one always do."""
        return self.repository.progress_watch.following(job)

    async def _before_attempts_end(self, job_ids: Iterable[int]) -> None:
        """Store the progress reports held for these jobs before their holder ends their
        attempts through this server: the last report of an attempt comes before its end."""
        held = self.progress.take_held(job_ids)
        if held:
            await self.progress.store_held(held)

    async def attempts(
        self, principal: Principal, job: Job, last: int, read: AttemptsRead
    ) -> builtins.list[JobAttempt]:
        """The newest `last` claims of a job the caller was shown (so already may see);
        `read` gets its events that carry an attempt (`attempt_events`, batched by the
        resolvers' DataLoader)."""
        if not 1 <= last <= MAX_HISTORY:
            raise BadInput(f"last must be between 1 and {MAX_HISTORY}")
        if not principal.scope.allows(job):
            return []
        return attempts_of(job, await read((job.id, last)), last)

    async def attempt_events(
        self, wanted: Sequence[tuple[int, int]]
    ) -> builtins.list[builtins.list[AttemptEvent]]:
        """The events that carry an attempt of many jobs, (job id, how many attempts) each,
        in one read."""
        if not wanted:
            return []
        found = await self.repository.attempt_events_of_jobs(
            list(dict.fromkeys(job_id for job_id, _ in wanted)), max(last for _, last in wanted)
        )
        return [found.get(job_id, []) for job_id, _ in wanted]


def _described(job_filter: JobFilter) -> str:
    fields = dataclasses.asdict(job_filter)
    return ", ".join(f"{name}={value}" for name, value in fields.items() if value is not None)


def as_utc(value: datetime, what: str) -> datetime:
    """A time without an offset is taken as UTC (the API speaks UTC), not server-local."""
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise BadInput(f"{what} cannot be expressed in UTC") from None


def checked_expiry(expires_at: datetime, run_at: datetime | None) -> datetime:
    """An enqueue's expiresAt in UTC, once later than its runAt (None: now). Whether it is
    later than now is asked where the job would be created (storage/operations/enqueue.py):
    a replay of a job that has expired since answers that job."""
    expires_at = as_utc(expires_at, "expiresAt")
    if run_at is not None and expires_at <= run_at:
        raise BadInput("expiresAt must be later than runAt")
    return expires_at


def check_no_nul(text: str, what: str) -> None:
    if "\x00" in text:
        raise BadInput(f"{what} must not contain NUL (U+0000)")


def check_storable(text: str, what: str) -> None:
    """Refuse text that a database cannot store, the same on every backend."""
    check_no_nul(text, what)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(f"{what} holds a lone surrogate (not Unicode text)") from None


def check_dependencies(item: NewJob, position: int) -> NewJob:
    """`dependsOnItems` may only name earlier inputs of the same call, and a job waits for
    at most MAX_DEPENDENCIES jobs in all."""
    for index in item.depends_on_items:
        if not 0 <= index < position:
            raise BadInput(
                f"dependsOnItems: {index} is not an earlier input of this enqueueJobs call"
                f" (input {position} may name 0..{position - 1})"
                if position
                else f"dependsOnItems: {index} is not an earlier input (enqueueJob has none)"
            )
    if len(item.depends_on) + len(item.depends_on_items) > MAX_DEPENDENCIES:
        raise BadInput(f"dependsOn: a job may wait for at most {MAX_DEPENDENCIES} jobs")
    return item


def checked_key(key: str, field: str, limit: int) -> str:
    """A concurrency or idempotency key as it is stored and answered: NFC-normalised (so "é"
    and "e" + U+0301 are one key), 1 to `limit` printable characters, not all spaces."""
    key = unicodedata.normalize("NFC", key)
    if not 1 <= len(key) <= limit or not key.isprintable():
        raise BadInput(f"{field} must be 1 to {limit} printable characters")
    if key.isspace():  # printable, yet it tells nothing apart (and looks like no key at all)
        raise BadInput(f"{field} must not be only spaces")
    check_storable(key, field)
    return key


def checked_concurrency_key(key: str) -> str:
    return checked_key(key, "concurrencyKey", MAX_CONCURRENCY_KEY)


def checked_idempotency_key(key: str) -> str:
    return checked_key(key, "idempotencyKey", MAX_IDEMPOTENCY_KEY)
