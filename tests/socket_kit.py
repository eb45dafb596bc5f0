"""A graphql-transport-ws client for tests: `open_socket(server, key)` gives a `Socket`, one
acknowledged connection whose messages of other operations wait in a backlog until asked for.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from conftest import Server
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

PROTOCOL = Subprotocol("graphql-transport-ws")
WAIT = 15.0  # the longest any message is waited for when the caller names no bound


class Socket:
    """One graphql-transport-ws connection."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.backlog: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def recv(self, timeout: float) -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def init(self, key: str) -> None:
        await self.send({"type": "connection_init", "payload": {"authorization": f"Bearer {key}"}})
        ack = await self.recv(10)
        assert ack["type"] == "connection_ack", ack

    async def subscribe(self, op_id: str, query: str, variables: dict[str, Any] | None = None) -> None:
        payload = {"query": query, "variables": variables or {}}
        await self.send({"id": op_id, "type": "subscribe", "payload": payload})

    async def message_for(self, op_id: str, timeout: float = WAIT) -> dict[str, Any]:
        """The next message of operation `op_id` (those of others are kept for later)."""
        for i, message in enumerate(self.backlog):
            if message.get("id") == op_id:
                return self.backlog.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            message = await self.recv(max(0.0, deadline - time.monotonic()))
            if message.get("id") == op_id:
                return message
            self.backlog.append(message)

    async def data(self, op_id: str, timeout: float = WAIT) -> dict[str, Any]:
        message = await self.message_for(op_id, timeout)
        assert message["type"] == "next" and not message["payload"].get("errors"), message
        return message["payload"]["data"]

    async def event_of(self, op_id: str, job_id: str, timeout: float = WAIT) -> dict[str, Any]:
        """The next jobEvents event of job `job_id` (events of other jobs are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            event = (await self.data(op_id, max(0.0, deadline - time.monotonic())))["jobEvents"]
            if event["job"]["id"] == job_id:
                return event

    async def updates_until(self, op_id: str, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """jobUpdated's states up to the first for which `done` holds."""
        updates: list[dict[str, Any]] = []
        while not updates or not done(updates[-1]):
            updates.append((await self.data(op_id))["jobUpdated"])
        return updates


@asynccontextmanager
async def open_socket(server: Server, key: str) -> AsyncIterator[Socket]:
    async with connect(
        server.ws_url, subprotocols=[PROTOCOL], proxy=None, open_timeout=10, close_timeout=2
    ) as ws:
        socket = Socket(ws)
        await socket.init(key)
        yield socket
