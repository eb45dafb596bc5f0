"""`EnqueueRequest`: one job to enqueue, the one list of an enqueue's fields.

The SDK builds one from its arguments and sends it (`as_input`); the server reads one from
the GraphQL input (schema/inputs.py EnqueueJobInput, which names the same fields), validates
it into a model.NewJob (a subclass, as storage writes it), and compares a replayed one with
the job it made (storage/operations.py). A new enqueue field is a field here and in
EnqueueJobInput; tests/api/test_enqueue_request.py keeps the SDK's arguments in step.

Two fields hold other values on each side, hence the type parameters: `priority` is the name
the SDK sends (`EnqueueRequest[str, str]`) and a model.Priority on the server
(model.JobRequest), and `depends_on` holds job ids as the API spells them, or parsed.
Standard library only: the SDK imports this module without importing the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from datetime import datetime
from typing import Any, Generic, TypeVar

PriorityT = TypeVar("PriorityT")
IdT = TypeVar("IdT")


@dataclass(frozen=True, slots=True)
class EnqueueRequest(Generic[PriorityT, IdT]):
    type: str
    payload: Any  # a JSON object; the server refuses anything else
    priority: PriorityT
    max_retries: int
    idempotency_key: str | None = None
    run_at: datetime | None = None  # not claimed before then
    concurrency_key: str | None = None
    timeout_seconds: int | None = None
    depends_on: Sequence[IdT] = ()  # jobs it waits for
    depends_on_items: Sequence[int] = ()  # earlier items of the same call it waits for
    expires_at: datetime | None = None  # still PENDING then: CANCELLED, never claimed

    def as_input(self) -> dict[str, Any]:
        """The request as EnqueueJobInput's JSON: camelCase names, times in ISO 8601; the
        fields that have a default only when given (not None, not empty), so that a request
        without them also suits a server that does not know them."""
        item: dict[str, Any] = {}
        for name, key, optional in _INPUT_NAMES:
            value = getattr(self, name)
            if optional and (value is None or (isinstance(value, tuple | list) and not value)):
                continue
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, tuple):
                value = list(value)
            item[key] = value
        return item


def _input_name(field_name: str) -> str:
    head, *rest = field_name.split("_")
    return head + "".join(part.title() for part in rest)


REQUEST_FIELDS = tuple(f.name for f in fields(EnqueueRequest))
_INPUT_NAMES = tuple((f.name, _input_name(f.name), f.default is not MISSING) for f in fields(EnqueueRequest))
# What a replay with the same idempotency key may change without being refused: the key
# itself, and when the job runs. Every other field must match the job it made (API.md,
# Idempotency); the dependencies are compared as sets.
REPLAY_MAY_CHANGE = frozenset({"idempotency_key", "run_at"})
