"""Every server's schedule ticker: fires due ticks (storage/operations/schedules.py), exactly once each
across all servers, with no leader.

It sleeps until the next tick of any schedule (read from the database: another server may
have added or changed one), at most LOOK_AGAIN_SECONDS, or until this process changes a
schedule. While any schedule runs, it also records at least every ALIVE_EVERY_SECONDS that
a ticker is alive (the misfire rule's schedule clock): a tick found late is then known to
be late, not missed while no server ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from queuelog.errors import DatabaseUnavailable
from queuelog.maintenance import OutageLog
from queuelog.storage.repository import Repository

log = logging.getLogger("queuelog.schedules")

LOOK_AGAIN_SECONDS = 1.0
ALIVE_EVERY_SECONDS = 1.0


async def tick_forever(repository: Repository, changed: asyncio.Event) -> None:
    outage = OutageLog("schedules")
    marked = 0.0
    # No tick after this is missed while no server ran. A monotonic reading, not this
    # server's clock: before its first write the server does not know how far that is from
    # the database's, which the ticks' times are on.
    started = time.monotonic()
    while True:
        pause = LOOK_AGAIN_SECONDS
        try:
            due = await repository.next_schedule_due()
            if due is not None:
                until = (due - repository.now()).total_seconds()
                if until <= 0:
                    fired = await repository.fire_schedules(started)
                    for name, why in fired.stopped:
                        log.error(
                            "schedule %r stopped: it no longer parses (%s). It enqueues nothing until it"
                            " is put again with a valid cron and time zone (or, once it parses again,"
                            " paused and resumed); the other schedules run on",
                            name,
                            why,
                        )
                    # Nothing fired: another server did, or this clock runs ahead of the
                    # database's. Either way, look again in a moment, not at once.
                    pause = 0.0 if fired.enqueued or fired.stopped else 0.05
                    marked = time.monotonic()
                else:
                    pause = min(pause, until)
                    if time.monotonic() - marked >= ALIVE_EVERY_SECONDS:
                        await repository.mark_schedules_alive()
                        marked = time.monotonic()
            outage.succeeded()
        except DatabaseUnavailable as exc:
            outage.failed(exc)
        except Exception:
            log.exception("firing schedules failed; trying again")
        if pause > 0:
            changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), pause)
