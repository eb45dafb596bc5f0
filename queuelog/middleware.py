"""ASGI middleware: one Host header and the allowed hosts, the request-body limit and request timing."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queuelog.metrics import OPERATION, Metrics

# Responses that are not pages (those set their own, stricter headers) say this too.
NOSNIFF_HEADER = (b"x-content-type-options", b"nosniff")


def graphql_error_body(message: str, code: str) -> bytes:
    return json.dumps({"data": None, "errors": [{"message": message, "extensions": {"code": code}}]}).encode()


async def send_json(
    send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                NOSNIFF_HEADER,
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def host_check(app: ASGIApp, hosts: Sequence[str]) -> ASGIApp:
    """`app` answering only requests and websockets with exactly one Host header (else 400,
    whatever the settings) and, when hosts are listed, one that is listed (else 400; DNS
    rebinding).

    No www redirect: an API client is never helped by one, and it would answer a host
    that is not listed.
    """
    if hosts:  # (Settings has checked the patterns)
        app = TrustedHostMiddleware(app, allowed_hosts=list(hosts), www_redirect=False)
    return OneHost(app)


class OneHost:
    """Refuse (400) a request or websocket handshake with more than one Host header.

    RFC 9112 (section 3.2) has a server answer 400 to one: the host check reads the first,
    and a proxy in front, or the app behind, may go by another. Checked in front of
    everything, with or without QUEUELOG_ALLOWED_HOSTS.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            hosts = 0
            for name, _ in scope["headers"]:
                if name == b"host":
                    hosts += 1
            if hosts > 1:
                response = PlainTextResponse("more than one Host header", status_code=400)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse bodies over `limit` bytes with 413 while reading, never buffering more.

    A body is counted as it arrives and refused as soon as it passes the limit; a declared
    Content-Length over the limit is refused without waiting for it. Before answering,
    the rest of a moderately oversized body (up to DRAIN_FACTOR times the limit) is read
    and dropped, so that a client still uploading sees the 413 rather than a connection
    reset; anything larger is cut off at once. The accepted body is handed on to the app,
    and later receive() calls (disconnect) pass through.
    """

    DRAIN_FACTOR = 4

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.drain_limit = limit * self.DRAIN_FACTOR

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            if declared.isdigit() and int(declared) <= self.drain_limit:
                await self._drain(receive, 0)
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            more = message.get("more_body", False)
            if size > self.limit:
                if more:
                    await self._drain(receive, size)
                await self._refuse(send)
                return
            chunks.append(body)
            if not more:
                break
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _drain(self, receive: Receive, size: int) -> None:
        """Read and drop the body's remainder while it stays under the drain limit."""
        while size <= self.drain_limit:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def _refuse(self, send: Send) -> None:
        body = graphql_error_body(f"request body exceeds {self.limit} bytes", "PAYLOAD_TOO_LARGE")
        await send_json(send, 413, body, [(b"connection", b"close")])


class RequestTiming:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self.known_paths = {"/graphql", "/healthz", "/metrics"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            path = scope["path"] if scope["path"] in self.known_paths else "other"
            elapsed = time.perf_counter() - started
            self.metrics.observe_request(path, scope["method"], elapsed, scope.get(OPERATION))
