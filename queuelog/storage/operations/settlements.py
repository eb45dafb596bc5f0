"""A finished job's dependents, released or cancelled in chunks (API.md section 10).

When a job that others depend on (`has_dependents`) finishes, its dependents are settled:
COMPLETED counts it done for each of them (one at 0 becomes claimable at once); FAILED or
CANCELLED cancels each PENDING one with error `dependency <id> <STATUS>`, and on downstream
from every job so cancelled. The transaction that finished the job settles the first
IN_TRANSACTION of them itself, right after the operation (`settle`, from batch.run): all
of them, in the common case of a few. What is left is written down in that same
transaction, as rows of dependency_settlements, so that it outlives the server: every
server's sweeper (`sweep`, run by maintenance.py through the repository) takes them in
short transactions of its own, sized by time as bulk actions' chunks are, while claims and
enqueues go on between them; another server, or this one restarted, finishes what one that
died left. Until a settlement reaches a dependent, the dependent stays PENDING and waiting:
its count still holds the dependency, so it is never claimable before every dependency is
COMPLETED.

A settlement walks its job's edges in dependent id order (ix_job_dependencies_on), from
`passed` (the last dependent it settled) up to `reaches`: the highest job id there was when
the job finished. Higher ids came after, and are not its to settle; inside the transaction
that finished the job, its row lock keeps new dependents out, so nothing bounds the walk.
What keeps it exact:
- A release counts each edge once: the chunk that passes a dependent counts it, and moves
  `passed` beyond it in the same transaction. A retried dependent counts a COMPLETED
  dependency as not done while a release of it has yet to pass it, so that the release's
  count is the only one (dependencies.restore_waiting).
- A cascade cancels the PENDING dependents it reaches, except those retried since it began:
  a retry marks each edge to a dependency with settlements under way (`spared_by`: the
  newest one's id) and the settlements up to it pass the dependent by, as they would have
  had they ended before the retry.
- A job's settlements run in id order (SETTLEMENTS_DUE takes only a job's oldest). A job
  that finishes again while a settlement of its dependents is still under way (it was
  retried meanwhile) settles nothing itself: its row waits for the earlier one. Such a job
  is marked (has_dependents = SETTLING) when its first row is written, so that only a
  marked job's end looks for rows of its own (SETTLING_JOBS).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from queuelog.model import EventKind, Job, JobStatus
from queuelog.storage.schema.codec import decode_job
from queuelog.storage.schema.types import ids_json
from queuelog.storage.transaction import WriteTx

# How much of its dependents' settling the transaction that finished a job does itself, at
# most, counted in edges passed: a completeJobs of 100 jobs with a few dependents each is
# settled whole. Each statement counts STEP_COST more (a chain settles one dependent a
# statement, and its transaction must stay short all the same) and each dependent cancelled
# CANCEL_COST more (a new row version, its event and its counters: five times what counting
# a release costs).
IN_TRANSACTION = 1000
STEP_COST = 10
CANCEL_COST = 4
# What a sweeper's chunk aims at on SQLite, where it runs on the event loop: half a bulk
# action's. On bench figure 11's cascade of 120,000 dependents, that about halves the p50 of
# a long-polling claim woken by an enqueue meanwhile, against 5 ms chunks, for a cascade
# only a little slower. PostgreSQL's aim at bulk.PG_CHUNK_SECONDS.
CHUNK_SECONDS = 0.0025
# A sweeper's chunk, in IN_TRANSACTION's units: the first, and the bounds of the next ones,
# sized by how long the one before took (as bulk actions' are: bulk.next_chunk_size).
FIRST_CHUNK, SMALLEST_CHUNK, LARGEST_CHUNK = 100, 4 * STEP_COST, 10_000
# The settlement rows a sweeper's chunk takes at most.
ROWS_PER_CHUNK = 100
# has_dependents of a job with settlements written down (see above).
SETTLING = 2
# `reaches` and id of a settlement not written down: its job is locked by the transaction,
# and every settlement id yet to be handed out is above every spared_by there is.
BEYOND = 2**62


@dataclass(slots=True)
class Settlement:
    job_id: int
    error: str | None  # None: the job completed, its dependents count it done
    passed: int = 0
    reaches: int | None = None  # None: not written down yet
    id: int | None = None  # its row's, once written down
    marked: bool = False  # its job is marked SETTLING already
    behind: bool = False  # an earlier settlement of its job is under way: it waits
    done: bool = False
    moved: bool = False  # `passed` moved in this transaction


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweeper's chunk did: dependents passed, and whether it found any settlement
    (the next chunk may find more)."""

    dependents: int
    found: bool
    ready_types: frozenset[str]


def settle(tx: WriteTx) -> None:
    """Release or cancel the dependents of the jobs the running operation finished, up to
    IN_TRANSACTION of them; write down what is left."""
    parents, tx.parents = tx.parents, []
    _work_through(tx, [_of(job, None) for job in parents], IN_TRANSACTION)


def sweep(tx: WriteTx, limit: int) -> Swept:
    """A sweeper's chunk: the settlements due (each its job's oldest, on PostgreSQL none that
    another server holds), about `limit` dependents of them."""
    rows = tx.execute(tx.sql.SETTLEMENTS_DUE, {"limit": ROWS_PER_CHUNK}).fetchall()
    work = [
        Settlement(job_id, error, passed, reaches, settlement_id, marked=True)
        for settlement_id, job_id, error, passed, reaches in rows
    ]
    dependents = _work_through(tx, work, max(limit, SMALLEST_CHUNK))
    return Swept(dependents, bool(rows), frozenset(tx.ready_types))


def next_chunk_size(size: int, seconds: float, chunk_seconds: float) -> int:
    """The next chunk's size, from how long one of `size` took (its write call, the wait for
    its transaction included), aiming at `chunk_seconds`: at most doubled, at most halved (on
    a busy machine one chunk in a few is held up for tens of milliseconds by another process,
    and its successors need not be tiny for it)."""
    scaled = LARGEST_CHUNK if seconds <= 0 else int(size * chunk_seconds / seconds)
    return max(SMALLEST_CHUNK, size // 2, min(LARGEST_CHUNK, scaled, size * 2))


def _of(job: Job, error: str | None) -> Settlement:
    """A settlement of `job`'s dependents, just finished: cancelled with `error`, else by its
    own end."""
    if error is None and job.status is not JobStatus.COMPLETED:
        error = f"dependency {job.id} {job.status.name}"
    return Settlement(job.id, error, marked=job.has_dependents == SETTLING)


def _work_through(tx: WriteTx, start: list[Settlement], budget: int) -> int:
    """Settle `start` in order, and the cascades they lead to, until `budget` (see
    IN_TRANSACTION) is spent; write down what is left. Returns the edges passed."""
    queue: deque[Settlement] = deque()
    every: list[Settlement] = []
    spent = passed = 0

    def add(settlements: list[Settlement]) -> None:
        _find_earlier(tx, settlements)
        every.extend(settlements)
        queue.extend(s for s in settlements if not s.behind)

    add(start)
    while queue and spent + STEP_COST < budget:
        group = _next_group(queue)
        limit = budget - spent - STEP_COST
        if group[0].error is not None:  # each edge may cancel its dependent
            limit = max(1, limit // (1 + CANCEL_COST))
        edges, cancelled = _step(tx, group, limit)
        spent += STEP_COST + len(edges) + CANCEL_COST * len(cancelled)
        passed += len(edges)
        _advance(group, edges, limit)
        add([_of(job, group[0].error) for job in cancelled if job.has_dependents])
    tx.parents.clear()  # the jobs cancelled above: settled here already
    _write_down(tx, every)
    return passed


def _find_earlier(tx: WriteTx, settlements: list[Settlement]) -> None:
    """Mark `behind` the settlements not written down whose job has one under way."""
    marked = [s.job_id for s in settlements if s.marked and s.id is None]
    if not marked:
        return
    busy = {row[0] for row in tx.execute(tx.sql.SETTLING_JOBS, {"ids": ids_json(marked)}).fetchall()}
    for s in settlements:
        if s.id is None and s.job_id in busy:
            s.behind = True


def _next_group(queue: deque[Settlement]) -> list[Settlement]:
    """The next settlement, with those after it that one statement can take with it: not
    written down yet (walked from the start, unbounded), of the same kind and error."""
    first = queue.popleft()
    group = [first]
    if first.id is None:
        while queue and queue[0].id is None and queue[0].error == first.error:
            group.append(queue.popleft())
    return sorted(group, key=lambda s: s.job_id)


def _step(tx: WriteTx, group: list[Settlement], limit: int) -> tuple[list[tuple[int, int]], list[Job]]:
    """The next `limit` edges of `group`, settled: their (job, dependent) in walk order, and
    the dependents cancelled."""
    first = group[0]
    params = {
        "ids": ids_json([s.job_id for s in group]),
        "passed": first.passed,
        "reaches": first.reaches if first.reaches is not None else BEYOND,
        "limit": limit,
    }
    if first.error is None:
        return _release(tx, {**params, "now": tx.now_us}), []
    edges = [(row[0], row[1]) for row in tx.execute(tx.sql.NEXT_EDGES, params).fetchall()]
    if not edges:
        return edges, []
    cancel = {
        "ids": ids_json(sorted({dependent for _, dependent in edges})),
        "parents": params["ids"],
        "settlement": first.id if first.id is not None else BEYOND,
        "error": first.error,
        "now": tx.now_us,
    }
    cancelled = [decode_job(row) for row in tx.execute(tx.sql.CANCEL_DEPENDENTS, cancel).fetchall()]
    cancelled.sort(key=lambda job: job.id)
    for job in cancelled:
        tx.record_from(EventKind.CANCELLED, JobStatus.PENDING.value, job.worker_id, job)
    return edges, cancelled


def _release(tx: WriteTx, params: dict[str, object]) -> list[tuple[int, int]]:
    """The next edges of a release, each counted done for its waiting dependent; the types
    of the jobs that became ready go to `tx.ready_types` (the batch's parked claims)."""
    if tx.can.release_returns_edges:
        rows = tx.execute(tx.sql.RELEASE_NEXT, params).fetchall()
        edges = sorted((row[0], row[1]) for row in rows if row[0] is not None)
        released = [(row[3], row[4]) for row in rows if row[0] is None]
    else:
        edges = [(row[0], row[1]) for row in tx.execute(tx.sql.NEXT_EDGES, params).fetchall()]
        released = tx.execute(tx.sql.RELEASE_NEXT, params).fetchall() if edges else []
    tx.ready_types.update(job_type for job_type, delayed in released if delayed == 0)
    return edges


def _advance(group: list[Settlement], edges: Sequence[tuple[int, int]], limit: int) -> None:
    """Where each settlement of `group` stands after a step that passed `edges`."""
    if len(edges) < limit:  # the walk ended: every edge of the group is passed
        for s in group:
            s.done = True
        return
    last_job, last_dependent = edges[-1]
    for s in group:
        if s.job_id < last_job:
            s.done = True
        elif s.job_id == last_job:
            s.passed, s.moved = last_dependent, True


def _write_down(tx: WriteTx, settlements: list[Settlement]) -> None:
    """Rows for what is left, marks on their jobs; rows done deleted, the others moved on."""
    finished = [s.id for s in settlements if s.id is not None and s.done]
    if finished:
        tx.execute(tx.sql.DELETE_SETTLEMENTS, {"ids": ids_json(finished)})
    moved = [
        {"id": s.id, "passed": s.passed} for s in settlements if s.id is not None and not s.done and s.moved
    ]
    if moved:
        tx.executemany(tx.sql.PASS_SETTLEMENT, moved)
    left = [s for s in settlements if s.id is None and not s.done]
    if not left:
        return
    (reaches,) = tx.execute(tx.sql.HIGHEST_JOB_ID).fetchone()
    rows = [{"job_id": s.job_id, "error": s.error, "passed": s.passed, "reaches": reaches} for s in left]
    tx.executemany(tx.sql.INSERT_SETTLEMENT, rows)
    unmarked = sorted({s.job_id for s in left if not s.marked})
    if unmarked:
        tx.execute(tx.sql.MARK_SETTLING, {"ids": ids_json(unmarked)})
    tx.settlements_left = True
