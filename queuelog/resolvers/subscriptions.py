"""Subscription resolvers: jobUpdated and jobEvents (visibility applied to every event)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry
from strawberry.types import Info

from queuelog.errors import BadInput, echo, job_not_found
from queuelog.model import EventKind, Job
from queuelog.model import JobEvent as JobEventRecord
from queuelog.resolvers.ids import parse_job_id
from queuelog.schema.context import RequestContext, caller, queue
from queuelog.schema.types import JobEvent, JobStatus

Ctx = Info[RequestContext, None]


async def job_updated(info: Ctx, id: strawberry.ID) -> AsyncGenerator[Job, None]:
    principal = caller(info)
    job_id = parse_job_id(id)
    scope = principal.scope
    # Subscribe before reading, so no change between the read and the first event is lost.
    # Changes that come faster than the client reads merge into the newest (API.md 3): the
    # terminal state always arrives. States are ordered by the job's revision, which grows
    # in the order its changes commit: an event's job may be older than the state already
    # delivered (committed before our read, or another server's event read back late).
    with info.context.bus.subscribe(lambda e: e.job.id == job_id, latest_only=True) as updates:
        current = await queue(info).get(principal, job_id)
        if current is None:
            raise job_not_found(job_id)
        yield current
        if current.status.is_terminal:
            return
        with queue(info).following_progress(current):
            async for event in updates:
                job = event.newest
                if job.revision <= current.revision:
                    continue  # a state already delivered, or an older one
                if not scope.allows(job):
                    return
                current = job
                await info.context.ensure_key_still_valid()
                yield current
                if current.status.is_terminal:
                    return


# What `jobEvents(kinds:)` may name: every kind but PROGRESS, which only jobUpdated delivers.
EVENTS_KINDS = frozenset(kind.value for kind in EventKind if kind is not EventKind.PROGRESS)


def event_kinds(kinds: list[str] | None) -> frozenset[EventKind] | None:
    """`kinds` as EventKinds; BAD_USER_INPUT for a name jobEvents never delivers."""
    if kinds is None:
        return None
    for kind in kinds:
        if kind not in EVENTS_KINDS:
            known = ", ".join(sorted(EVENTS_KINDS))
            raise BadInput(f"kinds: {echo(kind)} is not an event kind jobEvents delivers ({known})")
    return frozenset(EventKind(kind) for kind in kinds)


async def job_events(
    info: Ctx,
    types: list[str] | None = None,
    statuses: list[JobStatus] | None = None,
    kinds: list[str] | None = None,
) -> AsyncGenerator[JobEvent, None]:
    scope = caller(info).scope
    wanted_types = frozenset(types) if types is not None else None
    wanted_statuses = frozenset(statuses) if statuses is not None else None
    wanted_kinds = event_kinds(kinds)

    def accepts(event: JobEventRecord) -> bool:
        # Run for every event of the server: the cheapest tests first (a worker's subscription
        # to CANCEL_REQUESTED turns down every claim and completion at the kind).
        return (
            event.kind is not EventKind.PROGRESS  # only jobUpdated delivers progress (API.md 12)
            and (wanted_kinds is None or event.kind in wanted_kinds)
            and (wanted_types is None or event.job.type in wanted_types)
            and (wanted_statuses is None or event.job.status in wanted_statuses)
            and scope.allows(event.job)
        )

    with info.context.bus.subscribe(accepts) as events:
        async for event in events:
            await info.context.ensure_key_still_valid()
            yield JobEvent.from_model(event)
