"""What every resolver gets as `info.context`: the caller and the services."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection

from queuelog.auth import Principal
from queuelog.errors import Unauthenticated
from queuelog.events import EventBus
from queuelog.queue import JobQueue

KEY_RECHECK_SECONDS = 5.0


@dataclass
class RequestContext:
    queue: JobQueue
    bus: EventBus
    request: HTTPConnection
    response: Any = None
    # Set once per request (HTTP) or connection (websocket, at connection_init).
    principal: Principal | None = None
    # Filled in by Strawberry's graphql-transport-ws handler from connection_init.
    connection_params: dict[str, Any] = field(default_factory=dict)
    # Websockets: looks the connection's key up again (None once it has been revoked).
    reauthenticate: Callable[[], Awaitable[Principal | None]] | None = None
    _checked_at: float = 0.0

    async def ensure_key_still_valid(self) -> None:
        """For long-lived subscriptions: a key revoked after connection_init stops receiving
        events within KEY_RECHECK_SECONDS (checked when an event is about to be sent)."""
        if self.reauthenticate is None:
            return
        now = time.monotonic()
        if now - self._checked_at < KEY_RECHECK_SECONDS:
            return
        if await self.reauthenticate() is None:
            raise Unauthenticated("the API key of this connection has been revoked")
        self._checked_at = now

    async def client_gone(self) -> None:
        """Completes when the HTTP client disconnects (for long-polling claims)."""
        receive = self.request.receive  # type: ignore[attr-defined]
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
