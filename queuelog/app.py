"""The ASGI app: routes, middleware and the lifespan that owns the database and loops.

    uvicorn --factory queuelog.app:create_app_from_env

`queuelog serve` is the usual way in: it migrates the database first.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

import starlette.websockets
from cross_web import HTTPException
from graphql import GraphQLFormattedError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry import Schema
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import ConnectionInitMessage, ErrorMessage

from queuelog import maintenance
from queuelog.auth import Principal
from queuelog.compiled.http import CompiledRequests, read_body
from queuelog.compiled.plan import Planner
from queuelog.errors import DatabaseUnavailable, QueuelogError, Unauthenticated, shorten_echoes
from queuelog.events import EventBus
from queuelog.graphql_api import build_schema, root_fields
from queuelog.graphql_api import schema as default_schema
from queuelog.metrics import NOSNIFF, OPERATION, Metrics
from queuelog.middleware import BodyLimit, RequestTiming, graphql_error_body, host_check, send_json
from queuelog.principals import Authenticator
from queuelog.queue import JobQueue
from queuelog.retry_policy import RetryPolicy
from queuelog.schema.context import RequestContext
from queuelog.schema.extensions import cost_rule
from queuelog.schema.limits import document_rules
from queuelog.settings import Settings
from queuelog.stopping import Stopping, on_stop_signals
from queuelog.storage.repository import Repository
from queuelog.ticker import tick_forever
from queuelog.wakeup import WorkSignal
from queuelog.web import graphiql_page
from queuelog.web import routes as web_routes

log = logging.getLogger("queuelog.app")
MAX_SUBSCRIPTIONS_PER_CONNECTION = 20
REVOKED_MESSAGE = "the API key of this connection has been revoked"
GOING_AWAY = "the server is stopping"
TRY_AGAIN_LATER = 1013  # a WebSocket close code (RFC 6455 registry): the service is unavailable for now
DATABASE_UNAVAILABLE_REASON = "the database is unavailable; try again"
KEY_WATCH_SECONDS = 0.5


class Services:
    """Everything one server process holds; created in the lifespan."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.repository = Repository(
            settings.database_url,
            RetryPolicy(settings.retry_base_seconds, settings.retry_max_seconds),
            settings.event_feed,
        )
        self.authenticator = Authenticator(self.repository)
        self.sockets: weakref.WeakSet[TransportWSHandler] = weakref.WeakSet()
        self.bus = EventBus()
        self.signal = WorkSignal()
        self.stopping = Stopping()
        self.queue = JobQueue(settings, self.repository, self.signal, metrics.observe_held, self.stopping)
        self.repository.add_listener(self.bus.publish)
        self.repository.add_listener(self.signal.on_events)
        # Metrics count this process's own work; each process is scraped on its own.
        self.repository.add_listener(metrics.observe_events, remote=False)

    async def principal_for(self, authorization: str | None) -> Principal | None:
        return await self.authenticator.principal_for(authorization)


class TransportWSHandler(BaseGraphQLTransportWSHandler[RequestContext, None]):
    """Strawberry's graphql-transport-ws handler, refusing one subscription too many with a
    contract error code (Strawberry's own refusal carries none)."""

    view: GraphQLView  # the only view using this class (its graphql_transport_ws_handler_class)

    async def handle(self) -> Any:
        sockets = self.view.services.sockets
        sockets.add(self)
        try:
            return await super().handle()
        except Exception as exc:
            # A message answered after the socket had closed (a connection_init acknowledged
            # just after the server closed its sockets to stop): Strawberry lets Starlette's
            # word for that through, and uvicorn would log it with a traceback.
            if not _socket_gone(exc):
                raise
            return None
        finally:
            sockets.discard(self)

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        """As Strawberry's, but a key that could not be checked because the database is
        unavailable closes the socket with 1013 (try again later): 4403 would tell the client
        its key is refused, and an SDK worker stops on that."""
        try:
            await super().handle_connection_init(message)
        except DatabaseUnavailable:
            await self.websocket.close(code=TRY_AGAIN_LATER, reason=DATABASE_UNAVAILABLE_REASON)

    async def key_revoked(self, read_now: bool = False) -> bool:
        if not self.connection_acknowledged:
            return False
        try:
            await self.context.ensure_key_still_valid(read_now)
        except Unauthenticated:
            return True
        return False

    async def end_if_key_revoked(self) -> None:
        """Revoked: end every operation with UNAUTHENTICATED, then close the socket (4403)."""
        if not await self.key_revoked():
            return
        error: list[GraphQLFormattedError] = [
            {"message": REVOKED_MESSAGE, "extensions": {"code": "UNAUTHENTICATED"}}
        ]
        for operation_id in list(self.operations):
            await self.cleanup_operation(operation_id)
            revoked: ErrorMessage = {"id": operation_id, "type": "error", "payload": error}
            await self.send_message(revoked)
        await self.websocket.close(code=4403, reason="Forbidden")

    async def close_going_away(self) -> None:
        """The server is stopping: end every operation and close the socket (1001, going
        away), which clients take as a cue to connect again, to a server that runs."""
        for operation_id in list(self.operations):
            await self.cleanup_operation(operation_id)
        try:
            await self.websocket.close(code=1001, reason=GOING_AWAY)
        except Exception as exc:
            if not _socket_gone(exc):
                raise  # logged by close_sockets_going_away

    async def handle_subscribe(self, message: Any) -> None:
        # Every operation reads the keys generation now (as every HTTP request does): a key
        # revoked by any process runs nothing more, from the very next operation.
        try:
            revoked = await self.key_revoked(read_now=True)
        except DatabaseUnavailable as exc:
            # An outage refuses this operation, as HTTP answers 503; the socket and its other
            # subscriptions stay.
            log.warning("websocket operation refused: %s", exc.message)
            error: GraphQLFormattedError = {"message": exc.message, "extensions": {"code": exc.code}}
            refused: ErrorMessage = {"id": message["id"], "type": "error", "payload": [error]}
            await self.send_message(refused)
            return
        if revoked:
            await self.end_if_key_revoked()
            return
        limit = self.max_subscriptions_per_connection
        if self.connection_acknowledged and limit is not None and len(self.operations) >= limit:
            error = {
                "message": f"at most {limit} subscriptions per connection",
                "extensions": {"code": "BAD_USER_INPUT"},
            }
            too_many: ErrorMessage = {"id": message["id"], "type": "error", "payload": [error]}
            await self.send_message(too_many)
            return
        await super().handle_subscribe(message)

    async def handle_task_exception(self, error: Exception) -> None:
        # A websocket that is gone while its events are being sent is normal traffic, not a
        # crash: no traceback. uvicorn says so with WebSocketDisconnected, or with this
        # RuntimeError when it closed the socket itself a moment earlier (keepalive ping
        # timeout). Anything else is still logged, once, by Strawberry.
        if _socket_gone(error):
            return
        await super().handle_task_exception(error)


# Starlette's words for a socket that had already closed: uvicorn's own shutdown, or the
# client, closed it a moment earlier; or the app had sent its close already.
STARLETTE_GONE = (starlette.websockets.WebSocketDisconnect, starlette.websockets.WebSocketDisconnected)


def _socket_gone(error: Exception) -> bool:
    """Whether `error` only says the websocket had already closed."""
    return isinstance(error, (WebSocketDisconnected, *STARLETTE_GONE)) or (
        isinstance(error, RuntimeError) and "after sending 'websocket.close'" in str(error)
    )


class GraphQLView(GraphQL[RequestContext, None]):
    """Strawberry's ASGI view with queuelog's context and websocket authentication."""

    graphql_transport_ws_handler_class = TransportWSHandler
    schema: Schema  # build_schema's; GraphQLEndpoint plans against its GraphQL-core schema

    def __init__(self, services: Services, **kwargs: Any) -> None:
        super().__init__(build_schema(services.settings), **kwargs)
        self.services = services

    def parse_json(self, data: str | bytes) -> Any:
        # Strawberry answers 500 for a body that is not UTF-8 JSON or not an object/array.
        try:
            parsed = self.decode_json(data)
        except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, deep nesting
            raise HTTPException(400, "Unable to parse request body as JSON") from None
        if not isinstance(parsed, dict | list):
            raise HTTPException(400, "the request body must be a JSON object")
        return parsed

    async def execute_single(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_single(*args, **kwargs)
        except HTTPException as refusal:  # its reason may quote the request (an operationName)
            raise HTTPException(refusal.status_code, shorten_echoes(refusal.reason)) from None

    async def get_context(self, request: Request | WebSocket, response: Any = None) -> RequestContext:
        return RequestContext(
            queue=self.services.queue,
            bus=self.services.bus,
            request=request,
            response=response,
            principal=request.scope.get("queuelog.principal"),
        )

    async def render_graphql_ide(self, request: Request) -> Response:
        return graphiql_page(self.services.settings)  # GraphiQL from the app's own assets

    async def on_ws_connect(self, context: RequestContext) -> dict[str, object] | None:
        authorization = _authorization_param(context.connection_params)
        principal = None
        generation = None
        if authorization is not None:
            try:
                principal, generation = await self.services.authenticator.authenticate(authorization)
            except DatabaseUnavailable as exc:
                log.warning("websocket refused: %s", exc.message)
                raise  # closed 1013 (TransportWSHandler.handle_connection_init), not 4403
        if principal is None:
            raise ConnectionRejectionError()
        context.principal = principal
        context.reauthenticate = lambda: self.services.principal_for(authorization)
        context.key_generation = self.services.authenticator.generation
        context.read_key_generation = self.services.authenticator.refresh
        # As of before the lookup: a key revoked while it ran is checked again at once.
        context.checked_generation = generation
        return None


class GraphQLEndpoint:
    """POST needs a valid key (else 401 with a GraphQL body); GET only shows GraphiQL.

    A POST whose document has a compiled plan is answered by it; the rest, by Strawberry.
    """

    def __init__(self, services: Services, view: GraphQLView) -> None:
        self.services = services
        self.view = view
        settings = services.settings
        planner = Planner(
            view.schema._schema,
            document_rules(settings),
            settings.max_tokens,
            cost_rule(settings),
            settings.max_response_bytes,
        )
        self.compiled = CompiledRequests(planner, self._context)

    def _context(self, request: Request, principal: Principal) -> RequestContext:
        return RequestContext(
            queue=self.services.queue, bus=self.services.bus, request=request, principal=principal
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope["headers"])
            raw = headers.get(b"authorization")
            try:
                principal = await self.services.principal_for(raw.decode("latin-1") if raw else None)
            except DatabaseUnavailable as exc:
                # An outage, answered as /healthz answers it: 503, a GraphQL body, one log line.
                log.warning("request refused: %s", exc.message)
                await send_json(send, 503, graphql_error_body(exc.message, exc.code), [])
                return
            if principal is None:
                body = graphql_error_body("a valid API key is required", "UNAUTHENTICATED")
                await send_json(send, 401, body, [(b"www-authenticate", b"Bearer")])
                return
            scope["queuelog.principal"] = principal
            body, receive = await read_body(receive)
            if self.services.settings.compiled and await self.compiled.answer(
                scope, body, receive, send, principal
            ):
                return
        await self.view(scope, receive, send)


class State:
    """What the lifespan opens and the routes use: filled in at start-up."""

    services: Services
    endpoint: GraphQLEndpoint


async def end_revoked_sockets_forever(services: Services) -> None:
    """Websockets whose key was revoked (by any process) end even when idle: the keys
    generation is read every KEY_WATCH_SECONDS, and each open socket whose key was last
    checked at another generation is checked again (a socket opened while a key changed
    included)."""
    outage = maintenance.OutageLog("checking open websockets for revoked keys")
    while True:
        await asyncio.sleep(KEY_WATCH_SECONDS)
        if not services.sockets:
            continue  # nothing to end: no read (a socket opened later checks its key itself)
        try:
            current = await services.authenticator.refresh()
            for socket in list(services.sockets):
                if socket.context.checked_generation != current:
                    await socket.end_if_key_revoked()
            outage.succeeded()
        except DatabaseUnavailable as exc:
            outage.failed(exc)
        except Exception:
            log.exception("checking open websockets for revoked keys failed; trying again")


def open_graphql_endpoint(services: Services) -> GraphQLEndpoint:
    settings = services.settings
    view = GraphQLView(
        services,
        graphql_ide="graphiql" if settings.graphiql else None,
        allow_queries_via_get=False,
        subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
        max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_CONNECTION,
        allowed_origins=settings.cors_origins,
    )
    return GraphQLEndpoint(services, view)


async def close_sockets_going_away(services: Services) -> None:
    sockets = list(services.sockets)
    for outcome in await asyncio.gather(*(s.close_going_away() for s in sockets), return_exceptions=True):
        if isinstance(outcome, Exception):
            log.error("closing a websocket as the server stops failed", exc_info=outcome)


def lifespan_for(settings: Settings, metrics: Metrics, state: State) -> Any:
    """Opens the database and the GraphQL endpoint, runs the maintenance loops, closes all.

    It hears of a stop signal as it arrives (stopping.py), before uvicorn waits for the open
    connections: waiting claims answer at once and websockets close, so that the wait is short
    and nothing is cancelled in the middle of a request."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.services = Services(settings, metrics)
        closing: list[asyncio.Task[None]] = []

        def begin_stopping() -> None:
            if state.services.stopping.is_set():
                return
            state.services.stopping.set()
            log.info(
                "stopping: waiting claims answer now; %d websocket(s) close (1001)",
                len(state.services.sockets),
            )
            closing.append(asyncio.create_task(close_sockets_going_away(state.services)))

        with on_stop_signals(begin_stopping):
            async with serving(state, settings):
                try:
                    yield
                finally:
                    begin_stopping()  # a stop without a signal: the same, late
                    await asyncio.gather(*closing)

    return lifespan


@contextlib.asynccontextmanager
async def serving(state: State, settings: Settings) -> AsyncIterator[None]:
    """The database, the GraphQL endpoint and the maintenance loops, from start to stop."""
    services = state.services
    await services.repository.open()
    state.endpoint = open_graphql_endpoint(services)
    tasks = maintenance.start(services.repository, settings, services.signal.notify)
    tasks.append(asyncio.create_task(end_revoked_sockets_forever(services)))
    tasks.append(asyncio.create_task(tick_forever(services.repository, services.queue.schedules_changed)))
    # Everything loaded so far (schema, plans' machinery, modules) lives as long as the
    # process: keep it out of the cyclic GC's full collections, whose pauses would
    # otherwise show up as tail latency on every request in flight.
    gc.freeze()
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await services.queue.progress.close()  # the progress reports still held are stored
        await services.repository.close()


class GraphQLRoute:
    """/graphql, handed to the endpoint the lifespan opened. A class instance, so that
    Starlette routes raw ASGI to it (a function would be wrapped as request/response)."""

    def __init__(self, state: State) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.state.endpoint(scope, receive, send)


def routes_for(state: State, metrics: Metrics, settings: Settings) -> list[BaseRoute]:
    graphql = GraphQLRoute(state)

    async def healthz(request: Request) -> Response:
        try:
            await state.services.repository.ping()
        except DatabaseUnavailable as exc:
            log.warning("health check: %s", exc.message)
            return JSONResponse({"status": "unavailable"}, status_code=503, headers=NOSNIFF)
        except Exception:
            log.exception("health check: database unreachable")
            return JSONResponse({"status": "unavailable"}, status_code=503, headers=NOSNIFF)
        return JSONResponse({"status": "ok"}, headers=NOSNIFF)

    async def metrics_endpoint(request: Request) -> Response:
        services = state.services
        allowlist = services.queue.allowlist
        return await metrics.response(
            request, services.repository, settings.metrics_token, lambda: allowlist.current(fresh=True)
        )

    return [
        Route("/graphql", graphql, methods=["GET", "POST"]),
        WebSocketRoute("/graphql", graphql),
        Route("/healthz", healthz),
        Route("/metrics", metrics_endpoint),
    ]


def middleware_for(settings: Settings, metrics: Metrics) -> list[Middleware]:
    return [
        Middleware(RequestTiming, metrics=metrics),
        # Before CORS, so that a preflight from a rebound name is refused too.
        Middleware(host_check, hosts=settings.allowed_hosts),
        Middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type"],
            max_age=600,
        ),
        Middleware(BodyLimit, limit=settings.max_body_bytes),
    ]


class QueuelogApp:
    """The ASGI app: Starlette, plus a short lane for API calls.

    A POST to /graphql without an Origin header (workers, producers, scripts: no browser,
    so no CORS to answer) runs the same steps as through Starlette — timing, the allowed
    hosts, the body limit, the endpoint — without the layers that only other routes or
    browsers need. Everything else, lifespan included, goes to Starlette.
    """

    def __init__(self, starlette: Starlette, state: State, settings: Settings, metrics: Metrics) -> None:
        self.starlette = starlette
        self.state = state
        self.metrics = metrics
        self.lane = host_check(
            BodyLimit(GraphQLRoute(state), limit=settings.max_body_bytes), settings.allowed_hosts
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] == "/graphql"
            and scope["method"] == "POST"
            and not any(name == b"origin" for name, _ in scope["headers"])
        ):
            started = time.perf_counter()
            try:
                await self.lane(scope, receive, send)
            finally:
                elapsed = time.perf_counter() - started
                self.metrics.observe_request("/graphql", "POST", elapsed, scope.get(OPERATION))
            return
        if scope["type"] == "lifespan":
            send = startup_failure_in_one_line(send)
        await self.starlette(scope, receive, send)


def startup_failure_in_one_line(send: Send) -> Send:
    """`send`, with a start-up that failed for a known reason (the database went away between
    `serve`'s check and the lifespan) reported as its one-line message, not a traceback.

    Starlette sends `lifespan.startup.failed` from inside its `except` block, so the
    exception being handled is the one that failed the start-up.
    """

    async def one_line(message: Any) -> None:
        if message.get("type") == "lifespan.startup.failed":
            failure = sys.exc_info()[1]
            if isinstance(failure, QueuelogError):
                message = {**message, "message": str(failure)}
        await send(message)

    return one_line


def create_app(settings: Settings | None = None) -> QueuelogApp:
    settings = settings if settings is not None else Settings.from_env()
    metrics = Metrics(settings.job_types, root_fields=root_fields(default_schema))
    state = State()
    starlette = Starlette(
        routes=routes_for(state, metrics, settings) + web_routes(settings),
        middleware=middleware_for(settings, metrics),
        lifespan=lifespan_for(settings, metrics, state),
    )
    return QueuelogApp(starlette, state, settings, metrics)


def create_app_from_env() -> QueuelogApp:
    return create_app(Settings.from_env())


def _authorization_param(params: object) -> str | None:
    """The `authorization` entry of a connection_init payload, its name matched case-insensitively
    as HTTP header names are (`Authorization` is what people copy from their HTTP client)."""
    if not isinstance(params, dict):
        return None
    for name, value in params.items():
        if isinstance(name, str) and name.lower() == "authorization":
            return value if isinstance(value, str) else None
    return None
