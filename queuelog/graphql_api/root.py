"""Query, Mutation and Subscription: each field names its resolver, the roles it needs and, where
the resolver returns a `queuelog.model` object, the GraphQL type that reads it."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.permission import PermissionExtension

from queuelog.auth import Action
from queuelog.resolvers import flow_control, mutations, queries, schedules, subscriptions
from queuelog.schema.flow_control import BulkPayload, TypeControl
from queuelog.schema.permissions import RoleAllows
from queuelog.schema.schedules import Schedule
from queuelog.schema.types import CompleteAndClaimPayload, CompleteJobsPayload, EnqueueJobPayload, Job


def allowed(action: Action) -> list[Any]:
    return [PermissionExtension(permissions=[RoleAllows(action)], use_directives=False)]


@strawberry.type
class Query:
    me = strawberry.field(resolver=queries.me)
    job = strawberry.field(resolver=queries.job, graphql_type=Job | None, extensions=allowed(Action.READ))
    jobs = strawberry.field(
        resolver=queries.jobs, extensions=allowed(Action.READ), description="Newest first. first: 1..100."
    )
    queue_stats = strawberry.field(resolver=queries.queue_stats, extensions=allowed(Action.READ))
    type_controls = strawberry.field(
        resolver=flow_control.type_controls,
        graphql_type=list[TypeControl],
        extensions=allowed(Action.READ),
        description="Every allowlisted type with its controls, in type order. Any authenticated caller.",
    )
    schedules = strawberry.field(
        resolver=schedules.schedules,
        graphql_type=list[Schedule],
        extensions=allowed(Action.SEE_SCHEDULES),
        description="ADMIN and VIEWER; in name order.",
    )


@strawberry.type
class Mutation:
    enqueue_job = strawberry.mutation(
        resolver=mutations.enqueue_job, graphql_type=EnqueueJobPayload, extensions=allowed(Action.ENQUEUE)
    )
    enqueue_jobs = strawberry.mutation(
        resolver=mutations.enqueue_jobs,
        graphql_type=list[EnqueueJobPayload],
        extensions=allowed(Action.ENQUEUE),
        description="All or nothing, at most 1000 inputs.",
    )
    claim_job = strawberry.mutation(
        resolver=mutations.claim_job,
        graphql_type=Job | None,
        extensions=allowed(Action.WORK),
        description="The next due PENDING job (priority DESC, createdAt ASC, id ASC), or null.\n"
        "waitSeconds (0..30, default 0): when none is due, wait up to that long for one (long poll).",
    )
    claim_jobs = strawberry.mutation(
        resolver=mutations.claim_jobs,
        graphql_type=list[Job],
        extensions=allowed(Action.WORK),
        description=(
            "Up to limit (1..100) jobs in claim order, each claimed once; waitSeconds as in claimJob."
        ),
    )
    heartbeat_job = strawberry.mutation(
        resolver=mutations.heartbeat_job, graphql_type=Job, extensions=allowed(Action.WORK)
    )
    complete_job = strawberry.mutation(
        resolver=mutations.complete_job, graphql_type=Job, extensions=allowed(Action.WORK)
    )
    complete_jobs = strawberry.mutation(
        resolver=mutations.complete_jobs,
        graphql_type=CompleteJobsPayload,
        extensions=allowed(Action.WORK),
        description="Complete up to 100 held jobs in one call (a worker's batched acknowledgements).",
    )
    complete_and_claim_jobs = strawberry.mutation(
        resolver=mutations.complete_and_claim_jobs,
        graphql_type=CompleteAndClaimPayload,
        extensions=allowed(Action.WORK),
        description=(
            "completeJobs, then claimJobs (no waitSeconds: it answers at once), in one transaction:"
            " the claim may take the jobs these completions released. A worker's round trip."
        ),
    )
    fail_job = strawberry.mutation(
        resolver=mutations.fail_job, graphql_type=Job, extensions=allowed(Action.WORK)
    )
    report_progress = strawberry.mutation(
        resolver=mutations.report_progress,
        graphql_type=Job,
        extensions=allowed(Action.WORK),
        description=(
            "The holder: store progress (0..1) and an optional message; delivered to jobUpdated subscribers."
        ),
    )
    cancel_job = strawberry.mutation(
        resolver=mutations.cancel_job,
        graphql_type=Job,
        extensions=allowed(Action.CANCEL),
        description=(
            "PENDING: CANCELLED at once. RUNNING: sets cancelRequested and returns the job, still RUNNING;"
            " the holder is told within a second and the job ends CANCELLED (API.md 12)."
        ),
    )
    retry_job = strawberry.mutation(
        resolver=mutations.retry_job, graphql_type=Job, extensions=allowed(Action.RETRY)
    )
    cancel_jobs = strawberry.mutation(
        resolver=flow_control.cancel_jobs,
        graphql_type=BulkPayload,
        extensions=allowed(Action.CANCEL),
        description=(
            "Cancel PENDING jobs matching the filter that the caller may cancel (ADMIN: any), oldest first, "
            "at most limit (1..10000); includeRunning also requests the cancellation of RUNNING ones."
        ),
    )
    retry_jobs = strawberry.mutation(
        resolver=flow_control.retry_jobs,
        graphql_type=BulkPayload,
        extensions=allowed(Action.RETRY),
        description=(
            "ADMIN: retry FAILED or CANCELLED jobs matching the filter, oldest first, "
            "at most limit (1..10000)."
        ),
    )
    pause_type = strawberry.mutation(
        resolver=flow_control.pause_type,
        graphql_type=TypeControl,
        extensions=allowed(Action.CONTROL),
        description=(
            "ADMIN: no job of the type is claimed until resumeType, or until `until` when given; "
            "enqueues go on, RUNNING jobs finish."
        ),
    )
    resume_type = strawberry.mutation(
        resolver=flow_control.resume_type, graphql_type=TypeControl, extensions=allowed(Action.CONTROL)
    )
    set_type_control = strawberry.mutation(
        resolver=flow_control.set_type_control,
        graphql_type=TypeControl,
        extensions=allowed(Action.CONTROL),
        description=(
            "ADMIN: replaces the type's limits (a null field clears that limit); pausing is separate."
        ),
    )
    # Steering (API.md section 12).
    snooze_job = strawberry.mutation(
        resolver=mutations.snooze_job,
        graphql_type=Job,
        extensions=allowed(Action.WORK),
        description=(
            "The holder: back to PENDING, runAt = now + seconds (1..86400), no retry used, snoozeCount + 1."
        ),
    )
    update_job = strawberry.mutation(
        resolver=mutations.update_job,
        graphql_type=Job,
        extensions=allowed(Action.EDIT),
        description=(
            "ADMIN, or the PRODUCER that enqueued it (priority within its maxPriority): only while PENDING,"
            " else CONFLICT."
        ),
    )
    run_job_now = strawberry.mutation(
        resolver=mutations.run_job_now,
        graphql_type=Job,
        extensions=allowed(Action.EDIT),
        description=(
            "As updateJob with runAt = now: due at once (still subject to dependencies, pauses and limits)."
        ),
    )
    put_schedule = strawberry.mutation(
        resolver=schedules.put_schedule,
        graphql_type=Schedule,
        extensions=allowed(Action.SCHEDULE),
        description="ADMIN: create the schedule, or replace the one with this name.",
    )
    delete_schedule = strawberry.mutation(
        resolver=schedules.delete_schedule,
        extensions=allowed(Action.SCHEDULE),
        description="ADMIN: false when there was no such schedule. Jobs it already enqueued stay.",
    )
    pause_schedule = strawberry.mutation(
        resolver=schedules.pause_schedule,
        graphql_type=Schedule,
        extensions=allowed(Action.SCHEDULE),
        description="ADMIN: no tick enqueues a job until resumeSchedule.",
    )
    resume_schedule = strawberry.mutation(
        resolver=schedules.resume_schedule,
        graphql_type=Schedule,
        extensions=allowed(Action.SCHEDULE),
        description="ADMIN: ticks go on from the next one; those missed while paused are not enqueued.",
    )
    # Section 12: a schedule's job now, and job types added at runtime.
    run_schedule_now = strawberry.mutation(
        resolver=schedules.run_schedule_now,
        graphql_type=Job,
        extensions=allowed(Action.SCHEDULE),
        description=(
            "ADMIN: enqueue the schedule's job now, outside its ticks (idempotency key "
            "`<name>@manual-<unique>`), even while it is paused and whatever its overlap; its "
            "ticks, lastRunAt and nextRunAt are unaffected."
        ),
    )
    add_job_type = strawberry.mutation(
        resolver=flow_control.add_job_type,
        graphql_type=TypeControl,
        extensions=allowed(Action.CONTROL),
        description=(
            "ADMIN: add a type to the allowlist at runtime (1..100 of A-Z a-z 0-9 _ . : -); "
            "every server obeys it within a second."
        ),
    )
    remove_job_type = strawberry.mutation(
        resolver=flow_control.remove_job_type,
        extensions=allowed(Action.CONTROL),
        description=(
            "ADMIN: remove a type added with addJobType (not one from QUEUELOG_JOB_TYPES): new "
            "enqueues are refused; its jobs stay. false when it was not added."
        ),
    )


@strawberry.type
class Subscription:
    job_updated = strawberry.subscription(
        resolver=subscriptions.job_updated,
        graphql_type=Job,
        extensions=allowed(Action.READ),
        description="The job as it is now, then again after every change, until it is terminal.",
    )
    job_events = strawberry.subscription(
        resolver=subscriptions.job_events,
        extensions=allowed(Action.READ),
        description=(
            "Every job event visible to the caller, optionally filtered by type, status and kind"
            " (kinds: any JobEvent.kind; an unknown one is BAD_USER_INPUT)."
        ),
    )
