"""Catching up on a schedule's ticks costs what the answer costs, not what the gap holds.

A schedule that fires every second of one month (`* * * * 10 *`, seconds first), on a
deployment down since the 10th of that month, missed a million and a half ticks. Its
catch-up walked them one by one inside `fire_due`'s write transaction: 10 s on every
restart, with the database's write lock held and `/healthz` unanswered throughout. The
newest missed tick is now found by walking the cron backwards from the cutoff, field by
field.

Here the real `fire_due` runs through a real Repository on SQLite and PostgreSQL, with the
cron walker replaced by one that counts its steps (cron_steps.py): the whole catch-up of
four such schedules takes a few dozen steps, where walking the ticks takes millions (the
counter stops it at the bound, so the old code fails at once rather than after seconds).

And a deployment that ran but could not fire for long (a database stall) still enqueues
every tick: at most MAX_TICKS_PER_FIRE of a schedule per transaction, the rest in the
next ones, none lost, none twice. The bound used to drop the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest
from conftest import Databases, stored_time, timestamp_value
from cron_steps import CronSteps
from sqlalchemy import Engine, text
from stale_month import first_second_of, last_second_of, stale_month

from queuelog.model import Misfire, Overlap, Priority, ScheduleSpec
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.operations.schedules import MAX_TICKS_PER_FIRE
from queuelog.storage.repository import Repository

T = TypeVar("T")
SECOND = timedelta(seconds=1)
PARIS = "Europe/Paris"


def spec(name: str, cron: str, zone: str, misfire: Misfire, overlap: Overlap = Overlap.ALLOW) -> ScheduleSpec:
    return ScheduleSpec(name, "noop", cron, zone, {}, Priority.LOW, 0, misfire, overlap)


def ticks_by_schedule(engine: Engine) -> dict[str, list[datetime]]:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT schedule_name, idempotency_key FROM jobs")).all()
    found: dict[str, list[datetime]] = {}
    for name, key in rows:
        tick = datetime.strptime(key.split("@")[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        found.setdefault(name, []).append(tick)
    return {name: sorted(ticks) for name, ticks in found.items()}


def next_runs(engine: Engine) -> dict[str, datetime | None]:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT name, next_run_at FROM schedules")).all()
    return {name: stored_time(next_run) for name, next_run in rows}


def with_repository(url: str, scenario: Callable[[Repository], Awaitable[T]]) -> T:
    async def run() -> T:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        try:
            return await scenario(repository)
        finally:
            await repository.close()

    return asyncio.run(run())


def test_months_of_missed_ticks_are_caught_up_in_a_few_cron_steps(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = databases.migrated()
    backend = databases.backend
    engine = create_sync_engine(url)
    year, month = stale_month(datetime.now(UTC))
    every_second = f"* * * * {month} *"
    schedules = [
        spec("once", every_second, "UTC", Misfire.RUN_ONCE),
        spec("once-paris", every_second, PARIS, Misfire.RUN_ONCE, Overlap.SKIP),
        spec("once-minutes", f"* * * {month} *", "UTC", Misfire.RUN_ONCE),
        spec("skip", every_second, "UTC", Misfire.SKIP),
    ]
    down_since = datetime(year, month, 10, tzinfo=UTC)

    async def scenario(repository: Repository) -> tuple[int, int]:
        for schedule in schedules:
            await repository.put_schedule(schedule)
        # As a deployment down since the 10th leaves it: each schedule's next tick is then,
        # and no ticker has run since.
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE schedules SET next_run_at = :t"), {"t": timestamp_value(backend, down_since)}
            )
            connection.execute(
                text("UPDATE schedule_clock SET alive_at = :t"),
                {"t": timestamp_value(backend, down_since - SECOND)},
            )
        steps = CronSteps(limit=1000).install(monkeypatch)
        first = await repository.fire_schedules()
        again = await repository.fire_schedules()
        assert steps.count <= 40, steps
        return first.enqueued, again.enqueued

    try:
        enqueued, enqueued_again = with_repository(url, scenario)
        assert ticks_by_schedule(engine) == {
            "once": [last_second_of(year, month, "UTC")],
            "once-paris": [last_second_of(year, month, PARIS)],
            "once-minutes": [last_second_of(year, month, "UTC").replace(second=0)],
        }
        assert (enqueued, enqueued_again) == (3, 0)
        assert next_runs(engine) == {
            "once": first_second_of(year + 1, month, "UTC"),
            "once-paris": first_second_of(year + 1, month, PARIS),
            "once-minutes": first_second_of(year + 1, month, "UTC"),
            "skip": first_second_of(year + 1, month, "UTC"),
        }
    finally:
        engine.dispose()


def test_a_backlog_longer_than_the_bound_is_enqueued_over_consecutive_transactions(
    databases: Databases,
) -> None:
    """Two every-second schedules 25 minutes behind while a ticker ran throughout (the
    schedule clock is fresh): 1,500 late ticks, more than MAX_TICKS_PER_FIRE. Misfire SKIP
    does not apply (no downtime): every tick is enqueued, the first MAX_TICKS_PER_FIRE in the
    first transaction, the rest in the next. With overlap SKIP, one job."""
    url = databases.migrated()
    backend = databases.backend
    engine = create_sync_engine(url)
    behind = timedelta(minutes=25)

    async def scenario(repository: Repository) -> tuple[datetime, list[int], datetime]:
        await repository.put_schedule(spec("late", "* * * * * *", "UTC", Misfire.SKIP))
        await repository.put_schedule(spec("late-overlap", "* * * * * *", "UTC", Misfire.SKIP, Overlap.SKIP))
        first = (repository.now() - behind).replace(microsecond=0)
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE schedules SET next_run_at = :t"), {"t": timestamp_value(backend, first)}
            )
        await repository.mark_schedules_alive()
        enqueued = []
        while not enqueued or enqueued[-1] > 0:
            enqueued.append((await repository.fire_schedules()).enqueued)
            assert len(enqueued) < 10, enqueued
        return first, enqueued, repository.now()

    try:
        first, enqueued, done = with_repository(url, scenario)
        ticks = ticks_by_schedule(engine)
        late = ticks["late"]
        assert late[0] == first
        assert late == [first + n * SECOND for n in range(len(late))], "a tick missing or twice"
        assert late[-1] >= done - 2 * SECOND
        assert len(late) > behind.total_seconds()
        assert enqueued[0] == MAX_TICKS_PER_FIRE + 1  # late's bound, and late-overlap's one job
        assert ticks["late-overlap"] == [first]
        assert all(next_run is not None and next_run > late[-1] for next_run in next_runs(engine).values())
    finally:
        engine.dispose()
