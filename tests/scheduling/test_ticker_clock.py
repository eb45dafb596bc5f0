"""The ticker's misfire rule goes by the database's clock, even when the server's lags it.

A restarted ticker enqueues the ticks that passed while no server ran only as `misfire`
says (SKIP: none; RUN_ONCE: one, for the newest). "While no server ran" ends when this
ticker started, a moment that must be on the database's clock, as the ticks' times are. On
PostgreSQL the server only learns its clock's offset from the database's at its first write,
so a start taken from the server's own clock before then was off by the whole offset: with a
server clock six hours behind, the ticks of the six hours before the restart counted as
enqueued late by a running deployment, and SKIP enqueued them all.

Here the real ticker (`tick_forever`) runs against a real PostgreSQL database in this
process, its clock (queuelog.clock.utcnow) set six hours behind, after a downtime of twelve
hours of hourly ticks. PostgreSQL only: on SQLite the database's clock is the process's.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Databases
from sqlalchemy import text

from queuelog import clock
from queuelog.model import Misfire, Overlap, Priority, ScheduleSpec
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.repository import Repository
from queuelog.ticker import tick_forever

LAG = timedelta(hours=6)
DOWN_FOR = timedelta(hours=12)
GRACE = timedelta(seconds=1)  # schedules.MISFIRE_GRACE
WAIT = 30.0


def top_of_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def spec(name: str, misfire: Misfire) -> ScheduleSpec:
    return ScheduleSpec(name, "noop", "0 * * * *", "UTC", {}, Priority.LOW, 0, misfire, Overlap.ALLOW)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_after_a_downtime_misfire_holds_when_the_servers_clock_lags_the_databases(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = databases.migrated()
    engine = create_sync_engine(url)

    def database_now() -> datetime:
        with engine.connect() as connection:
            return connection.execute(text("SELECT clock_timestamp()")).scalar_one().astimezone(UTC)

    async def scenario() -> tuple[datetime, dict[str, list[datetime]]]:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        try:
            for name, misfire in (("skip", Misfire.SKIP), ("once", Misfire.RUN_ONCE)):
                await repository.put_schedule(spec(name, misfire))
            # The deployment was down for twelve hours: no ticker marked the schedule clock,
            # and the schedules' next ticks are twelve hours old.
            now = database_now()
            if now - top_of_hour(now) < timedelta(seconds=10):  # no tick right at the start
                await asyncio.sleep(10)
                now = database_now()
            with engine.begin() as connection:
                connection.execute(text("UPDATE schedule_clock SET alive_at = :t"), {"t": now - DOWN_FOR})
                connection.execute(
                    text("UPDATE schedules SET next_run_at = :t"), {"t": top_of_hour(now - DOWN_FOR)}
                )
            real = clock.utcnow
            monkeypatch.setattr(clock, "utcnow", lambda: real() - LAG)
            # A fresh server process: it has not written yet, so it knows no offset.
            restarted = Repository(url, RetryPolicy(10, 3600))
            await restarted.open()
            try:
                started = database_now()
                ticker = asyncio.create_task(tick_forever(restarted, asyncio.Event()))
                try:
                    async with asyncio.timeout(WAIT):
                        while not fired(started):
                            await asyncio.sleep(0.05)
                finally:
                    ticker.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await ticker
            finally:
                await restarted.close()
        finally:
            await repository.close()
        return started, ticks()

    def fired(started: datetime) -> bool:
        """Both schedules moved past the restart: the first firing is done."""
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT next_run_at FROM schedules")).scalars().all()
        return all(next_run > started for next_run in rows)

    def ticks() -> dict[str, list[datetime]]:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT schedule_name, idempotency_key FROM jobs")).all()
        found: dict[str, list[datetime]] = {"skip": [], "once": []}
        for name, key in rows:
            found[name].append(datetime.strptime(key.split("@")[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC))
        return {name: sorted(moments) for name, moments in found.items()}

    try:
        started, enqueued = asyncio.run(scenario())
    finally:
        engine.dispose()
    missed = {name: [t for t in moments if t < started - GRACE] for name, moments in enqueued.items()}
    assert missed["skip"] == [], f"misfire SKIP enqueued ticks of the downtime: {missed['skip']}"
    assert missed["once"] == [top_of_hour(started)], f"RUN_ONCE enqueued {missed['once']}"
