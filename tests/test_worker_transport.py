"""`PlainHTTP`, the raw HTTP/1.1 path of the worker's `claimJobs` and `completeJobs`,
against scripted servers on loopback that answer the ways a real one (or a proxy) may.

Proven: bodies with Content-Length, chunked bodies and bodies ended by closing the
connection are read whole; kept-alive connections are reused, and one the server closed
while idle is replaced (the request is sent again only when not a byte of an answer came
back, and only on a reused connection); a request cancelled while waiting closes its
connection, which is how the server learns that a long-polling claim was abandoned;
AsyncClient maps failures to `ServerUnreachable`, and falls back to httpx for URLs the raw
path does not serve (https, an injected transport).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from conftest import free_port

from queuelog.client import AsyncClient, PlainHTTP, ServerUnreachable

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return await reader.readexactly(length)


def answer(body: bytes, *extra: bytes) -> bytes:
    headers = b"".join(h + b"\r\n" for h in extra)
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), headers, body)


def run(
    script: Script, client: Callable[[int, dict[str, Any]], Awaitable[Any]]
) -> tuple[Any, dict[str, Any]]:
    """Serve `script(reader, writer, connection_number)` on a free port while `client` runs."""
    seen: dict[str, Any] = {"connections": 0, "eof": asyncio.Event()}

    async def main() -> Any:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen["connections"] += 1
            try:
                await script(reader, writer, seen["connections"])
            except (asyncio.IncompleteReadError, ConnectionError):
                seen["eof"].set()
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await asyncio.wait_for(client(port, seen), 10)

    return asyncio.run(main()), seen


def test_bodies_by_length_chunks_and_close_and_connections_kept_alive() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            body = await read_request(reader)
            if body == b"length":
                writer.write(answer(b'{"a":1}'))
            elif body == b"chunked":
                writer.write(
                    b"HTTP/1.1 100 Continue\r\n\r\n"
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b'3\r\n{"a\r\n4;ext=1\r\n":2}\r\n0\r\nX-Trailer: 1\r\n\r\n'
                )
            else:
                writer.write(b'HTTP/1.1 201 Created\r\nConnection: close\r\n\r\n{"a":3}')
                await writer.drain()
                return

    async def client(port: int, seen: dict[str, Any]) -> list[tuple[int, bytes]]:
        http = PlainHTTP(f"http://127.0.0.1:{port}/graphql", {"Authorization": "Bearer k"})
        try:
            return [await http.post(body, 5) for body in (b"length", b"chunked", b"length", b"close")]
        finally:
            http.close()

    results, seen = run(script, client)
    assert results == [(200, b'{"a":1}'), (200, b'{"a":2}'), (200, b'{"a":1}'), (201, b'{"a":3}')]
    assert seen["connections"] == 1


def test_a_connection_closed_while_idle_is_replaced() -> None:
    received: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        received.append(await read_request(reader))
        if n == 1:
            writer.write(answer(b"{}"))  # kept alive, as far as the client knows...
            await writer.drain()
            received.append(await read_request(reader))  # ...but the next request is not answered
            return
        writer.write(answer(b'{"again":true}'))
        await writer.drain()

    async def client(port: int, seen: dict[str, Any]) -> list[tuple[int, bytes]]:
        http = PlainHTTP(f"http://127.0.0.1:{port}/graphql", {})
        try:
            return [await http.post(b"first", 5), await http.post(b"second", 5)]
        finally:
            http.close()

    results, seen = run(script, client)
    assert results == [(200, b"{}"), (200, b'{"again":true}')]
    assert received == [b"first", b"second", b"second"]
    assert seen["connections"] == 2


def test_no_second_try_on_a_new_connection_or_after_part_of_an_answer() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        body = await read_request(reader)
        if body == b"partial":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{")
            await writer.drain()

    async def client(port: int, seen: dict[str, Any]) -> list[str]:
        http = PlainHTTP(f"http://127.0.0.1:{port}/", {})
        errors = []
        for body in (b"nothing", b"partial"):
            with pytest.raises(EOFError) as caught:
                await http.post(body, 5)
            errors.append(type(caught.value).__name__)
        return errors

    errors, seen = run(script, client)
    assert errors == ["_Unanswered", "IncompleteReadError"]
    assert seen["connections"] == 2


def test_a_cancelled_request_closes_its_connection() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        await reader.readexactly(1)  # the "long poll": wait until the client goes away

    async def client(port: int, seen: dict[str, Any]) -> bool:
        http = PlainHTTP(f"http://127.0.0.1:{port}/", {})
        waiting = asyncio.create_task(http.post(b"claim", 30))
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.wait_for(seen["eof"].wait(), 5)
        return True

    closed, _ = run(script, client)
    assert closed


def test_async_client_maps_failures_and_falls_back_to_httpx() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nnope!")
        await writer.drain()

    async def client(port: int, seen: dict[str, Any]) -> str:
        queue = AsyncClient(f"http://127.0.0.1:{port}", "key", timeout=5)
        try:
            with pytest.raises(ServerUnreachable) as caught:
                await queue.claim_data(1, "id", types=["t"])
            return str(caught.value)
        finally:
            await queue.aclose()

    message, _ = run(script, client)
    assert "not a GraphQL response" in message
    assert not PlainHTTP.usable("https://example.com/graphql")
    assert not PlainHTTP.usable("http://user:secret@example.com/graphql")
    assert AsyncClient("https://example.com", "k")._plain is None
    mocked = AsyncClient(
        "http://example.com", "k", transport=httpx.MockTransport(lambda r: httpx.Response(200))
    )
    assert mocked._plain is None


def test_a_server_that_is_not_there_is_unreachable() -> None:
    async def attempt() -> None:
        queue = AsyncClient(f"http://127.0.0.1:{free_port()}", "key", timeout=5)
        try:
            with pytest.raises(ServerUnreachable):
                await queue.complete_encoded([b'{"id":"1","attempt":1,"result":null}'])
        finally:
            await queue.aclose()

    asyncio.run(attempt())
