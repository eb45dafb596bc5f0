"""One history, phase by phase: set up, run the clients, drain, read the final state.

- setup: the keys, each controlled type's first controls;
- main: producers, workers and an admin (clients.py) run their steps at once, on random
  servers, while subscribers follow a sample of the jobs (`jobUpdated`) on every server; on
  PostgreSQL the admin ends one server's LISTEN connection a third of the way, and the soak
  also kills servers;
- drain: every type resumed and its limits cleared, then workers claim and complete until
  nothing is claimable and nothing runs; the subscriptions of finished jobs are given time
  to end;
- final: the database and the API read once nothing moves any more.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from history import documents as doc
from history import dump
from history.clients import DOCUMENTS, Admin, Client, Producer, Worker
from history.deployment import Deployment, wait_for
from history.generator import CONTROLLED, SPECS, TYPE_NAMES, Registry, cleared
from history.model import History, Subscription
from history.recorder import Caller, Recorder
from history.subscriber import Subscriber


@dataclass(frozen=True)
class Sizes:
    """How much one history does. The defaults make a run of about a minute on a busy
    2-core machine (the CI test); the soak makes its rounds bigger."""

    producers: int = 3
    workers: int = 4
    producer_steps: int = 300
    worker_steps: int = 500
    admin_steps: int = 220
    subscribers_per_server: int = 1
    subscribe_share: float = 0.3  # of the jobs created, how many a subscriber follows
    end_a_listener: bool = True  # PostgreSQL: a third of the way through the admin's steps
    kills: int = 0  # kill -9 of a server, spread over the admin's steps
    main_seconds: float = 150.0  # a main phase still running then stops where it is
    drain_seconds: float = 90.0
    subscriptions_seconds: float = 60.0  # the wait ends as soon as every one has


@dataclass
class Threads:
    """The main phase's client threads; an exception in one is kept and reported."""

    stop: threading.Event = field(default_factory=threading.Event)
    failures: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, name: str, body: Callable[[], None]) -> None:
        def run() -> None:
            try:
                body()
            except Exception:
                self.failures.append(f"{name}: {traceback.format_exc()}")
                self.stop.set()

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self.threads)


class HarnessError(Exception):
    """The harness itself failed (not the system under test); the history is attached."""

    def __init__(self, message: str, history: History) -> None:
        super().__init__(message)
        self.history = history


def run_history(deployment: Deployment, seed: int, sizes: Sizes = Sizes()) -> History:
    run = HistoryRun(deployment, seed, sizes)
    for phase in (run.setup, run.main, run.drain, run.final):
        started = time.monotonic()
        phase()
        run.history.notes.append(f"{phase.__name__}: {time.monotonic() - started:.1f} s")
    if run.threads.failures:
        raise HarnessError("client threads failed:\n" + "\n".join(run.threads.failures), run.history)
    return run.history


class HistoryRun:
    def __init__(self, deployment: Deployment, seed: int, sizes: Sizes) -> None:
        self.deployment = deployment
        self.seed = seed
        self.sizes = sizes
        self.recorder = Recorder()
        self.history = History(seed, deployment.backend, deployment.count, list(TYPE_NAMES))
        self.history.ops = self.recorder.ops
        self.registry = Registry()
        self.threads = Threads()
        self.subscribers: list[Subscriber] = []
        self._feed_rng = random.Random(seed ^ 0x5EED)
        self._feed_lock = threading.Lock()

    def rng(self, purpose: str, index: int = 0) -> random.Random:
        """The generator of one thread: fixed by the seed, the thread's role and its index."""
        return random.Random(f"{self.seed}/{purpose}/{index}")

    def caller(self, key: str, thread: str) -> Caller:
        return Caller(self.deployment.url, self.deployment.count, key, thread, self.recorder)

    def key(self, name: str, role: str, max_priority: str | None = None) -> str:
        return self.deployment.servers[0].make_key(name, role, max_priority=max_priority)

    # --- phases ----------------------------------------------------------------------------

    def setup(self) -> None:
        admin = self.caller(self.deployment.admin_key, "setup")
        for job_type in CONTROLLED:
            initial = SPECS[job_type].initial
            if initial:
                admin.call(0, "setTypeControl", doc.SET_CONTROL, {"input": {"type": job_type, **initial}})
        admin.close()
        self.history.controls_reads.append(dump.read_controls(self.deployment, "setup"))

    def main(self) -> None:
        sizes = self.sizes
        self.recorder.phase = "main"
        self._start_subscribers()
        deadline = time.monotonic() + sizes.main_seconds
        for name, client, steps in self._clients():
            self.threads.start(name, lambda c=client, n=steps: c.run(n, self.threads.stop, deadline))
        if not self.threads.join(sizes.main_seconds + 60):
            self.threads.failures.append("client threads still running a minute after the main phase's end")
        if time.monotonic() > deadline:
            self.history.notes.append(f"main phase stopped by its {sizes.main_seconds:.0f} s deadline")
        self.history.controls_reads.extend(self.admin.controls)
        self.history.counts.extend(self.admin.counts)
        self.history.incidents.extend(self.admin.incidents)
        self.history.controls_reads.append(dump.read_controls(self.deployment, "end-main"))
        self.history.counts.append(dump.read_counts(self.deployment, "end-main"))

    def _start_subscribers(self) -> None:
        for server in range(self.deployment.count):
            for index in range(self._subscribers_on(server)):
                name = f"subscriber-{server}-{index}"
                subscriber = Subscriber(name, self.deployment.url, server, self.deployment.admin_key)
                subscriber.start()
                self.subscribers.append(subscriber)

    def _clients(self) -> list[tuple[str, Client, int]]:
        """The main phase's clients, each with its name and its number of steps."""
        sizes = self.sizes
        clients: list[tuple[str, Client, int]] = []
        for i in range(sizes.producers):
            name = f"producer-{i}"
            caller = self.caller(self.key(name, "producer", max_priority="HIGH"), name)
            producer = Producer(name, caller, self.rng("producer", i), self.registry, self.feed)
            clients.append((name, producer, sizes.producer_steps))
        for i in range(sizes.workers):
            name = f"worker-{i}"
            worker = Worker(self.caller(self.key(name, "worker"), name), self.rng("worker", i))
            clients.append((name, worker, sizes.worker_steps))
        self.admin = Admin(
            self.caller(self.deployment.admin_key, "admin"),
            self.rng("admin"),
            self.deployment,
            self.registry,
            [self.caller(self.deployment.admin_key, f"admin-race-{i}") for i in range(2)],
            self.caller(self.key("admin-hands", "worker"), "admin-hands"),
            self._incidents(),
        )
        clients.append(("admin", self.admin, sizes.admin_steps))
        return clients

    def _subscribers_on(self, server: int) -> int:
        # SQLite's single URL leads to either process: two sockets to reach both.
        return self.sizes.subscribers_per_server * (2 if self.deployment.backend == "sqlite" else 1)

    def _incidents(self) -> dict[int, str]:
        steps = self.sizes.admin_steps
        planned: dict[int, str] = {}
        if self.sizes.end_a_listener and self.deployment.backend == "postgresql":
            planned[steps // 3] = "listener"
        for k in range(self.sizes.kills):
            planned[(k + 1) * steps // (self.sizes.kills + 1) + 1] = "kill"
        return planned

    def feed(self, job_id: int) -> None:
        """A new job: followed by a random subscriber, for some of them."""
        with self._feed_lock:
            if not self.subscribers or self._feed_rng.random() >= self.sizes.subscribe_share:
                return
            subscriber = self._feed_rng.choice(self.subscribers)
        subscriber.inbox.put(job_id)

    def drain(self) -> None:
        self.recorder.phase = "drain"
        admin = self.caller(self.deployment.admin_key, "drain-admin")
        for job_type in TYPE_NAMES:
            admin.call(0, "resumeType", DOCUMENTS["resumeType"], {"type": job_type})
            admin.call(0, "setTypeControl", DOCUMENTS["setTypeControl"], cleared(job_type))
        admin.close()
        self.history.drain_started = time.time()
        drainers = [
            Drainer(self.caller(self.key(f"drainer-{i}", "worker"), f"drainer-{i}"), i) for i in range(2)
        ]
        threads = Threads()
        for drainer in drainers:
            threads.start(drainer.caller.thread, drainer.run)

        def done() -> bool:
            if not all(d.idle() for d in drainers):
                return False
            return self.deployment.sql("SELECT COUNT(*) FROM jobs WHERE status = 'running'")[0][0] == 0

        if not wait_for(done, self.sizes.drain_seconds, every=0.5):
            self.history.notes.append(f"drain not finished within {self.sizes.drain_seconds:.0f} s")
        threads.stop.set()
        for drainer in drainers:
            drainer.stop.set()
        threads.join(60)
        self.threads.failures.extend(threads.failures)
        self._let_subscriptions_end()

    def _let_subscriptions_end(self) -> None:
        def finished_jobs_followed() -> bool:
            open_jobs = {job for s in self.subscribers for job in s.open_jobs()}
            if not open_jobs:
                return True
            finished = "status IN ('completed', 'failed', 'cancelled')"
            rows = self.deployment.sql(
                f"SELECT COUNT(*) FROM jobs WHERE id IN :ids AND {finished}", ids=sorted(open_jobs)
            )
            return rows[0][0] == 0

        started = time.monotonic()
        if not wait_for(finished_jobs_followed, self.sizes.subscriptions_seconds, every=0.5):
            self.history.notes.append("some subscriptions of finished jobs had not ended")
        self.history.notes.append(f"waited {time.monotonic() - started:.1f} s for subscriptions to end")

    def final(self) -> None:
        self.recorder.phase = "final"
        for subscriber in self.subscribers:
            subscriber.finish()
        subscriptions: list[Subscription] = [s for sub in self.subscribers for s in sub.subscriptions]
        self.history.subscriptions = subscriptions
        self.history.notes.extend(f"{s.name}: {e}" for s in self.subscribers for e in s.errors[:5])
        viewer = self.caller(self.deployment.admin_key, "final")
        stats = viewer.call(0, "queueStats", doc.STATS, {})
        controls = viewer.call(0, "typeControls", doc.CONTROLS, {})
        viewer.close()
        final = dump.read_final(self.deployment)
        if stats.ok:
            final.api_counts = {entry["type"]: entry["counts"] for entry in stats.data["byType"]}
        if controls.ok:
            final.api_running = {entry["type"]: entry["running"] for entry in controls.data}
        self.history.final = final
        self.history.counts.append(dump.read_counts(self.deployment, "final"))
        self.history.controls_reads.append(dump.read_controls(self.deployment, "final"))


class Drainer:
    """Claims every claimable job and completes it, until told to stop."""

    IDLE_AFTER = 3  # empty claims in a row

    def __init__(self, caller: Caller, server: int) -> None:
        self.caller = caller
        self.server = server % caller.servers
        self.stop = threading.Event()
        self.empty = 0

    def idle(self) -> bool:
        return self.empty >= self.IDLE_AFTER

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                variables: dict[str, Any] = {"limit": 20, "types": None, "lease": 60, "wait": 1}
                op = self.caller.call(self.server, "claimJobs", doc.CLAIM_MANY, variables)
                jobs = op.data if op.ok else []
                if not op.ok:
                    time.sleep(0.2)
                self.empty = 0 if jobs else self.empty + 1
                if jobs:
                    items = [{"id": job["id"], "attempt": job["attempt"]} for job in jobs]
                    self.caller.call(self.server, "completeJobs", doc.COMPLETE_MANY, {"items": items})
        finally:
            self.caller.close()
