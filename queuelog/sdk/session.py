"""`Session`: one server, one key, and the transports that carry every call to it. The
groups of calls (producer_calls.py, ...) extend it; AsyncClient is all of them."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import httpx

from queuelog.sdk.plain_http import PlainHTTP
from queuelog.sdk.transport import HttpxTransport, Transport
from queuelog.sdk.websocket import GraphQLSocket
from queuelog.sdk.wire import Data, answer_data, encode_json, graphql_url

API_KEY_VARIABLE = "QUEUELOG_API_KEY"
DEFAULT_TIMEOUT = 30.0


class MissingKey(ValueError):
    """No API key was given and QUEUELOG_API_KEY is not set (or is empty)."""


def resolve_key(key: str | None) -> str:
    """`key`, or $QUEUELOG_API_KEY when it is None: a key in the environment, unlike one in
    a command's arguments, is not shown to every user of the host by `ps`."""
    if key is None:
        key = os.environ.get(API_KEY_VARIABLE)
    if not key:
        raise MissingKey(f"no API key: pass one, or set {API_KEY_VARIABLE}")
    return key


class Session:
    def __init__(
        self,
        url: str,
        key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`key` defaults to $QUEUELOG_API_KEY; with neither, MissingKey."""
        key = resolve_key(key)
        self.url = graphql_url(url)
        self.timeout = timeout
        self._key = key  # for the websocket's connection_init (websocket.py)
        headers = {"Authorization": f"Bearer {key}"}
        self._http: Transport = HttpxTransport(self.url, headers, timeout, transport)
        # The worker's hot calls (`plain=True`), where the URL allows (PlainHTTP.usable).
        self._plain: Transport | None = None
        if transport is None and PlainHTTP.usable(self.url):
            try:
                self._plain = PlainHTTP(self.url, headers)
            except (ValueError, UnicodeError):
                self._plain = None

    def _open_socket(self) -> contextlib.AbstractAsyncContextManager[GraphQLSocket]:
        """`async with session._open_socket() as socket`: a websocket to the server, for one
        subscription, authenticated with this session's key (websocket.py)."""
        return GraphQLSocket.open(self.url, self._key)

    async def aclose(self) -> None:
        if self._plain is not None:
            await self._plain.aclose()
        await self._http.aclose()

    async def execute(
        self, query: str, variables: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Data:
        """Run one operation: its `data` (a dict, whose `refused` names the `error` fields
        withheld from this key), or the contract error raised for any other GraphQL error
        (docs/python.md, "What execute raises")."""
        return await self.post_json(encode_json({"query": query, "variables": variables or {}}), timeout)

    async def post_json(
        self, body: bytes, timeout: float | None = None, *, plain: bool = False, idempotent: bool = False
    ) -> Data:
        """`execute` for a request body already encoded as JSON ({"query": ..., "variables": ...}).

        With `plain`, the request goes through `PlainHTTP` when the URL allows it (the
        worker's hot calls), else through httpx. `idempotent`: repeating the request is
        harmless, so PlainHTTP may send it again when a kept-alive connection dies under it.
        """
        transport = self._plain if plain and self._plain is not None else self._http
        status, content = await transport.post(
            body, self.timeout if timeout is None else timeout, idempotent=idempotent
        )
        return answer_data(status, content, self.url)
