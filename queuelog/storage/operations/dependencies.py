"""Jobs that wait for other jobs (API.md section 10).

A job with dependencies is PENDING with `waiting_for` > 0 and `delayed` = 2, which keeps it
out of every index a claim reads: a claim never walks the jobs that wait. Finishing a job
that something depends on (`has_dependents`, so the common job costs nothing) settles its
dependents (settlements.py): COMPLETED counts it done for each dependent, and one at 0
becomes claimable at once; FAILED or CANCELLED cancels everything downstream. This module
writes the edges of new jobs and makes retried jobs wait again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from queuelog.errors import Conflict, job_not_found
from queuelog.model import Job, JobScope, JobStatus, NewJob
from queuelog.storage.schema.codec import decode_job
from queuelog.storage.schema.types import ids_json
from queuelog.storage.transaction import Connection, WriteTx

COMPLETED = JobStatus.COMPLETED.value
ENDED_BADLY = (JobStatus.FAILED.value, JobStatus.CANCELLED.value)


def lock_existing(tx: WriteTx, ids: set[int], scope: JobScope) -> dict[int, str]:
    """Mark the jobs `ids` as depended on and return their statuses, refusing any the caller
    cannot see (NOT_FOUND, as if it did not exist) or that ended FAILED or CANCELLED.

    On PostgreSQL the UPDATE locks each row, so a finish that races this enqueue either
    commits first (its status is read here) or sees `has_dependents` and the new edges."""
    if not ids:
        return {}
    rows = tx.execute(tx.sql.MARK_DEPENDED_ON, {"ids": ids_json(sorted(ids))}).fetchall()
    found = {row[0]: row for row in rows if scope.allows_owned(row[2], row[3])}
    for job_id in sorted(ids):
        if job_id not in found:
            raise job_not_found(job_id)
    for job_id, status, _, _ in found.values():
        if status in ENDED_BADLY:
            raise Conflict(f"dependency {job_id} is {status.upper()}")
    return {job_id: row[1] for job_id, row in found.items()}


def prepare(items: Sequence[NewJob], statuses: dict[int, str]) -> list[NewJob]:
    """Each item with its row's dependency values: `dependency_count`, `waiting_for` (the
    dependencies not COMPLETED: every earlier item of the call counts as not yet), and
    `has_dependents` for the items a later one waits for."""
    needed = {j for item in items for j in item.depends_on_items}
    prepared = []
    for i, item in enumerate(items):
        if not item.depends_on and not item.depends_on_items and i not in needed:
            prepared.append(item)
            continue
        open_ids = sum(1 for job_id in item.depends_on if statuses.get(job_id) != COMPLETED)
        prepared.append(
            dataclasses.replace(
                item,
                dependency_count=len(item.depends_on) + len(item.depends_on_items),
                waiting_for=open_ids + len(item.depends_on_items),
                has_dependents=int(i in needed),
            )
        )
    return prepared


def write_edges(tx: WriteTx, items: Sequence[NewJob], ids: Sequence[int]) -> None:
    """The job_dependencies rows of new jobs (`ids`: each item's new id, in order)."""
    rows = [
        {"job_id": ids[i], "depends_on": target}
        for i, item in enumerate(items)
        for target in (*item.depends_on, *(ids[j] for j in item.depends_on_items))
    ]
    if rows:
        tx.executemany(tx.sql.INSERT_DEPENDENCY, rows)


def restore_waiting(tx: WriteTx, retried: Sequence[Job]) -> dict[int, Job]:
    """Jobs just retried that have dependencies wait again for those not COMPLETED; returns
    the ones that do, as they now are.

    A COMPLETED dependency whose release has not reached the job yet counts as not done: the
    release counts it when it does (settlements.py). An edge to a dependency with settlements
    under way is marked spared by the newest: the cascades among them pass the job by, as
    they would have had they ended before the retry."""
    ids = [job.id for job in retried if job.dependency_count]
    if not ids:
        return {}
    params = {"ids": ids_json(ids)}
    open_ids = {row[0] for row in tx.execute(tx.sql.OPEN_DEPENDENCIES, params).fetchall()}
    releases: dict[int, list[tuple[int, int]]] = {}
    newest: dict[int, int] = {}
    for job_id, error, passed, reaches, settlement in tx.execute(
        tx.sql.SETTLEMENTS_OF_DEPENDENCIES, params
    ).fetchall():
        if error is None:
            releases.setdefault(job_id, []).append((passed, reaches))
        newest[job_id] = settlement  # in id order: the last is the newest
    by_count: dict[int, list[int]] = {}
    spared = []
    for job_id, targets in dependency_ids(tx, ids).items():
        waiting = sum(
            1
            for target in targets
            if target in open_ids
            or any(passed < job_id <= reaches for passed, reaches in releases.get(target, ()))
        )
        if waiting:
            by_count.setdefault(waiting, []).append(job_id)
        spared += [
            {"job_id": job_id, "depends_on": target, "settlement": newest[target]}
            for target in targets
            if target in newest
        ]
    if spared:
        tx.executemany(tx.sql.SPARE, spared)
    waiting_again: dict[int, Job] = {}
    for waiting, job_ids in sorted(by_count.items()):
        rows = tx.execute(
            tx.sql.WAIT_AGAIN, {"ids": ids_json(job_ids), "waiting": waiting, "now": tx.now_us}
        ).fetchall()
        waiting_again.update((job.id, job) for job in map(decode_job, rows))
    return waiting_again


def dependency_ids(conn: Connection, job_ids: Sequence[int]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    if job_ids:
        rows = conn.execute(conn.sql.DEPENDENCIES_OF_JOBS, {"ids": ids_json(job_ids)}).fetchall()
        for job_id, target in rows:
            found.setdefault(job_id, []).append(target)
    return found


def held_dependency(conn: Connection, job_id: int, worker: str) -> bool:
    """Whether job `job_id` is a dependency of a job `worker` holds (it may read it)."""
    row = conn.execute(conn.sql.DEPENDENCY_OF_HELD, {"id": job_id, "worker": worker}).fetchone()
    return row is not None
