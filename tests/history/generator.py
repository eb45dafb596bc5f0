"""What the random operations are made of: the job types and their controls, job inputs,
control writes. Every choice comes from a `random.Random` the caller seeded.

The types are chosen to mix what the contract's rules meet: limited types get keyed and
unkeyed jobs side by side (and claims ask for more jobs than a limit allows), a type has two
limits that writes change one at a time, dependencies point at jobs meant to fail or be
cancelled, and some jobs are meant to time out. A rate-limited type keeps its period and
its kind (type-wide or per key) and changes only its limit: how a window counts across a
change of period is left open by the contract, and the checker should not guess it.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class TypeSpec:
    name: str
    weight: int  # how often producers pick it
    keyed: bool  # whether its jobs may carry a concurrencyKey
    # the settings setTypeControl may give it: field -> values (None clears the field)
    settings: dict[str, tuple[Any, ...]]
    initial: dict[str, Any]
    pausable: bool = True


RATE_PERIOD = 2  # seconds; fixed per type, only the limit changes (see checker.rates)
KEYS = ("k0", "k1", "k2", "k3")

TYPES: tuple[TypeSpec, ...] = (
    TypeSpec(
        "capped",
        weight=5,
        keyed=True,
        settings={"maxRunning": (2, 3, 3, 4)},
        initial={"maxRunning": 3},
    ),
    TypeSpec(
        "perkey",
        weight=4,
        keyed=True,
        settings={"maxRunningPerKey": (1, 1, 2, None), "maxRunning": (3, 4, None)},
        initial={"maxRunningPerKey": 1, "maxRunning": 4},
    ),
    TypeSpec(
        "rated",
        weight=2,
        keyed=True,
        settings={"rateLimit": tuple({"limit": n, "periodSeconds": RATE_PERIOD} for n in (3, 4, 6))},
        initial={"rateLimit": {"limit": 4, "periodSeconds": RATE_PERIOD}},
    ),
    TypeSpec(
        "ratedkey",
        weight=2,
        keyed=True,
        settings={
            "rateLimit": tuple({"limit": n, "periodSeconds": RATE_PERIOD, "perKey": True} for n in (1, 2, 3))
        },
        initial={"rateLimit": {"limit": 2, "periodSeconds": RATE_PERIOD, "perKey": True}},
    ),
    TypeSpec("plain", weight=5, keyed=True, settings={}, initial={}, pausable=False),
    # The admin's own small graphs, raced against their dependencies' ends (clients.Admin).
    TypeSpec("chain", weight=0, keyed=False, settings={}, initial={}, pausable=False),
)
TYPE_NAMES = [spec.name for spec in TYPES]
WORKED = [spec.name for spec in TYPES if spec.weight]  # what workers name in their claims' types
SPECS = {spec.name: spec for spec in TYPES}
CONTROLLED = [spec.name for spec in TYPES if spec.settings or spec.pausable]

# What a worker does with a job, carried in its payload: complete it, fail it for good,
# fail it as retryable, hold it without an answer until it times out (timeoutSeconds 1), or
# snooze it (up to SNOOZES times, then complete it).
FATES = ("ok", "fail", "retry", "hang", "snooze")
FATE_WEIGHTS = (63, 10, 12, 6, 9)
SNOOZES = 2
PRIORITIES = ("LOW", "MEDIUM", "HIGH")
# Of the jobs enqueued, how many expire (expiresAt a few seconds ahead: some are claimed
# first, some expire while they wait for a dependency, a limit, a paused type, or the run time
# a snooze gave them). An expiry is at least MIN_AHEAD seconds after the request is sent, so a
# request is never refused for a time already past unless it took that long (the checker
# allows that case: rules_jobs.check_errors).
EXPIRING_SHARE = 0.15
MIN_AHEAD = 1.5


def iso(at: float) -> str:
    """A DateTime input: seconds since the epoch in ISO 8601, UTC."""
    return datetime.fromtimestamp(at, UTC).isoformat()


def seconds_of(value: str | None) -> float | None:
    """A DateTime answer as seconds since the epoch."""
    return None if value is None else datetime.fromisoformat(value).timestamp()


def expiry(rng: random.Random, after: float | None = None) -> float:
    """A short expiry: MIN_AHEAD..5 s from now, and later than `after` (a runAt) by as much."""
    base = max(time.time(), after or 0.0)
    return base + rng.uniform(MIN_AHEAD, 5.0)


class Registry:
    """Jobs the producers created: what dependencies (each producer's own jobs: it may
    depend only on jobs it can see), cancels and retries pick from."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: list[int] = []
        self._by_owner: dict[str, list[int]] = {}
        self._dependents: list[int] = []

    def add(self, owner: str, job_id: int, has_dependencies: bool) -> None:
        with self._lock:
            self._jobs.append(job_id)
            self._by_owner.setdefault(owner, []).append(job_id)
            if has_dependencies:
                self._dependents.append(job_id)

    def recent(self, rng: random.Random, count: int, owner: str | None = None, among: int = 40) -> list[int]:
        """Up to `count` distinct jobs among the `among` newest (of `owner`, when given)."""
        with self._lock:
            pool = (self._jobs if owner is None else self._by_owner.get(owner, []))[-among:]
        return rng.sample(pool, min(count, len(pool)))

    def recent_dependent(self, rng: random.Random, among: int = 30) -> int | None:
        with self._lock:
            pool = self._dependents[-among:]
        return rng.choice(pool) if pool else None


def pick_type(rng: random.Random) -> TypeSpec:
    return rng.choices(TYPES, weights=[spec.weight for spec in TYPES])[0]


def job_input(rng: random.Random, registry: Registry, owner: str, serial: str) -> dict[str, Any]:
    """One EnqueueJobInput: a random type, fate, priority and retries; a key on keyed types
    half of the time; dependencies on the owner's recent jobs a third of the time."""
    spec = pick_type(rng)
    fate = rng.choices(FATES, weights=FATE_WEIGHTS)[0]
    item: dict[str, Any] = {
        "type": spec.name,
        "payload": {"fate": fate, "serial": serial},
        "priority": rng.choice(PRIORITIES),
        "maxRetries": rng.randint(0, 2),
    }
    if spec.keyed and rng.random() < 0.5:
        item["concurrencyKey"] = rng.choice(KEYS)
    if fate == "hang":
        item["timeoutSeconds"] = 1
    if rng.random() < 0.33:
        item["dependsOn"] = [str(job_id) for job_id in registry.recent(rng, rng.randint(1, 2), owner)]
    if rng.random() < EXPIRING_SHARE:
        item["expiresAt"] = iso(expiry(rng))
    return item


def control_write(rng: random.Random, job_type: str) -> tuple[str, dict[str, Any]]:
    """One control write on `job_type`: (kind, variables) of pauseType, resumeType or
    setTypeControl (one or two of the type's settings, a clear now and then)."""
    spec = SPECS[job_type]
    if not spec.settings or rng.random() < 0.35:
        return rng.choice(("pauseType", "resumeType")), {"type": job_type}
    fields = rng.sample(sorted(spec.settings), rng.randint(1, len(spec.settings)))
    control: dict[str, Any] = {"type": job_type}
    for name in fields:
        control[name] = rng.choice(spec.settings[name])
    return "setTypeControl", {"input": control}


def cleared(job_type: str) -> dict[str, Any]:
    """setTypeControl's input that clears every limit of the type (the drain's)."""
    return {
        "input": {
            "type": job_type,
            "maxRunning": None,
            "maxRunningPerKey": None,
            "rateLimit": None,
            "timeoutSeconds": None,
        }
    }
