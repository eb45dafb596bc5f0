"""POST /graphql through compiled plans, when the request is one they take.

A JSON body `{query, variables?, operationName?, extensions?}` whose document has a plan
(plan.py) is answered here; anything else, or anything the plan hands back, goes on to
Strawberry's view with the body replayed, exactly as it arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from queuelog import jsonutil
from queuelog.auth import Principal
from queuelog.compiled.plan import Planner, run
from queuelog.metrics import OPERATION

REQUEST_KEYS = frozenset({"query", "variables", "operationName", "extensions"})


async def read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a `receive` that hands it out again before going on."""
    chunks: list[bytes] = []
    pending: list[Message] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            pending.append(message)
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = [{"type": "http.request", "body": body, "more_body": False}, *pending]

    async def replay() -> Message:
        if replayed:
            return replayed.pop(0)
        return await receive()

    return body, replay


def _is_json(scope: Scope) -> bool:
    # Exactly as Strawberry's view accepts it (its check is case-sensitive): anything else
    # goes to the view, which answers it the same way as before.
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";", 1)[0].strip() == b"application/json"
    return False


class CompiledRequests:
    def __init__(self, planner: Planner, make_context: Callable[[Request, Principal], Any]) -> None:
        self._planner = planner
        self._make_context = make_context

    async def answer(
        self, scope: Scope, body: bytes, receive: Receive, send: Send, principal: Principal
    ) -> bool:
        """Answer the request if a plan takes it; False when nothing was sent or done."""
        if not _is_json(scope):
            return False
        try:
            request = jsonutil.loads(body)
        except (ValueError, RecursionError):
            return False
        if type(request) is not dict or not REQUEST_KEYS.issuperset(request):
            return False
        query = request.get("query")
        variables = request.get("variables")
        operation_name = request.get("operationName")
        if (
            type(query) is not str
            or (variables is not None and type(variables) is not dict)
            or (operation_name is not None and type(operation_name) is not str)
            or type(request.get("extensions", {})) is not dict
        ):
            return False
        plan = self._planner.plan_for(query, operation_name)
        if plan is None:
            return False
        scope[OPERATION] = plan.operation_name or plan.root.name  # metrics.operation_name's
        context = self._make_context(Request(scope, receive), principal)
        response = await run(plan, context, variables or {})
        if response is None:
            return False
        payload = jsonutil.dumps(response)
        await send(
            {
                "type": "http.response.start",
                "status": 503 if context.database_unavailable else 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
        return True
