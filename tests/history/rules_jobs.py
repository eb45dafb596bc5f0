"""Each job on its own: its events in a legal order (API.md section 3), its row agreeing with
them, the answers clients got agreeing with them, idempotency, and no internal errors."""

from __future__ import annotations

from history.facts import Facts, answered_jobs, named_jobs
from history.findings import Findings
from history.generator import seconds_of
from history.model import EventRow, JobRow, Op

STATUSES = frozenset({"pending", "running", "completed", "failed", "cancelled"})
# (status before, event kind) -> the statuses the event may leave the job in
LEGAL: dict[tuple[str, str], frozenset[str]] = {
    ("pending", "CLAIMED"): frozenset({"running"}),
    ("pending", "CANCELLED"): frozenset({"cancelled"}),
    ("running", "COMPLETED"): frozenset({"completed"}),
    ("running", "RETRYING"): frozenset({"pending"}),
    ("running", "FAILED"): frozenset({"failed"}),
    ("running", "LEASE_EXPIRED"): frozenset({"pending", "failed"}),
    # A cancelJob on a RUNNING job: a request, then the attempt ends CANCELLED (or COMPLETED)
    # (API.md section 12).
    ("running", "CANCEL_REQUESTED"): frozenset({"running"}),
    ("running", "CANCELLED"): frozenset({"cancelled"}),
    # The holder's snooze (back to PENDING, no retry used); an edit of a PENDING job; the
    # expiry of a PENDING one (API.md section 12).
    ("running", "SNOOZED"): frozenset({"pending"}),
    ("pending", "UPDATED"): frozenset({"pending"}),
    ("pending", "EXPIRED"): frozenset({"cancelled"}),
    ("failed", "RETRIED"): frozenset({"pending"}),
    ("cancelled", "RETRIED"): frozenset({"pending"}),
}
REFUSALS = frozenset({"BAD_USER_INPUT", "FORBIDDEN", "UNAUTHENTICATED", "PAYLOAD_TOO_LARGE"})


def describe(events: list[EventRow]) -> str:
    return " -> ".join(f"{e.kind}({e.status})#{e.id}" for e in events)


def replay(
    job: JobRow, events: list[EventRow], max_retries: list[tuple[int, int]] | None = None
) -> tuple[bool, int, int]:
    """Whether the events are legal for this job, and the attempt and retryCount they leave.
    `max_retries`: the lowest and highest maxRetries that may have been in effect after each
    event (edits change it); the row's, when not given."""
    first = events[0]
    legal = first.kind == "ENQUEUED" and first.status == "pending"
    attempt = retries = 0
    requested = False  # the current attempt's cancellation was requested
    bounds = max_retries or [(job.max_retries, job.max_retries)] * len(events)
    for index, (before, event) in enumerate(zip(events, events[1:], strict=False)):
        lowest, highest = bounds[index]  # in effect when the event happened
        legal = legal and event.status in LEGAL.get((before.status, event.kind), frozenset())
        if requested and event.kind not in ("COMPLETED", "CANCELLED"):
            legal = False  # after a request, the attempt ends COMPLETED or CANCELLED, nothing else
        if before.status == "running" and event.kind == "CANCELLED" and not requested:
            legal = False  # a RUNNING job is cancelled only once asked to stop
        requested = event.kind == "CANCEL_REQUESTED" or (requested and event.status == "running")
        if event.kind == "CLAIMED":
            attempt += 1
        elif event.kind == "RETRIED":
            retries = 0
        elif event.kind == "SNOOZED":
            pass  # a snooze uses no retry
        elif before.status == "running" and event.status == "pending":
            retries += 1  # a retryable failure, a lease expiry or a timeout with retries left
            legal = legal and retries <= highest
        elif event.kind == "LEASE_EXPIRED" and event.status == "failed":
            legal = legal and retries >= lowest  # retryable: FAILED only when none are left
    return legal, attempt, retries


def check_event_order(facts: Facts, out: Findings) -> None:
    """Every job in exactly one state; its events start with ENQUEUED and each follows from
    the state before; a failure goes back to PENDING only while retries are left, and a
    lease expiry ends the job FAILED only when none are; once a RUNNING job's cancellation is
    requested its attempt ends COMPLETED or CANCELLED, never retried; the row's status,
    attempt and retryCount are what its events say."""
    for job_id, job in facts.jobs.items():
        events = facts.events.get(job_id, [])
        if not out.check("one-state", job.status in STATUSES and bool(events)):
            out.fail("one-state", f"job {job_id} is {job.status!r} with {len(events)} events", [job_id])
            continue
        legal, attempt, retries = replay(job, events, facts.possible_max_retries(job_id))
        if not out.check("event-order", legal):
            out.fail(
                "event-order",
                f"job {job_id} (maxRetries {job.max_retries}): illegal sequence {describe(events)}",
                [job_id],
            )
        last = events[-1]
        if not out.check(
            "row-matches-events",
            (job.status, job.attempt, job.retry_count) == (last.status, attempt, retries),
        ):
            out.fail(
                "row-matches-events",
                f"job {job_id} row says {job.status}, attempt {job.attempt}, retryCount {job.retry_count};"
                f" its events say {last.status}, attempt {attempt}, retryCount {retries}: {describe(events)}",
                [job_id],
            )


def check_event_times(facts: Facts, out: Findings) -> None:
    """A job's recorded times never run backwards: each event is stamped no earlier than
    the one before it (a later transition stamped earlier cannot be told from one that
    happened first)."""
    for job_id, events in facts.events.items():
        backwards = [(a, b) for a, b in zip(events, events[1:], strict=False) if b.at < a.at]
        if not out.check("event-times", not backwards):
            first, then = backwards[0]
            out.fail(
                "event-times",
                f"job {job_id}: event #{then.id} {then.kind} stamped {first.at - then.at:.6f} s before"
                f" #{first.id} {first.kind}, which came before it: {describe(events)}",
                [job_id],
            )


def check_answers(facts: Facts, out: Findings) -> None:
    """Every job an answer showed was in a state its events went through (status and
    attempt), and no (job, attempt) was handed to two claims."""
    states = {job_id: set(facts.states(job_id)) for job_id in facts.events}
    for op in facts.history.ops:
        for job in answered_jobs(op):
            job_id = int(job["id"])
            state = (str(job["status"]).lower(), int(job["attempt"]))
            if not out.check("answers-match-events", state in states.get(job_id, set())):
                out.fail(
                    "answers-match-events",
                    f"op #{op.seq} {op.kind} answered job {job_id} as {state}; its events went through"
                    f" {facts.states(job_id)}",
                    [job_id],
                )
    for (job_id, attempt), ops in facts.claim_ops.items():
        if not out.check("claimed-once", len(ops) == 1):
            out.fail(
                "claimed-once",
                f"job {job_id} attempt {attempt} answered to {len(ops)} claims: ops {[o.seq for o in ops]}",
                [job_id],
            )


def check_idempotency(facts: Facts, out: Findings) -> None:
    """One job per producer and idempotency key, created once."""
    seen: dict[tuple[str, str], list[tuple[int, bool]]] = {}
    for op in facts.history.ops:
        if op.kind == "enqueueJob" and op.ok and op.variables["input"].get("idempotencyKey"):
            key = (op.thread, op.variables["input"]["idempotencyKey"])
            seen.setdefault(key, []).append((int(op.data["job"]["id"]), bool(op.data["created"])))
    for (producer, key), answers in seen.items():
        ids = {job_id for job_id, _ in answers}
        created = sum(1 for _, made in answers if made)
        if not out.check("idempotency", len(ids) == 1 and created <= 1):
            out.fail(
                "idempotency",
                f"{producer}'s key {key!r} answered jobs {sorted(ids)}, created {created}x",
                ids,
            )


def expiries_sent(op: Op) -> list[float]:
    """The expiresAt values an enqueue or an edit sent."""
    variables = op.variables
    inputs = variables.get("inputs") or ([variables["input"]] if "input" in variables else [])
    return [at for item in inputs if (at := seconds_of(item.get("expiresAt"))) is not None]


def expired_in_flight(facts: Facts, op: Op) -> bool:
    """Whether an expiresAt the operation sent had passed by its answer (then BAD_USER_INPUT,
    "in the past", is the contract's answer), unless the operation replays a created job's
    input under its idempotency key: such a replay answers the existing job."""
    if not any(at <= op.answered_by for at in expiries_sent(op)):
        return False
    if op.kind == "enqueueJob" and op.variables["input"].get("idempotencyKey"):
        item = op.variables["input"]
        originals = [
            facts.enqueued[job_id]
            for job_id, made in facts.created_by_op.items()
            if made.thread == op.thread
            and made.seq < op.seq
            and facts.enqueued[job_id].get("idempotencyKey") == item["idempotencyKey"]
        ]
        return not any(original == item for original in originals)
    return True


def check_errors(facts: Facts, out: Findings) -> None:
    """No internal error reached a client, and no valid input was refused (an expiresAt that
    passed while the request was on its way is not valid any more)."""
    for op in facts.history.ops:
        if op.recv is None:
            continue
        internal = "INTERNAL_SERVER_ERROR" in op.codes or (op.http_status or 0) >= 500
        if not out.check("internal-error", not internal):
            out.fail(
                "internal-error",
                f"op #{op.seq} {op.kind} on server {op.server}: {op.http_status} {op.codes} {op.messages}",
                named_jobs(op),
            )
        refused: set[str] = REFUSALS.intersection(op.codes)
        if refused == {"BAD_USER_INPUT"} and expired_in_flight(facts, op):
            refused = set()
        if not out.check("refused-valid-input", not refused):
            out.fail(
                "refused-valid-input",
                f"op #{op.seq} {op.kind} {op.variables}: {op.codes} {op.messages}",
                named_jobs(op),
            )


RULES = (check_event_order, check_event_times, check_answers, check_idempotency, check_errors)
