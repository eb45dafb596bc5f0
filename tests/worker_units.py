"""What the worker's unit tests share: claimed jobs as the server sends them, and a client
that answers the worker's calls from the test instead of a server (its unit tests check what
a unit does with an answer; what the server answers is tested against real servers)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from queuelog.sdk.types import Job

LEASE = 300  # seconds: what the claimed jobs below were given
WAIT = 10.0  # bounds a wait for something that happens at once; never a timing assertion


def claimed(
    id: str,
    type: str = "t",
    *,
    attempt: int = 1,
    timeout: int | None = None,
    claimed_at: datetime | None = None,
    payload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job as a claim answers it (producer.CLAIM_FIELDS)."""
    at = claimed_at or datetime(2030, 1, 1, tzinfo=UTC)
    return {
        "id": id,
        "type": type,
        "payload": payload or {},
        "priority": "LOW",
        "attempt": attempt,
        "retryCount": attempt - 1,
        "maxRetries": 3,
        "concurrencyKey": None,
        "timeoutSeconds": timeout,
        "claimedAt": at.isoformat(),
        "leaseExpiresAt": (at + timedelta(seconds=LEASE)).isoformat(),
    }


def job_with_status(id: str, status: str) -> Job:
    moment = datetime(2030, 1, 1, tzinfo=UTC)
    return Job(
        id, "t", {}, "LOW", status, 0, 3, 1, None, "w", None, None, moment, None, None, None, moment, moment
    )


@dataclass
class ScriptedClient:
    """The worker's calls, answered by the test: `answers[call]` is a function of the call's
    arguments that returns the answer or raises the error; every call is noted in `calls`."""

    answers: dict[str, Callable[..., Any]] = field(default_factory=dict)
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def _answer(self, call: str, *args: Any) -> Any:
        self.calls.append((call, args))
        return self.answers[call](*args)

    def called(self, call: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.calls if name == call]

    async def complete_encoded(self, items: list[bytes]) -> list[str]:
        return self._answer("complete_encoded", items)

    async def fail(self, id: str, attempt: int, error: str, **how: Any) -> Job:
        return self._answer("fail", id, attempt, error, how)

    async def job_state(self, id: str) -> tuple[str, int] | None:
        return self._answer("job_state", id)

    async def heartbeat(self, id: str, attempt: int) -> Job:
        return self._answer("heartbeat", id, attempt)

    async def running_data(self, fields: str) -> list[dict[str, Any]]:
        return self._answer("running_data", fields)

    async def execute(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._answer("execute", query, variables)


async def until(condition: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {WAIT}s for {what}")
        await asyncio.sleep(0.005)
