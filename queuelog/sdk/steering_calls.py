"""Steering a job after enqueue (docs/python.md, "Steering jobs"; API.md section 12): editing a
PENDING job, and making it due now. Cancelling is `cancel_job` (producer_calls.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from queuelog.sdk.inputs import moment_text
from queuelog.sdk.session import Session
from queuelog.sdk.types import JOB_FIELDS, UNCHANGED, Job, Unchanged


class SteeringCalls(Session):
    async def update_job(
        self,
        id: str,
        *,
        run_at: datetime | str | Unchanged = UNCHANGED,
        priority: str | Unchanged = UNCHANGED,
        max_retries: int | Unchanged = UNCHANGED,
        expires_at: datetime | str | None | Unchanged = UNCHANGED,
    ) -> Job:
        """ADMIN, or the PRODUCER that enqueued it: change a PENDING job. A field left out
        stays as it is; `expires_at=None` clears the expiry (the others cannot be None).
        `run_at` and `expires_at` as enqueue() takes them; the payload cannot change.

        Raises Conflict (the job is no longer PENDING), NotFound (no such job, or another
        producer's), Forbidden (a priority above the key's maxPriority), BadInput (an
        expires_at not later than the job's run_at and now, max_retries out of range);
        before sending, ValueError for a None run_at, priority or max_retries, or a time
        without an offset.
        """
        changes: dict[str, Any] = {}
        for name, value in (("run_at", run_at), ("priority", priority), ("max_retries", max_retries)):
            if value is None:
                raise ValueError(f"{name} cannot be None: leave it out to keep the job's")
        if not isinstance(run_at, Unchanged):
            changes["runAt"] = moment_text(run_at, "run_at")
        if not isinstance(priority, Unchanged):
            changes["priority"] = priority.upper()
        if not isinstance(max_retries, Unchanged):
            changes["maxRetries"] = max_retries
        if not isinstance(expires_at, Unchanged):
            changes["expiresAt"] = None if expires_at is None else moment_text(expires_at, "expires_at")
        data = await self.execute(
            "mutation($id: ID!, $input: UpdateJobInput!) { updateJob(id: $id, input: $input)"
            f" {{ {JOB_FIELDS} }} }}",
            {"id": id, "input": changes},
        )
        return Job.from_graphql(data["updateJob"])

    async def run_job_now(self, id: str) -> Job:
        """`update_job` with run_at now: the PENDING job is due at once (still subject to its
        dependencies, pauses and limits). Raises what update_job raises."""
        data = await self.execute(
            f"mutation($id: ID!) {{ runJobNow(id: $id) {{ {JOB_FIELDS} }} }}", {"id": id}
        )
        return Job.from_graphql(data["runJobNow"])
