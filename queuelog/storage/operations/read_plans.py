"""Which index a read walks, chosen from the counters: pure functions from counts to a plan.
A bulk action's chunks read their jobs through the walk chosen here too (bulk.py).

SQLite has no statistics to choose between a caller's own index and a filter's, and
PostgreSQL's cannot know that status follows age; the counters (job_counts) know exactly how
many rows each walk passes. reads.py reads the counts, asks here, and runs the plan.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from queuelog.model import JobStatus
from queuelog.storage.statements import BulkWalk

# type -> status value -> jobs, as counters.by_type gives them.
Counts = dict[str, dict[str, int]]


class Walk(enum.Enum):
    NOTHING = enum.auto()  # no matching job: no read
    SCOPE = enum.auto()  # the caller's index (by creator or worker, then status), status by status
    FILTER = enum.auto()  # the filter's index (or the primary key), testing the caller
    FILTER_BY_STATUS = enum.auto()  # the filter's index once per status, the pages merged


class OldestPending(enum.Enum):
    NOTHING = enum.auto()  # no due PENDING job in the scope: no read
    EVERY_PENDING = enum.auto()  # every pending job's (ix_jobs_lag, ix_jobs_delayed)
    AMONG_OWN = enum.auto()  # the creator's own PENDING jobs (ix_jobs_creator_status)
    OWN_AMONG_PENDING = enum.auto()  # the creator's among every pending job (ix_jobs_lag, ...)


def matching(counts: Counts, status: JobStatus | None, job_type: str | None) -> int:
    """The jobs counted with this status and type (None: any)."""
    total = 0
    for per_type, per_status in counts.items():
        if job_type is None or per_type == job_type:
            total += per_status.get(status.value, 0) if status is not None else sum(per_status.values())
    return total


@dataclass(frozen=True, slots=True)
class ListPlan:
    walk: Walk
    statuses: tuple[JobStatus | None, ...]  # the status each read asks for, one read each
    total: int  # the matching jobs: totalCount


def plan_list(
    mine: Counts,
    everyones: Counts,
    by_creator: bool,
    by_worker: bool,
    status: JobStatus | None,
    job_type: str | None,
    type_index: bool = True,
) -> ListPlan:
    """`jobs(status:, type:)` for a caller who sees `mine` of `everyones` jobs.

    A caller who sees only some jobs (by creator or by worker) walks its own index
    (ix_jobs_creator_status, ix_jobs_worker_status): each status it asks for (without a
    status filter, each status it has a matching job of) from its newest job, down to the
    page's end, the parts merged. Without a type filter, that walk passes only matching
    jobs: a worker's 20 newest COMPLETED jobs among its 500k are 20 rows. With one, it tests
    the type on each row, and the filter's index, testing the caller on each row instead,
    may pass fewer: of the two, the one that passes fewer rows per match, by the counters'
    proportions. The filter's index is split by status likewise, so that each part walks
    jobs of one status: status follows age (the newest jobs are pending, the oldest
    finished), so one walk through every status would pass the whole backlog of others'
    pending jobs before reaching a worker's finished ones (82 ms at 1M jobs).

    Without an index of a type's jobs in id order (`type_index` False: PostgreSQL, where
    every index costs an entry at each transition), a type filter alone walks the (type,
    status) index once per status the type has jobs in, and the pages are merged.
    """
    total = matching(mine, status, job_type)
    if total == 0:
        return ListPlan(Walk.NOTHING, (), 0)
    scoped = by_creator != by_worker
    if not scoped and (status is not None or job_type is None or type_index):
        return ListPlan(Walk.FILTER, (status,), total)
    parts = (status,) if status is not None else tuple(s for s in JobStatus if matching(mine, s, job_type))
    if scoped:
        if job_type is None:
            return ListPlan(Walk.SCOPE, parts, total)
        own_per_match = max(matching(mine, s, None) / matching(mine, s, job_type) for s in parts)
        filter_per_match = max(matching(everyones, s, job_type) / matching(mine, s, job_type) for s in parts)
        if own_per_match <= filter_per_match:
            return ListPlan(Walk.SCOPE, parts, total)
    # A type filter whose jobs here are all of one status reads as that status.
    return ListPlan(Walk.FILTER if len(parts) == 1 else Walk.FILTER_BY_STATUS, parts, total)


def plan_oldest_pending(everything: bool, creator: bool, mine: Counts, everyones: Counts) -> OldestPending:
    """`oldestPendingSeconds`: through whichever walk passes fewer rows. The creator's own
    walk passes its PENDING jobs; the other goes type by type from the head of every due
    job (ix_jobs_lag, ix_jobs_delayed) to the creator's first, passing, by the counters'
    proportions, everyone's PENDING jobs of the type per one of the creator's: a producer
    of most of the queue finds its oldest at once (one probe per type), a producer of 20
    jobs among 500k reads its 20. A scope of a worker alone has none (a PENDING job never
    has a worker_id)."""
    if not everything and not creator:
        return OldestPending.NOTHING
    own = matching(mine, JobStatus.PENDING, None)
    if own == 0:
        return OldestPending.NOTHING
    if everything:
        return OldestPending.EVERY_PENDING
    per_type = [
        matching(everyones, JobStatus.PENDING, job_type) / matching(mine, JobStatus.PENDING, job_type)
        for job_type in mine
        if matching(mine, JobStatus.PENDING, job_type)
    ]
    if own < sum(per_type):
        return OldestPending.AMONG_OWN
    return OldestPending.OWN_AMONG_PENDING


def plan_held_of_creator(
    created: Counts, held: Counts, status: JobStatus | None, job_type: str | None
) -> Walk:
    """The jobs of one creator (a schedule's) that a worker holds, of this status and type:
    `created` counts the creator's jobs, `held` the worker's. NOTHING when either has none
    that match; else the index holding fewer rows: SCOPE, the worker's (testing the
    creator), or FILTER, the creator's (testing the worker)."""
    if matching(created, status, job_type) == 0 or matching(held, status, job_type) == 0:
        return Walk.NOTHING
    return Walk.SCOPE if matching(held, None, None) < matching(created, None, None) else Walk.FILTER


def plan_bulk(
    mine: Counts, everyones: Counts, by_creator: bool, statuses: Sequence[JobStatus], job_type: str | None
) -> tuple[tuple[JobStatus, BulkWalk], ...]:
    """`cancelJobs`/`retryJobs` over these statuses for a caller who may change `mine` of
    `everyones` jobs (a producer: its own; an ADMIN: all, `mine` is `everyones`): each
    status to read and its walk. A status with no job of the type in `mine` is not read.

    A type filter walks the type's index only where the type is less than half of the
    status: where it is more, the status's index passes at most two rows per match, and
    PostgreSQL, whose statistics say the same, would walk the status's index anyway (testing
    the type on rows its LIMIT does not count, so that a walk bounded by rows of the type
    would not be bounded by rows passed). A producer walks its own PENDING jobs, unless the
    filter's walk passes fewer rows."""
    parts: list[tuple[JobStatus, BulkWalk]] = []
    for status in statuses:
        if matching(mine, status, job_type) == 0:
            continue
        of_status = matching(everyones, status, None)
        of_type = matching(everyones, status, job_type)
        walk, passes = BulkWalk.STATUS, of_status
        if job_type is not None and 2 * of_type < of_status:
            walk, passes = BulkWalk.TYPE_STATUS, of_type
        if by_creator and status is JobStatus.PENDING and matching(mine, status, None) <= passes:
            walk = BulkWalk.CREATOR
        parts.append((status, walk))
    return tuple(parts)
