"""Reading the database straight (not through the API): controls, counters, the final state."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from history.deployment import Deployment, epoch
from history.model import ControlsRead, CountsSnapshot, EventRow, FinalState, JobRow

CONTROLS_SQL = (
    "SELECT type, paused, max_running, max_running_per_key, rate_limit, rate_period_seconds,"
    " rate_per_key, timeout_seconds FROM type_controls"
)
JOBS_SQL = (
    "SELECT id, type, status, concurrency_key, attempt, retry_count, max_retries, waiting_for,"
    " created_by, worker_id, idempotency_key, error, expires_at, snooze_count, progress FROM jobs ORDER BY id"
)
EVENTS_SQL = "SELECT id, job_id, kind, status, at FROM job_events ORDER BY id"
DEPENDENCIES_SQL = "SELECT job_id, depends_on FROM job_dependencies"
COUNTERS_SQL = "SELECT scope, name, type, status, SUM(n) FROM job_counts GROUP BY scope, name, type, status"
TABLE_COUNTS_SQL = "SELECT type, status, created_by, worker_id, COUNT(*) FROM jobs GROUP BY 1, 2, 3, 4"


def controls_of(rows: list[tuple[Any, ...]]) -> dict[str, dict[str, Any]]:
    """type -> the fields as the API names them (rateLimit as [limit, periodSeconds, perKey])."""
    found = {}
    for job_type, paused, max_running, per_key, rate, period, rate_per_key, timeout in rows:
        found[str(job_type)] = {
            "paused": bool(paused),
            "maxRunning": max_running,
            "maxRunningPerKey": per_key,
            "rateLimit": [rate, period, bool(rate_per_key)] if rate is not None else None,
            "timeoutSeconds": timeout,
        }
    return found


def read_controls(deployment: Deployment, phase: str) -> ControlsRead:
    send = time.time()
    rows = deployment.sql(CONTROLS_SQL)
    return ControlsRead(send, time.time(), controls_of(rows), phase)


def counter_key(scope: str, name: str, job_type: str, status: str) -> str:
    return f"{scope}|{name}|{job_type}|{status}"


def expected_counters(rows: list[tuple[Any, ...]]) -> dict[str, int]:
    """What job_counts should hold, from the jobs table grouped by type, status, creator and
    worker (storage/schema/counters.py: scopes '*', 'p', 'w', and 's' for jobs a name made and works)."""
    counts: Counter[str] = Counter()
    for job_type, status, created_by, worker_id, n in rows:
        counts[counter_key("*", "", job_type, status)] += n
        counts[counter_key("p", created_by, job_type, status)] += n
        if worker_id is not None:
            counts[counter_key("w", worker_id, job_type, status)] += n
            if worker_id == created_by:
                counts[counter_key("s", worker_id, job_type, status)] += n
    return {key: n for key, n in counts.items() if n}


def read_counts(deployment: Deployment, phase: str) -> CountsSnapshot:
    """The counters and the jobs table, in one transaction (one state of the database)."""
    at = time.time()
    with deployment.servers[0].snapshot() as run:
        counters = run(COUNTERS_SQL)
        table = run(TABLE_COUNTS_SQL)
    return CountsSnapshot(
        at=at,
        counters={counter_key(*row[:4]): int(row[4]) for row in counters if int(row[4])},
        table=expected_counters(table),
        phase=phase,
    )


def read_final(deployment: Deployment) -> FinalState:
    depends: dict[int, list[int]] = {}
    for job_id, depends_on in deployment.sql(DEPENDENCIES_SQL):
        depends.setdefault(int(job_id), []).append(int(depends_on))
    jobs = [
        JobRow(
            id=int(row[0]),
            type=row[1],
            status=row[2],
            concurrency_key=row[3],
            attempt=row[4],
            retry_count=row[5],
            max_retries=row[6],
            waiting_for=row[7],
            created_by=row[8],
            worker_id=row[9],
            idempotency_key=row[10],
            error=row[11],
            depends_on=sorted(depends.get(int(row[0]), [])),
            expires_at=None if row[12] is None else epoch(row[12]),
            snooze_count=int(row[13]),
            progress=None if row[14] is None else float(row[14]),
        )
        for row in deployment.sql(JOBS_SQL)
    ]
    events = [
        EventRow(int(row[0]), int(row[1]), row[2], row[3], epoch(row[4]))
        for row in deployment.sql(EVENTS_SQL)
    ]
    return FinalState(jobs=jobs, events=events)
