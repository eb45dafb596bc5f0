"""Schema extensions: the error policy of API.md section 4 and the document limits."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

from graphql import GraphQLError
from graphql.validation.rules.max_introspection_depth_rule import MaxIntrospectionDepthRule
from strawberry.extensions import (
    AddValidationRules,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    ParserCache,
    QueryDepthLimiter,
    SchemaExtension,
    ValidationCache,
)

from queuelog.errors import QueuelogError
from queuelog.settings import Settings

log = logging.getLogger("queuelog.errors")

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
_SUGGESTION = re.compile(r"\s*Did you mean [^?]*\?", re.DOTALL)


def shape_error(error: GraphQLError) -> GraphQLError:
    """One error as the client sees it: the contract's message and code, nothing more."""
    original = error.original_error
    if isinstance(original, QueuelogError):
        message, code = original.message, original.code
    elif (error.extensions or {}).get("code") in CONTRACT_CODES:
        message, code = error.message, error.extensions["code"]
    elif error.path is None and (original is None or isinstance(original, (ValueError, TypeError))):
        # Refused before execution: syntax, validation, limits, variable coercion.
        message, code = _SUGGESTION.sub("", error.message), "BAD_USER_INPUT"
    else:
        log.error("unexpected error at %s", error.path, exc_info=original or error)
        message, code = INTERNAL_MESSAGE, "INTERNAL_SERVER_ERROR"
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
        yield
        result = self.execution_context.result
        if result is not None and result.errors:
            result.errors = shape_errors(result.errors)


def schema_extensions(settings: Settings) -> list:
    return [
        ErrorPolicy,
        lambda: MaxTokensLimiter(max_token_count=settings.max_tokens),
        ParserCache,
        ValidationCache,
        lambda: QueryDepthLimiter(max_depth=settings.max_depth),
        lambda: MaxAliasesLimiter(max_alias_count=settings.max_aliases),
        lambda: AddValidationRules([MaxIntrospectionDepthRule]),
    ]
