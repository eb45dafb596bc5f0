"""The claim: ready jobs of some types, in claim order, within their types' controls.

Before it claims, a transaction handles what is overdue (expired leases, timeouts: see
running.expire_overdue) and makes due delayed jobs ready ("promotion"), each once per
transaction; flow.py decides what the controls allow. Where other servers write at once
(`can.concurrent_writes`), the controls a claim went by may change before it commits: it
checks them again with its own statement, and runs again (RunAgain) where they did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from queuelog.model import EventKind, Job, TypeControl
from queuelog.storage.operations import flow
from queuelog.storage.operations.running import expire_overdue
from queuelog.storage.schema.codec import decode_job
from queuelog.storage.schema.types import ids_json
from queuelog.storage.statements import (
    COL_CREATED,
    COL_ID,
    COL_PRIORITY,
    PENDING,
    RetryDecision,
    per_type_params,
)
from queuelog.storage.transaction import RunAgain, WriteTx


@dataclasses.dataclass(frozen=True, slots=True)
class Claimed:
    jobs: list[Job]
    # Types a control held back in this claim (paused, at a limit, out of rate), and the
    # earliest moment one of them may free by time alone (a pause's end, a rate window).
    held: list[str]
    wake_at: datetime | None
    # The controls the claim went by, when any bound one of its types: a waiting claim
    # claims again when they change (another process's resume or raised limit).
    controls: dict[str, TypeControl] = dataclasses.field(default_factory=dict)


class ClaimerRevoked(Exception):
    """A claim rolled back because the worker's key has been revoked: it ends, claiming nothing."""


def claim(
    tx: WriteTx,
    worker: str,
    types: Sequence[str] | None,
    limit: int,
    lease_seconds: int,
    delay: RetryDecision,
    check_key: bool = False,
) -> Claimed:
    """Claim up to `limit` ready jobs of these types (None: any type) in claim order, within
    the types' controls (flow.py). Expired leases and timeouts are handled first, and due
    delayed jobs made ready. With `check_key`, a claim by a worker whose key is no longer
    active raises ClaimerRevoked (the check goes with the claim's own statements: no round
    trip of its own, none more under the controlled-claim lock)."""
    key_check = [(tx.sql.KEY_IS_ACTIVE, {"name": worker})] if check_key else []
    if types is None:
        types, controls = expire_read_pending_types_and_promote(tx, delay)
        if not types:
            return Claimed([], [], None)
    elif not types:
        return Claimed([], [], None)
    else:
        controls = expire_and_promote(tx, types, delay)
    paused = flow.paused(controls, types, tx.now)
    if paused:
        # A paused type is left out, not counted: it needs no controlled-claim lock.
        types = [t for t in types if t not in paused.held]
        if not types:
            _check_key(tx.execute_together(key_check) if key_check else [])
            return Claimed([], paused.held, paused.wake_at, controls)
    if not flow.any_binds(controls, types, tx.now):
        params = _claim_params(tx, worker, lease_seconds, limit)
        params.update(per_type_params(types))
        rows = _claim_uncontrolled(tx, types, (tx.sql.claim_jobs(len(types)), params), key_check)
        if paused:
            return Claimed(_claimed(tx, rows), paused.held, paused.wake_at, controls)
        return Claimed(_claimed(tx, rows), [], None)
    plan = flow.lock_and_plan(tx, types, limit, controls, also=key_check)
    _check_key(plan.also)

    def claim_planned(sql: str, chosen: dict[str, Any]) -> list[Any]:
        if plan.counted_running:
            # Stamped after every count the plan read: a claim that takes a slot a finish
            # freed is never recorded as starting before that finish.
            tx.read_clock_again()
        statement = (sql, {**_claim_params(tx, worker, lease_seconds, limit), **chosen})
        recheck = _controls_recheck(tx)
        if not plan.unsent and not recheck:
            return tx.execute(*statement).fetchall()
        rows, *answers = tx.execute_together([statement, *plan.unsent, *recheck])
        if recheck:
            _same_controls(tx, controls, flow.read_controls(tx, answers.pop()), types)
        _check_key(answers)
        return rows

    rows = []
    if plan.per_key_types:
        ids = flow.choose_candidates(tx, plan, limit)
        if ids:
            rows = claim_planned(tx.sql.CLAIM_IDS, {"ids": ids_json(ids)})
    elif plan.types:
        names, quotas = zip(*plan.types, strict=True)
        rows = claim_planned(tx.sql.claim_within_quotas(len(names)), per_type_params(names, quotas))
    claimed = _claimed(tx, rows)
    flow.record_rate_claims(tx, plan, claimed)
    if paused:
        plan.held[:0] = paused.held
        if paused.wake_at is not None:
            plan.wake(paused.wake_at)
    return Claimed(claimed, plan.held, plan.wake_at, controls)


def _claim_uncontrolled(
    tx: WriteTx, types: Sequence[str], claim: tuple[str, Any], key_check: list[tuple[str, Any]]
) -> list[Any]:
    """The claim statement's rows, for types no control binds. Where this claim went by
    controls an earlier claim of the transaction read (PostgreSQL, promotion skipped), they
    are read again beside the statement; should one now bind a type, the claim runs again
    from its savepoint (RunAgain), promotion and fresh controls first."""
    recheck = _controls_recheck(tx)
    statements = [claim, *key_check, *recheck]
    if len(statements) == 1:  # one statement: no pipeline to enter
        return tx.execute(*claim).fetchall()
    rows, *answers = tx.execute_together(statements)
    if recheck:
        controls = flow.read_controls(tx, answers.pop())
        if flow.any_binds(controls, types, tx.now) or flow.paused(controls, types, tx.now):
            raise RunAgain()
        tx.claim_preamble.controls = controls
    _check_key(answers)
    return rows


def _controls_recheck(tx: WriteTx) -> list[tuple[str, Any]]:
    """TYPE_CONTROLS, to send beside a claim that went by controls an earlier claim of the
    transaction read (PostgreSQL: other servers may have changed them since); none when the
    claim's own promotion read them, or where the write lock keeps other writers out."""
    if tx.can.concurrent_writes and not tx.claim_preamble.controls_fresh:
        return [(tx.sql.TYPE_CONTROLS, {})]
    return []


def _same_controls(
    tx: WriteTx, used: dict[str, TypeControl], now: dict[str, TypeControl], types: Sequence[str]
) -> None:
    """Keep the controls read beside a claim; should those of its types differ from what it
    went by (another server changed them meanwhile), it runs again (RunAgain)."""
    if any(used.get(t) != now.get(t) for t in types):
        raise RunAgain()
    tx.claim_preamble.controls = now


def _check_key(answers: Sequence[list[Any]]) -> None:
    """KEY_IS_ACTIVE's answer, when it was asked: no row, the key was revoked."""
    if answers and not answers[0]:
        raise ClaimerRevoked()


def _claim_params(tx: WriteTx, worker: str, lease_seconds: int, limit: int) -> dict[str, Any]:
    lease = tx.now_us + lease_seconds * 1_000_000
    return {"worker": worker, "now": tx.now_us, "lease": lease, "limit": limit}


def _claimed(tx: WriteTx, rows: list[Any]) -> list[Job]:
    rows.sort(key=lambda r: (-r[COL_PRIORITY], r[COL_CREATED], r[COL_ID]))  # RETURNING has no order
    claimed = [decode_job(row) for row in rows]
    for job in claimed:
        tx.record_from(EventKind.CLAIMED, PENDING, None, job)
    return claimed


def expire_and_read_pending_types(tx: WriteTx, delay: RetryDecision) -> list[str]:
    """expire_leases and pending_types, their statements sent together (one round trip on
    PostgreSQL instead of two), once a transaction (tx.claim_preamble). The counters move
    when the transaction's side effects are written, so the types of jobs moved to PENDING
    in it (an enqueue, an expiry) are added here."""
    preamble = tx.claim_preamble
    if preamble.pending is None:
        (counted,) = _after_expiry(tx, [(tx.sql.PENDING_TYPES, {})], delay)
        preamble.pending = frozenset(job_type for (job_type,) in counted)
    pending = set(preamble.pending)
    pending.update(move[0] for move in tx.moves if move[4] == PENDING)
    return sorted(pending)


def expire_read_pending_types_and_promote(
    tx: WriteTx, delay: RetryDecision
) -> tuple[list[str], dict[str, TypeControl]]:
    """What a claim of any type does first: expire_and_read_pending_types, then promote_due
    of those types. Where the database can read the types inside the promotion
    (PROMOTE_PENDING: `promotion_reads_controls`), the first claim of a transaction sends all
    three in one round trip.
    Types that only this transaction's moves made PENDING need no promotion: a job made
    PENDING and due at once is written ready."""
    preamble = tx.claim_preamble
    if not tx.can.promotion_reads_controls or preamble.pending is not None:
        types = expire_and_read_pending_types(tx, delay)
        return types, promote_due(tx, types) if types else _controls(tx)
    reads = [(tx.sql.PENDING_TYPES, {}), (tx.sql.PROMOTE_PENDING, {"now": tx.now_us})]
    counted, promoted = _after_expiry(tx, reads, delay)
    preamble.pending = frozenset(job_type for (job_type,) in counted)
    controls = _promoted(tx, sorted(preamble.pending), promoted)
    return expire_and_read_pending_types(tx, delay), controls


def promote_due(tx: WriteTx, types: Sequence[str]) -> dict[str, TypeControl]:
    """Make the delayed jobs of these types whose run_at has come ready (claimable), and
    read the type controls (in the same statement where the database can)."""
    due = _not_promoted(tx, types)
    if not due:
        return _controls(tx)
    rows = tx.execute(*_promotion(tx, due)).fetchall()
    return _promoted(tx, due, rows)


def expire_and_promote(tx: WriteTx, types: Sequence[str], delay: RetryDecision) -> dict[str, TypeControl]:
    """expire_leases and promote_due, their statements sent together (one round trip on
    PostgreSQL instead of two), each once a transaction. The order between them does not
    matter: expiry moves RUNNING jobs, promotion delayed PENDING ones, and a retry that
    expiry makes due at once is written ready (delayed = 0)."""
    due = _not_promoted(tx, types)
    answers = _after_expiry(tx, [_promotion(tx, due)] if due else [], delay)
    return _promoted(tx, due, answers[0]) if due else _controls(tx)


def _after_expiry(tx: WriteTx, statements: list[tuple[str, Any]], delay: RetryDecision) -> list[list[Any]]:
    """The answers of `statements`, sent together with the overdue probe (leases, timeouts)
    when this transaction has not run it yet; what the probe finds is expired first."""
    preamble = tx.claim_preamble
    if preamble.expired:
        return tx.execute_together(statements) if statements else []
    overdue, *answers = tx.execute_together([(tx.sql.OVERDUE, {"now": tx.now_us}), *statements])
    expire_overdue(tx, overdue, delay)
    preamble.expired = True
    return answers


def _not_promoted(tx: WriteTx, types: Sequence[str]) -> list[str]:
    """The types whose due delayed jobs this transaction has not made ready yet (its claims
    share one `now`). PostgreSQL: all of them, unless every one was promoted already and the
    controls then read bound none of them; its promotion reads the controls in the same
    statement, and another server may have changed them since (on SQLite the write lock
    keeps every other writer out). Where they bind, all but a type-wide rate window whose
    rows the transaction holds (flow.windows_known), promotion is skipped as well. A claim
    that skips it checks the controls with its own statement (`_claim_uncontrolled`,
    `claim_planned`), and runs again should they have changed."""
    preamble = tx.claim_preamble
    preamble.controls_fresh = False
    if tx.can.promotion_reads_controls:
        if preamble.controls is None or not preamble.promoted.issuperset(types):
            return list(types)
        if flow.any_binds(preamble.controls, types, tx.now) and not flow.windows_known(
            tx, preamble.controls, types
        ):
            return list(types)
        return []
    return [t for t in types if t not in preamble.promoted]


def _promoted(tx: WriteTx, types: Sequence[str], rows: list[Any]) -> dict[str, TypeControl]:
    """The controls after promoting `types`: read by the promotion (PostgreSQL), else as
    this transaction read them last."""
    preamble = tx.claim_preamble
    preamble.promoted.update(types)
    if tx.can.promotion_reads_controls:
        preamble.controls = flow.read_controls(tx, rows)
        preamble.controls_fresh = True
    return _controls(tx)


def _controls(tx: WriteTx) -> dict[str, TypeControl]:
    preamble = tx.claim_preamble
    if preamble.controls is None:
        preamble.controls = flow.read_controls(tx)
    return preamble.controls


def _promotion(tx: WriteTx, types: Sequence[str]) -> tuple[str, dict[str, Any]]:
    params = per_type_params(types)
    params["now"] = tx.now_us
    return tx.sql.promote_due(len(types)), params
