"""A `queuelog serve` told to stop while claims wait and websockets are open (docs/deployment.md,
"Stopping a server").

Attacked: SIGTERM and SIGINT to a one-process server, SIGTERM to one with `--workers 2`, on
both databases, each with long-polling `claimJob` and `claimJobs` (30 s) over HTTP, a
subscription and a waiting claim over websockets.

Proven: every waiting HTTP claim is answered at once with its ordinary empty answer (a 200,
`null` or `[]`), every websocket is closed cleanly (going away), the server exits 0 without
waiting for uvicorn's shutdown grace, and its log holds no traceback, no ERROR line and no
CancelledError: an ordinary deploy looks like one.

Each claim's request is known to have been read by the server before the signal (the
kernel's receive queue of the server's socket for it is empty): a request still unread when
the server stops listening is not one it could answer.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from queuelog.cli import SHUTDOWN_GRACE_SECONDS

WAIT = 60.0  # bound for what the test waits for (a server under load); past it, hung
CLAIM_ONE = 'mutation { claimJob(types: ["email"], waitSeconds: 30) { id } }'
CLAIM_MANY = 'mutation { claimJobs(limit: 5, types: ["email", "report"], waitSeconds: 30) { id } }'
EMPTY = {CLAIM_ONE: {"data": {"claimJob": None}}, CLAIM_MANY: {"data": {"claimJobs": []}}}
ENQUEUED = {"type": "next", "id": "events", "payload": {"data": {"jobEvents": {"kind": "ENQUEUED"}}}}
CLEAN_CLOSE = (1001, 1012)
GRAPHQL_TRANSPORT_WS = Subprotocol("graphql-transport-ws")
ENQUEUE_NOOP = 'mutation { enqueueJob(input: {type: "noop"}) { job { id } } }'


def send_claim(server: Server, key: str, query: str) -> http.client.HTTPConnection:
    """POST `query` on a connection of its own; returns once the whole request is sent."""
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=WAIT)
    body = json.dumps({"query": query})
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    connection.request("POST", "/graphql", body=body, headers=headers)
    return connection


def json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode(errors="replace")


def unread_by_server(port: int) -> dict[int, int]:
    """The server's established sockets on `port`: client port -> bytes the server has not read."""
    unread = {}
    with open("/proc/net/tcp") as table:
        for row in list(table)[1:]:
            fields = row.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                unread[int(remote.rsplit(":", 1)[1], 16)] = int(fields[4].split(":")[1], 16)
    return unread


def wait_until_read(server: Server, connections: list[http.client.HTTPConnection]) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    mine = [connection.sock.getsockname()[1] for connection in connections]
    deadline = time.monotonic() + WAIT
    while not all(unread_by_server(port).get(client) == 0 for client in mine):
        assert time.monotonic() < deadline, f"requests still unread: {unread_by_server(port)}"
        time.sleep(0.02)


@contextlib.contextmanager
def open_socket(server: Server, key: str) -> Iterator[ClientConnection]:
    """A graphql-transport-ws socket, acknowledged."""
    with connect(server.ws_url, subprotocols=[GRAPHQL_TRANSPORT_WS], open_timeout=WAIT) as socket:
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {key}"}}
        socket.send(json.dumps(init))
        assert json.loads(socket.recv(timeout=WAIT))["type"] == "connection_ack"
        yield socket


def subscribe(socket: ClientConnection, operation_id: str, query: str) -> None:
    socket.send(json.dumps({"type": "subscribe", "id": operation_id, "payload": {"query": query}}))


def until_closed(socket: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    """The messages the server still sent, and the code it closed the socket with."""
    messages = []
    try:
        while True:
            messages.append(json.loads(socket.recv(timeout=WAIT)))
    except ConnectionClosed as closed:
        return messages, closed.rcvd.code if closed.rcvd is not None else None


def wait_until_live(server: Server, socket: ClientConnection) -> None:
    """Enqueue `noop` jobs until the subscription delivers one (it may not be registered yet
    when the first is enqueued)."""
    deadline = time.monotonic() + WAIT
    while True:
        server.gql(ENQUEUE_NOOP).ok()
        try:
            message = json.loads(socket.recv(timeout=0.5))
        except TimeoutError:
            assert time.monotonic() < deadline, "the subscription never delivered an event"
            continue
        assert message == ENQUEUED, message
        return


@pytest.fixture
def sockets() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.mark.parametrize(
    ("sig", "workers"),
    [(signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGTERM, 2)],
    ids=["SIGTERM", "SIGINT", "SIGTERM-workers-2"],
)
def test_a_stop_answers_waiting_claims_closes_websockets_and_exits_cleanly(
    start_server: Callable[..., Server], sockets: contextlib.ExitStack, sig: int, workers: int
) -> None:
    server = start_server(workers=workers)
    worker_key = server.make_key("stop-worker", "WORKER")

    # A subscription, live: it has delivered an event.
    watching = sockets.enter_context(open_socket(server, server.admin_key))
    subscribe(watching, "events", 'subscription { jobEvents(types: ["noop"]) { kind } }')
    wait_until_live(server, watching)
    # A claim waiting over a websocket.
    claiming = sockets.enter_context(open_socket(server, worker_key))
    subscribe(claiming, "claim", CLAIM_ONE)
    # Claims waiting over HTTP, each request read by the server.
    queries = [CLAIM_ONE, CLAIM_MANY, CLAIM_ONE, CLAIM_MANY]
    claims = [send_claim(server, worker_key, query) for query in queries]
    wait_until_read(server, claims)

    server.process.send_signal(sig)
    signalled = time.monotonic()
    answers = []
    for connection in claims:
        response = connection.getresponse()
        answers.append((response.status, json_or_text(response.read())))
        connection.close()
    status = server.process.wait(timeout=WAIT)
    stopped_after = time.monotonic() - signalled

    assert answers == [(200, EMPTY[query]) for query in queries]
    # Going away: 1001 from the app as it hears of the signal, or 1012 (service restart)
    # from uvicorn when its own shutdown reaches the socket first. Either is a clean close.
    events, events_code = until_closed(watching)
    assert events_code in CLEAN_CLOSE and all(event == ENQUEUED for event in events), (events_code, events)
    claim_messages, claim_code = until_closed(claiming)
    assert claim_code in CLEAN_CLOSE
    # The claim over the websocket is either answered empty or ended with the socket.
    assert claim_messages in (
        [],
        [{"type": "next", "id": "claim", "payload": {"data": {"claimJob": None}}}],
        [
            {"type": "next", "id": "claim", "payload": {"data": {"claimJob": None}}},
            {"type": "complete", "id": "claim"},
        ],
    ), claim_messages
    log = server.log()
    assert status == 0, log
    for sign_of_a_bug in ("Traceback", "ERROR", "CancelledError", "timeout graceful shutdown exceeded"):
        assert sign_of_a_bug not in log, log
    # Nothing was left for uvicorn to give up on (that comes after its grace).
    assert stopped_after < SHUTDOWN_GRACE_SECONDS, (stopped_after, log)


def test_a_start_up_that_loses_the_database_reports_one_line_not_a_traceback() -> None:
    """The database answered `serve`'s check, then went away before the lifespan opened it:
    uvicorn is told the reason in one line (it logs what it is told, then exits)."""
    import asyncio

    from queuelog.app import create_app
    from queuelog.settings import Settings

    app = create_app(Settings(database_url="postgresql://postgres@127.0.0.1:1/gone", job_types=("noop",)))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def send(message: Any) -> None:
        sent.append(message)

    with pytest.raises(Exception, match="cannot connect to PostgreSQL"):
        asyncio.run(app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send))
    assert [m["type"] for m in sent] == ["lifespan.startup.failed"]
    assert sent[0]["message"].startswith("cannot connect to PostgreSQL"), sent[0]["message"]
    assert "Traceback" not in sent[0]["message"] and "\n" not in sent[0]["message"]
