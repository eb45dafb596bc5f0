"""What the server log says about errors.

Attacked and proven:
- a burst of refusals of every kind (UNAUTHENTICATED, FORBIDDEN, BAD_USER_INPUT,
  PAYLOAD_TOO_LARGE, NOT_FOUND, CONFLICT; over HTTP and over the websocket) leaves no
  traceback in a real server's log and at most one line per refusal;
- an unexpected error (a resolver whose queue raises RuntimeError, run in process by the
  server's schema, over the HTTP and the subscription paths) is logged exactly once, with its
  traceback, while the client sees only INTERNAL_SERVER_ERROR and a generic message;
- a refusal is at most one DEBUG line, never a record with a traceback;
- a websocket that is gone while an event is being sent to it is not a crash: no traceback
  (an unexpected exception in an operation task still gets one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from conftest import GraphQLResponse, Server
from strawberry.http.exceptions import WebSocketDisconnected
from websockets.asyncio.client import connect

from queuelog.app import TransportWSHandler
from queuelog.auth import Principal
from queuelog.graphql_api import build_schema
from queuelog.model import Priority, Role
from queuelog.schema.context import RequestContext
from queuelog.settings import Settings

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
CANCEL = "mutation($id: ID!) { cancelJob(id: $id) { id } }"
COMPLETE = "mutation($id: ID!) { completeJob(id: $id) { id } }"
REPEATS = 10
MAX_PAYLOAD_BYTES = 1024
MAX_BODY_BYTES = 16384
TRACEBACK = "Traceback (most recent call last)"


# --- a real server ---------------------------------------------------------------------------------


async def websocket_refusals(server: Server, key: str, count: int) -> list[str]:
    """`jobUpdated` on a job that does not exist, `count` times on one connection: the codes."""
    codes: list[str] = []
    async with connect(server.ws_url, subprotocols=["graphql-transport-ws"], proxy=None) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {key}"}}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        for n in range(count):
            query = 'subscription { jobUpdated(id: "987654321") { id } }'
            await ws.send(json.dumps({"id": str(n), "type": "subscribe", "payload": {"query": query}}))
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 5))
                if message["type"] == "next":
                    codes += [e["extensions"]["code"] for e in message["payload"]["errors"]]
                if message["type"] in ("complete", "error"):
                    break
    return codes


def test_a_burst_of_refusals_leaves_no_traceback(
    start_server: Callable[..., Server], unique: Callable[[str], str]
) -> None:
    server = start_server(max_payload_bytes=MAX_PAYLOAD_BYTES, max_body_bytes=MAX_BODY_BYTES)
    producer = server.make_key(unique("producer"), "producer")
    worker = server.make_key(unique("worker"), "worker")
    viewer = server.make_key(unique("viewer"), "viewer")
    pending = server.gql(ENQUEUE, {"input": {"type": "noop"}}).ok()["enqueueJob"]["job"]["id"]
    cancelled = server.gql(ENQUEUE, {"input": {"type": "noop"}}).ok()["enqueueJob"]["job"]["id"]
    server.gql(CANCEL, {"id": cancelled}).ok()
    server.gql("{ jobs(first: 1) { nodes { id } } }", key=viewer).ok()  # the job error below needs a job

    def oversized_body() -> GraphQLResponse:
        body = {"query": "{ me { name } }", "variables": {"pad": "x" * MAX_BODY_BYTES}}
        response = server.client.post(
            server.graphql_url, json=body, headers={"Authorization": f"Bearer {server.admin_key}"}
        )
        assert response.status_code == 413
        return GraphQLResponse(response.status_code, response.json())

    refusals: list[tuple[str, Callable[[], GraphQLResponse]]] = [
        ("UNAUTHENTICATED", lambda: server.gql("{ me { name } }", key="ql_" + "x" * 40)),
        ("FORBIDDEN", lambda: server.gql(ENQUEUE, {"input": {"type": "noop"}}, key=viewer)),
        ("FORBIDDEN", lambda: server.gql("{ jobs(first: 1) { nodes { id error } } }", key=viewer)),
        ("BAD_USER_INPUT", lambda: server.gql(ENQUEUE, {"input": {"type": "not-allowed"}}, key=producer)),
        ("BAD_USER_INPUT", lambda: server.gql("{ me { name ")),
        ("BAD_USER_INPUT", lambda: server.gql("{ me { nonsense } }")),
        ("BAD_USER_INPUT", lambda: server.gql('{ job(id: "not-an-id") { id } }')),
        ("BAD_USER_INPUT", lambda: server.gql(ENQUEUE, {"input": {"type": 5}}, key=producer)),
        (
            "PAYLOAD_TOO_LARGE",
            lambda: server.gql(
                ENQUEUE, {"input": {"type": "noop", "payload": {"x": "y" * MAX_PAYLOAD_BYTES}}}, key=producer
            ),
        ),
        ("PAYLOAD_TOO_LARGE", oversized_body),
        ("NOT_FOUND", lambda: server.gql(CANCEL, {"id": "987654321"})),
        ("CONFLICT", lambda: server.gql(CANCEL, {"id": cancelled})),
        ("NOT_FOUND", lambda: server.gql(COMPLETE, {"id": pending}, key=worker)),  # not its job
    ]
    time.sleep(0.5)
    log_before = server.log()
    refused = 0
    for _ in range(REPEATS):
        for code, refuse in refusals:
            response = refuse()
            assert code in response.codes, (code, response)
            refused += 1
    ws_codes = asyncio.run(asyncio.wait_for(websocket_refusals(server, viewer, REPEATS), 30))
    assert ws_codes == ["NOT_FOUND"] * REPEATS
    refused += REPEATS
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
    time.sleep(0.5)

    log = server.log()
    assert log.startswith(log_before)
    burst = log[len(log_before) :]
    assert TRACEBACK not in burst, burst[:4000]
    lines = burst.splitlines()
    assert len(lines) <= refused, lines[:40]
    assert not [line for line in lines if "strawberry" in line], lines[:40]


# --- in process: the schema's logging policy -------------------------------------------------------


class BrokenQueue:
    """Stands for a queue whose database fails in a way nobody planned for."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the queue broke while looking up {name}")


class BrokenBus:
    def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the event bus broke")


def context(transport: str = "http", principal: Principal | None = None) -> RequestContext:
    admin = Principal("admin", frozenset({Role.ADMIN}), Priority.CRITICAL)
    return RequestContext(
        queue=BrokenQueue(),  # type: ignore[arg-type]
        bus=BrokenBus(),  # type: ignore[arg-type]
        request=SimpleNamespace(scope={"type": transport}),  # type: ignore[arg-type]
        principal=principal if principal is not None else admin,
    )


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name != "asyncio"]


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in records(caplog) if record.exc_info]


def test_an_unexpected_error_is_logged_once_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    schema = build_schema(Settings())
    result = asyncio.run(schema.execute('{ job(id: "1") { id } }', context_value=context()))

    [error] = result.errors
    assert (error.message, error.extensions) == ("Internal server error.", {"code": "INTERNAL_SERVER_ERROR"})
    [record] = tracebacks(caplog)
    assert record.levelno == logging.ERROR and record.name == "queuelog.errors"
    assert caplog.text.count(TRACEBACK) == 1
    assert "RuntimeError: the queue broke while looking up get" in caplog.text


def test_an_unexpected_error_in_a_subscription_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    schema = build_schema(Settings())

    async def first_result() -> Any:
        query = "subscription { jobEvents { kind } }"
        stream = await schema.subscribe(query, context_value=context("websocket"))
        try:
            return await anext(stream)
        finally:
            await stream.aclose()

    result = asyncio.run(first_result())
    [error] = result.errors
    assert (error.message, error.extensions) == ("Internal server error.", {"code": "INTERNAL_SERVER_ERROR"})
    assert len(tracebacks(caplog)) == 1
    assert caplog.text.count(TRACEBACK) == 1
    assert "RuntimeError: the event bus broke" in caplog.text


@pytest.mark.parametrize(
    ("query", "principal", "code"),
    [
        pytest.param("{ me { name ", None, "BAD_USER_INPUT", id="syntax"),
        pytest.param("{ me { nonsense } }", None, "BAD_USER_INPUT", id="validation"),
        pytest.param(
            '{ job(id: "1") { id } }',
            Principal("nobody", frozenset(), Priority.LOW),
            "FORBIDDEN",
            id="role",
        ),
    ],
)
def test_a_refusal_is_one_debug_line_at_most(
    caplog: pytest.LogCaptureFixture, query: str, principal: Principal | None, code: str
) -> None:
    caplog.set_level(logging.DEBUG)
    schema = build_schema(Settings())
    result = asyncio.run(schema.execute(query, context_value=context(principal=principal)))

    assert [e.extensions["code"] for e in result.errors] == [code]
    assert not tracebacks(caplog)
    assert TRACEBACK not in caplog.text
    [record] = records(caplog)
    assert (record.levelno, record.name) == (logging.DEBUG, "queuelog.refusals")
    assert "\n" not in record.getMessage() and code in record.getMessage()


def test_a_cost_refusal_is_one_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    """Refused by QUEUELOG_MAX_COST before it runs (an extension, not a validation rule):
    logged like any other refusal, as one DEBUG line naming the operation."""
    caplog.set_level(logging.DEBUG)
    schema = build_schema(Settings(max_cost=10))
    query = "query Costly { jobs(first: 100) { nodes { id } } }"
    result = asyncio.run(schema.execute(query, context_value=context()))

    assert [e.extensions["code"] for e in result.errors] == ["BAD_USER_INPUT"]
    [record] = records(caplog)
    assert (record.levelno, record.name, record.exc_info) == (logging.DEBUG, "queuelog.refusals", None)
    assert record.getMessage().startswith("refused BAD_USER_INPUT (operation Costly, path -): ")


@pytest.mark.parametrize(
    ("error", "logged"),
    [
        pytest.param(WebSocketDisconnected(), False, id="client gone"),
        pytest.param(
            RuntimeError("Unexpected ASGI message 'websocket.send', after sending 'websocket.close'."),
            False,
            id="server closed it (keepalive timeout)",
        ),
        pytest.param(RuntimeError("something else"), True, id="unexpected"),
    ],
)
def test_a_websocket_gone_mid_send_is_not_a_crash(
    caplog: pytest.LogCaptureFixture, error: Exception, logged: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    handler = TransportWSHandler.__new__(TransportWSHandler)  # only its exception policy is used
    try:
        raise error
    except Exception as raised:
        asyncio.run(handler.handle_task_exception(raised))
    assert len(tracebacks(caplog)) == (1 if logged else 0)
    assert caplog.text.count(TRACEBACK) == (1 if logged else 0)
