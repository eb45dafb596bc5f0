"""What a failed history prints: the seed, each invariant broken, and for the first few
violations the jobs involved, their events and the operations that touched them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from history.facts import Facts
from history.findings import Findings
from history.model import History, Op

SHOWN_PER_INVARIANT = 3
JOBS_PER_VIOLATION = 4
OPS_PER_JOB = 12


def short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_op(op: Op) -> str:
    answered = f"{op.recv:.3f}" if op.recv is not None else "never"
    outcome = f"{op.codes} {op.messages[:1]}" if op.codes or op.recv is None else short(op.data)
    return (
        f"#{op.seq} [{op.phase}] {op.thread} server {op.server} {op.kind} {short(op.variables, 120)}"
        f" sent {op.send:.3f} answered {answered} -> {outcome}"
    )


def describe_job(facts: Facts, job_id: int) -> list[str]:
    job = facts.jobs.get(job_id)
    if job is None:
        return [f"job {job_id}: not in the table"]
    lines = [
        f"job {job_id}: {job.type} key={job.concurrency_key} status={job.status} attempt={job.attempt}"
        f" retryCount={job.retry_count}/{job.max_retries} waitingFor={job.waiting_for}"
        f" dependsOn={job.depends_on} by {job.created_by} error={job.error!r}"
    ]
    lines += [f"  event #{e.id} {e.kind} -> {e.status} at {e.at:.6f}" for e in facts.events.get(job_id, [])]
    ops = facts.ops_by_job.get(job_id, [])
    lines += [f"  op {describe_op(op)}" for op in ops[:OPS_PER_JOB]]
    if len(ops) > OPS_PER_JOB:
        lines.append(f"  ... {len(ops) - OPS_PER_JOB} more ops")
    return lines


def render(history: History, found: Findings, saved: Path | None) -> str:
    facts = Facts(history)
    failed = found.failed()
    lines = [
        f"history seed {history.seed} on {history.backend} ({history.servers} server(s)):"
        f" {len(found.violations)} violations of {len(failed)} invariants,"
        f" {sum(found.checks.values())} checks, {len(history.ops)} operations",
        f"  re-run it: QUEUELOG_HISTORY_SEED={history.seed}"
        " (the seed fixes the operations, not the interleavings)",
    ]
    if saved is not None:
        lines.append(f"  the whole history: {saved}  (check it again: cd tests && python -m history {saved})")
    lines += [f"  note: {note}" for note in history.notes]
    lines += [f"  incident: {i.what} at {i.at:.3f}: {i.detail}" for i in history.incidents]
    for invariant, count in failed.most_common():
        lines.append(f"== {invariant}: {count} violation(s)")
        shown = [v for v in found.violations if v.invariant == invariant][:SHOWN_PER_INVARIANT]
        for violation in shown:
            lines.append(f"- {violation.message}")
            for job_id in violation.jobs[:JOBS_PER_VIOLATION]:
                lines += ["    " + line for line in describe_job(facts, job_id)]
    return "\n".join(lines)


def summary(found: Findings) -> str:
    """One line per invariant: checks made, violations."""
    failed = found.failed()
    return "\n".join(
        f"  {name:30s} {found.checks[name]:7d} checks  {failed.get(name, 0):5d} violations"
        for name in sorted(set(found.checks) | set(failed))
    )
