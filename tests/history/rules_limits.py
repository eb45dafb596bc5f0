"""Flow control at every moment (API.md section 9): RUNNING jobs within maxRunning and
maxRunningPerKey, claims within every sliding rate window, no claim of a paused type.

RUNNING counts come from a sweep over each type's events in id order. Ids are not commit
order on PostgreSQL, but the sweep never counts more than a claim saw: an exit that the
claim counted on had committed, so its event took its id first; a job whose exit has a
later id was still RUNNING for the claim. (Counting fewer only makes the check weaker.)

A limit applies with the allowance of timeline.py: a claim may go by any value that could
have been in effect between its send and its answer. A count above the claim's limit is
also let pass when another RUNNING job's claim, made under a looser limit, could have
committed after this one (that claim, not this one, made the count).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from history.facts import ClaimMoment, Facts
from history.findings import Findings
from history.model import EventRow
from history.timeline import highest

MICROS = 1_000_000


@dataclass(frozen=True)
class Held:
    """A RUNNING job, as its claim saw the limit."""

    job: int
    event: int
    moment: ClaimMoment
    allowed: float  # the loosest limit that could have been in effect for the claim


def could_have_made(other: Held, this: Held, count: int) -> bool:
    """Whether `other`'s claim may have committed after `this` one, under a limit that
    allows `count`."""
    separate = other.moment.op is None or other.moment.op != this.moment.op
    return separate and other.allowed >= count and other.moment.end >= this.moment.start


def judge(out: Findings, invariant: str, group: dict[int, Held], this: Held, what: str) -> None:
    count = len(group)
    holds = count <= this.allowed or any(
        could_have_made(other, this, count) for other in group.values() if other is not this
    )
    if not out.check(invariant, holds):
        held = ", ".join(f"{h.job} (claim event #{h.event}, op #{h.moment.op})" for h in group.values())
        out.fail(
            invariant,
            f"{what}: {count} RUNNING after claim event #{this.event} of job {this.job}"
            f" (op #{this.moment.op}), limit at most {this.allowed:g} then; running: {held}",
            group,
        )


def check_running_limits(facts: Facts, out: Findings) -> None:
    for job_type, events in facts.events_by_type.items():
        running: dict[int, Held] = {}
        per_key: dict[str, dict[int, Held]] = {}
        for event in events:
            job = facts.jobs[event.job_id]
            key = job.concurrency_key
            if event.kind != "CLAIMED":
                if event.status == "running":  # a cancel request: the job still runs
                    continue
                if running.pop(job.id, None) is not None and key is not None:
                    per_key[key].pop(job.id, None)
                continue
            moment = facts.claim_moment(event)
            limits = facts.timeline.candidates(job_type, "maxRunning", moment.start, moment.end)
            held = running[job.id] = Held(job.id, event.id, moment, highest(limits))
            judge(out, "max-running", running, held, f"type {job_type} (maxRunning {limits})")
            if key is not None:
                per_key_limits = facts.timeline.candidates(
                    job_type, "maxRunningPerKey", moment.start, moment.end
                )
                group = per_key.setdefault(key, {})
                held = group[job.id] = Held(job.id, event.id, moment, highest(per_key_limits))
                judge(
                    out,
                    "max-running-per-key",
                    group,
                    held,
                    f"type {job_type} key {key} (maxRunningPerKey {per_key_limits})",
                )


def micros(at: float) -> int:
    return round(at * MICROS)


def check_rate_limits(facts: Facts, out: Findings) -> None:
    """No window (t - period, t] holds more claims than the limit a claim at t went by.

    A window counts only the claims surely made under a rate limit of the same kind
    (type-wide, or per key): claims made while no limit may have been set were not
    recorded in any window."""
    for job_type, events in facts.events_by_type.items():
        claims = []
        for event in events:
            if event.kind == "CLAIMED":
                moment = facts.claim_moment(event)
                limits = facts.timeline.candidates(job_type, "rateLimit", moment.start, moment.end)
                key = facts.jobs[event.job_id].concurrency_key or ""
                claims.append((event, moment, limits, key))
        wide: list[int] = []
        keyed: dict[str, list[int]] = {}
        for event, _, limits, key in claims:
            if limits and all(r is not None and not r[2] for r in limits):
                wide.append(micros(event.at))
            if limits and all(r is not None and r[2] for r in limits):
                keyed.setdefault(key, []).append(micros(event.at))
        wide.sort()
        for times in keyed.values():
            times.sort()
        for event, moment, limits, key in claims:
            if not limits or None in limits:
                continue
            at = micros(event.at)
            counts = []
            for _, period, per_key in limits:
                times = keyed.get(key, []) if per_key else wide
                counts.append(
                    bisect.bisect_right(times, at) - bisect.bisect_right(times, at - period * MICROS)
                )
            if not out.check("rate-limit", any(n <= r[0] for n, r in zip(counts, limits, strict=True))):
                out.fail(
                    "rate-limit",
                    f"type {job_type}{f' key {key!r}' if any(r[2] for r in limits) else ''}: claim event"
                    f" #{event.id} of job {event.job_id} (op #{moment.op}) ends a window holding {counts}"
                    f" claims under rate limits {limits} (limit, period, perKey)",
                    window_jobs(claims, event, limits, key),
                )


def window_jobs(
    claims: list[tuple[EventRow, ClaimMoment, list, str]], last: EventRow, limits: list, key: str
) -> list[int]:
    period = max(r[1] for r in limits)
    per_key = all(r[2] for r in limits)
    return [
        e.job_id for e, _, _, k in claims if last.at - period < e.at <= last.at and (not per_key or k == key)
    ]


def check_pauses(facts: Facts, out: Findings) -> None:
    """No claim returns a job of a type that was certainly paused all along the claim."""
    for job_type, events in facts.events_by_type.items():
        for event in events:
            if event.kind != "CLAIMED":
                continue
            moment = facts.claim_moment(event)
            paused = facts.timeline.candidates(job_type, "paused", moment.start, moment.end)
            if not out.check("paused-claim", paused != [True]):
                out.fail(
                    "paused-claim",
                    f"type {job_type} was paused all along claim event #{event.id} of job {event.job_id}"
                    f" (op #{moment.op}, sent {moment.start:.3f}, answered {moment.end:.3f})",
                    [event.job_id],
                )


RULES = (check_running_limits, check_rate_limits, check_pauses)
