"""Jobs that wait for other jobs (API.md section 10).

A job with dependencies is PENDING with `waiting_for` > 0 and `delayed` = 2, which keeps it
out of every index a claim reads: a claim never walks the jobs that wait. Finishing a job
that something depends on (`has_dependents`, so the common job costs nothing) settles its
dependents in the same transaction, right after the operation that finished it (`settle`,
called by the group-commit writers): COMPLETED counts it done for each dependent, and one
at 0 becomes claimable at once; FAILED or CANCELLED cancels everything downstream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from queuelog.errors import Conflict, job_not_found
from queuelog.model import EventKind, Job, JobScope, JobStatus, NewJob
from queuelog.storage.codec import decode_job
from queuelog.storage.transaction import Connection, WriteTx
from queuelog.storage.types import ids_json

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


def settle(tx: WriteTx) -> None:
    """Release or cancel the dependents of the jobs the operation just finished."""
    parents, tx.parents = tx.parents, []
    done = [job.id for job in parents if job.status is JobStatus.COMPLETED]
    if done:
        # Waiting claims wake on the COMPLETED event of a job with dependents (wakeup.py).
        released = tx.execute(tx.sql.RELEASE_DEPENDENTS, {"ids": ids_json(done), "now": tx.now_us}).fetchall()
        # Jobs due now (type, delayed), which the batch's parked claims may take (group_commit.py).
        tx.ready_types.update(job_type for job_type, delayed in released if delayed == 0)
    for root in parents:
        if root.status is not JobStatus.COMPLETED:
            _cancel_downstream(tx, root)
    tx.parents.clear()  # the cascade's own jobs were cancelled with it: nothing more to do


def _cancel_downstream(tx: WriteTx, root: Job) -> None:
    """Cancel every PENDING job downstream of `root`, each with `root`'s error.

    One statement cancels what its snapshot shows downstream. On PostgreSQL an enqueue may
    have locked a job of the cascade (MARK_DEPENDED_ON) and written a new dependent of it
    after that snapshot: the cascade's UPDATE waits for the enqueue to commit, and so a
    statement begun after it sees the new dependent. Hence the cascade goes on from the jobs
    it cancelled that have dependents until a pass cancels none that has (one statement more
    when it cancelled any). An enqueue that comes to such a job after the cascade locked it
    waits for it, then finds it CANCELLED (a CONFLICT)."""
    error = f"dependency {root.id} {root.status.name}"
    reached = [root.id]
    while reached:
        params = {"ids": ids_json(reached), "error": error, "now": tx.now_us}
        reached = []
        for row in tx.execute(tx.sql.CANCEL_DEPENDENTS, params).fetchall():
            cancelled = decode_job(row)
            tx.record_from(EventKind.CANCELLED, JobStatus.PENDING.value, None, cancelled)
            if cancelled.has_dependents:
                reached.append(cancelled.id)


def restore_waiting(tx: WriteTx, retried: Sequence[Job]) -> dict[int, Job]:
    """Jobs just retried that have dependencies wait again for those not COMPLETED; returns
    the ones that do, as they now are."""
    ids = [job.id for job in retried if job.dependency_count]
    if not ids:
        return {}
    rows = tx.execute(tx.sql.RESTORE_WAITING, {"ids": ids_json(ids), "now": tx.now_us}).fetchall()
    return {job.id: job for job in map(decode_job, rows)}


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
