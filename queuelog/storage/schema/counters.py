"""The `job_counts` bookkeeping: which counter rows a job is counted in, and reading them.

Every transition subtracts a job from the rows of its old state and adds it to those of
the new one, in the transaction that makes the transition; stats and totals then read a
handful of rows instead of counting the table. Scopes: '*' (all jobs), 'p' (by creator),
'w' (by worker) and 's' (created and worked by the same name: a key with both roles sees
p + w - s, each job once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TypeVar

from queuelog.model import JobScope, JobStatus, StatusCounts

CountKey = tuple[str, str, str, str]  # scope, name, type, status
MinuteKey = tuple[str, str, int, str]  # scope, name, minute since 1970, status
K = TypeVar("K")
# A transition: type, created_by, then status and worker_id before and after (None: absent).
Move = tuple[str, str, "str | None", "str | None", "str | None", "str | None"]
ALL, PRODUCER, WORKER, SELF = "*", "p", "w", "s"
STATUS_TEXT = {status: status.value for status in JobStatus}
FINISHED = frozenset({STATUS_TEXT[JobStatus.COMPLETED], STATUS_TEXT[JobStatus.FAILED]})
MINUTES_KEPT = 24 * 60  # job_minutes rows older than this are pruned
MICROS_PER_MINUTE = 60_000_000  # job_minutes.minute: microseconds since the epoch // this


def count_keys(job_type: str, status: str, created_by: str, worker_id: str | None) -> list[CountKey]:
    keys = [(ALL, "", job_type, status), (PRODUCER, created_by, job_type, status)]
    if worker_id is not None:
        keys.append((WORKER, worker_id, job_type, status))
        if worker_id == created_by:
            keys.append((SELF, worker_id, job_type, status))
    return keys


def net(moves: Iterable[Move]) -> list[tuple[CountKey, int]]:
    """The counter changes of these transitions, summed per row, without those that cancel."""
    total: Counter[CountKey] = Counter()
    for (job_type, created_by, old_status, old_worker, new_status, new_worker), n in Counter(moves).items():
        if old_status is not None:
            for key in count_keys(job_type, old_status, created_by, old_worker):
                total[key] -= n
        if new_status is not None:
            for key in count_keys(job_type, new_status, created_by, new_worker):
                total[key] += n
    return [(key, n) for key, n in total.items() if n]


def finished(moves: Iterable[Move], minute: int) -> list[tuple[MinuteKey, int]]:
    """The job_minutes rows to add to: each job that became COMPLETED or FAILED in this
    minute, once per scope that counts it (as job_counts does), in key order."""
    total: Counter[MinuteKey] = Counter()
    for (job_type, created_by, old_status, _, new_status, new_worker), n in Counter(moves).items():
        if new_status in FINISHED and old_status != new_status:
            for scope, name, _, status in count_keys(job_type, new_status, created_by, new_worker):
                total[(scope, name, minute, status)] += n
    return sorted(total.items())


def by_minute(
    rows: Iterable[tuple[str, str, int, str, int]], terms: list[tuple[str, str, int]]
) -> dict[int, dict[str, int]]:
    """Finished jobs per minute and status from (scope, name, minute, status, n) rows."""
    return _summed(rows, terms)


def scope_terms(scope: JobScope) -> list[tuple[str, str, int]]:
    """The counter rows (scope, name) to add (+1) or subtract (-1) for a caller's scope."""
    if scope.everything:
        return [(ALL, "", 1)]
    terms: list[tuple[str, str, int]] = []
    if scope.created_by is not None:
        terms.append((PRODUCER, scope.created_by, 1))
    if scope.worker_id is not None:
        terms.append((WORKER, scope.worker_id, 1))
        if scope.created_by == scope.worker_id:
            terms.append((SELF, scope.worker_id, -1))
    return terms


def by_type(
    rows: Iterable[tuple[str, str, str, str, int]], terms: list[tuple[str, str, int]]
) -> dict[str, dict[str, int]]:
    """Counts per type and status from (scope, name, type, status, n) rows of the terms' scopes."""
    return {t: c for t, c in _summed(rows, terms).items() if any(c.values())}


def _summed(
    rows: Iterable[tuple[str, str, K, str, int]], terms: list[tuple[str, str, int]]
) -> dict[K, dict[str, int]]:
    """key -> status -> n from (scope, name, key, status, n) rows, each scope with its sign."""
    signs = {(scope, name): sign for scope, name, sign in terms}
    found: dict[K, dict[str, int]] = {}
    for scope, name, key, status, n in rows:
        sign = signs.get((scope, name))
        if sign is not None:
            per_status = found.setdefault(key, {})
            per_status[status] = per_status.get(status, 0) + sign * n
    return found


def status_counts(per_status: dict[str, int]) -> StatusCounts:
    return StatusCounts(**{s.value: per_status.get(s.value, 0) for s in JobStatus})
