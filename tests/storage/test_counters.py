"""Job counts never drift from the jobs table (issue 6, item 5), proven from outside.

`queueStats`, `jobs(...).totalCount` and the `queuelog_jobs{status=...}` gauges of `/metrics`
are meant to come from counters kept in the same transaction as every transition. Whatever
keeps them, they must equal a full count of the jobs table. This module drives a real
`queuelog serve` (short lease, immediate retries, short retention, frequent pruning) through
a seeded random mix of every transition, over the public API only, and at checkpoints compares
every key's view with the ground truth read straight from the database (one snapshot):

    SELECT type, status, count(*) FROM jobs [WHERE <scope>] GROUP BY 1, 2

(everything for ADMIN and VIEWER keys, `created_by = name` for producers, `worker_id = name`
for workers, either of the two for a key with both roles). The keys: the bootstrap admin, a
viewer, two producers (maxPriority HIGH and MEDIUM), two workers, one PRODUCER+WORKER key that
enqueues and claims, and an idle producer and worker whose views must stay empty.

The mix: single and batch enqueues (idempotency keys from a small pool shared by the producers:
new keys, replays, conflicting replays, replays inside one batch; batches refused whole for one
bad type or priority), delayed jobs, claimJob/claimJobs with and without type filters,
completeJob/completeJobs with rejected items (another holder's job, a wrong attempt, a repeated
item), retryable and final failures (maxRetries 0..3, so retries run out), heartbeats, cancels by
the admin and by producers (and refused ones), admin retries of FAILED and CANCELLED jobs,
claims with the server's 1 s lease that are left to expire, pauses so that the pruner (retention
2 s) deletes finished jobs, bursts of operations from several threads, and one idempotency key
sent by several threads at once. The mix must be seen to exercise each of these (a coverage
check at the end), and every type "early" job is drained and pruned before the last checkpoint.
A second test starts the server on a database written by the first migration, holding jobs in
every state (some leases expired, some finished jobs past retention), so that counts of jobs
stored before the upgrade are checked too.

Rules the checks hold the server to:
- `queueStats.counts` equals the scoped ground truth; `byType` has one entry per type that has
  jobs in scope, with exactly its counts. A type with no job in scope may appear only with
  all-zero counts, and only if jobs of that type were enqueued during the test (its jobs were
  pruned, or moved out of a worker's scope); a type that never had a job must be absent.
- `jobs(status:, type:).totalCount` equals the ground truth for every combination of no/each
  status and no/each type (an unknown type included: 0).
- `/metrics` has exactly one `queuelog_jobs` gauge per status, equal to the global counts.
- The jobs table stores statuses lowercase ('pending', ...), byte for byte.

The server is quiet at each checkpoint: no request of ours is in flight, and the background
lease expiry and pruning are ruled out by reading the table before and after the API reads; if
anything changed in between the checkpoint is taken again.

The seed is in every failure message; rerun one with QUEUELOG_COUNTERS_SEED=<seed>.
A property-based variant (hypothesis chooses the operation sequence) runs when hypothesis is
installed and is skipped, saying so, otherwise.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from alembic import command
from alembic.script import ScriptDirectory
from conftest import Databases, Server, http_client, serving, timestamp_value
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import alembic_config
from queuelog.storage.schema.types import from_micros

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    HAVE_HYPOTHESIS = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_HYPOTHESIS = False

STATUSES = ("pending", "running", "completed", "failed", "cancelled")
# "early" is only enqueued at the start of the mix and drained at the end, so that all its jobs
# get pruned; "never" is allowed but never enqueued; "nosuch" is not even allowed.
MIX_TYPES = ("email", "report", "resize")
JOB_TYPES = (*MIX_TYPES, "early", "never")
UNKNOWN_TYPE = "nosuch"
PRIORITIES = ("LOW", "MEDIUM", "HIGH", "CRITICAL")

LEASE_SECONDS = 1  # the server's default lease: claims without leaseSeconds expire quickly
HELD_LEASE = 60  # leaseSeconds for jobs a worker means to report on
RETENTION_SECONDS = 2
PRUNE_INTERVAL_SECONDS = 1
SERVER_SETTINGS: dict[str, Any] = {
    "job_types": ",".join(JOB_TYPES),
    "lease_seconds": LEASE_SECONDS,
    "retry_base_seconds": 0,
    "retention_seconds": RETENTION_SECONDS,
    "prune_interval_seconds": PRUNE_INTERVAL_SECONDS,
    # One request reads every totalCount of a key's view.
    "max_aliases": 100,
    "max_tokens": 20000,
}
# Internal (not a flag): how often the server looks for expired leases.
SERVER_ENV = {"QUEUELOG_LEASE_CHECK_SECONDS": "0.2"}

DEFAULT_SEED = 20261129
MIX_OPERATIONS = 300
# A checkpoint reads queueStats and 42 totalCounts for every key, and the table twice: seconds
# of a busy server. Two fixed ones, besides the first, the last and one as each status first
# shows up: a counter that drifts stays wrong until something corrects it by chance, so the
# next checkpoint still sees it.
CHECKPOINTS = (150, 300)
# Expiry and pruning move the table now and then; on a busy machine one checkpoint's reads
# take longer, and more of them see a move: take it again up to this many times.
QUIET_TRIES = 60
# Not a benchmark: ~15 s on SQLite, ~25 s on PostgreSQL on a quiet machine, more than twice
# that under -n 4 on two busy cores. Past it, something hangs.
MIX_DEADLINE = 240

JOB = "id type status attempt workerId"
ENQUEUE = f"mutation($input: EnqueueJobInput!) {{ enqueueJob(input: $input) {{ created job {{ {JOB} }} }} }}"
ENQUEUE_MANY = f"""mutation($inputs: [EnqueueJobInput!]!) {{
  enqueueJobs(inputs: $inputs) {{ created job {{ {JOB} }} }} }}"""
CLAIM = f"""mutation($types: [String!], $lease: Int) {{
  claimJob(types: $types, leaseSeconds: $lease) {{ {JOB} }} }}"""
CLAIM_MANY = f"""mutation($limit: Int!, $types: [String!], $lease: Int) {{
  claimJobs(limit: $limit, types: $types, leaseSeconds: $lease) {{ {JOB} }} }}"""
HEARTBEAT = f"""mutation($id: ID!, $attempt: Int, $lease: Int) {{
  heartbeatJob(id: $id, attempt: $attempt, leaseSeconds: $lease) {{ {JOB} }} }}"""
COMPLETE = f"""mutation($id: ID!, $result: JSON, $attempt: Int) {{
  completeJob(id: $id, result: $result, attempt: $attempt) {{ {JOB} }} }}"""
COMPLETE_MANY = f"""mutation($items: [CompleteJobInput!]!) {{
  completeJobs(items: $items) {{ completed {{ {JOB} }} rejected }} }}"""
FAIL = f"""mutation($id: ID!, $error: String!, $retryable: Boolean!, $in: Int, $attempt: Int) {{
  failJob(id: $id, error: $error, retryable: $retryable, retryInSeconds: $in, attempt: $attempt) {{
    {JOB} }} }}"""
CANCEL = f"mutation($id: ID!) {{ cancelJob(id: $id) {{ {JOB} }} }}"
RETRY = f"mutation($id: ID!) {{ retryJob(id: $id) {{ {JOB} }} }}"
LIST = f"""query($status: JobStatus, $type: String, $first: Int!) {{
  jobs(status: $status, type: $type, first: $first) {{ nodes {{ {JOB} }} totalCount }} }}"""
COUNTS = "counts { pending running completed failed cancelled }"
STATS_FIELDS = f"queueStats {{ {COUNTS} byType {{ type {COUNTS} }} }}"


# --- keys and the view every key has ---------------------------------------------------------------


@dataclass(frozen=True)
class Actor:
    name: str
    key: str
    role: str  # admin, producer, worker, viewer, or hybrid (a key with both PRODUCER and WORKER)
    max_priority: str = "MEDIUM"

    @property
    def priorities(self) -> tuple[str, ...]:
        return PRIORITIES[: PRIORITIES.index(self.max_priority) + 1]


@dataclass
class Cast:
    admin: Actor
    viewer: Actor
    producers: list[Actor]
    workers: list[Actor]
    hybrid: Actor  # enqueues and claims: sees the jobs it created and those it holds or finished
    idle: list[Actor]  # keys that never do anything: their views stay empty

    @property
    def everyone(self) -> list[Actor]:
        return [self.admin, self.viewer, *self.producers, *self.workers, self.hybrid, *self.idle]

    @property
    def holders(self) -> list[Actor]:
        """The keys that claim jobs."""
        return [*self.workers, self.hybrid]


def make_cast(server: Server) -> Cast:
    def key(name: str, role: str, max_priority: str | None = None) -> Actor:
        roles = ("producer", "worker") if role == "hybrid" else (role,)
        secret = server.make_key(name, *roles, max_priority=max_priority)
        return Actor(name, secret, role, max_priority or "MEDIUM")

    me = server.gql("{ me { name } }").ok()["me"]["name"]
    return Cast(
        admin=Actor(me, server.admin_key, "admin", "CRITICAL"),
        viewer=key("viewer-1", "viewer"),
        producers=[key("producer-1", "producer", "HIGH"), key("producer-2", "producer")],
        workers=[key("worker-1", "worker"), key("worker-2", "worker")],
        hybrid=key("hybrid-1", "hybrid"),
        idle=[key("producer-idle", "producer"), key("worker-idle", "worker")],
    )


def scope_of(actor: Actor) -> tuple[str, dict[str, str]]:
    """The ground-truth WHERE clause of a key's view (API.md section 2), and its parameters."""
    if actor.role in ("admin", "viewer"):
        return "1 = 1", {}
    if actor.role == "producer":
        return "created_by = :name", {"name": actor.name}
    if actor.role == "worker":
        return "worker_id = :name", {"name": actor.name}
    return "(created_by = :name OR worker_id = :name)", {"name": actor.name}


STATUS_FILTERS: tuple[str | None, ...] = (None, *STATUSES)
TYPE_FILTERS: tuple[str | None, ...] = (None, *JOB_TYPES, UNKNOWN_TYPE)


def view_query() -> str:
    """queueStats plus a totalCount for every (status, type) filter, in one request."""
    parts = [STATS_FIELDS]
    for si, status in enumerate(STATUS_FILTERS):
        for ti, job_type in enumerate(TYPE_FILTERS):
            args = []
            if status is not None:
                args.append(f"status: {status.upper()}")
            if job_type is not None:
                args.append(f'type: "{job_type}"')
            args.append("first: 1")
            parts.append(f"c{si}_{ti}: jobs({', '.join(args)}) {{ totalCount }}")
    return "query { " + " ".join(parts) + " }"


VIEW_QUERY = view_query()


# --- ground truth ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    rows: tuple[tuple[Any, ...], ...]  # every job's (id, type, status, created_by, worker_id, attempt)
    counts: dict[str, Counter[tuple[str, str]]]  # actor name -> (type, status) -> count


def read_truth(server: Server, actors: list[Actor]) -> Truth:
    with server.snapshot() as sql:  # one snapshot for every query below
        rows = tuple(sql("SELECT id, type, status, created_by, worker_id, attempt FROM jobs ORDER BY id"))
        counts: dict[str, Counter[tuple[str, str]]] = {}
        for actor in actors:
            where, params = scope_of(actor)
            grouped = sql(
                f"SELECT type, status, count(*) FROM jobs WHERE {where} GROUP BY type, status", **params
            )
            counts[actor.name] = Counter({(t, s): n for t, s, n in grouped})
    return Truth(rows, counts)


@dataclass(frozen=True)
class ApiViews:
    views: dict[str, dict[str, Any]]  # actor name -> the data of VIEW_QUERY
    gauges: list[tuple[dict[str, str], float]]  # every queuelog_jobs sample


def read_api(server: Server, client: httpx.Client, actors: list[Actor], where: str) -> ApiViews:
    views = {}
    for actor in actors:
        response = client.post(
            server.graphql_url,
            json={"query": VIEW_QUERY},
            headers={"Authorization": f"Bearer {actor.key}"},
        )
        body = response.json()
        assert response.status_code == 200 and not body.get("errors"), (
            f"{actor.name}: {response.status_code} {body}\n{where}"
        )
        views[actor.name] = body["data"]
    response = client.get(f"{server.url}/metrics")
    assert response.status_code == 200, f"/metrics: {response.status_code} {response.text[:500]}\n{where}"
    gauges = [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "queuelog_jobs"
    ]
    return ApiViews(views, gauges)


def status_counts(counter: Counter[tuple[str, str]], job_type: str | None = None) -> dict[str, int]:
    return {
        status: sum(n for (t, s), n in counter.items() if s == status and job_type in (None, t))
        for status in STATUSES
    }


def mismatches(
    truth: Truth, api: ApiViews, actors: list[Actor], admin: Actor, types_used: set[str]
) -> list[str]:
    """Every way the API's counts differ from the table's, as readable lines."""
    problems = []
    odd = sorted({row[2] for row in truth.rows} - set(STATUSES))
    if odd:
        problems.append(f"jobs.status holds values other than the lowercase names: {odd}")
    for actor in actors:
        counter = truth.counts[actor.name]
        data = api.views[actor.name]
        who = f"{actor.role} {actor.name!r}"
        stats = data["queueStats"]
        expected_counts = status_counts(counter)
        if stats["counts"] != expected_counts:
            problems.append(f"{who}: queueStats.counts {stats['counts']} != table {expected_counts}")
        by_type = [(entry["type"], entry["counts"]) for entry in stats["byType"]]
        seen_types = [t for t, _ in by_type]
        if len(seen_types) != len(set(seen_types)):
            problems.append(f"{who}: byType lists a type twice: {seen_types}")
        with_jobs = {t for (t, _s) in counter}
        zero = dict.fromkeys(STATUSES, 0)
        for job_type, counts in by_type:
            if job_type in with_jobs:
                expected = status_counts(counter, job_type)
                if counts != expected:
                    problems.append(f"{who}: byType[{job_type!r}] {counts} != table {expected}")
            elif counts != zero:
                problems.append(f"{who}: byType[{job_type!r}] {counts}, but the table has no such job")
            elif job_type not in types_used:
                problems.append(f"{who}: byType lists {job_type!r} (all zero), a type never enqueued")
        for job_type in sorted(with_jobs - set(seen_types)):
            problems.append(
                f"{who}: byType leaves out {job_type!r}, table {status_counts(counter, job_type)}"
            )
        for si, status in enumerate(STATUS_FILTERS):
            for ti, job_type in enumerate(TYPE_FILTERS):
                got = data[f"c{si}_{ti}"]["totalCount"]
                expected_total = sum(
                    n for (t, s), n in counter.items() if status in (None, s) and job_type in (None, t)
                )
                if got != expected_total:
                    problems.append(
                        f"{who}: jobs(status: {status}, type: {job_type}).totalCount {got} != table "
                        f"{expected_total}"
                    )
    everything = status_counts(truth.counts[admin.name])
    gauge_statuses = [labels.get("status") for labels, _ in api.gauges]
    if sorted(map(str, gauge_statuses)) != sorted(STATUSES) or any(len(lab) != 1 for lab, _ in api.gauges):
        problems.append(f"/metrics queuelog_jobs samples are not one per status: {api.gauges}")
    for labels, value in api.gauges:
        status = labels.get("status")
        if status in everything and value != everything[status]:
            problems.append(
                f'/metrics queuelog_jobs{{status="{status}"}} {value} != table {everything[status]}'
            )
    return problems


# --- the random mix --------------------------------------------------------------------------------


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class Refused(Exception):
    """An answer that the operation did not allow."""


@dataclass
class Model:
    """What the client side knows; guarded by `lock` (bursts run operations in threads)."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    created: dict[str, list[str]] = field(default_factory=dict)  # producer -> ids it enqueued
    idempotency: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # input per key
    held: dict[str, dict[str, int]] = field(default_factory=dict)  # worker -> id -> attempt (long lease)
    abandoned: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (worker, attempt)
    types_used: set[str] = field(default_factory=set)
    all_ids: set[str] = field(default_factory=set)
    done: Counter[str] = field(default_factory=Counter)  # what happened, for the coverage check
    statuses_seen: set[str] = field(default_factory=set)  # statuses present at some checkpoint
    log: list[str] = field(default_factory=list)


class Mix:
    """Random operations on one server, each checked against the answers the contract allows.

    An operation whose outcome is certain (a held job with a long lease can always be completed
    by its holder) must succeed; where background work or a concurrent operation may have got
    there first, the possible refusals are accepted. Counts are never predicted here: the
    checkpoints compare them with the table.
    """

    def __init__(
        self, server: Server, cast: Cast, rng: random.Random, seed: Any, model: Model | None = None
    ) -> None:
        self.server = server
        self.cast = cast
        self.rng = rng
        self.seed = seed
        self.model = model or Model()
        self.enqueue_types: tuple[str, ...] = MIX_TYPES
        self.local = threading.local()
        self.clients: list[httpx.Client] = []
        self.step = 0

    # plumbing

    def client(self) -> httpx.Client:
        client = getattr(self.local, "client", None)
        if client is None:
            client = http_client(60)
            self.local.client = client
            with self.model.lock:
                self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()

    @property
    def in_burst(self) -> bool:
        return getattr(self.local, "in_burst", False)

    def note(self, text: str) -> None:
        with self.model.lock:
            self.model.log.append(f"#{self.step} {text[:400]}")

    def where(self) -> str:
        tail = "\n  ".join(self.model.log[-25:])
        rerun = f" (rerun: QUEUELOG_COUNTERS_SEED={self.seed})" if isinstance(self.seed, int) else ""
        return f"seed={self.seed}{rerun}; last operations:\n  {tail}"

    def call(
        self, actor: Actor, query: str, variables: dict[str, Any], allowed: tuple[str, ...] = ()
    ) -> dict[str, Any] | None:
        """The data, or None for a refusal with one of the `allowed` codes; anything else fails."""
        response = self.client().post(
            self.server.graphql_url,
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {actor.key}"},
        )
        try:
            body = response.json()
        except ValueError:
            body = {"raw": response.text[:500]}
        errors = body.get("errors") or []
        name = query.split("{", 2)[1].split("(")[0].strip()
        if response.status_code == 200 and not errors:
            self.note(f"{actor.name} {name} {variables} -> ok")
            return body["data"]
        codes = {e.get("extensions", {}).get("code") for e in errors}
        self.note(f"{actor.name} {name} {variables} -> {sorted(map(str, codes))}")
        if response.status_code == 200 and errors and codes <= set(allowed):
            return None
        raise Refused(
            f"{actor.name} {name}({variables}) answered {response.status_code} {body}; "
            f"allowed: {allowed or 'success only'}\n{self.where()}"
        )

    def refuse(self, actor: Actor, query: str, variables: dict[str, Any], codes: tuple[str, ...]) -> None:
        """An operation that must be refused (with one of `codes`) and change nothing."""
        data = self.call(actor, query, variables, codes)
        assert data is None, f"{actor.name} was not refused: {data}\n{self.where()}"

    def lenient(self, strict: tuple[str, ...], relaxed: tuple[str, ...]) -> tuple[str, ...]:
        """The refusals allowed: `strict` alone, or `relaxed` too while other operations run."""
        return (*strict, *relaxed) if self.in_burst else strict

    # enqueue

    def new_input(self, actor: Actor) -> dict[str, Any]:
        rng = self.rng
        item: dict[str, Any] = {
            "type": rng.choice(self.enqueue_types),
            "payload": {
                "n": rng.randrange(10**6),
                "tags": rng.sample(["a", "b", "c", "d"], rng.randint(0, 2)),
            },
            "priority": rng.choice(actor.priorities),
            "maxRetries": rng.choice([0, 1, 1, 2, 3]),
        }
        roll = rng.random()
        if roll < 0.15:
            item["runAt"] = iso(datetime.now(UTC) + timedelta(seconds=rng.uniform(0.2, 1.5)))
        elif roll < 0.19:
            item["runAt"] = iso(datetime.now(UTC) + timedelta(hours=1))
        return item

    def next_input(self, actor: Actor) -> tuple[dict[str, Any], str]:
        """A fresh input, or a replay (same or conflicting) of an idempotency key used before.

        Keys come from a small shared pool, so producers reuse each other's keys too (a
        different job each) and the same producer replays its own.
        """
        rng = self.rng
        if rng.random() < 0.5:
            return self.new_input(actor), "plain"
        key = f"k{rng.randrange(40)}"
        with self.model.lock:
            earlier = self.model.idempotency.get((actor.name, key))
        if earlier is None:
            return {**self.new_input(actor), "idempotencyKey": key}, "fresh-key"
        if rng.random() < 0.7:
            return dict(earlier), "replay"
        changed = dict(earlier)
        changed["payload"] = {**earlier["payload"], "n": earlier["payload"]["n"] + 1}
        return changed, "conflicting-replay"

    def record_enqueued(self, actor: Actor, item: dict[str, Any], outcome: dict[str, Any]) -> None:
        job = outcome["job"]
        with self.model.lock:
            self.model.all_ids.add(job["id"])
            if outcome["created"]:
                self.model.created.setdefault(actor.name, []).append(job["id"])
                self.model.types_used.add(job["type"])
                self.model.done["created"] += 1
                if item.get("idempotencyKey"):
                    self.model.idempotency[(actor.name, item["idempotencyKey"])] = item
            else:
                self.model.done["replayed"] += 1

    def enqueuer(self) -> Actor:
        return self.rng.choice(
            [*self.cast.producers, *self.cast.producers, self.cast.hybrid, self.cast.admin]
        )

    def op_enqueue_one(self) -> None:
        actor = self.enqueuer()
        item, kind = self.next_input(actor)
        if actor.role == "producer" and self.rng.random() < 0.06:
            item = {**item, "priority": "CRITICAL", "idempotencyKey": None}
            self.refuse(actor, ENQUEUE, {"input": item}, ("FORBIDDEN",))
            self.model.done["forbidden"] += 1
            return
        allowed: tuple[str, ...] = ()
        if kind == "conflicting-replay":
            allowed = ("CONFLICT",)  # unless the first job was pruned meanwhile: then a new job
        elif kind in ("replay", "fresh-key"):
            allowed = self.lenient((), ("CONFLICT",))  # another thread may have used the key
        data = self.call(actor, ENQUEUE, {"input": item}, allowed)
        if data is None:
            self.model.done["conflict"] += 1
            return
        outcome = data["enqueueJob"]
        if kind == "plain":
            assert outcome["created"], f"a job without idempotency key was not created\n{self.where()}"
        self.record_enqueued(actor, item, outcome)

    def op_enqueue_batch(self) -> None:
        actor = self.enqueuer()
        items = []
        kinds = set()
        in_batch: dict[str, dict[str, Any]] = {}
        for _ in range(self.rng.randint(1, 8)):
            item, kind = self.next_input(actor)
            key = item.get("idempotencyKey")
            if key is not None and in_batch.setdefault(key, item) != item:
                kind = "conflicting-replay"  # the same new key twice in one batch, other input
            items.append(item)
            kinds.add(kind)
        if self.rng.random() < 0.3 and any(i.get("idempotencyKey") for i in items):
            items.append(
                dict(self.rng.choice([i for i in items if i.get("idempotencyKey")]))
            )  # in-batch replay
        roll = self.rng.random()
        if roll < 0.08:  # all or nothing: one bad input refuses the batch, and counts nothing
            items.insert(self.rng.randrange(len(items) + 1), {"type": UNKNOWN_TYPE})
            self.refuse(actor, ENQUEUE_MANY, {"inputs": items}, ("BAD_USER_INPUT", "CONFLICT"))
            self.model.done["refused batch"] += 1
            return
        if roll < 0.16 and actor.role == "producer":
            items.insert(self.rng.randrange(len(items) + 1), {"type": MIX_TYPES[0], "priority": "CRITICAL"})
            self.refuse(actor, ENQUEUE_MANY, {"inputs": items}, ("FORBIDDEN", "CONFLICT"))
            self.model.done["refused batch"] += 1
            return
        allowed: tuple[str, ...] = ("CONFLICT",) if "conflicting-replay" in kinds else ()
        allowed = self.lenient(allowed, ("CONFLICT",))
        data = self.call(actor, ENQUEUE_MANY, {"inputs": items}, allowed)
        if data is None:
            self.model.done["conflict"] += 1
            return
        outcomes = data["enqueueJobs"]
        assert len(outcomes) == len(items), f"{len(items)} inputs, {len(outcomes)} answers\n{self.where()}"
        for item, outcome in zip(items, outcomes, strict=True):
            self.record_enqueued(actor, item, outcome)
        self.model.done["batch"] += 1

    # the worker's side

    def claim_types(self) -> list[str] | None:
        if self.rng.random() < 0.35:
            pool = [*self.enqueue_types, "never"]
            return self.rng.sample(pool, self.rng.randint(1, 2))
        return None

    def op_claim(self) -> None:
        worker = self.rng.choice(self.cast.holders)
        abandon = self.rng.random() < 0.2  # the server's 1 s lease, left to expire
        variables: dict[str, Any] = {"types": self.claim_types(), "lease": None if abandon else HELD_LEASE}
        if self.rng.random() < 0.5:
            data = self.call(worker, CLAIM, variables)
            assert data is not None
            claimed = [data["claimJob"]] if data["claimJob"] else []
        else:
            data = self.call(worker, CLAIM_MANY, {**variables, "limit": self.rng.randint(1, 6)})
            assert data is not None
            claimed = data["claimJobs"]
        with self.model.lock:
            for job in claimed:
                assert job["status"] == "RUNNING" and job["workerId"] == worker.name, (job, self.where())
                if abandon:
                    self.model.abandoned[job["id"]] = (worker.name, job["attempt"])
                else:
                    self.model.held.setdefault(worker.name, {})[job["id"]] = job["attempt"]
            self.model.done["claimed"] += len(claimed)

    def take_held(self, worker: Actor | None = None) -> tuple[Actor, str, int] | None:
        """Remove one held job from the model (so no other thread reports on it)."""
        with self.model.lock:
            workers = [worker] if worker else [w for w in self.cast.holders if self.model.held.get(w.name)]
            workers = [w for w in workers if self.model.held.get(w.name)]
            if not workers:
                return None
            holder = self.rng.choice(workers)
            job_id = self.rng.choice(sorted(self.model.held[holder.name]))
            return holder, job_id, self.model.held[holder.name].pop(job_id)

    def give_back(self, worker: Actor, job_id: str, attempt: int) -> None:
        with self.model.lock:
            self.model.held.setdefault(worker.name, {})[job_id] = attempt

    def take_abandoned(self) -> tuple[Actor, str, int] | None:
        with self.model.lock:
            if not self.model.abandoned:
                return None
            job_id = self.rng.choice(sorted(self.model.abandoned))
            name, attempt = self.model.abandoned.pop(job_id)
        return next(w for w in self.cast.holders if w.name == name), job_id, attempt

    def other_worker(self, worker: Actor) -> Actor:
        return self.rng.choice([w for w in self.cast.holders if w != worker])

    def op_complete_one(self) -> None:
        roll = self.rng.random()
        if roll < 0.12:  # late: the lease may have expired (the job failed for good under this
            # worker: CONFLICT; back to PENDING, taken by another or pruned: NOT_FOUND), or not yet (done)
            late = self.take_abandoned()
            if late is not None:
                worker, job_id, attempt = late
                variables = {"id": job_id, "attempt": attempt}
                data = self.call(worker, COMPLETE, variables, ("CONFLICT", "NOT_FOUND"))
                self.model.done["late complete ok" if data else "late complete refused"] += 1
            return
        taken = self.take_held()
        if taken is None:
            return
        worker, job_id, attempt = taken
        if roll < 0.2:  # the wrong holder or the wrong attempt: nothing changes
            if self.rng.random() < 0.5:
                self.refuse(self.other_worker(worker), COMPLETE, {"id": job_id}, ("NOT_FOUND",))
            else:
                self.refuse(worker, COMPLETE, {"id": job_id, "attempt": attempt + 1}, ("CONFLICT",))
            self.give_back(worker, job_id, attempt)
            self.model.done["complete refused"] += 1
            return
        variables = {"id": job_id, "result": {"ok": self.rng.random() < 0.5}}
        if self.rng.random() < 0.5:
            variables["attempt"] = attempt
        data = self.call(worker, COMPLETE, variables)
        assert data is not None and data["completeJob"]["status"] == "COMPLETED", (data, self.where())
        self.model.done["completed"] += 1

    def op_complete_batch(self) -> None:
        worker = self.rng.choice(self.cast.holders)
        good = []
        for _ in range(self.rng.randint(1, 6)):
            taken = self.take_held(worker)
            if taken is None:
                break
            good.append(taken)
        items: list[dict[str, Any]] = [
            {"id": job_id, "attempt": attempt} if self.rng.random() < 0.5 else {"id": job_id}
            for _, job_id, attempt in good
        ]
        must_reject: list[tuple[Actor, str, int]] = []
        if self.rng.random() < 0.5:  # a job the other worker holds
            theirs = self.take_held(self.other_worker(worker))
            if theirs is not None:
                items.append({"id": theirs[1]})
                must_reject.append(theirs)
        if good and self.rng.random() < 0.3:  # a wrong attempt
            _, job_id, attempt = good.pop()
            items[len(good)] = {"id": job_id, "attempt": attempt + 1}
            must_reject.append((worker, job_id, attempt))
        if items and self.rng.random() < 0.3:  # an item repeated
            items.append(dict(self.rng.choice(items)))
        if not items:
            return
        self.rng.shuffle(items)
        data = self.call(worker, COMPLETE_MANY, {"items": items})
        assert data is not None
        completed = {job["id"] for job in data["completeJobs"]["completed"]}
        rejected = set(data["completeJobs"]["rejected"])
        for _, job_id, _ in good:
            assert job_id in completed, f"held job {job_id} not completed: {data}\n{self.where()}"
        for owner, job_id, attempt in must_reject:
            assert job_id in rejected and job_id not in completed, (job_id, data, self.where())
            self.give_back(owner, job_id, attempt)
        self.model.done["completed"] += len(completed)
        self.model.done["rejected"] += len(rejected)

    def op_fail(self) -> None:
        taken = self.take_held()
        if taken is None:
            return
        worker, job_id, attempt = taken
        if self.rng.random() < 0.08:
            wrong = {"id": job_id, "error": "x", "retryable": True, "attempt": attempt + 1}
            self.refuse(worker, FAIL, wrong, ("CONFLICT",))
            self.give_back(worker, job_id, attempt)
            return
        retryable = self.rng.random() < 0.7
        variables: dict[str, Any] = {
            "id": job_id,
            "error": f"boom token=secret{self.rng.randrange(100)}",
            "retryable": retryable,
            "attempt": attempt,
        }
        if retryable and self.rng.random() < 0.3:
            variables["in"] = self.rng.choice([0, 1])
        data = self.call(worker, FAIL, variables)
        assert data is not None
        status = data["failJob"]["status"]
        # CANCELLED: a cancelJob of the mix reached the job while it ran (a cancel request)
        assert status in ("PENDING", "FAILED", "CANCELLED"), (data, self.where())
        self.model.done[
            {"PENDING": "retried", "FAILED": "failed"}.get(status, "cancelled while running")
        ] += 1
        if retryable and status == "FAILED":
            self.model.done["retries exhausted"] += 1

    def op_heartbeat(self) -> None:
        if self.rng.random() < 0.4:  # rescue an abandoned job if its lease has not expired yet
            late = self.take_abandoned()
            if late is None:
                return
            worker, job_id, attempt = late
            variables = {"id": job_id, "attempt": attempt, "lease": HELD_LEASE}
            # Too late: its lease expired (failed for good: CONFLICT; retried: NOT_FOUND), or it
            # then failed for good and was pruned (NOT_FOUND).
            data = self.call(worker, HEARTBEAT, variables, ("CONFLICT", "NOT_FOUND"))
            if data is not None:
                self.give_back(worker, job_id, attempt)
            self.model.done["rescued" if data else "rescue too late"] += 1
            return
        taken = self.take_held()
        if taken is None:
            return
        worker, job_id, attempt = taken
        data = self.call(worker, HEARTBEAT, {"id": job_id, "attempt": attempt, "lease": HELD_LEASE})
        assert data is not None and data["heartbeatJob"]["status"] == "RUNNING", (data, self.where())
        self.give_back(worker, job_id, attempt)
        self.model.done["heartbeat"] += 1

    # admin and producers on finished or waiting jobs

    def listed(self, actor: Actor, status: str, first: int = 20) -> list[dict[str, Any]]:
        data = self.call(actor, LIST, {"status": status, "type": None, "first": first})
        assert data is not None
        return data["jobs"]["nodes"]

    def op_cancel(self) -> None:
        roll = self.rng.random()
        if roll < 0.35:  # the admin cancels a PENDING job it can see
            pending = self.listed(self.cast.admin, "PENDING")
            if pending:
                job = self.rng.choice(pending)
                data = self.call(self.cast.admin, CANCEL, {"id": job["id"]}, self.lenient((), ("CONFLICT",)))
                self.model.done["cancelled" if data else "cancel refused"] += 1
            return
        producer = self.rng.choice(self.cast.producers)
        if roll < 0.45:  # someone else's job does not exist for a producer
            other = self.rng.choice([p for p in [*self.cast.producers, self.cast.hybrid] if p != producer])
            with self.model.lock:
                ids = list(self.model.created.get(other.name, []))
            if ids:
                self.refuse(producer, CANCEL, {"id": self.rng.choice(ids)}, ("NOT_FOUND",))
            return
        if roll < 0.5:  # a role that may never cancel
            with self.model.lock:
                ids = sorted(self.model.all_ids)
            if ids:
                worker = self.rng.choice(self.cast.workers)
                self.refuse(worker, CANCEL, {"id": self.rng.choice(ids)}, ("FORBIDDEN",))
            return
        producer = self.rng.choice([*self.cast.producers, self.cast.hybrid])
        with self.model.lock:
            ids = list(self.model.created.get(producer.name, []))
        if ids:  # its own job: cancelled if still PENDING, else CONFLICT; NOT_FOUND once pruned
            data = self.call(producer, CANCEL, {"id": self.rng.choice(ids)}, ("CONFLICT", "NOT_FOUND"))
            self.model.done["cancelled" if data else "cancel refused"] += 1

    def op_retry(self) -> None:
        admin = self.cast.admin
        if self.rng.random() < 0.75:
            finished = self.listed(admin, self.rng.choice(["FAILED", "CANCELLED"]), 10)
            if finished:
                job = self.rng.choice(finished)
                # NOT_FOUND: pruned between the list and the retry.
                data = self.call(admin, RETRY, {"id": job["id"]}, self.lenient(("NOT_FOUND",), ("CONFLICT",)))
                self.model.done["admin retried" if data else "retry refused"] += 1
            return
        with self.model.lock:
            ids = sorted(self.model.all_ids)
        if ids:
            data = self.call(admin, RETRY, {"id": self.rng.choice(ids)}, ("CONFLICT", "NOT_FOUND"))
            self.model.done["admin retried" if data else "retry refused"] += 1

    def op_pause(self) -> None:
        """Let leases expire, delayed jobs become due and the pruner run."""
        pause = self.rng.uniform(0.3, 1.3)
        self.note(f"pause {pause:.2f} s")
        time.sleep(pause)

    def op_same_key_race(self) -> None:
        """One producer sends one new idempotency key from several threads: one job."""
        producer = self.rng.choice([*self.cast.producers, self.cast.hybrid])
        key = f"race-{self.step}-{self.rng.randrange(10**9)}"
        item = {**self.new_input(producer), "idempotencyKey": key}
        with ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(lambda _: self.race_enqueue(producer, item), range(4)))
        ids = {o["job"]["id"] for o in outcomes}
        assert len(ids) == 1 and sum(o["created"] for o in outcomes) == 1, (outcomes, self.where())
        for outcome in outcomes:
            self.record_enqueued(producer, item, outcome)

    def race_enqueue(self, producer: Actor, item: dict[str, Any]) -> dict[str, Any]:
        data = self.call(producer, ENQUEUE, {"input": item})
        assert data is not None
        return data["enqueueJob"]

    def op_burst(self) -> None:
        """Operations from several threads at once (all joined before the next step)."""
        count = self.rng.randint(10, 24)
        names = [self.pick(concurrent=True) for _ in range(count)]
        seeds = [self.rng.randrange(2**32) for _ in range(count)]
        self.note(f"burst of {count}: {names}")

        def run(name: str, seed: int) -> None:
            self.local.in_burst = True
            self.rng_for_thread(seed)
            getattr(self, f"op_{name}")()

        with ThreadPoolExecutor(4) as pool:
            for future in [pool.submit(run, n, s) for n, s in zip(names, seeds, strict=True)]:
                future.result()
        self.model.done["bursts"] += 1

    def rng_for_thread(self, seed: int) -> None:
        self.local.rng = random.Random(seed)

    @property
    def rng(self) -> random.Random:
        return getattr(self.local, "rng", None) or self._rng

    @rng.setter
    def rng(self, value: random.Random) -> None:
        self._rng = value

    WEIGHTS: dict[str, int] = {
        "enqueue_one": 18,
        "enqueue_batch": 8,
        "claim": 18,
        "complete_one": 10,
        "complete_batch": 6,
        "fail": 10,
        "heartbeat": 4,
        "cancel": 7,
        "retry": 5,
        "pause": 3,
        "same_key_race": 1,
        "burst": 2,
    }
    SEQUENTIAL_ONLY = ("pause", "burst", "same_key_race")

    def pick(self, concurrent: bool = False) -> str:
        names = [n for n in self.WEIGHTS if not (concurrent and n in self.SEQUENTIAL_ONLY)]
        return self.rng.choices(names, [self.WEIGHTS[n] for n in names])[0]

    def run_op(self, name: str) -> None:
        self.step += 1
        getattr(self, f"op_{name}")()

    # checkpoints

    def checkpoint(self, label: str) -> Truth:
        """Compare every key's view with the table while nothing changes it."""
        actors = self.cast.everyone
        client = self.client()
        for _ in range(QUIET_TRIES):
            before = read_truth(self.server, actors)
            api = read_api(self.server, client, actors, self.where())
            after = read_truth(self.server, actors)
            if before.rows == after.rows:
                break
            time.sleep(0.05)  # lease expiry or pruning ran meanwhile: take it again
        else:
            pytest.fail(f"checkpoint {label}: the table never stayed still\n{self.where()}")
        with self.model.lock:
            types_used = set(self.model.types_used)
        problems = mismatches(before, api, actors, self.cast.admin, types_used)
        assert not problems, (
            f"checkpoint {label}: counts differ from the jobs table ({len(before.rows)} rows):\n  "
            + "\n  ".join(problems[:40])
            + f"\n{self.where()}"
        )
        self.note_expired(before)
        totals = status_counts(before.counts[self.cast.admin.name])
        with self.model.lock:
            self.model.statuses_seen.update(s for s, n in totals.items() if n)
        self.note(f"checkpoint {label}: {totals}")
        self.model.done["checkpoints"] += 1
        return before

    def a_status_never_checked_is_present(self) -> bool:
        """Whether the table holds a job in a status no checkpoint has counted yet. Finished jobs
        live RETENTION_SECONDS: on a busy machine the fixed checkpoints can all come after the
        pruner, so one is taken as soon as such a status shows up."""
        with self.model.lock:
            missing = [s for s in STATUSES if s not in self.model.statuses_seen]
        if not missing:
            return False
        present = self.server.sql("SELECT DISTINCT status FROM jobs")
        return any(status in missing for (status,) in present)

    def note_expired(self, truth: Truth) -> None:
        """Abandoned jobs that moved on by themselves: their lease expired (coverage only)."""
        by_id = {str(row[0]): row for row in truth.rows}
        with self.model.lock:
            for job_id, (_worker, attempt) in list(self.model.abandoned.items()):
                row = by_id.get(job_id)
                if row is None or row[2] != "running" or row[5] != attempt:
                    del self.model.abandoned[job_id]
                    self.model.done["lease expired"] += 1


# --- the tests -------------------------------------------------------------------------------------


def the_seed() -> int:
    raw = os.environ.get("QUEUELOG_COUNTERS_SEED", "").strip()
    return int(raw) if raw else DEFAULT_SEED


def start_counting_server(start_server: Callable[..., Server]) -> Server:
    return start_server(env=SERVER_ENV, **SERVER_SETTINGS)


def drain_early_type(mix: Mix, deadline_seconds: float = 60) -> None:
    """Finish every job of the "early" type (no new ones come), then wait for the pruner."""
    admin = mix.cast.admin
    worker = mix.cast.workers[0]
    deadline = time.monotonic() + deadline_seconds
    while True:
        data = mix.call(admin, LIST, {"status": None, "type": "early", "first": 100})
        assert data is not None
        live = [j for j in data["jobs"]["nodes"] if j["status"] in ("PENDING", "RUNNING")]
        if not live:
            break
        assert time.monotonic() < deadline, f"early jobs still live: {live}\n{mix.where()}"
        for job in live:
            if job["status"] == "PENDING":
                mix.call(admin, CANCEL, {"id": job["id"]}, ("CONFLICT",))
        for held_worker in mix.cast.holders:
            with mix.model.lock:
                mine = dict(mix.model.held.get(held_worker.name, {}))
                mix.model.held[held_worker.name] = {}
            items = [{"id": job_id, "attempt": attempt} for job_id, attempt in mine.items()]
            for start in range(0, len(items), 100):
                mix.call(held_worker, COMPLETE_MANY, {"items": items[start : start + 100]})
        claimed = mix.call(worker, CLAIM_MANY, {"limit": 100, "types": ["early"], "lease": HELD_LEASE})
        assert claimed is not None
        for job in claimed["claimJobs"]:
            mix.call(worker, COMPLETE, {"id": job["id"]})
        time.sleep(0.2)  # an abandoned early job: its lease expires, then it is cancelled above
    while True:
        ((left,),) = mix.server.sql("SELECT count(*) FROM jobs WHERE type = 'early'")
        if left == 0:
            break
        assert time.monotonic() < deadline, f"{left} early jobs were never pruned\n{mix.where()}"
        time.sleep(0.2)


def test_counts_equal_a_full_count_through_a_random_mix(start_server: Callable[..., Server]) -> None:
    seed = the_seed()
    server = start_counting_server(start_server)
    mix = Mix(server, make_cast(server), random.Random(seed), seed)
    started = time.monotonic()
    try:
        mix.checkpoint("empty")
        mix.enqueue_types = (*MIX_TYPES, "early")
        for step in range(1, MIX_OPERATIONS + 1):
            if step == MIX_OPERATIONS // 3:
                mix.enqueue_types = MIX_TYPES  # no new "early" jobs: drained and pruned at the end
            mix.run_op(mix.pick())
            if step in CHECKPOINTS or mix.a_status_never_checked_is_present():
                mix.checkpoint(f"after {step} operations")
        drain_early_type(mix)
        final = mix.checkpoint("after every early job was pruned")
    finally:
        mix.close()
    elapsed = time.monotonic() - started

    # The mix did what it claims to exercise (else the equality above proves little).
    done = mix.model.done
    ever = {row[0] for row in final.rows}
    pruned = {job_id for job_id in mix.model.all_ids if int(job_id) not in ever}
    coverage = {
        "jobs created": done["created"] >= 100,
        "idempotent replays": done["replayed"] >= 5,
        "conflicting replays refused": done["conflict"] >= 1,
        "batches refused whole": done["refused batch"] >= 1,
        "completions": done["completed"] >= 30,
        "completeJobs rejections": done["rejected"] >= 3,
        "retryable failures back to PENDING": done["retried"] >= 5,
        "jobs FAILED for good": done["failed"] >= 5,
        "retries exhausted": done["retries exhausted"] >= 1,
        "cancellations": done["cancelled"] >= 3,
        "admin retries": done["admin retried"] >= 2,
        "expired leases": done["lease expired"] >= 2,
        "concurrent bursts": done["bursts"] >= 1,
        "pruned jobs": len(pruned) >= 20,
        "every status at some checkpoint": mix.model.statuses_seen == set(STATUSES),
    }
    missing = [what for what, ok in coverage.items() if not ok]
    assert not missing, f"the mix never exercised: {missing}; done={dict(done)}\n{mix.where()}"
    print(f"the mix took {elapsed:.1f} s")
    assert elapsed < MIX_DEADLINE, f"the mix took {elapsed:.1f} s (seed={seed})"


def test_a_fresh_server_counts_nothing(start_server: Callable[..., Server]) -> None:
    server = start_counting_server(start_server)
    mix = Mix(server, make_cast(server), random.Random(0), "none")
    try:
        truth = mix.checkpoint("fresh")
    finally:
        mix.close()
    assert truth.rows == ()


def test_counts_of_jobs_stored_before_the_upgrade(
    start_server: Callable[..., Server], databases: Databases
) -> None:
    """A database written by the first revision, with jobs in every state, then `serve` (which
    migrates it to head): the counts start right and stay right as those jobs move on. Some
    leases have expired and some finished jobs are past retention, so the server's first
    rounds of lease expiry and pruning act on rows it never counted itself."""
    seed = the_seed()
    rng = random.Random(seed)
    url = databases.fresh(migrated=False)
    rows, long_leased = old_rows(rng)
    engine = create_sync_engine(url)
    try:
        config = alembic_config()
        first = [rev.revision for rev in ScriptDirectory.from_config(config).walk_revisions("base", "heads")][
            -1
        ]
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, first)
        insert = (
            f"INSERT INTO jobs ({', '.join(OLD_COLUMNS)}) VALUES ({', '.join(f':{c}' for c in OLD_COLUMNS)})"
        )
        with engine.begin() as connection:
            connection.execute(text(insert), [stored_row(databases.backend, row) for row in rows])
            if databases.backend == "postgresql":  # ids were given: move the sequence past them
                connection.execute(text("SELECT setval('jobs_id_seq', (SELECT max(id) FROM jobs))"))
    finally:
        engine.dispose()

    server = start_server(database_url=url, env=SERVER_ENV, **SERVER_SETTINGS)
    cast = make_cast(server)
    mix = Mix(server, cast, rng, seed)
    mix.model.types_used.update(row[0] for row in rows)
    try:
        truth = mix.checkpoint("after the upgrade")
        assert len(truth.rows) > 10, f"too few old jobs left to count: {len(truth.rows)}"
        for row in truth.rows:  # the old jobs that are held with a long lease can be reported on
            job_id, _type, status, _by, worker_id, attempt = row
            holder = next((h for h in cast.holders if h.name == worker_id), None)
            if status == "running" and holder is not None and str(job_id) in long_leased:
                mix.model.held.setdefault(holder.name, {})[str(job_id)] = attempt
        mix.enqueue_types = MIX_TYPES
        for _ in range(80):
            mix.run_op(mix.pick())
        mix.checkpoint("after operations on the old jobs")
    finally:
        mix.close()


OLD_COLUMNS = (
    "type", "payload", "priority", "status", "retry_count", "max_retries", "attempt", "idempotency_key",
    "claimed_at", "worker_id", "lease_expires_at", "run_at", "finished_at", "result", "error",
    "created_by", "created_at", "updated_at", "id",
)  # fmt: skip


OLD_TIMES = ("claimed_at", "lease_expires_at", "run_at", "finished_at", "created_at", "updated_at")


def stored_row(backend: str, row: tuple[Any, ...]) -> dict[str, Any]:
    """One row of `old_rows` as statement parameters, its times as `backend` stores them."""
    values = dict(zip(OLD_COLUMNS, row, strict=True))
    for column in OLD_TIMES:
        if values[column] is not None:
            values[column] = timestamp_value(backend, from_micros(values[column]))
    return values


def old_rows(rng: random.Random, count: int = 80) -> tuple[list[tuple[Any, ...]], set[str]]:
    """Jobs as the first revision stores them (times in microseconds, statuses lowercase),
    and the ids of the RUNNING ones whose lease lasts another hour."""
    now = int(time.time() * 1_000_000)
    hour = 3600 * 1_000_000
    creators = ["producer-1", "producer-2", "hybrid-1", "admin", "producer-gone"]
    holders = ["worker-1", "worker-2", "hybrid-1", "worker-gone"]
    rows = []
    long_leased = set()
    for job_id in range(1, count + 1):
        status = rng.choice(STATUSES)
        worker = lease = claimed = finished = None
        attempt = 0
        if status in ("running", "completed", "failed"):
            worker, attempt, claimed = rng.choice(holders), rng.randint(1, 3), now - hour
        if status == "running":
            long_lease = rng.random() < 0.6
            lease = now + hour if long_lease else now - hour  # the other leases have expired
            if long_lease:
                long_leased.add(str(job_id))
        if status in ("completed", "failed", "cancelled"):
            finished = now + hour if rng.random() < 0.6 else now - hour  # the others are due for pruning
        job_type = rng.choice([*MIX_TYPES, "early"])
        rows.append(
            (
                job_type, '{"old":true}', rng.choice([0, 10, 20, 30]), status, 0, rng.randint(0, 2), attempt,
                None, claimed, worker, lease, now - hour, finished, None, None,
                rng.choice(creators), now - 2 * hour + job_id, now - hour, job_id,
            )
        )  # fmt: skip
    return rows, long_leased


# --- property-based: hypothesis chooses the operations ---------------------------------------------


@pytest.fixture(scope="module")
def counting_server(
    backend: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Cast, Model]]:
    """One server for every hypothesis example, with one client-side model across them."""
    with serving(backend, tmp_path_factory, env=SERVER_ENV, **SERVER_SETTINGS) as server:
        yield server, make_cast(server), Model()


OPERATION_NAMES = sorted(Mix.WEIGHTS)

if HAVE_HYPOTHESIS:

    @settings(
        max_examples=6,
        deadline=None,
        database=None,  # no .hypothesis/ folder in the work tree
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
    )
    @given(
        operations=st.lists(
            st.sampled_from([n for n in OPERATION_NAMES if n not in ("pause", "burst")]),
            min_size=1,
            max_size=25,
        ),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_counts_equal_a_full_count_after_any_sequence(
        counting_server: tuple[Server, Cast, Model], operations: list[str], seed: int
    ) -> None:
        # The examples share the server (the table only grows more varied, and the ground truth
        # is read from it each time) and the client-side model (jobs held since an earlier
        # example can still be reported on; types once enqueued may show up with zero counts).
        server, cast, model = counting_server
        label = f"{seed} (hypothesis; operations {operations})"
        mix = Mix(server, cast, random.Random(seed), label, model)
        try:
            for name in operations:
                mix.run_op(name)
            mix.checkpoint("end of example")
        finally:
            mix.close()

else:

    def test_counts_equal_a_full_count_after_any_sequence() -> None:
        pytest.skip("hypothesis is not installed: pip install hypothesis (the [test] extra should have it)")
