"""The recorded history: what the clients did and saw, and what the database held at the end.

Times are seconds since the epoch on this host's clock (`time.time()`), which the database
shares: client send/receive times and the database's own stamps can be compared. An
operation without an answer (the connection broke) has `recv = None`: it may have applied,
at any time after it was sent.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TERMINAL = frozenset({"completed", "failed", "cancelled"})
NO_ANSWER = float("inf")  # the receive time of an operation whose answer never came


@dataclass
class Op:
    """One GraphQL operation (or one SQL read of the database) and its answer."""

    seq: int
    thread: str
    kind: str  # the root field: "enqueueJob", "claimJobs", ..., or "sql:<what>"
    server: int
    variables: dict[str, Any]
    send: float
    recv: float | None = None  # None: no answer (transport error)
    data: Any = None
    codes: list[str] = field(default_factory=list)  # extensions.code of each error
    messages: list[str] = field(default_factory=list)
    http_status: int | None = None
    phase: str = "main"

    @property
    def ok(self) -> bool:
        """Answered, without errors."""
        return self.recv is not None and not self.codes and self.http_status == 200

    @property
    def answered_by(self) -> float:
        """When the operation had certainly taken effect, if it did (inf: unknown)."""
        return NO_ANSWER if self.recv is None else self.recv


@dataclass
class EventRow:
    id: int
    job_id: int
    kind: str
    status: str  # lowercase, as stored
    at: float


@dataclass
class JobRow:
    id: int
    type: str
    status: str
    concurrency_key: str | None
    attempt: int
    retry_count: int
    max_retries: int
    waiting_for: int
    created_by: str
    worker_id: str | None
    idempotency_key: str | None
    error: str | None
    depends_on: list[int] = field(default_factory=list)
    # section 12: the expiry in effect at the end (seconds since the epoch), snoozes, progress
    expires_at: float | None = None
    snooze_count: int = 0
    progress: float | None = None


@dataclass
class ControlsRead:
    """The type_controls rows read straight from the database between `send` and `recv`
    (a type without a row: no controls). Values as the API names them."""

    send: float
    recv: float
    controls: dict[str, dict[str, Any]]
    phase: str = "main"


@dataclass
class CountsSnapshot:
    """One consistent read (one transaction) of the counters and of the jobs table."""

    at: float
    # "scope|name|type|status" -> n, from job_counts (summed over shards, zeros left out)
    counters: dict[str, int]
    # the same keys, counted from the jobs table
    table: dict[str, int]
    phase: str = "main"


@dataclass
class Subscription:
    """One `jobUpdated` operation over a websocket: the statuses it delivered, in order."""

    job_id: int
    server: int
    opened: float
    statuses: list[str] = field(default_factory=list)  # uppercase, as the API sends them
    received: list[float] = field(default_factory=list)
    # "complete" (the server ended it), "error", "closed" (the socket died), or None (still open)
    ended: str | None = None


@dataclass
class Incident:
    """Something the harness did to the deployment: a kill -9, a LISTEN connection ended."""

    what: str
    at: float
    detail: str = ""


@dataclass
class FinalState:
    jobs: list[JobRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    # API answers read once nothing moves any more: queueStats by type, typeControls running
    api_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    api_running: dict[str, int] = field(default_factory=dict)


@dataclass
class History:
    seed: int
    backend: str
    servers: int
    job_types: list[str]
    ops: list[Op] = field(default_factory=list)
    controls_reads: list[ControlsRead] = field(default_factory=list)
    counts: list[CountsSnapshot] = field(default_factory=list)
    subscriptions: list[Subscription] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    final: FinalState = field(default_factory=FinalState)
    drain_started: float | None = None  # when every control was cleared for the drain
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    def save(self, path: Path) -> Path:
        path.write_text(self.to_json())
        return path

    @classmethod
    def load(cls, path: Path) -> History:
        return cls.from_dict(json.loads(path.read_text()))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> History:
        final = raw.get("final") or {}
        return cls(
            seed=raw["seed"],
            backend=raw["backend"],
            servers=raw["servers"],
            job_types=list(raw["job_types"]),
            ops=[Op(**op) for op in raw.get("ops", [])],
            controls_reads=[ControlsRead(**r) for r in raw.get("controls_reads", [])],
            counts=[CountsSnapshot(**c) for c in raw.get("counts", [])],
            subscriptions=[Subscription(**s) for s in raw.get("subscriptions", [])],
            incidents=[Incident(**i) for i in raw.get("incidents", [])],
            final=FinalState(
                jobs=[JobRow(**j) for j in final.get("jobs", [])],
                events=[EventRow(**e) for e in final.get("events", [])],
                api_counts=final.get("api_counts", {}),
                api_running=final.get("api_running", {}),
            ),
            drain_started=raw.get("drain_started"),
            notes=list(raw.get("notes", [])),
        )
