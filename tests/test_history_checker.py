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

NEXT_STATUS = {
    "ENQUEUED": "pending",
    "CLAIMED": "running",
    "COMPLETED": "completed",
    "RETRYING": "pending",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "RETRIED": "pending",
    "CANCEL_REQUESTED": "running",
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
            elif before.status == "running" and event.status == "pending":
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
            error=None,
            depends_on=list(depends_on),
        )
        self.history.final.jobs.append(job)
        self.history.final.events.extend(rows)
        return job

    def claim(self, send: float, recv: float, *jobs: tuple[int, int], job_type: str = "t") -> Op:
        answer = [{"id": str(j), "type": job_type, "status": "RUNNING", "attempt": a} for j, a in jobs]
        return self.op("claimJobs", {"limit": len(jobs), "types": [job_type]}, send, recv, answer)

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
