"""Dependencies (API.md section 10), and what the drain leaves behind.

- A job is claimed only once every dependency is COMPLETED: each dependency's COMPLETED
  event took its id before the claim's (the claim saw it committed).
- After the drain (every type resumed, no limits, workers claiming until nothing is
  claimable), nothing is RUNNING, and a PENDING job is one the contract lets wait: it waits
  for a dependency that is not COMPLETED, and that dependency is either PENDING itself
  (and allowed to be), or FAILED/CANCELLED with a retry of this job that put it back to
  wait: a retry that may have committed after the dependency ended. A PENDING job whose
  dependencies are all COMPLETED was left unclaimable; one waiting on a FAILED or
  CANCELLED dependency without such a retry missed its cascade. One whose expiresAt passed
  more than EXPIRY_GRACE seconds before the final read missed its expiry (API.md section 12).
"""

from __future__ import annotations

from history.facts import Facts
from history.findings import Findings
from history.model import NO_ANSWER, EventRow, JobRow
from history.rules_jobs import describe

WAITING_IS_FINE = "fine"
# what a PENDING job may break
STUCK = ("unclaimable-after-drain", "cascade-missed", "waiting-for-count", "expiry-missed")
# An expiry applies within a second (API.md section 12): a job still PENDING this long after
# its expiresAt, when the final state was read, missed it.
EXPIRY_GRACE = 2.0


def check_claims_after_dependencies(facts: Facts, out: Findings) -> None:
    """Each claim of a job comes after every dependency's COMPLETED event: in id order (the
    claim saw the completion committed), and in recorded time."""
    completed = {e.job_id: e for events in facts.events.values() for e in events if e.kind == "COMPLETED"}
    for job in facts.jobs.values():
        if not job.depends_on:
            continue
        for event in facts.events.get(job.id, []):
            if event.kind != "CLAIMED":
                continue
            early = [d for d in job.depends_on if d not in completed or completed[d].id > event.id]
            if not out.check("claimed-before-dependencies", not early):
                out.fail(
                    "claimed-before-dependencies",
                    f"job {job.id} claimed (event #{event.id}) before its dependencies {early} completed",
                    [job.id, *early],
                )
                continue
            stamped_before = [d for d in job.depends_on if completed[d].at > event.at]
            if not out.check("dependency-times", not stamped_before):
                d = stamped_before[0]
                out.fail(
                    "dependency-times",
                    f"job {job.id} claim (event #{event.id}) stamped {completed[d].at - event.at:.6f} s"
                    f" before its dependency {d} completed (event #{completed[d].id})",
                    [job.id, *stamped_before],
                )


def retry_answered_by(facts: Facts, job_id: int, retried: EventRow) -> float:
    """The latest moment the retry that made this RETRIED event may have committed: when
    its operation answered (a retryJob of this job or a retryJobs, whose send..answer holds
    the event's stamp); inf when no answer is known."""
    ops = [op for op in facts.ops_by_job.get(job_id, []) if op.kind == "retryJob"]
    ops += [op for op in facts.history.ops if op.kind == "retryJobs"]
    bounds = [
        op.answered_by for op in ops if (op.recv is None or op.ok) and op.send <= retried.at <= op.answered_by
    ]
    return max(bounds, default=NO_ANSWER)


def retried_after(facts: Facts, job: JobRow, dependency: int) -> bool:
    """Whether a retry of `job` may have come after `dependency` ended: its RETRIED event
    took its id later, or its operation answered after the dependency's end was stamped
    (a dependency's end stamped after the retry committed would have seen the retry and
    cancelled the job again)."""
    ended = facts.events[dependency][-1]
    for event in facts.events.get(job.id, []):
        if event.kind == "RETRIED" and (
            event.id > ended.id or retry_answered_by(facts, job.id, event) >= ended.at
        ):
            return True
    return False


class DrainVerdicts:
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.cache: dict[int, tuple[str, str]] = {}

    def waiting(self, job_id: int) -> tuple[str, str]:
        """(invariant broken or WAITING_IS_FINE, why) for a job left PENDING."""
        if job_id not in self.cache:
            self.cache[job_id] = self._judge(self.facts.jobs[job_id])
        return self.cache[job_id]

    def _judge(self, job: JobRow) -> tuple[str, str]:
        jobs = self.facts.jobs
        if job.expires_at is not None and job.expires_at <= self.facts.end:
            if job.expires_at < self.facts.end - EXPIRY_GRACE:
                return (
                    "expiry-missed",
                    f"job {job.id} still PENDING {self.facts.end - job.expires_at:.1f} s after its expiresAt",
                )
            return WAITING_IS_FINE, ""  # expiring as the final state was read: never claimable
        open_ = [d for d in job.depends_on if d not in jobs or jobs[d].status != "completed"]
        if not open_:
            return (
                "unclaimable-after-drain",
                f"job {job.id} PENDING with waitingFor {job.waiting_for}, dependencies {job.depends_on} all"
                " COMPLETED (or none), and the drain did not claim it",
            )
        for dependency in open_:
            status = jobs[dependency].status if dependency in jobs else "missing"
            if status == "pending":
                verdict, why = self.waiting(dependency)
                if verdict != WAITING_IS_FINE:
                    return "waits-on-stuck", f"job {job.id} waits on {dependency}: {why}"
            elif status in ("failed", "cancelled"):
                if not retried_after(self.facts, job, dependency):
                    return (
                        "cascade-missed",
                        f"job {job.id} PENDING (waitingFor {job.waiting_for}) with dependency {dependency}"
                        f" {status.upper()}, and no retry put it back to wait after that",
                    )
            else:
                return "waits-on-stuck", f"job {job.id} waits on {dependency}, which is {status}"
        if job.waiting_for != len(open_):
            return (
                "waiting-for-count",
                f"job {job.id} waitingFor {job.waiting_for}, but {len(open_)} dependencies are not COMPLETED",
            )
        return WAITING_IS_FINE, ""


def check_after_drain(facts: Facts, out: Findings) -> None:
    if facts.history.drain_started is None:
        return
    verdicts = DrainVerdicts(facts)
    for job in facts.jobs.values():
        if not out.check("running-after-drain", job.status != "running"):
            out.fail("running-after-drain", f"job {job.id} still RUNNING after the drain", [job.id])
        if job.status != "pending":
            continue
        verdict, why = verdicts.waiting(job.id)
        # A job waiting on a stuck one is not reported: the stuck one is.
        for invariant in STUCK:
            if not out.check(invariant, verdict != invariant):
                dependencies = [d for d in job.depends_on if d in facts.events]
                detail = "; ".join(f"{d}: {describe(facts.events[d])}" for d in dependencies)
                out.fail(invariant, f"{why}. Dependencies' events: {detail}", [job.id, *dependencies])


RULES = (check_claims_after_dependencies, check_after_drain)
