"""Recording: every GraphQL operation a client thread sends, with its answer and times.

A `Caller` is one thread's key, with one HTTP connection per server; each call becomes an
`Op` in the shared `Recorder`, sent and received times taken around the request
(`time.time()`, the clock the database shares). A request that gets no answer (the server
died, the connection broke) is recorded with `recv = None`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from history.model import Op

REQUEST_TIMEOUT = 60.0


class Recorder:
    """The operations of every thread, in the order they were sent."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.phase = "setup"
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def begin(self, thread: str, kind: str, server: int, variables: dict[str, Any]) -> Op:
        with self._lock:
            op = Op(next(self._seq), thread, kind, server, variables, time.time(), phase=self.phase)
            self.ops.append(op)
        return op

    def count(self) -> int:
        with self._lock:
            return len(self.ops)


class Caller:
    """One key used by one thread, on whichever server each call names."""

    def __init__(
        self, urls: Callable[[int], str], servers: int, key: str, thread: str, recorder: Recorder
    ) -> None:
        self._urls = urls
        self.servers = servers
        self.key = key
        self.thread = thread
        self.recorder = recorder
        self._clients: dict[int, httpx.Client] = {}

    def _client(self, server: int) -> httpx.Client:
        if server not in self._clients:
            # Idle connections are dropped after 1 s, before uvicorn's 5 s: see
            # conftest.http_client. On SQLite's `--workers 2` a new connection may also land
            # on the other process.
            self._clients[server] = httpx.Client(
                timeout=REQUEST_TIMEOUT, limits=httpx.Limits(keepalive_expiry=1.0)
            )
        return self._clients[server]

    def call(self, server: int, kind: str, document: str, variables: dict[str, Any]) -> Op:
        """Send one operation whose root field is `kind`; its recorded Op (data: the root
        field's answer)."""
        op = self.recorder.begin(self.thread, kind, server, variables)
        try:
            response = self._client(server).post(
                self._urls(server) + "/graphql",
                json={"query": document, "variables": variables},
                headers={"Authorization": f"Bearer {self.key}"},
            )
        except httpx.HTTPError as exc:
            op.messages = [f"{type(exc).__name__}: {exc}"]
            self._forget(server)
            return op
        op.recv = time.time()
        op.http_status = response.status_code
        try:
            body = response.json()
        except ValueError:
            op.messages = [response.text[:200]]
            return op
        errors = body.get("errors") or []
        op.codes = [str((e.get("extensions") or {}).get("code")) for e in errors]
        op.messages = [str(e.get("message"))[:200] for e in errors]
        op.data = (body.get("data") or {}).get(kind) if isinstance(body.get("data"), dict) else None
        return op

    def _forget(self, server: int) -> None:
        client = self._clients.pop(server, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for server in list(self._clients):
            self._forget(server)
