"""`jobUpdated` subscribers: one websocket (graphql-transport-ws) per thread, on one server.

Each follows the jobs handed to it (at most CAPACITY at once, under the server's limit of
20 per connection) and records every status delivered. When the socket dies (a server
killed), the open subscriptions are marked `closed` and followed again, as new
subscriptions, once the thread has connected again.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection, connect

from history.documents import JOB_UPDATED
from history.model import Subscription

PROTOCOL = "graphql-transport-ws"
CAPACITY = 16
RECV_SECONDS = 0.05


class Subscriber:
    def __init__(self, name: str, url_of: Callable[[int], str], server: int, key: str) -> None:
        self.name = name
        self.server = server
        self._url_of = url_of
        self._key = key
        self.inbox: queue.Queue[int] = queue.Queue()
        self.subscriptions: list[Subscription] = []
        self.stop = threading.Event()
        self.errors: list[str] = []
        self._open: dict[str, Subscription] = {}
        self._again: list[int] = []  # jobs whose subscription a dead socket ended
        self._ops = 0
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def open_jobs(self) -> list[int]:
        with self._lock:
            return [s.job_id for s in self._open.values()] + list(self._again)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)

    # --- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while not self.stop.is_set():
            url = self._url_of(self.server).replace("http://", "ws://") + "/graphql"
            try:
                with connect(
                    url, subprotocols=[PROTOCOL], proxy=None, open_timeout=10, close_timeout=1
                ) as ws:  # type: ignore[list-item]
                    self._init(ws)
                    self._follow(ws)
            except (OSError, WebSocketException, TimeoutError) as exc:
                self._lost(f"{type(exc).__name__}: {exc}")
                self.stop.wait(0.5)

    def _init(self, ws: ClientConnection) -> None:
        ws.send(json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {self._key}"}}))
        ack = json.loads(ws.recv(10))
        if ack.get("type") != "connection_ack":
            raise WebSocketException(f"no connection_ack: {ack}")

    def _follow(self, ws: ClientConnection) -> None:
        while not self.stop.is_set():
            self._subscribe_more(ws)
            try:
                raw = ws.recv(RECV_SECONDS)
            except TimeoutError:
                continue
            self._handle(ws, json.loads(raw))

    def _subscribe_more(self, ws: ClientConnection) -> None:
        while len(self._open) < CAPACITY:
            with self._lock:
                job_id = self._again.pop() if self._again else None
            if job_id is None:
                try:
                    job_id = self.inbox.get_nowait()
                except queue.Empty:
                    return
            self._ops += 1
            op_id = f"{self.name}-{self._ops}"
            subscription = Subscription(job_id=job_id, server=self.server, opened=time.time())
            with self._lock:
                self._open[op_id] = subscription
                self.subscriptions.append(subscription)
            message = {"query": JOB_UPDATED, "variables": {"id": str(job_id)}}
            ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": message}))

    def _handle(self, ws: ClientConnection, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "ping":
            ws.send(json.dumps({"type": "pong"}))
            return
        subscription = self._open.get(str(message.get("id")))
        if subscription is None:
            return
        if kind == "next":
            payload = message.get("payload") or {}
            job = (payload.get("data") or {}).get("jobUpdated")
            if payload.get("errors") or not job:
                self.errors.append(f"job {subscription.job_id}: {payload}")
                return
            subscription.statuses.append(job["status"])
            subscription.received.append(time.time())
        elif kind in ("complete", "error"):
            if kind == "error":
                self.errors.append(f"job {subscription.job_id}: {message.get('payload')}")
            subscription.ended = kind
            with self._lock:
                del self._open[str(message["id"])]

    def _lost(self, why: str) -> None:
        with self._lock:
            for subscription in self._open.values():
                subscription.ended = "closed"
                self._again.append(subscription.job_id)
            self._open.clear()
        if not self.stop.is_set():
            self.errors.append(f"socket lost: {why}")
