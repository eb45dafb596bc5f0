"""Which walk `jobs(...)` and `oldestPendingSeconds` choose, from the counters alone
(storage/operations/read_plans.py). The shapes are those of tests/storage/test_scoped_pages.py, which checks
that each walk gives the same exact pages."""

from __future__ import annotations

from queuelog.model import JobStatus
from queuelog.storage.operations.read_plans import (
    ListPlan,
    OldestPending,
    Walk,
    plan_bulk,
    plan_held_of_creator,
    plan_list,
    plan_oldest_pending,
)
from queuelog.storage.statements import BulkWalk

PENDING, RUNNING, COMPLETED, CANCELLED = (
    JobStatus.PENDING,
    JobStatus.RUNNING,
    JobStatus.COMPLETED,
    JobStatus.CANCELLED,
)


def counts(**per_type: dict[str, int]) -> dict[str, dict[str, int]]:
    return dict(per_type)


# A queue of 500 pending emails and reports from others, and 2,000 completed ones.
OTHERS = counts(email={"pending": 300, "completed": 1000}, report={"pending": 200, "completed": 1000})


def plus(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    together = {t: dict(s) for t, s in a.items()}
    for job_type, per_status in b.items():
        for status, n in per_status.items():
            together.setdefault(job_type, {})[status] = together.get(job_type, {}).get(status, 0) + n
    return together


def test_a_small_producer_filtering_walks_its_own_index() -> None:
    small = counts(email={"pending": 1, "cancelled": 1}, report={"pending": 1})
    everyone = plus(OTHERS, small)
    assert plan_list(small, everyone, True, False, PENDING, None) == ListPlan(Walk.SCOPE, (PENDING,), 2)
    assert plan_list(small, everyone, True, False, None, "email").walk is Walk.SCOPE
    assert plan_list(small, everyone, True, False, PENDING, "email") == ListPlan(Walk.SCOPE, (PENDING,), 1)


def test_a_big_producer_filtering_walks_the_filters_index() -> None:
    big = counts(email={"pending": 290}, report={"pending": 12}, resize={"pending": 300})
    everyone = plus(OTHERS, big)
    assert plan_list(big, everyone, True, False, PENDING, "report") == ListPlan(Walk.FILTER, (PENDING,), 12)
    # its resize jobs are all PENDING: the type filter reads as that status
    assert plan_list(big, everyone, True, False, None, "resize") == ListPlan(Walk.FILTER, (PENDING,), 300)


def test_a_type_filter_over_several_statuses_reads_each_status_of_the_filters_index() -> None:
    mixed = counts(email={"pending": 12}, report={"pending": 8, "cancelled": 4})
    assert plan_list(mixed, mixed, True, False, None, "report") == ListPlan(
        Walk.FILTER_BY_STATUS, (PENDING, CANCELLED), 12
    )
    worker = counts(email={"running": 6, "completed": 6}, report={"running": 8})
    everyone = counts(email={"running": 6, "completed": 6}, report={"running": 8})
    assert plan_list(worker, everyone, False, True, None, "email") == ListPlan(
        Walk.FILTER_BY_STATUS, (RUNNING, COMPLETED), 12
    )


def test_a_status_filter_alone_walks_the_callers_own_index_whoever_else_has_jobs() -> None:
    """(scope, status, id) passes only matching jobs: never more than the filter's index."""
    worker = counts(email={"running": 2, "completed": 1})
    everyone = plus(plus(OTHERS, counts(email={"running": 100})), worker)  # others hold 100
    assert plan_list(worker, everyone, False, True, RUNNING, None) == ListPlan(Walk.SCOPE, (RUNNING,), 2)
    assert plan_list(worker, plus(OTHERS, worker), False, True, RUNNING, None).walk is Walk.SCOPE
    busy = counts(email={"completed": 500_000, "running": 1})
    assert plan_list(busy, busy, False, True, COMPLETED, None) == ListPlan(Walk.SCOPE, (COMPLETED,), 500_000)


def test_no_matching_job_reads_nothing() -> None:
    mine = counts(email={"pending": 3})
    assert plan_list(mine, mine, True, False, JobStatus.FAILED, None) == ListPlan(Walk.NOTHING, (), 0)
    assert plan_list({}, OTHERS, False, True, None, None).walk is Walk.NOTHING


def test_without_a_filter_a_caller_walks_each_status_it_has_and_seeing_everything_the_filters() -> None:
    mine = counts(email={"pending": 3})
    assert plan_list(mine, OTHERS, True, False, None, None) == ListPlan(Walk.SCOPE, (PENDING,), 3)
    worker = counts(email={"running": 2, "completed": 5}, report={"completed": 1})
    assert plan_list(worker, OTHERS, False, True, None, None) == ListPlan(Walk.SCOPE, (RUNNING, COMPLETED), 8)
    assert plan_list(OTHERS, OTHERS, False, False, PENDING, "email") == ListPlan(Walk.FILTER, (PENDING,), 300)
    # a key with both roles sees (created_by = name OR worker_id = name): one walk
    assert plan_list(mine, OTHERS, True, True, PENDING, None) == ListPlan(Walk.FILTER, (PENDING,), 3)


def test_without_an_index_of_a_types_jobs_a_type_filter_walks_each_of_its_statuses() -> None:
    """PostgreSQL has no ix_jobs_type: `jobs(type:)` reads ix_jobs_type_status once per status
    the type has jobs in (SQLite, with the index, walks it once)."""
    assert plan_list(OTHERS, OTHERS, False, False, None, "email", type_index=False) == ListPlan(
        Walk.FILTER_BY_STATUS, (PENDING, COMPLETED), 1300
    )
    assert plan_list(OTHERS, OTHERS, False, False, None, "email") == ListPlan(Walk.FILTER, (None,), 1300)
    only_pending = counts(email={"pending": 3})
    assert plan_list(only_pending, OTHERS, True, True, None, "email", type_index=False) == ListPlan(
        Walk.FILTER, (PENDING,), 3
    )
    # a status filter, or a caller's own walk, is planned as before
    assert plan_list(OTHERS, OTHERS, False, False, PENDING, "email", type_index=False) == ListPlan(
        Walk.FILTER, (PENDING,), 300
    )
    small = counts(email={"pending": 1, "completed": 1})
    walk = plan_list(small, plus(OTHERS, small), True, False, None, "email", type_index=False).walk
    assert walk is Walk.SCOPE


def test_the_oldest_pending_job_is_found_through_the_walk_that_passes_fewer_rows() -> None:
    """The creator's own walk passes its PENDING jobs only, however many others it has; the
    walk of every due job passes, per type, everyone's PENDING jobs per one of its own."""
    small = counts(email={"pending": 20, "completed": 500_000})
    big = counts(email={"pending": 250_000}, report={"pending": 249_000})
    everyone = plus(small, big)
    assert plan_oldest_pending(False, True, small, everyone) is OldestPending.AMONG_OWN
    assert plan_oldest_pending(False, True, big, everyone) is OldestPending.OWN_AMONG_PENDING
    few_of_many = counts(email={"pending": 2})
    assert plan_oldest_pending(False, True, few_of_many, plus(few_of_many, OTHERS)) is OldestPending.AMONG_OWN
    assert plan_oldest_pending(True, False, everyone, everyone) is OldestPending.EVERY_PENDING


def test_no_pending_job_in_the_scope_reads_nothing() -> None:
    done = counts(email={"cancelled": 2})
    assert plan_oldest_pending(False, True, done, OTHERS) is OldestPending.NOTHING
    assert plan_oldest_pending(False, False, OTHERS, OTHERS) is OldestPending.NOTHING  # a worker alone


FAILED_ = JobStatus.FAILED


def test_a_bulk_call_reads_no_status_without_a_job_of_the_callers() -> None:
    mine = counts(email={"pending": 3})
    assert plan_bulk(mine, plus(OTHERS, mine), True, [PENDING], "report") == ()
    assert plan_bulk(OTHERS, OTHERS, False, [FAILED_, CANCELLED], None) == ()


def test_a_bulk_call_walks_a_types_index_only_where_the_type_is_few_among_its_status() -> None:
    everyone = plus(OTHERS, counts(resize={"pending": 20}))  # 520 pending: email 300, resize 20
    assert plan_bulk(everyone, everyone, False, [PENDING], "resize") == ((PENDING, BulkWalk.TYPE_STATUS),)
    assert plan_bulk(everyone, everyone, False, [PENDING], "email") == ((PENDING, BulkWalk.STATUS),)
    assert plan_bulk(everyone, everyone, False, [PENDING], None) == ((PENDING, BulkWalk.STATUS),)


def test_a_producers_cancel_walks_its_own_pending_jobs_unless_the_types_are_fewer() -> None:
    small = counts(email={"pending": 2, "completed": 5000})
    everyone = plus(plus(OTHERS, counts(resize={"pending": 20})), small)
    assert plan_bulk(small, everyone, True, [PENDING], None) == ((PENDING, BulkWalk.CREATOR),)
    assert plan_bulk(small, everyone, True, [PENDING], "email") == ((PENDING, BulkWalk.CREATOR),)
    big = counts(email={"pending": 290}, resize={"pending": 3})
    everyone = plus(OTHERS, big)
    assert plan_bulk(big, everyone, True, [PENDING], "resize") == ((PENDING, BulkWalk.TYPE_STATUS),)


def test_a_workers_schedule_jobs_are_read_through_the_smaller_index() -> None:
    schedule = counts(email={"completed": 1000, "running": 2})
    worker = counts(email={"running": 2, "completed": 10})
    assert plan_held_of_creator(schedule, worker, None, None) is Walk.SCOPE
    assert plan_held_of_creator(worker, schedule, None, None) is Walk.FILTER
    assert plan_held_of_creator(schedule, worker, None, "report") is Walk.NOTHING
    assert plan_held_of_creator(schedule, {}, None, None) is Walk.NOTHING
    assert plan_held_of_creator(schedule, worker, FAILED_, None) is Walk.NOTHING
