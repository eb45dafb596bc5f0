"""`PlainHTTP`, the aiohttp path of the worker's `claimJobs` and `completeJobs`, against
scripted servers on loopback that answer the ways a real one (or a proxy) may.

Proven: bodies with Content-Length, chunked bodies and bodies ended by closing the
connection are read whole, after any interim 1xx answer; kept-alive connections are reused,
except after `Connection: close`, after an HTTP/1.0 answer without `Connection: keep-alive`,
and once idle for PLAIN_HTTP_REUSE_SECONDS. Each way a kept-alive connection can die, on
asyncio's loop and on uvloop's (the worker's): closed or reset by the server while idle, it
is noticed before reuse and even a request that may not be repeated goes out once, on a new
connection, and succeeds; closed or reset after the server read the request, with no
answer or part of one (head, body, chunk, an interim 1xx), an `idempotent` request is sent
once more on a new connection and any other one (a claim) raises, sent once; no answer at
all times out, sent once, and the connection is closed. AsyncClient resends a completion
that way and never a claim. A request cancelled while waiting closes its connection, which
is how the server learns that a long-polling claim was abandoned; every failure is a
`ServerUnreachable`, and AsyncClient falls back to httpx for URLs the aiohttp path does not serve
(https, credentials, an injected transport).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from conftest import free_port

import queuelog.sdk.plain_http
from queuelog.client import AsyncClient, ServerUnreachable
from queuelog.sdk.plain_http import PlainHTTP

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
LOOPS = ["asyncio", "uvloop"]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return await reader.readexactly(length)


def answer(body: bytes, *extra: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    headers = b"".join(h + b"\r\n" for h in extra)
    return b"%s 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (version, len(body), headers, body)


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST instead of a FIN (SO_LINGER 0)."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def end(writer: asyncio.StreamWriter, how: str) -> None:
    if how == "reset":
        reset(writer)
    else:
        writer.close()


def run(
    script: Script, client: Callable[[int, dict[str, Any]], Awaitable[Any]], loop: str = "asyncio"
) -> tuple[Any, dict[str, Any]]:
    """Serve `script(reader, writer, connection_number)` on a free port while `client` runs.

    `seen` counts connections and has two events: "eof", set when a script ended on the
    client going away, and "done", when a script returned.
    """
    seen: dict[str, Any] = {"connections": 0}

    async def main() -> Any:
        seen["eof"] = asyncio.Event()
        seen["done"] = asyncio.Event()  # a connection's script returned

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen["connections"] += 1
            try:
                await script(reader, writer, seen["connections"])
            except (asyncio.IncompleteReadError, ConnectionError):
                seen["eof"].set()
            finally:
                writer.close()
                seen["done"].set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await asyncio.wait_for(client(port, seen), 10)

    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main()), seen
    return asyncio.run(main()), seen


async def wait_done(seen: dict[str, Any]) -> None:
    """Until the first connection's script has returned, and the client's loop has seen it."""
    await asyncio.wait_for(seen["done"].wait(), 5)
    await asyncio.sleep(0.1)


def test_bodies_by_length_chunks_and_close_and_connections_kept_alive() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            body = await read_request(reader)
            if body == b"length":
                writer.write(answer(b'{"a":1}'))
            elif body == b"chunked":
                writer.write(
                    b"HTTP/1.1 100 Continue\r\n\r\n"
                    b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
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
            await http.aclose()

    results, seen = run(script, client)
    assert results == [(200, b'{"a":1}'), (200, b'{"a":2}'), (200, b'{"a":1}'), (201, b'{"a":3}')]
    assert seen["connections"] == 1


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_connection_the_server_ended_while_idle_is_not_reused(loop: str, how: str) -> None:
    """Noticed when it is taken from the pool: the request goes out once, on a new connection
    (not idempotent: a resend could not have saved it)."""
    requests: list[tuple[int, bytes]] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        requests.append((n, await read_request(reader)))
        writer.write(answer(b'{"n":%d}' % n))  # kept alive, as far as the client knows...
        await writer.drain()
        if n == 1:
            end(writer, how)  # ...but ended at once

    async def client(port: int, seen: dict[str, Any]) -> list[tuple[int, bytes]]:
        http = PlainHTTP(f"http://127.0.0.1:{port}/graphql", {})
        try:
            first = await http.post(b"first", 5)
            await wait_done(seen)
            return [first, await http.post(b"second", 5)]
        finally:
            await http.aclose()

    results, seen = run(script, client, loop)
    assert results == [(200, b'{"n":1}'), (200, b'{"n":2}')]
    assert requests == [(1, b"first"), (2, b"second")]
    assert seen["connections"] == 2


PARTIAL_ANSWERS = {
    "none": b"",
    "head": b"HTTP/1.1 200 OK\r\nContent-Len",
    "body": b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{",
    "chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{",
    "interim": b"HTTP/1.1 100 Continue\r\n\r\n",
}


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("part", list(PARTIAL_ANSWERS))
@pytest.mark.parametrize("idempotent", [True, False])
def test_a_kept_alive_connection_that_ends_before_the_answer_is_whole(
    loop: str, how: str, part: str, idempotent: bool
) -> None:
    """The server reads the request, writes no answer or part of one, and closes or resets
    the connection: an idempotent request is sent once more, on a new connection; any other
    (a claim) raises ServerUnreachable, and has been sent once."""
    requests: list[tuple[int, bytes]] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        requests.append((n, await read_request(reader)))
        writer.write(answer(b'{"n":%d}' % n))
        await writer.drain()
        if n == 1:
            requests.append((n, await read_request(reader)))
            writer.write(PARTIAL_ANSWERS[part])
            await writer.drain()
            await asyncio.sleep(0.1)  # the part arrives on its own, before the end
            end(writer, how)

    async def client(port: int, seen: dict[str, Any]) -> list[Any]:
        http = PlainHTTP(f"http://127.0.0.1:{port}/graphql", {})
        try:
            outcomes: list[Any] = [await http.post(b"first", 5)]
            try:
                outcomes.append(await http.post(b"second", 5, idempotent=idempotent))
            except ServerUnreachable:
                outcomes.append("failed")
            return outcomes
        finally:
            await http.aclose()

    outcomes, seen = run(script, client, loop)
    if idempotent:
        assert outcomes == [(200, b'{"n":1}'), (200, b'{"n":2}')]
        assert requests == [(1, b"first"), (1, b"second"), (2, b"second")]
        assert seen["connections"] == 2
    else:
        assert outcomes == [(200, b'{"n":1}'), "failed"]
        assert requests == [(1, b"first"), (1, b"second")]
        assert seen["connections"] == 1


@pytest.mark.parametrize("loop", LOOPS)
def test_no_answer_at_all_times_out_sent_once_and_closes_the_connection(loop: str) -> None:
    requests: list[tuple[int, bytes]] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        requests.append((n, await read_request(reader)))
        writer.write(answer(b"{}"))
        requests.append((n, await read_request(reader)))
        await reader.readexactly(1)  # silent until the client goes away

    async def client(port: int, seen: dict[str, Any]) -> bool:
        http = PlainHTTP(f"http://127.0.0.1:{port}/graphql", {})
        await http.post(b"first", 5)
        with pytest.raises(ServerUnreachable, match="TimeoutError"):
            await http.post(b"second", 0.3, idempotent=True)
        await asyncio.wait_for(seen["eof"].wait(), 5)
        return True

    closed, seen = run(script, client, loop)
    assert closed
    assert requests == [(1, b"first"), (1, b"second")]
    assert seen["connections"] == 1


@pytest.mark.parametrize(
    ("version", "headers", "reused"),
    [
        (b"HTTP/1.1", (), True),
        (b"HTTP/1.1", (b"Connection: close",), False),
        (b"HTTP/1.1", (b"Connection: Keep-Alive, Close",), False),
        (b"HTTP/1.0", (), False),
        (b"HTTP/1.0", (b"Connection: keep-alive",), True),
    ],
)
def test_reused_only_when_the_answer_keeps_the_connection_alive(
    version: bytes, headers: tuple[bytes, ...], reused: bool
) -> None:
    """The server keeps every connection open: whether the client comes back on it is
    the client's reading of the answer's version and Connection header."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(b'{"n":%d}' % n, *headers, version=version))
            await writer.drain()

    async def client(port: int, seen: dict[str, Any]) -> list[tuple[int, bytes]]:
        http = PlainHTTP(f"http://127.0.0.1:{port}/graphql", {})
        try:
            first = await http.post(b"first", 5)
            second = await http.post(b"second", 5)
            if not reused:  # the first connection was closed by the client
                await asyncio.wait_for(seen["eof"].wait(), 5)
            return [first, second]
        finally:
            await http.aclose()

    results, seen = run(script, client)
    assert results == [(200, b'{"n":1}'), (200, b'{"n":%d}' % (1 if reused else 2))]
    assert seen["connections"] == (1 if reused else 2)


def test_a_connection_idle_too_long_is_closed_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past PLAIN_HTTP_REUSE_SECONDS the server may be closing it (uvicorn after 5 s)."""
    monkeypatch.setattr(queuelog.sdk.plain_http, "PLAIN_HTTP_REUSE_SECONDS", 0.2)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(b'{"n":%d}' % n))
            await writer.drain()

    async def client(port: int, seen: dict[str, Any]) -> list[tuple[int, bytes]]:
        http = PlainHTTP(f"http://127.0.0.1:{port}/graphql", {})
        try:
            results = [await http.post(b"first", 5), await http.post(b"soon", 5)]
            await asyncio.sleep(0.3)
            results.append(await http.post(b"late", 5))
            await asyncio.wait_for(seen["eof"].wait(), 5)  # the stale one was closed
            return results
        finally:
            await http.aclose()

    results, seen = run(script, client)
    assert results == [(200, b'{"n":1}'), (200, b'{"n":1}'), (200, b'{"n":2}')]
    assert seen["connections"] == 2


@pytest.mark.parametrize("call", ["claim", "complete"])
def test_async_client_resends_a_completion_never_a_claim(call: str) -> None:
    """The reused connection dies as the call goes out (the server read it, and may have
    applied it): a completion is sent again, a claim raises ServerUnreachable, sent once."""
    requests: list[tuple[int, bytes]] = []
    rejected = b'{"data":{"completeJobs":{"rejected":[]}}}'

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        requests.append((n, await read_request(reader)))
        writer.write(answer(rejected))
        if n == 1:
            requests.append((n, await read_request(reader)))
            writer.close()

    async def client(port: int, seen: dict[str, Any]) -> Any:
        queue = AsyncClient(f"http://127.0.0.1:{port}", "key", timeout=5)
        try:
            await queue.complete_encoded([b'{"id":"1","attempt":1,"result":null}'])
            if call == "complete":
                return await queue.complete_encoded([b'{"id":"2","attempt":1,"result":null}'])
            with pytest.raises(ServerUnreachable):
                await queue.claim_data(5, "id", types=["t"])
            return "unreachable"
        finally:
            await queue.aclose()

    outcome, seen = run(script, client)
    calls = [(n, b"claimJobs" in body) for n, body in requests]
    if call == "complete":
        assert outcome == []
        assert calls == [(1, False), (1, False), (2, False)]
    else:
        assert outcome == "unreachable"
        assert calls == [(1, False), (1, True)]


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
