"""Flow control (docs/python.md, "Flow control"; API.md sections 9 and 11): type controls,
and cancelling or retrying the jobs a filter matches."""

from __future__ import annotations

import builtins
from datetime import datetime

from queuelog.sdk.inputs import job_filter, moment_text, type_control_input
from queuelog.sdk.session import Session
from queuelog.sdk.types import TYPE_CONTROL_FIELDS, UNCHANGED, RateLimitSpec, TypeControl, Unchanged

# A caller's loop ends when a call changes nothing this many times in a row, even if the
# server still says `more` (jobs it may not change, or ones changed by others meanwhile).
BULK_IDLE_ROUNDS = 3


class FlowControlCalls(Session):
    async def type_controls(self) -> builtins.list[TypeControl]:
        """Every allowlisted job type with its controls and RUNNING count, in type order.

        Raises Unauthenticated (a bad key), ServerUnreachable.
        """
        data = await self.execute(f"{{ typeControls {{ {TYPE_CONTROL_FIELDS} }} }}")
        return [TypeControl.from_graphql(c) for c in data["typeControls"]]

    async def pause_type(self, type: str, until: datetime | str | None = None) -> TypeControl:
        """ADMIN: claim no job of `type` (on any server) until `resume_type`, or until `until`
        when given (an aware datetime or an ISO-8601 string with an offset). Enqueues go on;
        RUNNING jobs finish. Returns the type's controls once the pause is stored.

        Raises Forbidden (not an ADMIN key), BadInput (a type outside the server's allowlist),
        Unauthenticated, ServerUnreachable; before sending, ValueError for an `until` without
        an offset (a naive datetime).
        """
        data = await self.execute(
            f"mutation($type: String!, $until: DateTime) {{ pauseType(type: $type, until: $until)"
            f" {{ {TYPE_CONTROL_FIELDS} }} }}",
            {"type": type, "until": moment_text(until, "until") if until is not None else None},
        )
        return TypeControl.from_graphql(data["pauseType"])

    async def resume_type(self, type: str) -> TypeControl:
        """ADMIN: end the type's pause; claims waiting for it wake.

        Raises Forbidden, BadInput (a type outside the allowlist), Unauthenticated,
        ServerUnreachable.
        """
        data = await self.execute(
            f"mutation($type: String!) {{ resumeType(type: $type) {{ {TYPE_CONTROL_FIELDS} }} }}",
            {"type": type},
        )
        return TypeControl.from_graphql(data["resumeType"])

    async def set_type_control(
        self,
        type: str,
        *,
        max_running: int | None | Unchanged = UNCHANGED,
        max_running_per_key: int | None | Unchanged = UNCHANGED,
        rate_limit: RateLimitSpec | None | Unchanged = UNCHANGED,
        timeout_seconds: int | None | Unchanged = UNCHANGED,
    ) -> TypeControl:
        """ADMIN: change the limits given and return the type's control. A limit left out stays
        as it is; `None` clears it. Pausing is separate (`pause_type`).

        `rate_limit`: a RateLimit, `(limit, period_seconds)` or `(limit, period_seconds,
        per_key)`. Raises TypeError for any other shape (before sending), BadInput (a type
        outside the allowlist, a number out of range), Forbidden, Unauthenticated,
        ServerUnreachable.
        """
        item = type_control_input(
            type,
            {
                "maxRunning": max_running,
                "maxRunningPerKey": max_running_per_key,
                "rateLimit": rate_limit,
                "timeoutSeconds": timeout_seconds,
            },
        )
        data = await self.execute(
            "mutation($input: TypeControlInput!) { setTypeControl(input: $input)"
            f" {{ {TYPE_CONTROL_FIELDS} }} }}",
            {"input": item},
        )
        return TypeControl.from_graphql(data["setTypeControl"])

    async def add_job_type(self, type: str) -> TypeControl:
        """ADMIN: add `type` to the allowlist of every server sharing the database (within a
        second, without a restart); its controls come back. Adding one already allowed
        changes nothing.

        Raises BadInput (a malformed name: 1..100 of A-Z a-z 0-9 _ . : -), Forbidden,
        Unauthenticated, ServerUnreachable.
        """
        data = await self.execute(
            f"mutation($type: String!) {{ addJobType(type: $type) {{ {TYPE_CONTROL_FIELDS} }} }}",
            {"type": type},
        )
        return TypeControl.from_graphql(data["addJobType"])

    async def remove_job_type(self, type: str) -> bool:
        """ADMIN: remove a type added with add_job_type: new enqueues of it are refused, its
        jobs stay (and can be claimed). False when it had not been added.

        Raises BadInput (a type of the server's QUEUELOG_JOB_TYPES, which cannot be removed
        this way), Forbidden, Unauthenticated, ServerUnreachable.
        """
        data = await self.execute("mutation($type: String!) { removeJobType(type: $type) }", {"type": type})
        return bool(data["removeJobType"])

    async def cancel_jobs(
        self,
        status: str | None = None,
        type: str | None = None,
        concurrency_key: str | None = None,
        created_before: datetime | str | None = None,
        *,
        chunk: int = 1000,
        include_running: bool = False,
    ) -> int:
        """Cancel the PENDING jobs that match every filter given and that this key may cancel
        (ADMIN: any; PRODUCER: its own), oldest first, `chunk` (1..10000) a call, calling
        again while the server says more match. Returns how many were cancelled.
        `include_running`: ask the matching RUNNING jobs to stop as well, as cancel_job does
        (counted when asked: they end CANCELLED unless they complete first).

        Jobs enqueued while it runs are cancelled too when they match: pass
        `created_before` to leave them be. Raises BadInput (neither status nor type, a
        chunk out of range), Forbidden (a key that may cancel nothing), Unauthenticated,
        ServerUnreachable (after some calls may have applied: call again to go on); before
        sending, ValueError for a `created_before` without an offset (a naive datetime).
        """
        return await self._bulk(
            "cancelJobs",
            status,
            type,
            concurrency_key,
            created_before,
            chunk,
            include_running=include_running,
        )

    async def retry_jobs(
        self,
        status: str | None = None,
        type: str | None = None,
        concurrency_key: str | None = None,
        created_before: datetime | str | None = None,
        *,
        chunk: int = 1000,
    ) -> int:
        """ADMIN: retry the FAILED or CANCELLED jobs that match every filter given, as `retry`
        does, oldest first, `chunk` (1..10000) a call, calling again while the server says
        more match. Returns how many were retried.

        A job that fails again while the loop runs may be retried again (and counted
        twice). Raises BadInput (neither status nor type, a chunk out of range), Forbidden
        (not ADMIN), Unauthenticated, ServerUnreachable (after some calls may have applied);
        ValueError for a naive `created_before`, as in cancel_jobs.
        """
        return await self._bulk("retryJobs", status, type, concurrency_key, created_before, chunk)

    async def _bulk(
        self,
        mutation: str,
        status: str | None,
        type: str | None,
        concurrency_key: str | None,
        created_before: datetime | str | None,
        chunk: int,
        *,
        include_running: bool = False,
    ) -> int:
        running = ", includeRunning: true" if include_running else ""
        query = (
            f"mutation($filter: JobFilter!, $limit: Int!) {{ {mutation}(filter: $filter,"
            f" limit: $limit{running}) {{ count more }} }}"
        )
        variables = {"filter": job_filter(status, type, concurrency_key, created_before), "limit": chunk}
        total = idle = 0
        while True:
            outcome = (await self.execute(query, variables))[mutation]
            total += outcome["count"]
            idle = 0 if outcome["count"] else idle + 1
            if not outcome["more"] or idle >= BULK_IDLE_ROUNDS:
                return total
