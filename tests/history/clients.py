"""The client threads: producers, workers and an admin, each a seeded random walk over the
GraphQL API on a random server per operation. What they choose depends on their seed and on
the answers they get (which jobs a claim returned), never on timing alone."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from history import documents as doc
from history import dump
from history.deployment import Deployment
from history.generator import (
    CONTROLLED,
    KEYS,
    PRIORITIES,
    SNOOZES,
    TYPE_NAMES,
    WORKED,
    Registry,
    control_write,
    expiry,
    iso,
    job_input,
    seconds_of,
)
from history.model import ControlsRead, CountsSnapshot, Incident, Op
from history.recorder import Caller

DOCUMENTS = {
    "pauseType": doc.PAUSE,
    "resumeType": doc.RESUME,
    "setTypeControl": doc.SET_CONTROL,
}
LEASE_SECONDS = 15  # a held job is heartbeaten well before
HEARTBEAT_AFTER = 5.0
HANG_SECONDS = 2.5  # a job meant to time out (timeoutSeconds 1) is let go after this long


class Client:
    """A thread's behaviour: up to `steps` operations chosen by its own seeded generator."""

    def __init__(self, caller: Caller, rng: random.Random) -> None:
        self.caller = caller
        self.rng = rng
        self.steps_done = 0

    def server(self) -> int:
        return self.rng.randrange(self.caller.servers)

    def call(self, kind: str, document: str, variables: dict[str, Any]) -> Op:
        return self.caller.call(self.server(), kind, document, variables)

    def run(self, steps: int, stop: threading.Event, deadline: float) -> None:
        try:
            for _ in range(steps):
                if stop.is_set() or time.monotonic() > deadline:
                    break
                self.step()
                self.steps_done += 1
            self.finish()
        finally:
            self.caller.close()

    def step(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """What the thread does once its steps are done."""


# --- producers -------------------------------------------------------------------------------


class Producer(Client):
    """Enqueues single jobs and small graphs (dependsOnItems), some expiring soon, replays
    idempotency keys (with the same input, and now and then with another), cancels its own
    jobs, and edits its recent jobs (updateJob, runJobNow) whatever their status: racing the
    workers' claims, or refused CONFLICT once claimed or finished."""

    def __init__(
        self, name: str, caller: Caller, rng: random.Random, registry: Registry, feed: Callable[[int], None]
    ) -> None:
        super().__init__(caller, rng)
        self.name = name
        self.registry = registry
        self.feed = feed
        self.serial = 0
        self.idempotent: dict[str, dict[str, Any]] = {}
        self.own: list[int] = []
        # each own job's expiresAt as this producer last set it (only it edits its jobs), so
        # that an edit of runAt alone stays before it
        self.expires: dict[int, float | None] = {}

    def step(self) -> None:
        choice = self.rng.random()
        if choice < 0.52:
            self.enqueue_one()
        elif choice < 0.67:
            self.enqueue_graph()
        elif choice < 0.75:
            self.cancel_own()
        elif choice < 0.83:
            self.replay()
        elif choice < 0.94:
            self.update_own()
        else:
            self.run_own_now()

    def next_input(self) -> dict[str, Any]:
        self.serial += 1
        return job_input(self.rng, self.registry, self.name, f"{self.name}-{self.serial}")

    def enqueue_one(self) -> None:
        item = self.next_input()
        if self.rng.random() < 0.3:
            key = f"{self.name}-{self.serial}"
            item["idempotencyKey"] = key
            self.idempotent[key] = item
        op = self.call("enqueueJob", doc.ENQUEUE, {"input": item})
        if op.ok:
            self.created([op.data], [item])

    def enqueue_graph(self) -> None:
        items = []
        for index in range(self.rng.randint(2, 4)):
            item = self.next_input()
            if index and self.rng.random() < 0.6:
                item["dependsOnItems"] = sorted(
                    self.rng.sample(range(index), self.rng.randint(1, min(2, index)))
                )
            items.append(item)
        op = self.call("enqueueJobs", doc.ENQUEUE_MANY, {"inputs": items})
        if op.ok:
            self.created(op.data, items)

    def created(self, answers: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
        for answer, item in zip(answers, items, strict=True):
            if answer["created"]:
                job_id = int(answer["job"]["id"])
                self.registry.add(
                    self.name, job_id, bool(item.get("dependsOn") or item.get("dependsOnItems"))
                )
                self.own.append(job_id)
                self.expires[job_id] = seconds_of(item.get("expiresAt"))
                self.feed(job_id)

    def cancel_own(self) -> None:
        if not self.own:
            self.enqueue_one()
            return
        job_id = self.rng.choice(self.own[-30:])
        self.call("cancelJob", doc.CANCEL, {"id": str(job_id)})

    def update_own(self) -> None:
        """updateJob on one of its newest jobs: a random subset of priority, maxRetries, runAt
        (now to 2.5 s ahead) and expiresAt (a short one, or null). Every input is valid
        whatever the job's state: a new expiresAt comes with a runAt before it, a runAt alone
        stays before the job's expiry (else the expiry is cleared too)."""
        if not self.own:
            self.enqueue_one()
            return
        rng = self.rng
        job_id = rng.choice(self.own[-12:])
        edit: dict[str, Any] = {}
        if rng.random() < 0.5:
            edit["priority"] = rng.choice(PRIORITIES)
        if rng.random() < 0.4:
            edit["maxRetries"] = rng.randint(0, 3)
        run_at = time.time() + rng.uniform(0, 2.5) if rng.random() < 0.4 else None
        what = rng.random()
        if what < 0.25:
            run_at = run_at if run_at is not None else time.time() + rng.uniform(0, 1.0)
            edit["expiresAt"] = iso(expiry(rng, run_at))
        elif what < 0.4 or (run_at is not None and before_expiry(self.expires.get(job_id), run_at)):
            edit["expiresAt"] = None
        if run_at is not None:
            edit["runAt"] = iso(run_at)
        if not edit:
            edit["priority"] = rng.choice(PRIORITIES)
        op = self.call("updateJob", doc.UPDATE, {"id": str(job_id), "input": edit})
        if op.ok:
            self.expires[job_id] = seconds_of(op.data["expiresAt"])
        elif op.recv is None:
            self.expires[job_id] = 0.0  # may have applied: unknown, so a runAt alone clears it

    def run_own_now(self) -> None:
        if not self.own:
            self.enqueue_one()
            return
        self.call("runJobNow", doc.RUN_NOW, {"id": str(self.rng.choice(self.own[-12:]))})

    def replay(self) -> None:
        if not self.idempotent:
            self.enqueue_one()
            return
        item = self.idempotent[self.rng.choice(sorted(self.idempotent))]
        if self.rng.random() < 0.3:  # another input under the same key: CONFLICT
            item = {**item, "payload": {**item["payload"], "changed": True}}
        self.call("enqueueJob", doc.ENQUEUE, {"input": item})


def before_expiry(expires: float | None, run_at: float) -> bool:
    """Whether a runAt would not be safely before a job's expiry (None: none)."""
    return expires is not None and expires < run_at + 0.5


# --- workers ---------------------------------------------------------------------------------


@dataclass
class Held:
    id: int
    attempt: int
    fate: str
    due: int  # steps to wait before answering
    since: float
    beat: float
    snoozes: int = 0  # the job's snoozeCount when claimed


class Worker(Client):
    """Claims (one or up to 8 at once, often more than a limit allows; any types or some;
    now and then with a 1 s lease and then abandons the jobs), holds jobs for a few steps,
    heartbeats them or reports their progress, and answers by the fate in each payload:
    complete (one or several at once), fail for good, fail as retryable, snooze (1-2 s, a
    few times, then complete), or never (the job times out; its worker reports progress on
    it once more, late). A heartbeat or report answered with cancelRequested mostly makes it
    end the job at its next answer by a failure or a snooze (the job ends CANCELLED all the
    same), and now and then it goes on regardless. Now and then it reports on an attempt it
    does not hold (refused)."""

    def __init__(self, caller: Caller, rng: random.Random) -> None:
        super().__init__(caller, rng)
        self.held: list[Held] = []

    def step(self) -> None:
        self.heartbeat_old()
        if self.held and (len(self.held) >= 4 or self.rng.random() < 0.55):
            self.act()
        else:
            self.claim()

    def claim(self) -> None:
        rng = self.rng
        types = None if rng.random() < 0.25 else rng.sample(WORKED, rng.randint(1, 3))
        abandon = rng.random() < 0.06
        variables: dict[str, Any] = {
            "types": types,
            "lease": 1 if abandon else LEASE_SECONDS,
            "wait": 1 if rng.random() < 0.2 else 0,
        }
        if rng.random() < 0.25:
            op = self.call("claimJob", doc.CLAIM_ONE, variables)
            jobs = [op.data] if op.data else []
        else:
            op = self.call("claimJobs", doc.CLAIM_MANY, {**variables, "limit": rng.randint(1, 8)})
            jobs = op.data or []
        if not op.ok or abandon:
            return
        now = time.monotonic()
        for job in jobs:
            fate = (job.get("payload") or {}).get("fate", "ok")
            held = Held(int(job["id"]), job["attempt"], fate, rng.randint(0, 3), now, now)
            held.snoozes = job.get("snoozeCount") or 0
            self.held.append(held)

    def heartbeat_old(self) -> None:
        now = time.monotonic()
        for held in list(self.held):
            if held.fate != "hang" and now - held.beat > HEARTBEAT_AFTER:
                self.heartbeat(held)

    def heartbeat(self, held: Held) -> None:
        """A heartbeat, or as often a progress report (which extends the lease too)."""
        if self.rng.random() < 0.5:
            op = self.report(held)
        else:
            op = self.call(
                "heartbeatJob",
                doc.HEARTBEAT,
                {"id": str(held.id), "attempt": held.attempt, "lease": LEASE_SECONDS},
            )
        held.beat = time.monotonic()
        if not op.ok and held in self.held:
            self.held.remove(held)
        elif op.data and op.data.get("cancelRequested") and held.fate != "hang" and self.rng.random() < 0.7:
            held.fate = "stopped"  # told to stop: fails or snoozes (the job ends CANCELLED), else goes on
            held.due = 0

    def report(self, held: Held, attempt: int | None = None) -> Op:
        variables = {
            "id": str(held.id),
            "attempt": held.attempt if attempt is None else attempt,
            "progress": round(self.rng.random(), 4),
            "message": self.rng.choice((None, "step", "almost")),
        }
        return self.call("reportProgress", doc.PROGRESS, variables)

    def act(self) -> None:
        held = self.rng.choice(self.held)
        if held.fate == "hang":
            if time.monotonic() - held.since > HANG_SECONDS:
                self.held.remove(held)
                if self.rng.random() < 0.5:
                    self.report(held)  # timed out by now: refused, or held and then dropped
                self.complete([held])  # timed out by now: CONFLICT
            elif self.rng.random() < 0.4:
                self.heartbeat(held)
            return
        if held.due > 0:
            held.due -= 1
            if self.rng.random() < 0.3:
                self.heartbeat(held)
            elif self.rng.random() < 0.1:
                self.report(held, attempt=held.attempt + 1)  # not an attempt it holds
            return
        self.answer(held)

    def answer(self, held: Held, finishing: bool = False) -> None:
        fate = held.fate
        if fate == "ok" and self.rng.random() < 0.03:
            fate = "retry"
        elif fate == "ok" and self.rng.random() < 0.03 and not finishing:
            fate = "snooze"
        if fate == "snooze" and (held.snoozes >= SNOOZES or finishing):
            fate = "ok"
        if fate == "stopped" and self.rng.random() < 0.4 and not finishing:
            fate = "snooze"  # a snooze after a cancel request ends the job CANCELLED
        if fate == "snooze":
            self.held.remove(held)
            variables = {"id": str(held.id), "attempt": held.attempt, "seconds": self.rng.randint(1, 2)}
            self.call("snoozeJob", doc.SNOOZE, variables)
            return
        if fate == "ok":
            ready = [h for h in self.held if h is not held and h.fate == "ok" and h.due == 0]
            batch = [held, *ready[:4]] if ready and self.rng.random() < 0.3 else [held]
            for done in batch:
                self.held.remove(done)
            self.complete(batch)
            return
        self.held.remove(held)
        variables = {
            "id": str(held.id),
            "attempt": held.attempt,
            "retryable": fate in ("retry", "stopped"),
            "error": "boom",
        }
        self.call("failJob", doc.FAIL, variables)

    def complete(self, batch: list[Held]) -> None:
        if len(batch) == 1:
            self.call("completeJob", doc.COMPLETE, {"id": str(batch[0].id), "attempt": batch[0].attempt})
        else:
            items = [{"id": str(h.id), "attempt": h.attempt} for h in batch]
            self.call("completeJobs", doc.COMPLETE_MANY, {"items": items})

    def finish(self) -> None:
        """Answer every held job but those meant to time out."""
        for held in [h for h in self.held if h.fate != "hang"]:
            held.due = 0
            if held in self.held:
                self.answer(held, finishing=True)


# --- the admin -------------------------------------------------------------------------------


class Admin(Client):
    """Changes controls (alone, or two writes at once on different servers), pauses and
    resumes, cancels and retries (one job, or in bulk), and reads the database: the controls
    (checked against the writes) and the counters (checked against the table). With a worker
    key of its own (`hands`) it also races a dependency's end against a dependent: a retry,
    or an enqueue. It does the run's incidents too: ends a server's LISTEN connection, kills
    servers."""

    def __init__(
        self,
        caller: Caller,
        rng: random.Random,
        deployment: Deployment,
        registry: Registry,
        racers: list[Caller],
        hands: Caller,
        incidents: dict[int, str],
    ) -> None:
        super().__init__(caller, rng)
        self.deployment = deployment
        self.registry = registry
        self.racers = racers
        self.hands = hands
        self.incidents_at = incidents  # step -> "listener" | "kill"
        self.controls: list[ControlsRead] = []
        self.counts: list[CountsSnapshot] = []
        self.incidents: list[Incident] = []
        self.cancelled: list[int] = []
        self.pool = ThreadPoolExecutor(len(racers))

    def step(self) -> None:
        incident = self.incidents_at.get(self.steps_done)
        if incident is not None:
            self.incident(incident)
        choice = self.rng.random()
        if choice < 0.15:
            self.write_control()
        elif choice < 0.28:
            self.race_controls()
        elif choice < 0.36:
            self.race_retry_against_completion()
        elif choice < 0.44:
            self.race_enqueue_against_failure()
        elif choice < 0.53:
            self.cancel()
        elif choice < 0.60:
            self.retry_listed()
        elif choice < 0.65:
            self.retry_cancelled()
        elif choice < 0.71:
            self.cancel_many()
        elif choice < 0.76:
            self.retry_many()
        elif choice < 0.88:
            self.controls.append(dump.read_controls(self.deployment, "main"))
        else:
            self.counts.append(dump.read_counts(self.deployment, "main"))
        time.sleep(self.rng.uniform(0, 0.06))  # spreads the admin's steps over the run

    def finish(self) -> None:
        self.pool.shutdown()
        self.hands.close()
        for racer in self.racers:
            racer.close()

    def incident(self, what: str) -> None:
        at = time.time()
        if what == "listener":
            detail = self.deployment.end_a_listener(self.rng)
        else:
            detail = self.deployment.kill(self.server(), self.rng)
        self.incidents.append(Incident(what, at, detail))

    def at_once(self, calls: list[tuple[Caller, str, str, dict[str, Any]]]) -> list[Op]:
        """Send these calls at the same moment, each to another server."""
        first = self.server()
        futures = [
            self.pool.submit(caller.call, (first + i) % self.caller.servers, kind, document, variables)
            for i, (caller, kind, document, variables) in enumerate(calls)
        ]
        return [future.result() for future in futures]

    def write_control(self) -> None:
        kind, variables = control_write(self.rng, self.rng.choice(CONTROLLED))
        self.call(kind, DOCUMENTS[kind], variables)

    def race_controls(self) -> None:
        """Two writes on one type sent at once to different servers (a pause or resume
        racing a limit change, or two limit changes), then the controls read back."""
        job_type = self.rng.choice(CONTROLLED)
        writes = [control_write(self.rng, job_type) for _ in self.racers]
        self.at_once(
            [
                (racer, kind, DOCUMENTS[kind], variables)
                for racer, (kind, variables) in zip(self.racers, writes, strict=True)
            ]
        )
        self.controls.append(dump.read_controls(self.deployment, "main"))

    def held_pair(self) -> tuple[dict[str, Any], int] | None:
        """Enqueue a job P and a job D that depends on it, then claim P with `hands`: (P as
        claimed, D's id), or None when another worker took P first."""
        inputs = [
            {"type": "chain", "payload": {"fate": "ok"}},
            {"type": "plain", "payload": {"fate": "ok"}, "dependsOnItems": [0]},
        ]
        enqueued = self.call("enqueueJobs", doc.ENQUEUE_MANY, {"inputs": inputs})
        if not enqueued.ok:
            return None
        parent, dependent = (int(item["job"]["id"]) for item in enqueued.data)
        variables = {"limit": 1, "types": ["chain"], "lease": LEASE_SECONDS, "wait": 0}
        claimed = self.hands.call(self.server(), "claimJobs", doc.CLAIM_MANY, variables)
        for job in claimed.data or [] if claimed.ok else []:
            if int(job["id"]) == parent:
                return job, dependent
            # an older chain job (one whose lease expired): answered, not left to expire again
            self.hands.call(
                self.server(), "completeJob", doc.COMPLETE, {"id": job["id"], "attempt": job["attempt"]}
            )
        return None

    def race_retry_against_completion(self) -> None:
        """D waits for P; D is cancelled, then retried on one server while P completes on
        another: D must end up claimable (waiting for nothing) or waiting for P, never
        waiting for a COMPLETED P."""
        pair = self.held_pair()
        if pair is None:
            return
        parent, dependent = pair
        complete = {"id": parent["id"], "attempt": parent["attempt"]}
        if not self.call("cancelJob", doc.CANCEL, {"id": str(dependent)}).ok:
            self.hands.call(self.server(), "completeJob", doc.COMPLETE, complete)
            return
        self.at_once(
            [
                (self.hands, "completeJob", doc.COMPLETE, complete),
                (self.racers[0], "retryJob", doc.RETRY, {"id": str(dependent)}),
            ]
        )

    def race_enqueue_against_failure(self) -> None:
        """D1 waits for R; R fails for good on one server while D2 is enqueued on another,
        depending on D1: D2 is refused (CONFLICT) or enqueued and cancelled with D1, never
        left waiting on a CANCELLED D1."""
        pair = self.held_pair()
        if pair is None:
            return
        root, dependent = pair
        fail = {"id": root["id"], "attempt": root["attempt"], "retryable": False, "error": "boom"}
        self.at_once(
            [
                (self.hands, "failJob", doc.FAIL, fail),
                (
                    self.racers[0],
                    "enqueueJob",
                    doc.ENQUEUE,
                    {"input": {"type": "plain", "dependsOn": [str(dependent)]}},
                ),
            ]
        )

    def cancel(self) -> None:
        job_id = self.registry.recent_dependent(self.rng)
        if job_id is None or self.rng.random() < 0.3:
            picked = self.registry.recent(self.rng, 1)
            if not picked:
                return
            job_id = picked[0]
        op = self.call("cancelJob", doc.CANCEL, {"id": str(job_id)})
        if op.ok:
            self.cancelled.append(job_id)

    def retry_listed(self) -> None:
        status = self.rng.choice(("FAILED", "CANCELLED"))
        op = self.call("jobs", doc.JOBS_WITH_STATUS, {"status": status, "type": None})
        nodes = (op.data or {}).get("nodes") or []
        if nodes:
            self.call("retryJob", doc.RETRY, {"id": self.rng.choice(nodes)["id"]})

    def retry_cancelled(self) -> None:
        """Retry a job this admin cancelled while it waited: its dependencies may be
        finishing meanwhile."""
        if self.cancelled:
            job_id = self.cancelled.pop(self.rng.randrange(len(self.cancelled)))
            self.call("retryJob", doc.RETRY, {"id": str(job_id)})

    def cancel_many(self) -> None:
        job_filter: dict[str, Any] = {"status": "PENDING", "type": self.rng.choice(TYPE_NAMES)}
        if self.rng.random() < 0.4:
            job_filter["concurrencyKey"] = self.rng.choice(KEYS)
        self.call("cancelJobs", doc.CANCEL_MANY, {"filter": job_filter, "limit": self.rng.randint(1, 3)})

    def retry_many(self) -> None:
        job_filter = {"status": self.rng.choice(("FAILED", "CANCELLED")), "type": self.rng.choice(TYPE_NAMES)}
        self.call("retryJobs", doc.RETRY_MANY, {"filter": job_filter, "limit": self.rng.randint(1, 3)})
