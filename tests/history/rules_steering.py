"""Steering a job after enqueue (API.md section 12): edits, expiry, snoozes, progress.

Which events may follow which (an edit only of a PENDING job, an expiry only of a PENDING
one, a snooze only of a RUNNING one, and after a cancel request nothing but COMPLETED or
CANCELLED) is rules_jobs' event-order; that a snooze uses no retry is its replay's
retryCount. Here:

- Edits. Each UPDATED event is one edit that answered (or got no answer): update-count. An
  applied edit answered the job PENDING with the values it asked for (runJobNow: due between
  its send and its answer): update-answer. An edit refused CONFLICT met a job that was not
  PENDING at some moment between its send and its answer (its events' stamps), or whose
  expiry had passed: update-refused. Every claim saw the settings of the last edit applied
  before it (in event order), or the enqueue's, never a mix: update-seen-by-claim (runAt
  too, unless a retry or a snooze moved it since, or the job has dependencies: their
  completion makes it due).
- Expiry. No claim is stamped at or after the expiresAt then in effect (unless its stamp
  was only carried up to the job's last one): claimed-after-expiry. No EXPIRED event comes
  before it: expired-early. A job that ended EXPIRED has error `expired`: expiry-error. Its
  dependents end cancelled (rules_dependencies' cascade-missed), and one still PENDING well
  after its expiry is expiry-missed there.
- Snoozes. The row's snoozeCount is the number of SNOOZED events: snooze-count. A snoozeJob
  that answered ended its attempt SNOOZED (answered PENDING), or CANCELLED after a cancel
  request (answered CANCELLED): snooze-outcome. The next claim after a snooze (no edit
  between) is not stamped before the runAt it set: snooze-run-at.
- Progress. A snoozeJob or reportProgress that answered was sent by the worker whose claim
  got that attempt, and answered that attempt: steer-holder. Every claim answers progress
  null: progress-reset. The row's final progress is the last report its holder had
  answered on the job's last attempt (or one that got no answer), and null when none was
  made on that attempt: progress-final; progress-stale when it is instead an earlier report
  of that attempt (one a server held back and stored after a later one).
"""

from __future__ import annotations

from history.facts import CLAIMS, Facts, answered_jobs
from history.findings import Findings
from history.generator import seconds_of
from history.model import EventRow, Op
from history.rules_jobs import describe

TOLERANCE = 0.002  # seconds: a DateTime's round trip through either database
ENDS = frozenset({"COMPLETED", "RETRYING", "FAILED", "CANCELLED", "LEASE_EXPIRED", "SNOOZED"})


def same_time(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= TOLERANCE


def check_edits(facts: Facts, out: Findings) -> None:
    for job_id, edits in facts.edits.items():
        events = facts.events.get(job_id, [])
        updated = sum(1 for e in events if e.kind == "UPDATED")
        applied = sum(1 for op in edits if op.ok)
        unknown = sum(1 for op in edits if op.recv is None)
        if not out.check("update-count", applied <= updated <= applied + unknown):
            out.fail(
                "update-count",
                f"job {job_id}: {updated} UPDATED events, {applied} edits answered and {unknown} unanswered:"
                f" {describe(events)}",
                [job_id],
            )
        for op in edits:
            if op.ok:
                wrong = wrong_answer(op)
                if not out.check("update-answer", not wrong):
                    out.fail("update-answer", f"job {job_id} op #{op.seq} {op.kind}: {wrong}", [job_id])
            elif (
                op.recv is not None
                and "CONFLICT" in op.codes
                and not out.check("update-refused", refusal_explained(facts, job_id, op))
            ):
                out.fail(
                    "update-refused",
                    f"job {job_id} op #{op.seq} {op.kind} sent {op.send:.6f} answered {op.recv:.6f}"
                    f" CONFLICT {op.messages[:1]}, but the job was PENDING all along and not"
                    f" expired: {describe(events)}",
                    [job_id],
                )
        check_claims_saw_edits(facts, job_id, out)


def wrong_answer(op: Op) -> str:
    """What an applied edit's answer got wrong ('' when nothing)."""
    data = op.data
    if data["status"] != "PENDING":
        return f"answered {data['status']}"
    if op.kind == "runJobNow":
        run_at = seconds_of(data["runAt"]) or 0.0
        if not op.send - TOLERANCE <= run_at <= op.answered_by + TOLERANCE:
            return f"runAt {data['runAt']} not between its send and its answer"
        return ""
    edit = op.variables["input"]
    for name in ("priority", "maxRetries"):
        if name in edit and edit[name] != data[name]:
            return f"{name} {data[name]!r}, asked {edit[name]!r}"
    for name in ("runAt", "expiresAt"):
        if name in edit and not same_time(seconds_of(edit[name]), seconds_of(data[name])):
            return f"{name} {data[name]!r}, asked {edit[name]!r}"
    return ""


def status_between(events: list[EventRow], start: float, end: float) -> set[str]:
    """The statuses the job had at some moment of [start, end], by its events' stamps (an
    event is stamped no later than it commits)."""
    found = set()
    before = [e for e in events if e.at <= start]
    if before:
        found.add(before[-1].status)
    found.update(e.status for e in events if start < e.at <= end)
    return found


def refusal_explained(facts: Facts, job_id: int, op: Op) -> bool:
    events = facts.events.get(job_id, [])
    if status_between(events, op.send, op.answered_by) - {"pending"}:
        return True
    return any(at is not None and at <= op.answered_by for at in facts.possible_expiries(job_id))


def check_claims_saw_edits(facts: Facts, job_id: int, out: Findings) -> None:
    """Each claim of an edited job answered the settings in effect before it."""
    settings = facts.settings(job_id)
    if settings is None:
        return
    attempt = 0
    events = facts.events[job_id]
    for index, event in enumerate(events):
        if event.kind != "CLAIMED":
            continue
        attempt += 1
        answer = facts.claim_answer(job_id, attempt)
        if answer is None or index == 0 or "maxRetries" not in answer:
            continue
        expected = settings[index - 1]
        seen = (answer["priority"], answer["maxRetries"], seconds_of(answer["expiresAt"]))
        holds = seen[:2] == (expected.priority, expected.max_retries) and same_time(
            seen[2], expected.expires_at
        )
        # a dependent's runAt moves to when its last dependency completed (section 10)
        if expected.run_at is not None and not facts.jobs[job_id].depends_on:
            holds = holds and same_time(seconds_of(answer["runAt"]), expected.run_at)
        if not out.check("update-seen-by-claim", holds):
            out.fail(
                "update-seen-by-claim",
                f"job {job_id} attempt {attempt} (claim event #{event.id}) answered priority {seen[0]},"
                f" maxRetries {seen[1]}, expiresAt {answer['expiresAt']}, runAt {answer['runAt']}; in effect"
                f" then (set by {'op #' + str(expected.op) if expected.op is not None else 'the enqueue'}):"
                f" {expected}: {describe(events)}",
                [job_id],
            )


def expiries_in_effect(facts: Facts, job_id: int) -> list[float | None] | None:
    """The expiresAt in effect after each event, when known: from the settings, or the row's
    for a job never edited."""
    settings = facts.settings(job_id)
    if settings is not None:
        return [s.expires_at for s in settings]
    if facts.edits.get(job_id):
        return None
    return [facts.jobs[job_id].expires_at] * len(facts.events.get(job_id, []))


def check_expiry(facts: Facts, out: Findings) -> None:
    for job_id, job in facts.jobs.items():
        events = facts.events.get(job_id, [])
        if not events:
            continue
        expiries = expiries_in_effect(facts, job_id)
        if expiries is not None:
            for index, event in enumerate(events[1:], start=1):
                expires = expiries[index - 1]
                before = events[index - 1]
                if event.kind == "CLAIMED":
                    # a claim's stamp is max(now, runAt, the job's last stamp): only its own
                    # clock is bound by the expiry
                    late = expires is not None and event.at >= expires and event.at != before.at
                    if not out.check("claimed-after-expiry", not late):
                        out.fail(
                            "claimed-after-expiry",
                            f"job {job_id} claimed (event #{event.id}) {event.at - (expires or 0):.6f} s"
                            f" after its expiresAt: {describe(events)}",
                            [job_id],
                        )
                elif event.kind == "EXPIRED":
                    early = expires is None or event.at < expires - TOLERANCE
                    if not out.check("expired-early", not early):
                        out.fail(
                            "expired-early",
                            f"job {job_id} EXPIRED (event #{event.id} at {event.at:.6f}) while its expiresAt"
                            f" was {expires}: {describe(events)}",
                            [job_id],
                        )
        if events[-1].kind == "EXPIRED" and not out.check("expiry-error", job.error == "expired"):
            out.fail("expiry-error", f"job {job_id} EXPIRED with error {job.error!r}", [job_id])


def attempt_end(events: list[EventRow], attempt: int) -> tuple[EventRow | None, bool]:
    """The event that ended this attempt (None: still running), and whether its cancellation
    had been requested."""
    seen = 0
    requested = False
    for event in events:
        if event.kind == "CLAIMED":
            seen += 1
            continue
        if seen != attempt:
            continue
        if event.kind == "CANCEL_REQUESTED":
            requested = True
        elif event.kind in ENDS:
            return event, requested
    return None, requested


def check_snoozes(facts: Facts, out: Findings) -> None:
    for job_id, job in facts.jobs.items():
        events = facts.events.get(job_id, [])
        snoozed = sum(1 for e in events if e.kind == "SNOOZED")
        if not out.check("snooze-count", job.snooze_count == snoozed):
            out.fail(
                "snooze-count",
                f"job {job_id} snoozeCount {job.snooze_count}, {snoozed} SNOOZED events: {describe(events)}",
                [job_id],
            )
    for op in facts.history.ops:
        if op.kind != "snoozeJob" or not op.ok:
            continue
        job_id, attempt = int(op.variables["id"]), int(op.variables["attempt"])
        events = facts.events.get(job_id, [])
        end, requested = attempt_end(events, attempt)
        status = op.data["status"]
        if requested:
            holds = end is not None and end.kind == "CANCELLED" and status == "CANCELLED"
        elif end is None:
            holds = False
        else:
            count = sum(1 for e in events if e.kind == "SNOOZED" and e.id <= end.id)
            holds = end.kind == "SNOOZED" and status == "PENDING" and op.data["snoozeCount"] == count
        if not out.check("snooze-outcome", holds):
            out.fail(
                "snooze-outcome",
                f"op #{op.seq} snoozeJob({job_id}, attempt {attempt}) answered {status} snoozeCount"
                f" {op.data['snoozeCount']}; the attempt ended {end.kind if end else 'never'}"
                f"{' after a cancel request' if requested else ''}: {describe(events)}",
                [job_id],
            )
        if end is not None and end.kind == "SNOOZED":
            check_snooze_run_at(facts, job_id, end, int(op.variables["seconds"]), out)


def check_snooze_run_at(facts: Facts, job_id: int, snoozed: EventRow, seconds: int, out: Findings) -> None:
    events = facts.events[job_id]
    after = [e for e in events if e.id > snoozed.id]
    for event in after:
        if event.kind in ("UPDATED", "RETRIED", "CANCELLED", "EXPIRED"):
            return
        if event.kind == "CLAIMED":
            early = event.at < snoozed.at + seconds - TOLERANCE
            if not out.check("snooze-run-at", not early):
                out.fail(
                    "snooze-run-at",
                    f"job {job_id} snoozed {seconds} s (event #{snoozed.id}) and claimed again"
                    f" {event.at - snoozed.at:.3f} s later (event #{event.id}): {describe(events)}",
                    [job_id],
                )
            return


def reports(facts: Facts, job_id: int, attempt: int) -> list[Op]:
    """The reportProgress ops of the worker that held this attempt, on it, in order."""
    holder = facts.claimer(job_id, attempt)
    return [
        op
        for op in facts.ops_by_job.get(job_id, [])
        if op.kind == "reportProgress" and op.thread == holder and int(op.variables["attempt"]) == attempt
    ]


def check_progress(facts: Facts, out: Findings) -> None:
    for op in facts.history.ops:
        if op.kind in CLAIMS:
            for job in answered_jobs(op):
                if "progress" in job and not out.check("progress-reset", job["progress"] is None):
                    out.fail(
                        "progress-reset",
                        f"op #{op.seq} {op.kind} answered job {job['id']} attempt {job['attempt']} with"
                        f" progress {job['progress']}",
                        [int(job["id"])],
                    )
        elif op.kind in ("reportProgress", "snoozeJob") and op.ok:
            job_id, attempt = int(op.variables["id"]), int(op.variables["attempt"])
            holder = facts.claimer(job_id, attempt)
            holds = holder == op.thread and op.data["attempt"] == attempt
            if op.kind == "reportProgress":
                holds = holds and op.data["status"] == "RUNNING"
            if not out.check("steer-holder", holds):
                out.fail(
                    "steer-holder",
                    f"op #{op.seq} {op.kind}({job_id}, attempt {attempt}) by {op.thread} answered"
                    f" {op.data['status']} attempt {op.data['attempt']}; that attempt was claimed by"
                    f" {holder}",
                    [job_id],
                )
    for job_id, row in facts.jobs.items():
        made = reports(facts, job_id, row.attempt) if row.attempt else []
        answered = [op for op in made if op.ok]
        possible: list[float | None] = [] if answered else [None]
        if answered:
            possible.append(float(answered[-1].variables["progress"]))
        possible += [float(op.variables["progress"]) for op in made if op.recv is None]
        found = row.progress
        holds = any(found is p if p is None or found is None else abs(found - p) < 1e-9 for p in possible)
        if not out.check("progress-final", holds):
            older = [
                op
                for op in answered[:-1]
                if found is not None and abs(found - op.variables["progress"]) < 1e-9
            ]
            listed = [(op.seq, op.server, op.variables["progress"], op.codes or "ok") for op in made]
            out.fail(
                "progress-stale" if older else "progress-final",
                f"job {job_id} ends with progress {found} on attempt {row.attempt}; its holder's reports on"
                f" that attempt (op, server, progress, answer): {listed}",
                [job_id],
            )


RULES = (check_edits, check_expiry, check_snoozes, check_progress)
