"""The history indexed for the checker: jobs, their events in order, which operation made
each claim, which operations touched each job, the controls' timeline, and each job's
settings (priority, maxRetries, expiresAt, runAt) as its enqueue and its edits set them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from history.generator import seconds_of
from history.model import NO_ANSWER, EventRow, History, JobRow, Op
from history.timeline import Timeline

CLAIMS = frozenset({"claimJob", "claimJobs"})
UPDATES = frozenset({"updateJob", "runJobNow"})
ENQUEUES = frozenset({"enqueueJob", "enqueueJobs"})
# events after which a PENDING job's runAt is no longer the one an edit or enqueue gave it
RUN_AT_MOVED = frozenset({"RETRYING", "LEASE_EXPIRED", "SNOOZED", "RETRIED"})


@dataclass(frozen=True)
class Settings:
    """What an edit may change, in effect after some event: expiresAt and runAt as seconds
    since the epoch (run_at None: not known here, as after a retry or a snooze)."""

    priority: str
    max_retries: int
    expires_at: float | None
    run_at: float | None
    op: int | None  # the edit that set them (None: the enqueue)

    @classmethod
    def of_answer(cls, op: Op) -> Settings:
        data = op.data
        return cls(
            str(data["priority"]),
            int(data["maxRetries"]),
            seconds_of(data["expiresAt"]),
            seconds_of(data["runAt"]),
            op.seq,
        )


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
        self.enqueued: dict[int, dict[str, Any]] = {}  # job -> the input that created it
        self.created_by_op: dict[int, Op] = {}
        self.edits: dict[int, list[Op]] = {}  # job -> its updateJob/runJobNow ops, in order
        for op in history.ops:
            if op.kind in CLAIMS:
                for job in answered_jobs(op):
                    self.claim_ops.setdefault((int(job["id"]), job["attempt"]), []).append(op)
            elif op.kind in ENQUEUES and op.ok:
                items = [op.variables["input"]] if op.kind == "enqueueJob" else op.variables["inputs"]
                answers = [op.data] if op.kind == "enqueueJob" else op.data
                for item, answer in zip(items, answers, strict=True):
                    if answer["created"]:
                        self.enqueued[int(answer["job"]["id"])] = item
                        self.created_by_op[int(answer["job"]["id"])] = op
            elif op.kind in UPDATES:
                self.edits.setdefault(int(op.variables["id"]), []).append(op)
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

    def claim_answer(self, job_id: int, attempt: int) -> dict[str, Any] | None:
        """The job as the claim of this attempt answered it (None: no answer known)."""
        for op in self.claim_ops.get((job_id, attempt), [])[:1]:
            for job in answered_jobs(op):
                if int(job["id"]) == job_id:
                    return job
        return None

    def claimer(self, job_id: int, attempt: int) -> str | None:
        """The thread whose claim got this attempt (None: no answer known)."""
        ops = self.claim_ops.get((job_id, attempt))
        return ops[0].thread if ops else None

    def settings(self, job_id: int) -> list[Settings] | None:
        """The settings in effect after each of the job's events, when they are known: the
        job was enqueued by a recorded input, and each UPDATED event is one of its edits
        that answered (the edits of a job come from its producer alone, one at a time, so
        in order). None when an edit got no answer or the counts differ (update-count)."""
        item = self.enqueued.get(job_id)
        events = self.events.get(job_id, [])
        edits = self.edits.get(job_id, [])
        applied = [op for op in edits if op.ok]
        if item is None or "maxRetries" not in item or "priority" not in item:
            return None  # not a producer's input: defaults are the server's
        if any(op.recv is None for op in edits):
            return None
        if len(applied) != sum(1 for e in events if e.kind == "UPDATED"):
            return None
        current = Settings(
            str(item["priority"]),
            int(item["maxRetries"]),
            seconds_of(item.get("expiresAt")),
            seconds_of(item.get("runAt")),
            None,
        )
        found = []
        answers = iter(applied)
        for event in events:
            if event.kind == "UPDATED":
                current = Settings.of_answer(next(answers))
            elif event.kind in RUN_AT_MOVED:
                current = dataclasses.replace(current, run_at=None)
            found.append(current)
        return found

    def possible_max_retries(self, job_id: int) -> list[tuple[int, int]]:
        """The (lowest, highest) maxRetries that may have been in effect after each event:
        exact when the settings are known, else any value the enqueue, an edit that may have
        applied, or the final row gave."""
        job = self.jobs[job_id]
        events = self.events.get(job_id, [])
        known = self.settings(job_id)
        if known is not None:
            return [(s.max_retries, s.max_retries) for s in known]
        values = {job.max_retries}
        item = self.enqueued.get(job_id)
        if item is not None and "maxRetries" in item:
            values.add(int(item["maxRetries"]))
        for op in self.edits.get(job_id, []):
            edit = op.variables.get("input") or {}
            if "maxRetries" in edit and (op.ok or op.recv is None):
                values.add(int(edit["maxRetries"]))
        return [(min(values), max(values))] * len(events)

    def possible_expiries(self, job_id: int) -> set[float | None]:
        """Every expiresAt the job may have had: its enqueue's, its edits', the final row's."""
        found: set[float | None] = {self.jobs[job_id].expires_at}
        item = self.enqueued.get(job_id)
        if item is not None:
            found.add(seconds_of(item.get("expiresAt")))
        for op in self.edits.get(job_id, []):
            edit = op.variables.get("input") or {}
            if "expiresAt" in edit and (op.ok or op.recv is None):
                found.add(seconds_of(edit["expiresAt"]))
        return found

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
