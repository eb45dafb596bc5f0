"""How a request body reaches the server: the `Transport` interface, and its httpx
implementation, which serves any URL. The worker's hot calls may take a faster one
(plain_http.PlainHTTP)."""

from __future__ import annotations

import functools
import ssl
from typing import Protocol

import httpx

from queuelog.sdk.wire import ServerUnreachable

JSON_HEADERS = {"Content-Type": "application/json"}


class Transport(Protocol):
    async def post(self, body: bytes, timeout: float, *, idempotent: bool = False) -> tuple[int, bytes]:
        """POST a JSON body; (status, body) of the answer. ServerUnreachable when there is no
        whole answer. `idempotent`: the request may be sent again if its connection dies."""
        ...

    async def aclose(self) -> None: ...


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, made once per process: loading the CA bundle costs about
    45 ms, which every new client (a test's, a short script's) paid otherwise."""
    return httpx.create_ssl_context()


class HttpxTransport:
    """Any URL (https, a proxy from the environment, credentials), through httpx; `transport`
    replaces httpx's network layer (tests). Never sends a request twice."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        timeout: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=timeout,
            transport=transport,
            verify=_tls_context(),
            limits=httpx.Limits(max_keepalive_connections=32, max_connections=64),
        )

    async def post(self, body: bytes, timeout: float, *, idempotent: bool = False) -> tuple[int, bytes]:
        try:
            response = await self._client.post(self.url, content=body, headers=JSON_HEADERS, timeout=timeout)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(f"{type(exc).__name__}: {exc}") from exc
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._client.aclose()
