"""Background loops every server process runs: lease expiry, the expiry of PENDING jobs
(expiresAt), pruning, the settling of finished jobs' dependents left for later
(storage/operations/settlements.py), and on PostgreSQL, where autovacuum does not run, VACUUM
and ANALYZE of queuelog's tables (storage/postgres/vacuum.py).

All are safe to run in many processes at once: every UPDATE and DELETE re-checks the
row's state, so two servers expiring the same lease change it once, and a settlement is
worked on by one server at a time (its row is locked, or SQLite's write lock is held).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from queuelog.errors import DatabaseUnavailable
from queuelog.settings import Settings
from queuelog.storage.repository import Repository

log = logging.getLogger("queuelog.maintenance")
# A job found due for expiry but held by another transaction (a claim, another server's
# sweep) is looked at again this soon.
EXPIRY_RECHECK_SECONDS = 0.05


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


async def expire_jobs_forever(repository: Repository, longest: float) -> None:
    """Cancel the PENDING jobs whose expiry has come (API.md section 12), looking at most
    `longest` seconds apart, and at the next expiry when it comes sooner. A look is a read of
    the first entry of ix_jobs_expiry (which holds only PENDING jobs that expire): a write
    transaction only when a job is due."""
    outage = OutageLog("job expiry")
    while True:
        pause = longest
        try:
            due = await repository.next_expiry()
            if due is not None and due <= repository.now():
                expired = await repository.expire_due()
                if expired:
                    log.info("expired %d pending job(s)", expired)
                due = await repository.next_expiry()
            outage.succeeded()
            if due is not None:
                # One still due is held by a claim (or another server's sweep): look again soon.
                until = (due - repository.now()).total_seconds()
                pause = min(longest, max(until + 0.001, EXPIRY_RECHECK_SECONDS))
        except DatabaseUnavailable as exc:
            outage.failed(exc)
        except Exception:
            log.exception("job expiry failed; trying again")
        await asyncio.sleep(pause)


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


async def settle_dependents_forever(
    repository: Repository, interval: float, on_ready: Callable[[frozenset[str]], None]
) -> None:
    """Whenever a transaction of this server leaves dependents to settle, and every
    `interval` seconds for those another server left (it may have died meanwhile)."""
    outage = OutageLog("settling dependents")
    while True:
        try:
            await repository.settle_dependents(on_ready)
            outage.succeeded()
        except DatabaseUnavailable as exc:
            outage.failed(exc)
        except Exception:
            log.exception("settling dependents failed; trying again")
        await repository.settlements_left(interval)


async def vacuum_forever(repository: Repository, interval: float) -> None:
    """Where autovacuum does not run, what it would do to queuelog's tables (storage/postgres/vacuum.py)."""
    outage = OutageLog("vacuum")
    while True:
        try:
            done = await repository.vacuum_where_due()
            outage.succeeded()
            if done:
                log.info("autovacuum does not run here: %s", "; ".join(done))
        except DatabaseUnavailable as exc:
            outage.failed(exc)
        except Exception:
            log.exception("vacuum failed; trying again")
        await asyncio.sleep(interval)


def start(
    repository: Repository, settings: Settings, on_ready: Callable[[frozenset[str]], None]
) -> list[asyncio.Task[None]]:
    """`on_ready`: told the types of the jobs that releases made claimable."""
    tasks = [
        asyncio.create_task(settle_dependents_forever(repository, settings.lease_check_seconds, on_ready)),
        asyncio.create_task(expire_leases_forever(repository, settings.lease_check_seconds)),
        asyncio.create_task(expire_jobs_forever(repository, settings.expiry_check_seconds)),
        asyncio.create_task(
            prune_forever(repository, settings.retention_seconds, settings.prune_interval_seconds)
        ),
    ]
    if repository.vacuums:
        tasks.append(asyncio.create_task(vacuum_forever(repository, settings.vacuum_check_seconds)))
    return tasks
