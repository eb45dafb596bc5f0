"""A key revoked while a server is looking it up stops working on every server at once.

A server caches the keys it has looked up, and drops its cache whenever the keys generation
moves. A lookup that read the key just before a revoke, and whose answer came back after
another request on the same server had already seen the revoke's generation, was cached as
current: the revoked key then kept working on that server, over HTTP and websockets, until
the next key change anywhere. A websocket opened with such a lookup also counted its key as
checked at the revoke's generation, so nothing checked it again.

The interleaving is forced, on PostgreSQL (where each server reads on connections of its
own): server one reaches the database through a proxy that holds back PostgreSQL's answer
to the lookup of one key. While it is held, the test revokes the key and sends server one
another request (which reads the new generation); then it lets the answer through.

Proven, over HTTP and over a websocket's connection_init, in several rounds: once the revoke
has committed and the held answer is through, the key gets 401 over HTTP and 4403 on a new
websocket on both servers, and a subscription opened with it (on either server) ends with
4403.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import Databases, Server
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from queuelog.app import KEY_WATCH_SECONDS
from queuelog.auth import hash_key
from queuelog.keys import revoke_key

PROTOCOL = "graphql-transport-ws"
ME = "query { me { name } }"
JOB_EVENTS = "subscription { jobEvents { kind } }"
WAIT = 30.0  # bounds every wait; a healthy run needs a fraction of it
ROUNDS = 2
_names = itertools.count(1)


class HeldAnswers:
    """A TCP proxy between one server and PostgreSQL, on a thread of its own. `hold(marker)`:
    the next statement whose bytes contain `marker` runs, but PostgreSQL's answer to it waits
    here until `release()`; `wait_held()` returns once an answer is being held."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._marker: bytes | None = None
        self._held = threading.Event()
        self._released = asyncio.Event()
        self._streams: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="held-answers", daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.listen_port: int = self._server.sockets[0].getsockname()[1]

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=WAIT)

    def hold(self, marker: bytes) -> None:
        def arm() -> None:
            self._held.clear()
            self._released.clear()
            self._marker = marker

        self._loop.call_soon_threadsafe(arm)

    def wait_held(self) -> bool:
        return self._held.wait(WAIT)

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._released.set)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        pair = {writer, upstream_writer}
        self._streams |= pair
        holding = [False]

        async def to_database() -> None:
            seen = b""
            while data := await reader.read(65536):
                seen = seen[-200:] + data  # a marker split across two reads is still found
                if self._marker is not None and self._marker in seen:
                    self._marker, holding[0] = None, True
                upstream_writer.write(data)
                await upstream_writer.drain()

        async def to_server() -> None:
            while data := await upstream_reader.read(65536):
                if holding[0]:
                    self._held.set()
                    await self._released.wait()
                    holding[0] = False
                writer.write(data)
                await writer.drain()

        async def pipe(run: Callable[[], Any]) -> None:
            try:
                await run()
            except (OSError, RuntimeError):
                pass
            finally:
                for stream in pair:
                    stream.transport.abort()

        await asyncio.gather(pipe(to_database), pipe(to_server))
        self._streams -= pair

    async def _shutdown(self) -> None:
        self._released.set()
        for stream in list(self._streams):
            stream.transport.abort()
        self._server.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=5)

    def close(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


@pytest.fixture
def servers(
    databases: Databases, start_server: Callable[..., Server]
) -> Iterator[tuple[Server, Server, HeldAnswers]]:
    """Server one through the proxy, server two straight to the same database."""
    url = databases.fresh()
    parts = urlsplit(url)
    held = HeldAnswers(parts.hostname or "127.0.0.1", parts.port or 5432)
    started: list[Server] = []
    try:
        started.append(two := start_server(database_url=url))
        through_proxy = parts._replace(netloc=f"{parts.username}@127.0.0.1:{held.listen_port}").geturl()
        started.append(one := start_server(database_url=through_proxy, admin_key=two.admin_key))
        yield one, two, held
    finally:
        held.release()
        for server in started:
            server.stop()  # before the proxy they reach the database through
        held.close()


async def me(http: httpx.AsyncClient, server: Server, key: str) -> int:
    response = await http.post(
        server.graphql_url, json={"query": ME}, headers={"Authorization": f"Bearer {key}"}
    )
    return response.status_code


@asynccontextmanager
async def websocket(server: Server) -> AsyncIterator[ClientConnection]:
    async with connect(
        server.ws_url,
        subprotocols=[PROTOCOL],  # type: ignore[list-item]
        proxy=None,
        open_timeout=WAIT,
        close_timeout=2,
    ) as ws:
        yield ws


async def init(ws: ClientConnection, key: str) -> dict[str, Any] | int:
    """connection_init with `key`: the server's first message, or its close code."""
    await ws.send(json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {key}"}}))
    try:
        return json.loads(await asyncio.wait_for(ws.recv(), WAIT))  # type: ignore[no-any-return]
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else -1


def acknowledged(first: dict[str, Any] | int) -> bool:
    return isinstance(first, dict) and first.get("type") == "connection_ack"


async def subscribe(ws: ClientConnection, op_id: str) -> None:
    await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": {"query": JOB_EVENTS}}))


async def ends_with(ws: ClientConnection) -> int:
    """Read until the server closes the socket: its close code (messages in between are
    events or the operations' errors)."""
    try:
        async with asyncio.timeout(WAIT):
            while True:
                await ws.recv()
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else -1
    except TimeoutError:
        return 0  # still open


async def refused_everywhere(http: httpx.AsyncClient, servers: tuple[Server, Server], key: str) -> None:
    for server in servers:
        assert await me(http, server, key) == 401, f"{server.url} still takes the revoked key over HTTP"
        async with websocket(server) as ws:
            assert await init(ws, key) == 4403, f"{server.url} still takes the revoked key on a websocket"


async def revoke_while_held(
    http: httpx.AsyncClient, one: Server, two: Server, held: HeldAnswers, name: str, linger: float = 0.0
) -> None:
    """The lookup's answer is held: revoke the key, let server one read the new generation
    (another request), wait `linger` seconds, then let the answer through."""
    assert await asyncio.to_thread(held.wait_held), "the key's lookup never reached PostgreSQL"
    await asyncio.to_thread(revoke_key, two.engine, name)
    assert await me(http, one, one.admin_key) == 200
    await asyncio.sleep(linger)
    held.release()


async def round_over_http(http: httpx.AsyncClient, one: Server, two: Server, held: HeldAnswers) -> None:
    name = f"revoked-{next(_names)}"
    key = await asyncio.to_thread(two.make_key, name, "viewer")
    async with websocket(two) as watching:
        assert acknowledged(await init(watching, key))
        await subscribe(watching, "watch")
        held.hold(hash_key(key).encode())
        asking = asyncio.create_task(me(http, one, key))
        await revoke_while_held(http, one, two, held, name)
        await asyncio.wait_for(asking, WAIT)  # it began before the revoke: either answer is right
        await refused_everywhere(http, (one, two), key)
        assert await ends_with(watching) == 4403


async def round_over_a_websocket(
    http: httpx.AsyncClient, one: Server, two: Server, held: HeldAnswers
) -> None:
    name = f"revoked-{next(_names)}"
    key = await asyncio.to_thread(two.make_key, name, "viewer")
    async with websocket(one) as ws:
        held.hold(hash_key(key).encode())
        opening = asyncio.create_task(init(ws, key))
        # Long enough for the server's watch over open sockets to see the new generation
        # while this socket is still being opened: the socket must be checked all the same.
        await revoke_while_held(http, one, two, held, name, linger=2 * KEY_WATCH_SECONDS)
        first = await asyncio.wait_for(opening, WAIT)
        if acknowledged(first):  # it began before the revoke: it may be taken, then closed
            assert await ends_with(ws) == 4403, "a socket opened as its key was revoked stays open"
        else:
            assert first == 4403, first
        await refused_everywhere(http, (one, two), key)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_key_revoked_while_a_server_looks_it_up_stops_working_on_every_server(
    servers: tuple[Server, Server, HeldAnswers],
) -> None:
    one, two, held = servers

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=WAIT) as http:
            for _ in range(ROUNDS):
                await round_over_http(http, one, two, held)
                await round_over_a_websocket(http, one, two, held)

    asyncio.run(scenario())
