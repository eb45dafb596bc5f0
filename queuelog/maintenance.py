"""Background loops every server process runs: lease expiry and pruning.

Both are safe to run in many processes at once: every UPDATE and DELETE re-checks the
row's state, so two servers expiring the same lease change it once.
"""

from __future__ import annotations

import asyncio
import logging

from queuelog.settings import Settings
from queuelog.storage.repository import Repository

log = logging.getLogger("queuelog.maintenance")


async def expire_leases_forever(repository: Repository, interval: float) -> None:
    while True:
        try:
            expired = await repository.expire_leases()
            if expired:
                log.info("expired %d lease(s)", expired)
        except Exception:
            log.exception("lease expiry failed; trying again")
        await asyncio.sleep(interval)


async def prune_forever(repository: Repository, retention_seconds: int, interval: float) -> None:
    while True:
        try:
            pruned = await repository.prune(retention_seconds)
            if pruned:
                log.info("pruned %d finished job(s)", pruned)
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
