"""The history indexed for the checker: jobs, their events in order, which operation made
each claim, which operations touched each job, the controls' timeline."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from history.model import NO_ANSWER, EventRow, History, JobRow, Op
from history.timeline import Timeline

CLAIMS = frozenset({"claimJob", "claimJobs"})


@dataclass(frozen=True)
class ClaimMoment:
    """When a claim could have happened: its operation's send..answer, or for a claim whose
    answer never came, from its database stamp to the end of the run."""

    start: float
    end: float
    op: int | None  # the claim operation's seq


def answered_jobs(op: Op) -> Iterator[dict[str, Any]]:
    """The job objects (id, status, attempt...) in an operation's answer."""
    data = op.data
    if not op.ok or data is None:
        return
    if op.kind in ("enqueueJob",):
        yield data["job"]
    elif op.kind == "enqueueJobs":
        yield from (item["job"] for item in data)
    elif op.kind == "completeJobs":
        yield from data["completed"]
    elif isinstance(data, list):
        yield from (item for item in data if isinstance(item, dict) and "attempt" in item)
    elif isinstance(data, dict) and "attempt" in data:
        yield data


def named_jobs(op: Op) -> set[int]:
    """The jobs an operation names in its variables or its answer."""
    found = {int(job["id"]) for job in answered_jobs(op)}
    variables = op.variables
    if "id" in variables:
        found.add(int(variables["id"]))
    for item in variables.get("items") or []:
        found.add(int(item["id"]))
    inputs = variables.get("inputs") or ([variables["input"]] if "input" in variables else [])
    for item in inputs:
        found.update(int(i) for i in item.get("dependsOn") or [])
    return found


class Facts:
    def __init__(self, history: History) -> None:
        self.history = history
        self.jobs: dict[int, JobRow] = {job.id: job for job in history.final.jobs}
        self.events: dict[int, list[EventRow]] = {}
        for event in sorted(history.final.events, key=lambda e: e.id):
            self.events.setdefault(event.job_id, []).append(event)
        self.ops: dict[int, Op] = {op.seq: op for op in history.ops}
        self.timeline = Timeline(history.ops)
        self.end = max([op.answered_by for op in history.ops if op.recv is not None], default=NO_ANSWER)
        self.claim_ops: dict[tuple[int, int], list[Op]] = {}
        self.ops_by_job: dict[int, list[Op]] = {}
        for op in history.ops:
            if op.kind in CLAIMS:
                for job in answered_jobs(op):
                    self.claim_ops.setdefault((int(job["id"]), job["attempt"]), []).append(op)
            for job_id in named_jobs(op):
                self.ops_by_job.setdefault(job_id, []).append(op)

    @cached_property
    def events_by_type(self) -> dict[str, list[EventRow]]:
        """Each type's events, in id order (the order in which their transactions took the
        ids: for one job, the order of its transitions)."""
        found: dict[str, list[EventRow]] = {}
        for job_id, events in self.events.items():
            job = self.jobs.get(job_id)
            if job is not None:
                found.setdefault(job.type, []).extend(events)
        for events in found.values():
            events.sort(key=lambda e: e.id)
        return found

    @cached_property
    def claim_attempts(self) -> dict[int, int]:
        """event id -> the attempt a CLAIMED event started (its count among the job's claims)."""
        found = {}
        for events in self.events.values():
            attempt = 0
            for event in events:
                if event.kind == "CLAIMED":
                    attempt += 1
                    found[event.id] = attempt
        return found

    def claim_moment(self, event: EventRow) -> ClaimMoment:
        ops = self.claim_ops.get((event.job_id, self.claim_attempts[event.id]))
        if ops:
            op = ops[0]
            return ClaimMoment(op.send, op.answered_by, op.seq)
        return ClaimMoment(event.at, max(self.end, event.at), None)

    def statuses(self, job_id: int) -> list[str]:
        return [event.status for event in self.events.get(job_id, [])]

    def states(self, job_id: int) -> list[tuple[str, int]]:
        """(status, attempt) after each of the job's events."""
        found = []
        attempt = 0
        for event in self.events.get(job_id, []):
            if event.kind == "CLAIMED":
                attempt += 1
            found.append((event.status, attempt))
        return found
