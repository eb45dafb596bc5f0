"""The worker's calls (docs/python.md, "Worker calls"): claims, heartbeats and reports, each
passing the attempt the claim returned. The `*_data` and `*_encoded` forms select and send
only what the worker needs, over the worker's faster transport where the URL allows."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any

from queuelog.sdk.session import DEFAULT_TIMEOUT, Session
from queuelog.sdk.types import WORKER_JOB_FIELDS, Completed, Job
from queuelog.sdk.wire import PAGE_SIZE, encode_json

COMPLETE_MANY = (
    "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) {"
    " completed { id status } rejected } }"
)
# Only what the worker needs back from a batch: the completed jobs cost the server a Job
# object each to render, and the worker reads nothing from them.
COMPLETE_MANY_REJECTED = "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) { rejected } }"
_COMPLETE_MANY_REJECTED_BODY_START = (
    b'{"query":' + json.dumps(COMPLETE_MANY_REJECTED).encode() + b',"variables":{"items":['
)


REPORT_PROGRESS = (
    "mutation($id: ID!, $attempt: Int!, $progress: Float!, $message: String) {"
    " reportProgress(id: $id, attempt: $attempt, progress: $progress, message: $message)"
    f" {{ {WORKER_JOB_FIELDS} }} }}"
)


class WorkerCalls(Session):
    async def claim(
        self,
        limit: int = 1,
        *,
        types: Sequence[str] | None = None,
        lease_seconds: int | None = None,
        wait_seconds: int = 0,
    ) -> builtins.list[Job]:
        data = await self.execute(
            "mutation($limit: Int!, $types: [String!], $lease: Int, $wait: Int) {"
            " claimJobs(limit: $limit, types: $types, leaseSeconds: $lease, waitSeconds: $wait)"
            f" {{ {WORKER_JOB_FIELDS} }} }}",
            {
                "limit": limit,
                "types": list(types) if types is not None else None,
                "lease": lease_seconds,
                "wait": wait_seconds,
            },
            timeout=DEFAULT_TIMEOUT + wait_seconds,
        )
        return [Job.from_graphql(j) for j in data["claimJobs"]]

    async def claim_data(
        self,
        limit: int,
        fields: str,
        *,
        types: Sequence[str] | None = None,
        wait_seconds: int = 0,
    ) -> builtins.list[dict[str, Any]]:
        """`claim`, returning the claimed jobs as GraphQL objects with only `fields` selected
        (camelCase, nothing converted): what the worker reads of every job, and no more."""
        query = (
            "mutation($limit: Int!, $types: [String!], $wait: Int) {"
            f" claimJobs(limit: $limit, types: $types, waitSeconds: $wait) {{ {fields} }} }}"
        )
        variables = {
            "limit": limit,
            "types": list(types) if types is not None else None,
            "wait": wait_seconds,
        }
        data = await self.post_json(
            encode_json({"query": query, "variables": variables}),
            self.timeout + wait_seconds,
            plain=True,
        )
        return data["claimJobs"]

    async def heartbeat(self, id: str, attempt: int, lease_seconds: int | None = None) -> Job:
        data = await self.execute(
            "mutation($id: ID!, $attempt: Int, $lease: Int) {"
            f" heartbeatJob(id: $id, attempt: $attempt, leaseSeconds: $lease) {{ {WORKER_JOB_FIELDS} }} }}",
            {"id": id, "attempt": attempt, "lease": lease_seconds},
        )
        return Job.from_graphql(data["heartbeatJob"])

    async def complete(self, id: str, attempt: int, result: Any = None) -> Job:
        data = await self.execute(
            "mutation($id: ID!, $attempt: Int, $result: JSON) {"
            f" completeJob(id: $id, attempt: $attempt, result: $result) {{ {WORKER_JOB_FIELDS} }} }}",
            {"id": id, "attempt": attempt, "result": result},
        )
        return Job.from_graphql(data["completeJob"])

    async def complete_many(self, items: Sequence[tuple[str, int, Any]]) -> Completed:
        """Complete (id, attempt, result) items in one call; the rejected ids come back."""
        data = await self.execute(
            COMPLETE_MANY, {"items": [{"id": i, "attempt": a, "result": r} for i, a, r in items]}
        )
        outcome = data["completeJobs"]
        return Completed(completed=[j["id"] for j in outcome["completed"]], rejected=outcome["rejected"])

    async def complete_encoded(self, items: Sequence[bytes]) -> builtins.list[str]:
        """`complete_many` for items already encoded as JSON `CompleteJobInput` objects
        (`{"id":..,"attempt":..,"result":..}`); returns only the rejected ids."""
        body = b"".join((_COMPLETE_MANY_REJECTED_BODY_START, b",".join(items), b"]}}"))
        # Safe to repeat: a second copy of an item that applied is rejected and changes nothing.
        data = await self.post_json(body, plain=True, idempotent=True)
        return data["completeJobs"]["rejected"]

    async def complete_and_claim_data(
        self, items: Sequence[bytes], limit: int, fields: str, *, types: Sequence[str] | None = None
    ) -> tuple[builtins.list[str], builtins.list[dict[str, Any]]]:
        """`completeAndClaimJobs` for items encoded as in `complete_encoded`: the rejected ids,
        and the jobs claimed after the completions (GraphQL objects with only `fields`). Not
        repeated on a lost answer (a claim is not safe to repeat): the caller decides."""
        query = (
            "mutation($items: [CompleteJobInput!]!, $limit: Int!, $types: [String!]) {"
            " completeAndClaimJobs(items: $items, limit: $limit, types: $types) {"
            f" rejected claimed {{ {fields} }} }} }}"
        )
        rest = encode_json({"limit": limit, "types": list(types) if types is not None else None})
        body = b"".join(
            (
                b'{"query":',
                encode_json(query),
                b',"variables":{"items":[',
                b",".join(items),
                b"],",
                rest[1:],
                b"}",
            )
        )
        data = (await self.post_json(body, plain=True))["completeAndClaimJobs"]
        return data["rejected"], data["claimed"]

    async def running_data(self, fields: str) -> Sequence[dict[str, Any]]:
        """Every RUNNING job this key may see (a WORKER key: those held under its name), as
        GraphQL objects with only `fields` selected; page after page."""
        found: builtins.list[dict[str, Any]] = []
        after: str | None = None
        while True:
            data = await self.execute(
                "query($first: Int!, $after: String) { jobs(status: RUNNING, first: $first, after: $after) {"
                f" nodes {{ {fields} }} pageInfo {{ hasNextPage endCursor }} }} }}",
                {"first": PAGE_SIZE, "after": after},
            )
            page = data["jobs"]
            found.extend(page["nodes"])
            if not page["pageInfo"]["hasNextPage"]:
                return found
            after = page["pageInfo"]["endCursor"]

    async def job_state(self, id: str) -> tuple[str, int] | None:
        """(status, attempt) of a job this key may see, or None."""
        data = await self.execute("query($id: ID!) { job(id: $id) { status attempt } }", {"id": id})
        job = data.get("job")
        return (job["status"], job["attempt"]) if job else None

    async def fail(
        self,
        id: str,
        attempt: int,
        error: str,
        *,
        retryable: bool = True,
        retry_in_seconds: int | None = None,
    ) -> Job:
        data = await self.execute(
            "mutation($id: ID!, $attempt: Int, $error: String!, $retryable: Boolean!, $in: Int) {"
            " failJob(id: $id, attempt: $attempt, error: $error, retryable: $retryable,"
            f" retryInSeconds: $in) {{ {WORKER_JOB_FIELDS} }} }}",
            {"id": id, "attempt": attempt, "error": error, "retryable": retryable, "in": retry_in_seconds},
        )
        return Job.from_graphql(data["failJob"])

    async def snooze(self, id: str, attempt: int, seconds: int) -> Job:
        """`snoozeJob`: back to PENDING, due in `seconds` (1..86400), using no retry
        (`snooze_count` + 1). Conflict, NotFound (fencing, as `fail`), BadInput."""
        data = await self.execute(
            "mutation($id: ID!, $attempt: Int!, $seconds: Int!) {"
            f" snoozeJob(id: $id, attempt: $attempt, seconds: $seconds) {{ {WORKER_JOB_FIELDS} }} }}",
            {"id": id, "attempt": attempt, "seconds": seconds},
        )
        return Job.from_graphql(data["snoozeJob"])

    async def report_progress(
        self, id: str, attempt: int, progress: float, message: str | None = None
    ) -> Job:
        """`reportProgress`: store `progress` (0..1) and `message` (at most 200 characters) on
        the held job, for jobUpdated subscribers; it extends the lease as a heartbeat does.
        Conflict, NotFound (fencing, as `heartbeat`), BadInput."""
        data = await self.execute(
            REPORT_PROGRESS, {"id": id, "attempt": attempt, "progress": progress, "message": message}
        )
        return Job.from_graphql(data["reportProgress"])
