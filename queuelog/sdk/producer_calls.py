"""The calls of producers and readers (docs/python.md, "Producers and readers")."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

from queuelog.enqueue_request import EnqueueRequest
from queuelog.sdk.inputs import arguments_of, enqueue_item_request, enqueue_request
from queuelog.sdk.types import (
    JOB_FIELDS,
    NEW_JOB_FIELDS,
    Enqueued,
    EnqueuedJob,
    EnqueueItem,
    Job,
    JobWaiter,
    QueueStats,
)
from queuelog.sdk.watch_calls import WatchCalls
from queuelog.sdk.wire import PAGE_SIZE


class ProducerCalls(WatchCalls):  # WatchCalls: the job enqueue answers waits with its `wait`
    @arguments_of(enqueue_request)
    async def enqueue(self, request: EnqueueRequest[str, str]) -> EnqueuedJob[Awaitable[Job]]:
        """Enqueue one job; the Job answered has `created`: False when an earlier job with the
        same idempotency key (and the same input) was answered instead, and `wait(timeout)`:
        this client's `wait` for it (`await job.wait(30)`). `run_at`: not claimed
        before then; an aware datetime, or an ISO-8601 string with an offset
        ("2030-01-01T09:00:00Z", "...+02:00"). `expires_at`: likewise; still PENDING then, it
        becomes CANCELLED (error `expired`) and is never claimed. `depends_on`:
        the jobs it waits for (ids, Job or Enqueued objects; one or a sequence): it stays
        PENDING, with `waiting_for` > 0, and is claimed only once every one of them is
        COMPLETED.

        Raises BadInput (a type outside the allowlist, bad arguments, over 100 dependencies),
        NotFound (a dependency this key cannot see), Conflict (a dependency already FAILED or
        CANCELLED; an idempotency key reused with other input), Forbidden, PayloadTooLarge,
        Unauthenticated, ServerUnreachable; before sending, TypeError for a dependency that is
        not an id or a job, or a run_at that is neither a datetime nor a string, and ValueError
        for a run_at without an offset (a naive datetime) or not in ISO 8601.
        """
        data = await self.execute(
            "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) "
            f"{{ created job {{ {JOB_FIELDS} }} }} }}",
            {"input": request.as_input()},
        )
        answer = data["enqueueJob"]
        job: EnqueuedJob[Awaitable[Job]] = EnqueuedJob.from_graphql(answer["job"])
        return job.with_created(answer["created"]).with_waiter(JobWaiter(self.wait))

    async def enqueue_many(self, items: Sequence[EnqueueItem | dict[str, Any]]) -> list[Enqueued]:
        """Enqueue several jobs at once, all or nothing; the answers come in the items' order.

        Each item is a dict of enqueue()'s arguments (`{"type": "email", "payload": {...},
        "depends_on": [job]}`, see EnqueueItem), plus `depends_on_items`: the 0-based indexes
        of earlier items of this call that the job waits for, so a whole graph goes in at
        once. A chain: `[{"type": "a"}, {"type": "b", "depends_on_items": [0]}, {"type": "c",
        "depends_on_items": [1]}]`; a fan-in: `[{"type": "part"}, {"type": "part"}, {"type":
        "join", "depends_on_items": [0, 1]}]`.

        Raises what enqueue() raises, for any item (then none is enqueued); BadInput also for
        an index that is not of an earlier item; TypeError for a key enqueue() does not take.
        """
        inputs = [enqueue_item_request(item).as_input() for item in items]
        data = await self.execute(
            "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) "
            f"{{ created job {{ {NEW_JOB_FIELDS} }} }} }}",
            {"inputs": inputs},
        )
        return [Enqueued(Job.from_graphql(e["job"]), e["created"]) for e in data["enqueueJobs"]]

    async def get(self, id: str) -> Job | None:
        data = await self.execute(f"query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} }} }}", {"id": id})
        return Job.from_graphql(data["job"]) if data.get("job") else None

    async def list(self, status: str | None = None, type: str | None = None) -> AsyncIterator[Job]:
        """Every job visible to this key, newest first, fetching page after page."""
        after: str | None = None
        while True:
            data = await self.execute(
                "query($status: JobStatus, $type: String, $first: Int!, $after: String) {"
                " jobs(status: $status, type: $type, first: $first, after: $after) {"
                f" nodes {{ {JOB_FIELDS} }} pageInfo {{ hasNextPage endCursor }} }} }}",
                {
                    "status": status.upper() if status else None,
                    "type": type,
                    "first": PAGE_SIZE,
                    "after": after,
                },
            )
            page = data["jobs"]
            for node in page["nodes"]:
                yield Job.from_graphql(node)
            if not page["pageInfo"]["hasNextPage"]:
                return
            after = page["pageInfo"]["endCursor"]

    async def cancel_job(self, id: str) -> Job:
        """Cancel a PENDING job (answered CANCELLED), or ask a RUNNING one to stop (answered
        still RUNNING with `cancel_requested`; its worker is told within a second and the job
        ends CANCELLED, unless it completes first). `cancel` is the same call.

        Raises Conflict (COMPLETED, FAILED or CANCELLED), NotFound, Forbidden.
        """
        data = await self.execute(
            f"mutation($id: ID!) {{ cancelJob(id: $id) {{ {JOB_FIELDS} }} }}", {"id": id}
        )
        return Job.from_graphql(data["cancelJob"])

    cancel = cancel_job

    async def retry(self, id: str) -> Job:
        data = await self.execute(
            f"mutation($id: ID!) {{ retryJob(id: $id) {{ {JOB_FIELDS} }} }}", {"id": id}
        )
        return Job.from_graphql(data["retryJob"])

    async def stats(self) -> QueueStats:
        counts = "pending running completed failed cancelled"
        data = await self.execute(
            f"{{ queueStats {{ counts {{ {counts} }} byType {{ type counts {{ {counts} }} }} "
            "oldestPendingSeconds } }"
        )
        stats = data["queueStats"]
        return QueueStats(
            counts=stats["counts"],
            by_type={t["type"]: t["counts"] for t in stats["byType"]},
            oldest_pending_seconds=stats["oldestPendingSeconds"],
        )
