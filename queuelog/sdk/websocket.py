"""Subscriptions over the server's websocket (`graphql-transport-ws`, API.md section 1), through
the `websockets` library: one connection per subscription, authenticated in `connection_init`.

`GraphQLSocket.open(...)` connects and initialises; `subscribe` starts the one operation,
`synchronise` waits until the server has read everything sent so far (a `ping` answered),
and `next` returns each `next` message's data, None once the server completes the operation.
A connection that cannot be opened, or that closes under a reader, is `WebSocketUnavailable`
(a ServerUnreachable); the server's refusals are the SDK's usual errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.typing import Subprotocol

from queuelog.errors import Unauthenticated
from queuelog.sdk.wire import Data, ServerError, ServerUnreachable, decode_json, encode_json, raise_for_errors

PROTOCOL = Subprotocol("graphql-transport-ws")
OPEN_TIMEOUT = 10.0
CLOSE_TIMEOUT = 2.0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a job's payload and result, with room to spare
KEY_REFUSED = 4403  # the server's close code for a key it refuses in connection_init
OPERATION = "1"  # the one operation of a connection


class WebSocketUnavailable(ServerUnreachable):
    """The websocket could not be opened (no server, a proxy that does not pass websockets), or
    it closed before the subscription ended."""


def websocket_url(graphql_url: str) -> str:
    """The /graphql URL with the websocket scheme (http -> ws, https -> wss)."""
    if graphql_url.startswith("https://"):
        return "wss://" + graphql_url.removeprefix("https://")
    if graphql_url.startswith("http://"):
        return "ws://" + graphql_url.removeprefix("http://")
    return graphql_url


class GraphQLSocket:
    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._pending: list[dict[str, Any]] = []  # read while waiting for a pong

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, graphql_url: str, key: str, *, open_timeout: float = OPEN_TIMEOUT
    ) -> AsyncIterator[GraphQLSocket]:
        """A connection, initialised with `key`. WebSocketUnavailable when it cannot be had;
        Unauthenticated when the server refuses the key."""
        try:
            async with asyncio.timeout(open_timeout):
                ws = await connect(
                    websocket_url(graphql_url),
                    subprotocols=[PROTOCOL],
                    open_timeout=open_timeout,
                    close_timeout=CLOSE_TIMEOUT,
                    max_size=MAX_MESSAGE_BYTES,
                )
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise WebSocketUnavailable(f"websocket not opened: {type(exc).__name__}: {exc}") from exc
        try:
            socket = cls(ws)
            async with asyncio.timeout(open_timeout):
                await socket._send({"type": "connection_init", "payload": {"authorization": f"Bearer {key}"}})
                ack = await socket._receive()
            if ack.get("type") != "connection_ack":
                raise WebSocketUnavailable(f"websocket not acknowledged: {ack.get('type')!r}")
            yield socket
        except TimeoutError as exc:
            raise WebSocketUnavailable("websocket not acknowledged in time") from exc
        finally:
            with contextlib.suppress(Exception):
                await ws.close()

    async def subscribe(self, query: str, variables: dict[str, Any] | None = None) -> None:
        await self._send(
            {"id": OPERATION, "type": "subscribe", "payload": {"query": query, "variables": variables or {}}}
        )

    async def synchronise(self) -> None:
        """Return once the server has answered a `ping` sent after everything sent so far."""
        await self._send({"type": "ping"})
        while True:
            message = await self._receive()
            if message.get("type") == "pong":
                return
            self._pending.append(message)

    async def next(self) -> Data | None:
        """The data of the operation's next result; None once the server completes it. Raises
        the server's error (NotFound, BadInput, ...) for an `error` message, or a result's
        errors, by execute's rule (the withheld `error` fields are the data's `refused`)."""
        while True:
            message = self._pending.pop(0) if self._pending else await self._receive()
            kind = message.get("type")
            if kind == "ping":
                await self._send({"type": "pong"})
            elif message.get("id") != OPERATION:
                continue
            elif kind == "next":
                payload = message.get("payload") or {}
                refused = raise_for_errors(payload.get("errors") or [])
                data = payload.get("data")
                if data is None:
                    raise ServerError("a subscription result without data")
                return Data(cast(dict[str, Any], data), refused)
            elif kind == "error":
                errors = message.get("payload")
                raise_for_errors(errors if isinstance(errors, list) else [])
                raise ServerError("the subscription was refused")
            elif kind == "complete":
                return None

    async def _send(self, message: dict[str, Any]) -> None:
        try:
            await self._ws.send(encode_json(message).decode())
        except ConnectionClosed as exc:
            raise self._closed(exc) from exc

    async def _receive(self) -> dict[str, Any]:
        try:
            raw = await self._ws.recv()
        except ConnectionClosed as exc:
            raise self._closed(exc) from exc
        try:
            message = decode_json(raw if isinstance(raw, bytes) else raw.encode())
        except ValueError as exc:
            raise WebSocketUnavailable("a websocket message that is not JSON") from exc
        if not isinstance(message, dict):
            raise WebSocketUnavailable("a websocket message that is not a JSON object")
        return message

    @staticmethod
    def _closed(exc: ConnectionClosed) -> Exception:
        if exc.rcvd is not None and exc.rcvd.code == KEY_REFUSED:
            return Unauthenticated(f"the server refused the key on its websocket ({exc.rcvd.reason})")
        return WebSocketUnavailable(f"websocket closed: {exc}")
