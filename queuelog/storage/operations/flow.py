"""Flow control inside the claim's transaction (API.md section 9).

A claim reads the type controls first (one small table). Types without controls are
claimed as before, in one statement. For the others the claim takes the lock that every
server's controlled claims share (PostgreSQL: one transaction-level advisory lock; SQLite's
write lock already is one), then counts what limits the type: its RUNNING jobs (the
counters, plus this transaction's own moves), its RUNNING jobs per key, its claims in the
rate window (rate_claims). Each count is exact because no other controlled claim can commit
between the count and this claim's commit. The claim then reads candidates within those
quotas: each type's ready jobs (without a key, and with one), and for per-key types, the
head of each key that has room. It takes the first `limit` in claim order, never more per
type or per key than the quotas, and records rate-limited claims in rate_claims.

Nothing that cannot be claimed is walked: a paused or full type is not read at all, a full
key's jobs are skipped by seeking past the key (ix_jobs_ready_key), delayed jobs are in
another index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from queuelog import jsonutil
from queuelog.model import RateLimit, TypeControl
from queuelog.storage.schema.codec import micros_to_datetime
from queuelog.storage.statements import RUNNING, per_type_params
from queuelog.storage.transaction import Connection, WriteTx

NO_KEY = ""  # rate_claims.key of a type-wide window, or of jobs without a key
EVERY_JOB_SCOPE = '[["*", ""]]'  # job_counts' scope of every job (counters.ALL)
KEY_HEADS_AT_ONCE = 32  # keys whose heads one statement reads


def keyed_walk_rows(limit: int) -> int:
    """How many of a per-key type's keyed jobs a claim reads in claim order before it falls
    back to reading each key's head: enough for `limit` when few keys are full."""
    return 4 * limit + 32


def read_controls(conn: Connection, rows: Sequence[Any] | None = None) -> dict[str, TypeControl]:
    """Every type's controls as stored (running counts not filled in), from TYPE_CONTROLS's
    `rows` when they have been read already."""
    controls: dict[str, TypeControl] = {}
    if rows is None:
        rows = conn.execute(conn.sql.TYPE_CONTROLS).fetchall()
    for row in rows:
        job_type, paused, until, max_running, per_key, rate, period, rate_per_key, timeout = row
        controls[job_type] = TypeControl(
            type=job_type,
            paused=bool(paused),
            paused_until=micros_to_datetime(until) if isinstance(until, int) else until,
            max_running=max_running,
            max_running_per_key=per_key,
            rate_limit=RateLimit(rate, period, bool(rate_per_key)) if rate is not None else None,
            timeout_seconds=timeout,
        )
    return controls


def binds(control: TypeControl | None, now: datetime) -> bool:
    """Whether a claim of this type must go through the controlled path: it has a limit
    that only a count made under the controlled-claim lock can keep. (A paused type is
    left out of the claim instead: see `paused`.)"""
    if control is None or control.paused_at(now):
        return False
    return control.max_running is not None or control.per_key or control.rate_limit is not None


@dataclass
class Paused:
    held: list[str]  # the claim's types that are paused now
    wake_at: datetime | None  # the earliest end of a pause with `until` among them


def paused(controls: dict[str, TypeControl], types: Sequence[str], now: datetime) -> Paused | None:
    """The claim's types that a pause holds back, or None when none is paused."""
    held = [t for t in types if (c := controls.get(t)) is not None and c.paused_at(now)]
    if not held:
        return None
    ends = [u for t in held if (u := controls[t].paused_until) is not None]
    return Paused(held, min(ends) if ends else None)


def any_binds(controls: dict[str, TypeControl], types: Sequence[str], now: datetime) -> bool:
    """Whether a claim of these types must go through the controlled path."""
    return any(binds(controls.get(t), now) for t in types)


@dataclass
class ClaimPlan:
    # (type, quota): at most `quota` of the type's ready jobs, keyed and not (per-key types:
    # only those without a key; their keyed jobs come through `keys`)
    types: list[tuple[str, int]] = field(default_factory=list)
    per_key_types: set[str] = field(default_factory=set)
    type_quota: dict[str, int] = field(default_factory=dict)
    # (type, key) -> at most this many of the key's ready jobs, for the keys whose RUNNING
    # jobs or rate window were counted (with room left); any other key of a per-key type
    # may take default_room[type], and the keys in full[type] none
    keys: dict[tuple[str, str], int] = field(default_factory=dict)
    default_room: dict[str, int] = field(default_factory=dict)
    full: dict[str, list[str]] = field(default_factory=dict)
    # types whose claims go into rate_claims: type -> per key?
    rated: dict[str, bool] = field(default_factory=dict)
    # the earliest moment a held type may become claimable by time alone (a pause with
    # `until`, a rate window that frees a slot); None: only an event frees it
    wake_at: datetime | None = None
    held: list[str] = field(default_factory=list)  # types a control held back entirely
    also: list[list[Any]] = field(default_factory=list)  # the answers of lock_and_plan's `also`
    # lock_and_plan's `also` when it sent nothing (every window known already): the claim
    # sends them with its own statement
    unsent: list[tuple[str, Any]] = field(default_factory=list)
    # whether the plan read RUNNING counts, per type or per key (a claim is then stamped
    # after them)
    counted_running: bool = False

    def room(self, job_type: str, key: str) -> int:
        """How many of this key's ready jobs the claim may take."""
        if key in self.full.get(job_type, ()):
            return 0
        return self.keys.get((job_type, key), self.default_room.get(job_type, 0))

    def wake(self, at: datetime) -> None:
        if self.wake_at is None or at < self.wake_at:
            self.wake_at = at


RUNNING_COUNTS = {"scopes": EVERY_JOB_SCOPE}  # COUNTS_OF_SCOPES's parameters for running_counts


def running_counts(conn: Connection, rows: Sequence[Any] | None = None) -> dict[str, int]:
    """RUNNING jobs per type: the counters (COUNTS_OF_SCOPES's `rows` when read already),
    with a write transaction's moves not yet in them."""
    if rows is None:
        rows = conn.execute(conn.sql.COUNTS_OF_SCOPES, RUNNING_COUNTS).fetchall()
    counts = {job_type: n for _, _, job_type, status, n in rows if status == RUNNING}
    moves = conn.moves if isinstance(conn, WriteTx) else ()
    for job_type, _, old_status, _, new_status, _ in moves:
        delta = (new_status == RUNNING) - (old_status == RUNNING)
        if delta:
            counts[job_type] = counts.get(job_type, 0) + delta
    return counts


def rate_window(tx: WriteTx, job_type: str, rows: Sequence[Any]) -> dict[str, tuple[int, datetime]]:
    """key -> (claims in the window, the oldest of them), from RATE_WINDOW's rows and the
    claims this transaction made already (their rows are written with its events)."""
    window = {key: (n, _moment(oldest)) for key, n, oldest in rows}
    for row in tx.rate_claims:
        if row["type"] == job_type:
            n, oldest = window.get(row["key"], (0, tx.now))
            window[row["key"]] = (n + 1, min(oldest, micros_to_datetime(row["at"])))
    return window


def _moment(value: Any) -> datetime:
    return micros_to_datetime(value) if isinstance(value, int) else value


def lock_and_plan(
    tx: WriteTx,
    types: Sequence[str],
    limit: int,
    controls: dict[str, TypeControl],
    also: Sequence[tuple[str, Any]] = (),
) -> ClaimPlan:
    """Take the controlled-claim lock and read what each type's quota needs, all in one
    round trip (a pipeline on PostgreSQL: each statement still runs after the lock, so it
    sees every claim committed before); then each type's quota under its controls. The
    statements `also` go in the same round trip (their answers: the plan's `also`): every
    round trip under the lock holds up every server's controlled claims.

    The rate windows are counted from the batch's time (before the lock): a claim made in
    the moments it waited counts a little longer, never shorter. What follows the lock is
    timed from when it was granted."""
    now = tx.now
    live = {t: c for t in types if (c := controls.get(t)) is not None and not c.paused_at(now)}
    if windows_known(tx, controls, types):
        return _plan_on_known_windows(tx, types, limit, controls, also)
    # Where the write lock keeps other writers out (SQLite), it is the lock already, and the
    # batch took its time once it held it.
    locks = tx.can.concurrent_writes
    reads: list[tuple[str, Any]] = [(tx.sql.LOCK_CONTROLLED_CLAIMS, {})] if locks else []
    counts_running = any(c.max_running is not None for c in live.values())
    if counts_running:
        reads.append((tx.sql.COUNTS_OF_SCOPES, RUNNING_COUNTS))
    for job_type, control in live.items():
        if control.rate_limit is not None:
            since = tx.now_us - control.rate_limit.period_seconds * 1_000_000
            # Rows older than the window are never read again: forgotten here, where the
            # window is read anyway.
            reads.append((tx.sql.FORGET_RATE_CLAIMS, {"type": job_type, "since": since}))
            reads.append((tx.sql.RATE_WINDOW, {"type": job_type, "since": since}))
        if control.per_key and control.max_running_per_key is not None:
            reads.append((tx.sql.RUNNING_PER_KEY, {"type": job_type}))
    answered = tx.execute_together([*reads, *also])
    answers = iter(answered[: len(reads)])
    if locks:
        (granted,) = next(answers)[0]
        tx.move_clock_to(micros_to_datetime(granted))
    running = running_counts(tx, next(answers)) if counts_running else None
    read: dict[str, dict[str, Any]] = {}
    windows = tx.claim_preamble.rate_windows
    if windows is None:
        windows = tx.claim_preamble.rate_windows = {}
    for job_type, control in live.items():
        read[job_type] = {}
        if control.rate_limit is not None:
            next(answers)  # FORGET_RATE_CLAIMS
            windows[job_type] = next(answers)
            read[job_type]["window"] = rate_window(tx, job_type, windows[job_type])
        if control.per_key and control.max_running_per_key is not None:
            read[job_type]["running_per_key"] = dict(next(answers))
    plan = _plan(types, limit, controls, now, running, read)
    plan.also = answered[len(reads) :]
    return plan


def _plan_on_known_windows(
    tx: WriteTx,
    types: Sequence[str],
    limit: int,
    controls: dict[str, TypeControl],
    also: Sequence[tuple[str, Any]],
) -> ClaimPlan:
    """lock_and_plan for a claim after the one that took the lock and read the windows
    (windows_known): nothing to read, `also` left for the claim's own statement."""
    known = tx.claim_preamble.rate_windows or {}
    read = {t: {"window": rate_window(tx, t, known[t])} for t in types if t in known}
    plan = _plan(types, limit, controls, tx.now, None, read)
    plan.unsent = list(also)
    return plan


def windows_known(tx: WriteTx, controls: dict[str, TypeControl], types: Sequence[str]) -> bool:
    """Whether this transaction holds the controlled-claim lock and has read all that the
    quotas of these types depend on: only type-wide rate windows (RUNNING counts and keys
    move without the lock), each read already (ClaimPreamble.rate_windows)."""
    known = tx.claim_preamble.rate_windows
    if known is None:
        return False
    for job_type in types:
        control = controls.get(job_type)
        if control is None or control.paused_at(tx.now):
            continue
        if control.max_running is not None or control.per_key or job_type not in known:
            return False
    return True


def _plan(
    types: Sequence[str],
    limit: int,
    controls: dict[str, TypeControl],
    now: datetime,
    running: dict[str, int] | None,
    read: dict[str, dict[str, Any]],
) -> ClaimPlan:
    """Each type's quota, from what lock_and_plan read."""
    result = ClaimPlan()
    result.counted_running = running is not None or any("running_per_key" in r for r in read.values())
    for job_type in types:
        control = controls.get(job_type)
        if control is None:
            result.types.append((job_type, limit))
            result.type_quota[job_type] = limit
            continue
        if control.paused_at(now):
            if control.paused_until is not None:
                result.wake(control.paused_until)
            result.held.append(job_type)
            continue
        quota = limit
        if control.max_running is not None and running is not None:
            quota = min(quota, control.max_running - running.get(job_type, 0))
        window: dict[str, tuple[int, datetime]] = {}
        rate = control.rate_limit
        if rate is not None:
            window = read[job_type]["window"]
            result.rated[job_type] = rate.per_key
            if not rate.per_key:
                used, oldest = window.get(NO_KEY, (0, now))
                if used >= rate.limit:
                    result.wake(oldest + timedelta(seconds=rate.period_seconds))
                quota = min(quota, rate.limit - used)
        if quota <= 0:
            result.held.append(job_type)
            continue
        result.type_quota[job_type] = quota
        if not control.per_key:
            result.types.append((job_type, quota))
            continue
        result.per_key_types.add(job_type)
        unkeyed = quota
        if rate is not None and rate.per_key:
            used, oldest = window.get(NO_KEY, (0, now))
            if used >= rate.limit:
                result.wake(oldest + timedelta(seconds=rate.period_seconds))
            unkeyed = min(unkeyed, rate.limit - used)
        result.types.append((job_type, max(unkeyed, 0)))
        running_per_key = read[job_type].get("running_per_key", {})
        counted = set(running_per_key)
        if rate is not None and rate.per_key:
            counted.update(key for key in window if key != NO_KEY)
        default_room = quota
        if control.max_running_per_key is not None:
            default_room = min(default_room, control.max_running_per_key)
        if rate is not None and rate.per_key:
            default_room = min(default_room, rate.limit)
        result.default_room[job_type] = default_room
        full = result.full[job_type] = []
        for key in sorted(counted):
            room = quota
            if control.max_running_per_key is not None:
                room = min(room, control.max_running_per_key - running_per_key.get(key, 0))
            if rate is not None and rate.per_key:
                used, oldest = window.get(key, (0, now))
                if used >= rate.limit:
                    result.wake(oldest + timedelta(seconds=rate.period_seconds))
                room = min(room, rate.limit - used)
            if room > 0:
                result.keys[(job_type, key)] = room
            else:
                full.append(key)
    return result


def choose_candidates(tx: WriteTx, claim: ClaimPlan, limit: int) -> list[int]:
    """The ids of the first `limit` ready jobs in claim order within every quota.

    Each per-key type's keyed jobs are read in claim order with the full keys left out
    (KEYED_WALK, at most keyed_walk_rows): the rows it skips are those of full keys, and a
    walk that stops short of what the claim needs is enough when the choice ends before its
    last row. Otherwise (one key's backlog fills the walk) the claim reads the head of each
    key instead (KEYED_HEADS: one seek per key), and then, for the chosen keys that may take
    more than one job, their next jobs."""
    rows = _unkeyed_and_plain_heads(tx, claim)
    walk = keyed_walk_rows(limit)
    walked: dict[str, list[Any]] = {}
    full = {t: jsonutil.dumps(claim.full.get(t, [])).decode() for t in claim.per_key_types}
    for job_type in sorted(claim.per_key_types):
        params = {"type": job_type, "full": full[job_type], "walk": walk}
        walked[job_type] = tx.execute(tx.sql.KEYED_WALK, params).fetchall()
    choice = _choose([*rows, *(r for w in walked.values() for r in w)], claim, limit)
    cut = [t for t, w in walked.items() if len(w) == walk and not choice.ends_before(t, _order(w[-1]))]
    if not cut:
        return choice.ids
    for job_type in cut:
        params = {"type": job_type, "full": full[job_type]}
        walked[job_type] = tx.execute(tx.sql.KEYED_HEADS, params).fetchall()
    candidates = [*rows, *(r for w in walked.values() for r in w)]
    choice = _choose(candidates, claim, limit)
    more = {
        (job_type, key): room
        for (job_type, key) in choice.keys
        if job_type in cut and (room := claim.room(job_type, key)) > 1
    }
    if more:
        known = {row[0] for row in candidates}
        candidates += [row for row in _key_heads(tx, more) if row[0] not in known]
        choice = _choose(candidates, claim, limit)
    return choice.ids


def _unkeyed_and_plain_heads(tx: WriteTx, claim: ClaimPlan) -> list[Any]:
    """(id, type, key, priority, created_at) of each planned type's first ready jobs within
    its quota: per-key types' unkeyed jobs only."""
    if not claim.types:
        return []
    names = [t for t, _ in claim.types]
    quotas = [q for _, q in claim.types]
    keyed = [0 if t in claim.per_key_types else q for t, q in claim.types]
    params = per_type_params(names, quotas, kquota=keyed)
    return tx.execute(tx.sql.ready_heads(len(names)), params).fetchall()


def _key_heads(tx: WriteTx, wanted: dict[tuple[str, str], int]) -> list[Any]:
    """The first `room` ready jobs of each (type, key)."""
    rows: list[Any] = []
    items = sorted(wanted.items())
    for start in range(0, len(items), KEY_HEADS_AT_ONCE):
        chunk = items[start : start + KEY_HEADS_AT_ONCE]
        params = per_type_params(
            [t for (t, _), _ in chunk], [q for _, q in chunk], key=[k for (_, k), _ in chunk]
        )
        rows.extend(tx.execute(tx.sql.key_heads(len(chunk)), params).fetchall())
    return rows


Order = tuple[int, Any, int]


def _order(row: Any) -> Order:
    """A candidate's place in claim order: highest priority, then oldest, then lowest id."""
    return (-row[3], row[4], row[0])


@dataclass
class _Choice:
    ids: list[int]
    keys: set[tuple[str, str]]  # the (type, key) of the chosen keyed jobs of per-key types
    full_at: Order | None  # where the claim took its `limit`-th job
    type_full_at: dict[str, Order]  # where each type reached its quota

    def ends_before(self, job_type: str, last: Order) -> bool:
        """Whether rows after `last` in claim order could not change the choice for this type:
        the claim, or the type's quota, was full by then."""
        ends = [at for at in (self.full_at, self.type_full_at.get(job_type)) if at is not None]
        return any(at <= last for at in ends)


def _choose(rows: list[Any], claim: ClaimPlan, limit: int) -> _Choice:
    """The first `limit` candidates in claim order within every quota."""
    rows = sorted(rows, key=_order)
    per_type: dict[str, int] = {}
    per_key: dict[tuple[str, str], int] = {}
    choice = _Choice([], set(), None, {})
    for row in rows:
        job_id, job_type, key, *_ = row
        if per_type.get(job_type, 0) >= claim.type_quota.get(job_type, 0):
            continue
        if key is not None and job_type in claim.per_key_types:
            taken = per_key.get((job_type, key), 0)
            if taken >= claim.room(job_type, key):
                continue
            per_key[(job_type, key)] = taken + 1
            choice.keys.add((job_type, key))
        per_type[job_type] = per_type.get(job_type, 0) + 1
        if per_type[job_type] == claim.type_quota.get(job_type, 0):
            choice.type_full_at[job_type] = _order(row)
        choice.ids.append(job_id)
        if len(choice.ids) == limit:
            choice.full_at = _order(row)
            break
    return choice


def record_rate_claims(tx: WriteTx, claim: ClaimPlan, claimed: Sequence[Any]) -> None:
    """Queue the rate-limited claims' rate_claims rows: written with the batch's events."""
    tx.rate_claims.extend(
        {
            "type": job.type,
            "key": (job.concurrency_key or NO_KEY) if claim.rated[job.type] else NO_KEY,
            "at": tx.now_us,
        }
        for job in claimed
        if job.type in claim.rated
    )
