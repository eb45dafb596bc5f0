"""The dashboard's own reads, word for word, and their latency on a big queue (issue 8 part 3).

The documents below are the ones the page sends, from queuelog/web/static/dashboard/queries.js
(whitespace aside); tests/browser/test_browser.py checks that every query the page posts is one of
them, so that these rows time what the page really asks. `dashboard_latencies` sends each
view the page can show, and each poll it repeats, one request at a time on a keep-alive
connection, with one key (figure 6 runs it for four, each seeing the table differently).
"""

from __future__ import annotations

import time
from typing import Any

from bench._common import HttpConnection, bearer, graphql_body
from queuelog.resolvers.ids import encode_cursor

PAGE_SIZE = 25
STATUSES = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
COUNT_FIELDS = "pending running completed failed cancelled"
ROW_FIELDS = "id type status priority attempt createdAt updatedAt scheduleName waitingFor"
DETAIL_FIELDS = (
    "id type payload priority status retryCount maxRetries attempt idempotencyKey workerId "
    "claimedAt leaseExpiresAt runAt finishedAt result createdAt updatedAt concurrencyKey timeoutSeconds "
    "waitingFor scheduleName cancelRequested expiresAt snoozeCount progress progressMessage progressAt "
    "events(last: 50) { kind status at } dependsOn"
)
SIGN_IN = "query Me { me { name roles maxPriority } }"
STATS = (
    f"query Stats {{ queueStats {{ counts {{ {COUNT_FIELDS} }} oldestPendingSeconds "
    f"byType {{ type counts {{ {COUNT_FIELDS} }} }} throughput(minutes: 31) {{ at completed failed }} }} }}"
)
JOBS = (
    "query Jobs($status: JobStatus, $type: String, $scheduleName: String, $first: Int!, $after: String) { "
    "jobs(status: $status, type: $type, scheduleName: $scheduleName, first: $first, after: $after) { "
    f"totalCount pageInfo {{ hasNextPage endCursor }} nodes {{ {ROW_FIELDS} }} }} }}"
)
ATTEMPT_FIELDS = "attempt workerId claimedAt finishedAt outcome"
ATTEMPTS = f"attempts(last: 50) {{ {ATTEMPT_FIELDS} }}"
ATTEMPTS_ADMIN = f"attempts(last: 50) {{ {ATTEMPT_FIELDS} error }}"
DETAIL = f"query Job($id: ID!) {{ job(id: $id) {{ {DETAIL_FIELDS} {ATTEMPTS} }} }}"
# error, the job's and each attempt's: ADMIN's alone
DETAIL_ADMIN = f"query Job($id: ID!) {{ job(id: $id) {{ {DETAIL_FIELDS} {ATTEMPTS_ADMIN} error }} }}"
# The schedule filter's names (and the Schedules view), read at an ADMIN's or VIEWER's sign-in;
# not among `views`, which other roles time too (they may not read schedules).
SCHEDULES = "query Schedules { schedules { name type cron timezone paused nextRunAt lastRunAt lastJobId } }"
# Every query the page sends; its mutations (cancelJob, runJobNow, updateJob, retryJob) are
# actions, not views.
QUERIES = frozenset({SIGN_IN, STATS, JOBS, DETAIL, DETAIL_ADMIN, SCHEDULES, "query Me { me { name } }"})


def normalized(document: str) -> str:
    return " ".join(document.split())


def views(job_type: str, newest_id: int, detail_id: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (document, variables): every view of the page, and what each poll repeats."""

    def page(status: str | None = None, type: str | None = None, after: int | None = None) -> Any:
        variables = {"status": status, "type": type, "scheduleName": None, "first": PAGE_SIZE, "after": None}
        if after is not None:
            variables["after"] = encode_cursor(after)
        return JOBS, variables

    found: dict[str, tuple[str, dict[str, Any]]] = {
        "sign in (me)": (SIGN_IN, {}),
        "overview (queueStats, byType)": (STATS, {}),
        "jobs, newest 25": page(),
        "jobs, next page": page(after=newest_id - PAGE_SIZE + 1),
        "jobs, 25 from the middle of the table": page(after=newest_id // 2),
    }
    for status in STATUSES:
        found[f"jobs, {status}"] = page(status)
    found[f'jobs, type "{job_type}"'] = page(type=job_type)
    for status in STATUSES:
        found[f'jobs, {status} + "{job_type}"'] = page(status, job_type)
    found["job detail with its 50 newest events"] = (DETAIL, {"id": str(detail_id)})
    return found


async def dashboard_latencies(
    url: str,
    key: str,
    plan: dict[str, tuple[str, dict[str, Any]]],
    samples: int,
    budget_s: float,
    admin: bool,
) -> dict[str, list[float]]:
    """view -> seconds per request, each view up to `samples` times (at least 3), interleaved,
    within `budget_s` of its own time. An ADMIN key's detail also asks for `error`, as the
    page does."""
    connection = HttpConnection(url, bearer(key))
    bodies = {}
    for name, (document, variables) in plan.items():
        bodies[name] = graphql_body(DETAIL_ADMIN if admin and document == DETAIL else document, variables)
    latencies: dict[str, list[float]] = {name: [] for name in bodies}
    try:
        for body in bodies.values():  # one untimed warm-up each
            await connection.post("/graphql", body)
        for i in range(samples):
            for name, body in bodies.items():
                if i >= 3 and sum(latencies[name]) > budget_s:
                    continue
                started = time.perf_counter()
                status, answer = await connection.post("/graphql", body)
                elapsed = time.perf_counter() - started
                if status != 200 or b'"errors"' in answer:
                    raise RuntimeError(f"{name} answered {status}: {answer[:300]!r}")
                latencies[name].append(elapsed)
    finally:
        await connection.close()
    return latencies
