"""What was read beside the jobs: counters, controls, subscriptions.

- Counters equal the table: in every snapshot (one transaction), each job_counts row equals
  the jobs it counts; at the end, queueStats and typeControls.running equal the table.
- No control write lost: each field that a read of type_controls found is a value that
  could have been in effect during the read (timeline.py). A write that answered, then was
  undone by a concurrent write of another field, shows as a value no write left there.
- Every jobUpdated subscriber saw the job's states in the order they happened: what it
  received (a repeat merged) is a subsequence of the statuses of the job's events; and it
  ended right after delivering a terminal state, or is still open on a job that has not
  finished (unless its socket died first).
"""

from __future__ import annotations

from collections import Counter

from history.facts import Facts
from history.findings import Findings
from history.model import TERMINAL
from history.rules_jobs import describe
from history.timeline import DEFAULTS, FIELDS, normalised


def check_counters(facts: Facts, out: Findings) -> None:
    for snapshot in facts.history.counts:
        keys = set(snapshot.counters) | set(snapshot.table)
        wrong = {k: (snapshot.counters.get(k, 0), snapshot.table.get(k, 0)) for k in sorted(keys)}
        wrong = {k: v for k, v in wrong.items() if v[0] != v[1]}
        if not out.check("counters", not wrong):
            out.fail(
                "counters",
                f"{snapshot.phase} snapshot at {snapshot.at:.3f}: job_counts vs the table"
                f" (scope|name|type|status: counter, table): {wrong}",
            )
    final = facts.history.final
    table: Counter[tuple[str, str]] = Counter((job.type, job.status) for job in final.jobs)
    for job_type, counts in final.api_counts.items():
        for status, n in counts.items():
            if not out.check("counters", n == table[(job_type, status)]):
                out.fail(
                    "counters",
                    f"queueStats says {n} {status} {job_type} jobs, the table {table[(job_type, status)]}",
                )
    for job_type, running in final.api_running.items():
        if not out.check("counters", running == table[(job_type, "running")]):
            out.fail(
                "counters",
                f"typeControls says {running} {job_type} RUNNING, the table {table[(job_type, 'running')]}",
            )


def check_controls(facts: Facts, out: Findings) -> None:
    for read in facts.history.controls_reads:
        for job_type in facts.history.job_types:
            stored = read.controls.get(job_type, DEFAULTS)
            for field in FIELDS:
                value = normalised(field, stored.get(field, DEFAULTS[field]))
                possible = facts.timeline.candidates(job_type, field, read.send, read.recv)
                if not out.check("control-write-lost", value in possible):
                    writes = facts.timeline.writes_near(job_type, field, read.send, read.recv)
                    listed = "; ".join(
                        f"op #{w.op} {w.value} sent {w.send:.3f} answered {w.recv:.3f}" for w in writes
                    )
                    out.fail(
                        "control-write-lost",
                        f"type {job_type} {field} read as {value} ({read.phase} read"
                        f" {read.send:.3f}..{read.recv:.3f}); could only be {possible}. Writes: {listed}",
                    )


def merged(statuses: list[str]) -> list[str]:
    """The statuses with each run of repeats merged into one."""
    return [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s]


def is_subsequence(seen: list[str], happened: list[str]) -> bool:
    remaining = iter(happened)
    return all(any(s == h for h in remaining) for s in seen)


def check_subscriptions(facts: Facts, out: Findings) -> None:
    for subscription in facts.history.subscriptions:
        job = facts.jobs.get(subscription.job_id)
        if job is None:
            continue
        seen = merged([s.lower() for s in subscription.statuses])
        happened = facts.statuses(job.id)
        if not out.check("subscription-order", is_subsequence(seen, happened)):
            out.fail(
                "subscription-order",
                f"jobUpdated({job.id}) on server {subscription.server} delivered {subscription.statuses};"
                f" the job went {describe(facts.events[job.id])}",
                [job.id],
            )
        if subscription.ended == "closed":
            continue
        if subscription.ended == "complete":  # on a terminal state (the job may be retried since)
            ended_well = bool(seen) and seen[-1] in TERMINAL
        else:  # still open: the job must not have finished
            ended_well = subscription.ended is None and job.status not in TERMINAL
        if not out.check("subscription-terminal", ended_well):
            out.fail(
                "subscription-terminal",
                f"jobUpdated({job.id}) on server {subscription.server} delivered {subscription.statuses} and"
                f" {'ended: ' + subscription.ended if subscription.ended else 'never ended'}; the job is"
                f" {job.status.upper()}: {describe(facts.events[job.id])}",
                [job.id],
            )


RULES = (check_counters, check_controls, check_subscriptions)
