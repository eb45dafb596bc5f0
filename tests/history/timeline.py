"""Which control values could have been in effect at a moment, from the recorded writes.

Client and database share this host's clock, but a write takes effect at some unknown
moment between its send and its answer. So for one field of one type, the value in effect
during [start, end] may be any write's value unless that write was certainly replaced before
`start`: a later write of the field (sent after this one answered) had answered by then.
The value before any write (no controls) stays possible until some write of the field has
answered. A write refused with an error changed nothing; one that got no answer may have
applied (it never answers: `NO_ANSWER`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from history.model import NO_ANSWER, Op

FIELDS = ("paused", "maxRunning", "maxRunningPerKey", "rateLimit", "timeoutSeconds")
DEFAULTS: dict[str, Any] = {name: None for name in FIELDS} | {"paused": False}
WRITES = frozenset({"pauseType", "resumeType", "setTypeControl"})


def rate_value(value: Any) -> tuple[int, int, bool] | None:
    """A rateLimit as (limit, periodSeconds, perKey): from an input, an answer or a stored row."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        limit, period, per_key = value
        return int(limit), int(period), bool(per_key)
    return int(value["limit"]), int(value["periodSeconds"]), bool(value.get("perKey", False))


def normalised(field: str, value: Any) -> Any:
    return rate_value(value) if field == "rateLimit" else value


@dataclass(frozen=True)
class Write:
    value: Any
    send: float
    recv: float  # NO_ANSWER when none came
    op: int  # the Op's seq
    replaced_by: float  # when a later write of the field had certainly answered (inf: never)


def writes_of(op: Op) -> list[tuple[str, str, Any]]:
    """(type, field, value) that a control write sets."""
    if op.kind == "pauseType":
        return [(op.variables["type"], "paused", True)]
    if op.kind == "resumeType":
        return [(op.variables["type"], "paused", False)]
    control = op.variables["input"]
    return [(control["type"], name, normalised(name, control[name])) for name in FIELDS if name in control]


class Timeline:
    def __init__(self, ops: Iterable[Op]) -> None:
        raw: dict[tuple[str, str], list[tuple[Any, float, float, int]]] = {}
        for op in ops:
            if op.kind not in WRITES or (op.recv is not None and not op.ok):
                continue
            for job_type, name, value in writes_of(op):
                raw.setdefault((job_type, name), []).append((value, op.send, op.answered_by, op.seq))
        self.writes: dict[tuple[str, str], list[Write]] = {}
        self._first_answer: dict[tuple[str, str], float] = {}
        for key, items in raw.items():
            self.writes[key] = [
                Write(value, send, recv, seq, min((r for _, s, r, _ in items if s > recv), default=NO_ANSWER))
                for value, send, recv, seq in items
            ]
            self._first_answer[key] = min(recv for _, _, recv, _ in items)

    def candidates(self, job_type: str, field: str, start: float, end: float) -> list[Any]:
        """Every value of the field that could have been in effect at some moment of [start, end]."""
        key = (job_type, field)
        found = []
        if self._first_answer.get(key, NO_ANSWER) > start:
            found.append(DEFAULTS[field])
        for write in self.writes.get(key, ()):
            if write.send <= end and write.replaced_by > start and write.value not in found:
                found.append(write.value)
        return found

    def writes_near(self, job_type: str, field: str, start: float, end: float) -> list[Write]:
        """The writes of the field that could matter to [start, end] (for reports)."""
        return [
            w for w in self.writes.get((job_type, field), ()) if w.send <= end and w.replaced_by > start - 5
        ]


def highest(values: Iterable[Any]) -> float:
    """The loosest of some limits (None: no limit)."""
    return max((float("inf") if v is None else float(v) for v in values), default=float("inf"))
