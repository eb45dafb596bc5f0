"""The history checker itself (tests/history/checker.py), on small hand-written histories:
each invariant rejects the history that breaks it, and lets pass its near miss (a limit
changing while a claim ran, a retry that put a dependent back to wait, a repeated status).
No server: these are histories as the harness records them."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

from history.checker import check
from history.generator import iso
from history.model import (
    ControlsRead,
    CountsSnapshot,
    EventRow,
    FinalState,
    History,
    JobRow,
    Op,
    Subscription,
)
from history.report import render


def at(seconds: float) -> str:
    """A DateTime as the API writes it."""
    return iso(seconds)


NEXT_STATUS = {
    "ENQUEUED": "pending",
    "CLAIMED": "running",
    "COMPLETED": "completed",
    "RETRYING": "pending",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "RETRIED": "pending",
    "CANCEL_REQUESTED": "running",
    "SNOOZED": "pending",
    "UPDATED": "pending",
    "EXPIRED": "cancelled",
}


class Sketch:
    """A history written by hand: operations at given times, jobs with their events (ids
    in the order they are added, unless given)."""

    def __init__(self) -> None:
        self.history = History(seed=1, backend="sqlite", servers=1, job_types=["t"])
        self.history.final = FinalState()
        self._seq = itertools.count()
        self._event_ids = itertools.count(1)

    def op(
        self,
        kind: str,
        variables: dict[str, Any],
        send: float,
        recv: float | None,
        data: Any = None,
        **more: Any,
    ) -> Op:
        op = Op(
            next(self._seq),
            more.pop("thread", "t"),
            kind,
            0,
            variables,
            send,
            recv,
            data,
            http_status=200,
            **more,
        )
        self.history.ops.append(op)
        return op

    def control(self, send: float, recv: float | None, job_type: str = "t", **fields: Any) -> Op:
        return self.op(
            "setTypeControl", {"input": {"type": job_type, **fields}}, send, recv, {"type": job_type}
        )

    def pause(self, send: float, recv: float | None, paused: bool = True, job_type: str = "t") -> Op:
        kind = "pauseType" if paused else "resumeType"
        return self.op(kind, {"type": job_type}, send, recv, {"type": job_type})

    def job(
        self,
        job_id: int,
        events: list[tuple[str, float]],
        key: str | None = None,
        depends_on: tuple[int, ...] = (),
        waiting_for: int = 0,
        max_retries: int = 3,
        job_type: str = "t",
    ) -> JobRow:
        rows = [EventRow(next(self._event_ids), job_id, kind, NEXT_STATUS[kind], at) for kind, at in events]
        return self.job_with(job_id, rows, key, depends_on, waiting_for, max_retries, job_type)

    def job_with(
        self,
        job_id: int,
        rows: list[EventRow],
        key: str | None = None,
        depends_on: tuple[int, ...] = (),
        waiting_for: int = 0,
        max_retries: int = 3,
        job_type: str = "t",
    ) -> JobRow:
        attempt = sum(1 for e in rows if e.kind == "CLAIMED")
        retries = 0
        for before, event in zip(rows, rows[1:], strict=False):
            if event.kind == "RETRIED":
                retries = 0
            elif before.status == "running" and event.status == "pending" and event.kind != "SNOOZED":
                retries += 1
        job = JobRow(
            id=job_id,
            type=job_type,
            status=rows[-1].status,
            concurrency_key=key,
            attempt=attempt,
            retry_count=retries,
            max_retries=max_retries,
            waiting_for=waiting_for,
            created_by="producer",
            worker_id=None,
            idempotency_key=None,
            error="expired" if rows[-1].kind == "EXPIRED" else None,
            depends_on=list(depends_on),
            snooze_count=sum(1 for e in rows if e.kind == "SNOOZED"),
        )
        self.history.final.jobs.append(job)
        self.history.final.events.extend(rows)
        return job

    def claim(self, send: float, recv: float, *jobs: tuple[int, int], job_type: str = "t") -> Op:
        answer = [{"id": str(j), "type": job_type, "status": "RUNNING", "attempt": a} for j, a in jobs]
        return self.op("claimJobs", {"limit": len(jobs), "types": [job_type]}, send, recv, answer)

    def enqueue(self, job_id: int, send: float, recv: float, **fields: Any) -> Op:
        """The producer's enqueueJob that created the job (priority, maxRetries, expiresAt...)."""
        item = {"type": "t", "priority": "MEDIUM", "maxRetries": 1, **fields}
        answer = {"created": True, "job": {"id": str(job_id), "status": "PENDING", "attempt": 0}}
        return self.op("enqueueJob", {"input": item}, send, recv, answer, thread="producer")

    def update(
        self, job_id: int, send: float, recv: float | None, edit: dict[str, Any], **answered: Any
    ) -> Op:
        """The producer's updateJob: answered PENDING with `answered` (else the edit's values),
        or refused with `codes`."""
        codes = answered.pop("codes", [])
        data = None
        if not codes and recv is not None:
            data = {"id": str(job_id), "status": "PENDING", "attempt": answered.pop("attempt", 0)}
            data |= {"priority": "MEDIUM", "maxRetries": 1, "runAt": at(0.0), "expiresAt": None}
            data |= {**edit, **answered}
        variables = {"id": str(job_id), "input": edit}
        return self.op("updateJob", variables, send, recv, data, codes=codes, thread="producer")

    def claim_seeing(self, send: float, recv: float, job_id: int, attempt: int, **settings: Any) -> Op:
        """A worker's claim whose answer shows the job's settings and progress."""
        answer = {"id": str(job_id), "type": "t", "status": "RUNNING", "attempt": attempt, "progress": None}
        answer |= {"priority": "MEDIUM", "maxRetries": 1, "runAt": at(0.0), "expiresAt": None, **settings}
        return self.op("claimJobs", {"limit": 1}, send, recv, [answer], thread="worker")

    def held(self, kind: str, job_id: int, attempt: int, send: float, recv: float | None, **more: Any) -> Op:
        """A worker's snoozeJob or reportProgress on an attempt (thread `worker` unless given)."""
        status = more.pop("status", "PENDING" if kind == "snoozeJob" else "RUNNING")
        codes = more.pop("codes", [])
        thread = more.pop("thread", "worker")
        data = None if codes or recv is None else {"id": str(job_id), "status": status, "attempt": attempt}
        if data is not None and kind == "snoozeJob":
            data["snoozeCount"] = more.pop("snooze_count", 1)
        variables = {"id": str(job_id), "attempt": attempt, **more}
        return self.op(kind, variables, send, recv, data, codes=codes, thread=thread)

    def read_controls(self, send: float, recv: float, **fields: Any) -> None:
        stored = {"paused": False, "maxRunning": None, "maxRunningPerKey": None, "rateLimit": None}
        self.history.controls_reads.append(ControlsRead(send, recv, {"t": {**stored, **fields}}))

    def failures(self) -> Counter[str]:
        return check(self.history).failed()


def test_a_clean_history_passes_and_its_report_names_the_seed(tmp_path: Path) -> None:
    sketch = Sketch()
    sketch.control(1.0, 1.1, maxRunning=3)
    for job_id in (1, 2, 3):
        sketch.job(job_id, [("ENQUEUED", 2.0), ("CLAIMED", 3.0), ("COMPLETED", 4.0)])
        sketch.claim(2.9, 3.1, (job_id, 1))
    found = check(sketch.history)
    assert found.ok, found.violations
    assert found.checks["max-running"] == 3
    saved = sketch.history.save(tmp_path / "h.json")
    assert check(History.load(saved)).ok
    assert "history seed 1" in render(sketch.history, found, saved)


# --- limits ----------------------------------------------------------------------------------


def four_claims_under(sketch: Sketch) -> None:
    """Four jobs claimed one by one (ops sent 3.0..3.3, answered 3.05..3.35), all RUNNING."""
    for job_id in (1, 2, 3, 4):
        sketch.job(job_id, [("ENQUEUED", 2.0)])
    for n, job_id in enumerate((1, 2, 3, 4)):
        moment = 3.0 + n / 10
        sketch.history.final.events.append(EventRow(100 + n, job_id, "CLAIMED", "running", moment + 0.01))
        sketch.claim(moment, moment + 0.05, (job_id, 1))
    for job in sketch.history.final.jobs:
        job.status, job.attempt = "running", 1


def test_four_running_under_max_running_three_is_rejected() -> None:
    sketch = Sketch()
    sketch.control(1.0, 1.1, maxRunning=3)
    four_claims_under(sketch)
    assert sketch.failures() == {"max-running": 1}


def test_a_limit_lowered_while_the_claim_ran_allows_the_higher_one() -> None:
    sketch = Sketch()
    sketch.control(1.0, 1.1, maxRunning=4)
    sketch.control(3.32, 3.4, maxRunning=3)  # sent before the fourth claim (3.3..3.35) answered
    four_claims_under(sketch)
    assert sketch.failures() == {}


def test_the_same_limit_lowered_before_the_claim_was_sent_binds() -> None:
    sketch = Sketch()
    sketch.control(1.0, 1.1, maxRunning=4)
    sketch.control(2.5, 2.6, maxRunning=3)
    four_claims_under(sketch)
    assert sketch.failures() == {"max-running": 1}


def test_two_running_with_one_key_under_max_running_per_key_one_is_rejected() -> None:
    sketch = Sketch()
    sketch.control(1.0, 1.1, maxRunningPerKey=1)
    sketch.job(1, [("ENQUEUED", 2.0), ("CLAIMED", 3.0), ("COMPLETED", 5.0)], key="a")
    sketch.job(2, [("ENQUEUED", 2.0), ("CLAIMED", 3.0), ("COMPLETED", 5.0)], key="b")
    sketch.job(3, [("ENQUEUED", 2.0), ("CLAIMED", 4.0), ("COMPLETED", 5.0)], key="a")
    sketch.job(4, [("ENQUEUED", 2.0), ("CLAIMED", 4.0), ("COMPLETED", 5.0)])  # no key: no per-key limit
    for job_id, moment in ((1, 3.0), (2, 3.0), (3, 4.0), (4, 4.0)):
        sketch.claim(moment - 0.1, moment + 0.1, (job_id, 1))
    sketch.history.final.events.sort(key=lambda e: (e.at, e.id))
    for new_id, event in enumerate(sketch.history.final.events, start=1):
        event.id = new_id
    assert sketch.failures() == {"max-running-per-key": 1}


def test_a_sliding_rate_window_over_its_limit_is_rejected_and_one_at_the_limit_passes() -> None:
    def with_claims(moments: list[float]) -> Counter[str]:
        sketch = Sketch()
        sketch.control(1.0, 1.1, rateLimit={"limit": 2, "periodSeconds": 2})
        for job_id, moment in enumerate(moments, start=1):
            sketch.job(job_id, [("ENQUEUED", 1.5), ("CLAIMED", moment), ("COMPLETED", moment + 0.01)])
            sketch.claim(moment - 0.01, moment + 0.01, (job_id, 1))
        return sketch.failures()

    assert with_claims([3.0, 4.0, 5.0, 7.0]) == {}  # (3, 5] holds 4 and 5: two
    assert with_claims([3.0, 4.0, 4.9]) == {"rate-limit": 1}  # (2.9, 4.9] holds three


def test_a_claim_of_a_type_paused_all_along_is_rejected() -> None:
    sketch = Sketch()
    sketch.pause(1.0, 1.1)
    sketch.job(1, [("ENQUEUED", 2.0), ("CLAIMED", 3.0), ("COMPLETED", 4.0)])
    sketch.claim(2.9, 3.1, (1, 1))
    sketch.pause(2.95, 3.5, paused=False)  # a resume sent while the claim ran: it may have won
    sketch.job(2, [("ENQUEUED", 2.0), ("CLAIMED", 3.0), ("COMPLETED", 4.0)])
    assert sketch.failures() == {}
    sketch = Sketch()
    sketch.pause(1.0, 1.1)
    sketch.job(1, [("ENQUEUED", 2.0), ("CLAIMED", 3.0), ("COMPLETED", 4.0)])
    sketch.claim(2.9, 3.1, (1, 1))
    assert sketch.failures() == {"paused-claim": 1}


# --- jobs ------------------------------------------------------------------------------------


def test_completed_then_running_again_is_an_illegal_order() -> None:
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("COMPLETED", 3.0), ("CLAIMED", 4.0)])
    assert sketch.failures() == {"event-order": 1}


def test_a_lease_expiry_that_fails_a_job_with_retries_left_is_illegal() -> None:
    sketch = Sketch()
    rows = [
        EventRow(1, 1, "ENQUEUED", "pending", 1.0),
        EventRow(2, 1, "CLAIMED", "running", 2.0),
        EventRow(3, 1, "LEASE_EXPIRED", "failed", 3.0),
    ]
    sketch.job_with(1, rows, max_retries=2)
    assert sketch.failures() == {"event-order": 1}


def test_a_running_job_asked_to_stop_ends_cancelled_or_completed_and_nothing_else() -> None:
    sketch = Sketch()
    asked = [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("CANCEL_REQUESTED", 3.0)]
    sketch.job(1, [*asked, ("CANCELLED", 4.0)])
    sketch.job(2, [*asked, ("COMPLETED", 4.0)])
    # illegal: cancelled while RUNNING with no request; retried after one; asked twice
    sketch.job(3, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("CANCELLED", 3.0)])
    sketch.job(4, [*asked, ("RETRYING", 4.0), ("CLAIMED", 5.0), ("COMPLETED", 6.0)])
    sketch.job(5, [*asked, ("CANCEL_REQUESTED", 4.0), ("CANCELLED", 5.0)])
    assert sketch.failures() == {"event-order": 3}


def test_a_row_that_disagrees_with_its_events_is_rejected() -> None:
    sketch = Sketch()
    job = sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("COMPLETED", 3.0)])
    job.status = "running"
    assert sketch.failures() == {"row-matches-events": 1}


def test_events_stamped_backwards_are_rejected() -> None:
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 2.0), ("CLAIMED", 1.9), ("COMPLETED", 3.0)])
    assert sketch.failures() == {"event-times": 1}


def test_an_answer_in_a_state_the_job_never_had_is_rejected() -> None:
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("COMPLETED", 3.0)])
    sketch.claim(1.9, 2.1, (1, 2))  # attempt 2 never happened
    assert sketch.failures() == {"answers-match-events": 1}


def test_one_attempt_answered_to_two_claims_is_rejected() -> None:
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("COMPLETED", 3.0)])
    sketch.claim(1.9, 2.1, (1, 1))
    sketch.claim(1.95, 2.2, (1, 1))
    assert sketch.failures() == {"claimed-once": 1}


def test_one_idempotency_key_answering_two_jobs_is_rejected() -> None:
    sketch = Sketch()
    for job_id in (1, 2):
        sketch.job(job_id, [("ENQUEUED", 1.0)])
        answer = {"created": True, "job": {"id": str(job_id), "status": "PENDING", "attempt": 0}}
        sketch.op("enqueueJob", {"input": {"type": "t", "idempotencyKey": "k"}}, 0.9, 1.1, answer)
    assert sketch.failures() == {"idempotency": 1}


def test_an_internal_error_is_rejected() -> None:
    sketch = Sketch()
    sketch.op("claimJobs", {"limit": 1}, 1.0, 1.1, codes=["INTERNAL_SERVER_ERROR"])
    assert sketch.failures() == {"internal-error": 1}


# --- dependencies and the drain --------------------------------------------------------------


def test_a_claim_before_the_dependency_completed_is_rejected() -> None:
    sketch = Sketch()
    rows_p = [EventRow(1, 1, "ENQUEUED", "pending", 1.0), EventRow(2, 1, "CLAIMED", "running", 2.0)]
    rows_d = [EventRow(3, 2, "ENQUEUED", "pending", 1.0), EventRow(4, 2, "CLAIMED", "running", 3.0)]
    rows_p.append(EventRow(5, 1, "COMPLETED", "completed", 4.0))
    rows_d.append(EventRow(6, 2, "COMPLETED", "completed", 5.0))
    sketch.job_with(1, rows_p)
    sketch.job_with(2, rows_d, depends_on=(1,))
    assert sketch.failures() == {"claimed-before-dependencies": 1}


def drained(sketch: Sketch) -> Sketch:
    sketch.history.drain_started = 10.0
    return sketch


def test_a_dependent_left_waiting_on_a_completed_dependency_is_stuck() -> None:
    sketch = drained(Sketch())
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("COMPLETED", 3.0)])
    sketch.job(2, [("ENQUEUED", 1.0), ("CANCELLED", 2.5), ("RETRIED", 2.9)], depends_on=(1,), waiting_for=1)
    assert sketch.failures() == {"unclaimable-after-drain": 1}


def test_a_dependent_left_pending_after_its_dependency_was_cancelled_missed_the_cascade() -> None:
    sketch = drained(Sketch())
    sketch.job(1, [("ENQUEUED", 1.0), ("CANCELLED", 3.0)])
    sketch.job(2, [("ENQUEUED", 2.0)], depends_on=(1,), waiting_for=1)
    sketch.job(3, [("ENQUEUED", 2.1)], depends_on=(2,), waiting_for=1)  # waits on the stuck one
    assert sketch.failures() == {"cascade-missed": 1}


def test_a_dependent_retried_after_the_cascade_may_wait_on_a_failed_dependency() -> None:
    sketch = drained(Sketch())
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("FAILED", 3.0)])
    sketch.job(2, [("ENQUEUED", 1.5), ("CANCELLED", 3.0), ("RETRIED", 4.0)], depends_on=(1,), waiting_for=1)
    sketch.op("retryJob", {"id": "2"}, 3.9, 4.1, {"id": "2", "status": "PENDING", "attempt": 0})
    assert sketch.failures() == {}


def test_a_waiting_count_that_disagrees_with_the_open_dependencies_is_rejected() -> None:
    sketch = drained(Sketch())
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("FAILED", 3.0)])
    sketch.job(2, [("ENQUEUED", 1.5), ("CANCELLED", 3.0), ("RETRIED", 4.0)], depends_on=(1,), waiting_for=2)
    sketch.op("retryJob", {"id": "2"}, 3.9, 4.1, {"id": "2", "status": "PENDING", "attempt": 0})
    assert sketch.failures() == {"waiting-for-count": 1}


def test_a_retry_answered_before_the_dependency_failed_does_not_excuse_waiting() -> None:
    sketch = drained(Sketch())
    retried = [
        EventRow(1, 2, "ENQUEUED", "pending", 1.0),
        EventRow(2, 2, "CANCELLED", "cancelled", 1.2),
        EventRow(3, 2, "RETRIED", "pending", 1.5),
    ]
    sketch.job_with(2, retried, depends_on=(1,), waiting_for=1)
    sketch.op("retryJob", {"id": "2"}, 1.4, 1.6, {"id": "2", "status": "PENDING", "attempt": 0})
    failed = [
        EventRow(4, 1, "ENQUEUED", "pending", 0.5),
        EventRow(5, 1, "CLAIMED", "running", 2.0),
        EventRow(6, 1, "FAILED", "failed", 3.0),
    ]
    sketch.job_with(1, failed)
    sketch.history.final.events.sort(key=lambda e: e.id)
    assert sketch.failures() == {"cascade-missed": 1}


def test_a_job_running_after_the_drain_is_rejected() -> None:
    sketch = drained(Sketch())
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0)])
    assert sketch.failures() == {"running-after-drain": 1}


# --- counters, controls, subscriptions -------------------------------------------------------


def test_counters_that_differ_from_the_table_are_rejected() -> None:
    sketch = Sketch()
    sketch.history.counts.append(CountsSnapshot(1.0, {"*||t|pending": 2}, {"*||t|pending": 3}))
    assert sketch.failures() == {"counters": 1}


def test_a_pause_lost_to_a_concurrent_limit_change_is_a_lost_write() -> None:
    sketch = Sketch()
    sketch.pause(1.0, 1.2)  # answered paused: true
    sketch.control(1.05, 1.1, maxRunning=3)  # read before the pause, wrote back paused: false
    sketch.read_controls(2.0, 2.1, paused=False, maxRunning=3)
    assert sketch.failures() == {"control-write-lost": 1}


def test_racing_writes_of_one_field_may_end_either_way_and_other_fields_stay() -> None:
    sketch = Sketch()
    sketch.control(0.5, 0.6, maxRunningPerKey=2)
    sketch.pause(1.0, 1.2)
    sketch.pause(1.1, 1.3, paused=False)
    sketch.control(1.05, 1.1, maxRunning=3)
    sketch.read_controls(2.0, 2.1, paused=True, maxRunning=3, maxRunningPerKey=2)
    sketch.read_controls(2.2, 2.3, paused=True, maxRunning=3, maxRunningPerKey=2)
    assert sketch.failures() == {}
    sketch.read_controls(
        2.4, 2.5, paused=True, maxRunning=3, maxRunningPerKey=None
    )  # cleared by a write left out
    assert sketch.failures() == {"control-write-lost": 1}


def test_a_subscriber_that_goes_back_to_an_older_state_is_rejected() -> None:
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("COMPLETED", 3.0)])
    sketch.history.subscriptions = [
        Subscription(1, 0, 1.5, ["RUNNING", "PENDING", "RUNNING", "COMPLETED"], ended="complete"),
        Subscription(1, 0, 1.5, ["PENDING", "RUNNING", "RUNNING", "COMPLETED"], ended="complete"),  # a repeat
        Subscription(1, 0, 1.5, ["PENDING", "COMPLETED"], ended="complete"),  # merged changes
    ]
    assert sketch.failures() == {"subscription-order": 1}


def test_a_subscriber_that_never_gets_the_terminal_state_is_rejected() -> None:
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("COMPLETED", 3.0)])
    sketch.history.subscriptions = [
        Subscription(1, 0, 1.5, ["PENDING", "RUNNING"]),
        Subscription(1, 0, 1.5, ["PENDING", "RUNNING"], ended="closed"),  # its socket died: excused
    ]
    assert sketch.failures() == {"subscription-terminal": 1}


# --- steering: edits, expiry, snoozes, progress (API.md section 12) ---------------------------


def test_a_snooze_uses_no_retry_and_ends_only_a_running_attempt_that_was_not_asked_to_stop() -> None:
    sketch = Sketch()
    snoozed = [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("SNOOZED", 2.5), ("CLAIMED", 4.0)]
    sketch.job(1, [*snoozed, ("COMPLETED", 5.0)], max_retries=0)  # no retry left, none used
    assert sketch.failures() == {}
    # illegal: a snooze after a cancel request, a snooze of a PENDING job
    sketch.job(2, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("CANCEL_REQUESTED", 2.2), ("SNOOZED", 2.5)])
    sketch.job(3, [("ENQUEUED", 1.0), ("SNOOZED", 2.5)])
    assert sketch.failures() == {"event-order": 2}
    sketch = Sketch()
    job = sketch.job(1, [*snoozed, ("COMPLETED", 5.0)], max_retries=1)
    job.retry_count = 1  # the snooze counted as a retry
    assert sketch.failures() == {"row-matches-events": 1}


def test_a_snooze_count_that_differs_from_the_snoozed_events_is_rejected() -> None:
    sketch = Sketch()
    job = sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("SNOOZED", 2.5)])
    job.snooze_count = 0
    assert sketch.failures() == {"snooze-count": 1}


def test_a_snooze_answered_pending_after_a_cancel_request_is_rejected() -> None:
    def snooze_after_request(status: str) -> Counter[str]:
        sketch = Sketch()
        sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("CANCEL_REQUESTED", 2.2), ("CANCELLED", 2.5)])
        sketch.claim_seeing(1.9, 2.1, 1, 1)
        sketch.held("snoozeJob", 1, 1, 2.4, 2.6, seconds=1, status=status, snooze_count=0)
        return sketch.failures()

    assert snooze_after_request("CANCELLED") == {}
    # answered as snoozed, while the attempt ended CANCELLED (answers-match-events: it never was
    # PENDING at attempt 1 either)
    assert snooze_after_request("PENDING") == {"snooze-outcome": 1, "answers-match-events": 1}


def test_a_claim_before_the_snooze_was_over_is_rejected() -> None:
    def claimed_again(moment: float) -> Counter[str]:
        sketch = Sketch()
        sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("SNOOZED", 3.0), ("CLAIMED", moment)])
        sketch.claim_seeing(1.9, 2.1, 1, 1)
        sketch.held("snoozeJob", 1, 1, 2.9, 3.1, seconds=2)
        return sketch.failures()

    assert claimed_again(5.01) == {}
    assert claimed_again(4.5) == {"snooze-run-at": 1}


def test_a_snooze_or_report_by_a_worker_that_does_not_hold_the_attempt_is_rejected() -> None:
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("COMPLETED", 4.0)])
    sketch.claim_seeing(1.9, 2.1, 1, 1)
    sketch.held("reportProgress", 1, 1, 2.5, 2.6, progress=0.5, thread="other")
    sketch.held(
        "reportProgress", 1, 1, 2.7, 2.8, progress=0.2, thread="other", codes=["NOT_FOUND"]
    )  # refused
    assert sketch.failures() == {"steer-holder": 1}
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("SNOOZED", 3.0)])
    sketch.claim_seeing(1.9, 2.1, 1, 1)
    sketch.held("snoozeJob", 1, 1, 2.9, 3.1, seconds=1, thread="other")
    assert sketch.failures() == {"steer-holder": 1}


def test_progress_must_be_reset_by_a_claim_and_end_as_the_last_report_of_the_last_attempt() -> None:
    def ending_with(progress: float | None, reset: bool = True) -> Counter[str]:
        sketch = Sketch()
        job = sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("RETRYING", 3.0), ("CLAIMED", 4.0)])
        sketch.claim_seeing(1.9, 2.1, 1, 1)
        sketch.held("reportProgress", 1, 1, 2.2, 2.3, progress=0.9)
        sketch.claim_seeing(3.9, 4.1, 1, 2, progress=None if reset else 0.9)
        sketch.held("reportProgress", 1, 2, 4.2, 4.3, progress=0.25)
        sketch.held("reportProgress", 1, 2, 4.4, 4.5, progress=0.5)
        sketch.held("reportProgress", 1, 1, 4.6, 4.7, progress=0.75, codes=["CONFLICT"])  # stale: refused
        job.progress = progress
        return sketch.failures()

    assert ending_with(0.5) == {}
    assert ending_with(0.5, reset=False) == {"progress-reset": 1}
    assert ending_with(0.25) == {"progress-stale": 1}  # an earlier report stored over the last one
    assert ending_with(0.9) == {"progress-final": 1}  # the previous attempt's
    assert ending_with(0.75) == {"progress-final": 1}  # a refused report's
    assert ending_with(None) == {"progress-final": 1}  # the last report lost


def test_an_edit_is_one_event_answered_as_asked_and_refused_only_off_pending() -> None:
    sketch = Sketch()
    sketch.enqueue(1, 0.9, 1.0)
    sketch.job(1, [("ENQUEUED", 1.0), ("UPDATED", 2.0), ("CLAIMED", 3.0), ("COMPLETED", 4.0)])
    sketch.update(1, 1.9, 2.1, {"priority": "HIGH"})
    sketch.claim_seeing(2.9, 3.1, 1, 1, priority="HIGH")
    sketch.update(1, 3.5, 3.6, {"priority": "LOW"}, codes=["CONFLICT"])  # RUNNING then: refused
    assert sketch.failures() == {}
    sketch.update(1, 2.2, 2.3, {"priority": "LOW"}, codes=["CONFLICT"])  # PENDING all along
    assert sketch.failures() == {"update-refused": 1}


def test_an_applied_edit_without_its_event_or_with_other_values_is_rejected() -> None:
    sketch = Sketch()
    sketch.enqueue(1, 0.9, 1.0)
    sketch.job(1, [("ENQUEUED", 1.0)])
    sketch.update(1, 1.9, 2.1, {"maxRetries": 3})  # applied, but no UPDATED event
    assert sketch.failures() == {"update-count": 1}
    sketch = Sketch()
    sketch.enqueue(1, 0.9, 1.0)
    sketch.job(1, [("ENQUEUED", 1.0), ("UPDATED", 2.0)])
    sketch.update(1, 1.9, 2.1, {"maxRetries": 3, "expiresAt": None}, maxRetries=2)
    assert sketch.failures() == {"update-answer": 1}


def test_a_claim_that_saw_part_of_an_edit_is_rejected() -> None:
    def claim_seeing(**settings: Any) -> Counter[str]:
        sketch = Sketch()
        sketch.enqueue(1, 0.9, 1.0, expiresAt=at(50.0))
        sketch.job(1, [("ENQUEUED", 1.0), ("UPDATED", 2.0), ("CLAIMED", 3.0), ("COMPLETED", 4.0)])
        sketch.update(1, 1.9, 2.1, {"priority": "HIGH", "maxRetries": 3, "expiresAt": None})
        sketch.claim_seeing(2.9, 3.1, 1, 1, **settings)
        return sketch.failures()

    assert claim_seeing(priority="HIGH", maxRetries=3) == {}
    assert claim_seeing(priority="HIGH", maxRetries=1) == {"update-seen-by-claim": 1}
    assert claim_seeing(priority="HIGH", maxRetries=3, expiresAt=at(50.0)) == {"update-seen-by-claim": 1}


def test_retries_follow_the_max_retries_an_edit_set() -> None:
    def retried_after_edit(max_retries: int) -> Counter[str]:
        sketch = Sketch()
        sketch.enqueue(1, 0.9, 1.0, maxRetries=1)
        events = [("ENQUEUED", 1.0), ("UPDATED", 2.0), ("CLAIMED", 3.0), ("RETRYING", 3.5), ("CLAIMED", 4.0)]
        sketch.job(1, [*events, ("COMPLETED", 5.0)], max_retries=max_retries)
        sketch.update(1, 1.9, 2.1, {"maxRetries": max_retries})
        return sketch.failures()

    assert retried_after_edit(2) == {}
    assert retried_after_edit(0) == {"event-order": 1}  # retried with none left


def test_an_edit_of_a_job_that_is_not_pending_is_an_illegal_event() -> None:
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("UPDATED", 2.5), ("COMPLETED", 3.0)])
    assert sketch.failures() == {"event-order": 1}


def test_an_expired_job_was_pending_never_claimed_after_its_expiry_and_has_error_expired() -> None:
    def expiring(events: list[tuple[str, float]], error: str | None = "expired") -> Counter[str]:
        sketch = Sketch()
        sketch.enqueue(1, 0.9, 1.0, expiresAt=at(3.0))
        job = sketch.job(1, events)
        job.expires_at = 3.0
        if events[-1][0] == "EXPIRED":
            job.error = error
        return sketch.failures()

    assert expiring([("ENQUEUED", 1.0), ("EXPIRED", 3.2)]) == {}
    assert expiring([("ENQUEUED", 1.0), ("CLAIMED", 2.9), ("COMPLETED", 3.5)]) == {}  # claimed first
    assert expiring([("ENQUEUED", 1.0), ("CLAIMED", 3.1), ("COMPLETED", 3.5)]) == {"claimed-after-expiry": 1}
    assert expiring([("ENQUEUED", 1.0), ("EXPIRED", 2.5)]) == {"expired-early": 1}
    assert expiring([("ENQUEUED", 1.0), ("EXPIRED", 3.2)], error=None) == {"expiry-error": 1}
    # expired twice without a retry between; expired while RUNNING
    assert expiring([("ENQUEUED", 1.0), ("EXPIRED", 3.2), ("EXPIRED", 3.4)]) == {"event-order": 1}
    assert expiring([("ENQUEUED", 1.0), ("CLAIMED", 2.0), ("EXPIRED", 3.2)]) == {"event-order": 1}


def test_the_expiry_an_edit_set_is_the_one_a_claim_must_come_before() -> None:
    sketch = Sketch()
    sketch.enqueue(1, 0.9, 1.0, expiresAt=at(3.0))
    sketch.job(1, [("ENQUEUED", 1.0), ("UPDATED", 2.0), ("CLAIMED", 4.0), ("COMPLETED", 4.5)])
    sketch.update(1, 1.9, 2.1, {"expiresAt": at(5.0)})
    assert sketch.failures() == {}
    sketch = Sketch()
    sketch.enqueue(1, 0.9, 1.0, expiresAt=at(9.0))
    sketch.job(1, [("ENQUEUED", 1.0), ("UPDATED", 2.0), ("CLAIMED", 4.0), ("COMPLETED", 4.5)])
    sketch.update(1, 1.9, 2.1, {"runAt": at(2.0), "expiresAt": at(3.5)})
    assert sketch.failures() == {"claimed-after-expiry": 1}


def test_a_job_left_pending_well_after_its_expiry_missed_it() -> None:
    def pending_until(end: float) -> Counter[str]:
        sketch = drained(Sketch())
        job = sketch.job(1, [("ENQUEUED", 1.0)])
        job.expires_at = 8.0
        sketch.op("queueStats", {}, end - 0.1, end, {}, thread="final")
        return sketch.failures()

    assert pending_until(9.0) == {}  # expiring as the final state was read
    assert pending_until(12.0) == {"expiry-missed": 1}


def test_an_expiry_that_passed_in_flight_excuses_its_refusal_but_not_a_replay() -> None:
    sketch = Sketch()
    refused = {"type": "t", "payload": {}, "expiresAt": at(2.05)}
    sketch.op("enqueueJob", {"input": refused}, 1.0, 2.1, codes=["BAD_USER_INPUT"])
    assert sketch.failures() == {}
    sketch.op("enqueueJob", {"input": {**refused, "expiresAt": at(9.0)}}, 1.0, 2.1, codes=["BAD_USER_INPUT"])
    assert sketch.failures() == {"refused-valid-input": 1}
    sketch = Sketch()
    sketch.job(1, [("ENQUEUED", 1.0), ("EXPIRED", 2.5)])
    original = {"type": "t", "priority": "LOW", "maxRetries": 0, "expiresAt": at(2.4), "idempotencyKey": "k"}
    answer = {"created": True, "job": {"id": "1", "status": "PENDING", "attempt": 0}}
    sketch.op("enqueueJob", {"input": original}, 0.9, 1.0, answer, thread="producer")
    sketch.op("enqueueJob", {"input": original}, 3.0, 3.1, codes=["BAD_USER_INPUT"], thread="producer")
    assert sketch.failures() == {"refused-valid-input": 1}  # the replay answers the existing job
