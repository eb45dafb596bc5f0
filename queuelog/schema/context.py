"""What every resolver gets as `info.context`: the caller and the services; `caller(info)` and
`queue(info)` read them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection, Request
from strawberry.dataloader import DataLoader
from strawberry.types import Info

from queuelog.auth import Principal
from queuelog.errors import Unauthenticated
from queuelog.events import EventBus
from queuelog.queue import JobQueue

# A websocket's key is checked again before every event and operation, whenever the keys
# generation has moved since the last check (reading it costs one indexed row): no delay.
KEY_RECHECK_SECONDS = 0.0


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
    # Websockets: the keys generation (principals.py) and the one last checked against.
    # `key_generation` may answer from memory (PostgreSQL: as of the last read, at most 0.5 s
    # old while a socket is open); `read_key_generation` reads the database now.
    key_generation: Callable[[], int] | None = None
    read_key_generation: Callable[[], Awaitable[int]] | None = None
    checked_generation: int | None = None
    # Set when an operation met a database outage: the HTTP answer is then 503 (as /healthz
    # answers), which clients take as "try again", not as a refusal.
    database_unavailable: bool = False
    # Per-field batches of this request's or connection's reads (`loader`).
    loaders: dict[str, DataLoader[Any, Any]] = field(default_factory=dict)

    def loader(self, name: str, load: Callable[[list[Any]], Awaitable[list[Any]]]) -> DataLoader[Any, Any]:
        """The batch of `name`: every `load(key)` of one event-loop turn goes into one call
        of `load`. Nothing is cached across batches (a websocket's connection lives long, and
        each subscription event must read the rows as they are then)."""
        loader = self.loaders.get(name)
        if loader is None:
            loader = self.loaders[name] = DataLoader(load_fn=load, cache=False)
        return loader

    async def ensure_key_still_valid(self, read_now: bool = False) -> None:
        """For websockets: a key revoked after connection_init, by any process, runs nothing
        more (`read_now` before each operation) and its subscriptions end (checked before
        each event, and by the app's watcher)."""
        if self.reauthenticate is None or self.key_generation is None:
            return
        if read_now and self.read_key_generation is not None:
            generation = await self.read_key_generation()
        else:
            generation = self.key_generation()
        if generation == self.checked_generation:
            return
        if await self.reauthenticate() is None:
            raise Unauthenticated("the API key of this connection has been revoked")
        self.checked_generation = generation

    async def client_gone(self) -> None:
        """Completes when the HTTP client disconnects (for long-polling claims)."""
        request = self.request
        assert isinstance(request, Request)  # only HTTP claims wait on it (mutations._claim)
        receive = request.receive
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return


def caller(info: Info[RequestContext, None]) -> Principal:
    principal = info.context.principal
    if principal is None:  # the HTTP layer answers 401 first; this guards other paths
        raise Unauthenticated("an API key is required")
    return principal


def queue(info: Info[RequestContext, None]) -> JobQueue:
    return info.context.queue
