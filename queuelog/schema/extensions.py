"""Schema extensions: the error policy of API.md section 4, the document limits and the
operation's name for the latency metric."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    OperationDefinitionNode,
    get_operation_ast,
)
from strawberry.extensions import (
    AddValidationRules,
    MaxTokensLimiter,
    ParserCache,
    SchemaExtension,
    ValidationCache,
)
from strawberry.schema.exceptions import CannotGetOperationTypeError
from strawberry.types.graphql import OperationType

from queuelog.errors import QueuelogError, shorten_echoes
from queuelog.metrics import OPERATION, operation_name
from queuelog.schema.context import RequestContext
from queuelog.schema.cost import CostRule, CostTooHigh, SizeNotKnown
from queuelog.schema.limits import document_rules
from queuelog.settings import Settings

CONTRACT_CODES = frozenset(
    {
        "UNAUTHENTICATED",
        "FORBIDDEN",
        "BAD_USER_INPUT",
        "PAYLOAD_TOO_LARGE",
        "NOT_FOUND",
        "CONFLICT",
        "INTERNAL_SERVER_ERROR",
    }
)
MAX_ERRORS = 20
INTERNAL_MESSAGE = "Internal server error."
ARGUMENT_REFUSAL = "Argument '"
_SUGGESTION = re.compile(r"\s*Did you mean [^?]*\?", re.DOTALL)


def classify(error: GraphQLError) -> tuple[str, str]:
    """The contract's (message, code) for one error; INTERNAL_SERVER_ERROR is anything unexpected.

    The same answer decides what the client sees (`shape_error`) and what the server logs
    (`queuelog.schema.logging`): a refusal one line at most, an unexpected error its traceback.
    """
    message, code = _classify(error)
    # graphql-core and Strawberry quote names and values whole: cut as queuelog's own echo.
    return shorten_echoes(message), code


def _classify(error: GraphQLError) -> tuple[str, str]:
    original = error.original_error
    if isinstance(original, QueuelogError):
        return original.message, original.code
    code = (error.extensions or {}).get("code")
    if code in CONTRACT_CODES:
        return error.message, code
    if error.path is None and (
        original is None or isinstance(original, (ValueError, TypeError, GraphQLError))
    ):
        # Refused before execution: syntax, validation, limits, variable coercion.
        return _SUGGESTION.sub("", error.message), "BAD_USER_INPUT"
    if isinstance(original, CannotGetOperationTypeError):
        # An operationName the document does not define (over the websocket; HTTP answers 400).
        return error.message, "BAD_USER_INPUT"
    if (original is None or isinstance(original, GraphQLError)) and error.message.startswith(
        ARGUMENT_REFUSAL
    ):
        # graphql-core's own argument coercion at execution, e.g. null sent in a variable
        # for `first: Int! = 20`: the client's input, not a bug.
        return error.message, "BAD_USER_INPUT"
    return INTERNAL_MESSAGE, "INTERNAL_SERVER_ERROR"


def shape_error(error: GraphQLError) -> GraphQLError:
    """One error as the client sees it: the contract's message and code, nothing more.

    Logging is not done here but in `LoggingSchema.process_errors`, which sees every error
    once (this runs again on errors already shaped, e.g. a websocket result at each stage).
    """
    message, code = classify(error)
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions={"code": code},
    )


def shape_errors(errors: list[GraphQLError]) -> list[GraphQLError]:
    shaped: list[GraphQLError] = []
    seen: set[tuple[str, tuple[str | int, ...] | None]] = set()
    for error in errors:
        clean = shape_error(error)
        key = (clean.message, tuple(clean.path) if clean.path else None)
        if key in seen:
            continue
        seen.add(key)
        shaped.append(clean)
        if len(shaped) == MAX_ERRORS:
            break
    return shaped


class ErrorPolicy(SchemaExtension):
    def on_operation(self) -> Iterator[None]:
        try:
            yield
        except GraphQLError as error:
            # ParserCache parses while entering on_parse, so a syntax error (or the token
            # limit) is raised through here instead of landing in the result: shape it now.
            raise shape_error(error) from None
        result = self.execution_context.result
        if result is not None and result.errors:
            result.errors = shape_errors(result.errors)

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        assert document is not None  # parsed before execution starts
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        if len(operations) > 1 and context._provided_operation_name is None:
            # The spec's rule; Strawberry would otherwise run the first operation.
            raise GraphQLError(
                "the document has several operations: name one with operationName",
                extensions={"code": "BAD_USER_INPUT"},
            )
        if (
            context.operation_type is OperationType.SUBSCRIPTION
            and getattr(context.context, "request", None) is not None
            and context.context.request.scope["type"] == "http"
        ):
            raise GraphQLError(
                "subscriptions are served over the websocket at /graphql (graphql-transport-ws)",
                extensions={"code": "BAD_USER_INPUT"},
            )
        yield

    def on_stream_result(self, result: Any) -> Iterator[None]:
        # Websocket results (every subscription event) are sent before on_operation ends:
        # shape each one as it goes out, so they carry the contract's codes too.
        errors = getattr(result, "errors", None)
        if errors:
            result.errors = shape_errors(errors)
        yield


def cost_rule(settings: Settings) -> CostRule:
    return CostRule(limit=settings.max_cost, unsized_list=max(1, len(settings.job_types)))


# How to read the real size of each list of cost.REAL_SIZE_LISTS.
REAL_SIZES: dict[str, Callable[[RequestContext], Awaitable[int]]] = {
    "Query.schedules": lambda context: context.queue.schedule_count(),
    "Query.typeControls": lambda context: context.queue.allowed_type_count(),
}


def cost_limit(rule: CostRule) -> type[SchemaExtension]:
    class CostLimit(SchemaExtension):
        """Refuses a document over QUEUELOG_MAX_COST before it runs. Not a validation rule:
        the cost depends on the request's variables (and on how many schedules there are),
        and validation is cached by text."""

        async def on_execute(self) -> AsyncIterator[None]:
            context = self.execution_context
            document = context.graphql_document
            assert document is not None  # parsed before execution starts
            operation = get_operation_ast(document, context._provided_operation_name)
            if operation is not None:
                fragments = {
                    d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
                }
                real_sizes: dict[str, int] = {}
                while True:
                    try:
                        rule.check(
                            context.schema._schema, operation, fragments, context.variables or {}, real_sizes
                        )
                        break
                    except SizeNotKnown as unknown:
                        real_sizes[unknown.field] = await REAL_SIZES[unknown.field](context.context)
                    except CostTooHigh as refusal:
                        raise GraphQLError(str(refusal), extensions={"code": "BAD_USER_INPUT"}) from None
            yield

    return CostLimit


class OperationName(SchemaExtension):
    """Names an HTTP request's operation for its latency metric (Strawberry's path; compiled
    documents name theirs in compiled/http.py)."""

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context
        request = getattr(context.context, "request", None)
        if request is not None and request.scope["type"] == "http" and context.graphql_document:
            operation = get_operation_ast(context.graphql_document, context.operation_name)
            if operation is not None:
                fields = [
                    f.name.value for f in operation.selection_set.selections if isinstance(f, FieldNode)
                ]
                request.scope[OPERATION] = operation_name(context.operation_name, fields)
        yield


def schema_extensions(settings: Settings) -> list[type[SchemaExtension] | Callable[[], SchemaExtension]]:
    rules = list(document_rules(settings))
    return [
        ErrorPolicy,
        lambda: MaxTokensLimiter(max_token_count=settings.max_tokens),
        ParserCache,
        lambda: AddValidationRules(rules),
        ValidationCache,
        cost_limit(cost_rule(settings)),
        OperationName,
    ]
