"""What every resolver gets as `info.context`: the caller and the services."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection

from queuelog.auth import Principal
from queuelog.events import EventBus
from queuelog.queue import JobQueue


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

    async def client_gone(self) -> None:
        """Completes when the HTTP client disconnects (for long-polling claims)."""
        receive = self.request.receive  # type: ignore[attr-defined]
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
