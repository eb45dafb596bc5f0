"""Background loops every server process runs: lease expiry and pruning.

Both are safe to run in many processes at once: every UPDATE and DELETE re-checks the
row's state, so two servers expiring the same lease change it once.
"""

from __future__ import annotations

import asyncio
import logging

from queuelog.errors import DatabaseUnavailable
from queuelog.settings import Settings
from queuelog.storage.repository import Repository

log = logging.getLogger("queuelog.maintenance")


class OutageLog:
    """One line when the database becomes unavailable to a loop, one when it is back: an
    outage is not a bug, and a traceback every second would bury real ones."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.down = False

    def failed(self, exc: DatabaseUnavailable) -> None:
        if not self.down:
            log.warning("%s: %s", self.what, exc.message)
        self.down = True

    def succeeded(self) -> None:
        if self.down:
            log.warning("%s: the database answers again", self.what)
        self.down = False


async def expire_leases_forever(repository: Repository, interval: float) -> None:
    outage = OutageLog("lease expiry")
    while True:
        try:
            expired = await repository.expire_leases()
            outage.succeeded()
            if expired:
                log.info("expired %d lease(s)", expired)
        except DatabaseUnavailable as exc:
            outage.failed(exc)
        except Exception:
            log.exception("lease expiry failed; trying again")
        await asyncio.sleep(interval)


async def prune_forever(repository: Repository, retention_seconds: int, interval: float) -> None:
    outage = OutageLog("pruning")
    while True:
        try:
            pruned = await repository.prune(retention_seconds)
            outage.succeeded()
            if pruned:
                log.info("pruned %d finished job(s)", pruned)
        except DatabaseUnavailable as exc:
            outage.failed(exc)
        except Exception:
            log.exception("pruning failed; trying again")
        await asyncio.sleep(interval)


def start(repository: Repository, settings: Settings) -> list[asyncio.Task[None]]:
    return [
        asyncio.create_task(expire_leases_forever(repository, settings.lease_check_seconds)),
        asyncio.create_task(
            prune_forever(repository, settings.retention_seconds, settings.prune_interval_seconds)
        ),
    ]
