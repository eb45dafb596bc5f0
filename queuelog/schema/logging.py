"""What the server log says about GraphQL errors.

A refusal (every contract code but INTERNAL_SERVER_ERROR: UNAUTHENTICATED, FORBIDDEN,
BAD_USER_INPUT, PAYLOAD_TOO_LARGE, NOT_FOUND, CONFLICT) is normal traffic and the client has
already been told: it gets one DEBUG line on `queuelog.refusals`, which the default INFO
configuration does not print. An unexpected error (INTERNAL_SERVER_ERROR) is logged exactly
once, with its traceback, at ERROR on `queuelog.errors`.

`LoggingSchema` replaces Strawberry's default `Schema.process_errors`, which logs every
error with `exc_info`: a full traceback per refusal, and a second one for each unexpected
error on top of the error policy's.

Operation names, paths and messages quote the client: the log's formatters escape and cut
every such argument (queuelog/logformat.py), so they are passed here as they are.
"""

from __future__ import annotations

import logging

import strawberry
from graphql import GraphQLError
from strawberry.types import ExecutionContext

from queuelog.errors import DatabaseUnavailable
from queuelog.schema.extensions import classify

errors_log = logging.getLogger("queuelog.errors")
refusals_log = logging.getLogger("queuelog.refusals")


def log_errors(errors: list[GraphQLError], operation_name: str | None) -> bool:
    """Log every error of one result, before it is shaped for the client: both execution
    paths call this (Strawberry's through `LoggingSchema`, the compiled one in its `run`).

    True when one of them is a database outage: the answer is then 503.
    """
    operation = operation_name or "-"
    outage = False
    for error in errors:
        message, code = classify(error)
        path = ".".join(str(key) for key in error.path) if error.path else "-"
        if code != "INTERNAL_SERVER_ERROR":
            if refusals_log.isEnabledFor(logging.DEBUG):
                refusals_log.debug("refused %s (operation %s, path %s): %s", code, operation, path, message)
            continue
        if isinstance(error.original_error, DatabaseUnavailable):
            # An outage, not a bug: /healthz reports it too; one line per failed request.
            errors_log.warning("database unavailable (operation %s, path %s)", operation, path)
            outage = True
            continue
        errors_log.error(
            "unexpected error (operation %s, path %s): %s",
            operation,
            path,
            error.message,
            exc_info=error.original_error or error,
        )
    return outage


class LoggingSchema(strawberry.Schema):
    """strawberry.Schema with queuelog's logging policy in place of Strawberry's."""

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        operation_name = execution_context.operation_name if execution_context is not None else None
        if log_errors(errors, operation_name):
            context = getattr(execution_context, "context", None)
            response = getattr(context, "response", None)
            if response is not None and hasattr(response, "status_code"):
                response.status_code = 503
